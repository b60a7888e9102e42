"""BERT's WordPiece tokenizer on the `tokenizers` library (HF's Rust implementation).

    text --normalise--> clean control characters, put spaces around every CJK character,
                        lower-case and strip accents (as configured)
         --pre-tokenise--> split on whitespace and punctuation; a never_split word stays whole where it is
                           all of a word between spaces (after lower-casing), as in BERT's BasicTokenizer
         --WordPiece--> greedy longest match from the vocabulary, later pieces marked "##";
                        a word with no match, or over 100 characters, becomes [UNK]
         --template--> [CLS] A [SEP] (B [SEP]), token_type_ids 0 for A, 1 for B

A text of more than PIECE_CHARS characters encoded whole (tokenize, or a call without truncation) goes to the backend
in pieces cut where no token changes (pieces.py), so that the backend's memory stays that of a piece; the result is
the whole text's, its row's encoding a JoinedEncoding. A call's rows are made by encoding.py (the backend's fast
path, big batches in chunks, padding), which first cuts long texts whose end truncation drops (cutting.py).

The pipeline is the one transformers' BertTokenizerFast builds, so ids, type ids, masks and
offsets are the same; this class adds clear errors and CJK-friendly decoding (vocabulary training: vocab.py). The
settings that build the pipeline (do_lower_case, strip_accents, tokenize_chinese_chars, never_split)
rebuild it when set; the special tokens are fixed when the tokenizer is built.
Chinese text is split per character because BERT's vocabularies (bert-base-chinese: 21128
entries) hold single characters.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, NoReturn, overload

from tokenizers import AddedToken, Regex, decoders, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as Backend
from tokenizers.models import BPE, WordPiece

from .cutting import cut_regex
from .deprecated import moved
from .encoding import EncodeInput, Plan, Rows, Specials, apply, check_surrogates, row_keys
from .errors import BertkitWarning, TokenizerError
from .files import atomic_write_text, digest, read_json, read_text, text_lines
from .pieces import Pieces, Row, is_long
from .text import WIDE_TEXT, char_class

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor

VOCAB_FILE, TOKENIZER_FILE, CONFIG_FILE, SPECIAL_MAP_FILE = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
TOKENIZER_FILES = (VOCAB_FILE, TOKENIZER_FILE, CONFIG_FILE, SPECIAL_MAP_FILE)  # what save_pretrained writes
SPECIAL_ROLES = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")
DEFAULT_SPECIALS = {
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "mask_token": "[MASK]",
}
MAX_CHARS_PER_WORD = 100  # BERT: longer words are [UNK]
TRUNCATION = ("longest_first", "only_first", "only_second")
PIPELINE_SETTINGS = ("do_lower_case", "strip_accents", "tokenize_chinese_chars", "never_split")
# a batch is encoded this many rows at a time (Rows.lists): the backend's encodings of one chunk live at once
CHUNK_ROWS = 2048
# bertkit tokenize (commands/tokenize.py: token_rows) shows longer texts piece by piece: memory does not grow with them
WHOLE_TEXT_CHARS = 100_000
log = logging.getLogger(__name__)
# __call__'s `text` (and `text_pair`): one text, a batch of texts, or a batch of (text, text_pair) pairs (texts alone
# mixed in); with is_split_into_words, one text's words or a batch of word lists
_TextInput = str | Sequence[str] | Sequence[Sequence[str]]


# ----- vocabulary files --------------------------------------------------------------------------
def read_vocab(path: str) -> dict[str, int]:
    """vocab.txt: one token per line, id = line number (from 0). Duplicates are an error."""
    text = read_text(
        path,
        TokenizerError,
        missing="no such vocabulary file",
        cannot_read="cannot read vocabulary ({error})",
        not_utf8="not UTF-8 (byte {byte:#04x} at offset {offset}); save the vocabulary as UTF-8",
    )
    if not text.strip():
        raise TokenizerError(f"{path}: the vocabulary file is empty")
    vocab: dict[str, int] = {}
    for i, token in enumerate(text_lines(text)):
        if token in vocab:
            raise TokenizerError(
                f"{path}: line {i + 1}: {token!r} already appears on line {vocab[token] + 1}; "
                "every token needs its own line and id"
            )
        vocab[token] = i
    return vocab


def write_vocab(path: str, vocab: dict[str, int]) -> None:
    atomic_write_text(path, "".join(token + "\n" for token, _ in sorted(vocab.items(), key=lambda kv: kv[1])))


# ----- encodings ---------------------------------------------------------------------------------
class BatchEncoding(dict[str, Any]):
    """input_ids, token_type_ids, attention_mask, ... by key (or attribute), plus per-row details."""

    def __init__(
        self,
        data: dict[str, Any],
        encodings: list[Row] | None,
        ids_to_tokens: dict[int, str],
        retrack: Callable[[], list[Row]] | None = None,
    ) -> None:
        super().__init__(data)
        self._encodings = encodings  # tokenizers.Encoding per row; None: made again when asked for (a big batch)
        self._ids_to_tokens = ids_to_tokens
        self._retrack = retrack  # set when the encodings were made without word/offset tracking

    @property
    def encodings(self) -> list[Row]:
        """The backend's tokenizers.Encoding of every row (a JoinedEncoding for a text encoded in pieces, over
        PIECE_CHARS). A batch of more than CHUNK_ROWS rows (without offsets) does not keep them, so that its memory is
        that of the lists: they are made again on the first use."""
        return self._encodings if self._encodings is not None else self._tracked()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def _tracked(self) -> list[Row]:
        if self._retrack is not None:
            tracked = self._retrack()
            ids = [e.ids for e in self._encodings] if self._encodings is not None else self._row_ids()
            if [e.ids for e in tracked] != ids:
                raise TokenizerError(
                    "the tokenizer's settings changed since this batch was encoded, so its words and "
                    "character positions cannot be worked out any more; encode the texts again (or "
                    "pass return_offsets_mapping=True, which keeps them from the start)"
                )
            self._encodings, self._retrack = tracked, None
        assert self._encodings is not None  # a batch made without its encodings can make them again (_retrack)
        return self._encodings

    def _row_ids(self) -> list[list[int]]:
        """input_ids as a list of rows (only batches drop their encodings, so input_ids holds rows)."""
        ids = self["input_ids"]
        return ids.tolist() if hasattr(ids, "tolist") else ids

    def tokens(self, batch_index: int = 0) -> list[str]:
        ids = self._encodings[batch_index].ids if self._encodings is not None else self._row_ids()[batch_index]
        return [self._ids_to_tokens[t] for t in ids]

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """Which word of its text each token came from (None for [CLS], [SEP], padding)."""
        return self._tracked()[batch_index].word_ids

    def sequence_ids(self, batch_index: int = 0) -> list[int | None]:
        """0 for tokens of the first text, 1 for the second, None for special tokens and padding."""
        return self._tracked()[batch_index].sequence_ids

    def char_to_token(
        self, batch_or_char_index: int, char_index: int | None = None, sequence_index: int = 0
    ) -> int | None:
        """The index of the token that holds character `char_index` of text `sequence_index` (0: text, 1: text_pair)
        in row `batch_or_char_index`; given one index, the character's in row 0 (transformers' signature).
        None where no token holds the character (a space, a cut-off part)."""
        row, char = (0, batch_or_char_index) if char_index is None else (batch_or_char_index, char_index)
        return self._tracked()[row].char_to_token(char, sequence_index)


def _pipeline_setting(name: str, doc: str) -> property:
    """A setting of the backend pipeline: setting it checks the value and rebuilds the pipeline."""
    return property(lambda self: self._settings[name], lambda self, value: self._configure(**{name: value}), doc=doc)


def _fixed_special(name: str) -> property:
    """A special token (cls_token) or its id (cls_token_id): fixed once the tokenizer is built, since the backend's
    template, padding and added tokens hold it; setting it is an error rather than a change that does nothing."""
    role = name.removesuffix("_id")

    def get(self: Tokenizer) -> str | int:
        return self.vocab[self.specials[role]] if name.endswith("_id") else self.specials[role]

    def refuse(self: Tokenizer, value: object) -> NoReturn:
        raise TokenizerError(
            f"{name} cannot change after the tokenizer is built (the backend's template, padding and "
            f"special tokens hold it); build a new one: Tokenizer.from_pretrained(path, {role}=...) "
            "or Tokenizer.from_vocab(vocab, ...)"
        )

    return property(get, refuse, doc=f"the {role.removesuffix('_token')} token{' id' * name.endswith('_id')}")


# ----- the tokenizer -----------------------------------------------------------------------------
class Tokenizer:
    """BERT WordPiece tokenizer. Build with from_pretrained(dir), from_vocab(path or dict) or vocab.train_vocab()."""

    do_lower_case = _pipeline_setting(
        "do_lower_case", "lower-case the text (and strip accents, unless strip_accents=False)"
    )
    strip_accents = _pipeline_setting("strip_accents", "strip accents; None: as do_lower_case says")
    tokenize_chinese_chars = _pipeline_setting("tokenize_chinese_chars", "make every CJK character a word")
    never_split = _pipeline_setting(
        "never_split",
        "words (of the vocabulary) kept whole where one is all of a word "
        "between spaces, after lower-casing; a tuple (set it to change it)",
    )
    token_type_ids = True  # __call__ returns them unless told (transformers' model_input_names)
    cjk_spaced = True  # the decoder puts spaces around CJK characters (decode takes them out unless cjk_spaces)
    pad_token, unk_token, cls_token, sep_token, mask_token = (_fixed_special(r) for r in SPECIAL_ROLES)
    pad_token_id, unk_token_id, cls_token_id, sep_token_id, mask_token_id = (
        _fixed_special(r + "_id") for r in SPECIAL_ROLES
    )

    def __init__(
        self,
        vocab: dict[str, int],
        *,
        do_lower_case: bool = True,
        strip_accents: bool | None = None,
        tokenize_chinese_chars: bool = True,
        never_split: Sequence[str] = (),
        model_max_length: int = 512,
        clean_up_tokenization_spaces: bool = True,
        backend: Backend | None = None,
        **special_tokens: str,
    ):
        unknown = set(special_tokens) - set(SPECIAL_ROLES)
        if unknown:
            raise TokenizerError(f"unknown tokenizer argument(s): {', '.join(sorted(unknown))}")
        self.specials = {**DEFAULT_SPECIALS, **special_tokens}
        missing = [f"{role}={tok!r}" for role, tok in self.specials.items() if tok not in vocab]
        if missing:
            raise TokenizerError(
                f"the vocabulary lacks the special token(s) {', '.join(missing)}; a BERT "
                "vocabulary starts with [PAD] ... [UNK] [CLS] [SEP] [MASK]"
            )
        if model_max_length < 2:
            raise TokenizerError(f"model_max_length must be >= 2 ([CLS] and [SEP]), got {model_max_length}")
        self.model_max_length = model_max_length
        if not isinstance(clean_up_tokenization_spaces, bool):
            raise TokenizerError(
                f"clean_up_tokenization_spaces must be True or False, got {clean_up_tokenization_spaces!r}"
            )
        # decode() drops the spaces before punctuation and inside English contractions, as transformers does
        # (from_pretrained reads it from tokenizer_config.json)
        self.clean_up_tokenization_spaces = clean_up_tokenization_spaces
        self.backend = (
            backend
            if backend is not None
            else Backend(
                WordPiece(vocab, unk_token=self.specials["unk_token"], max_input_chars_per_word=MAX_CHARS_PER_WORD)
            )
        )
        self.vocab = self.backend.get_vocab(with_added_tokens=False)
        self.ids_to_tokens = {i: t for t, i in self.vocab.items()}
        self.all_special_ids = sorted({self.vocab[t] for t in self.specials.values()})
        self._said: set[str] = set()  # the warnings logged so far (each once per tokenizer, as in transformers)
        self._settings: dict[str, Any] = {}
        self._configure(
            do_lower_case=do_lower_case,
            strip_accents=strip_accents,
            tokenize_chinese_chars=tokenize_chinese_chars,
            never_split=never_split,
        )

    def _configure(self, **changes: Any) -> None:
        """Check new values of PIPELINE_SETTINGS, then build the backend's pipeline with them (a bad value is an
        error that leaves everything as it was)."""
        settings = {**self._settings, **changes}
        for name in ("do_lower_case", "tokenize_chinese_chars"):
            if not isinstance(settings[name], bool):
                raise TokenizerError(f"{name} must be True or False, got {settings[name]!r}")
        if not (settings["strip_accents"] is None or isinstance(settings["strip_accents"], bool)):
            raise TokenizerError(
                f"strip_accents must be True, False or None (as do_lower_case), got {settings['strip_accents']!r}"
            )
        settings["never_split"] = self._checked_never_split(settings["never_split"])
        self._settings = settings
        self._configure_backend()

    def _checked_never_split(self, words: object) -> tuple[str, ...]:
        if isinstance(words, str) or not isinstance(words, Iterable):
            raise TokenizerError(f"never_split must be a list of words, got {type(words).__name__} {words!r:.40}")
        words = tuple(words)
        if not all(isinstance(w, str) for w in words):
            raise TokenizerError(f"never_split must be a list of words (strings), got {list(words)!r:.60}")
        not_in_vocab = [w for w in words if w not in self.vocab]
        if not_in_vocab:
            raise TokenizerError(
                f"never_split word(s) {not_in_vocab} are not in the vocabulary; a word kept whole needs an id"
            )
        return words

    def _configure_backend(self) -> None:
        """The BERT pipeline of transformers' BertTokenizerFast, with this tokenizer's settings (never_split as in
        the slow BertTokenizer: BertTokenizerFast ignores it)."""
        b, settings = self.backend, self._settings
        b.normalizer = normalizers.BertNormalizer(
            clean_text=True,
            handle_chinese_chars=settings["tokenize_chinese_chars"],
            strip_accents=settings["strip_accents"],
            lowercase=settings["do_lower_case"],
        )
        b.pre_tokenizer = _pre_tokenizer(settings["never_split"])
        cls, sep = self.specials["cls_token"], self.specials["sep_token"]
        vocab = b.get_vocab(with_added_tokens=False)
        b.post_processor = processors.TemplateProcessing(
            single=f"{cls}:0 $A:0 {sep}:0",
            pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])],
        )
        b.decoder = decoders.WordPiece(prefix="##")
        # "[MASK]" typed in text stays one token and is not lower-cased (as in transformers)
        b.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in self.specials.values()])

    # ----- construction and files ------------------------------------------------------------
    @classmethod
    def from_vocab(cls, vocab: str | os.PathLike | dict[str, int], **kwargs: Any) -> Tokenizer:
        """From a vocab.txt path or a {token: id} dict."""
        if isinstance(vocab, dict):
            return cls(vocab, **kwargs)
        path = os.fspath(vocab)
        try:
            return cls(read_vocab(path), **kwargs)
        except TokenizerError as e:
            raise TokenizerError(str(e) if str(e).startswith(path) else f"{path}: {e}") from None

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **overrides: Any) -> Tokenizer:
        """A local HF tokenizer directory: vocab.txt and/or tokenizer.json, + tokenizer_config.json."""
        directory = os.fspath(path)
        if not os.path.isdir(directory):
            what = "a file, not a folder" if os.path.exists(directory) else "no such directory"
            hint = "a local folder holding vocab.txt (and optionally tokenizer.json, tokenizer_config.json)"
            if os.path.basename(directory) in TOKENIZER_FILES:  # one of a tokenizer's files: its folder is meant
                hint = f"the folder holding it, {os.path.dirname(directory) or '.'}"
            raise TokenizerError(f"{directory}: {what}; pass {hint}")
        settings: dict[str, Any] = {}
        for name in (SPECIAL_MAP_FILE, CONFIG_FILE):  # the config wins over the special-token map
            settings.update(_read_settings(os.path.join(directory, name)))
        kwargs = {
            k: settings[k]
            for k in (*PIPELINE_SETTINGS, "model_max_length", "clean_up_tokenization_spaces")
            if settings.get(k) is not None
        }
        if kwargs.get("model_max_length", 0) > 10**9:  # transformers writes a huge number for "no limit"
            del kwargs["model_max_length"]
        kwargs.update({role: _token_text(settings[role]) for role in SPECIAL_ROLES if settings.get(role)})
        kwargs.update(overrides)
        tokenizer_json, vocab_txt = os.path.join(directory, TOKENIZER_FILE), os.path.join(directory, VOCAB_FILE)
        # where tokenizer_config.json does not say, transformers 4.x cleans up after decoding a tokenizer it builds
        # from vocab.txt (BertTokenizer's default) and not one it reads from tokenizer.json
        kwargs.setdefault("clean_up_tokenization_spaces", not os.path.exists(tokenizer_json))
        if os.path.exists(tokenizer_json):
            try:
                backend = Backend.from_file(tokenizer_json)
            except Exception as e:
                raise TokenizerError(f"{tokenizer_json}: not a valid tokenizer.json ({e})") from e
            if isinstance(backend.model, BPE):  # ModernBERT's (byte-level BPE): the file's pipeline as it is
                return BPETokenizer.from_backend(tokenizer_json, backend, settings, kwargs)
            if not isinstance(backend.model, WordPiece):
                raise TokenizerError(
                    f"{tokenizer_json}: a {type(backend.model).__name__} tokenizer; bertkit reads WordPiece (BERT) "
                    "and byte-level BPE (ModernBERT) ones"
                )
            backend = _without_vocabulary_added_tokens(backend)
            if os.path.exists(vocab_txt):
                _check_same_vocab(directory, read_vocab(vocab_txt), backend.get_vocab(with_added_tokens=False))
            try:
                return cls(backend.get_vocab(with_added_tokens=False), backend=backend, **kwargs)
            except TokenizerError as e:
                raise TokenizerError(f"{tokenizer_json}: {e}") from None
        if os.path.exists(vocab_txt):
            return cls.from_vocab(vocab_txt, **kwargs)
        raise TokenizerError(f"{directory}: holds neither {VOCAB_FILE} nor {TOKENIZER_FILE}")

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """vocab.txt, tokenizer.json, tokenizer_config.json, special_tokens_map.json (transformers' layout)."""
        directory = os.fspath(path)
        os.makedirs(directory, exist_ok=True)
        write_vocab(os.path.join(directory, VOCAB_FILE), self.vocab)
        atomic_write_text(os.path.join(directory, TOKENIZER_FILE), self.backend.to_str(pretty=True))
        config = {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": self.do_lower_case,
            "strip_accents": self.strip_accents,
            "tokenize_chinese_chars": self.tokenize_chinese_chars,
            "never_split": list(self.never_split) or None,
            "model_max_length": self.model_max_length,
            "clean_up_tokenization_spaces": self.clean_up_tokenization_spaces,
            **self.specials,
        }
        for name, data in ((CONFIG_FILE, config), (SPECIAL_MAP_FILE, dict(self.specials))):
            atomic_write_text(os.path.join(directory, name), json.dumps(data, indent=2, ensure_ascii=False) + "\n")

    # ----- vocabulary lookups ----------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int]:
        unk = self.unk_token_id
        if isinstance(tokens, str):
            return self.vocab.get(tokens, unk)
        return [self.vocab.get(t, unk) for t in tokens]

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> str | list[str]:
        if isinstance(ids, int):
            return self.ids_to_tokens[ids]
        return [self.ids_to_tokens[int(i)] for i in ids]

    def tokenize(self, text: str, text_pair: str | None = None) -> list[str]:
        """The WordPiece tokens of a text, without [CLS] / [SEP]. A text longer than PIECE_CHARS goes to the backend
        in pieces (the same tokens, memory of a piece)."""
        apply(self.backend, Plan(), self._special_ids())  # no leftover truncation or padding
        text, text_pair = _check_text(text, "text"), _check_text(text_pair, "text_pair", optional=True)
        try:
            if not is_long(text if text_pair is None else (text, text_pair)):
                return self.backend.encode(text, text_pair, add_special_tokens=False).tokens
            pieces = Pieces(self.backend, self._cut_pattern())
            return [token for part in (text, text_pair) if part for token in pieces.tokens(part)]
        except TypeError:  # the backend's word for a lone surrogate: "TextInputSequence must be str"
            check_surrogates([text] if text_pair is None else [(text, text_pair)], batched=False)
            raise

    # ----- encoding --------------------------------------------------------------------------
    def __call__(
        self,
        text: _TextInput,
        text_pair: _TextInput | None = None,
        *,
        add_special_tokens: bool = True,
        padding: bool | str = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        stride: int = 0,
        pad_to_multiple_of: int | None = None,
        return_tensors: str | None = None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool = True,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_overflowing_tokens: bool = False,
        return_length: bool = False,
        is_split_into_words: bool = False,
    ) -> BatchEncoding:
        """Encode one text (or pair) or a batch, with transformers' argument names and meanings.

        A batch is a list of texts, with text_pair a list of as many second texts, or a list of
        (text, text_pair) tuples (texts alone may be mixed in). is_split_into_words: each text is a
        list of words (e.g. characters with their tags), text_pair too; word_ids() then maps every
        token back to its word.

        truncation: True / "longest_first" (trim the longer of a pair, token by token), "only_first",
        "only_second", or False; max_length alone (no padding) implies "longest_first". padding:
        True / "longest" (to the longest row), "max_length", or False; padding never truncates: a row
        longer than max_length stays whole unless truncation says so. With return_overflowing_tokens,
        what truncation cuts off comes back as further rows (windows overlapping by `stride` tokens),
        and `overflow_to_sample_mapping` says which input each row came from. Without truncation a text over
        PIECE_CHARS characters goes to the backend in pieces, with the same result.
        """
        batched, inputs, pairs = _inputs(text, text_pair, is_split_into_words)
        specials = (3 if pairs else 2) if add_special_tokens else 0
        plan = self._plan(padding, truncation, max_length, stride, pad_to_multiple_of, specials)
        keys = row_keys(
            token_type_ids=self.token_type_ids if return_token_type_ids is None else return_token_type_ids,
            attention_mask=return_attention_mask,
            special_tokens_mask=return_special_tokens_mask,
            offset_mapping=return_offsets_mapping,
            length=return_length,
        )
        rows = self._rows(plan, add_special_tokens, is_split_into_words, batched)
        data, kept, retrack = rows.lists(inputs, keys, pairs, return_overflowing_tokens, CHUNK_ROWS)
        if not batched and not return_overflowing_tokens:  # one text: its lists, not a batch of one
            data = {k: v[0] for k, v in data.items()}
        tensors = _as_tensors(data, return_tensors, batched or return_overflowing_tokens, _unequal_rows(plan))
        return BatchEncoding(tensors, kept, self.ids_to_tokens, retrack)

    def _rows(self, plan: Plan, add_special_tokens: bool, words: bool, batched: bool) -> Rows:
        """One call's encoding (encoding.py), with what the tokenizer knows: its backend and special tokens,
        where a text may be cut, and its warning of rows longer than the model takes."""
        return Rows(
            self.backend,
            plan,
            self._special_ids(),
            self._cut_pattern,
            self._check_model_length,
            add_special_tokens=add_special_tokens,
            words=words,
            batched=batched,
        )

    def _special_ids(self) -> Specials:
        """The special token ids rows are built and padded with."""
        return Specials(self.cls_token_id, self.sep_token_id, self.pad_token_id, self.pad_token)

    def _cut_pattern(self) -> re.Pattern[str] | None:
        """Where a text may be cut without changing any token before the cut (None: nowhere): before whitespace
        (SEPARATORS, a space to BERT's normaliser), after a CJK ideograph (tokenize_chinese_chars puts spaces
        around it), and, with BERT's own pre-tokenizer (no never_split), after a punctuation mark (a word of its
        own). Characters of added tokens ([MASK], ...) are never cut at (a token could straddle the cut), and added
        tokens that take whitespace with them (lstrip / rstrip / single_word) turn cutting off."""
        added = list(self.backend.get_added_tokens_decoder().values())
        if any(t.lstrip or t.rstrip or t.single_word for t in added):
            return None
        return cut_regex(
            frozenset("".join(t.content for t in added)),
            self._settings["tokenize_chinese_chars"],
            not self._settings["never_split"],
        )

    def encode(self, text: str, text_pair: str | None = None, **kwargs: Any) -> list[int]:
        """The ids of one text (or pair), with [CLS]/[SEP] unless add_special_tokens=False."""
        return self(
            _check_text(text, "text"), text_pair, return_token_type_ids=False, return_attention_mask=False, **kwargs
        )["input_ids"]

    def encode_batch(self, texts: Sequence[str], pairs: Sequence[str] | None = None, **kwargs: Any) -> BatchEncoding:
        if not isinstance(texts, (list, tuple)):
            raise TokenizerError(f"encode_batch takes a list of texts, got {type(texts).__name__}")
        return self(list(texts), list(pairs) if pairs is not None else None, **kwargs)

    def _plan(
        self,
        padding: bool | str,
        truncation: bool | str | None,
        max_length: int | None,
        stride: int,
        pad_to_multiple_of: int | None,
        specials: int,
    ) -> Plan:
        """One call's truncation and padding by transformers' rules, with its warnings; `specials` = how many
        [CLS]/[SEP] each row gets. Only truncation truncates, and max_length without padding implies it."""
        if padding not in (False, True, "longest", "max_length", "do_not_pad"):
            raise TokenizerError(f"padding must be True, False, 'longest' or 'max_length'; got {padding!r}")
        if truncation not in (None, False, True, "do_not_truncate", *TRUNCATION):
            raise TokenizerError(
                f"truncation must be True, False or one of {', '.join(TRUNCATION)}; got {truncation!r}"
            )
        if truncation is None:
            truncation = max_length is not None and padding is False
            if truncation:
                self._say_once(
                    "truncation",
                    f"Truncation was not explicitly activated but max_length={max_length} "
                    "is given: truncating with 'longest_first' (pass truncation=True or a "
                    "strategy to say so)",
                )
        elif truncation == "do_not_truncate":
            truncation = False
        if padding is True and max_length is not None and not truncation:
            warnings.warn(
                f"max_length={max_length} is ignored when padding=True and truncation is off: rows are "
                "padded to the longest one. To pad to max_length, use padding='max_length' (and "
                "truncation=True to cut longer rows).",
                BertkitWarning,
                stacklevel=3,
            )
        truncation = "longest_first" if truncation is True else truncation
        names: dict[bool | str, bool | str] = {True: "longest", "do_not_pad": False}  # transformers' other names
        padding = names.get(padding, padding)
        if (truncation or padding == "max_length") and max_length is None:
            max_length = self.model_max_length
        if max_length is not None and (not isinstance(max_length, int) or max_length < 1):
            raise TokenizerError(f"max_length must be a positive integer, got {max_length!r}")
        if truncation:
            assert max_length is not None  # set above: truncation always has a length
            _check_truncation(max_length, stride, pad_to_multiple_of if padding else None, specials)
        return Plan(truncation, padding, max_length, stride, pad_to_multiple_of)

    def _check_model_length(self, encodings: list[Row]) -> None:
        """Say (once) that a row is longer than the model takes, as transformers does when no length was asked for."""
        longer = next((len(e) for e in encodings if len(e) > self.model_max_length), None)
        if longer is not None:
            self._say_once(
                "length",
                "Token indices sequence length is longer than the specified maximum sequence "
                f"length for this model ({longer} > {self.model_max_length}). Running this "
                "sequence through the model will result in indexing errors; pass "
                "truncation=True to cut rows to model_max_length",
            )

    def _say_once(self, key: str, message: str) -> None:
        """Log a warning the first time this tokenizer has cause to (transformers logs these once per tokenizer)."""
        if key not in self._said:
            self._said.add(key)
            log.warning(message)

    # ----- special tokens, placed as transformers' BERT tokenizers place them -----------------
    def build_inputs_with_special_tokens(
        self, token_ids_0: Sequence[int], token_ids_1: Sequence[int] | None = None
    ) -> list[int]:
        """[CLS] A [SEP] (B [SEP]): the ids of one text (or pair) as the model takes them."""
        a, b = _check_ids(token_ids_0, "token_ids_0"), _check_ids(token_ids_1, "token_ids_1", optional=True)
        return [self.cls_token_id, *a, self.sep_token_id] + ([] if b is None else [*b, self.sep_token_id])

    def create_token_type_ids_from_sequences(
        self, token_ids_0: Sequence[int], token_ids_1: Sequence[int] | None = None
    ) -> list[int]:
        """The token_type_ids of build_inputs_with_special_tokens: 0 for [CLS] A [SEP], 1 for B [SEP]."""
        a, b = _check_ids(token_ids_0, "token_ids_0"), _check_ids(token_ids_1, "token_ids_1", optional=True)
        return [0] * (len(a) + 2) + ([] if b is None else [1] * (len(b) + 1))

    def get_special_tokens_mask(
        self,
        token_ids_0: Sequence[int],
        token_ids_1: Sequence[int] | None = None,
        already_has_special_tokens: bool = False,
    ) -> list[int]:
        """1 where build_inputs_with_special_tokens puts [CLS] / [SEP], 0 for the texts' tokens. With
        already_has_special_tokens, token_ids_0 are a model input: 1 for the id of every special token
        ([PAD], [UNK], [CLS], [SEP], [MASK]), as transformers marks them."""
        if already_has_special_tokens:
            if token_ids_1 is not None:
                raise TokenizerError(
                    "token_ids_1 must be None with already_has_special_tokens=True: the ids of a "
                    "model input hold both texts already"
                )
            special = set(self.all_special_ids)
            return [int(i in special) for i in _check_ids(token_ids_0, "token_ids_0")]
        a, b = _check_ids(token_ids_0, "token_ids_0"), _check_ids(token_ids_1, "token_ids_1", optional=True)
        return [1, *[0] * len(a), 1] + ([] if b is None else [*[0] * len(b), 1])

    # ----- decoding --------------------------------------------------------------------------
    def decode(
        self,
        ids: Sequence[int] | Tensor | np.ndarray,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        cjk_spaces: bool = False,
    ) -> str:
        """ids -> text as transformers' BertTokenizerFast decodes them ("##" pieces joined to their word; with
        clean_up_tokenization_spaces, None: the tokenizer's, no space before . , ? ! or inside "can't", "it's"),
        except that there is no space next to a CJK character ("今天好。", where transformers writes "今 天 好 。");
        cjk_spaces=True keeps those spaces too: then the text is transformers' exactly."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        # the backend's size with added tokens rebuilds its whole vocabulary (milliseconds a call): count it here
        size = max(
            self.backend.get_vocab_size(with_added_tokens=False),
            1 + max(self.backend.get_added_tokens_decoder(), default=-1),
        )
        bad = [i for i in ids if not 0 <= int(i) < size]
        if bad:
            raise TokenizerError(f"ids {bad[:5]} are outside the vocabulary (size {self.vocab_size})")
        text = self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
        if self.clean_up_tokenization_spaces if clean_up_tokenization_spaces is None else clean_up_tokenization_spaces:
            text = clean_up_tokenization(text)
        return text if cjk_spaces or not self.cjk_spaced else _join_cjk(text)

    def batch_decode(
        self,
        rows: Sequence[Sequence[int]] | Tensor | np.ndarray,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        cjk_spaces: bool = False,
    ) -> list[str]:
        return [self.decode(r, skip_special_tokens, clean_up_tokenization_spaces, cjk_spaces) for r in rows]

    def convert_tokens_to_string(self, tokens: Sequence[str], cjk_spaces: bool = False) -> str:
        """Tokens -> text as transformers' BertTokenizerFast joins them: "##" pieces joined to their word (no
        clean_up_tokenization_spaces: in transformers only decode applies it), without the spaces next to CJK
        characters unless cjk_spaces=True."""
        if not isinstance(tokens, (list, tuple)) or not all(isinstance(t, str) for t in tokens):
            raise TokenizerError(
                f"tokens must be a list of token strings (as convert_ids_to_tokens gives), got {tokens!r:.60}"
            )
        text = self.backend.decoder.decode(list(tokens))
        return text if cjk_spaces or not self.cjk_spaced else _join_cjk(text)


class BPETokenizer(Tokenizer):
    """A byte-level BPE tokenizer read from a tokenizer.json (ModernBERT's), its pipeline (normaliser,
    pre-tokenizer, template, decoder, added tokens with their strip flags) the file's own: __call__, decode and the
    rest are the WordPiece tokenizer's, which run whatever pipeline the backend holds. It has none of WordPiece's
    settings (do_lower_case, ...: setting one is an error) and returns token_type_ids only where the folder's
    model_input_names name them (ModernBERT's do not), as transformers' PreTrainedTokenizerFast."""

    cjk_spaced = False  # byte-level BPE decodes text as it was

    def __init__(
        self,
        backend: Backend,
        *,
        model_max_length: int,
        clean_up_tokenization_spaces: bool,
        token_type_ids: bool,
        **special_tokens: str,
    ) -> None:
        # not Tokenizer.__init__, which builds WordPiece's pipeline: this one keeps the file's
        self.backend = backend
        self.specials = {**DEFAULT_SPECIALS, **special_tokens}
        self.vocab = backend.get_vocab(with_added_tokens=True)
        missing = [f"{role}={tok!r}" for role, tok in self.specials.items() if tok not in self.vocab]
        if missing:
            raise TokenizerError(f"the vocabulary lacks the special token(s) {', '.join(missing)}")
        self.ids_to_tokens = {i: t for t, i in self.vocab.items()}
        self.all_special_ids = sorted({self.vocab[t] for t in self.specials.values()})
        self.model_max_length, self.clean_up_tokenization_spaces = model_max_length, clean_up_tokenization_spaces
        self.token_type_ids = token_type_ids
        self._said: set[str] = set()
        self._settings = {
            "do_lower_case": False,
            "strip_accents": None,
            "tokenize_chinese_chars": False,
            "never_split": (),
        }

    @classmethod
    def from_backend(
        cls, path: str, backend: Backend, settings: dict[str, Any], kwargs: dict[str, Any]
    ) -> BPETokenizer:
        """The tokenizer of tokenizer.json `path` (its backend read), with tokenizer_config.json's `settings` and
        from_pretrained's `kwargs` (its specials, model_max_length, clean-up)."""
        wordpiece = sorted(k for k in PIPELINE_SETTINGS if k in kwargs and k not in settings)
        if wordpiece:
            raise TokenizerError(f"{path}: a BPE tokenizer has no WordPiece setting {', '.join(wordpiece)}")
        names = settings.get("model_input_names") or ["input_ids", "token_type_ids", "attention_mask"]
        try:
            return cls(
                backend,
                model_max_length=kwargs.get("model_max_length", 10**9),  # none said: no limit, as transformers
                clean_up_tokenization_spaces=kwargs.get("clean_up_tokenization_spaces", False),
                token_type_ids="token_type_ids" in names,
                **{role: kwargs[role] for role in SPECIAL_ROLES if role in kwargs},
            )
        except TokenizerError as e:
            raise TokenizerError(f"{path}: {e}") from None

    def _configure(self, **changes: Any) -> None:
        raise TokenizerError(
            f"{', '.join(changes)}: a WordPiece setting; this BPE tokenizer's pipeline is its tokenizer.json's"
        )

    def _cut_pattern(self) -> re.Pattern[str] | None:
        return None  # no cut is known to leave a byte-level BPE's tokens before it unchanged: texts go whole

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """tokenizer.json, tokenizer_config.json, special_tokens_map.json, as transformers writes a fast tokenizer."""
        directory = os.fspath(path)
        os.makedirs(directory, exist_ok=True)
        apply(self.backend, Plan(), self._special_ids())  # no call's truncation or padding in the file
        atomic_write_text(os.path.join(directory, TOKENIZER_FILE), self.backend.to_str(pretty=True))
        names = ["input_ids", *(["token_type_ids"] if self.token_type_ids else []), "attention_mask"]
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": self.model_max_length,
            "clean_up_tokenization_spaces": self.clean_up_tokenization_spaces,
            "model_input_names": names,
            **self.specials,
        }
        for name, data in ((CONFIG_FILE, config), (SPECIAL_MAP_FILE, dict(self.specials))):
            atomic_write_text(os.path.join(directory, name), json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def vocab_digest(tokenizer: Tokenizer) -> str:
    """The fingerprint of a tokenizer's vocabulary, tokens in id order (16 hex digits)."""
    vocab = tokenizer.get_vocab()
    return digest(sorted(vocab, key=vocab.__getitem__))


# ----- helpers -----------------------------------------------------------------------------------
def _check_same_vocab(directory: str, from_txt: dict[str, int], from_json: dict[str, int]) -> None:
    """vocab.txt and tokenizer.json must hold the same ids: transformers' slow tokenizer reads the
    first and the fast one the second, so a mismatch tokenizes the same text two ways."""
    if from_txt == from_json:
        return
    txt, js = sorted(from_txt, key=from_txt.__getitem__), sorted(from_json, key=from_json.__getitem__)
    first = next((i for i, (a, b) in enumerate(zip(txt, js)) if a != b), min(len(txt), len(js)))

    def shown(tokens: list[str]) -> str:
        return repr(tokens[first]) if first < len(tokens) else "(end)"

    raise TokenizerError(
        f"{directory}: {VOCAB_FILE} ({len(txt)} tokens) and {TOKENIZER_FILE} ({len(js)}) disagree "
        f"from id {first} ({shown(txt)} vs {shown(js)}); one of them is stale: remove it, or save "
        "the tokenizer again"
    )


def _inputs(text: _TextInput, text_pair: _TextInput | None, split: bool) -> tuple[bool, list[EncodeInput], bool]:
    """(batched, the backend's inputs, any pair among them) of one call, as transformers reads its arguments: one
    text (or pair); a batch of texts, with text_pair a list of as many; or a batch of (text, text_pair) tuples
    (2-item lists too), texts alone mixed in. With `split` a text is a list (or tuple) of words, and a batch
    is a list of them: a tuple in it is one text's words, not a pair."""
    check: Callable[[object, str], str | Sequence[str]] = _check_words if split else _check_text
    batched = isinstance(text, (list, tuple)) and (not split or (bool(text) and isinstance(text[0], (list, tuple))))
    if not batched:
        if not split and isinstance(text_pair, (list, tuple)):
            raise TokenizerError("text is one string but text_pair is a list; pass lists for both to batch")
        if isinstance(text_pair, (str, list, tuple)) and not text_pair:
            text_pair = None  # as transformers' fast tokenizer: an empty second text is no pair
        one = check(text, "text")
        if text_pair is None:
            return False, [one], False
        return False, [(one, check(text_pair, "text_pair"))], True
    if text_pair is not None:
        if not isinstance(text_pair, (list, tuple)):
            raise TokenizerError(
                f"text is a batch of {len(text)} but text_pair is one {type(text_pair).__name__}; "
                f"pass a list of {len(text)} second texts"
            )
        if len(text_pair) != len(text):
            raise TokenizerError(f"text has {len(text)} entries but text_pair has {len(text_pair)}")
        return (
            True,
            [(check(a, f"text[{i}]"), check(b, f"text_pair[{i}]")) for i, (a, b) in enumerate(zip(text, text_pair))],
            bool(text),
        )
    inputs: list[EncodeInput] = []
    for i, item in enumerate(text):
        if split or not isinstance(item, (list, tuple)):
            inputs.append(check(item, f"text[{i}]"))
        elif len(item) != 2:
            raise TokenizerError(
                f"text[{i}] is a {type(item).__name__} of {len(item)} item(s); in a batch a pair is (text, text_pair)"
            )
        else:
            inputs.append((check(item[0], f"text[{i}][0]"), check(item[1], f"text[{i}][1]")))
    return True, inputs, any(isinstance(x, tuple) for x in inputs) and not split


@overload
def _check_text(text: object, name: str, optional: Literal[False] = ...) -> str: ...
@overload
def _check_text(text: object, name: str, optional: bool) -> str | None: ...
def _check_text(text: object, name: str, optional: bool = False) -> str | None:
    if isinstance(text, str) or (optional and text is None):
        return text
    raise TokenizerError(f"{name} must be a string, got {type(text).__name__}")


def _check_words(words: object, name: str) -> Sequence[str]:
    if not isinstance(words, (list, tuple)) or not all(isinstance(w, str) for w in words):
        pairs = isinstance(words, (list, tuple)) and any(isinstance(w, (list, tuple)) for w in words)
        raise TokenizerError(
            f"{name} must be a list of strings (is_split_into_words=True)"
            + ("; the second texts of pairs of word lists go in text_pair" if pairs else "")
        )
    return words


@overload
def _check_ids(ids: object, name: str, optional: Literal[False] = ...) -> list[int]: ...
@overload
def _check_ids(ids: object, name: str, optional: bool) -> list[int] | None: ...
def _check_ids(ids: object, name: str, optional: bool = False) -> list[int] | None:
    if ids is None and optional:
        return None
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if not isinstance(ids, (list, tuple)) or not all(isinstance(i, int) for i in ids):
        raise TokenizerError(f"{name} must be a list of token ids (ints), got {ids!r:.60}")
    return list(ids)


def _pre_tokenizer(never_split: Sequence[str]) -> pre_tokenizers.PreTokenizer:
    """BERT's pre-tokenizer: split on whitespace, then around every punctuation mark. With never_split words the
    same splits come from one regex that first takes a piece between spaces which is all one of the words (after
    the normalizer has lower-cased it), as BERT's BasicTokenizer: "[unused1]" stays whole, "[unused1]." does not."""
    if not never_split:
        return pre_tokenizers.BertPreTokenizer()
    words = "|".join(_regex_literal(w) for w in sorted(never_split, key=len, reverse=True))
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Split(Regex(rf"\A(?:{words})\z|{_punctuation_class()}"), behavior="isolated"),
        ]
    )


