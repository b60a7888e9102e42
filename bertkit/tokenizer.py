"""BERT's WordPiece tokenizer on the `tokenizers` library (HF's Rust implementation).

    text --normalise--> clean control characters, put spaces around every CJK character,
                        lower-case and strip accents (as configured)
         --pre-tokenise--> split on whitespace and punctuation
         --WordPiece--> greedy longest match from the vocabulary, later pieces marked "##";
                        a word with no match, or over 100 characters, becomes [UNK]
         --template--> [CLS] A [SEP] (B [SEP]), token_type_ids 0 for A, 1 for B

The pipeline is the one transformers' BertTokenizerFast builds, so ids, type ids, masks and
offsets are the same; this class adds clear errors, CJK-friendly decoding and vocab training.
Chinese text is split per character because BERT's vocabularies (bert-base-chinese: 21128
entries) hold single characters.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tokenizers import AddedToken, Tokenizer as Backend, decoders, normalizers, pre_tokenizers, processors, trainers
from tokenizers.models import WordPiece

from .data.builtin import BUILTIN_CORPORA
from .errors import BertkitError
from .files import atomic_write_text, digest, read_text, text_lines
from .options import opt, parse
from .text import WIDE_TEXT, char_class, pad

VOCAB_FILE, TOKENIZER_FILE, CONFIG_FILE, SPECIAL_MAP_FILE = (
    "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
SPECIAL_ROLES = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")
DEFAULT_SPECIALS = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                    "mask_token": "[MASK]"}
MAX_CHARS_PER_WORD = 100  # BERT: longer words are [UNK]
# Every vocabulary we learn holds these, whatever the corpus: BERT's own vocabularies have every
# printable ASCII character, and without them a Chinese news corpus (full-width ，０１Ａ only) gives a
# vocabulary in which the half-width digits, Latin letters and punctuation of web text are [UNK].
ASCII_ALPHABET = "".join(chr(c) for c in range(33, 127))
TRUNCATION = ("longest_first", "only_first", "only_second")


class TokenizerError(BertkitError, ValueError):
    """A vocabulary, tokenizer directory or call that cannot work."""


# ----- vocabulary files --------------------------------------------------------------------------
def read_vocab(path: str) -> dict[str, int]:
    """vocab.txt: one token per line, id = line number (from 0). Duplicates are an error."""
    text = read_text(path, TokenizerError, missing="no such vocabulary file",
                     cannot_read="cannot read vocabulary ({error})",
                     not_utf8="not UTF-8 (byte {byte:#04x} at offset {offset}); save the vocabulary as UTF-8")
    if not text.strip():
        raise TokenizerError(f"{path}: the vocabulary file is empty")
    vocab: dict[str, int] = {}
    for i, token in enumerate(text_lines(text)):
        if token in vocab:
            raise TokenizerError(f"{path}: line {i + 1}: {token!r} already appears on line {vocab[token] + 1}; "
                                 "every token needs its own line and id")
        vocab[token] = i
    return vocab


def write_vocab(path: str, vocab: dict[str, int]) -> None:
    atomic_write_text(path, "".join(token + "\n" for token, _ in sorted(vocab.items(), key=lambda kv: kv[1])))


# ----- encodings ---------------------------------------------------------------------------------
class BatchEncoding(dict):
    """input_ids, token_type_ids, attention_mask, ... by key (or attribute), plus per-row details."""

    def __init__(self, data: dict[str, Any], encodings, ids_to_tokens: dict[int, str], retrack=None):
        super().__init__(data)
        self.encodings = encodings  # tokenizers.Encoding per row
        self._ids_to_tokens = ids_to_tokens
        self._retrack = retrack  # set when the encodings were made without word/offset tracking

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def _tracked(self):
        if self._retrack is not None:
            self.encodings, self._retrack = self._retrack(), None
        return self.encodings

    def tokens(self, i: int = 0) -> list[str]:
        return [self._ids_to_tokens[t] for t in self.encodings[i].ids]

    def word_ids(self, i: int = 0) -> list[int | None]:
        """Which word of its text each token came from (None for [CLS], [SEP], padding)."""
        return self._tracked()[i].word_ids

    def sequence_ids(self, i: int = 0) -> list[int | None]:
        """0 for tokens of the first text, 1 for the second, None for special tokens and padding."""
        return self._tracked()[i].sequence_ids


# ----- the tokenizer -----------------------------------------------------------------------------
class Tokenizer:
    """BERT WordPiece tokenizer. Build with from_pretrained(dir), from_vocab(path or dict) or train_vocab()."""

    def __init__(self, vocab: dict[str, int], *, do_lower_case: bool = True, strip_accents: bool | None = None,
                 tokenize_chinese_chars: bool = True, never_split: Sequence[str] = (),
                 model_max_length: int = 512, backend: Backend | None = None, **special_tokens: str):
        unknown = set(special_tokens) - set(SPECIAL_ROLES)
        if unknown:
            raise TokenizerError(f"unknown tokenizer argument(s): {', '.join(sorted(unknown))}")
        self.specials = {**DEFAULT_SPECIALS, **special_tokens}
        missing = [f"{role}={tok!r}" for role, tok in self.specials.items() if tok not in vocab]
        if missing:
            raise TokenizerError(f"the vocabulary lacks the special token(s) {', '.join(missing)}; a BERT "
                                 "vocabulary starts with [PAD] ... [UNK] [CLS] [SEP] [MASK]")
        not_in_vocab = [w for w in never_split if w not in vocab]
        if not_in_vocab:
            raise TokenizerError(f"never_split word(s) {not_in_vocab} are not in the vocabulary; a word kept whole "
                                 "needs an id")
        if model_max_length < 2:
            raise TokenizerError(f"model_max_length must be >= 2 ([CLS] and [SEP]), got {model_max_length}")
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.never_split = list(never_split)
        self.model_max_length = model_max_length
        self.backend = backend if backend is not None else Backend(
            WordPiece(vocab, unk_token=self.specials["unk_token"], max_input_chars_per_word=MAX_CHARS_PER_WORD))
        self._configure_backend()
        self.vocab = self.backend.get_vocab(with_added_tokens=False)
        self.ids_to_tokens = {i: t for t, i in self.vocab.items()}
        for role, token in self.specials.items():
            setattr(self, role, token)
            setattr(self, role + "_id", self.vocab[token])
        self.all_special_ids = sorted({self.vocab[t] for t in self.specials.values()})

    def _configure_backend(self) -> None:
        """The BERT pipeline of transformers' BertTokenizerFast, with this tokenizer's settings."""
        b = self.backend
        b.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=self.tokenize_chinese_chars,
                                                  strip_accents=self.strip_accents, lowercase=self.do_lower_case)
        b.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        cls, sep = self.specials["cls_token"], self.specials["sep_token"]
        vocab = b.get_vocab(with_added_tokens=False)
        b.post_processor = processors.TemplateProcessing(
            single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
        b.decoder = decoders.WordPiece(prefix="##")
        # "[MASK]" typed in text stays one token and is not lower-cased (as in transformers)
        b.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in self.specials.values()])
        if self.never_split:
            b.add_tokens([AddedToken(w, normalized=False) for w in self.never_split])

    # ----- construction and files ------------------------------------------------------------
    @classmethod
    def from_vocab(cls, vocab: str | os.PathLike | dict[str, int], **kwargs: Any) -> "Tokenizer":
        """From a vocab.txt path or a {token: id} dict."""
        if isinstance(vocab, dict):
            return cls(vocab, **kwargs)
        path = os.fspath(vocab)
        try:
            return cls(read_vocab(path), **kwargs)
        except TokenizerError as e:
            raise TokenizerError(str(e) if str(e).startswith(path) else f"{path}: {e}") from None

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **overrides: Any) -> "Tokenizer":
        """A local HF tokenizer directory: vocab.txt and/or tokenizer.json, + tokenizer_config.json."""
        directory = os.fspath(path)
        if not os.path.isdir(directory):
            raise TokenizerError(f"{directory}: no such directory; pass a local folder holding vocab.txt "
                                 "(and optionally tokenizer.json, tokenizer_config.json)")
        settings: dict[str, Any] = {}
        for name in (SPECIAL_MAP_FILE, CONFIG_FILE):  # the config wins over the special-token map
            settings.update(_read_json(os.path.join(directory, name)))
        kwargs = {k: settings[k] for k in ("do_lower_case", "strip_accents", "tokenize_chinese_chars",
                                           "never_split", "model_max_length") if settings.get(k) is not None}
        if kwargs.get("model_max_length", 0) > 10**9:  # transformers writes a huge number for "no limit"
            del kwargs["model_max_length"]
        kwargs.update({role: _token_text(settings[role]) for role in SPECIAL_ROLES if settings.get(role)})
        kwargs.update(overrides)
        tokenizer_json, vocab_txt = os.path.join(directory, TOKENIZER_FILE), os.path.join(directory, VOCAB_FILE)
        if os.path.exists(tokenizer_json):
            try:
                backend = Backend.from_file(tokenizer_json)
            except Exception as e:
                raise TokenizerError(f"{tokenizer_json}: not a valid tokenizer.json ({e})") from e
            if not isinstance(backend.model, WordPiece):
                raise TokenizerError(f"{tokenizer_json}: a {type(backend.model).__name__} tokenizer, not WordPiece "
                                     "(BERT)")
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
        config = {"tokenizer_class": "BertTokenizer", "do_lower_case": self.do_lower_case,
                  "strip_accents": self.strip_accents, "tokenize_chinese_chars": self.tokenize_chinese_chars,
                  "never_split": self.never_split or None, "model_max_length": self.model_max_length,
                  "clean_up_tokenization_spaces": False, **self.specials}
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

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]):
        unk = self.unk_token_id
        if isinstance(tokens, str):
            return self.vocab.get(tokens, unk)
        return [self.vocab.get(t, unk) for t in tokens]

    def convert_ids_to_tokens(self, ids: int | Sequence[int]):
        if isinstance(ids, int):
            return self.ids_to_tokens[ids]
        return [self.ids_to_tokens[int(i)] for i in ids]

    def tokenize(self, text: str, text_pair: str | None = None) -> list[str]:
        """The WordPiece tokens of a text, without [CLS] / [SEP]."""
        self._set_truncation_and_padding(False, False, None, 0, None, specials=0)  # no leftover state
        return self.backend.encode(_check_text(text, "text"), _check_text(text_pair, "text_pair", optional=True),
                                   add_special_tokens=False).tokens

    # ----- encoding --------------------------------------------------------------------------
    def __call__(self, text: str | Sequence[str], text_pair: str | Sequence[str] | None = None, *,
                 add_special_tokens: bool = True, padding: bool | str = False,
                 truncation: bool | str | None = None, max_length: int | None = None, stride: int = 0,
                 pad_to_multiple_of: int | None = None, return_tensors: str | None = None,
                 return_token_type_ids: bool = True, return_attention_mask: bool = True,
                 return_special_tokens_mask: bool = False, return_offsets_mapping: bool = False,
                 return_overflowing_tokens: bool = False, return_length: bool = False,
                 is_split_into_words: bool = False) -> BatchEncoding:
        """Encode one text (or pair) or a batch, with transformers' argument names and meanings.

        is_split_into_words: each text is a list of words (e.g. characters with their tags);
        word_ids() then maps every token back to its word.

        truncation: True / "longest_first" (trim the longer of a pair, token by token), "only_first",
        "only_second", or False; max_length alone implies "longest_first". padding: True / "longest"
        (to the longest row), "max_length", or False. With return_overflowing_tokens, what truncation
        cuts off comes back as further rows (windows overlapping by `stride` tokens), and
        `overflow_to_sample_mapping` says which input each row came from.
        """
        if is_split_into_words:  # a "text" is a list of words: batched when the first item is a list too
            batched = bool(text) and isinstance(text[0], (list, tuple))
        else:
            batched = isinstance(text, (list, tuple))
        texts = list(text) if batched else [text]
        pairs = None
        if text_pair == "" and not batched:
            text_pair = None  # as transformers' fast tokenizer: an empty second text is no pair
        if text_pair is not None:
            pairs = list(text_pair) if batched else [text_pair]
            if not batched and isinstance(text_pair, (list, tuple)):
                raise TokenizerError("text is one string but text_pair is a list; pass lists for both to batch")
            if len(pairs) != len(texts):
                raise TokenizerError(f"text has {len(texts)} entries but text_pair has {len(pairs)}")
        check = _check_words if is_split_into_words else _check_text
        for i, t in enumerate(texts):
            check(t, f"text[{i}]" if batched else "text")
        for i, t in enumerate(pairs or ()):
            check(t, f"text_pair[{i}]" if batched else "text_pair")

        inputs = texts if pairs is None else list(zip(texts, pairs))
        # Without offsets the backend's fast path skips tracking them (and word ids): less work per text.
        # BatchEncoding re-encodes with tracking if word_ids() / sequence_ids() are asked for later.
        full = return_offsets_mapping or return_overflowing_tokens
        encode = self.backend.encode_batch if full or not hasattr(self.backend, "encode_batch_fast") \
            else self.backend.encode_batch_fast
        try:
            self._set_truncation_and_padding(padding, truncation, max_length, stride, pad_to_multiple_of,
                                             specials=(3 if pairs else 2) if add_special_tokens else 0)
            encodings = encode(inputs, add_special_tokens=add_special_tokens, is_pretokenized=is_split_into_words)
        except TokenizerError:
            raise
        except BaseException as e:  # the backend's own checks; a Rust panic is a BaseException
            if isinstance(e, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                raise
            raise TokenizerError(f"cannot encode with truncation={truncation!r}, max_length={max_length}, "
                                 f"stride={stride}: {e} (a stride must leave room for new tokens in every "
                                 "window)") from None

        rows, sample = encodings, None
        if return_overflowing_tokens:
            rows, sample = [], []
            for i, enc in enumerate(encodings):
                for window in [enc, *enc.overflowing]:
                    rows.append(window)
                    sample.append(i)
        data: dict[str, Any] = {"input_ids": [e.ids for e in rows]}
        if return_token_type_ids:
            data["token_type_ids"] = [e.type_ids for e in rows]
        if return_attention_mask:
            data["attention_mask"] = [e.attention_mask for e in rows]
        if return_special_tokens_mask:
            data["special_tokens_mask"] = [e.special_tokens_mask for e in rows]
        if return_offsets_mapping:
            data["offset_mapping"] = [e.offsets for e in rows]
        if return_length:
            data["length"] = [len(e.ids) for e in rows]
        if sample is not None:
            data["overflow_to_sample_mapping"] = sample
        if not batched and not return_overflowing_tokens:
            data = {k: v[0] for k, v in data.items()}

        def tracked():  # the same call with offsets tracked, for word_ids() / sequence_ids()
            return self(text, text_pair, add_special_tokens=add_special_tokens, padding=padding,
                        truncation=truncation, max_length=max_length, stride=stride,
                        pad_to_multiple_of=pad_to_multiple_of, return_offsets_mapping=True,
                        is_split_into_words=is_split_into_words).encodings

        return BatchEncoding(_as_tensors(data, return_tensors, batched or return_overflowing_tokens), rows,
                             self.ids_to_tokens, None if full else tracked)

    def encode(self, text: str, text_pair: str | None = None, **kwargs: Any) -> list[int]:
        """The ids of one text (or pair), with [CLS]/[SEP] unless add_special_tokens=False."""
        return self(_check_text(text, "text"), text_pair, return_token_type_ids=False,
                    return_attention_mask=False, **kwargs)["input_ids"]

    def encode_batch(self, texts: Sequence[str], pairs: Sequence[str] | None = None, **kwargs: Any) -> BatchEncoding:
        if not isinstance(texts, (list, tuple)):
            raise TokenizerError(f"encode_batch takes a list of texts, got {type(texts).__name__}")
        return self(list(texts), list(pairs) if pairs is not None else None, **kwargs)

    def _set_truncation_and_padding(self, padding, truncation, max_length, stride, pad_to_multiple_of,
                                    specials: int) -> None:
        """Configure the backend for one call; `specials` = how many [CLS]/[SEP] each row gets."""
        b = self.backend
        if truncation is None:
            truncation = max_length is not None
        if truncation is True:
            truncation = "longest_first"
        if truncation is not False and truncation not in TRUNCATION:
            raise TokenizerError(f"truncation must be True, False or one of {', '.join(TRUNCATION)}; "
                                 f"got {truncation!r}")
        if padding is True:
            padding = "longest"
        if padding not in (False, "longest", "max_length", "do_not_pad"):
            raise TokenizerError(f"padding must be True, False, 'longest' or 'max_length'; got {padding!r}")
        if (truncation or padding == "max_length") and max_length is None:
            max_length = self.model_max_length
        if max_length is not None and (not isinstance(max_length, int) or max_length < 1):
            raise TokenizerError(f"max_length must be a positive integer, got {max_length!r}")
        if pad_to_multiple_of is not None and max_length is not None and (truncation or padding == "max_length") \
                and max_length % pad_to_multiple_of:
            raise TokenizerError(f"max_length={max_length} is not a multiple of pad_to_multiple_of="
                                 f"{pad_to_multiple_of}: rows could not be both")
        if truncation:
            if max_length < specials:
                raise TokenizerError(f"max_length={max_length} is shorter than the {specials} special tokens "
                                     "([CLS], [SEP]) every row needs")
            if not 0 <= stride < max(1, max_length - specials):
                raise TokenizerError(f"stride={stride} must be >= 0 and smaller than max_length minus the special "
                                     f"tokens ({max_length} - {specials}): each window must add new tokens")
            b.enable_truncation(max_length, stride=stride, strategy=truncation)
        else:
            b.no_truncation()
        if padding in ("longest", "max_length"):
            b.enable_padding(length=max_length if padding == "max_length" else None,
                             pad_to_multiple_of=pad_to_multiple_of, pad_id=self.pad_token_id, pad_type_id=0,
                             pad_token=self.pad_token)
        else:
            b.no_padding()

    # ----- decoding --------------------------------------------------------------------------
    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """ids -> text: "##" pieces joined to their word, no spaces around CJK characters."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        size = self.backend.get_vocab_size()
        bad = [i for i in ids if not 0 <= int(i) < size]
        if bad:
            raise TokenizerError(f"ids {bad[:5]} are outside the vocabulary (size {self.vocab_size})")
        return _join_cjk(self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens))

    def batch_decode(self, rows, skip_special_tokens: bool = False) -> list[str]:
        return [self.decode(r, skip_special_tokens) for r in rows]


