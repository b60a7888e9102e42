"""The quickstart's pretraining stage: `bertkit pretrain` with the profile's budget, the vocabulary it learned,
and what initialisation set in the heads and what training changed (locality.py)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .locality import head_locality
from .outdir import PRETRAIN
from .profiles import OBJECTIVE, Budget
from .training import train_command

if TYPE_CHECKING:
    from ..train.pretrain import PretrainConfig


def pretrain_argv(budget: Budget, data: dict, out: str, common: list[str]) -> list[str]:
    return [
        "--corpus",
        data["corpus"],
        "--objective",
        OBJECTIVE,
        "--recipe",
        "local",
        "--model-config",
        budget.model,
        "--vocab-size",
        str(budget.vocab_size),
        "--steps",
        str(budget.pretrain_steps),
        "--batch-size",
        str(budget.pretrain_batch),
        "--lr",
        str(budget.pretrain_lr),
        "--seq-len",
        str(budget.pretrain_seq_len),
        "--eval-every",
        str(max(1, budget.pretrain_steps // 8)),
        *common,
        "--out",
        os.path.join(out, PRETRAIN),
    ]


def pretrain(argv: list[str]) -> dict:
    """`bertkit pretrain argv`; then the vocabulary learned, and what initialisation set in the heads and what
    training changed (head_locality)."""
    from ..train import pretrain as pt

    result = train_command("pretrain", pt.PretrainConfig, pt.run, argv)
    cfg = result["cfg"]
    return {**result, **vocabulary(cfg), **head_locality(cfg)}


def vocabulary(cfg: PretrainConfig) -> dict:
    """The size of the vocabulary pretraining learned (the quickstart passes no --tokenizer), and why it is smaller
    than --vocab-size asked, if it is: People's Daily has fewer distinct pieces, 5,837 of 21,128."""
    from ..tokenizer import Tokenizer
    from ..vocab import MIN_FREQUENCY, vocab_shortfall

    tok = Tokenizer.from_pretrained(cfg.out)  # pretraining said the shortfall as it learned the vocabulary
    return {"vocab_size": tok.vocab_size, "vocab_shortfall": vocab_shortfall(tok, cfg.vocab_size, MIN_FREQUENCY)}
