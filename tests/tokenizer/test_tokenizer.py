"""bertkit.tokenizer's encoding against transformers' BertTokenizerFast and the slow BertTokenizer.

Ids, offsets and word ids of texts and pairs, truncation, padding, overflowing windows, tensors, property tests on
any text, pre-split words, padding warnings and the helpers transformers' users call. The texts, vocabularies and
comparisons are in tokenizer_helpers.py and this folder's conftest.py; decoding, folders and settings, bad input, never_split,
vocabulary training and `bertkit tokenize` are tested in files of their own.
"""

from __future__ import annotations

import contextlib
import logging
import re
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tokenizer_helpers import (  # noqa: E402
    DISAGREE,
    HAND,
    KEYS,
    MINILM,
    PROPS,
    ZH_WORDS,
    _plain,
    assert_same,
    bert_normalise,
    is_cjk,
    needs_minilm,
)
from transformers import BertTokenizerFast  # noqa: E402

from bertkit.tokenizer import BatchEncoding, Tokenizer, TokenizerError, read_vocab  # noqa: E402

SLOW_KEYS = KEYS[:4]  # the slow tokenizer has no offsets


# ----- parity on real and hand-written text --------------------------------------------------------
def test_slow_and_fast_agree_on_the_hand_written_cases(kit):
    """Guards the test data: the parity test below compares all three tokenizers on HAND."""
    for text in HAND:
        assert kit.slow(text)["input_ids"] == kit.fast(text)["input_ids"], text


def test_corpus_and_hand_written_text_match_fast_and_slow(kit, sample):
    ours = kit.ours()
    texts = sample + HAND
    kw = dict(return_special_tokens_mask=True, return_offsets_mapping=True)
    got, want = ours(texts, **kw), kit.fast(texts, **kw)
    assert_same(got, want, where=kit.name)
    # without offsets bertkit takes another backend path; the ids must not change
    assert ours(texts)["input_ids"] == want["input_ids"]
    n_unk = sum(row.count(ours.unk_token_id) for row in got["input_ids"][: len(sample)])
    if kit.name == "zh":  # the vocabulary holds every character of the corpora
        assert n_unk == 0
    for i, text in enumerate(texts):
        slow = kit.slow(text, return_special_tokens_mask=True)
        for key in SLOW_KEYS:
            assert got[key][i] == slow[key], (kit.name, key, text[:60])
        one = ours(text, **kw)  # a single text gives one row, not a batch
        assert one["input_ids"] == got["input_ids"][i] and one["offset_mapping"] == got["offset_mapping"][i]


def test_pairs_match_fast_and_slow(kit, sample):
    ours = kit.ours()
    a, b = sample[:300:3] + HAND, sample[300::3] + HAND[::-1]
    kw = dict(return_special_tokens_mask=True, return_offsets_mapping=True)
    got = ours(a, b, **kw)
    assert_same(got, kit.fast(a, b, **kw), where=kit.name)
    for i, (x, y) in enumerate(zip(a, b)):
        slow = kit.slow(x, y, return_special_tokens_mask=True)
        for key in SLOW_KEYS:
            assert got[key][i] == slow[key], (kit.name, key, x[:40], y[:40])
        types = got["token_type_ids"][i]
        n_a = types.index(1)
        assert got["input_ids"][i][0] == ours.cls_token_id and got["input_ids"][i][n_a - 1] == ours.sep_token_id
        assert set(types[n_a:]) == {1} and got["input_ids"][i][-1] == ours.sep_token_id


def test_encode_tokenize_and_encode_batch_match_fast(zh_kit, sample):
    ours, fast = zh_kit.ours(), zh_kit.fast
    for text in sample[:40] + HAND:
        assert ours.tokenize(text) == fast.tokenize(text)
        assert ours.encode(text) == fast.encode(text)
        assert ours.encode(text, add_special_tokens=False) == fast.encode(text, add_special_tokens=False)
        assert ours.encode(text, "第二句 second") == fast.encode(text, "第二句 second")
    batch = ours.encode_batch(sample[:10], sample[10:20])
    assert isinstance(batch, BatchEncoding)
    assert batch.input_ids == fast(sample[:10], sample[10:20])["input_ids"]
    assert batch.input_ids == ours(sample[:10], sample[10:20])["input_ids"]


def test_batch_encoding_tokens_and_word_ids_match_fast(zh_kit):
    """BatchEncoding.tokens() / word_ids() / sequence_ids(), whether or not offsets were asked for."""
    ours, fast = zh_kit.ours(), zh_kit.fast
    texts, pairs = ["今天 hello world", "好"], ["second 句子", "x"]
    for kw in (dict(return_offsets_mapping=True), {}):
        got, want = ours(texts, pairs, **kw), fast(texts, pairs)
        for i in range(2):
            assert got.tokens(i) == want.tokens(i), kw
            assert got.word_ids(i) == want.word_ids(i), kw
            assert got.sequence_ids(i) == want.sequence_ids(i), kw
        one = ours(texts[0], **kw)
        assert (
            one.tokens()
            == fast(texts[0]).tokens()
            == ["[CLS]", "今", "天", "he", "##l", "##l", "##o", "w", "##o", "##r", "##l", "##d", "[SEP]"]
        ), kw
        assert one.input_ids == one["input_ids"]


