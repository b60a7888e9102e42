"""The quickstart's training stages as commands: `bertkit finetune` (and pretrain) run in this process from argv.

Every stage runs its command's own code from the flags the report lists, so any stage can be rerun by hand.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from ..options import parse
from .messages import Stopped, say
from .profiles import Budget

if TYPE_CHECKING:
    from ..train.loop import TrainSummary
    from ..train.settings import TrainConfig

Settings = TypeVar("Settings", bound="TrainConfig")  # PretrainConfig, FinetuneConfig


def train_command(
    command: str, config_class: type[Settings], run: Callable[[Settings], TrainSummary], argv: list[str]
) -> dict:
    """`bertkit <command> <argv>` in this process; a stop (Ctrl-C) names the command that resumes it."""
    cfg = parse(config_class, argv, prog=f"bertkit {command}")
    summary = run(cfg)
    if summary.interrupted:
        raise Stopped(
            f"stopped at step {summary.step}; the training state is in {cfg.out}/checkpoint: "
            f"`{shlex.join(['bertkit', command, *argv, '--resume'])}` continues it, "
            "a rerun of quickstart starts over"
        )
    return {"summary": summary, "cfg": cfg, "commands": [shlex.join(["bertkit", command, *argv])]}


def finetune_argv(
    budget: Budget, data: dict, model: str, tokenizer: str | None, out: str, common: list[str]
) -> list[str]:
    """From a model directory, or (model = a preset) from random weights with `tokenizer`'s vocabulary."""
    argv = ["--task", "classify", "--model", model] + (["--tokenizer", tokenizer] if tokenizer else [])
    argv += ["--train", data["train"]] + (["--eval", data["dev"]] if data["dev"] else [])
    argv += (
        ["--epochs", str(budget.finetune_epochs)] if budget.finetune_epochs else ["--steps", str(budget.finetune_steps)]
    )
    return argv + [
        "--batch-size",
        str(budget.finetune_batch),
        "--lr",
        str(budget.finetune_lr),
        "--seq-len",
        str(budget.finetune_seq_len),
        "--eval-every",
        str(budget.finetune_eval_every),
        *common,
        "--out",
        out,
    ]


def finetune(argv: list[str], control: bool = False) -> dict:
    """`bertkit finetune argv`, its learning warnings said as the command says them. A control run (random
    weights, to compare the pretrained model with) that learns little at the quickstart's budget is a result,
    not a mistake to fix: its warnings are said as notes, without the advice for a run of one's own (--lr,
    --steps), and kept under "facts"."""
    from ..train import finetune as ft

    result = train_command("finetune", ft.FinetuneConfig, ft.run, argv)
    summary = result["summary"]
    if not control:
        for line in summary.warning_lines():
            say(line)
        return result
    for fact in summary.warnings:
        say(f"note: control run: {fact}")
    return {**result, "facts": list(summary.warnings)}
