"""`bertkit setfit`: few-shot classification the SetFit way (bertkit/setfit.py): train the body on pairs of labelled
texts, fit a logistic regression on its vectors, report accuracy on --eval."""

from __future__ import annotations

import os

from ..options import parse
from ..setfit import SetFitConfig, run


def main(argv: list[str]) -> int:
    cfg = parse(SetFitConfig, argv, prog="bertkit setfit")
    summary = run(cfg)
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    if summary.train.interrupted:
        print(f"stopped at step {summary.train.step}; continue with the same flags and --resume")
        return 130
    print(
        f"done: {summary.pairs} pairs, {summary.train.step} steps in {summary.train.seconds} s; last training loss "
        f"{summary.train.loss:.4f}; head on {len(summary.labels)} labels"
    )
    report = summary.report
    print(f"accuracy {report['accuracy']:.4f} on {report['examples']} evaluation texts")
    print(f"body (sentence-transformers folder) and head (setfit_head/) in {cfg.out}")
    return 0
