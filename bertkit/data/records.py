"""Task data files -> records: what every task's reader shares (formats, tables, fields, errors).

    file (.csv .tsv .jsonl .json .conll .bio .iob, any + .gz) --file_format / file_lines-->
    lines --table--> Table: (line number, record) per row, the CSV header's columns
    -> each task's reader (bertkit/tasks/<task>.py) turns records into its examples

Decisions, in one place:
- CSV uses the csv module (quotes, multi-line cells); TSV is plain: cells split at tabs, no quoting
  (as GLUE's .tsv files need: their texts hold unbalanced quotes).
- keep_empty=True keeps a blank line after the header as a None record (classify prediction data:
  one row per input line, in order).
- Field and column names are the readers' *_field arguments (flags --text-field, --label-field, ...
  of `bertkit finetune` / `evaluate` / `predict`); errors name both forms.
Mistakes raise TaskDataError naming the file and the line (CSV: the line the record starts on).
"""

from __future__ import annotations

import csv
import json
import os
import sys
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from ..errors import BertkitError, BertkitWarning
from ..text import is_empty_text
from .corpus import CorpusError, jsonl_records, read_lines

if TYPE_CHECKING:
    from types import FrameType

MULTI_LABEL_SEP = "|"  # "a|b": a multi-label cell (classify), or the choices of a CSV cell (choice)
_SUFFIXES = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".conll": "conll",
    ".bio": "conll",
    ".iob": "conll",
}
_MAX_SHOWN = 8  # field names listed in an error
Record = dict[str, Any]  # one record: a JSON object, a CSV row by column, a CoNLL sentence (tokens, tags, lines)


class TaskDataError(BertkitError, ValueError):
    """Task data that cannot be read as asked (missing file or field, bad line, bad label, ...)."""


def file_format(path: str, task: str, formats: tuple[str, ...], also: str = "") -> str:
    """The format of a task data file from its suffix (.gz undone); an error names what the task reads."""
    if not os.path.exists(path):
        raise TaskDataError(f"{path}: no such file")
    if os.path.isdir(path):
        raise TaskDataError(f"{path}: is a folder; task data is one file (one per split)")
    base = path[:-3] if path.endswith(".gz") else path
    suffix = os.path.splitext(base)[1].lower()
    fmt = _SUFFIXES.get(suffix)
    if fmt not in formats:
        names = sorted(s for s, f in _SUFFIXES.items() if f in formats)
        raise TaskDataError(
            f"{path}: cannot read {suffix or 'a file without suffix'} for the {task} task; "
            f"use {', '.join(names)}{also}, or those + .gz"
        )
    return fmt


def file_lines(path: str) -> list[str]:
    """The lines of a task data file; an empty file is an error."""
    try:
        lines = read_lines(path)  # the corpus reader: gzip, UTF-8 with its errors naming file and line
    except CorpusError as e:
        raise TaskDataError(str(e)) from None
    if not any(line.strip() for line in lines):
        raise TaskDataError(f"{path}: the file is empty")
    return lines


class Table:
    """Records of a CSV / TSV / JSONL / CoNLL file: (line number, record) and the CSV header, if any.
    A record is None for a blank line that is kept (keep_empty)."""

    def __init__(
        self, fmt: str, records: Sequence[tuple[int, Record | None]], columns: list[str] | None = None
    ) -> None:
        self.fmt, self.records, self.columns = fmt, records, columns

    def has(self, field: str) -> bool:
        if self.columns is not None:
            return field in self.columns
        return any(isinstance(r, dict) and field in r for _, r in self.records)

    def require(self, path: str, field: str, what: str, kwarg: str) -> None:
        """A CSV column must be in the header (JSONL fields are checked per line)."""
        if self.columns is not None and field not in self.columns:
            more = ", ..." if len(self.columns) > _MAX_SHOWN else ""
            shown = ", ".join(map(repr, self.columns[:_MAX_SHOWN])) + more
            raise TaskDataError(
                f"{path}: line 1: no {what} column {field!r} (columns: {shown}); "
                f"pass {option(kwarg)} to choose the column"
            )


def table(path: str, lines: list[str], fmt: str, keep_empty: bool = False) -> Table:
    if fmt == "jsonl":
        records: list[tuple[int, Record | None]] = list(jsonl_records(path, lines, TaskDataError))
        if keep_empty:
            blanks: list[tuple[int, Record | None]] = [(n, None) for n, line in enumerate(lines, 1) if not line.strip()]
            records = sorted(records + blanks, key=lambda r: r[0])
        return Table(fmt, records)
    if fmt == "conll":
        return Table(fmt, _conll(path, lines))
    return _csv(path, lines, fmt, keep_empty)


def _blank(row: list[str]) -> bool:
    return not any(cell.strip() for cell in row)