def vocab_digest(tokenizer) -> str:
    """The fingerprint of a tokenizer's vocabulary, tokens in id order (16 hex digits)."""
    vocab = tokenizer.get_vocab()
    return digest(sorted(vocab, key=vocab.get))


# ----- vocabulary training -----------------------------------------------------------------------
def train_vocab(files: str | os.PathLike | Sequence[str | os.PathLike] | None = None, *,
                texts: Iterable[str] | None = None, vocab_size: int = 21128, min_frequency: int = 2,
                do_lower_case: bool = True, strip_accents: bool | None = None, tokenize_chinese_chars: bool = True,
                limit_alphabet: int | None = None, base_alphabet: str = ASCII_ALPHABET, show_progress: bool = False,
                model_max_length: int = 512) -> Tokenizer:
    """Learn a WordPiece vocabulary from text `files` or an iterable of `texts` (read several times: a one-shot
    iterator is listed first; a re-iterable such as bertkit.data.corpus.Corpus is streamed on each pass).

    Special tokens come first ([PAD] [UNK] [CLS] [SEP] [MASK] = ids 0..4). With
    tokenize_chinese_chars every CJK character is its own word, so Chinese is learned per
    character, as in bert-base-chinese. limit_alphabet (default: what vocab_size leaves after
    the specials) keeps only the most frequent characters, so the vocabulary stays within vocab_size.
    Every character of base_alphabet (default: printable ASCII, lower-cased with do_lower_case) is
    in the vocabulary even when the corpus lacks it, letters and digits with their "##" forms too,
    so such text is never [UNK]; the least frequent learned pieces make room when vocab_size is full.
    """
    if (files is None) == (texts is None):
        raise TokenizerError("pass exactly one of files=... (paths) or texts=... (strings)")
    if vocab_size <= len(DEFAULT_SPECIALS):
        raise TokenizerError(f"vocab_size must be larger than the {len(DEFAULT_SPECIALS)} special tokens")
    backend = Backend(WordPiece(unk_token=DEFAULT_SPECIALS["unk_token"], max_input_chars_per_word=MAX_CHARS_PER_WORD))
    backend.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=tokenize_chinese_chars,
                                                    strip_accents=strip_accents, lowercase=do_lower_case)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    if files is not None:
        paths = [os.fspath(files)] if isinstance(files, (str, os.PathLike)) else [os.fspath(f) for f in files]
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing or not paths:
            raise TokenizerError(f"corpus file(s) not found: {', '.join(missing) or '(none given)'}")
    elif iter(texts) is texts:
        texts = list(texts)  # read more than once below; a re-iterable (data.corpus.Corpus) streams each time

    def learn(alphabet: list[str], specials: list[str]) -> dict[str, int]:
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                            special_tokens=specials, limit_alphabet=len(alphabet),
                                            initial_alphabet=alphabet, continuing_subword_prefix="##",
                                            show_progress=show_progress)
        if files is not None:
            backend.train(paths, trainer)
        else:
            backend.train_from_iterator(texts, trainer)
        return backend.get_vocab(with_added_tokens=False)

    # The tokenizers trainer breaks ties by hash order, which changes from process to process
    # (huggingface/tokenizers#1794): which characters a limit keeps, and the ids of the "##c" pieces, which
    # decide between merges of equal count. So the alphabet is chosen here (most frequent first, ties by code
    # point) and handed over as initial_alphabet, and a second pass gives the "##c" pieces the first one found
    # fixed ids (as special tokens, in sorted order): the same corpus gives the same vocab.txt in every process.
    counts = _char_counts(backend.normalizer, _lines(paths) if files is not None else texts)
    ranked = sorted(counts, key=lambda c: (-counts[c], c))
    base = base_alphabet.lower() if do_lower_case else base_alphabet
    size = limit_alphabet or vocab_size - len(DEFAULT_SPECIALS)
    specials = list(DEFAULT_SPECIALS.values())
    for _ in range(4):  # the trainer keeps the whole alphabet (+ "##" forms): shrink it until the vocab fits
        alphabet = ranked[:size]
        vocab = learn(alphabet, specials)
        singles = [t for t in vocab if _is_single(t)]  # what _with_base_alphabet cannot drop
        excess = len(DEFAULT_SPECIALS) + len(singles) + len(_missing_base(vocab, base)) - vocab_size
        if excess <= 0 or limit_alphabet:
            break
        size = max(1, size - excess)
    pieces = sorted(t for t in singles if t.startswith("##"))
    if pieces:
        vocab = learn(alphabet, specials + pieces)
        # back to the trainer's own layout: specials, characters, "##" characters, then the merges
        order = [t for t in sorted(vocab, key=vocab.get) if t not in set(pieces)]
        chars = len(specials) + sum(1 for t in order[len(specials):] if len(t) == 1)
        order = order[:chars] + pieces + order[chars:]
        vocab = {t: i for i, t in enumerate(order)}
    if len(vocab) <= len(DEFAULT_SPECIALS):
        raise TokenizerError("the corpus is empty: no vocabulary could be learned")
    vocab = _with_base_alphabet(vocab, base, vocab_size)
    return Tokenizer(vocab, do_lower_case=do_lower_case, strip_accents=strip_accents,
                     tokenize_chinese_chars=tokenize_chinese_chars, model_max_length=model_max_length)


