"""`bertkit fill-mask`: the top-k tokens for every [MASK] in a text, from a model with its MLM head.

bertkit fill-mask --model runs/pt "今天天气很[MASK]。"
"""

from __future__ import annotations

from dataclasses import dataclass

from ..devices import Precision, device_opt, precision_opt
from ..engines import DEFAULT_ENGINE, ENGINE_HELP, Engine, announce, load_mlm
from ..errors import BertkitError
from ..masked_lm import fill_mask, filled_text, mask_positions
from ..options import opt, parse
from ..tokenizer import Tokenizer


@dataclass
class FillMaskConfig:
    """Top-k predictions for every [MASK] in a text, from an MLM model (e.g. bertkit pretrain's --out)."""

    model: str = opt("", "a model directory with MLM head weights", required=True)
    text: str = opt("", 'text with [MASK] where tokens are missing, e.g. "今天天气很[MASK]。"', positional=True)
    top_k: int = opt(5, "predictions per mask")
    engine: Engine = opt(DEFAULT_ENGINE, ENGINE_HELP)
    device: str = device_opt()
    precision: Precision = precision_opt()

    def problem(self) -> str | None:
        return f"--top-k must be at least 1, got {self.top_k}" if self.top_k < 1 else None


def main(argv: list[str]) -> int:
    cfg = parse(FillMaskConfig, argv, prog="bertkit fill-mask")
    engine = announce("fill-mask", cfg.engine, None, cfg.device, cfg.precision)
    model = load_mlm(cfg.model, engine=engine, device=cfg.device, precision=cfg.precision)
    tok = Tokenizer.from_pretrained(cfg.model)
    ids = tok.encode(cfg.text)
    if not mask_positions(ids, tok):
        raise BertkitError(
            f"no {tok.mask_token} in {cfg.text!r}: write {tok.mask_token} where a token should be "
            f"predicted, e.g. 今天{tok.mask_token}气很好"
        )
    if len(ids) > model.config.max_position_embeddings:
        raise BertkitError(
            f"the text has {len(ids)} tokens, more than the model's max_position_embeddings "
            f"({model.config.max_position_embeddings}); shorten it around the {tok.mask_token}"
        )
    for fill in fill_mask(model, tok, [ids], top_k=cfg.top_k)[0]:
        print(f"[MASK] at position {fill.position}:")
        for rank, c in enumerate(fill.candidates, 1):
            print(f"  {rank}. {c.token:<8} p={c.probability:.3f}   {filled_text(tok, ids, fill.position, c.token_id)}")
    return 0
