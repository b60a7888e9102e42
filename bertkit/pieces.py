"""Tokenizing a long text in pieces: a text of more than PIECE_CHARS characters goes to the backend (the `tokenizers`
library) a piece at a time, so that the backend's memory stays that of a piece, and comes back with the tokens, ids,
offsets and word ids of the whole text.

    Tokenizer.tokenize / __call__ (no truncation) --is_long(text or pair)--> Pieces(backend, cut pattern)
      .encodings(text)  cut at the last place within PIECE_CHARS characters where no token changes (before
                        SEPARATORS, after a CJK character or a punctuation mark; else inside a word that is [UNK]
                        on both sides) -> (where the piece starts, the backend's Encoding, joins) per piece
      .tokens(text)     -> the whole text's tokens          (Tokenizer.tokenize)
      .encode(item)     -> JoinedEncoding: the pieces' encodings joined, [CLS] / [SEP] added, offsets moved and
                        word ids counted on; the row's encoding, as a tokenizers.Encoding would be (Tokenizer.__call__)

Where a text may be cut is the tokenizer's knowledge (Tokenizer._cut_pattern): it is passed in, and this module
never imports tokenizer.py.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from typing import TypeAlias, cast

from tokenizers import Encoding
from tokenizers import Tokenizer as Backend
from tokenizers.models import WordPiece

# A text (or second text) of more than PIECE_CHARS characters that is encoded whole (no truncation) goes to the backend
# in pieces of about PIECE_CHARS characters (Pieces), with the whole text's tokens: the backend's memory for one text
# (its normalised copy, alignments and encoding: about 200 bytes a character of English, 350 of Chinese) stays that of
# a piece, where a text of 10 million characters needed gigabytes.
PIECE_CHARS = 100_000
# the whitespace BERT's normaliser turns into a space (\x0b, \x0c, U+0085 and \x1c-\x1f, control characters, it
# deletes instead): a word ends before each, so a text may be cut there
SEPARATORS = " \t\n\r\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"


def is_long(item: str | tuple[str, str]) -> bool:
    """Whether one input (a text, or a (text, text_pair) pair) has a text of more than PIECE_CHARS characters: such
    an input is encoded in pieces."""
    return max(map(len, _parts(item))) > PIECE_CHARS


def _parts(item: str | tuple[str, str]) -> tuple[str, ...]:
    """The texts of one input: (text,) or (text, text_pair)."""
    return item if isinstance(item, tuple) else (item,)


class JoinedEncoding:
    """What the backend's tokenizers.Encoding of a whole text (or pair) says, for one encoded in pieces (a text over
    PIECE_CHARS: Pieces): ids, tokens, type ids, masks, offsets, word and sequence ids, char_to_token and pad, the
    same values, held in compact arrays (about 40 bytes a token) and made into lists when asked for."""

    def __init__(self, id_to_token: Callable[[int], str | None], unk_id: int | None) -> None:
        self._id_to_token, self._unk_id = id_to_token, unk_id
        self._ids, self._words, self._starts, self._ends = array("q"), array("q"), array("q"), array("q")
        self._types, self._special, self._attention, self._sequences = array("b"), array("b"), array("b"), array("b")
        self._ranges: dict[int, tuple[int, int]] = {}  # sequence -> its tokens [start, end)
        self.overflowing: list[JoinedEncoding] = []  # nothing is truncated

    def add_special(self, token_id: int, type_id: int) -> None:
        self._append(token_id, type_id, 1, 1, (0, 0), -1, -1)

    def add_sequence(self, index: int, pieces: Iterable[tuple[int, Encoding, bool]]) -> None:
        """Append text `index` (type id `index`) from its pieces (Pieces.encodings): offsets moved by where each
        piece starts, word ids counted on, and the two [UNK] halves of a word cut in two made one token again."""
        first, next_word = len(self._ids), 0
        for start, encoding, joins in pieces:
            ids, offsets, words = encoding.ids, encoding.offsets, encoding.word_ids
            shift = next_word
            if joins:  # Pieces cut inside a word that is [UNK] on both sides and whole: one token, one word
                assert self._ids[-1] == ids[0] == self._unk_id
                self._ends[-1] = start + offsets[0][1]
                ids, offsets, words, shift = ids[1:], offsets[1:], words[1:], shift - 1
            for token_id, (a, b), word in zip(ids, offsets, words):
                self._append(token_id, index, 0, 1, (start + a, start + b), -1 if word is None else word + shift, index)
            if len(self._ids) > first:
                next_word = self._words[-1] + 1
        self._ranges[index] = (first, len(self._ids))

    def _append(
        self, token_id: int, type_id: int, special: int, attention: int, offsets: tuple[int, int], word: int, seq: int
    ) -> None:
        self._ids.append(token_id)
        self._types.append(type_id)
        self._special.append(special)
        self._attention.append(attention)
        self._starts.append(offsets[0])
        self._ends.append(offsets[1])
        self._words.append(word)
        self._sequences.append(seq)

    def pad(self, length: int, *, pad_id: int = 0, pad_type_id: int = 0, pad_token: str = "[PAD]") -> None:
        """Pad on the right to `length` tokens, as Encoding.pad does (nothing if already as long); pad_token is the
        pad_id's token (tokens come from the ids)."""
        for _ in range(length - len(self._ids)):
            self._append(pad_id, pad_type_id, 1, 0, (0, 0), -1, -1)

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def ids(self) -> list[int]:
        return self._ids.tolist()

    @property
    def tokens(self) -> list[str]:
        return [cast(str, self._id_to_token(i)) for i in self._ids]

    @property
    def type_ids(self) -> list[int]:
        return self._types.tolist()

    @property
    def attention_mask(self) -> list[int]:
        return self._attention.tolist()

    @property
    def special_tokens_mask(self) -> list[int]:
        return self._special.tolist()

    @property
    def offsets(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends))

    @property
    def word_ids(self) -> list[int | None]:
        return [None if w < 0 else w for w in self._words]

    words = word_ids

    @property
    def sequence_ids(self) -> list[int | None]:
        return [None if s < 0 else s for s in self._sequences]

    @property
    def n_sequences(self) -> int:
        return len(self._ranges)

    def char_to_token(self, char_pos: int, sequence_index: int = 0) -> int | None:
        """The first token of sequence `sequence_index` whose offsets hold character `char_pos` (its whole row where
        the row has no such sequence, as the backend does)."""
        lo, hi = self._ranges.get(sequence_index, (0, len(self._ids)))
        i = bisect_right(self._starts, char_pos, lo, hi) - 1  # offsets only grow along a sequence
        if i < lo or self._ends[i] <= char_pos:
            return None
        while i > lo and self._starts[i - 1] <= char_pos < self._ends[i - 1]:  # tokens of one expanded character
            i -= 1
        return i