@functools.cache
def _punctuation_class() -> str:
    """A regex class of the characters BertPreTokenizer splits off, asked of it (the Unicode tables of the regex
    library are newer than its own). Blocks of ideographs, Hangul syllables, private use and unassigned planes
    hold none and are skipped: 0.2 s, once per process."""
    skip = [
        (0x3400, 0x4DBF),
        (0x4E00, 0x9FFF),
        (0xAC00, 0xD7A3),
        (0xD800, 0xF8FF),
        (0x20000, 0xDFFFF),
        (0xF0000, 0x10FFFF),
    ]
    bounds = [0, *(x for lo, hi in skip for x in (lo, hi + 1)), 0x110000]
    chars = [chr(c) for lo, hi in zip(bounds[::2], bounds[1::2]) for c in range(lo, hi) if not chr(c).isalnum()]
    pieces = pre_tokenizers.BertPreTokenizer().pre_tokenize_str("a" + "a".join(chars) + "a")
    marks = sorted(ord(piece) for piece, _ in pieces if len(piece) == 1 and piece != "a")
    ranges: list[list[int]] = []
    for c in marks:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return (
        "["
        + "".join(_regex_literal(chr(lo)) + (f"-{_regex_literal(chr(hi))}" if hi > lo else "") for lo, hi in ranges)
        + "]"
    )


