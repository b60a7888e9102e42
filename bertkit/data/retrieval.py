"""Retrieval data sets: queries, a corpus, and which documents are relevant to each query.

    builtin_retrieval(split) -> RetrievalSet     builtin:peoples-daily-retrieval, split train / dev / test
    builtin_pairs(split) -> [(query, passage)]   the same split as training rows (the relevant passage is the positive)
    read_retrieval(folder) -> RetrievalSet       a BEIR-style folder (below)

builtin:peoples-daily-retrieval is an inverse cloze task (Lee et al. 2019, ORQA) on People's Daily, Jan 1998, which
needs no download: a sentence taken out of a paragraph is the query, the rest of the paragraph the one relevant
passage. Decisions:
  articles     bertkit.data.builtin.group_articles; articles (not paragraphs) go to train / dev / test by the
               SHA-1 order of builtin:peoples-daily-ner (seed 1998, 80 / 10 / 10), so no article is in two splits
  sentences    a paragraph is cut after each run of 。！？ (closing quotes and brackets stay with their sentence;
               a tail without an end mark, such as a credit "（新华社北京１月１日电）", stays with the passage)
  passages     the paragraphs of "body" kind (paragraph_kind) with at least 3 sentences and a query sentence of
               at least 8 characters, whose text and passage text were not seen before (in this split or an
               earlier one: two paragraphs that differ only in the query sentence give one passage)
  the query    among the paragraph's sentences of at least 8 characters, the one at index
               SHA-1(f"1998\\n{paragraph}") mod their count: the same on every machine; the passage is the
               paragraph without it (its other sentences in order, and the tail)
  a query is dropped when its sentence is also a sentence of another passage of the split (formulaic lines), so
  each query has exactly one relevant passage, and that passage does not contain the query
  dev          the first 500 queries in SHA-1 order (of the 519 passages); test: all of them
  corpus       the split's passages (a dev passage whose query is not among the 500 stays as a distractor); a
               query's neighbours in the corpus are the other paragraphs of its own article: hard negatives

    split   articles  passages = corpus  queries
    train      2,439      4,491            4,486   (builtin_pairs: one (query, passage) row per query)
    dev          305        519              500   (queries ~43 characters, passages ~152)
    test         305        591              591

A BEIR folder (the format of the BEIR benchmark, MTEB retrieval and sentence-transformers' examples):
    corpus.jsonl    {"_id": ..., "text": ..., "title": ...} per line; the title is optional, and a document's text
                    is "title text" (joined with a space, as BEIR and MTEB join them)
    queries.jsonl   {"_id": ..., "text": ...} per line
    qrels.tsv or qrels/NAME.tsv   a header line (query-id, corpus-id, score), then tab-separated rows; a document
                    is relevant to a query when its score is > 0 (sentence-transformers' reading); with several
                    qrels/*.tsv, pass qrels=NAME ("test", "dev", ...)
Only the queries named in the qrels with a relevant document are kept (sentence-transformers' evaluator drops
the others); the whole corpus is kept. Files are read line by line (a .gz file is gunzipped). Mistakes raise
TaskDataError naming the file and the line: duplicate ids, qrels naming unknown ids, empty texts, missing fields
or columns, no query with a relevant document.
"""

from __future__ import annotations

import functools
import gzip
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from ..text import CLOSERS, is_empty_text
from .builtin import (
    TASK_SEED,
    TASK_SPLITS,
    article_splits,
    group_articles,
    paragraph_kind,
    peoples_daily_texts,
    split_order,
)
from .corpus import jsonl_records
from .records import TaskDataError

BUILTIN_RETRIEVAL = "builtin:peoples-daily-retrieval"
MIN_SENTENCES = 3  # sentences a paragraph needs to give a (query, passage) pair
MIN_QUERY_CHARS = 8  # shorter sentences ("谢谢！") are never the query
MAX_QUERIES = {"dev": 500}  # queries kept per split (the first in SHA-1 order); a split not named keeps all
QRELS_COLUMNS = ("query-id", "corpus-id", "score")
_SENTENCE = re.compile("[^。！？]*[。！？]+[" + re.escape("".join(sorted(CLOSERS))) + "]*")


