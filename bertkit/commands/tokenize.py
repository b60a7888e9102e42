"""`bertkit tokenize`: how a text becomes tokens and ids, one row per token."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass

from .. import tokenizer
from ..encoding import check_surrogates
from ..options import opt, parse
from ..text import pad
from ..tokenizer import Tokenizer


@dataclass
class TokenizeConfig:
    """Show how a text becomes tokens and ids: one row per token with its type id and text span."""

    model: str = opt("", "a tokenizer or model directory (vocab.txt / tokenizer.json)", required=True)
    text: str = opt("", "the text to tokenize", positional=True)
    pair: str | None = opt(None, "a second text (sentence B)")


def main(argv: list[str]) -> int:
    args = parse(TokenizeConfig, argv, prog="bertkit tokenize")
    tok = Tokenizer.from_pretrained(args.model)
    print(f"{'#':>3}  {pad('token', 14)} {'id':>6}  type  text")
    count = 0
    for count, (token, token_id, type_id, span) in enumerate(token_rows(tok, args.text, args.pair), 1):
        print(f"{count - 1:>3}  {pad(token, 14)} {token_id:>6}  {type_id:>4}  {span}")
    print(f"{count} tokens; vocabulary of {tok.vocab_size}")
    return 0


def token_rows(tok: Tokenizer, text: str, pair: str | None = None) -> Iterator[tuple[str, int, int, str]]:
    """What `bertkit tokenize` shows: (token, id, type id, its text) of every token of `text` (and `pair`) with
    [CLS] / [SEP]. A text longer than WHOLE_TEXT_CHARS (bertkit.tokenizer's) is tokenized piece by piece, cut where
    no token can change (Tokenizer._cut_pattern), so memory does not grow with it; where a run of WHOLE_TEXT_CHARS
    characters has no such place it is cut there all the same, and a note on stderr says so (the tokens next to
    that cut may differ from the whole text's)."""
    whole = tokenizer.WHOLE_TEXT_CHARS  # the tokenizer module's, read at each call
    if len(text) + len(pair or "") <= whole:
        enc = tok(text, pair, return_offsets_mapping=True, return_token_type_ids=True)
        sources = [text, pair or ""]  # sequence 1 (the pair's tokens) only where there is a pair
        for token, token_id, type_id, (start, end), seq in zip(
            enc.tokens(), enc["input_ids"], enc["token_type_ids"], enc["offset_mapping"], enc.sequence_ids()
        ):
            yield token, token_id, type_id, sources[seq][start:end] if seq is not None else ""
        return
    check_surrogates([text] if pair is None else [(text, pair)], batched=False)
    pattern = tok._cut_pattern()
    yield tok.cls_token, tok.cls_token_id, 0, ""
    for type_id, source in enumerate([text] if pair is None else [text, pair]):
        start, hard = 0, False
        while start < len(source):
            end = min(len(source), start + whole)
            found = pattern.match(source, start + 1, end) if pattern is not None and end < len(source) else None
            if end < len(source):
                if found and found.end() > start:
                    end = found.end()
                elif not hard:
                    hard = True  # said once per text
                    print(
                        f"note: {'text' if type_id == 0 else 'pair'}: cut at character {end} inside a run of "
                        f"{whole:,} characters with no space, CJK character or punctuation mark (and "
                        "wherever else that happens); the tokens next to such a cut may differ from those of the "
                        "whole text",
                        file=sys.stderr,
                    )
            enc = tok(source[start:end], add_special_tokens=False, return_offsets_mapping=True)
            for token, token_id, (a, b) in zip(enc.tokens(), enc["input_ids"], enc["offset_mapping"]):
                yield token, token_id, type_id, source[start + a : start + b]
            start = end
        yield tok.sep_token, tok.sep_token_id, type_id, ""