def _csv(path: str, lines: list[str], fmt: str, keep_empty: bool = False) -> Table:
    """Rows after the header; blank ones are skipped, or kept as None records with keep_empty."""
    if fmt == "tsv":
        rows = [(n, line.split("\t")) for n, line in enumerate(lines, 1) if line.strip() or keep_empty]
    else:
        rows, reader = [], csv.reader(line + "\n" for line in lines)
        try:
            while True:
                start = reader.line_num + 1
                row = next(reader, None)
                if row is None:
                    break
                while start <= len(lines) and not lines[start - 1].strip():
                    start += 1  # blank lines before the record
                if not _blank(row) or keep_empty:
                    rows.append((start, row))
        except csv.Error as e:
            raise TaskDataError(f"{path}: line {reader.line_num}: not valid CSV ({e})") from None
    rows = rows[next(i for i, (_, row) in enumerate(rows) if not _blank(row)) :]  # blank lines before the header
    header_line, header = rows[0]
    columns = [c.strip() for c in header]
    duplicates = sorted({c for c in columns if columns.count(c) > 1})
    if duplicates:
        raise TaskDataError(
            f"{path}: line {header_line}: the header names {', '.join(map(repr, duplicates))} more than once"
        )
    records: list[tuple[int, Record | None]] = []
    for number, row in rows[1:]:
        if _blank(row):
            records.append((number, None))
            continue
        if len(row) != len(columns):
            sep = "tabs" if fmt == "tsv" else "commas (quote cells that hold one)"
            raise TaskDataError(
                f"{path}: line {number}: {len(row)} cells, but the header (line {header_line}) has "
                f"{len(columns)} columns; check the {sep}"
            )
        records.append((number, dict(zip(columns, row))))
    if not records:
        raise TaskDataError(f"{path}: no rows after the header (line {header_line})")
    return Table(fmt, records, columns)


def _conll(path: str, lines: list[str]) -> list[tuple[int, Record]]:
    """CoNLL: one token per line, its tag in the last column; blank lines end sentences."""
    records: list[tuple[int, Record]] = []
    tokens: list[str] = []
    tags: list[str | None] = []
    lines_of: list[int] = []
    start = 0
    for number, line in enumerate(lines + [""], 1):
        cells = line.split()
        if cells and cells[0] == "-DOCSTART-":
            cells = []
        if not cells:
            if tokens:
                records.append(
                    (
                        start,
                        {
                            "tokens": tokens,
                            "tags": tags if any(t is not None for t in tags) else None,
                            "lines": lines_of,
                        },
                    )
                )
            tokens, tags = [], []
            continue
        if not tokens:
            start, lines_of = number, []
        tokens.append(cells[0])
        tags.append(cells[-1] if len(cells) > 1 else None)
        lines_of.append(number)
    return records


# ----- helpers -----------------------------------------------------------------------------------
# The read_task arguments that `bertkit finetune` / `bertkit predict` take as flags; a message names both forms.
def option(kwarg: str) -> str:
    """How to choose a field: "--label-field NAME (Python: label_field=)" (every task's *_field is a flag)."""
    return f"--{kwarg.replace('_', '-')} NAME (Python: {kwarg}=)"


def at(path: str, number: int | None) -> str:
    return path if number is None else f"{path}: line {number}"


def get(path: str, number: int | None, record: Record, field: str, kwarg: str) -> Any:
    """The value of a record's field (any JSON value but null); a missing field or a null is an error."""
    if field not in record:
        keys = ", ".join(map(repr, list(record)[:_MAX_SHOWN])) or "none"
        raise TaskDataError(
            f"{at(path, number)}: no {field!r} field (fields: {keys}); pass {option(kwarg)} to choose the field"
        )
    value = record[field]
    if value is None:
        raise TaskDataError(f"{at(path, number)}: field {field!r} is null")
    return value


@overload
def string(
    path: str,
    number: int | None,
    record: Record,
    field: str,
    kwarg: str,
    *,
    required: Literal[True],
    strip: bool = True,
) -> str: ...
@overload
def string(
    path: str, number: int | None, record: Record, field: str, kwarg: str, *, required: bool, strip: bool = True
) -> str | None: ...
def string(
    path: str, number: int | None, record: Record, field: str, kwarg: str, *, required: bool, strip: bool = True
) -> str | None:
    """A text field, stripped (a QA context is kept as it is: answer offsets count into it)."""
    if not required and record.get(field) is None:
        return None
    value = get(path, number, record, field, kwarg)
    if not isinstance(value, str):
        raise TaskDataError(f"{at(path, number)}: field {field!r} holds {show(value)}, not a string")
    if required and is_empty_text(value):  # "", whitespace, or only characters the tokenizer deletes
        raise TaskDataError(f"{at(path, number)}: field {field!r} is empty (no character the tokenizer keeps)")
    return value.strip() if strip else value


def show(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list, int, float, bool)) else repr(value)
    return f"a {type(value).__name__} ({text[:40]}{'...' if len(text) > 40 else ''})"


def warn(message: str) -> None:
    """Warn at the caller's line (the first frame outside the task readers: this module and bertkit.tasks)."""
    frame: FrameType | None = sys._getframe(0)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith((__name__, "bertkit.tasks")):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, BertkitWarning, stacklevel=level)
