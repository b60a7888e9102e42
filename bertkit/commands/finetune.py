"""`bertkit finetune`: fine-tune a model for a task (classify / tag / qa / choice) and keep the best."""

from __future__ import annotations

import os
import sys

from ..metrics import format_report
from ..options import parse
from ..train.finetune import FinetuneConfig, run


def main(argv: list[str]) -> int:
    cfg = parse(FinetuneConfig, argv, prog="bertkit finetune")
    summary = run(cfg)
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    for line in summary.warning_lines():
        print(line, file=sys.stderr)
    if summary.interrupted:
        print(f"stopped at step {summary.step}; continue with the same flags and --resume")
        return 130
    if summary.already_complete:  # no step ran: a summary of this part would say a nan loss
        print(summary.already_complete)
        return 0
    print(f"done: {summary.step} steps in {summary.seconds} s; last training loss {summary.loss:.4f}")
    if summary.best:
        print("best evaluation:\n" + format_report(summary.best))
    # "best" only where evaluations compared models; without --eval the model is the last step's
    print(f"{'best' if summary.best else 'final'} model and tokenizer in {cfg.out}")
    return 0