@needs_minilm
def test_tokenize_matches_fast_for_a_tokenizer_json_directory(minilm_kit):
    """MiniLM's tokenizer.json carries padding to 128 and truncation at 128; __call__ resets them, tokenize must too."""
    ours = Tokenizer.from_pretrained(MINILM)
    assert ours.tokenize("hello world") == minilm_kit.fast.tokenize("hello world") == ["hello", "world"]


def test_tokenize_ignores_the_previous_calls_padding_and_truncation(zh_kit):
    ours = zh_kit.ours()
    ours(["一", "二三"], padding="max_length", max_length=10)
    assert ours.tokenize("你好") == ["你", "好"]
    ours("一二三四五六七八", truncation=True, max_length=4)
    assert ours.tokenize("一二三四五六七八") == list("一二三四五六七八")


def test_slow_and_fast_disagree_and_bertkit_follows_fast(kit):
    ours = kit.ours()
    kw = dict(return_special_tokens_mask=True, return_offsets_mapping=True)
    disagreements = 0
    for text in DISAGREE:
        fast, slow = kit.fast(text, **kw), kit.slow(text, return_special_tokens_mask=True)
        assert_same(ours(text, **kw), fast, where=repr(text))
        disagreements += slow["input_ids"] != fast["input_ids"]
    assert disagreements == len(DISAGREE)
    if kit.name == "minilm":
        assert ours.tokenize("ab\u0378cd") == kit.fast.tokenize("ab\u0378cd") == ["[UNK]"]
        assert kit.slow.tokenize("ab\u0378cd") == ["abc", "##d"]  # the slow one dropped U+0378
        assert kit.slow.tokenize("ab\U0002b820cd") == ["ab", "[UNK]", "cd"]
        assert kit.slow.tokenize("ab\u061dcd") == ["ab", "[UNK]", "cd"]


def test_slow_and_fast_disagree_on_pair_truncation(zh_kit):
    """longest_first: when both texts must shrink, the slow one keeps the extra token in A, the fast one in B."""
    ours, fast, slow = zh_kit.ours(), zh_kit.fast, zh_kit.slow
    for a, b, max_length in (("一二三四五六", "七八九十百千", 10), ("一二三四五", "七八九十百千万", 8)):
        want = fast(a, b, truncation=True, max_length=max_length)
        assert slow(a, b, truncation=True, max_length=max_length)["input_ids"] != want["input_ids"]
        assert_same(ours(a, b, truncation=True, max_length=max_length), want, KEYS[:3])
    tokens = ours.convert_ids_to_tokens(ours.encode("一二三四五六", "七八九十百千", truncation=True, max_length=10))
    assert tokens == ["[CLS]", "一", "二", "三", "[SEP]", "七", "八", "九", "十", "[SEP]"]


def test_slow_and_fast_disagree_on_an_empty_pair(zh_kit):
    """BertTokenizerFast drops an empty text_pair of a single input ("if text_pair"); the slow one keeps it."""
    ours, fast, slow = zh_kit.ours(), zh_kit.fast, zh_kit.slow
    assert fast("好", "")["input_ids"] == [2, ours.vocab["好"], 3]
    assert slow("好", "")["input_ids"] == [2, ours.vocab["好"], 3, 3]
    assert ours("好", "")["input_ids"] == fast("好", "")["input_ids"]
    assert ours("好", "")["token_type_ids"] == fast("好", "")["token_type_ids"]


