"""Pretraining rows cut from a prepared split (dataset.py): row i's tokens are found from the document offsets
when a batch asks for it, so nothing of the corpus's size is held in Python objects.

    StreamRows     MLM only (RoBERTa-style "full sentences"): the documents joined into one stream, one [SEP]
                   between neighbours, cut into rows [CLS] chunk [SEP] of seq_len tokens; nothing is padded.
                   The last, shorter row is kept if it holds at least half a chunk. Plan: none (arithmetic
                   on the offsets: document d starts at stream position offsets[d] + d).
    DocumentRows   MLM only, documents kept apart: each document is cut into pieces of seq_len - 2 tokens (the
                   last shorter) and whole pieces [CLS] piece [SEP] go into rows, best fit, longest first (a
                   deterministic order); the row's attention_mask numbers its pieces 1, 2, ... so the model
                   keeps attention (and positions) inside each. Plan: full pieces are one row each (arithmetic);
                   the last pieces, one per document, are fitted once at the start (~1 s per million documents).
    PairRows       MLM + NSP, the scheme of Google's create_pretraining_data.py: [CLS] A [SEP] B [SEP] where
                   B follows A in the document (label 0) or is a span of another document (label 1). Plan:
                   a seeded walk over each document's sentences (6 numbers per row), done by bertkit prepare
                   and stored with the dataset, else once at the start.

    rows = make_rows(split, "stream", seq_len=128, cls_id=2, sep_id=3)
    len(rows); rows.batch(np.array([7, 3, 12]), words=True) -> RowBatch (padded arrays)

RowBatch.word_ids numbers the whole words of a row from 0 (tokens of one word share a number) and is -1 at
[CLS] / [SEP] / padding; the masking collator uses it to mask whole words. A row's first token, and the first
token of each piece / sentence span, always starts a word (a word cut by the row edge is two words).
"""

from __future__ import annotations

import heapq
import os
import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from ..errors import ConfigError
from ..files import atomic_write
from .batching import pad_rows
from .dataset import PAIR_PLAN, Split
from .seeded import hash64

PACKINGS = ("stream", "documents")


def most_rows(kind: str, docs: int, tokens: int, pieces: int, chunk: int) -> int:
    """At most how many rows of `kind` (a PACKINGS entry, or "pairs") `docs` documents of at most `tokens` tokens in
    all make, `pieces` being the sum of each document's ceil(tokens / chunk): the counts of the row classes below,
    on bounds (pretraining refuses a corpus too small for one batch with it before a token is made)."""
    if kind == "stream":  # StreamRows: the documents joined by [SEP], cut every chunk
        return stream_rows(tokens + max(0, docs - 1), chunk)
    if kind == "documents":  # DocumentRows: each document's full chunks, and its tail in at most one row
        return pieces
    return tokens if docs >= 2 else 0  # PairRows: each row takes a sentence (a token at least) of its own


def stream_rows(length: int, chunk: int) -> int:
    """Rows of `chunk` tokens a stream of `length` tokens is cut into; a last, shorter row counts when it holds at
    least half a chunk."""
    full, tail = divmod(length, chunk)
    return full + (1 if tail and 2 * tail >= chunk else 0)


@dataclass
class RowBatch:
    """Rows padded to the longest (B, S); all int64."""

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    attention_mask: np.ndarray  # 1 on tokens (or piece numbers 1, 2, ... in packed documents), 0 on padding
    word_ids: np.ndarray | None  # -1 on specials and padding (None: not asked for)
    next_sentence_label: np.ndarray | None  # (B,) 0 = B follows A, 1 = B is random; None: no NSP


# one row, unpadded: (ids, token type ids, attention mask, word ids or None), each (length,) int64
Row = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]


