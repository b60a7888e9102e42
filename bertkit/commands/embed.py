"""`bertkit embed`: sentence embeddings of texts or a file, written as .npy or JSON lines.

Every input has its row, in order, as in `bertkit predict`: --file reads a text file as predict does
(evaluation.read_input_lines: a line per input, a blank line too). An empty input (text.is_empty_text, by the
model's tokenizer) keeps its row without a vector: a NaN row in .npy, {"index": i, "embedding": null, "error":
"empty input"} in .jsonl, where predict writes its "empty input" row; the summary on stderr names them.
"""

from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass

import numpy as np

from ..data import records
from ..devices import Precision, device_opt, precision_opt
from ..embed import Encoder
from ..engines import DEFAULT_ENGINE, ENGINE_HELP, Engine, announce
from ..errors import BertkitError
from ..evaluation import file_lines_help, read_input_lines
from ..files import atomic_write, atomic_write_text, check_output, to_json
from ..options import opt, parse
from ..pooling import POOLING_MODES
from ..quantize import CHOICES as QUANTIZE_CHOICES
from ..quantize import FLAG_HELP as QUANTIZE_HELP
from ..tasks import EMPTY_INPUT
from ..text import is_empty_text

OUTPUT_SUFFIXES = (".npy", ".jsonl")
DATA_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json")  # (+ .gz) --file rows read as `bertkit predict --file` reads them


@dataclass
class EmbedConfig:
    """Sentence embeddings of texts (arguments, or --file: a text per line, or a .csv / .tsv / .jsonl column): .npy
    or JSON lines."""

    model: str = opt(
        "", "a model folder: sentence-transformers, plain BERT, or bertkit finetune's --out", required=True
    )
    texts: list[str] = opt(list, "texts, one per argument", positional=True, nargs="*")
    file: str | None = opt(
        None,
        "UTF-8 text: "
        + file_lines_help('.npy: a NaN row; .jsonl: "embedding": null, "error": "empty input"')
        + ", as in `bertkit predict --file`; or .csv / .tsv (a header row) or .jsonl / .json (an object per line), "
        "also .gz: the --text-field of each row, as `bertkit predict --file` reads them",
    )
    text_field: str = opt("text", "--file .csv / .tsv / .jsonl: the column / field with the texts")
    output: str = opt(
        "",
        'where to write: .npy (an (n, H) float32 array) or .jsonl ({"index": i, "embedding": [...]} per line)',
        required=True,
    )
    batch_size: int = opt(32, "texts per forward pass")
    pooling: str | None = opt(
        None, "default: from the folder (1_Pooling/config.json), else mean", choices=list(POOLING_MODES)
    )
    normalize: bool | None = opt(
        None, "L2-normalize each vector; None: as the folder says (a sentence-transformers Normalize module), else not"
    )  # None: the folder decides
    quantize: str | None = opt(None, QUANTIZE_HELP, choices=QUANTIZE_CHOICES)
    engine: Engine = opt(DEFAULT_ENGINE, ENGINE_HELP)
    device: str = device_opt()
    precision: Precision = precision_opt()

    def problem(self) -> str | None:
        if bool(self.texts) == bool(self.file):
            return "pass texts as arguments or --file FILE (one of them)"
        if not self.output.endswith(OUTPUT_SUFFIXES):
            return f"argument --output: {self.output} must end in .npy or .jsonl"
        if self.batch_size < 1:
            return f"argument --batch-size: must be a positive integer, got {self.batch_size}"
        return None


def read_texts(path: str, text_field: str) -> list[tuple[int, str]]:
    """(line number, text) of --file: the `text_field` of each row of a .csv / .tsv / .jsonl / .json file (the
    records `bertkit predict --file` reads; a blank line is an empty text), else every line (read_input_lines)."""
    if not os.path.exists(path):
        raise BertkitError(f"--file {path}: no such file")
    if (path[:-3] if path.endswith(".gz") else path).lower().endswith(DATA_SUFFIXES):
        fmt = records.file_format(path, "embed", ("csv", "tsv", "jsonl"))
        table = records.table(path, records.file_lines(path), fmt, keep_empty=True)
        table.require(path, text_field, "text", "text_field")
        rows = [(n, _text(path, n, r, text_field)) for n, r in table.records]
    else:
        rows = list(enumerate(read_input_lines(path), 1))
    if not rows:
        raise BertkitError(f"--file {path}: the file is empty: there is nothing to embed")
    return rows