def test_words_over_100_characters_are_unk(kit):
    ours = kit.ours()
    for n, is_unk in ((100, False), (101, True), (400, True)):
        for text in ("a" * n, "ab" * (n // 2) + "a" * (n % 2)):
            ids = ours.encode(text, add_special_tokens=False)
            assert ids == kit.fast.encode(text, add_special_tokens=False)
            assert (ids == [ours.unk_token_id]) == is_unk, (n, text[:10])
    # a run of Chinese characters is split per character, so length does not matter there
    assert ours.tokenize("长" * 150) == kit.fast.tokenize("长" * 150)


def test_mask_typed_in_text_stays_one_token(kit):
    ours = kit.ours()
    for text in ("the capital of france is [MASK].", "今天[MASK]气很好", "[MASK][MASK]x[MASK]", "a [mask] b"):
        ids = ours.encode(text)
        assert ids == kit.fast.encode(text) == kit.slow.encode(text), text
        assert ids.count(ours.mask_token_id) == text.count("[MASK]")
    enc = ours("x [MASK] y", return_offsets_mapping=True)
    i = enc["input_ids"].index(ours.mask_token_id)
    assert enc["offset_mapping"][i] == (2, 8)
    assert ours.mask_token_id == ours.vocab["[MASK]"]


# ----- truncation, padding, overflow, tensors ------------------------------------------------------
PAIRS = [
    ("the quick brown fox jumps over the lazy dog again and again", "short one"),
    ("hello", "a much longer second sentence that goes on and on and on"),
    ("今天天气很好，我们一起去公园散步吧", "好的，明天见"),
    ("一二三四五六七八九十", "one two three four five six seven eight nine ten"),
]


@pytest.mark.parametrize("strategy", ["longest_first", "only_first", "only_second"])
def test_pair_truncation_matches_fast(kit, strategy):
    ours = kit.ours()
    kw = dict(return_special_tokens_mask=True, return_offsets_mapping=True)
    done = raised = 0
    for max_length in (4, 5, 7, 10, 16, 64):
        for a, b in PAIRS:
            try:
                want = kit.fast(a, b, truncation=strategy, max_length=max_length, **kw)
            except Exception:  # tokenizers: "Sequence to truncate too short to respect the provided max_length"
                with pytest.raises(TokenizerError, match="(?i)truncat"):
                    ours(a, b, truncation=strategy, max_length=max_length, **kw)
                raised += 1
                continue
            got = ours(a, b, truncation=strategy, max_length=max_length, **kw)
            assert_same(got, want, where=f"{strategy} {max_length} {a[:10]}")
            assert len(got["input_ids"]) <= max_length
            done += 1
    assert done >= 6
    if strategy != "longest_first":
        assert raised >= 1


def test_single_truncation_and_model_max_length(kit, corpora):
    ours = kit.ours()
    long_text = "".join(corpora[0][:12])  # well over 512 tokens
    for max_length in (3, 5, 10, 100):
        for text in (long_text, "一二三 four five six"):
            got, want = ours(text, max_length=max_length), kit.fast(text, max_length=max_length, truncation=True)
            assert_same(got, want, KEYS[:3])
            assert len(got["input_ids"]) <= max_length
    got = ours(long_text, truncation=True)  # no max_length: the model's limit, 512
    assert got["input_ids"] == kit.fast(long_text, truncation=True, max_length=512)["input_ids"]
    assert len(got["input_ids"]) == 512
    assert len(ours(long_text)["input_ids"]) > 512  # no truncation unless asked


@pytest.mark.parametrize(
    "options",
    [
        dict(padding=True),
        dict(padding="longest"),
        dict(padding="max_length", max_length=64, truncation=True),
        dict(padding="longest", pad_to_multiple_of=8),
        dict(padding="max_length", max_length=40, truncation=True, pad_to_multiple_of=8),
        dict(padding="max_length", max_length=12, truncation=True),
        dict(padding=True, truncation="only_first", max_length=24),
        dict(padding=False, pad_to_multiple_of=8),
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_padding_matches_fast(kit, sample, options):
    ours = kit.ours()
    texts = sample[290:310] + ["", "a"]
    pairs = ["第二句话", "second sentence here"] * 11
    kw = dict(return_special_tokens_mask=True, return_offsets_mapping=True, return_length=True, **options)
    for args in ((texts,), (texts, pairs)) if options.get("truncation") != "only_first" else ((texts, pairs),):
        got, want = ours(*args, **kw), kit.fast(*args, **kw)
        assert_same(got, want, KEYS + ("length",), where=str(options))
        lengths = {len(row) for row in got["input_ids"]}
        if options.get("padding"):
            assert len(lengths) == 1
            n = lengths.pop()
            if options.get("pad_to_multiple_of"):
                assert n % options["pad_to_multiple_of"] == 0
            if options["padding"] == "max_length":
                assert n == -(-options["max_length"] // options.get("pad_to_multiple_of", 1)) * options.get(
                    "pad_to_multiple_of", 1
                )
            for row, mask in zip(got["input_ids"], got["attention_mask"]):
                assert all(i == ours.pad_token_id for i, m in zip(row, mask) if m == 0)
        else:
            assert len(lengths) > 1


def test_overflowing_windows_with_stride_match_fast(kit, corpora):
    ours = kit.ours()
    pd = corpora[0]
    long_zh, long_en = pd[3][:80], "the quick brown fox jumps over the lazy dog " * 4
    kw = dict(return_overflowing_tokens=True, return_offsets_mapping=True, return_special_tokens_mask=True)
    keys = KEYS + ("overflow_to_sample_mapping",)
    cases = [
        ((([long_zh, long_en, "短", ""],), dict(truncation=True)), (8, 12, 20), (0, 1, 3)),
        (((["一二", "hello", "a b"], [long_zh, long_en, "c d"]), dict(truncation="only_second")), (10, 16), (0, 2)),
        ((([long_en, long_zh], ["x y", "好"]), dict(truncation="only_first")), (9, 16), (0, 1, 3)),
        ((([long_en, long_zh], [long_zh, long_en]), dict(truncation="longest_first")), (16, 24), (0, 2)),
    ]
    for (args, trunc), lengths, strides in cases:
        for max_length in lengths:
            for stride in strides:
                opts = dict(kw, max_length=max_length, stride=stride, **trunc)
                got, want = ours(*args, **opts), kit.fast(*args, **opts)
                assert_same(got, want, keys, where=f"{trunc} {max_length} {stride}")
                for padded in (dict(padding=True), dict(padding=True, return_tensors="pt")):
                    p_got, p_want = ours(*args, **opts, **padded), kit.fast(*args, **opts, **padded)
                    assert_same(p_got, p_want, keys, where=f"{trunc} {max_length} {stride} {padded}")
                assert all(len(row) <= max_length for row in got["input_ids"])
                mapping = got["overflow_to_sample_mapping"]
                assert mapping == sorted(mapping) and set(mapping) == set(range(len(args[0])))
                assert len(mapping) > len(args[0])  # something overflowed
    # windows of one long text overlap by exactly `stride` tokens
    stride, max_length = 3, 10
    got = ours(long_zh, max_length=max_length, stride=stride, return_overflowing_tokens=True)
    windows = [row[1:-1] for row in got["input_ids"]]
    assert len(windows) >= 3 and got["overflow_to_sample_mapping"] == [0] * len(windows)
    for left, right in zip(windows, windows[1:]):
        assert left[-stride:] == right[:stride]
    flat = windows[0] + [i for w in windows[1:] for i in w[stride:]]
    assert flat == ours.encode(long_zh, add_special_tokens=False)


def test_return_tensors_pt_are_int64_and_equal_the_lists(kit, sample):
    ours = kit.ours()
    texts, pairs = sample[:5], sample[300:305]
    kw = dict(padding=True, return_special_tokens_mask=True, return_offsets_mapping=True)
    lists, tensors = ours(texts, pairs, **kw), ours(texts, pairs, return_tensors="pt", **kw)
    want = kit.fast(texts, pairs, return_tensors="pt", **kw)
    assert set(tensors) == set(lists)
    for key, value in tensors.items():
        assert isinstance(value, torch.Tensor) and value.dtype == torch.int64, key
        assert value.tolist() == _plain(lists[key]), key
        assert torch.equal(value, want[key].to(torch.int64)), key
    one = ours("今天天气很好", return_tensors="pt")
    assert one["input_ids"].shape == (1, len(ours.encode("今天天气很好")))
    assert torch.equal(one["input_ids"], kit.fast("今天天气很好", return_tensors="pt")["input_ids"])
    assert torch.equal(ours("a b c", return_tensors="pt").attention_mask, torch.ones(1, 5, dtype=torch.int64))
    np_rows = ours(texts, padding=True, return_tensors="np")["input_ids"]
    assert np_rows.dtype.name == "int64" and np_rows.tolist() == ours(texts, padding=True)["input_ids"]


def test_return_length_with_tensors(zh_kit):
    ours, fast = zh_kit.ours(), zh_kit.fast
    texts = ["今天天气很好", "好"]
    got = ours(texts, padding=True, return_length=True, return_tensors="pt")
    want = fast(texts, padding=True, return_length=True, return_tensors="pt")
    assert torch.equal(got["length"], want["length"]) and got["length"].tolist() == [8, 8]
    one = ours("今天", return_length=True, return_tensors="pt")
    assert one["length"].tolist() == fast("今天", return_length=True, return_tensors="pt")["length"].tolist() == [4]


# ----- property tests ------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def ours_pair(minilm_kit, zh_kit):
    return {"minilm": (minilm_kit.ours(), minilm_kit.fast), "zh": (zh_kit.ours(), zh_kit.fast)}


@PROPS
@given(
    text=st.text(max_size=80),
    pair=st.none() | st.text(min_size=1, max_size=30),
    which=st.sampled_from(["minilm", "zh"]),
)
def test_property_any_unicode_text(ours_pair, text, pair, which):
    ours, fast = ours_pair[which]
    enc = ours(text, pair, return_offsets_mapping=True, return_special_tokens_mask=True)
    ids = enc["input_ids"]
    assert all(0 <= i < len(ours) for i in ids)
    assert ids[0] == ours.cls_token_id and ids[-1] == ours.sep_token_id
    for (start, end), seq in zip(enc["offset_mapping"], enc.sequence_ids()):
        source = text if seq in (0, None) else pair
        assert 0 <= start <= end <= len(source)
    assert_same(enc, fast(text, pair, return_offsets_mapping=True, return_special_tokens_mask=True))
    assert isinstance(ours.decode(ids), str) and isinstance(ours.decode(ids, skip_special_tokens=True), str)


@pytest.fixture(scope="session")
def english_words(minilm_kit):
    words = [w for w in read_vocab(str(minilm_kit.vocab_file)) if re.fullmatch(r"[a-z]+", w)]
    return words


@pytest.fixture(scope="session")
def chinese_chars(zh_vocab):
    vocab = read_vocab(str(zh_vocab))
    return [c for c in vocab if len(c) == 1 and (is_cjk(c) or c in "，。！？：；、（）《》「」")]


@PROPS
@given(data=st.data())
def test_property_english_round_trip(ours_pair, english_words, data):
    ours, _ = ours_pair["minilm"]
    words = data.draw(st.lists(st.sampled_from(english_words), min_size=1, max_size=12))
    upper = data.draw(st.lists(st.booleans(), min_size=len(words), max_size=len(words)))
    text = " ".join(w.upper() if u else w for w, u in zip(words, upper))
    ids = ours.encode(text)
    assert ours.unk_token_id not in ids
    assert ours.decode(ids, skip_special_tokens=True) == bert_normalise(text) == " ".join(words)


@PROPS
@given(data=st.data())
def test_property_chinese_and_mixed_round_trip(ours_pair, chinese_chars, data):
    ours, _ = ours_pair["zh"]
    pieces = data.draw(
        st.lists(
            st.one_of(
                st.lists(st.sampled_from(chinese_chars), min_size=1, max_size=8).map("".join).map(lambda s: ("zh", s)),
                st.sampled_from(ZH_WORDS).map(lambda s: ("en", s)),
            ),
            min_size=1,
            max_size=10,
        )
    )
    text = ""
    for i, (kind, s) in enumerate(pieces):
        text += (" " if i and kind == "en" and pieces[i - 1][0] == "en" else "") + s
    ids = ours.encode(text)
    assert ours.unk_token_id not in ids
    assert ours.decode(ids, skip_special_tokens=True) == text


# ----- pre-split words, and pairs of them (transformers: text and text_pair both lists of words) ----------
def test_split_into_words_matches_fast(minilm_kit):
    ours = minilm_kit.ours()
    words = [["Hello", "wonderful", "world", "!"], ["a", "naïve", "café"], ["今", "天"]]
    a = ours(words, is_split_into_words=True, return_offsets_mapping=True)
    b = minilm_kit.fast(words, is_split_into_words=True, return_offsets_mapping=True)
    assert_same(a, b, keys=("input_ids", "token_type_ids", "attention_mask", "offset_mapping"))
    assert [a.word_ids(i) for i in range(3)] == [b.word_ids(i) for i in range(3)]
    single = ours(words[0], is_split_into_words=True)
    assert single["input_ids"] == b["input_ids"][0] and single.word_ids() == b.word_ids(0)
    with pytest.raises(TokenizerError, match="must be a list of strings"):
        ours(["a", 1], is_split_into_words=True)


def test_a_pair_of_split_words_matches_fast_and_slow(minilm_kit):
    ours, fast, slow = minilm_kit.ours(), minilm_kit.fast, minilm_kit.slow
    words, pair = ["my", "name", "is", "john"], ["pair"]
    got, want = ours(words, pair, is_split_into_words=True), fast(words, pair, is_split_into_words=True)
    assert_same(got, want, KEYS[:3])
    assert got.tokens() == want.tokens() == ["[CLS]", "my", "name", "is", "john", "[SEP]", "pair", "[SEP]"]
    assert got.word_ids() == want.word_ids() and got.sequence_ids() == want.sequence_ids()
    assert got["input_ids"] == slow(words, pair, is_split_into_words=True)["input_ids"]
    kw = dict(is_split_into_words=True, return_offsets_mapping=True, return_special_tokens_mask=True)
    words, pair = ["Hello", "wonderful", "naïve", "world", "!"], ("今", "天", "good", "morning")  # a tuple too
    assert_same(ours(words, pair, **kw), fast(words, pair, **kw))
    assert ours(words, [], **kw)["input_ids"] == fast(words, [], **kw)["input_ids"]  # an empty pair is no pair
    for trunc in (dict(truncation="only_second", max_length=9), dict(truncation=True, max_length=7)):
        assert_same(ours(words, pair, **kw, **trunc), fast(words, pair, **kw, **trunc), where=str(trunc))


def test_batches_of_split_word_pairs_match_fast(minilm_kit):
    ours, fast = minilm_kit.ours(), minilm_kit.fast
    words = [["Hello", "wonderful", "world", "!"], ["a", "naïve", "café"], ["今", "天"]]
    pairs = [["pair"], ["b", "unaffable", "c"], ["明", "天", "好"]]
    kw = dict(is_split_into_words=True, return_offsets_mapping=True, return_special_tokens_mask=True)
    for options in ({}, dict(padding=True), dict(truncation="only_second", max_length=9, padding="max_length")):
        got, want = ours(words, pairs, **kw, **options), fast(words, pairs, **kw, **options)
        assert_same(got, want, where=str(options))
        for i in range(len(words)):
            assert got.word_ids(i) == want.word_ids(i) and got.sequence_ids(i) == want.sequence_ids(i)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda t: t(["a", "b"], "c d", is_split_into_words=True), "text_pair"),  # words and a string
        (lambda t: t([["a"], ["b"]], "c d", is_split_into_words=True), "text_pair"),
        (lambda t: t(["a", "b"], ["c", 1], is_split_into_words=True), "text_pair"),
        (lambda t: t(["一", "二"], "三四"), "text_pair"),  # a batch and one string: not a list of characters
    ],
    ids=["words-and-string", "batch-and-string", "pair-not-strings", "batch-and-one-string"],
)
def test_pairs_that_do_not_fit_are_refused(zh_kit, call, name):
    with pytest.raises(TokenizerError, match=rf"(^|\W){name}(\W|$)"):
        call(zh_kit.ours())
    with pytest.raises((TypeError, ValueError)):  # transformers refuses them too
        call(zh_kit.fast)


# ----- padding never truncates unless truncation says so; warnings as transformers' ---------------
LONG_PAIR = (
    "The quick brown fox jumps over the lazy dog, and then it keeps running far away from home.",
    "A much longer second sentence that goes on and on, and on again, until the very end of it all.",
)


@contextlib.contextmanager
def transformers_log():
    """The messages transformers logs meanwhile (this module sets its verbosity to errors)."""
    records, handler = [], logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger, level = transformers.logging.get_logger("transformers"), transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_warning()
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        transformers.logging.set_verbosity(level)


def _warnings_and_log(call, caplog, theirs=False):
    """(warning messages, log messages) of call(); our log from the bertkit logger, theirs from transformers."""
    caplog.clear()
    with (
        warnings.catch_warnings(record=True) as caught,
        transformers_log() as log,
        caplog.at_level(logging.WARNING, logger="bertkit"),
    ):
        warnings.simplefilter("always")
        result = call()
    logged = log if theirs else [r.getMessage() for r in caplog.records if r.name.startswith("bertkit")]
    return result, [str(w.message) for w in caught], list(logged)


@needs_minilm
@pytest.mark.filterwarnings("ignore:.*max_length.* is ignored when .*padding.*=.*True")  # tested below
@pytest.mark.parametrize(
    "options",
    [
        dict(padding="max_length", max_length=40),
        dict(padding=True, max_length=12),
        dict(padding="longest", max_length=12),
        dict(padding="max_length", max_length=12, truncation=False),
        dict(padding="do_not_pad", max_length=12),
        dict(padding=True, max_length=12, truncation="do_not_truncate"),
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_padding_without_truncation_keeps_every_token_like_fast(options):
    a, b = LONG_PAIR
    ours, fast = Tokenizer.from_pretrained(MINILM), BertTokenizerFast.from_pretrained(MINILM)
    kw = dict(return_special_tokens_mask=True, return_offsets_mapping=True, **options)
    got = ours(a, b, **kw)
    assert_same(got, fast(a, b, **kw), where=str(options))
    assert len(got["input_ids"]) == 46 and got["input_ids"] == ours.encode(a, b)
    batch = ours([a, "x"], [b, "y"], **kw)
    assert_same(batch, fast([a, "x"], [b, "y"], **kw), where=f"batch {options}")
    assert len(batch["input_ids"][0]) == 46


@needs_minilm
def test_padding_and_max_length_warn_where_transformers_does(caplog):
    a, b = LONG_PAIR
    for cls in (BertTokenizerFast, Tokenizer):  # the same vocabulary, a model limit of 30 tokens
        tok = cls.from_pretrained(MINILM, model_max_length=30)
        theirs = cls is BertTokenizerFast

        def check(options, warned, logged):
            result, warned_now, logged_now = _warnings_and_log(lambda: tok(a, b, **options), caplog, theirs)
            assert [m for m in warned_now if "max_length" in m] == warned, (cls, options, warned_now)
            assert len(logged_now) == len(logged) and all(m.startswith(x) for m, x in zip(logged_now, logged)), (
                cls,
                options,
                logged_now,
            )
            return result

        # max_length is ignored by padding=True without truncation: a warning each time
        check(dict(padding=True, max_length=12), _ignored(theirs), [])
        check(dict(padding="max_length", max_length=40), [], [])  # a row longer than max_length: no word
        check(dict(padding="max_length", max_length=12, truncation=True), [], [])
        # no max_length and a row longer than the model's limit: logged once per tokenizer
        too_long = (
            "Token indices sequence length is longer than the specified maximum sequence length for "
            "this model (46 > 30)"
        )
        check(dict(padding=True), [], [too_long])
        check({}, [], [])
        check(dict(truncation=True), [], [])
        # max_length alone truncates ("longest_first"), and says so once per tokenizer
        assert len(check(dict(max_length=12), [], ["Truncation was not explicitly activated"])["input_ids"]) == 12
        assert len(check(dict(max_length=12), [], [])["input_ids"]) == 12


def _ignored(theirs: bool) -> list[str]:
    return (
        [
            "`max_length` is ignored when `padding`=`True` and there is no truncation strategy. To pad to max "
            "length, use `padding='max_length'`."
        ]
        if theirs
        else [_OUR_IGNORED]
    )


_OUR_IGNORED = (
    "max_length=12 is ignored when padding=True and truncation is off: rows are padded to the longest "
    "one. To pad to max_length, use padding='max_length' (and truncation=True to cut longer rows)."
)


@needs_minilm
def test_tensors_of_rows_longer_than_max_length_name_truncation():
    a, b = LONG_PAIR
    ours = Tokenizer.from_pretrained(MINILM)
    with pytest.raises(TokenizerError, match=r"longer than max_length=12.*truncation=True"):
        ours([a, "x"], [b, "y"], padding="max_length", max_length=12, return_tensors="pt")
    got = ours([a, "x"], [b, "y"], padding="max_length", max_length=12, truncation=True, return_tensors="pt")
    assert got["input_ids"].shape == (2, 12)


# ----- helpers transformers' users call ----------------------------------------------------------
HELPER_PAIRS = [
    ("Hello, unaffable world!", "It's 5.00$ ok."),
    ("今天天气很好。", "明天 hello 见"),
    ("a [MASK] b", None),
    ("", None),
    ("", "x"),
    ("naïve café", ""),
    ("e.g. U.S.A. don't", None),
]


def _has_cjk(text: str) -> bool:
    return any(is_cjk(c) or c in "。，" for c in text)


def test_special_token_helpers_match_transformers(kit):
    ours, fast, slow = kit.ours(), kit.fast, kit.slow
    for a, b in HELPER_PAIRS:
        ids_a = ours.encode(a, add_special_tokens=False)
        ids_b = None if b is None else ours.encode(b, add_special_tokens=False)
        assert ids_a == fast.encode(a, add_special_tokens=False)
        full = ours.build_inputs_with_special_tokens(ids_a, ids_b)
        assert (
            full
            == fast.build_inputs_with_special_tokens(ids_a, ids_b)
            == slow.build_inputs_with_special_tokens(ids_a, ids_b)
        ), (a, b)
        if b != "":  # an empty second text is no pair to __call__ (test_slow_and_fast_disagree_on_an_empty_pair)
            assert full == ours.encode(a, b) == fast.encode(a, b)
        types = ours.create_token_type_ids_from_sequences(ids_a, ids_b)
        assert types == fast.create_token_type_ids_from_sequences(
            ids_a, ids_b
        ) == slow.create_token_type_ids_from_sequences(ids_a, ids_b) and len(types) == len(full)
        # BertTokenizerFast asserts already_has_special_tokens=True; the slow one computes both
        assert ours.get_special_tokens_mask(ids_a, ids_b) == slow.get_special_tokens_mask(ids_a, ids_b), (a, b)
        assert (
            ours.get_special_tokens_mask(full, already_has_special_tokens=True)
            == fast.get_special_tokens_mask(full, already_has_special_tokens=True)
            == slow.get_special_tokens_mask(full, already_has_special_tokens=True)
        )
        tokens = ours.convert_ids_to_tokens(full)
        text, theirs = ours.convert_tokens_to_string(tokens), fast.convert_tokens_to_string(tokens)
        assert text == ours.decode(full, clean_up_tokenization_spaces=False)  # transformers cleans up in decode only
        assert ours.convert_tokens_to_string(tokens, cjk_spaces=True) == theirs
        if _has_cjk(a + (b or "")):  # bertkit writes no spaces next to CJK characters (as decode)
            assert text.replace(" ", "") == theirs.replace(" ", "") and text != theirs
        else:
            assert text == theirs, (a, b)
    unk = [ours.cls_token_id, ours.unk_token_id, ours.vocab["a"], ours.sep_token_id, ours.pad_token_id]
    assert (
        ours.get_special_tokens_mask(unk, already_has_special_tokens=True)
        == [1, 1, 0, 1, 1]
        == fast.get_special_tokens_mask(unk, already_has_special_tokens=True)
    )
    assert ours.convert_tokens_to_string([]) == fast.convert_tokens_to_string([]) == ""


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda t: t.get_special_tokens_mask([2], [3], already_has_special_tokens=True), "already_has_special_tokens"),
        (lambda t: t.build_inputs_with_special_tokens("abc"), "token_ids_0"),
        (lambda t: t.build_inputs_with_special_tokens([1], [2, "x"]), "token_ids_1"),
        (lambda t: t.create_token_type_ids_from_sequences(None), "token_ids_0"),
        (lambda t: t.convert_tokens_to_string("abc"), "tokens"),
        (lambda t: t.convert_tokens_to_string(["a", 3]), "tokens"),
    ],
)
def test_helpers_refuse_bad_input(zh_kit, call, message):
    with pytest.raises(TokenizerError, match=message):
        call(zh_kit.ours())