def _regex_literal(text: str) -> str:
    """`text` as a literal in an Oniguruma regex (the `tokenizers` library's): every character by its code point."""
    return "".join(f"\\x{{{ord(c):X}}}" for c in text)


def _without_vocabulary_added_tokens(backend: Backend) -> Backend:
    """`backend` without the non-special added tokens that the vocabulary holds anyway. bertkit wrote never_split
    words into tokenizer.json as such, which match anywhere in a text, even inside a word; never_split now lives
    in the pre-tokenizer (and tokenizer_config.json), and dropping them changes no id."""
    vocab = backend.get_vocab(with_added_tokens=False)
    if not any(not t.special and t.content in vocab for t in backend.get_added_tokens_decoder().values()):
        return backend
    data = json.loads(backend.to_str())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["special"] or t["content"] not in vocab]
    return Backend.from_str(json.dumps(data))


def _read_settings(path: str) -> dict[str, Any]:
    """A tokenizer folder's JSON settings file as a dict; {} where there is none."""
    if not os.path.exists(path):
        return {}
    data = read_json(path, TokenizerError)
    if not isinstance(data, dict):
        raise TokenizerError(f"{path}: expected a JSON object")
    return data


def _token_text(value: object) -> str:
    return value["content"] if isinstance(value, dict) else str(value)