# ----- helpers -----------------------------------------------------------------------------------
def _lines(paths: list[str]) -> Iterable[str]:
    for path in paths:
        try:
            with open(path, encoding="utf-8") as fh:
                yield from fh
        except UnicodeDecodeError as e:
            raise TokenizerError(f"{path}: not UTF-8 text (byte {e.start}); convert it first, e.g. "
                                 f"iconv -f GBK -t UTF-8 {path}") from None
        except OSError as e:
            raise TokenizerError(f"{path}: cannot read ({e})") from e


def _char_counts(normalizer, texts: Iterable[str]) -> Counter:
    """How often each character occurs in the normalized texts, outside whitespace: the trainer's alphabet."""
    counts: Counter = Counter()
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TokenizerError(f"texts[{i}] must be a string, got {type(text).__name__}")
        counts.update(normalizer.normalize_str(text))
    for space in [c for c in counts if c.isspace()]:
        del counts[space]
    return counts


def _check_same_vocab(directory: str, from_txt: dict[str, int], from_json: dict[str, int]) -> None:
    """vocab.txt and tokenizer.json must hold the same ids: transformers' slow tokenizer reads the
    first and the fast one the second, so a mismatch tokenizes the same text two ways."""
    if from_txt == from_json:
        return
    txt, js = sorted(from_txt, key=from_txt.get), sorted(from_json, key=from_json.get)
    first = next((i for i, (a, b) in enumerate(zip(txt, js)) if a != b), min(len(txt), len(js)))
    shown = lambda tokens: repr(tokens[first]) if first < len(tokens) else "(end)"
    raise TokenizerError(f"{directory}: {VOCAB_FILE} ({len(txt)} tokens) and {TOKENIZER_FILE} ({len(js)}) disagree "
                         f"from id {first} ({shown(txt)} vs {shown(js)}); one of them is stale: remove it, or save "
                         "the tokenizer again")