def make_rows(
    split: Split,
    kind: str,
    *,
    seq_len: int,
    cls_id: int,
    sep_id: int,
    seed: int = 0,
    short_seq_prob: float = 0.1,
    plan_file: str | None = None,
) -> _Rows:
    """The rows of a split: kind "stream" / "documents" (MLM) or "pairs" (NSP). Pairs come from the plan the split
    holds for this seq_len (walked by bertkit prepare), else are walked here seeded by `seed`; plan_file: where
    that plan is kept (read if it is there, else written), so a resumed run or another process of the same run
    does not walk the sentences again; its name must say what the plan depends on (data, seq_len, seed)."""
    if kind == "stream":
        return StreamRows(split, seq_len, cls_id, sep_id)
    if kind == "documents":
        return DocumentRows(split, seq_len, cls_id, sep_id)
    if kind == "pairs":
        return PairRows(split, seq_len, cls_id, sep_id, seed=seed, short_seq_prob=short_seq_prob, plan_file=plan_file)
    raise ConfigError(f"unknown kind of rows {kind!r}: stream, documents or pairs")


class _Rows(ABC):
    """What every kind shares: the split, the special ids, and turning segments into a padded batch."""

    count: int  # how many rows (set by each kind)

    def __init__(self, split: Split, seq_len: int, cls_id: int, sep_id: int, smallest: int) -> None:
        if seq_len < smallest:
            raise ConfigError(f"seq_len must be >= {smallest} for these rows, got {seq_len}")
        self.split, self.seq_len, self.cls_id, self.sep_id = split, seq_len, cls_id, sep_id

    def __len__(self) -> int:
        return self.count

    @abstractmethod
    def row(self, i: int, words: bool) -> Row:
        """Row i, unpadded (word ids None unless `words`): each kind cuts it its own way."""

    def batch(self, indices: Sequence[int] | np.ndarray, words: bool = False) -> RowBatch:
        """The rows at `indices` (any order, repeats allowed), padded to the longest."""
        indices = np.asarray(indices, dtype=np.int64)
        if not indices.size:
            raise ConfigError("a batch needs at least one row index")
        if indices.min() < 0 or indices.max() >= self.count:
            raise IndexError(f"row indices must be in [0, {self.count})")
        rows = [self.row(int(i), words) for i in indices]  # (ids, types, mask, word ids) each
        ids = pad_rows([r[0] for r in rows], 0)
        types = pad_rows([r[1] for r in rows], 0)
        mask = pad_rows([r[2] for r in rows], 0)
        # words=True: every row came with its word ids (row() gives None only without words)
        word_ids = pad_rows(cast("list[np.ndarray]", [r[3] for r in rows]), -1) if words else None
        labels = np.array([self.label(int(i)) for i in indices], dtype=np.int64) if self.pairs else None
        return RowBatch(ids, types, mask, word_ids, labels)

    pairs = False  # rows with a next-sentence label (PairRows)

    def label(self, i: int) -> int:
        """Row i's next-sentence label (PairRows)."""
        raise TypeError(f"{type(self).__name__} rows have no next-sentence label")


# ----- the stream --------------------------------------------------------------------------------
class StreamRows(_Rows):
    def __init__(self, split: Split, seq_len: int, cls_id: int, sep_id: int) -> None:
        super().__init__(split, seq_len, cls_id, sep_id, smallest=3)
        self.chunk = seq_len - 2
        self.length = split.tokens + max(0, split.documents - 1)  # the stream, with a [SEP] between documents
        self.count = stream_rows(self.length, self.chunk)

    def _document_at(self, position: int) -> int:
        """The document whose stream span (its tokens and the [SEP] after it) holds `position`."""
        offsets = self.split.offsets
        lo, hi = 0, self.split.documents - 1
        while lo < hi:  # the last d with offsets[d] + d <= position
            mid = (lo + hi + 1) // 2
            if int(offsets[mid]) + mid <= position:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def row(self, i: int, words: bool) -> Row:
        start, end = i * self.chunk, min((i + 1) * self.chunk, self.length)
        offsets, d = self.split.offsets, self._document_at(start)
        text: list[
            tuple[int, int] | None
        ] = []  # the stream's content between start and end, as (token start, token end) or None for a [SEP]
        position = start
        while position < end:
            begin = int(offsets[d]) + d
            stop = begin + int(offsets[d + 1]) - int(offsets[d])  # where the [SEP] after document d sits
            if position < stop:
                take = min(end, stop)
                text.append((int(offsets[d]) + position - begin, int(offsets[d]) + take - begin))
                position = take
            if position < end and position == stop:
                text.append(None)
                position += 1
            d += 1
        return self._row(text, words)

    def _row(self, text: list[tuple[int, int] | None], words: bool) -> Row:
        ids, flags = [np.array([self.cls_id])], [np.array([-1])]
        for part in text:
            if part is None:
                ids.append(np.array([self.sep_id]))
                flags.append(np.array([-1]))
                continue
            ids.append(self.split.ids[part[0] : part[1]].astype(np.int64))
            if words:
                f = self.split.word_starts(*part).astype(np.int64)
                f[:1] = 1
                flags.append(f)
        ids.append(np.array([self.sep_id]))
        flags.append(np.array([-1]))
        row_ids = np.concatenate(ids)
        ones = np.ones(len(row_ids), dtype=np.int64)
        return row_ids, ones * 0, ones, _number_words(flags) if words else None