@dataclass
class RetrievalSet:
    """Queries, a corpus, and the relevant documents of each query (every query has at least one)."""

    queries: dict[str, str]  # query id -> text
    corpus: dict[str, str]  # document id -> text
    relevant: dict[str, set[str]]  # query id -> ids of its relevant documents
    source: str  # builtin:NAME/split, or the folder read


# ----- builtin:peoples-daily-retrieval ------------------------------------------------------------
def sentences(paragraph: str) -> tuple[list[str], str]:
    """A paragraph's sentences (each with its end marks and closing quotes) and the tail after the last one."""
    found = _SENTENCE.findall(paragraph)  # the matches tile the paragraph from its start
    return found, paragraph[sum(map(len, found)) :]


def inverse_cloze(paragraph: str, seed: int = TASK_SEED) -> tuple[str, str] | None:
    """(query sentence, passage without it) of a paragraph, or None when it has too few sentences to give one."""
    found, tail = sentences(paragraph)
    eligible = [i for i, sentence in enumerate(found) if len(sentence) >= MIN_QUERY_CHARS]
    if len(found) < MIN_SENTENCES or not eligible:
        return None
    pick = eligible[int(split_order(paragraph, seed), 16) % len(eligible)]
    return found[pick], "".join(found[:pick] + found[pick + 1 :]) + tail


@dataclass
class _Passage:
    id: str  # "<article>-<paragraph>": the paragraph's place in the newspaper, counted from 0
    query: str
    passage: str
    order: str  # SHA-1 order key (which queries a capped split keeps)


@functools.cache
def _builtin_passages(seed: int = TASK_SEED) -> dict[str, tuple[_Passage, ...]]:
    """Every split's passages, in newspaper order, with the queries that survive the rules above."""
    articles = group_articles(peoples_daily_texts())
    seen: set[str] = set()  # paragraph and passage texts of this and earlier splits
    out = {}
    for split, indices in article_splits(["\n".join(article) for article in articles], seed).items():
        found = []
        for a in indices:
            for p, paragraph in enumerate(articles[a]):
                pair = inverse_cloze(paragraph, seed) if paragraph_kind(paragraph) == "body" else None
                if pair is None or paragraph in seen or pair[1] in seen:
                    continue
                seen.update((paragraph, pair[1]))
                found.append(_Passage(f"{a}-{p}", *pair, split_order(paragraph, seed)))
        in_passages = {s for passage in found for s in sentences(passage.passage)[0]}
        out[split] = tuple(found), frozenset(p.id for p in found if p.query not in in_passages)
    return {split: _keep(passages, ids, MAX_QUERIES.get(split)) for split, (passages, ids) in out.items()}


def _keep(passages: tuple[_Passage, ...], ids: frozenset[str], cap: int | None) -> tuple[_Passage, ...]:
    """Passages with their query kept or not (query "" = a distractor only): the first `cap` by order."""
    ranked = sorted((p for p in passages if p.id in ids), key=lambda p: p.order)[:cap]
    kept = {p.id for p in ranked}
    return tuple(p if p.id in kept else _Passage(p.id, "", p.passage, p.order) for p in passages)


def _check_split(split: str) -> None:
    if split not in TASK_SPLITS:
        raise TaskDataError(f"{BUILTIN_RETRIEVAL}: unknown split {split!r}; choose one of: {', '.join(TASK_SPLITS)}")


def builtin_retrieval(split: str) -> RetrievalSet:
    """One split of builtin:peoples-daily-retrieval: query "q<article>-<paragraph>" has the one relevant
    document "d<article>-<paragraph>"; ids and texts are the same on every machine."""
    _check_split(split)
    passages = _builtin_passages()[split]
    with_query = [p for p in passages if p.query]
    return RetrievalSet(
        queries={f"q{p.id}": p.query for p in with_query},
        corpus={f"d{p.id}": p.passage for p in passages},
        relevant={f"q{p.id}": {f"d{p.id}"} for p in with_query},
        source=f"{BUILTIN_RETRIEVAL}/{split}",
    )


