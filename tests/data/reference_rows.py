"""The reference for bertkit.data.encode and bertkit.data.rows: how bertkit built pretraining rows before
datasets were prepared to disk (commit 4a28873, bertkit/data/examples.py), whole documents held in Python lists.
The tests check that the arrays-and-offsets code gives exactly these rows for the same documents and seed.

Pretraining examples: documents -> token ids with word and sentence marks -> fixed-size rows.

    tokenize_documents   text -> TokenizedDoc(ids, words, sentences): ids without [CLS]/[SEP]; per
                         token the whole word it belongs to (for whole-word masking) and its sentence
                         (for next-sentence prediction)
    pack_examples        MLM only (RoBERTa-style "full sentences"): all documents in one stream,
                         separated by [SEP], cut into rows [CLS] chunk [SEP]; nothing is padded
    pack_documents       MLM only, documents kept apart: each document (cut into pieces that fit)
                         is [CLS] piece [SEP], and several go into one row; the row's
                         document_ids (1, 1, 2, 2, 2, ...) keep attention inside each document
    nsp_examples         MLM + NSP, the scheme of Google's create_pretraining_data.py:
                         [CLS] A [SEP] B [SEP] where B follows A in the document (label 0) or is a
                         span of another document (label 1)

Example.word_ids numbers the whole words of a row from 0 (tokens of one word share a number) and is
-1 at [CLS] / [SEP]; the masking collator uses it to mask whole words.
"""

from __future__ import annotations

import bisect
import logging
import random
from dataclasses import dataclass

from bertkit.data.seeded import hash64
from bertkit.errors import ConfigError
from bertkit.text import CLOSERS, SENTENCE_FINAL, is_cjk


@dataclass
class Example:
    """One training row (no padding). next_sentence_label: 0 = B follows A, 1 = B is random, None = no NSP."""

    input_ids: list[int]
    token_type_ids: list[int]
    word_ids: list[int]
    next_sentence_label: int | None = None
    document_ids: list[int] | None = None  # packed rows: 1, 1, ..., 2, 2, ... per token (None: one document)


@dataclass
class TokenizedDoc:
    """A document's tokens (no special tokens), with a whole-word id and a sentence index per token.
    Both are non-decreasing along the document and start at 0."""

    ids: list[int]
    words: list[int]
    sentences: list[int]


