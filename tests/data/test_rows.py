"""bertkit.data.rows: pretraining rows (stream, documents, pairs) from a dataset folder, equal to the reference."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import reference_rows as ref
from data_helpers import (
    all_rows,
    assert_rows_equal,
    padded,
    prepared,
    split_documents,
    within,
    write_jsonl,
    write_split,
)

from bertkit.data import prepare as prepare_module
from bertkit.data.corpus import is_heldout
from bertkit.data.dataset import PretrainingData
from bertkit.data.prepare import prepare
from bertkit.data.rows import RowBatch, make_rows
from bertkit.errors import ConfigError

pytest.importorskip("snownlp")


KINDS = ("stream", "documents", "pairs")


# ----- rows: equal to the reference --------------------------------------------------------------
@pytest.fixture(scope="module")
def reviews_data(tmp_path_factory, reviews, zh_tokenizer):
    return prepared(tmp_path_factory.mktemp("reviews"), reviews[::2], zh_tokenizer)  # 2,500, both files


def reference_rows(docs, kind: str, seq_len: int, cls: int, sep: int, seed: int, **kw):
    if kind == "stream":
        return ref.pack_examples(docs, seq_len, cls, sep)
    if kind == "documents":
        return ref.pack_documents(docs, seq_len, cls, sep)
    return ref.nsp_examples(docs, seq_len, cls, sep, seed=seed, **kw)


def check_rows(data, kind: str, seq_len: int, seed: int = 0, **kw):
    cls, sep = data.tok.cls_token_id, data.tok.sep_token_id
    rows = make_rows(data.train, kind, seq_len=seq_len, cls_id=cls, sep_id=sep, seed=seed, **kw)
    examples = reference_rows(data.ref_train, kind, seq_len, cls, sep, seed, **kw)
    assert len(examples) > 20
    assert_rows_equal(rows, examples, kind)
    return rows, examples


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seq_len", [16, 37, 128])
def test_rows_equal_the_reference_on_peoples_daily(pd, kind, seq_len):
    check_rows(pd, kind, seq_len, seed=seq_len)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seq_len", [16, 64])
def test_rows_equal_the_reference_on_reviews(reviews_data, kind, seq_len):
    """Reviews are short: several documents to a row (stream, documents), most pairs with a random B."""
    rows, examples = check_rows(reviews_data, kind, seq_len, seed=seq_len + 1)
    if kind == "documents" and seq_len == 64:
        pieces = [e.document_ids[-1] for e in examples]
        assert np.mean(pieces) > 1.3 and max(pieces) >= 3


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seq_len", [37, 128])
def test_rows_equal_the_reference_with_whole_words(wwm_data, kind, seq_len):
    check_rows(wwm_data, kind, seq_len, seed=2)


@pytest.mark.parametrize("kind", KINDS)
def test_rows_equal_the_reference_in_english(en_data, kind):
    check_rows(en_data, kind, 64, seed=3, **({"short_seq_prob": 0.5} if kind == "pairs" else {}))


def test_heldout_rows_equal_the_reference(pd, zh_tokenizer):
    docs = ref.tokenize_documents(zh_tokenizer, pd.held_texts)
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    for kind in KINDS:
        rows = make_rows(pd.heldout, kind, seq_len=64, cls_id=cls, sep_id=sep, seed=9)
        assert_rows_equal(rows, reference_rows(docs, kind, 64, cls, sep, 9), kind)


@pytest.fixture(scope="module")
def pd_all(tmp_path_factory, articles, zh_tokenizer, articles_ref):
    """Every article of People's Daily, 1% held out (slow tests only)."""
    return prepared(
        tmp_path_factory.mktemp("pd_all"), articles, zh_tokenizer, heldout=0.01, seed=1, reference=articles_ref
    )


@pytest.mark.slow
@pytest.mark.parametrize("seq_len", [37, 128])
def test_rows_equal_the_reference_on_all_of_peoples_daily(pd_all, seq_len):
    for kind in KINDS:
        check_rows(pd_all, kind, seq_len, seed=4)


def test_batch_takes_rows_in_any_order(pd, zh_tokenizer):
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    for kind in KINDS:
        rows = make_rows(pd.train, kind, seq_len=48, cls_id=cls, sep_id=sep, seed=1)
        examples = reference_rows(pd.ref_train, kind, 48, cls, sep, 1)
        order = [len(rows) - 1, 5, 2, 5, 0]  # any order, repeats allowed, padded to the longest of these
        got, want = rows.batch(order, words=True), padded([examples[i] for i in order], kind)
        plain = rows.batch(np.array(order))
        assert plain.word_ids is None
        for name in ("input_ids", "token_type_ids", "attention_mask"):
            assert np.array_equal(getattr(got, name), want[name]) and np.array_equal(getattr(plain, name), want[name])
        assert np.array_equal(got.word_ids, want["word_ids"])
        with pytest.raises(IndexError):
            rows.batch([len(rows)])
        with pytest.raises(IndexError):
            rows.batch([-1])


