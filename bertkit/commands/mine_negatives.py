"""`bertkit mine-negatives`: hard negatives for (anchor, positive) pairs, found as sentence-transformers'
mine_hard_negatives finds them (bertkit/mining.py), written as JSON lines `bertkit finetune` reads.

    bertkit mine-negatives --model DIR --data pairs.jsonl --out mined.jsonl --relative-margin 0.05
    bertkit mine-negatives --model DIR --data pairs.csv --corpus passages.txt --out pairs.jsonl \\
        --output-format labeled-pair --num-negatives 5                          # for `finetune --task rerank`

--data: pairs read as the trainer reads data (data.pairs.read_rows: .jsonl .json .csv .tsv, + .gz, .parquet): the
  first text column is the anchor, the second the positive; further text columns and a label column are not used.
--corpus: more candidate texts (the positives always are candidates): a .txt file, a text per line (blank lines
  are left out), or a .jsonl / .json / .csv / .tsv / .parquet file, its first text column.
--out: a JSON object per line with the columns of --output-format (mining.py), the anchor and positive columns
  named as in --data: triplet and n-tuple rows are `finetune --task embed` data, labeled-pair rows `--task rerank`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass

from ..data.corpus import read_lines
from ..data.pairs import TextRows, read_rows
from ..devices import Precision, device_opt, precision_opt
from ..embed import Encoder
from ..engines import DEFAULT_ENGINE, ENGINE_HELP, Engine, announce
from ..errors import InputError
from ..files import atomic_write_text, check_output, to_json
from ..mining import MineSettings, mine_hard_negatives
from ..options import opt, parse
from ..text import is_empty_text
from ..tokenizer import Tokenizer

TEXT_SUFFIXES = (".txt", ".txt.gz")  # --corpus files read a text per line; any other is read as --data is


@dataclass
class MineNegativesConfig(MineSettings):
    """Hard negatives for (anchor, positive) pairs: rows with negatives, as JSON lines."""

    model: str = opt(
        "", "a sentence-embedding model folder (sentence-transformers, or bertkit finetune's --out)", required=True
    )
    data: str = opt(
        "",
        "(anchor, positive) pairs: .jsonl .json .csv .tsv (+ .gz) or .parquet; the first two text columns",
        required=True,
    )
    corpus: str | None = opt(
        None,
        "more candidate texts: .txt (a text per line) or a .jsonl / .csv / .tsv / .parquet file's first text column",
    )
    out: str = opt("", "where to write the rows: a .jsonl file", required=True)
    engine: Engine = opt(DEFAULT_ENGINE, ENGINE_HELP)
    device: str = device_opt()
    precision: Precision = precision_opt()

    def problem(self) -> str | None:
        if not self.out.endswith(".jsonl"):
            return f"argument --out: {self.out} must end in .jsonl"
        return super().problem()


def read_pairs(path: str) -> TextRows:
    """The rows of --data, with at least two text columns (read_rows refuses a missing or empty text)."""
    rows = read_rows(path)
    if len(rows.columns) < 2:
        raise InputError(
            f"{path}: only one text column ({rows.columns[0][:40]!r}); mining needs (anchor, positive) pairs: "
            "a second text column with each anchor's positive"
        )
    return rows


def check_texts(rows: TextRows, tokenizer: Tokenizer) -> None:
    """Every anchor and positive has a token for the model (a text of characters its tokenizer deletes has none)."""
    for i, texts in enumerate(rows.texts):
        for column, text in zip(rows.columns[:2], texts):
            if is_empty_text(text, tokenizer):
                raise InputError(
                    f"{rows.where(i)}: column {column[:40]!r} has no character the model's tokenizer keeps"
                )


def read_corpus(path: str) -> list[str]:
    """The texts of --corpus: a .txt file's non-blank lines, or the first text column of a data file."""
    if not os.path.exists(path):
        raise InputError(f"--corpus {path}: no such file")
    if path.endswith(TEXT_SUFFIXES):
        texts = [line for line in read_lines(path) if not is_empty_text(line)]
    else:
        texts = [row[0] for row in read_rows(path).texts]
    if not texts:
        raise InputError(f"--corpus {path}: the file holds no text; give a text per line, or leave --corpus out")
    return texts


def main(argv: list[str]) -> int:
    cfg = parse(MineNegativesConfig, argv, prog="bertkit mine-negatives")
    check_output(cfg.out, "--out", [cfg.data, cfg.corpus])
    rows = read_pairs(cfg.data)  # the files first: a mistake in them is found before the model loads
    corpus = read_corpus(cfg.corpus) if cfg.corpus else None
    engine = announce("mine-negatives", cfg.engine, None, cfg.device, cfg.precision)
    encoder = Encoder.from_pretrained(cfg.model, device=cfg.device, precision=cfg.precision, engine=engine)
    check_texts(rows, encoder.tokenizer)
    unused = rows.columns[2:] + ([rows.label_column] if rows.label_column else [])
    if unused:
        print(f"mine-negatives: the columns {', '.join(unused)} of {cfg.data} are not used", file=sys.stderr)
    settings = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(MineSettings)}
    mined = mine_hard_negatives(
        [texts[0] for texts in rows.texts],
        [texts[1] for texts in rows.texts],
        encoder,
        corpus,
        columns=(rows.columns[0], rows.columns[1]),
        log=lambda line: print(f"mine-negatives: {line}", file=sys.stderr),
        **settings,
    )
    atomic_write_text(cfg.out, "".join(to_json(row) + "\n" for row in mined))
    fmt = "n-tuple" if cfg.include_positives else cfg.output_format  # mining's rule: the positives keep their rank
    print(
        f"mined {len(mined)} {fmt} row(s) from {len(rows)} pair(s) of {cfg.data} -> {cfg.out}",
        file=sys.stderr,
    )
    return 0