def test_char_to_token_and_word_ids_match_fast(kit):
    ours, fast = kit.ours(), kit.fast
    texts, pairs = ["Hello  wonderful 今天 world! again, and again", "naïve", "", "a"], ["x y", "天气 good", "z", ""]
    for kw in (
        {},
        dict(return_offsets_mapping=True),
        dict(padding=True),
        dict(truncation=True, max_length=14, stride=1, return_overflowing_tokens=True),
    ):
        got, want = ours(texts, pairs, **kw), fast(texts, pairs, **kw)
        sample = got.get("overflow_to_sample_mapping", list(range(len(texts))))
        for row in range(len(got["input_ids"])):
            assert got.word_ids(row) == want.word_ids(row) == got.word_ids(batch_index=row), (kw, row)
            assert got.tokens(batch_index=row) == want.tokens(row)
            for seq, source in ((0, texts), (1, pairs)):
                for c in range(len(source[sample[row]]) + 2):
                    assert got.char_to_token(row, c, sequence_index=seq) == want.char_to_token(
                        row, c, sequence_index=seq
                    ), (kw, row, seq, c)
        if "return_overflowing_tokens" in kw:
            assert len(got["input_ids"]) > len(texts)  # windows of a cut text: positions in the later ones too
            continue
        one, one_fast = ours(texts[0], pairs[0], **kw), fast(texts[0], pairs[0], **kw)
        assert one.word_ids() == one_fast.word_ids()
        for c in range(len(texts[0]) + 1):
            assert (
                one.char_to_token(c)
                == one_fast.char_to_token(c)
                == one.char_to_token(0, c)
                == one.char_to_token(batch_or_char_index=c)
            ), (kw, c)
            assert one.char_to_token(c, sequence_index=1) == one_fast.char_to_token(c, sequence_index=1)
    assert None in [ours("a  b").char_to_token(c) for c in range(4)]  # a space belongs to no token


