"""Facts about written text that several modules need: which characters are CJK, which marks end a
sentence, how wide a string is in a terminal, which text is empty to BERT. One table each; nothing here
imports bertkit.

    code-point ranges (lo, hi), both ends included
      CJK_IDEOGRAPHS     BERT's "Chinese character" blocks: the tokenizer makes each its own token
      CJK_PUNCTUATION    CJK symbols and punctuation, full-width forms, the dashes, quotes and
                         ellipsis Chinese text uses (— “ ” ‘ ’ …)
      WIDE_TEXT          = CJK_IDEOGRAPHS + CJK_PUNCTUATION: decoding puts no space next to these
      is_cjk(char), char_class(ranges) -> "a-b..." for a regex [...]

    sentence ends
      SENTENCE_FINAL     。！？!?   a token made of these ends a sentence
      PARAGRAPH_FINAL    SENTENCE_FINAL + …   a line ending in these reads as finished prose (an
                         ellipsis inside a text does not cut it into sentences)
      CLOSERS            closing quotes / brackets that stay with the sentence they close

    display_width(text)  terminal columns: East Asian wide and full-width characters take two
    pad(text, width)     left-align in `width` columns

    is_empty_text(text, tokenizer=None)   THE rule for an "empty input" everywhere (predict's and embed's kept
                         row, serve's 422 empty_input, encode's refusal): nothing is left of the text once
                         BERT's normaliser has run, so the tokenizer gives no token besides [CLS] / [SEP]
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tokenizers import Tokenizer as Backend
    from tokenizers.normalizers import Normalizer

# ----- CJK characters ----------------------------------------------------------------------------
CJK_IDEOGRAPHS = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
CJK_PUNCTUATION = ((0x3000, 0x303F), (0xFF00, 0xFFEF), (0x2010, 0x2027))
WIDE_TEXT = CJK_IDEOGRAPHS + CJK_PUNCTUATION


def is_cjk(char: str) -> bool:
    """A CJK ideograph, as BERT's tokenizer defines it (each becomes its own token)."""
    cp = ord(char)
    return any(lo <= cp <= hi for lo, hi in CJK_IDEOGRAPHS)


def char_class(ranges: Iterable[tuple[int, int]]) -> str:
    """((0x4E00, 0x9FFF), ...) -> "\\u4e00-\\u9fff...", the inside of a regex character class."""
    return "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in ranges)


# ----- sentences ---------------------------------------------------------------------------------
SENTENCE_FINAL = frozenset("。！？!?")
PARAGRAPH_FINAL = SENTENCE_FINAL | {"…"}
CLOSERS = frozenset("”’」』）)\"'》")  # 他说：“好。” | 下一句


# ----- terminal columns --------------------------------------------------------------------------
def display_width(text: str) -> int:
    """Terminal columns: CJK characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def pad(text: str, width: int) -> str:
    """Left-align in `width` terminal columns; CJK characters take two."""
    return text + " " * max(0, width - display_width(text))


# ----- empty text --------------------------------------------------------------------------------
# a letter, a digit, "_" or ASCII punctuation: a character no BERT normaliser removes (is_empty_text's fast path)
_CONTENT = re.compile(r"[\w!-/:-@\[-`{-~]")


class HasBackend(Protocol):
    """What is_empty_text reads of a tokenizer: a bertkit Tokenizer's `backend` (a tokenizers.Tokenizer, whose
    normaliser decides). Named by its shape: tokenizer.py imports this module."""

    @property
    def backend(self) -> Backend: ...


def is_empty_text(text: str, tokenizer: HasBackend | None = None) -> bool:
    """Whether `text` is an "empty input": "", whitespace, or only characters BERT's normaliser deletes, i.e.
    control and format characters (U+200B zero-width space, U+00AD soft hyphen, U+FEFF byte-order mark, ...),
    private-use characters and U+FFFD, so that the tokenizer gives no token besides [CLS] / [SEP].

    tokenizer: a bertkit Tokenizer, whose own normaliser then decides (one that strips accents also deletes
    lone combining marks); without one, BERT's normaliser without lower-casing (what every BERT tokenizer
    deletes). Ordinary text costs one regex step (its first letter, digit or punctuation mark)."""
    if _CONTENT.search(text):
        return False
    if not text.strip():
        return True
    normalizer = tokenizer.backend.normalizer if tokenizer is not None else _bert_normalizer()
    return not normalizer.normalize_str(text).strip()  # what is left, the pre-tokenizer splits at whitespace


@functools.cache
def _bert_normalizer() -> Normalizer:
    from tokenizers import normalizers

    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
