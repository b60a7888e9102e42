"""The settings of the training loop (TrainConfig), shared by every command that trains, and their resume rule.

A command's settings subclass TrainConfig (PretrainConfig, FinetuneConfig): its flags are the loop's too, and
with_default gives one of them the command's own default. Settings marked may_change_on_resume do not change
what a resumed run computes; --resume refuses a new value of any other (state.py checks them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from ..config import AttnImplementation
from ..errors import TrainingError
from ..options import opt
from .runlog import check_log_to


@dataclass
class TrainConfig:
    """Settings of the shared training loop. Those marked may_change_on_resume do not change what a
    resumed run computes; --resume refuses a new value of any other."""

    out: str = opt(
        "runs/run", "run folder: metrics.jsonl, training state, loss curve, final model", may_change_on_resume=True
    )
    steps: int = opt(300, "optimizer steps", may_change_on_resume=True)
    batch_size: int = opt(32, "examples per micro-batch on each process (x --grad-accum per step)")
    grad_accum: int = opt(1, "micro-batches per optimizer step (a larger batch in the same memory)")
    lr: float = opt(1e-3, "peak learning rate")
    weight_decay: float = opt(0.01, "AdamW weight decay (never on biases and LayerNorm)")
    warmup: float = opt(0.06, "fraction of the steps over which the learning rate rises linearly")
    schedule: Literal["linear", "cosine", "constant"] = opt("linear", "decay after warm-up")
    max_grad_norm: float = opt(1.0, "clip the gradient norm to this (0: no clipping)")
    seed: int = opt(0, "seed of initialisation, data order, masking and dropout")
    log_every: int = opt(10, "steps between metrics rows", may_change_on_resume=True)
    log_to: list[Literal["tensorboard", "csv"]] = opt(
        list,
        "log every metrics row here too, beside metrics.jsonl: tensorboard (event files in <out>/tensorboard/; "
        "pip install 'bertkit[tensorboard]'), csv (<out>/metrics.csv, one line step,split,name,value per number)",
        nargs="*",
        may_change_on_resume=True,
    )
    eval_every: int = opt(100, "steps between evaluations (0: only at the end)", may_change_on_resume=True)
    save_every: int = opt(100, "steps between saved training states (0: only at the end)", may_change_on_resume=True)
    device: str = opt("auto", "cpu, cuda, cuda:N, or auto (cuda when there is one)", may_change_on_resume=True)
    precision: Literal["auto", "fp32", "bf16", "fp16"] = opt(
        "auto",
        "autocast dtype: auto is bf16 (or fp16) on a GPU and float32 on a CPU; bf16 is also taken on a CPU "
        "(faster where it has AVX-512 BF16 or AMX)",
        may_change_on_resume=True,
    )
    compile: bool = opt(False, "torch.compile the model", may_change_on_resume=True)
    attention: AttnImplementation = opt(
        "auto",
        "attention implementation: auto (varlen where a batch has padding "
        "or packed documents, else sdpa), varlen (padding always removed), sdpa, "
        "eager",
        may_change_on_resume=True,
    )
    resume: bool = opt(False, "continue from the training state saved in --out", may_change_on_resume=True)
    overwrite: bool = opt(
        False,
        "start over in an --out that holds an earlier run: it is moved to "
        "<out>.replaced-<time> first (nothing is deleted)",
        may_change_on_resume=True,
    )
    max_bad_steps: int = opt(5, "stop after this many non-finite losses in a row", may_change_on_resume=True)
    progress: bool = opt(True, "show a progress bar", may_change_on_resume=True)

    def check(self) -> None:
        """A TrainingError naming the flag for settings no run can start with. The one check of the loop's
        settings: each command's run() calls it (a subclass adds its own rules) where the settings enter, on every
        process, before --out is claimed; everything after trusts them."""
        for name in self.counts():
            if getattr(self, name) < 1:
                raise TrainingError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        lr: float | None = self.lr  # a subclass may leave it None until the run settles it (a positive default)
        if (lr is not None and lr <= 0) or not 0 <= self.warmup < 1:
            raise TrainingError(f"need --lr > 0 and 0 <= --warmup < 1, got {self.lr} and {self.warmup}")
        check_log_to(self.log_to)  # e.g. tensorboard not installed

    def counts(self) -> tuple[str, ...]:
        """The settings that count something and must be at least 1."""
        return ("steps", "batch_size", "grad_accum", "log_every")


def with_default(name: str, default: Any, help: str | None = None) -> Any:
    """TrainConfig's setting `name` with a command's own default (and help): the same flag and resume rule.
    A dataclass field, typed Any as dataclasses.field is, so that it stands for the value in a class body.

    class PretrainConfig(TrainConfig):
        steps: int = with_default("steps", 2000)
    """
    metadata = dict(TrainConfig.__dataclass_fields__[name].metadata)
    if help is not None:
        metadata["help"] = help
    return dataclasses.field(default=default, metadata=metadata)