def test_make_rows_checks(pd, zh_tokenizer):
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    with pytest.raises(ConfigError, match="unknown kind"):
        make_rows(pd.train, "sentences", seq_len=64, cls_id=cls, sep_id=sep)
    for kind, smallest in (("stream", 3), ("documents", 3), ("pairs", 5)):
        with pytest.raises(ConfigError, match="seq_len"):
            make_rows(pd.train, kind, seq_len=smallest - 1, cls_id=cls, sep_id=sep)
        assert len(make_rows(pd.train, kind, seq_len=smallest, cls_id=cls, sep_id=sep)) > 0
    with pytest.raises(ConfigError, match="short_seq_prob"):
        make_rows(pd.train, "pairs", seq_len=64, cls_id=cls, sep_id=sep, short_seq_prob=1.5)
    with pytest.raises(TypeError):
        make_rows(pd.train, "stream", seq_len=64, cls_id=cls, sep_id=sep).label(0)


# ----- rows: properties --------------------------------------------------------------------------
def row_lists(batch: RowBatch):
    """Per row: (ids, types, mask, words) without the padding."""
    for b in range(len(batch.input_ids)):
        n = int((batch.attention_mask[b] > 0).sum())
        assert (batch.attention_mask[b, n:] == 0).all() and (batch.input_ids[b, n:] == 0).all()
        yield (
            batch.input_ids[b, :n].tolist(),
            batch.token_type_ids[b, :n].tolist(),
            batch.attention_mask[b, :n].tolist(),
            batch.word_ids[b, :n].tolist(),
        )


def assert_words_numbered(words, ids, cls, sep):
    inner = [w for w in words if w >= 0]
    assert inner[0] == 0 and all(0 <= b - a <= 1 for a, b in zip(inner, inner[1:]))
    assert all((w < 0) == (t in (cls, sep)) for w, t in zip(words, ids))


def as_reference_doc(ids, word_starts, sentence_starts) -> ref.TokenizedDoc:
    return ref.TokenizedDoc(
        list(map(int, ids)), (np.cumsum(word_starts) - 1).tolist(), (np.cumsum(sentence_starts) - 1).tolist()
    )


def test_packing_keeps_every_token(pd, zh_tokenizer):
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    stream = []
    for ids, _, _ in split_documents(pd.train):
        stream += ([sep] if stream else []) + ids.tolist()
    for seq_len in (128, 37):
        rows = make_rows(pd.train, "stream", seq_len=seq_len, cls_id=cls, sep_id=sep)
        batch = all_rows(rows)
        chunk = seq_len - 2
        tail = len(stream) % chunk
        kept_tail = 2 * tail >= chunk
        assert len(rows) == len(stream) // chunk + kept_tail
        inner = []
        for b, (ids, types, mask, words) in enumerate(row_lists(batch)):
            assert len(ids) == seq_len or b == len(rows) - 1
            assert ids[0] == cls and ids[-1] == sep and set(types) == {0} and set(mask) == {1}
            assert_words_numbered(words, ids, cls, sep)
            inner += ids[1:-1]
        assert len(inner) == len(stream) - (0 if kept_tail else tail)  # exact count
        assert inner == stream[: len(inner)]  # each token once, in order


def test_packing_tail_rule(tmp_path):
    doc = (list(range(10, 30)), [True] * 20, [True] + [False] * 19)  # 20 tokens, each its own word
    split = write_split(tmp_path, [doc], vocab_size=40)

    def lengths(seq_len):
        rows = make_rows(split, "stream", seq_len=seq_len, cls_id=1, sep_id=2)
        return [int((m > 0).sum()) for m in all_rows(rows).attention_mask]

    assert lengths(10) == [10, 10, 6]  # tail 4 = half a chunk: kept
    assert lengths(8) == [8, 8, 8]  # tail 2 < 3: dropped
    row = make_rows(split, "stream", seq_len=8, cls_id=1, sep_id=2).batch([1], words=True)
    assert row.word_ids[0].tolist() == [-1, 0, 1, 2, 3, 4, 5, -1]
    assert row.input_ids[0].tolist() == [1, 16, 17, 18, 19, 20, 21, 2]
    with pytest.raises(ConfigError):
        make_rows(split, "stream", seq_len=2, cls_id=1, sep_id=2)
    for seq_len in (3, 7, 8, 10, 12, 22, 23, 40):  # the reference agrees at every size (12, 22: no tail)
        docs = [as_reference_doc(*doc)]
        for kind in ("stream", "documents"):
            assert_rows_equal(
                make_rows(split, kind, seq_len=seq_len, cls_id=1, sep_id=2),
                reference_rows(docs, kind, seq_len, 1, 2, 0),
                kind,
            )


