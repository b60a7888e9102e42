"""Tokenizer folders and settings: from_pretrained / save_pretrained both ways with transformers, changed settings."""

from __future__ import annotations

import json
import os
import shutil

import pytest

pytest.importorskip("transformers")
from tokenizer_helpers import ENGLISH, HAND, KEYS, MINILM, assert_same, needs_minilm  # noqa: E402
from transformers import BertTokenizer, BertTokenizerFast  # noqa: E402

from bertkit.tokenizer import Tokenizer, TokenizerError  # noqa: E402

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