def builtin_pairs(split: str) -> list[tuple[str, str]]:
    """(query, passage) rows of one split of builtin:peoples-daily-retrieval, in newspaper order: the
    training data of an embedding model (MultipleNegativesRankingLoss takes the other rows' passages as negatives)."""
    _check_split(split)
    return [(p.query, p.passage) for p in _builtin_passages()[split] if p.query]


# ----- BEIR folders -----------------------------------------------------------------------------
def read_retrieval(folder: str | os.PathLike[str], qrels: str | None = None) -> RetrievalSet:
    """A BEIR-style folder (see the module docstring); qrels: the NAME of qrels/NAME.tsv to read."""
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        what = "no such folder" if not os.path.exists(folder) else "not a folder"
        raise TaskDataError(
            f"{folder}: {what}; a retrieval data set is a folder with corpus.jsonl, queries.jsonl, qrels"
        )
    qrels_path = _qrels_file(folder, qrels)
    pairs, qrel_lines = _read_qrels(qrels_path)
    wanted = {qid for qid, _ in qrel_lines}
    queries, query_lines = _read_texts(_data_file(folder, "queries.jsonl"), keep=wanted)
    corpus, _ = _read_texts(_data_file(folder, "corpus.jsonl"), title=True)
    for (qid, cid), number in qrel_lines.items():
        if qid not in query_lines:
            raise TaskDataError(f"{qrels_path}: line {number}: query-id {_cut(qid)} is not in queries.jsonl")
        if cid not in corpus:
            raise TaskDataError(f"{qrels_path}: line {number}: corpus-id {_cut(cid)} is not in corpus.jsonl")
    relevant: dict[str, set[str]] = {}
    for qid, cid in pairs:
        relevant.setdefault(qid, set()).add(cid)
    if not relevant:
        raise TaskDataError(f"{qrels_path}: no query has a relevant document (a row with score > 0)")
    return RetrievalSet({qid: queries[qid] for qid in relevant}, corpus, relevant, folder)


def _data_file(folder: str, name: str) -> str:
    """folder/name, or folder/name.gz; an error when neither is there."""
    for path in (os.path.join(folder, name), os.path.join(folder, name + ".gz")):
        if os.path.isfile(path):
            return path
    raise TaskDataError(f"{folder}: no {name} (nor {name}.gz); a BEIR folder has corpus.jsonl, queries.jsonl, qrels")


def _qrels_file(folder: str, name: str | None) -> str:
    """qrels/NAME.tsv when named; else qrels.tsv, or the one qrels/*.tsv."""
    sub = os.path.join(folder, "qrels")
    names = sorted(f[: -len(".tsv")] for f in os.listdir(sub) if f.endswith(".tsv")) if os.path.isdir(sub) else []
    if name is not None:
        if name not in names:
            raise TaskDataError(f"{sub}: no {name}.tsv (found: {', '.join(names) or 'none'})")
        return os.path.join(sub, name + ".tsv")
    if os.path.isfile(os.path.join(folder, "qrels.tsv")):
        return os.path.join(folder, "qrels.tsv")
    if len(names) == 1:
        return os.path.join(sub, names[0] + ".tsv")
    if names:
        raise TaskDataError(f"{sub}: holds {', '.join(names)}; pass qrels=NAME to choose one (e.g. qrels='test')")
    raise TaskDataError(f"{folder}: no qrels.tsv and no qrels/*.tsv; the relevance judgements are needed")