def test_documents_are_kept_whole_and_apart(pd, zh_tokenizer):
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    seq_len = 64
    rows = make_rows(pd.train, "documents", seq_len=seq_len, cls_id=cls, sep_id=sep)
    pieces = []
    used = 0
    for ids, types, numbers, words in row_lists(all_rows(rows)):
        assert len(ids) <= seq_len and set(types) == {0}
        assert numbers[0] == 1 and all(b - a in (0, 1) for a, b in zip(numbers, numbers[1:]))
        for number in range(1, numbers[-1] + 1):
            span = [ids[i] for i, d in enumerate(numbers) if d == number]
            assert span[0] == cls and span[-1] == sep and cls not in span[1:-1] and sep not in span[1:-1]
            pieces.append(tuple(span[1:-1]))
        assert_words_numbered(words, ids, cls, sep)
        used += len(ids)
    # every document is there exactly once, cut into pieces of seq_len - 2 in order
    want = sorted(
        tuple(ids[i : i + seq_len - 2].tolist())
        for ids, _, _ in split_documents(pd.train)
        for i in range(0, len(ids), seq_len - 2)
    )
    assert sorted(pieces) == want
    assert used / (len(rows) * seq_len) > 0.95  # best-fit packing leaves little padding
    again = make_rows(pd.train, "documents", seq_len=seq_len, cls_id=cls, sep_id=sep)
    assert np.array_equal(all_rows(again).input_ids, all_rows(rows).input_ids)  # deterministic


def test_pairs_rows_and_label_balance(pd, zh_tokenizer):
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    rows = make_rows(pd.train, "pairs", seq_len=128, cls_id=cls, sep_id=sep, seed=0)
    batch = all_rows(rows)
    labels = Counter(batch.next_sentence_label.tolist())
    assert set(labels) == {0, 1} and len(rows) > 2000
    assert within(labels[1], len(rows), 0.5), labels
    short = 0
    for ids, types, mask, words in row_lists(batch):
        n = len(ids)
        assert n <= 128 and ids[0] == cls and ids[-1] == sep and set(mask) == {1}
        first_sep = ids.index(sep)
        assert types == [0] * (first_sep + 1) + [1] * (n - first_sep - 1)
        assert first_sep > 1 and n - first_sep > 2  # A and B are not empty
        assert_words_numbered(words, ids, cls, sep)
        short += n < 100
    assert short > 0.05 * len(rows)  # short_seq_prob gives shorter rows
    again = all_rows(make_rows(pd.train, "pairs", seq_len=128, cls_id=cls, sep_id=sep, seed=0))
    assert np.array_equal(again.input_ids, batch.input_ids)  # seeded
    other = make_rows(pd.train, "pairs", seq_len=128, cls_id=cls, sep_id=sep, seed=1)
    assert not np.array_equal(all_rows(other).next_sentence_label[:500], batch.next_sentence_label[:500])


@pytest.mark.slow
def test_pairs_label_balance_on_all_of_peoples_daily(pd_all, zh_tokenizer):
    rows = make_rows(
        pd_all.train, "pairs", seq_len=128, cls_id=zh_tokenizer.cls_token_id, sep_id=zh_tokenizer.sep_token_id
    )
    labels = Counter(rows.batch(np.arange(len(rows))).next_sentence_label.tolist())
    assert len(rows) > 10000 and within(labels[1], len(rows), 0.5), labels


def test_pair_labels_are_true(tmp_path, pd):
    """Ids replaced by their position in the corpus (the real sentence structure kept): a real pair is A then B
    from one document, in order, cut at a sentence boundary; a random B comes from another document. Tokens are
    trimmed off the pair's edges only to fit seq_len - 3 exactly."""
    docs, boundaries, position = [], [], 100
    for ids, words, sentences in split_documents(pd.train):
        docs.append((np.arange(position, position + len(ids)), words, sentences))
        boundaries.append(set(np.flatnonzero(sentences).tolist()) | {len(ids)})
        position += len(ids)
    split = write_split(tmp_path, docs, vocab_size=position)
    offsets = np.asarray(split.offsets)

    def where(token: int) -> tuple[int, int]:
        d = int(np.searchsorted(offsets, token - 100, side="right") - 1)
        return d, token - 100 - int(offsets[d])

    seen = Counter()
    for seq_len in (128, 48):
        rows = make_rows(split, "pairs", seq_len=seq_len, cls_id=1, sep_id=2, seed=seq_len, short_seq_prob=0.2)
        batch = rows.batch(np.arange(len(rows)))
        for ids, label in zip(row_lists_plain(batch), batch.next_sentence_label.tolist()):
            first_sep = ids.index(2)
            a, b = ids[1:first_sep], ids[first_sep + 1 : -1]
            (da, ka), (db, kb) = where(a[0]), where(b[0])
            assert a == list(range(a[0], a[0] + len(a))) and b == list(range(b[0], b[0] + len(b)))  # spans
            whole = {ka, ka + len(a)} <= boundaries[da] and {kb, kb + len(b)} <= boundaries[db]
            if label == 0:
                assert da == db and kb >= ka + len(a), "a real B follows its A in the same document"
                assert any(ka + len(a) <= k <= kb for k in boundaries[da]), "cut at a sentence boundary"
                whole = whole and kb == ka + len(a)
            else:
                assert da != db, "a random B comes from another document"
            assert whole or len(a) + len(b) == seq_len - 3, "trimmed only to fit"
            seen[label] += 1
    assert seen[0] > 1000 and seen[1] > 1000