def _is_single(token: str) -> bool:
    """One character, or "##" and one character (not a special token)."""
    return len(token.removeprefix("##")) == 1


def _missing_base(vocab: dict[str, int], alphabet: str) -> list[str]:
    """The tokens of `alphabet` not in `vocab`: each character, and for letters and digits also "##c",
    since they continue words (punctuation is always a word of its own)."""
    wanted = (t for c in dict.fromkeys(alphabet) for t in ((c, "##" + c) if c.isalnum() else (c,)))
    return [t for t in wanted if t not in vocab]


def _with_base_alphabet(vocab: dict[str, int], alphabet: str, vocab_size: int) -> dict[str, int]:
    """`vocab` plus the `alphabet` tokens it lacks. Room is made by dropping the pieces learned last,
    the least frequent ones; specials and single characters stay."""
    missing = _missing_base(vocab, alphabet)
    if not missing:
        return vocab
    tokens = sorted(vocab, key=vocab.get)
    droppable = [i for i, t in enumerate(tokens) if not _is_single(t) and t not in DEFAULT_SPECIALS.values()]
    excess = len(tokens) + len(missing) - vocab_size
    if excess > len(droppable):
        raise TokenizerError(f"vocab_size {vocab_size} is too small for the corpus's characters plus "
                             f"{len(missing)} base-alphabet tokens (printable ASCII); raise it (--vocab-size), "
                             "or in Python pass train_vocab(..., base_alphabet='')")
    dropped = set(droppable[len(droppable) - max(0, excess):])
    tokens = [t for i, t in enumerate(tokens) if i not in dropped] + missing
    return {t: i for i, t in enumerate(tokens)}


