"""`bertkit tokenize`: how a text becomes tokens and ids, one row per token."""

from __future__ import annotations

from dataclasses import dataclass

from ..options import opt, parse
from ..text import pad
from ..tokenizer import Tokenizer, token_rows


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
