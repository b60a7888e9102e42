"""Learning a WordPiece vocabulary from a corpus: the tokenizer bertkit pretrains with, when none is given.

    train_vocab(files=... | texts=..., vocab_size=21128) -> Tokenizer     specials first, then the corpus's
                          characters (and their "##" forms), then pieces the WordPiece trainer joined
    vocab_shortfall(tok, asked, min_frequency) -> why a vocabulary is smaller than asked, or None
    earlier_vocabulary(out, overwrite, corpus) -> the tokenizer files a new vocabulary in `out` would replace

The trainer is the `tokenizers` library's; this module makes its result the same in every process and keeps
printable ASCII in every vocabulary.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from tokenizers import Tokenizer as Backend
from tokenizers import normalizers, pre_tokenizers, trainers
from tokenizers.models import WordPiece

from .outfolder import check_out
from .text import is_cjk
from .tokenizer import DEFAULT_SPECIALS, MAX_CHARS_PER_WORD, TOKENIZER_FILES, Tokenizer, TokenizerError

MIN_FREQUENCY = 2  # train_vocab joins two pieces into a new one only where they stand side by side this often
# Every vocabulary we learn holds these, whatever the corpus: BERT's own vocabularies have every
# printable ASCII character, and without them a Chinese news corpus (full-width ，０１Ａ only) gives a
# vocabulary in which the half-width digits, Latin letters and punctuation of web text are [UNK].
ASCII_ALPHABET = "".join(chr(c) for c in range(33, 127))


def train_vocab(
    files: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
    *,
    texts: Iterable[str] | None = None,
    vocab_size: int = 21128,
    min_frequency: int = MIN_FREQUENCY,
    do_lower_case: bool = True,
    strip_accents: bool | None = None,
    tokenize_chinese_chars: bool = True,
    limit_alphabet: int | None = None,
    base_alphabet: str = ASCII_ALPHABET,
    show_progress: bool = False,
    model_max_length: int = 512,
) -> Tokenizer:
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
    backend = _backend(do_lower_case, strip_accents, tokenize_chinese_chars)
    paths = _corpus_paths(files) if files is not None else []
    if texts is not None and iter(texts) is texts:
        texts = list(texts)  # read more than once below; a re-iterable (data.corpus.Corpus) streams each time
    learn = _learner(backend, paths, texts, vocab_size, min_frequency, show_progress)

    # The tokenizers trainer breaks ties by hash order, which changes from process to process
    # (huggingface/tokenizers#1794): which characters a limit keeps, and the ids of the "##c" pieces, which
    # decide between merges of equal count. So the alphabet is chosen here (most frequent first, ties by code
    # point) and handed over as initial_alphabet, and a second pass gives the "##c" pieces the first one found
    # fixed ids (as special tokens, in sorted order): the same corpus gives the same vocab.txt in every process.
    counts = _char_counts(backend.normalizer, _lines(paths) if texts is None else texts)  # texts None: files given
    ranked = sorted(counts, key=lambda c: (-counts[c], c))
    base = base_alphabet.lower() if do_lower_case else base_alphabet
    alphabet, vocab = _fitting_alphabet(learn, ranked, base, vocab_size, limit_alphabet)
    vocab = _with_fixed_piece_ids(learn, alphabet, vocab)
    if len(vocab) <= len(DEFAULT_SPECIALS):
        raise TokenizerError("the corpus is empty: no vocabulary could be learned")
    vocab = _with_base_alphabet(vocab, base, vocab_size)
    return Tokenizer(
        vocab,
        do_lower_case=do_lower_case,
        strip_accents=strip_accents,
        tokenize_chinese_chars=tokenize_chinese_chars,
        model_max_length=model_max_length,
    )


Learn = Callable[[list[str], list[str]], dict[str, int]]  # (alphabet, special tokens) -> a vocabulary


def _backend(do_lower_case: bool, strip_accents: bool | None, tokenize_chinese_chars: bool) -> Backend:
    """An untrained WordPiece tokenizer that normalizes and splits text as BERT does."""
    backend = Backend(WordPiece(unk_token=DEFAULT_SPECIALS["unk_token"], max_input_chars_per_word=MAX_CHARS_PER_WORD))
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=tokenize_chinese_chars,
        strip_accents=strip_accents,
        lowercase=do_lower_case,
    )
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return backend


def _corpus_paths(files: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """The corpus files as paths; an error naming those that are not files (or that none was given)."""
    paths = [os.fspath(files)] if isinstance(files, (str, os.PathLike)) else [os.fspath(f) for f in files]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing or not paths:
        raise TokenizerError(f"corpus file(s) not found: {', '.join(missing) or '(none given)'}")
    return paths


def _learner(
    backend: Backend,
    paths: list[str],
    texts: Iterable[str] | None,
    vocab_size: int,
    min_frequency: int,
    show_progress: bool,
) -> Learn:
    """learn(alphabet, specials): the WordPiece trainer run on the corpus (`paths`, or `texts` when given) from
    exactly that alphabet, the specials first; the vocabulary it learned."""

    def learn(alphabet: list[str], specials: list[str]) -> dict[str, int]:
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=specials,
            limit_alphabet=len(alphabet),
            initial_alphabet=alphabet,
            continuing_subword_prefix="##",
            show_progress=show_progress,
        )
        if texts is None:
            backend.train(paths, trainer)
        else:
            backend.train_from_iterator(texts, trainer)
        return backend.get_vocab(with_added_tokens=False)

    return learn


def _fitting_alphabet(
    learn: Learn, ranked: list[str], base: str, vocab_size: int, limit_alphabet: int | None
) -> tuple[list[str], dict[str, int]]:
    """The alphabet (the most frequent of `ranked`) and the vocabulary learned from it. The trainer keeps the whole
    alphabet (with "##" forms), so without limit_alphabet it shrinks until the characters, their "##" forms and
    the base alphabet's missing tokens fit in vocab_size (at most 4 tries)."""
    size = limit_alphabet or vocab_size - len(DEFAULT_SPECIALS)
    specials = list(DEFAULT_SPECIALS.values())
    for _ in range(4):
        alphabet = ranked[:size]
        vocab = learn(alphabet, specials)
        singles = [t for t in vocab if _is_single(t)]  # what _with_base_alphabet cannot drop
        excess = len(DEFAULT_SPECIALS) + len(singles) + len(_missing_base(vocab, base)) - vocab_size
        if excess <= 0 or limit_alphabet:
            break
        size = max(1, size - excess)
    return alphabet, vocab