def _check_text(text, name: str, optional: bool = False):
    if not isinstance(text, str) and not (optional and text is None):
        raise TokenizerError(f"{name} must be a string, got {type(text).__name__}")
    return text


def _check_words(words, name: str):
    if not isinstance(words, (list, tuple)) or not all(isinstance(w, str) for w in words):
        raise TokenizerError(f"{name} must be a list of strings (is_split_into_words=True)")
    return words


def _read_json(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as e:
        raise TokenizerError(f"{path}: line {e.lineno}, column {e.colno}: not valid JSON ({e.msg})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TokenizerError(f"{path}: cannot read ({e})") from e
    if not isinstance(data, dict):
        raise TokenizerError(f"{path}: expected a JSON object")
    return data


def _token_text(value) -> str:
    return value["content"] if isinstance(value, dict) else str(value)


def _as_tensors(data: dict[str, Any], return_tensors: str | None, batched: bool) -> dict[str, Any]:
    if return_tensors is None:
        return data
    if return_tensors not in ("pt", "np"):
        raise TokenizerError(f"return_tensors must be 'pt', 'np' or None, got {return_tensors!r}")
    import numpy as np

    out = {}
    for key, value in data.items():
        rows = value if batched else [value]
        if key not in ("overflow_to_sample_mapping", "length") and len({len(r) for r in rows}) > 1:
            raise TokenizerError(f"rows have different lengths {sorted({len(r) for r in rows})}: pass padding=True "
                                 "to return tensors")
        array = np.asarray(rows, dtype=np.int64)
        if return_tensors == "pt":
            import torch

            array = torch.from_numpy(array)
        out[key] = array
    return out


_WIDE = char_class(WIDE_TEXT)  # CJK ideographs and the punctuation Chinese text uses (text.py)
_SPACE_BY_WIDE = re.compile(f"(?<=[{_WIDE}]) | (?=[{_WIDE}])")


def _join_cjk(text: str) -> str:
    """Drop the spaces decoding puts next to CJK characters: "今 天 好 。" -> "今天好。"."""
    return _SPACE_BY_WIDE.sub("", text)


# ----- command line ------------------------------------------------------------------------------
@dataclass
class TokenizeConfig:
    """Show how a text becomes tokens and ids: one row per token with its type id and text span."""

    model: str = opt("", "a tokenizer or model directory (vocab.txt / tokenizer.json)", required=True)
    text: str = opt("", "the text to tokenize", positional=True)
    pair: str | None = opt(None, "a second text (sentence B)")


@dataclass
class VocabTrainConfig:
    """Learn a WordPiece vocabulary from a corpus (streamed, as often as the trainer needs) and save a tokenizer."""

    corpus: list[str] = opt(list, f"text files (one text per line), folders, JSONL, Parquet, .gz, or "
                                  f"{', '.join(BUILTIN_CORPORA)}", nargs="+", required=True)
    vocab_size: int = opt(21128, "entries in the vocabulary, specials included")
    min_frequency: int = opt(2, "pieces seen fewer times are left out")
    out: str = opt("", "directory to write vocab.txt, tokenizer.json, ...", required=True)
    lower_case: bool = opt(True, "lowercase and strip accents (--no-lower-case: a cased vocabulary)")
    chinese_chars: bool = opt(True, "split CJK text per character (--no-chinese-chars: do not)")
    doc_sep: str = opt("line", "plain text: one text per line, or texts separated by blank lines",
                       choices=["line", "blank"])
    text_field: str = opt("text", "JSONL field / Parquet column holding the text")
    vocab_sample: str | None = opt(None, "learn from a seeded sample spread over the corpus: 200MB, 2GB or 50000docs "
                                         "(default: all of it)")
    seed: int = opt(0, "seed of the sample")


def tokenize_main(argv: list[str]) -> int:
    args = parse(TokenizeConfig, argv, prog="bertkit tokenize")
    tok = Tokenizer.from_pretrained(args.model)
    enc = tok(args.text, args.pair, return_offsets_mapping=True)
    sources = [args.text, args.pair]
    print(f"{'#':>3}  {pad('token', 14)} {'id':>6}  type  text")
    for i, (token, token_id, type_id, (start, end), seq) in enumerate(zip(
            enc.tokens(), enc["input_ids"], enc["token_type_ids"], enc["offset_mapping"], enc.sequence_ids())):
        span = sources[seq][start:end] if seq is not None else ""
        print(f"{i:>3}  {pad(token, 14)} {token_id:>6}  {type_id:>4}  {span}")
    print(f"{len(enc['input_ids'])} tokens; vocabulary of {tok.vocab_size}")
    return 0


def train_main(argv: list[str]) -> int:
    from .data.corpus import Corpus

    args = parse(VocabTrainConfig, argv, prog="bertkit tokenizer train")
    texts = Corpus(args.corpus, text_field=args.text_field, doc_sep=args.doc_sep, sample=args.vocab_sample,
                   seed=args.seed)
    tok = train_vocab(texts=texts, vocab_size=args.vocab_size, min_frequency=args.min_frequency, show_progress=True,
                      do_lower_case=args.lower_case, tokenize_chinese_chars=args.chinese_chars)
    tok.save_pretrained(args.out)
    print(f"vocabulary of {tok.vocab_size} written to {args.out}")
    return 0


def tokenizer_main(argv: list[str]) -> int:
    """Tokenizer tools: `bertkit tokenizer train ...`."""
    if not argv or argv[0] != "train":
        print("usage: bertkit tokenizer train --corpus SPEC... --vocab-size N --out DIR [--vocab-sample 200MB]")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return train_main(argv[1:])