def _numbered_lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of a UTF-8 text file, one at a time (gzip undone, a BOM and line ends removed);
    bytes that are not UTF-8 or a file that cannot be read raise TaskDataError naming the line."""
    number = 0
    try:
        with open(path, "rb") as raw:
            stream: BinaryIO | gzip.GzipFile = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw
            for number, data in enumerate(stream, 1):
                try:
                    line = data.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise TaskDataError(
                        f"{path}: line {number}: not UTF-8 (byte {data[e.start]:#04x}); convert the file to UTF-8, "
                        "e.g. iconv -f GB18030 -t UTF-8"
                    ) from None
                yield number, (line.removeprefix("\ufeff") if number == 1 else line).rstrip("\r\n")
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise TaskDataError(f"{path}: line {number + 1}: not a valid gzip file ({e})") from None
    except OSError as e:
        raise TaskDataError(f"{path}: cannot read ({e.strerror or e})") from None


def _read_qrels(path: str) -> tuple[list[tuple[str, str]], dict[tuple[str, str], int]]:
    """(query id, relevant document id) pairs (score > 0), and the first line of every (query id, document id)."""
    pairs: list[tuple[str, str]] = []
    first: dict[tuple[str, str], int] = {}
    columns: list[int] | None = None
    for number, line in _numbered_lines(path):
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split("\t")]
        if columns is None:
            columns = _qrels_header(path, number, cells)
            continue
        if len(cells) <= max(columns):
            raise TaskDataError(
                f"{path}: line {number}: {len(cells)} tab-separated cells, the header names {max(columns) + 1}"
            )
        qid, cid, score = (cells[i] for i in columns)
        try:
            value = float(score)
        except ValueError:
            raise TaskDataError(f"{path}: line {number}: score {_cut(score)} is not a number") from None
        if not qid or not cid:
            raise TaskDataError(f"{path}: line {number}: an empty query-id or corpus-id")
        first.setdefault((qid, cid), number)
        if value > 0:
            pairs.append((qid, cid))
    if columns is None:
        raise TaskDataError(f"{path}: the file is empty; it needs a header line ({', '.join(QRELS_COLUMNS)}) and rows")
    return pairs, first


def _qrels_header(path: str, number: int, cells: list[str]) -> list[int]:
    """The positions of query-id, corpus-id and score in the header line."""
    missing = [name for name in QRELS_COLUMNS if name not in cells]
    if missing:
        shown = ", ".join(_cut(cell) for cell in cells[:8])
        raise TaskDataError(
            f"{path}: line {number}: the header has no {', '.join(missing)} column (found: {shown}); the first "
            f"line of a qrels file names the tab-separated columns {', '.join(QRELS_COLUMNS)}"
        )
    return [cells.index(name) for name in QRELS_COLUMNS]


def _read_texts(path: str, keep: set[str] | None = None, title: bool = False) -> tuple[dict[str, str], dict[str, int]]:
    """id -> text of a JSON Lines file (only ids in `keep`, when given), and the line of every id in the file."""
    texts: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, record in jsonl_records(path, _numbered_lines(path), TaskDataError):
        where = f"{path}: line {number}"
        key = _field(where, record, "_id", (str, int))
        if key in lines:
            raise TaskDataError(f"{where}: _id {_cut(key)} again (first on line {lines[key]}); ids must be unique")
        lines[key] = number
        text = _field(where, record, "text", (str,))
        if title and record.get("title"):
            text = f"{_field(where, record, 'title', (str,))} {text}"
        if is_empty_text(text):
            raise TaskDataError(f"{where}: empty text (_id {_cut(key)}); remove the line or give it a text")
        if keep is None or key in keep:
            texts[key] = text
    return texts, lines


def _field(where: str, record: dict[str, object], name: str, kinds: tuple[type, ...]) -> str:
    """A record's field as a string (an int id is read as its digits)."""
    if name not in record:
        fields = ", ".join(map(repr, list(record)[:8])) or "none"
        raise TaskDataError(f"{where}: no {name!r} field (fields: {fields})")
    value = record[name]
    if not isinstance(value, kinds) or isinstance(value, bool):
        raise TaskDataError(f"{where}: field {name!r} holds a {type(value).__name__}, not a string")
    return str(value)


def _cut(value: str, limit: int = 40) -> str:
    """A user's value for an error message, cut short."""
    return repr(value[:limit] + "..." if len(value) > limit else value)
