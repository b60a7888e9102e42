"""Cutting long texts before a truncating encode, where the cut changes no token that truncation keeps.

    Tokenizer.__call__ (truncation from the end, single texts) --Cut(plan's max_length, cut_pattern)-->
      Cut.encode(texts, run)  each text over `limit` characters cut at the last allowed place (cut_regex) within
                              it; encoded by `run` (the backend); a cut text whose row is not full (fewer than
                              max_length tokens) is cut again four times longer, until its row is full or it is
                              whole: the rows are always those of the uncut texts

Where a text may be cut is the tokenizer's knowledge (Tokenizer._cut_pattern builds it with cut_regex): it is passed
in, and this module never imports tokenizer.py.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import TypeVar, cast

from .pieces import SEPARATORS, Row

# A call that truncates single texts (no pairs, overflow or stride) first cuts each text to about CUT_CHARS_PER_TOKEN
# characters per max_length token, at a place where the cut cannot change the tokens before it (cut_regex): the
# backend then never tokenizes (and keeps as overflow) all of a long text only to drop it. A text whose cut gives
# fewer than max_length tokens is cut again four times longer, until it is whole: the result is always the uncut one.
CUT_CHARS_PER_TOKEN = 2

_Input = TypeVar("_Input")  # one input of the backend: a text, a pair, a list of words


@functools.lru_cache(maxsize=16)
def cut_regex(added: frozenset[str], chinese: bool, punctuation: bool) -> re.Pattern[str]:
    """Tokenizer._cut_pattern: a greedy match whose end is the last place in the window a text may be cut."""

    def allowed(chars: str) -> str:
        return "".join(re.escape(c) for c in chars if c not in added)

    before = allowed(SEPARATORS)
    after = allowed(
        "".join(chr(c) for lo, hi in ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF)) for c in range(lo, hi + 1))
        if chinese
        else ""
    )
    if punctuation:  # ASCII and common CJK punctuation: BertPreTokenizer isolates every one
        after += allowed("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~，。、；：？！「」『』（）《》“”‘’…—")
    ends = [f"(?=[{before}])" if before else "", f"(?<=[{after}])" if after else ""]
    return re.compile(r"(?s).*(?:" + "|".join(e for e in ends if e) + ")") if any(ends) else re.compile("(?!)")


class Cut:
    """Tokenizer.__call__'s cutting of long texts (CUT_CHARS_PER_TOKEN): encode(texts, run) -> (texts as encoded,
    encodings), where every text cut gave a full row (max_length tokens with [CLS] / [SEP]), so its tokens are the
    first ones of the whole text and truncation keeps exactly those. Without a pattern nothing is cut."""

    def __init__(self, max_length: int | None, pattern: re.Pattern[str] | None) -> None:
        self.max_length, self.pattern = max_length, pattern
        self.limit = CUT_CHARS_PER_TOKEN * (max_length or 0) + 16  # grows when cuts keep falling short

    def encode(self, texts: list[_Input], run: Callable[[list[_Input]], list[Row]]) -> tuple[list[_Input], list[Row]]:
        if self.pattern is None:
            return texts, run(texts)
        # __call__ gives a pattern only for single texts (no pairs, no word lists): every input is a str
        originals, cut = cast("list[str]", texts), cast("list[str]", list(texts))
        full = self.max_length
        assert full is not None  # a pattern only with truncation, which always has a length
        limits: dict[int, int] = {}
        for i, text in enumerate(originals):
            if len(text) > self.limit:
                cut[i], limits[i] = self.cut(text, self.limit), self.limit
        while True:
            encodings = run(cast("list[_Input]", cut))
            short = [
                i
                for i, limit in limits.items()
                if len(cut[i]) < len(originals[i]) and sum(encodings[i].attention_mask) < full
            ]
            if not short:
                return cast("list[_Input]", cut), encodings
            if len(short) * 2 > len(limits):  # most cuts fall short (Latin text: several characters per token)
                self.limit *= 4
            for i in short:
                limits[i] *= 4
                cut[i] = self.cut(originals[i], limits[i])

    def cut(self, text: str, limit: int) -> str:
        """text[:p] for the last allowed place p in (limit / 2, limit]; else the first one after limit; else all."""
        if len(text) <= limit:
            return text
        assert self.pattern is not None  # encode cuts only with a pattern
        found = self.pattern.match(text, limit // 2, limit)
        if found and found.end() > limit // 2:
            return text[: found.end()]
        found = self.pattern.match(text, limit + 1, min(len(text), 4 * limit + 1))  # none there: look further on
        return text[: found.end()] if found and found.end() > limit else text