def _with_fixed_piece_ids(learn: Learn, alphabet: list[str], vocab: dict[str, int]) -> dict[str, int]:
    """`vocab` learned again with its "##c" pieces handed over as special tokens in sorted order (fixed ids, so
    the merges between equal counts are the same in every process), then laid out as the trainer lays it out:
    specials, characters, "##" characters, then the merges."""
    pieces = sorted(t for t in vocab if _is_single(t) and t.startswith("##"))
    if not pieces:
        return vocab
    specials = list(DEFAULT_SPECIALS.values())
    vocab = learn(alphabet, specials + pieces)
    order = [t for t in sorted(vocab, key=vocab.__getitem__) if t not in set(pieces)]
    chars = len(specials) + sum(1 for t in order[len(specials) :] if len(t) == 1)
    order = order[:chars] + pieces + order[chars:]
    return {t: i for i, t in enumerate(order)}


def vocab_shortfall(tok: Tokenizer, asked: int, min_frequency: int) -> str | None:
    """Why a vocabulary train_vocab learned has fewer than the `asked` entries, in a line (None: it has them all).

    The WordPiece trainer starts from every character of the corpus, then again and again joins the two pieces
    that stand side by side inside one word most often into a new piece; it stops when the vocabulary is full or
    when the most frequent pair occurs fewer than min_frequency times. With tokenize_chinese_chars every CJK
    character is a word of its own, so Chinese text gives characters but never a longer piece."""
    if tok.vocab_size >= asked:
        return None
    pieces = [t for t in tok.vocab if t not in tok.specials.values()]
    chars = [t for t in pieces if len(t) == 1]
    longer = sum(len(t.removeprefix("##")) > 1 for t in pieces)
    cjk = tok.tokenize_chinese_chars and any(is_cjk(c) for c in chars)
    return (
        f"the vocabulary has {tok.vocab_size:,} entries, not the {asked:,} asked: the corpus gives no "
        f"more. It holds {len(chars):,} distinct characters, {len(pieces) - len(chars) - longer:,} '##' forms "
        f"of them and {longer:,} longer pieces, each a pair of pieces that stood side by side inside a word at "
        f"least min_frequency = {min_frequency} times; the trainer stops when no pair is that frequent"
        + (
            ", and CJK characters are words of their own, so Chinese text gives characters, never longer pieces"
            if cjk
            else ""
        )
        + ". A larger corpus gives more."
    )


