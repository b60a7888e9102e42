"""Bad input to bertkit.tokenizer: vocabulary files and folders, texts, and truncation and padding options."""

from __future__ import annotations

import re

import pytest
from tokenizer_helpers import SPECIALS

from bertkit.errors import BertkitError
from bertkit.tokenizer import Tokenizer, TokenizerError
from bertkit.vocab import train_vocab


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