def _check_truncation(max_length: int, stride: int, pad_to_multiple_of: int | None, specials: int) -> None:
    """The lengths of a call that truncates must fit: max_length a multiple of pad_to_multiple_of (where it pads),
    room for the `specials` [CLS] / [SEP] of every row, and a stride that leaves new tokens in every window."""
    if pad_to_multiple_of is not None and max_length % pad_to_multiple_of:
        raise TokenizerError(
            f"max_length={max_length} is not a multiple of pad_to_multiple_of="
            f"{pad_to_multiple_of}: rows could not be both"
        )
    if max_length < specials:
        raise TokenizerError(
            f"max_length={max_length} is shorter than the {specials} special tokens ([CLS], [SEP]) every row needs"
        )
    if not 0 <= stride < max(1, max_length - specials):
        raise TokenizerError(
            f"stride={stride} must be >= 0 and smaller than max_length minus the special "
            f"tokens ({max_length} - {specials}): each window must add new tokens"
        )


def _unequal_rows(plan: Plan) -> str:
    """What to do about rows of different lengths that cannot be one tensor."""
    if plan.padding == "max_length" and not plan.truncation:
        return (
            f"padding='max_length' does not cut rows longer than max_length={plan.max_length}; pass "
            "truncation=True to cut them"
        )
    return "pass padding=True to return tensors"


