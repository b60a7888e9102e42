"""`bertkit predict`: a fine-tuned model's predictions for texts or a file, one JSON line per input, in order.

bertkit predict --model runs/sent "这本书很好看" "质量太差了"
bertkit predict --model runs/sent --file reviews.txt --output predictions.jsonl   # a row for every line
"""

from __future__ import annotations

import sys
from dataclasses import replace

from ..engines import announce
from ..evaluation import PredictConfig, run_predict
from ..files import to_json
from ..options import parse


def main(argv: list[str]) -> int:
    cfg = parse(PredictConfig, argv, prog="bertkit predict")
    cfg = replace(cfg, engine=announce("predict", cfg.engine, cfg.quantize, cfg.device, cfg.precision))
    rows = run_predict(cfg)
    if not cfg.output:
        sys.stdout.write("".join(to_json(row) + "\n" for row in rows))
    return 0
