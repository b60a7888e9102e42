"""`bertkit pretrain`: pretraining from a corpus or a prepared dataset; what it prints at the end."""

from __future__ import annotations

import os

from ..options import parse
from ..train.pretrain import PretrainConfig, PretrainSummary, run


def main(argv: list[str]) -> int:
    cfg = parse(PretrainConfig, argv, prog="bertkit pretrain")
    summary = run(cfg)
    return report(summary, cfg) if int(os.environ.get("RANK", "0")) == 0 else 0  # rank 0 speaks for the run


def report(summary: PretrainSummary, cfg: PretrainConfig) -> int:
    """What `bertkit pretrain` prints at the end; its exit status (130: stopped by a signal, --resume continues)."""
    if summary.interrupted:
        print(f"stopped at step {summary.step}; the training state is in {cfg.out}/checkpoint: continue with --resume")
        return 130
    if summary.already_complete:  # no step ran: a summary of this part would say 0 tokens/s and a nan loss
        print(summary.already_complete)
        return 0
    print(
        f"done: {summary.step} steps in {summary.seconds} s, {summary.tokens_per_s or 0:,.0f} tokens/s; "
        f"last training loss {summary.loss:.4f}"
    )
    if summary.eval:
        print("held-out: " + ", ".join(f"{k} {v:.4f}" for k, v in summary.eval.items()))
    logs = "".join(
        f", {name}"
        for name, on in (("metrics.csv", "csv" in cfg.log_to), ("tensorboard/", "tensorboard" in cfg.log_to))
        if on
    )
    print(f"model, tokenizer, settings.yaml, metrics.jsonl{logs} and loss.png in {cfg.out}")
    return 0