def _as_tensors(data: dict[str, Any], return_tensors: str | None, batched: bool, unequal: str) -> dict[str, Any]:
    """The lists of `data` as int64 tensors ("pt") or arrays ("np"); `unequal` says what to do about rows of
    different lengths."""
    if return_tensors is None:
        return data
    if return_tensors not in ("pt", "np"):
        raise TokenizerError(f"return_tensors must be 'pt', 'np' or None, got {return_tensors!r}")
    import numpy as np

    out: dict[str, Any] = {}
    for key, value in data.items():
        rows = value if batched else [value]
        if key not in ("overflow_to_sample_mapping", "length") and len({len(r) for r in rows}) > 1:
            raise TokenizerError(f"rows have different lengths {sorted({len(r) for r in rows})}: {unequal}")
        array: np.ndarray | Tensor = np.asarray(rows, dtype=np.int64)
        if return_tensors == "pt":
            import torch

            array = torch.from_numpy(array)
        out[key] = array
    return out


_WIDE = char_class(WIDE_TEXT)  # CJK ideographs and the punctuation Chinese text uses (text.py)
_SPACE_BY_WIDE = re.compile(f"(?<=[{_WIDE}]) | (?=[{_WIDE}])")


# what transformers' clean_up_tokenization rewrites, in its order: a space before punctuation, around an apostrophe
# and before an English contraction's second part
_CLEAN_UP = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


