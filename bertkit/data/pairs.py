"""Rows of texts for training embedding models and rerankers, read as sentence-transformers' trainer reads a data set.

    file (.jsonl .json .csv .tsv, any + .gz; .parquet) --read_rows--> TextRows
      columns named label / labels / score / scores: the label (a number per row)
      every other column: an input text, by order (first: the anchor or query; second: the positive, the
      other text of a scored pair, or the document; further ones: hard negatives)

The names of the input columns do not matter, their order does (the trainer's rule): (anchor, positive,
negative_1, negative_2) and (query, answer, n1, n2) are the same data. Every row has every column; a missing or
null cell, a text with no character the tokenizer keeps, or a label that is not a number is an error naming the
file and the line (Parquet: the row).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..text import is_empty_text
from .records import TaskDataError, file_format, file_lines, show, table

LABEL_COLUMNS = ("label", "labels", "score", "scores")
FORMATS = ("jsonl", "csv", "tsv")
_PARQUET = ".parquet"


@dataclass
class TextRows:
    """The rows of a file: its input columns in order, one text per input column per row, and the labels."""

    source: str  # the file (or builtin:NAME) the rows came from
    columns: list[str]  # the input columns' names, in order
    texts: list[list[str]]  # per row: its texts, one per input column
    labels: list[float] | None  # per row: its label (None: the data has no label column)
    lines: list[int]  # per row: its line in the file (Parquet: its row, from 1)
    label_column: str | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def where(self, row: int) -> str:
        """Where row `row` (an index into texts) is, for an error: "pairs.jsonl: line 7"."""
        return f"{self.source}: {'row' if self.source.endswith(_PARQUET) else 'line'} {self.lines[row]}"


def read_rows(path: str | os.PathLike[str]) -> TextRows:
    """The rows of a JSONL / CSV / TSV / Parquet file (the module docstring says how columns are matched)."""
    path = os.fspath(path)
    if path.endswith(_PARQUET):
        if not os.path.isfile(path):
            raise TaskDataError(f"{path}: no such file")
        return rows_of(path, _parquet_records(path), "row")
    fmt = file_format(path, "embed / rerank", FORMATS, ", .parquet")
    return rows_of(path, iter(table(path, file_lines(path), fmt).records), "line")


def rows_of(path: str, records: Iterator[tuple[int, dict[str, Any] | None]], unit: str) -> TextRows:
    """Records (line, record) -> TextRows; the first record's keys are the columns every row must have."""
    columns: list[str] | None = None
    label: str | None = None
    texts: list[list[str]] = []
    labels: list[float] = []
    lines: list[int] = []
    for number, record in records:
        if record is None:  # a blank CSV row
            continue
        where = f"{path}: {unit} {number}"
        if columns is None:
            columns, label = _columns(where, list(record))
        missing = [c for c in [*columns, *([label] if label else [])] if record.get(c) is None]
        if missing:
            raise TaskDataError(
                f"{where}: no {missing[0]!r} (or null); every row needs the columns of the first: "
                f"{', '.join(map(repr, columns + ([label] if label else [])))}"
            )
        texts.append([_text(where, c, record[c]) for c in columns])
        if label is not None:
            labels.append(_label(where, label, record[label]))
        lines.append(number)
    if columns is None:
        raise TaskDataError(f"{path}: no rows")
    return TextRows(path, columns, texts, labels if label is not None else None, lines, label)


def _columns(where: str, keys: list[str]) -> tuple[list[str], str | None]:
    """The input columns (by order) and the label column of the first record's keys."""
    found = [k for k in keys if k in LABEL_COLUMNS]
    if len(found) > 1:
        raise TaskDataError(f"{where}: more than one label column ({', '.join(found)}); keep one")
    inputs = [k for k in keys if k not in LABEL_COLUMNS]
    if not inputs:
        raise TaskDataError(f"{where}: no text column, only {', '.join(found)}")
    return inputs, found[0] if found else None


def _text(where: str, column: str, value: object) -> str:
    if not isinstance(value, str):
        raise TaskDataError(f"{where}: column {column!r} holds {show(value)}, not a text")
    if is_empty_text(value):
        raise TaskDataError(f"{where}: column {column!r} is empty (no character the tokenizer keeps)")
    return value


def _label(where: str, column: str, value: object) -> float:
    """A label: a number (CSV / TSV cells are read as numbers); true / false are 1 / 0."""
    if isinstance(value, bool):
        return float(value)
    number: float | None = None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    if number is None or not math.isfinite(number):
        raise TaskDataError(f"{where}: label column {column!r} holds {show(value)}, not a finite number")
    return number


def _parquet_records(path: str) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """(row number from 1, row) of a Parquet file, one record batch at a time."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise TaskDataError(f"{path}: reading Parquet needs pyarrow: pip install 'bertkit[parquet]'") from None
    try:
        parquet = pq.ParquetFile(path)
    except Exception as e:  # pyarrow's errors for a damaged or non-Parquet file have no common base
        raise TaskDataError(f"{path}: not a readable Parquet file ({str(e)[:200]})") from None
    number = 0
    for batch in parquet.iter_batches():
        for record in batch.to_pylist():
            number += 1
            yield number, record