def earlier_vocabulary(out: str, overwrite: bool, corpus: list[str]) -> list[str]:
    """The tokenizer files already in `out`, which a new vocabulary would replace: refused without --overwrite (a
    model trained with them would no longer match), and with it where `out` also holds other files (a model, a
    user's files) or the corpus, or is the working directory (outfolder.py); what it replaces is moved aside."""
    entries = check_out(
        out, TokenizerError, overwrite=False, inputs={}, ours=TOKENIZER_FILES.__contains__, what="a vocabulary"
    )
    earlier = [n for n in entries if n in TOKENIZER_FILES]
    if earlier and not overwrite:
        raise TokenizerError(
            f"--out {out}: already holds a vocabulary ({', '.join(earlier)}); a model trained with "
            "it would no longer match a new one: pass --overwrite to move it aside (to "
            f"{os.path.basename(os.path.normpath(out))}.replaced-<time>, not deleted), or another "
            "--out"
        )
    if earlier:
        check_out(
            out,
            TokenizerError,
            overwrite=True,
            inputs=[("--corpus", c) for c in corpus],
            ours=TOKENIZER_FILES.__contains__,
            what="a vocabulary",
        )
    return earlier


# ----- helpers -----------------------------------------------------------------------------------
def _lines(paths: list[str]) -> Iterable[str]:
    for path in paths:
        try:
            with open(path, encoding="utf-8") as fh:
                yield from fh
        except UnicodeDecodeError as e:
            raise TokenizerError(
                f"{path}: not UTF-8 text (byte {e.start}); convert it first, e.g. iconv -f GBK -t UTF-8 {path}"
            ) from None
        except OSError as e:
            raise TokenizerError(f"{path}: cannot read ({e})") from e


def _char_counts(normalizer: normalizers.Normalizer, texts: Iterable[str]) -> Counter[str]:
    """How often each character occurs in the normalized texts, outside whitespace: the trainer's alphabet."""
    counts: Counter[str] = Counter()
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TokenizerError(f"texts[{i}] must be a string, got {type(text).__name__}")
        counts.update(normalizer.normalize_str(text))
    for space in [c for c in counts if c.isspace()]:
        del counts[space]
    return counts


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
    tokens = sorted(vocab, key=vocab.__getitem__)
    droppable = [i for i, t in enumerate(tokens) if not _is_single(t) and t not in DEFAULT_SPECIALS.values()]
    excess = len(tokens) + len(missing) - vocab_size
    if excess > len(droppable):
        raise TokenizerError(
            f"vocab_size {vocab_size} is too small for the corpus's characters plus "
            f"{len(missing)} base-alphabet tokens (printable ASCII); raise it (--vocab-size), "
            "or in Python pass train_vocab(..., base_alphabet='')"
        )
    dropped = set(droppable[len(droppable) - max(0, excess) :])
    tokens = [t for i, t in enumerate(tokens) if i not in dropped] + missing
    return {t: i for i, t in enumerate(tokens)}