class Pieces:
    """A text of more than PIECE_CHARS characters on its way to the backend, encoded whole: in pieces of about
    PIECE_CHARS characters, so that the backend's memory for it does not grow with the text, and with the tokens of
    the whole text. A piece ends at the last place within PIECE_CHARS characters where a cut changes no token
    (Tokenizer._cut_pattern: before whitespace, after a CJK ideograph or a punctuation mark). In a run of PIECE_CHARS
    characters without one it ends inside a word where that word is [UNK] whatever its length: more than
    max_input_chars_per_word characters of one word on each side of the cut (`joins`: the two [UNK]s are one token
    again). Where neither is found (a run of characters the normaliser deletes) the piece runs on to the next place,
    and memory grows with that run. Added tokens that take whitespace with them (lstrip / rstrip / single_word) leave
    no safe place: such a tokenizer encodes the text whole."""

    def __init__(self, backend: Backend, pattern: re.Pattern[str] | None) -> None:
        """`backend`: the tokenizer's (a WordPiece model); `pattern`: where a text may be cut without changing a
        token (Tokenizer._cut_pattern; None: nowhere)."""
        self.backend, self.pattern = backend, pattern
        model = cast(WordPiece, backend.model)
        self.longest: int = model.max_input_chars_per_word  # a longer word is [UNK]
        self.unk: str = model.unk_token
        self.unk_id = backend.token_to_id(self.unk)
        self.context = 2 * self.longest + 2  # characters on each side of a cut inside a word, checked to be one word
        self.added = list(backend.get_added_tokens_decoder().values())
        self.reach = max((len(t.content) for t in self.added), default=0)

    def encode(self, item: str | tuple[str, str], specials: tuple[int, int] | None) -> JoinedEncoding:
        """One text (or pair) encoded in pieces, with [CLS] / [SEP] (`specials`: their ids; None: none) and type ids
        where BERT's template puts them (Tokenizer._configure_backend: [CLS] A [SEP] (B [SEP]), type ids 0 for A,
        1 for B)."""
        row = JoinedEncoding(self.backend.id_to_token, self.unk_id)
        if specials:
            row.add_special(specials[0], 0)
        for index, text in enumerate(_parts(item)):
            row.add_sequence(index, self.encodings(text))
            if specials:
                row.add_special(specials[1], index)
        return row

    def encodings(self, text: str) -> Iterator[tuple[int, Encoding, bool]]:
        """(where a piece starts, the backend's encoding of it without special tokens, whether its first token is the
        rest of the previous piece's last [UNK]) for the pieces of `text`, one at a time."""
        start, joins = 0, False
        while start < len(text):
            end, cuts_word = self._end(text, start)
            yield start, self.backend.encode(text[start:end], add_special_tokens=False), joins
            start, joins = end, cuts_word

    def tokens(self, text: str) -> list[str]:
        """The tokens of `text`, without special tokens, encoded piece by piece."""
        tokens: list[str] = []
        for _, encoding, joins in self.encodings(text):
            piece = encoding.tokens
            if joins:  # the previous piece's last [UNK] and this one's first are one word's
                assert tokens[-1] == piece[0] == self.unk
                piece = piece[1:]
            tokens += piece
        return tokens

    def _end(self, text: str, start: int) -> tuple[int, bool]:
        """Where the piece from `start` ends, and whether that is inside a word."""
        lo, hi = start, start + PIECE_CHARS
        while hi < len(text) and self.pattern is not None:
            found = self.pattern.match(text, lo, hi)  # its end: the last place in [lo, hi]
            if found and found.end() > start:
                return found.end(), False
            if hi - self.context >= start and self._inside_long_word(text, hi):
                return hi, True
            lo, hi = hi, hi + PIECE_CHARS
        return len(text), False

    def _inside_long_word(self, text: str, cut: int) -> bool:
        """Whether `cut` falls inside a word that is [UNK] in the whole text and each part of which is [UNK] too:
        the `context` characters on each side are each one word of more than max_input_chars_per_word characters to
        the normaliser and pre-tokeniser (which work character by character), and no added token is near."""
        near = text[cut - self.context - self.reach : cut + self.context + self.reach]
        normal = self._normal(near)
        if any(t.content in near or (t.normalized and self._normal(t.content) in normal) for t in self.added):
            return False
        return self._one_long_word(text[cut - self.context : cut]) and self._one_long_word(
            text[cut : cut + self.context]
        )

    def _one_long_word(self, text: str) -> bool:
        normalized = self._normal(text)
        words = self.backend.pre_tokenizer.pre_tokenize_str(normalized)
        return len(normalized) > self.longest and [word for word, _ in words] == [normalized]

    def _normal(self, text: str) -> str:
        return self.backend.normalizer.normalize_str(text)


Row: TypeAlias = Encoding | JoinedEncoding  # one row's encoding: the backend's, or one joined from pieces