# ----- tokenizing --------------------------------------------------------------------------------
def tokenize_documents(
    tokenizer, docs: list[str], *, chinese_words: bool = False, batch_size: int = 1000
) -> list[TokenizedDoc]:
    """One TokenizedDoc per document (in order; an empty document gives empty lists).

    words: WordPiece pieces of one word share an id ("un", "##believ", "##able"). BERT splits Chinese
    into single characters, so each is its own word, unless chinese_words=True: then jieba segments
    the text and the characters of one jieba word share an id (whole-word masking for Chinese, as in
    Chinese-BERT-wwm). jieba runs on the original text; the tokenizer's offsets point into it.
    sentences: a new sentence starts after 。！？!? (and closing quotes right after them), after ". "
    (a full stop followed by whitespace) and at every line break.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    segment = _jieba_segmenter() if chinese_words else None
    out: list[TokenizedDoc] = []
    for start in range(0, len(docs), batch_size):
        batch = list(docs[start : start + batch_size])
        encoded = tokenizer(
            batch,
            add_special_tokens=False,
            return_offsets_mapping=True,
            return_token_type_ids=False,
            return_attention_mask=False,
        )
        for text, encoding in zip(batch, encoded.encodings):
            out.append(_marks(text, encoding, segment(text) if segment else None))
    return out


def _marks(text: str, encoding, jieba_words: list[int] | None) -> TokenizedDoc:
    """Word and sentence ids for one encoded document."""
    ids, offsets, pieces_of = encoding.ids, encoding.offsets, encoding.word_ids
    words: list[int] = []
    sentences: list[int] = []
    word = sentence = -1
    prev_piece_word = None
    prev_end = 0
    prev_jieba = -1  # jieba word of the previous token if it was a CJK character, else -1
    ended = False  # the sentence ended at the previous token (more closers / final marks may follow)
    prev_dot = False
    for j in range(len(ids)):
        start, end = offsets[j]
        piece = text[start:end]
        gap = text[prev_end:start] if j else ""
        # sentence
        if j == 0 or "\n" in gap:
            sentence += 1
            ended = False
        elif ended and (gap or not (piece in CLOSERS or piece in SENTENCE_FINAL)):
            sentence += 1
            ended = False
        elif prev_dot and gap and not gap.strip():
            sentence += 1
        if piece and piece[-1] in SENTENCE_FINAL:
            ended = True
        prev_dot = piece == "."
        # whole word
        this_jieba = -1
        if jieba_words is not None and end - start == 1 and is_cjk(piece):
            this_jieba = jieba_words[start]
        # "##" pieces of one pre-tokenized word share it
        same_word = pieces_of[j] is not None and pieces_of[j] == prev_piece_word and not gap
        if this_jieba >= 0 and this_jieba == prev_jieba and not gap:
            same_word = True  # two characters of one jieba word
        if not same_word:
            word += 1
        words.append(word)
        sentences.append(sentence)
        prev_piece_word, prev_end, prev_jieba = pieces_of[j], end, this_jieba
    return TokenizedDoc(ids=list(ids), words=words, sentences=sentences)


def _jieba_segmenter():
    """text -> per character, the index of the multi-character jieba word it is in (-1 for the rest)."""
    try:
        import jieba
    except ImportError:
        raise ConfigError(
            "chinese_words=True segments words with jieba, which is not installed: pip install jieba"
        ) from None
    jieba.setLogLevel(logging.WARNING)  # no "Building prefix dict..." on every run

    def segment(text: str) -> list[int]:
        marks = [-1] * len(text)
        position = 0
        for index, w in enumerate(jieba.cut(text)):
            if len(w) > 1:
                marks[position : position + len(w)] = [index] * len(w)
            position += len(w)
        return marks

    return segment


# ----- packing (MLM only) ------------------------------------------------------------------------
def pack_examples(docs: list[TokenizedDoc], seq_len: int, cls_id: int, sep_id: int) -> list[Example]:
    """Rows of [CLS] + seq_len-2 tokens of the stream + [SEP], the stream being all documents joined
    with one [SEP] between neighbours (empty documents are skipped).

    Every stream token lands in exactly one row. The remainder after the last full row becomes a
    shorter final row if it holds at least half a chunk ((seq_len - 2) / 2 tokens); a shorter tail is
    dropped, as a nearly empty row would cost a full row of compute in a padded batch.
    """
    if seq_len < 3:
        raise ConfigError(f"seq_len must be >= 3 ([CLS], a token, [SEP]), got {seq_len}")
    stream_ids: list[int] = []
    stream_words: list[int] = []  # word ids made unique across documents; -1 at the separators
    next_word = 0
    for doc in docs:
        if not doc.ids:
            continue
        if stream_ids:
            stream_ids.append(sep_id)
            stream_words.append(-1)
        stream_ids.extend(doc.ids)
        stream_words.extend(w + next_word for w in doc.words)
        next_word += doc.words[-1] + 1
    chunk = seq_len - 2
    rows = []
    for start in range(0, len(stream_ids), chunk):
        ids = stream_ids[start : start + chunk]
        if len(ids) < chunk and 2 * len(ids) < chunk:
            break  # the short tail
        rows.append(
            Example(
                input_ids=[cls_id, *ids, sep_id],
                token_type_ids=[0] * (len(ids) + 2),
                word_ids=[-1, *_renumber(stream_words[start : start + chunk]), -1],
            )
        )
    return rows


def pack_documents(docs: list[TokenizedDoc], seq_len: int, cls_id: int, sep_id: int) -> list[Example]:
    """Rows of up to seq_len tokens holding whole pieces [CLS] piece [SEP], one document apart from the next.

    A document longer than seq_len - 2 tokens is cut into pieces of seq_len - 2 (the last one
    shorter). Pieces go into rows best-fit, longest first (a deterministic order), so rows are
    nearly full and almost nothing is padded. document_ids numbers the pieces of a row 1, 2, ...;
    the model lets a token attend only to its own piece, and positions restart at 0 in each.
    """
    if seq_len < 3:
        raise ConfigError(f"seq_len must be >= 3 ([CLS], a token, [SEP]), got {seq_len}")
    chunk = seq_len - 2
    pieces = [(doc.ids[i : i + chunk], doc.words[i : i + chunk]) for doc in docs for i in range(0, len(doc.ids), chunk)]
    order = sorted(range(len(pieces)), key=lambda i: (-len(pieces[i][0]), i))
    rows: list[list[int]] = []  # piece numbers per row
    room: list[tuple[int, int]] = []  # (free tokens, row), sorted: the best fit is the first with enough
    for i in order:
        need = len(pieces[i][0]) + 2
        at = bisect.bisect_left(room, (need, -1))
        if at < len(room):
            free, row = room.pop(at)
        else:
            free, row = seq_len, len(rows)
            rows.append([])
        rows[row].append(i)
        if free - need >= 3:
            bisect.insort(room, (free - need, row))
    out = []
    for members in rows:
        ids, words, documents, next_word = [], [], [], 0
        for number, i in enumerate(sorted(members), start=1):
            piece_ids, piece_words = pieces[i]
            renumbered = _renumber(piece_words, next_word)
            next_word = max(renumbered, default=next_word - 1) + 1
            ids += [cls_id, *piece_ids, sep_id]
            words += [-1, *renumbered, -1]
            documents += [number] * (len(piece_ids) + 2)
        out.append(Example(input_ids=ids, token_type_ids=[0] * len(ids), word_ids=words, document_ids=documents))
    return out


def _renumber(words: list[int], first: int = 0) -> list[int]:
    """Number whole words first, first+1, ... in order of appearance; -1 stays -1."""
    out, last, n = [], None, first - 1
    for w in words:
        if w < 0:
            out.append(-1)
            continue
        if w != last:
            n, last = n + 1, w
        out.append(n)
    return out


# ----- next-sentence pairs -----------------------------------------------------------------------
def nsp_examples(
    docs: list[TokenizedDoc],
    seq_len: int,
    cls_id: int,
    sep_id: int,
    *,
    seed: int,
    short_seq_prob: float = 0.1,
    keys: list[int] | None = None,
) -> list[Example]:
    """[CLS] A [SEP] B [SEP] rows, as Google's create_instances_from_document (one pass over the docs).

    Per document a target length (seq_len - 3, or with probability short_seq_prob a random length
    from 2) is drawn; whole sentences are gathered into a chunk until it reaches the target (or the
    document ends). The chunk is cut at a random sentence boundary into A and B. With probability 0.5
    B is replaced by sentences of another document, from a random sentence on, up to the target
    (label 1), and the chunk's unused sentences go back to the document; else B is the real
    continuation (label 0). The pair is then cut to seq_len - 3 tokens, one token at a time from the
    longer side, at its front or back at random (so a real B follows A in the document, with only
    tokens cut by this truncation between them). Labels follow transformers: 0 = B is the
    continuation, 1 = B is random.

    One change from Google's code, which gives every one-sentence chunk (a sentence as long as the
    target, a document's last sentence, most chunks of a short target) a random B, and so about 56%
    random pairs on People's Daily: here the coin comes first, and a one-sentence chunk that is to
    get a real B takes the document's next sentence as B (at the document's end: its previous
    sentence as A). Only a document of a single sentence always gets a random B.

    Randomness (so that each document can be walked on its own, in any process): document d is walked
    with random.Random(hash64(seed, 15, keys[d])) (keys: default 0, 1, ... over the non-empty
    documents); each row then takes 64 bits from it, and everything about that row left to chance
    (the random B's document and first sentence, the truncation's fronts and backs) comes from
    random.Random(those bits): the other document, then its sentence, then the count of front cuts of
    A (the popcount of as many random bits as A loses tokens), then of B.
    """
    if seq_len < 5:
        raise ConfigError(f"seq_len must be >= 5 for sentence pairs ([CLS] A [SEP] B [SEP]), got {seq_len}")
    if not 0.0 <= short_seq_prob <= 1.0:
        raise ConfigError(f"short_seq_prob must be in [0, 1], got {short_seq_prob}")
    documents = [_sentences(d) for d in docs if d.ids]
    if len(documents) < 2:
        raise ConfigError(
            f"next-sentence pairs need at least 2 non-empty documents (random B sentences come "
            f"from another document), got {len(documents)}"
        )
    keys = list(range(len(documents))) if keys is None else keys
    max_tokens = seq_len - 3
    rows: list[Example] = []
    for d, document in enumerate(documents):
        rng = random.Random(int(hash64(seed, 15, keys[d])[0]))
        target = max_tokens
        if rng.random() < short_seq_prob:
            target = rng.randint(2, max_tokens)
        chunk: list[tuple[list[int], list[int]]] = []
        length = 0
        i = 0
        while i < len(document):
            chunk.append(document[i])
            length += len(document[i][0])
            if i == len(document) - 1 or length >= target:
                is_random = rng.random() < 0.5
                if not is_random and len(chunk) == 1:  # a real B needs a second sentence
                    if i + 1 < len(document):
                        i += 1
                        chunk.append(document[i])  # the next one as B
                    elif i > 0:
                        chunk.insert(0, document[i - 1])  # at the end: the one before as A
                    else:
                        is_random = True  # a one-sentence document
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                a_ids, a_words = _join(chunk[:a_end])
                row_rng = random.Random(rng.getrandbits(64))
                if is_random:
                    other = row_rng.randrange(len(documents) - 1)
                    other += other >= d  # any document but this one
                    b_ids, b_words = [], []
                    source = documents[other]
                    for s in range(row_rng.randrange(len(source)), len(source)):
                        b_ids += source[s][0]
                        b_words += source[s][1]
                        if len(b_ids) >= target - len(a_ids):
                            break
                    i -= len(chunk) - a_end  # the chunk's unused sentences are read again
                else:
                    b_ids, b_words = _join(chunk[a_end:])
                rows.append(
                    _pair_row(a_ids, a_words, b_ids, b_words, int(is_random), max_tokens, cls_id, sep_id, row_rng)
                )
                chunk, length = [], 0
            i += 1
    return rows


def _sentences(doc: TokenizedDoc) -> list[tuple[list[int], list[int]]]:
    """[(ids, words) of each sentence]."""
    out, start = [], 0
    for j in range(1, len(doc.ids) + 1):
        if j == len(doc.ids) or doc.sentences[j] != doc.sentences[j - 1]:
            out.append((doc.ids[start:j], doc.words[start:j]))
            start = j
    return out


def _join(sentences):
    ids, words = [], []
    for s_ids, s_words in sentences:
        ids += s_ids
        words += s_words
    return ids, words


def _pair_row(a_ids, a_words, b_ids, b_words, label, max_tokens, cls_id, sep_id, rng) -> Example:
    # Google's truncate_seq_pair: drop one token at a time from the longer side (B on a tie); how many of a
    # side's cut tokens come off its front: the popcount of that many random bits (A's first, then B's)
    a_cut = b_cut = 0
    while (len(a_ids) - a_cut) + (len(b_ids) - b_cut) > max_tokens:
        if len(a_ids) - a_cut > len(b_ids) - b_cut:
            a_cut += 1
        else:
            b_cut += 1
    a_front = bin(rng.getrandbits(a_cut)).count("1") if a_cut else 0
    b_front = bin(rng.getrandbits(b_cut)).count("1") if b_cut else 0
    a_lo, a_hi = a_front, len(a_ids) - (a_cut - a_front)
    b_lo, b_hi = b_front, len(b_ids) - (b_cut - b_front)
    a, b = a_ids[a_lo:a_hi], b_ids[b_lo:b_hi]
    a_w = _renumber(a_words[a_lo:a_hi])
    b_w = _renumber(b_words[b_lo:b_hi], first=a_w[-1] + 1)
    return Example(
        input_ids=[cls_id, *a, sep_id, *b, sep_id],
        token_type_ids=[0] * (len(a) + 2) + [1] * (len(b) + 1),
        word_ids=[-1, *a_w, -1, *b_w, -1],
        next_sentence_label=label,
    )
