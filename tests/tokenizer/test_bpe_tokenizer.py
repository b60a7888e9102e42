"""The byte-level BPE tokenizer of ModernBERT folders (tokenizer.BPETokenizer) against transformers' AutoTokenizer on
the same folder: a ModernBERT-style tokenizer.json (byte-level BPE, [CLS] $A [SEP] template, [MASK] taking the space
before it) trained here on real Chinese and English text and saved by transformers."""

import random

import pytest
from helpers import EN, bpe_tokenizer_folder

from bertkit.errors import TokenizerError
from bertkit.tokenizer import BPETokenizer, Tokenizer

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return bpe_tokenizer_folder(tmp_path_factory.mktemp("bpe") / "tokenizer")


PIECES = [
    "人民",
    "日报",
    "今天",
    "好",
    "。",
    "，",
    "the",
    "quick",
    " ",
    "  ",
    "\t",
    "\n",
    "[MASK]",
    " [MASK]",
    "[MASK] ",
    "It's",
    "3.14",
    "!",
    "é",
    "😀",
    "a",
    "B",
    "中文",
    "text",
    "-",
    "'",
    "[CLS]",
    "[PAD]",
]


def random_texts(n: int, seed: int = 0) -> list[str]:
    """Strings of the pieces above in random order and spacing: special tokens next to spaces, mixed scripts."""
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 14))) for _ in range(n)]


def test_the_folder_reads_as_a_bpe_tokenizer_without_token_type_ids(folder):
    ours = Tokenizer.from_pretrained(folder)
    assert isinstance(ours, BPETokenizer) and ours.mask_token == "[MASK]" and ours.model_max_length == 8192
    assert sorted(ours("人民日报")) == ["attention_mask", "input_ids"]
    assert "token_type_ids" in ours("人民日报", return_token_type_ids=True)


def test_ids_equal_transformers_on_thousands_of_random_strings_alone_and_in_pairs(folder):
    ours, theirs = Tokenizer.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(folder)
    texts = random_texts(2000)
    assert ours(texts)["input_ids"] == theirs(texts)["input_ids"]
    pairs = list(zip(texts[:500], texts[500:1000]))
    assert ours(pairs)["input_ids"] == theirs(pairs)["input_ids"]
    for text in texts[:200]:
        assert ours.tokenize(text) == theirs.tokenize(text), text


def test_truncation_padding_and_offsets_equal_transformers(folder):
    ours, theirs = Tokenizer.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(folder)
    texts = random_texts(300, seed=1)
    kw = dict(truncation=True, max_length=12, padding="max_length", return_offsets_mapping=True)
    mine, reference = ours(texts, **kw), theirs(texts, **kw)
    for key in ("input_ids", "attention_mask", "offset_mapping"):
        assert [list(map(tuple, r)) if key == "offset_mapping" else r for r in mine[key]] == [
            list(map(tuple, r)) if key == "offset_mapping" else r for r in reference[key]
        ], key


def test_decode_equals_transformers(folder):
    ours, theirs = Tokenizer.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(folder)
    for text in random_texts(300, seed=2) + [EN, "人民日报 今天 text"]:
        ids = theirs(text)["input_ids"]
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip), text


def test_bertkit_saves_a_folder_transformers_reads_the_same(folder, tmp_path):
    ours = Tokenizer.from_pretrained(folder)
    ours("warm the backend's truncation", truncation=True, max_length=4, padding="max_length")  # not saved
    ours.save_pretrained(tmp_path / "again")
    theirs, back = (
        transformers.AutoTokenizer.from_pretrained(tmp_path / "again"),
        Tokenizer.from_pretrained(tmp_path / "again"),
    )
    texts = random_texts(300, seed=3)
    assert theirs(texts)["input_ids"] == ours(texts)["input_ids"] == back(texts)["input_ids"]
    assert sorted(theirs("人民")) == ["attention_mask", "input_ids"]


def test_wordpiece_settings_are_refused_by_name(folder):
    with pytest.raises(TokenizerError, match="a BPE tokenizer has no WordPiece setting do_lower_case"):
        Tokenizer.from_pretrained(folder, do_lower_case=True)
    with pytest.raises(TokenizerError, match="do_lower_case: a WordPiece setting"):
        Tokenizer.from_pretrained(folder).do_lower_case = True