def clean_up_tokenization(text: str) -> str:
    """Decoded text without the spaces WordPiece leaves inside English punctuation: "can ' t ." -> "can't."."""
    for old, new in _CLEAN_UP:
        text = text.replace(old, new)
    return text


def _join_cjk(text: str) -> str:
    """Drop the spaces decoding puts next to CJK characters: "今 天 好 。" -> "今天好。"."""
    return _SPACE_BY_WIDE.sub("", text)


if not TYPE_CHECKING:  # old names, for one release
    __getattr__ = moved(
        __name__,
        {
            "train_vocab": "bertkit.vocab:train_vocab",
            "vocab_shortfall": "bertkit.vocab:vocab_shortfall",
            "MIN_FREQUENCY": "bertkit.vocab:MIN_FREQUENCY",
            "ASCII_ALPHABET": "bertkit.vocab:ASCII_ALPHABET",
            "earlier_vocabulary": "bertkit.vocab:earlier_vocabulary",
            "TokenizeConfig": "bertkit.commands.tokenize:TokenizeConfig",
            "tokenize_main": "bertkit.commands.tokenize:main",
            "VocabTrainConfig": "bertkit.commands.tokenizer:VocabTrainConfig",
            "train_main": "bertkit.commands.tokenizer:train",
            "tokenizer_main": "bertkit.commands.tokenizer:main",
            "token_rows": "bertkit.commands.tokenize:token_rows",
        },
    )
