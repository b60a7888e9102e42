"""bertkit.tokenizer's decode and batch_decode against transformers', in English and Chinese."""

from __future__ import annotations

import json
import random

import pytest
import torch

pytest.importorskip("transformers")
from tokenizer_helpers import ENGLISH, MINILM, bert_normalise, needs_minilm  # noqa: E402
from transformers import BertTokenizerFast  # noqa: E402

from bertkit.tokenizer import Tokenizer, TokenizerError, _join_cjk  # noqa: E402


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