@pytest.mark.parametrize("seq_len", [37, 128])
def test_pairs_stored_by_prepare_equal_the_reference(tmp_path, articles, zh_tokenizer, seq_len):
    """bertkit prepare walks each document's pairs in its workers, keyed by the document's place in the corpus and
    seeded by prepare's seed, and stores the plan: rows at that seq_len come from it (no walk, whatever the run's
    seed), equal to the reference walked the same way; another seq_len is walked at the start as without one."""
    texts = articles[:5] + ["\u200b"] + articles[5:160]  # a document without a token keeps its place as a key
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prepare_module, "BLOCK_CHARS", 20_000)  # many blocks, several appends per split
        data = prepared(tmp_path, texts, zh_tokenizer, heldout=0.1, seed=7, nsp_seq_len=seq_len)
    held = is_heldout(np.arange(len(texts)), 0.1, 7)
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    for name, split in (("train", data.train), ("heldout", data.heldout)):
        keys = [i for i, t in enumerate(texts) if held[i] == (name == "heldout") and t != "\u200b"]
        docs = ref.tokenize_documents(zh_tokenizer, [texts[i] for i in keys])
        for run_seed in (0, 3):
            rows = make_rows(split, "pairs", seq_len=seq_len, cls_id=cls, sep_id=sep, seed=run_seed)
            assert isinstance(rows.plan, np.memmap)  # the stored plan, not a walk
            assert_rows_equal(rows, ref.nsp_examples(docs, seq_len, cls, sep, seed=7, keys=keys), "pairs")
    other = make_rows(data.train, "pairs", seq_len=64, cls_id=cls, sep_id=sep, seed=3)
    assert not isinstance(other.plan, np.memmap)
    assert_rows_equal(other, reference_rows(data.ref_train, "pairs", 64, cls, sep, 3), "pairs")


def test_stored_pairs_do_not_depend_on_workers_or_blocks(tmp_path, articles, zh_tokenizer):
    texts = articles[:300]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", texts)
    prepare(corpus, zh_tokenizer, str(tmp_path / "one"), heldout=0.05, seed=2, workers=1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prepare_module, "BLOCK_CHARS", 5_000)
        prepare(corpus, zh_tokenizer, str(tmp_path / "two"), heldout=0.05, seed=2, workers=2)
    one, two = PretrainingData.open(str(tmp_path / "one")), PretrainingData.open(str(tmp_path / "two"))
    assert one.manifest == {**two.manifest, "sources": one.manifest["sources"]}
    for name in ("train", "heldout"):
        assert len(one.splits[name].pairs) > 20
        assert np.array_equal(one.splits[name].pairs, two.splits[name].pairs)


def row_lists_plain(batch: RowBatch):
    for b in range(len(batch.input_ids)):
        n = int((batch.attention_mask[b] > 0).sum())
        yield batch.input_ids[b, :n].tolist()


def test_pairs_need_two_documents(tmp_path):
    doc = ([5, 6, 7], [True, True, True], [True, False, True])
    one = write_split(tmp_path / "one", [doc], vocab_size=10)
    with pytest.raises(ConfigError, match="at least 2"):
        make_rows(one, "pairs", seq_len=16, cls_id=1, sep_id=2)
    two = write_split(tmp_path / "two", [doc, doc], vocab_size=10)
    rows = make_rows(two, "pairs", seq_len=16, cls_id=1, sep_id=2)
    assert len(rows) > 0 and rows.batch(np.arange(len(rows))).input_ids.shape[1] <= 16
    docs = [as_reference_doc(*doc)] * 2
    for seed in range(5):
        assert_rows_equal(
            make_rows(two, "pairs", seq_len=16, cls_id=1, sep_id=2, seed=seed),
            reference_rows(docs, "pairs", 16, 1, 2, seed),
            "pairs",
        )
