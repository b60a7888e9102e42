"""`bertkit embed`: sentence embeddings of texts or a file, written as .npy or JSON lines."""

from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass

import numpy as np

from ..data import records
from ..data.corpus import read_lines
from ..embed import EmptyText, Encoder
from ..engines import ENGINE_HELP, Engine
from ..errors import BertkitError
from ..files import atomic_write, atomic_write_text, check_output, to_json
from ..options import opt, parse
from ..pooling import POOLING_MODES
from ..quantize import CHOICES as QUANTIZE_CHOICES
from ..quantize import FLAG_HELP as QUANTIZE_HELP
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
        "one text per line (UTF-8; no empty lines); .csv / .tsv (a header row) or .jsonl / "
        ".json (an object per line), also .gz: the --text-field of each row, as `bertkit "
        "predict --file` reads them",
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
    engine: Engine = opt("torch", ENGINE_HELP)

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
    records `bertkit predict --file` reads; a blank line is an empty text), else every line."""
    if not os.path.exists(path):
        raise BertkitError(f"--file {path}: no such file")
    if (path[:-3] if path.endswith(".gz") else path).lower().endswith(DATA_SUFFIXES):
        fmt = records.file_format(path, "embed", ("csv", "tsv", "jsonl"))
        table = records.table(path, records.file_lines(path), fmt, keep_empty=True)
        table.require(path, text_field, "text", "text_field")
        rows = [
            (n, "" if r is None else records.string(path, n, r, text_field, "text_field", required=True))
            for n, r in table.records
        ]
    else:
        rows = list(enumerate(read_lines(path), 1))
    if not rows:
        raise BertkitError(f"--file {path}: the file is empty: there is nothing to embed")
    return rows


def main(argv: list[str]) -> int:
    cfg = parse(EmbedConfig, argv, prog="bertkit embed")
    check_output(cfg.output, "--output", [cfg.file])
    if cfg.file:
        lines = read_texts(cfg.file, cfg.text_field)
        texts, where = [text for _, text in lines], [f"--file {cfg.file}: line {n}" for n, _ in lines]
    else:
        texts, where = cfg.texts, [f"text {i + 1}" for i in range(len(cfg.texts))]
    for i, text in enumerate(texts):  # before the model loads
        if is_empty_text(text):
            raise EmptyText(i, where[i])
    encoder = Encoder.from_pretrained(
        cfg.model, pooling=cfg.pooling, normalize=cfg.normalize, quantize=cfg.quantize, engine=cfg.engine
    )
    try:
        vectors = encoder.encode(texts, cfg.batch_size)
    except EmptyText as e:  # by the tokenizer's own normaliser: e.g. only accents, which an uncased one drops
        raise EmptyText(e.index, where[e.index]) from None
    if cfg.output.endswith(".npy"):
        buffer = io.BytesIO()
        np.save(buffer, vectors)

        def write(tmp: str) -> None:
            with open(tmp, "wb") as fh:
                fh.write(buffer.getvalue())

        atomic_write(cfg.output, write)
    else:
        atomic_write_text(
            cfg.output, "".join(to_json({"index": i, "embedding": v.tolist()}) + "\n" for i, v in enumerate(vectors))
        )
    print(
        f"embedded {len(texts)} text(s) -> {vectors.shape[1]}-dim vectors ({encoder.pooling.mode} pooling"
        f"{', normalized' if encoder.pooling.normalize else ''}; {encoder.pooling.source}) -> {cfg.output}",
        file=sys.stderr,
    )
    return 0