def _text(path: str, number: int, record: records.Record | None, text_field: str) -> str:
    """The text of a row as predict's classify reader keeps it: "" for a blank line or an empty text (an empty
    input, with its row), else the field's string (a row without the field, or not a string: an error)."""
    value = None if record is None else record.get(text_field)
    if record is None or (isinstance(value, str) and is_empty_text(value)):
        return ""
    return records.string(path, number, record, text_field, "text_field", required=True)


def embed_rows(encoder: Encoder, texts: list[str], batch_size: int) -> tuple[np.ndarray, list[int]]:
    """(n, H) float32 vectors of `texts` in order, and the indexes of the empty ones (text.is_empty_text by the
    encoder's tokenizer), whose rows are NaN: every input keeps its row, as in `bertkit predict`."""
    empty = [i for i, text in enumerate(texts) if is_empty_text(text, encoder.tokenizer)]
    skip = set(empty)
    kept = [i for i in range(len(texts)) if i not in skip]
    vectors = np.full((len(texts), encoder.model.config.hidden_size), np.nan, dtype=np.float32)
    if kept:
        vectors[kept] = encoder.encode([texts[i] for i in kept], batch_size)
    return vectors, empty


def write_vectors(path: str, vectors: np.ndarray, empty: list[int]) -> None:
    """.npy: the (n, H) array; .jsonl: {"index": i, "embedding": [...]} per row, an empty input's with
    "embedding": null and "error": "empty input" (predict's empty row). Atomic: whole or not at all."""
    if path.endswith(".npy"):
        buffer = io.BytesIO()
        np.save(buffer, vectors)

        def write(tmp: str) -> None:
            with open(tmp, "wb") as fh:
                fh.write(buffer.getvalue())

        atomic_write(path, write)
        return
    skip = set(empty)
    rows = (
        {"index": i, "embedding": None, "error": EMPTY_INPUT} if i in skip else {"index": i, "embedding": v.tolist()}
        for i, v in enumerate(vectors)
    )
    atomic_write_text(path, "".join(to_json(row) + "\n" for row in rows))


def empty_note(empty: list[int], where: list[str], output: str) -> str:
    """The summary's words on the empty inputs ("" when none): how many, which (the first five: "--file line 2,
    line 4" or "text 1, text 3"), what their rows hold."""
    if not empty:
        return ""
    named = ", ".join(where[i] for i in empty[:5]) + (", ..." if len(empty) > 5 else "")
    got = "NaN rows" if output.endswith(".npy") else '"embedding": null'
    return f"; {len(empty)} empty input(s) ({'--file ' if where[0].startswith('line') else ''}{named}) kept as {got}"


def main(argv: list[str]) -> int:
    cfg = parse(EmbedConfig, argv, prog="bertkit embed")
    check_output(cfg.output, "--output", [cfg.file])
    if cfg.file:
        lines = read_texts(cfg.file, cfg.text_field)
        texts, where = [text for _, text in lines], [f"line {n}" for n, _ in lines]
    else:
        texts, where = cfg.texts, [f"text {i + 1}" for i in range(len(cfg.texts))]
    engine = announce("embed", cfg.engine, cfg.quantize, cfg.device, cfg.precision)
    encoder = Encoder.from_pretrained(
        cfg.model,
        pooling=cfg.pooling,
        normalize=cfg.normalize,
        quantize=cfg.quantize,
        engine=engine,
        device=cfg.device,
        precision=cfg.precision,
    )
    vectors, empty = embed_rows(encoder, texts, cfg.batch_size)
    write_vectors(cfg.output, vectors, empty)
    print(
        f"embedded {len(texts) - len(empty)} text(s) -> {vectors.shape[1]}-dim vectors ({encoder.pooling.mode} "
        f"pooling{', normalized' if encoder.pooling.normalize else ''}; {encoder.pooling.source}) -> {cfg.output}"
        + empty_note(empty, where, cfg.output),
        file=sys.stderr,
    )
    return 0
