"""Documents -> token ids with whole-word and sentence marks, as flat arrays (what `bertkit prepare` stores).

    encode_documents(backend, texts, chinese_words=False) -> Encoded(ids, word_starts, sentence_starts, lengths)

ids are the WordPiece ids of every document back to back, without [CLS] / [SEP]; lengths says how many
belong to each document. Per token two marks, computed for a whole batch at once with array operations:

    word_starts      the token starts a whole word: "##" pieces continue the word before them ("un",
                     "##believ", "##able"). BERT splits Chinese into single characters, so each is its own
                     word, unless chinese_words=True: then jieba segments the text and the characters of one
                     jieba word are one whole word (whole-word masking for Chinese, as in Chinese-BERT-wwm).
                     A gap in the text (a space, a removed character) always starts a new word.
    sentence_starts  the token starts a sentence: a document's first token; after 。！？!? (and the closing
                     quotes / brackets right after them); after ". " (a full stop, then whitespace); and
                     after every line break.

Whole-word masking and next-sentence pairs read these marks; they are the same marks for the same text
whatever the batch (each document is marked on its own).
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from tokenizers import pre_tokenizers

from ..deprecated import moved
from ..errors import ConfigError
from ..text import CJK_IDEOGRAPHS, CLOSERS, SENTENCE_FINAL

if TYPE_CHECKING:
    from tokenizers import Tokenizer as Backend

    from ..tokenizer import Tokenizer
    from .dataset import DataError

_SPACES = np.array([c for c in range(0x3100) if chr(c).isspace()], dtype=np.uint32)  # str.isspace's set
_FINAL = np.array(sorted(map(ord, SENTENCE_FINAL)), dtype=np.uint32)
_CONTINUE = np.array(sorted(map(ord, CLOSERS | SENTENCE_FINAL)), dtype=np.uint32)  # may follow a sentence end
RUNS_PER_CHARACTER = 12  # a document with more than one run per 12 characters goes to the backend whole


@dataclass
class Encoded:
    """A batch of documents as flat arrays (T tokens, D documents)."""

    ids: np.ndarray  # (T,) uint32
    word_starts: np.ndarray  # (T,) bool
    sentence_starts: np.ndarray  # (T,) bool
    lengths: np.ndarray  # (D,) int64, tokens of each document (0: it gave none)


def plain_backend(tokenizer: Tokenizer) -> Backend:
    """A copy of a bertkit Tokenizer's `tokenizers` backend that neither truncates nor pads (a tokenizer.json may
    say to), for whole documents."""
    from tokenizers import Tokenizer as Backend

    backend = Backend.from_str(tokenizer.backend.to_str())
    backend.no_truncation()
    backend.no_padding()
    return backend


class DocumentEncoder:
    """Tokenizes whole documents with a `tokenizers` backend, and marks them (encode_documents).

    Speed-up for text made mostly of single-character words (Chinese): BERT makes every CJK ideograph and
    every punctuation mark a word of its own, whatever surrounds it, and whitespace only separates. Those
    characters need no tokenizer run: a table (_CharacterTable), which learns each character the first time
    it is seen by asking the backend itself about it between two letters ("a" + c + "a" must give "a", c's
    own token, "a"), gives their ids, and only the runs of other characters between them (numbers, Latin
    words) go to the backend, as short texts; offsets are put back in place, so ids and offsets are exactly
    the backend's. A document holding a character whose normalisation could reach past its neighbours
    (control and format characters, combining marks, unassigned code points), the text of a special or
    added token ("[MASK]", matched whole by the backend), or many short runs (English: a run per word),
    goes to the backend whole. tests/data/test_encode.py checks the equality on real corpora and
    random text; bench/results/corpus_scale.md has the speed (People's Daily: about 4x the backend's).
    """

    RUN, SINGLE, SPACE, WHOLE = 0, 1, 2, 3  # what each character is to the table

    def __init__(self, backend: Backend, *, fast: bool = True) -> None:
        self.backend = backend
        self.continuation = continuation_table(backend)
        # the table knows BERT's own pre-tokenizer; never_split words (a pre-tokenizer of their own) can hold
        # punctuation that BERT would split off, so such a backend takes every document whole
        plain = isinstance(backend.pre_tokenizer, pre_tokenizers.BertPreTokenizer)
        self.table = _CharacterTable(backend) if fast and plain else None
        added = sorted(
            backend.get_vocab(with_added_tokens=True).keys() - backend.get_vocab(with_added_tokens=False).keys()
            | {t.content for t in backend.get_added_tokens_decoder().values()},
            key=len,
            reverse=True,
        )
        # a document that holds an added token's text ("[MASK]") is the backend's: it matches them whole
        self.added = re.compile("|".join(map(re.escape, added)), re.IGNORECASE) if added else None

    def encode(self, texts: list[str], *, chinese_words: bool = False) -> Encoded:
        joined = "\0".join(texts)
        try:
            code = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
        except UnicodeEncodeError as e:  # a lone surrogate: not text, and the backend would refuse it too
            raise _surrogate_error(texts, e.start) from None
        sizes = np.fromiter((len(t) + 1 for t in texts), dtype=np.int64, count=len(texts))
        first_char = np.cumsum(sizes) - sizes  # where each document starts in the joined text
        if self.table is None:
            ids, start, end, lengths = self._backend(texts, first_char)
        else:
            ids, start, end, lengths = self._fast(texts, joined, code, first_char)
        words, sentences = _marks(
            code, lengths, ids, start, end, self.continuation, _jieba_words(texts) if chinese_words else None
        )
        return Encoded(ids=ids, word_starts=words, sentence_starts=sentences, lengths=lengths)

    def _backend(
        self, texts: list[str], first_char: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(ids, start, end, lengths): tokens of the texts by the backend, offsets moved by first_char."""
        encodings = self.backend.encode_batch(texts, add_special_tokens=False)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        total = int(lengths.sum())
        ids = np.fromiter((i for e in encodings for i in e.ids), dtype=np.uint32, count=total)
        offsets = np.fromiter(
            (x for e in encodings for pair in e.offsets for x in pair), dtype=np.int64, count=2 * total
        ).reshape(total, 2)
        base = np.repeat(first_char, lengths)
        return ids, offsets[:, 0] + base, offsets[:, 1] + base, lengths

    def _fast(
        self, texts: list[str], joined: str, code: np.ndarray, first_char: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        table = self.table
        assert table is not None  # encode() takes this way only with a table
        kind = table.lookup(code)
        kind[first_char[1:] - 1] = self.SPACE  # the "\0" between documents separates like a space
        doc_of = lambda position: np.searchsorted(first_char, position, side="right") - 1  # noqa: E731
        run = np.concatenate([[False], kind == self.RUN, [False]])
        begins, ends = np.flatnonzero(run[1:] & ~run[:-1]), np.flatnonzero(run[:-1] & ~run[1:])
        # documents the backend tokenizes whole: those with a character the table cannot vouch for, and those
        # with many short runs (English: a run per word), where one backend call costs less than many
        whole = np.bincount(doc_of(begins), minlength=len(texts)) * RUNS_PER_CHARACTER > np.diff(
            np.append(first_char, len(code) + 1)
        )
        whole[doc_of(np.flatnonzero(kind == self.WHOLE))] = True
        if self.added is not None:
            whole[doc_of(np.array([m.start() for m in self.added.finditer(joined)], dtype=np.int64))] = True
        at = np.flatnonzero(kind == self.SINGLE)
        at = at[~whole[doc_of(at)]]
        parts = [(table.single_id[code[at]], at, at + 1)]  # single-character words: their id from the table
        keep = ~whole[doc_of(begins)]
        if keep.any():  # runs of other characters: short texts for the backend, their offsets moved into place
            parts.append(self._backend([joined[b:e] for b, e in zip(begins[keep], ends[keep])], begins[keep])[:3])
        if whole.any():
            slow = np.flatnonzero(whole)
            parts.append(self._backend([texts[d] for d in slow], first_char[slow])[:3])
        ids, start, end = (np.concatenate(p) for p in zip(*parts))
        order = np.argsort(start, kind="stable")
        ids, start, end = ids[order].astype(np.uint32), start[order], end[order]
        lengths = np.bincount(doc_of(start), minlength=len(texts)).astype(np.int64)
        return ids, start, end, lengths


class _CharacterTable:
    """What each character is to DocumentEncoder._fast, learned from the backend the first time it is seen:
    SINGLE characters are one-token words in any company ("a" + c + "a" gives "a", c's own token, "a"), SPACE
    ones only separate (tab, line ends, Unicode spaces), WHOLE ones send their document to the backend whole
    (control and format characters, combining marks, unassigned code points, U+FFFD), RUN ones go to it in runs."""

    UNKNOWN = -1
    WHOLE_CATEGORIES = ("Cc", "Cf", "Cs", "Co", "Cn", "Mn", "Mc", "Me", "Zl", "Zp")

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.kind = np.full(0x110000, self.UNKNOWN, dtype=np.int8)
        self.single_id = np.zeros(0x110000, dtype=np.uint32)
        letter = backend.encode("a", add_special_tokens=False).ids
        self.letter = letter[0] if len(letter) == 1 else None  # no "a" in the vocabulary: no table

    def lookup(self, code: np.ndarray) -> np.ndarray:
        kind = self.kind[code]
        if (kind == self.UNKNOWN).any():
            self._learn(np.unique(code[kind == self.UNKNOWN]).tolist())
            kind = self.kind[code]
        return kind

    def _learn(self, chars: list[int]) -> None:
        texts = [chr(c) for c in chars]
        categories = [unicodedata.category(t) for t in texts]
        between = self.backend.encode_batch([f"a{t}a" for t in texts], add_special_tokens=False)
        alone = self.backend.encode_batch(texts, add_special_tokens=False)
        a = self.letter
        for c, category, e, own in zip(chars, categories, between, alone):
            kind = DocumentEncoder.RUN
            if a is None or category in self.WHOLE_CATEGORIES or c == 0xFFFD:
                kind = DocumentEncoder.WHOLE
            elif category == "Zs" or c in (9, 10, 13):
                if e.ids == [a, a] and e.offsets == [(0, 1), (2, 3)]:
                    kind = DocumentEncoder.SPACE
            elif e.offsets == [(0, 1), (1, 2), (2, 3)] and e.ids == [a, *own.ids, a]:
                # a word of its own: "a" after it starts anew
                kind, self.single_id[c] = DocumentEncoder.SINGLE, e.ids[1]
            self.kind[c] = kind


def _surrogate_error(texts: list[str], at: int) -> DataError:
    """The DataError for a lone surrogate at `at` in the texts joined with "\\0": which text, which character."""
    from .dataset import DataError

    index = 0
    while at > len(texts[index]):
        at -= len(texts[index]) + 1
        index += 1
    return DataError(
        f"document {index} of this batch, character {at}: a lone surrogate ({texts[index][at]!r}, half "
        "of a UTF-16 pair), which is not text and cannot be tokenized; decode the text properly, or "
        "replace such characters: text.encode('utf-8', 'replace').decode('utf-8')"
    )


def continuation_table(backend: Backend) -> np.ndarray:
    """(V,) bool: the ids of "##" pieces (they continue the word of the token before them)."""
    vocab = backend.get_vocab(with_added_tokens=False)
    table = np.zeros(max(vocab.values()) + 1, dtype=bool)
    for token, i in vocab.items():
        table[i] = token.startswith("##") and len(token) > 2
    return table


def encode_documents(backend: Backend, texts: list[str], *, chinese_words: bool = False, fast: bool = True) -> Encoded:
    """Tokenize `texts` with a `tokenizers.Tokenizer` (no special tokens, no truncation) and mark them. For many
    calls, make one DocumentEncoder(backend) and call its encode(): it keeps what it learned about each
    character."""
    return DocumentEncoder(backend, fast=fast).encode(texts, chinese_words=chinese_words)


def _marks(
    code: np.ndarray,
    lengths: np.ndarray,
    ids: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    continuation: np.ndarray,
    jieba_marks: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """(word_starts, sentence_starts) of every token. The documents' characters are laid end to end in `code`
    (one separator between documents) and start / end are the tokens' places there, so every rule is an array
    operation over the whole batch."""
    total = len(ids)
    if total == 0:
        return np.zeros(0, dtype=bool), np.zeros(0, dtype=bool)
    first = np.zeros(total, dtype=bool)
    first[(np.cumsum(lengths) - lengths)[lengths > 0]] = True
    prev_end = np.concatenate([[0], end[:-1]])
    gap = (start > prev_end) & ~first  # text between this token and the one before (spaces, removed characters)

    def within_gap(flags: np.ndarray) -> np.ndarray:  # how many flagged characters lie in each token's gap
        counts = np.concatenate([[0], np.cumsum(flags, dtype=np.int64)])
        return np.where(gap, counts[start] - counts[np.minimum(prev_end, start)], 0)

    newline = within_gap(code == 10) > 0
    blank_gap = gap & (within_gap(~np.isin(code, _SPACES)) == 0)  # a gap of whitespace only
    single = end - start == 1
    piece = code[np.minimum(start, len(code) - 1)]  # a one-character token's character
    final = np.isin(code[np.maximum(end - 1, 0)], _FINAL) & (end > start)  # the token ends with 。！？!?
    may_continue = single & np.isin(piece, _CONTINUE) & ~gap  # a closer (or another final mark) right after
    dot = single & (piece == ord("."))
    # "ended": the sentence ended at or before this token, and only closers / final marks followed. It is set
    # by a final mark and carried over tokens that may continue; a document start or any other token resets
    # it. So it is the `final` of the last token, up to here, that was a final mark or could not carry it.
    decides = first | final | ~may_continue
    ended = final[np.maximum.accumulate(np.where(decides, np.arange(total), 0))]
    ended_before, dot_before = np.concatenate([[False], ended[:-1]]), np.concatenate([[False], dot[:-1]])
    sentence = first | newline | (ended_before & (gap | ~may_continue)) | (dot_before & blank_gap)
    # whole words: "##" pieces continue the word; with jieba, so does the next character of a jieba word
    same = continuation[ids] & ~gap
    if jieba_marks is not None:
        cjk = single & _in_ranges(piece, CJK_IDEOGRAPHS)
        word_of = np.where(cjk, jieba_marks[np.minimum(start, len(jieba_marks) - 1)], -1)
        same |= (word_of >= 0) & (word_of == np.concatenate([[-1], word_of[:-1]])) & ~gap
    return first | ~same, sentence


def _in_ranges(code: np.ndarray, ranges: Iterable[tuple[int, int]]) -> np.ndarray:
    out = np.zeros(code.shape, dtype=bool)
    for lo, hi in ranges:
        out |= (code >= lo) & (code <= hi)
    return out


def _jieba_words(texts: list[str]) -> np.ndarray:
    """Per character of the joined texts ("\\0" between them): the number of the multi-character jieba word
    it is in (unique over the batch), or -1."""
    segment = _jieba()
    marks: list[np.ndarray | list[int]] = []
    number = 0
    for text in texts:
        words = list(segment(text))
        sizes = np.fromiter((len(w) for w in words), dtype=np.int64, count=len(words))
        index = np.where(np.repeat(sizes > 1, sizes), np.repeat(np.arange(number, number + len(words)), sizes), -1)
        index = np.concatenate([index[: len(text)], np.full(max(0, len(text) - len(index)), -1)])  # as long as text
        marks += [index, [-1]]
        number += len(words)
    return np.concatenate(marks).astype(np.int64)


def _jieba() -> Callable[[str], Iterable[str]]:
    try:
        import jieba
    except ImportError:
        raise ConfigError(
            "whole-word masking for Chinese segments words with jieba, which is not installed: pip install jieba"
        ) from None
    jieba.setLogLevel(logging.WARNING)  # no "Building prefix dict..." on every run
    return jieba.cut


if not TYPE_CHECKING:  # old names, for one release
    __getattr__ = moved(__name__, {"Encoder": "bertkit.data.encode:DocumentEncoder"})
