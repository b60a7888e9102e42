"""`bertkit tokenizer train`: learn a WordPiece vocabulary from a corpus and save it as a tokenizer folder."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from ..data.builtin import BUILTIN_CORPORA
from ..data.corpus import DOC_SEPS, Corpus
from ..options import did_you_mean, opt, parse, shown
from ..outfolder import move_aside
from ..vocab import MIN_FREQUENCY, earlier_vocabulary, train_vocab, vocab_shortfall


@dataclass
class VocabTrainConfig:
    """Learn a WordPiece vocabulary from a corpus (streamed, as often as the trainer needs) and save a tokenizer."""

    corpus: list[str] = opt(
        list,
        f"text files (one text per line), folders, JSONL, Parquet, .gz, or {', '.join(BUILTIN_CORPORA)}",
        nargs="+",
        required=True,
    )
    vocab_size: int = opt(21128, "entries in the vocabulary, specials included")
    min_frequency: int = opt(
        MIN_FREQUENCY,
        "two pieces side by side inside a word become one only where seen this often (every character is kept)",
    )
    out: str = opt("", "directory to write vocab.txt, tokenizer.json, ...", required=True)
    lower_case: bool = opt(True, "lowercase and strip accents (--no-lower-case: a cased vocabulary)")
    chinese_chars: bool = opt(True, "split CJK text per character (--no-chinese-chars: do not)")
    doc_sep: str = opt("line", "plain text: one text per line, or texts separated by blank lines", choices=DOC_SEPS)
    text_field: str = opt("text", "JSONL field / Parquet column holding the text")
    vocab_sample: str | None = opt(
        None, "learn from a seeded sample spread over the corpus: 200MB, 2GB or 50000docs (default: all of it)"
    )
    seed: int = opt(0, "seed of the sample")
    overwrite: bool = opt(
        False, "replace a vocabulary already in --out: it is moved to <out>.replaced-<time> first (nothing is deleted)"
    )


def train(argv: list[str]) -> int:
    args = parse(VocabTrainConfig, argv, prog="bertkit tokenizer train")
    earlier = earlier_vocabulary(args.out, args.overwrite, args.corpus)  # before the training: refusals come first
    texts = Corpus(
        args.corpus, text_field=args.text_field, doc_sep=args.doc_sep, sample=args.vocab_sample, seed=args.seed
    )
    tok = train_vocab(
        texts=texts,
        vocab_size=args.vocab_size,
        min_frequency=args.min_frequency,
        show_progress=True,
        do_lower_case=args.lower_case,
        tokenize_chinese_chars=args.chinese_chars,
    )
    if earlier:
        move_aside(args.out, what="the earlier vocabulary", found=", ".join(earlier))
    tok.save_pretrained(args.out)
    shortfall = vocab_shortfall(tok, args.vocab_size, args.min_frequency)
    if shortfall:
        print(f"note: {shortfall}", file=sys.stderr)
    print(f"vocabulary of {tok.vocab_size} written to {args.out}")
    return 0


USAGE = "usage: bertkit tokenizer train --corpus SPEC... --vocab-size N --out DIR [--vocab-sample 200MB]"
TOOLS = {"train": train}  # the tokenizer's tools: `bertkit tokenizer NAME ...`


def main(argv: list[str]) -> int:
    """Tokenizer tools: `bertkit tokenizer train ...`."""
    if argv and argv[0] in TOOLS:
        return TOOLS[argv[0]](argv[1:])
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    # as argparse says a bad argument: the usage, then the error, on stderr, exit status 2
    what = (
        f"unknown tool {shown(argv[0])}{did_you_mean(argv[0], TOOLS)}" if argv else f"name a tool ({', '.join(TOOLS)})"
    )
    print(f"{USAGE}\nbertkit tokenizer: error: {what}", file=sys.stderr)
    return 2
