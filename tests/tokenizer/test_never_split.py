"""never_split: words kept whole, whole words only and after lower-casing, as BERT's slow BertTokenizer does."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tokenizer_helpers import DISAGREE, HAND, PROPS, SPECIALS, assert_same, needs_minilm  # noqa: E402
from transformers import BertTokenizer, BertTokenizerFast  # noqa: E402

from bertkit.tokenizer import Tokenizer, TokenizerError  # noqa: E402


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