def _number_words(flags: list[np.ndarray]) -> np.ndarray:
    """Word starts (1), continuations (0) and specials (-1) -> word numbers 0, 1, ... and -1."""
    flat = np.concatenate(flags)
    return np.where(flat >= 0, np.cumsum(np.maximum(flat, 0)) - 1, -1)


# ----- documents apart ---------------------------------------------------------------------------
class DocumentRows(_Rows):
    def __init__(self, split: Split, seq_len: int, cls_id: int, sep_id: int) -> None:
        super().__init__(split, seq_len, cls_id, sep_id, smallest=3)
        self.chunk = chunk = seq_len - 2
        lengths = np.diff(np.asarray(split.offsets))
        self.full_before = np.cumsum(lengths // chunk)  # full pieces in documents 0..d
        self.full = int(self.full_before[-1]) if len(lengths) else 0
        tails = np.flatnonzero(lengths % chunk)
        tail_len = lengths[tails] % chunk
        self.tail_doc, self.tail_len = tails, tail_len
        members = _best_fit(tail_len, tails, seq_len)  # rows of tails, each a sorted array of tail numbers
        self.row_start = np.concatenate([[0], np.cumsum([len(m) for m in members])]).astype(np.int64)
        self.members = np.concatenate(members).astype(np.int64) if members else np.zeros(0, dtype=np.int64)
        self.count = self.full + len(members)

    def row(self, i: int, words: bool) -> Row:
        offsets, chunk = self.split.offsets, self.chunk
        if i < self.full:  # the i-th full piece, in document order: one row
            d = int(np.searchsorted(self.full_before, i, side="right"))
            k = i - (int(self.full_before[d - 1]) if d else 0)
            start = int(offsets[d]) + k * chunk
            pieces = [(start, start + chunk)]
        else:
            tails = self.members[self.row_start[i - self.full] : self.row_start[i - self.full + 1]]
            pieces = []
            for t in tails:
                end = int(offsets[self.tail_doc[t] + 1])
                pieces.append((end - int(self.tail_len[t]), end))
        ids, mask, flags = [], [], []
        for number, (start, end) in enumerate(pieces, 1):
            ids += [np.array([self.cls_id]), self.split.ids[start:end].astype(np.int64), np.array([self.sep_id])]
            mask.append(np.full(end - start + 2, number))
            if words:
                f = self.split.word_starts(start, end).astype(np.int64)
                f[:1] = 1
                flags += [np.array([-1]), f, np.array([-1])]
        row_ids = np.concatenate(ids)
        return (
            row_ids,
            np.zeros(len(row_ids), dtype=np.int64),
            np.concatenate(mask),
            _number_words(flags) if words else None,
        )


def _best_fit(lengths: np.ndarray, order_key: np.ndarray, seq_len: int) -> list[np.ndarray]:
    """Pieces of `lengths` tokens (+ [CLS], [SEP]) into rows of seq_len: longest first (ties: in order), each into
    the row with the least room that holds it (ties: the oldest row), a new row when none does. Room per row is
    kept in buckets by size (a heap of rows each) and a bit mask of the sizes that have rows, so a fit is found
    in a few integer operations. Returns each row's pieces, sorted."""
    order = np.lexsort((order_key, -lengths))
    buckets: dict[int, list[int]] = {}
    sizes = 0  # bit f set: some row has exactly f free tokens
    rows: list[list[int]] = []
    for piece in order.tolist():
        need = int(lengths[piece]) + 2
        candidates = sizes >> need
        if candidates:
            free = need + (candidates & -candidates).bit_length() - 1  # the smallest room that holds it
            row = heapq.heappop(buckets[free])
            if not buckets[free]:
                sizes &= ~(1 << free)
        else:
            free, row = seq_len, len(rows)
            rows.append([])
        rows[row].append(piece)
        if free - need >= 3:  # room for at least [CLS] x [SEP]
            heapq.heappush(buckets.setdefault(free - need, []), row)
            sizes |= 1 << (free - need)
    return [np.sort(np.array(r, dtype=np.int64)) for r in rows]


# ----- next-sentence pairs -----------------------------------------------------------------------
PAIR_STREAM = 15  # the seeded stream (seeded.hash64) a document's walk draws its generator's seed from
SHORT_SEQ_PROB = 0.1  # Google's default: the share of documents walked with a shorter target


class PairRows(_Rows):
    """[CLS] A [SEP] B [SEP] rows, as Google's create_instances_from_document (one pass over the documents).

    Per document a target length (seq_len - 3, or with probability short_seq_prob a random length from 2) is
    drawn; whole sentences are gathered into a chunk until it reaches the target (or the document ends). The
    chunk is cut at a random sentence boundary into A and B. With probability 0.5 B is replaced by sentences of
    another document, from a random sentence on, up to the target (label 1), and the chunk's unused sentences
    go back to the document; else B is the real continuation (label 0). The pair is then cut to seq_len - 3
    tokens from the longer side, each token cut at its front or back at random (truncate_seq_pair). Labels
    follow transformers: 0 = B is the continuation, 1 = B is random.

    One change from Google's code, which gives every one-sentence chunk (a sentence as long as the target, a
    document's last sentence, most chunks of a short target) a random B, and so about 56% random pairs on
    People's Daily: here the coin comes first, and a one-sentence chunk that is to get a real B takes the
    document's next sentence as B (at the document's end: its previous sentence as A). Only a document of a
    single sentence always gets a random B.

    Each document is walked on its own (walk_document), with a generator seeded by (seed, the document's key),
    so that `bertkit prepare` walks them in its workers as it tokenizes and stores the plan with the dataset
    (split.pairs, for its --nsp-seq-len; keys: the document's place in the corpus, seed: prepare's --seed).
    Without a stored plan for this seq_len, the documents are walked here at the start (keys: the place in
    the split, seed: `seed`); plan_file keeps that plan for a resumed run or the other processes of a run.
    The plan is a PAIR_PLAN record per row; the random B and the truncation are settled when a row is read.
    """

    pairs = True

    def __init__(
        self,
        split: Split,
        seq_len: int,
        cls_id: int,
        sep_id: int,
        *,
        seed: int = 0,
        short_seq_prob: float = SHORT_SEQ_PROB,
        plan_file: str | None = None,
    ) -> None:
        super().__init__(split, seq_len, cls_id, sep_id, smallest=5)
        if not 0.0 <= short_seq_prob <= 1.0:
            raise ConfigError(f"short_seq_prob must be in [0, 1], got {short_seq_prob}")
        if split.documents < 2:
            raise ConfigError(
                f"next-sentence pairs need at least 2 documents (random B sentences come from another "
                f"document); the {split.name} split has {split.documents}"
            )
        self.max_tokens = seq_len - 3
        if split.pairs is not None and split.pair_options == pair_options(seq_len, short_seq_prob):
            self.plan = split.pairs  # walked by bertkit prepare: memory-mapped
        elif plan_file and os.path.exists(plan_file):
            self.plan = np.load(plan_file)
        else:
            self.plan = walk_split(split, self.max_tokens, seed, short_seq_prob)
            if plan_file:
                atomic_write(plan_file, self._save)
        self.count = len(self.plan)

    def _save(self, path: str) -> None:
        with open(path, "wb") as fh:
            np.save(fh, self.plan)

    def label(self, i: int) -> int:
        return int(self.plan[i]["label"])

    def spans(self, i: int) -> tuple[int, int, int, int]:
        """Row i's (A start, A length, B start, B length) in the split's tokens: its random B found, the pair cut
        to seq_len - 3 tokens."""
        a0, a_n, b0, b_n, label, draw = self.plan[i].tolist()
        rng = random.Random(draw)
        if label:
            bits, offsets = self.split.sentence_bits.view(np.ndarray), self.split.offsets.view(np.ndarray)
            d = int(np.searchsorted(offsets, a0, side="right")) - 1  # A's document
            other = rng.randrange(self.split.documents - 1)
            other += other >= d  # any document but this one
            starts, lengths = _sentences(bits, offsets, other)
            s = rng.randrange(len(starts))
            b0, need, b_n = starts[s], b_n, 0
            for k in range(s, len(starts)):
                b_n += lengths[k]
                if b_n >= need:
                    break
        return truncate_pair(a0, a_n, b0, b_n, self.max_tokens, rng)

    def row(self, i: int, words: bool) -> Row:
        a0, a_n, b0, b_n = self.spans(i)
        a1, b1 = a0 + a_n, b0 + b_n
        ids = np.concatenate(
            [[self.cls_id], self.split.ids[a0:a1], [self.sep_id], self.split.ids[b0:b1], [self.sep_id]]
        ).astype(np.int64)
        types = np.zeros(len(ids), dtype=np.int64)
        types[a_n + 2 :] = 1
        row_words: np.ndarray | None = None
        if words:
            fa, fb = self.split.word_starts(a0, a1).astype(np.int64), self.split.word_starts(b0, b1).astype(np.int64)
            fa[:1], fb[:1] = 1, 1
            row_words = _number_words([np.array([-1]), fa, np.array([-1]), fb, np.array([-1])])
        return ids, types, np.ones(len(ids), dtype=np.int64), row_words


def pair_options(seq_len: int, short_seq_prob: float = SHORT_SEQ_PROB) -> dict[str, int | float]:
    """What a pair plan depends on besides the documents and the seed (kept in a dataset's manifest)."""
    return {"seq_len": int(seq_len), "short_seq_prob": float(short_seq_prob)}


def truncate_pair(
    a0: int, a_n: int, b0: int, b_n: int, max_tokens: int, rng: random.Random
) -> tuple[int, int, int, int]:
    """Google's truncate_seq_pair in closed form: while the pair is longer than max_tokens, one token goes from the
    longer side (B on a tie), from its front or back by a fair coin; the coins of a side are counted at once."""
    excess = a_n + b_n - max_tokens
    if excess <= 0:
        return a0, a_n, b0, b_n
    first = min(excess, abs(a_n - b_n))  # from the longer side until both are equal
    cut_a, cut_b = (first, 0) if a_n > b_n else (0, first)
    rest = excess - first  # then B, A, B, ... one each
    cut_a, cut_b = cut_a + rest // 2, cut_b + (rest + 1) // 2
    a_front = rng.getrandbits(cut_a).bit_count() if cut_a else 0
    b_front = rng.getrandbits(cut_b).bit_count() if cut_b else 0
    return a0 + a_front, a_n - cut_a, b0 + b_front, b_n - cut_b


def document_rng(seed: int, key: int) -> random.Random:
    """The generator one document is walked with: a pure function of (seed, key)."""
    return random.Random(int(hash64(seed, PAIR_STREAM, key)[0]))


def walk_document(
    starts: list[int], lengths: list[int], rng: random.Random, max_tokens: int, short_seq_prob: float
) -> list[tuple[int, int, int, int, int, int]]:
    """The plan rows of one document, given its sentences (token start, length): PairRows' walk, in PAIR_PLAN's
    fields; a random B's document and sentence are left to the row's draw."""
    rows: list[tuple[int, int, int, int, int, int]] = []
    target = max_tokens
    if rng.random() < short_seq_prob:
        target = rng.randint(2, max_tokens)
    first, length, i = 0, 0, 0  # the chunk is sentences first..i
    while i < len(starts):
        length += lengths[i]
        if i == len(starts) - 1 or length >= target:
            is_random = rng.random() < 0.5
            chunk = i - first + 1
            if not is_random and chunk == 1:  # a real B needs a second sentence
                if i + 1 < len(starts):
                    i += 1  # the next one as B
                elif i > 0:
                    first -= 1  # at the end: the one before as A
                else:
                    is_random = True  # a one-sentence document
                chunk = i - first + 1
            a_end = rng.randint(1, chunk - 1) if chunk >= 2 else 1  # sentences of A
            a0, a_n = starts[first], sum(lengths[first : first + a_end])
            if is_random:
                b0, b_n = -1, target - a_n  # B: another document's sentences, up to the target
                i -= chunk - a_end  # the chunk's unused sentences are read again
            else:
                b0, b_n = starts[first + a_end], sum(lengths[first + a_end : i + 1])
            rows.append((a0, a_n, b0, b_n, int(is_random), rng.getrandbits(64)))
            first, length = i + 1, 0
        i += 1
    return rows


def walk_documents(
    sentence_starts: np.ndarray,
    lengths: np.ndarray,
    keys: np.ndarray,
    seed: int,
    max_tokens: int,
    short_seq_prob: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Plan rows of documents given back to back (sentence_starts: (T,) bool marks, lengths: (D,) tokens each,
    keys: (D,) each document's key): (PAIR_PLAN records with token positions from the first document's start,
    (rows,) the index in 0..D-1 of each row's document)."""
    ends = np.cumsum(lengths)
    begins = ends - lengths
    marks = np.flatnonzero(sentence_starts).tolist()
    rows: list[tuple[int, int, int, int, int, int]] = []
    docs: list[int] = []
    m = 0
    for d, (begin, end) in enumerate(zip(begins.tolist(), ends.tolist())):
        while m < len(marks) and marks[m] < begin:
            m += 1
        starts = [begin]
        while m < len(marks) and marks[m] < end:
            if marks[m] > begin:
                starts.append(marks[m])
            m += 1
        if end == begin:
            continue
        walked = walk_document(
            starts,
            [b - a for a, b in zip(starts, starts[1:] + [end])],
            document_rng(seed, int(keys[d])),
            max_tokens,
            short_seq_prob,
        )
        rows += walked
        docs += [d] * len(walked)
    return np.array(rows, dtype=PAIR_PLAN), np.array(docs, dtype=np.int64)


def walk_split(split: Split, max_tokens: int, seed: int, short_seq_prob: float) -> np.ndarray:
    """The plan of a whole split (each document keyed by its place in the split), a block of documents at a time."""
    plans: list[np.ndarray] = []
    offsets = np.asarray(split.offsets)
    for lo in range(0, split.documents, WALK_BLOCK):
        hi = min(lo + WALK_BLOCK, split.documents)
        start, end = int(offsets[lo]), int(offsets[hi])
        plan, _ = walk_documents(
            split.sentence_starts(start, end),
            np.diff(offsets[lo : hi + 1]),
            np.arange(lo, hi),
            seed,
            max_tokens,
            short_seq_prob,
        )
        plan["a_start"] += start
        plan["b_start"][plan["b_start"] >= 0] += start
        plans.append(plan)
    return np.concatenate(plans)


WALK_BLOCK = 4096  # documents walked per array of marks


def _sentences(bits: np.ndarray, offsets: np.ndarray, d: int) -> tuple[list[int], list[int]]:
    """(token start, length) of each sentence of document d (bits, offsets: plain views of the split's maps)."""
    start, end = int(offsets[d]), int(offsets[d + 1])
    flags = np.unpackbits(bits[start >> 3 : (end + 7) >> 3], bitorder="little")[start & 7 : (start & 7) + end - start]
    begins = (np.flatnonzero(flags) + start).tolist()
    if not begins or begins[0] != start:
        begins.insert(0, start)
    return begins, [b - a for a, b in zip(begins, begins[1:] + [end])]