# ----- batches of pairs as (text, text_pair) tuples ---------------------------------------------
PAIR_BATCHES = [
    [("a b", "c"), ("d", "e f")],
    [("今天天气很好", "明天见"), "单独一句", ["list pair", "works too"], ("Hello, world!", "")],
    [("", "x"), ("naïve café RÉSUMÉ", "the quick brown fox jumps over the lazy dog")],
]


def test_batches_of_pairs_as_tuples_match_fast_and_slow(kit):
    ours, fast, slow = kit.ours(), kit.fast, kit.slow
    kw = dict(return_offsets_mapping=True, return_special_tokens_mask=True)
    for batch in PAIR_BATCHES:
        for options in (
            {},
            dict(padding=True),
            dict(truncation=True, max_length=7, padding="max_length"),
            dict(truncation=True, max_length=12, stride=1, return_overflowing_tokens=True),
        ):
            got, want = ours(batch, **kw, **options), fast(batch, **kw, **options)
            assert_same(
                got,
                want,
                keys=KEYS + tuple(k for k in ("overflow_to_sample_mapping",) if k in want),
                where=f"{batch[0]} {options}",
            )
            for row in range(len(got["input_ids"])):
                assert got.word_ids(row) == want.word_ids(row) and got.sequence_ids(row) == want.sequence_ids(row)
        assert ours(batch)["input_ids"] == slow(batch)["input_ids"]
    a, b = zip(*PAIR_BATCHES[0])
    assert ours(PAIR_BATCHES[0])["input_ids"] == ours(list(a), list(b))["input_ids"]
    tensors = ours(PAIR_BATCHES[2], padding=True, return_tensors="pt")
    assert torch.equal(tensors["input_ids"], fast(PAIR_BATCHES[2], padding=True, return_tensors="pt")["input_ids"])
    # with is_split_into_words a tuple is one text's words (transformers: a batch of word tuples)
    words = [("Hello", "wonderful", "world"), ("今", "天", "好")]
    got, want = ours(words, is_split_into_words=True), fast(words, is_split_into_words=True)
    assert_same(got, want, KEYS[:3])
    assert [got.word_ids(i) for i in range(2)] == [want.word_ids(i) for i in range(2)]


@pytest.mark.parametrize(
    "call, where",
    [
        (lambda t: t([("a", "b", "c")]), r"text\[0\].*3"),
        (lambda t: t([("a",)]), r"text\[0\].*1"),
        (lambda t: t(["x", ("a", None)]), r"text\[1\]"),
        (lambda t: t(["x", ("a", 5)]), r"text\[1\]"),
        (lambda t: t([("a", "b")], ["c"]), r"text\[0\]"),
        (lambda t: t([(["a"], ["b"])], is_split_into_words=True), r"text\[0\].*text_pair"),
    ],
    ids=["three", "one", "None", "int", "and-text_pair", "split-pairs"],
)
def test_bad_pairs_in_a_batch_are_refused(zh_kit, call, where):
    with pytest.raises(TokenizerError, match=where):
        call(zh_kit.ours())
    with pytest.raises((TypeError, ValueError)):  # transformers' fast tokenizer refuses them too
        call(zh_kit.fast)
