"""Facts about written text that several modules need: which characters are CJK, which marks end a
sentence, and how wide a string is in a terminal. One table each; nothing here imports bertkit.

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
"""

from __future__ import annotations

import unicodedata

# ----- CJK characters ----------------------------------------------------------------------------
CJK_IDEOGRAPHS = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
                  (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
CJK_PUNCTUATION = ((0x3000, 0x303F), (0xFF00, 0xFFEF), (0x2010, 0x2027))
WIDE_TEXT = CJK_IDEOGRAPHS + CJK_PUNCTUATION


def is_cjk(char: str) -> bool:
    """A CJK ideograph, as BERT's tokenizer defines it (each becomes its own token)."""
    cp = ord(char)
    return any(lo <= cp <= hi for lo, hi in CJK_IDEOGRAPHS)


def char_class(ranges) -> str:
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
