"""The training loop every bertkit run uses (pretraining and fine-tuning), top to bottom.

    run = start(...)                  device, processes, seed, optimizer, schedule, resume, DDP / compile
    while run.step < steps:
        optimizer_step(run)           batches = [data.batch(step, micro) for micro in range(grad_accum)]
                                      weights: each batch's share of the step's mean (one sync when the
                                               losses are means over counted tokens, see LossWeights)
                                      for each: loss_fn(model, batch, weights).backward()
                                      all processes agree on the loss and on a stop signal (one sync);
                                      skip the step if the loss is not finite; clip; optimizer.step(); scheduler.step()
        after_step(run)               every log_every:  a row in metrics.jsonl (step, loss, lr, tokens/s: runlog)
                                                        and in --log-to's: metrics.csv, TensorBoard
                                      every eval_every: evaluate(model) -> a row in the same logs; KeepBest: a new
                                                        best model is saved, patience may stop the run
                                      stop?  a signal or KeepBest's patience (decided here, once)
                                      every save_every: the whole training state, atomically (model, optimizer,
                                                        scheduler, RNG, step, KeepBest's progress)
        SIGINT / SIGTERM: save the state and stop cleanly, at a step boundary
    finish(run)                       the final model (unless KeepBest kept the best), loss.png, a TrainSummary
    run.log.close()                   however the run ended (TensorBoard's writer flushes)

Data is addressed by step: `data.batch(step, micro)` must return the same batch for the same
step, so a resumed run sees exactly what the uninterrupted one saw. Under torchrun each process
gets its share of the global batch from `data`, DDP averages the gradients, and only rank 0 writes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..checkpoint import load_training_state, save_training_state
from ..config import AttnImplementation
from ..data.seeded import Permutation
from ..errors import TrainingError
from ..options import may_change_on_resume, opt
from .runlog import RunLog, check_log_to, plot_losses


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


def with_default(name: str, default: Any, help: str | None = None):
    """TrainConfig's setting `name` with a command's own default (and help): the same flag and resume rule.

    class PretrainConfig(TrainConfig):
        steps: int = with_default("steps", 2000)
    """
    metadata = dict(TrainConfig.__dataclass_fields__[name].metadata)
    if help is not None:
        metadata["help"] = help
    return dataclasses.field(default=default, metadata=metadata)


@dataclass
class TrainSummary:
    """What `train` did: where it stopped and why, its last training loss, its speed, its last evaluation."""

    step: int  # optimizer steps done (those of an earlier part of a resumed run included)
    loss: float  # the last finite training loss (nan if there was none)
    seconds: float  # wall time of this part of the run
    interrupted: bool  # stopped by SIGINT / SIGTERM before the last step (the state is saved: --resume)
    tokens_per_s: float | None = None  # over the last logged window; None before the first metrics row
    eval: dict = field(default_factory=dict)  # the last evaluation ({} if none ran)
    stopped_early: int | None = None  # the step at which KeepBest's patience ended the run


class Batches(Protocol):
    def batch(self, step: int, micro: int) -> dict[str, Tensor]:
        """This process's share of micro-batch `micro` of optimizer step `step` (deterministic). A batch
        whose loss is a mean over counted tokens (MLM's masked ones, tagging's labelled ones) says how many
        under "loss_units": an int, or {unit name: count} for a loss that sums means over several kinds
        (ELECTRA: masked tokens and real tokens); see LossWeights."""


LOSS_UNITS = "loss_units"
TOKENS = "tokens"  # the unit an int "loss_units" counts


@dataclass(frozen=True)
class LossWeights:
    """What a micro-batch's mean losses are multiplied by, so that the step's gradient (summed over the
    micro-batches, averaged over the processes by DDP) is the gradient of one mean over the whole step,
    as one process holding every row would compute it.

    rows:   for a mean over rows: 1 / grad_accum (every micro-batch of every process holds as many rows)
    tokens: for a mean over counted tokens: units x world / (the units of the step, all processes), since
            micro-batches hold different numbers of them (2 processes x 4 rows then equal 1 x 8 rows);
            1 / grad_accum, as rows, when the batches do not count their units
    units:  the same weight for each named unit when "loss_units" is a dict (units["tokens"] is `tokens`)
    """

    rows: float
    tokens: float
    units: dict[str, float] = field(default_factory=dict)

    def of(self, unit: str) -> float:
        """The weight of a mean over `unit` (a name the batch counted; rows' weight if it counted none)."""
        return self.units.get(unit, self.tokens if unit == TOKENS else self.rows)


def loss_weights(units: list[int | dict[str, int]], grad_accum: int, world: int) -> list[LossWeights]:
    """The weights of a step's micro-batches, given how many units each holds on this process (one
    all-reduce of one integer per unit name under torchrun)."""
    counts = [u if isinstance(u, dict) else {TOKENS: u} for u in units]
    names = sorted(counts[0])
    totals = all_processes([sum(int(c[n]) for c in counts) for n in names], world)
    weights = []
    for c in counts:
        per = {n: int(c[n]) * world / max(1, total) for n, total in zip(names, totals)}
        weights.append(LossWeights(rows=1 / grad_accum, tokens=per.get(TOKENS, 1 / grad_accum), units=per))
    return weights


def all_processes(counts: list[int], world: int) -> list[int]:
    """Each count summed over the processes (a sync: one small all-reduce under torchrun)."""
    if world == 1:
        return list(counts)
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    total = torch.tensor(counts, dtype=torch.int64, device=device)
    dist.all_reduce(total)
    return [int(t) for t in total]


class StepSampler:
    """Which examples make up global micro-batch `index`: a seeded order per epoch, walked in turn.

    Every process walks the same global batches (batch_size x world) and takes its own rows, so a run with
    2 processes of batch 4 sees what 1 process of batch 8 sees, and a resumed run sees what the
    uninterrupted one saw. The order of an epoch is a seeded permutation (data/seeded.py) evaluated only at
    the positions asked for: no list of the data's size is ever made, whatever the number of examples.
    """

    def __init__(self, n: int, batch_size: int, grad_accum: int, seed: int, rank: int = 0, world: int = 1):
        self.n, self.batch_size, self.grad_accum, self.seed = n, batch_size, grad_accum, seed
        self.rank, self.world = rank, world
        self.global_batch = batch_size * world
        if n < self.global_batch:
            raise TrainingError(
                f"the data gives {n} examples, fewer than one batch of {self.global_batch}: "
                "lower --batch-size, or add data"
            )
        self._order: tuple[int, Permutation | None] = (-1, None)

    def order(self, epoch: int) -> Permutation:
        if self._order[0] != epoch:
            self._order = (epoch, Permutation(self.n, self.seed * 1_000_003 + epoch))
        return self._order[1]

    def own_rows(self) -> np.ndarray:
        """This process's rows of a global batch: rank r holds places r x batch_size onwards."""
        return self.rank * self.batch_size + np.arange(self.batch_size)

    def indices(self, step: int, micro: int) -> np.ndarray:
        """The examples of this process's rows of micro-batch `micro` of step `step` (batch_size,)."""
        start = (step * self.grad_accum + micro) * self.global_batch
        epoch, place = np.divmod(start + self.own_rows(), self.n)
        out = np.empty(self.batch_size, dtype=np.int64)
        for e in np.unique(epoch):  # a batch spans at most two epochs
            out[epoch == e] = self.order(int(e))(place[epoch == e])
        return out


# ----- setup -------------------------------------------------------------------------------------
def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise TrainingError(f"--device {name}: no CUDA device is available here; use --device cpu")
    return device


def setup_distributed(device: torch.device) -> tuple[int, int, torch.device]:
    """(rank, world size, device) under torchrun; (0, 1, device) otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), world, device


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """None = plain float32. auto: bf16 on a GPU that has it, else fp16; float32 on a CPU.
    On a CPU, bf16 autocast only when asked: it is faster on a CPU with AVX-512 BF16 / AMX
    (cpu_has_native_bf16; README, Speed), and CPUs without native bf16 may be slower."""
    if precision == "fp32":
        return None
    if device.type != "cuda":
        if precision == "fp16":
            warnings.warn(
                f"--precision fp16 is for GPUs; training in float32 on {device} (bf16 works on CPUs)", stacklevel=2
            )
        return torch.bfloat16 if precision == "bf16" else None
    if precision == "fp16":
        return torch.float16
    if precision == "bf16" or torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float16


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX-512 BF16 or AMX), where --precision bf16 is faster."""
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        check = getattr(torch.cpu, name, None)  # torch's own probes (private, so looked up with care)
        if check is not None and check():
            return True
    return False


def make_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """AdamW; biases and LayerNorm weights get no weight decay (as in BERT)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = device.type == "cuda"  # one kernel for all parameters
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.999), eps=1e-6, fused=fused)


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Multiplier of the peak lr at `step`: linear warm-up, then linear / cosine decay to 0."""
    warm = max(1, int(cfg.warmup * cfg.steps)) if cfg.warmup > 0 else 0
    if step < warm:
        return (step + 1) / warm
    if cfg.schedule == "constant":
        return 1.0
    progress = (step - warm) / max(1, cfg.steps - warm)
    if cfg.schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return max(0.0, 1.0 - progress)


# ----- the loop ----------------------------------------------------------------------------------
LossFn = Callable[[nn.Module, dict, LossWeights], Tensor]  # (model, batch, its weights) -> the weighted loss


def train(
    model: nn.Module,
    data: Batches,
    cfg: TrainConfig,
    loss_fn: LossFn,
    evaluate: Callable[[nn.Module], dict] | None = None,
    save_model: Callable[[nn.Module, str], None] | None = None,
    keep_best: KeepBest | None = None,
    identity: dict | None = None,
) -> TrainSummary:
    """Train `model` for cfg.steps optimizer steps (the module docstring, in code); returns a TrainSummary.

    evaluate(model) -> a report: its numbers go to metrics.jsonl. save_model(model, folder) writes the final
    model, or, with keep_best, the best one so far each time an evaluation beats it (KeepBest: also early
    stopping). identity: what the run trains with ({"vocab": digest, "labels": [...], "data": digest}),
    saved with the training state; --resume refuses another vocabulary or label set and warns of new data.
    """
    run = start(model, cfg, keep_best, identity)
    try:
        with run.stop.installed():
            while run.step < cfg.steps and not run.stopping:
                loss, signalled = optimizer_step(run, data, loss_fn)
                after_step(run, loss, signalled, evaluate, save_model)
        return finish(run, save_model)
    finally:
        if run.log is not None:
            run.log.close()  # on an error too: TensorBoard's writer holds the last rows


@dataclass
class KeepBest:
    """Keep the best model: after each evaluation, score(report) (higher is better); a new best is written
    at the top of --out by train's save_model, then on_best(report) runs (e.g. a confusion matrix), and
    `patience` evaluations in a row without a new best stop the run (0: never). Its progress is saved with
    the training state, so --resume goes on from it."""

    score: Callable[[dict], float]
    patience: int = 0
    on_best: Callable[[dict], None] | None = None
    best: float = -math.inf  # progress: the best score so far, its report, evaluations since, the last report
    report: dict | None = None
    since: int = 0
    last: dict | None = None

    def update(self, report: dict) -> bool:
        """Take an evaluation's report; True when it is a new best."""
        self.last = report
        score = self.score(report)
        better = score > self.best
        self.best, self.report, self.since = (score, report, 0) if better else (self.best, self.report, self.since + 1)
        return better

    def patience_ran_out(self) -> bool:
        return self.patience > 0 and self.since >= self.patience

    def state(self) -> dict:  # the keys the training state has always held them under
        return {"score": self.best, "report": self.report, "since": self.since}

    def load(self, state: dict) -> None:
        self.best, self.report, self.since = state.get("score", -math.inf), state.get("report"), state.get("since", 0)


@dataclass
class Throughput:
    """Tokens per second over the window since the last metrics row (all ranks' tokens)."""

    tokens: int = 0
    start: float = field(default_factory=time.perf_counter)

    def add(self, tokens: int) -> None:
        self.tokens += tokens

    def rate(self) -> float:
        return self.tokens / max(time.perf_counter() - self.start, 1e-9)

    def restart(self) -> float:
        """The window's rate; a new window starts."""
        rate = self.rate()
        self.tokens, self.start = 0, time.perf_counter()
        return rate


@dataclass
class Run:
    """One run in progress: what `start` set up, and what the steps carry from one to the next."""

    cfg: TrainConfig
    model: nn.Module  # what the steps call: DDP- and / or compile-wrapped
    raw_model: nn.Module  # the model itself: evaluated, saved
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler | None  # fp16 only
    amp: torch.dtype | None  # autocast dtype; None: float32
    device: torch.device
    rank: int
    world: int
    step: int  # optimizer steps done
    keep_best: KeepBest | None
    identity: dict | None
    stop: _StopFlag = field(default_factory=lambda: _StopFlag())
    bar: Any = None  # the progress bar (rank 0, --progress)
    log: RunLog | None = None  # metrics.jsonl and --log-to's loggers (rank 0)
    stopping: bool = False  # what all ranks agreed on (a signal, or KeepBest's patience), at a step boundary
    bad_in_a_row: int = 0  # non-finite losses
    last_loss: float = float("nan")  # the last finite one
    window: Throughput = field(default_factory=Throughput)
    run_start: float = field(default_factory=time.perf_counter)
    tokens_per_s: float | None = None  # of the last metrics row
    eval: dict = field(default_factory=dict)  # the last evaluation
    stopped_early: int | None = None

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def metrics_path(self) -> str:
        return os.path.join(self.cfg.out, "metrics.jsonl")

    @property
    def state_dir(self) -> str:
        return os.path.join(self.cfg.out, "checkpoint")


def start(model: nn.Module, cfg: TrainConfig, keep_best: KeepBest | None, identity: dict | None) -> Run:
    """Device and processes, the seed, optimizer, schedule and AMP scaler, the resumed state if any, then the
    DDP / compile wrapping. The order is the run's RNG order: a change here changes what every run computes."""
    _check(cfg)
    rank, world, device = setup_distributed(pick_device(cfg.device))
    torch.manual_seed(cfg.seed)
    model.to(device)
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(cfg.attention)
    optimizer = make_optimizer(model, cfg, device)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg))
    amp = autocast_dtype(cfg.precision, device)
    scaler = torch.amp.GradScaler("cuda") if amp == torch.float16 else None
    run = Run(
        cfg=cfg,
        model=model,
        raw_model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        scaler=scaler,
        amp=amp,
        device=device,
        rank=rank,
        world=world,
        step=0,
        keep_best=keep_best,
        identity=identity,
    )
    if cfg.resume:
        resume(run)
    elif run.main and os.path.exists(run.metrics_path):  # pretrain / finetune claim --out first (runfolder.py)
        raise TrainingError(
            f"{run.metrics_path}: an earlier run's log is there; pass resume=True to continue it, "
            "or use another out (bertkit.train.runfolder.claim moves an old run aside)"
        )
    if world > 1:
        ids = [device.index] if device.type == "cuda" else None
        run.model = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    if cfg.compile:
        run.model = torch.compile(run.model)
    if run.main:  # on --resume, each log drops what a killed run wrote after the saved step
        run.log = RunLog(cfg.out, cfg.log_to, resumed_at=run.step if cfg.resume else None)
    run.bar = _progress(cfg, run.step) if run.main else None
    run.window, run.run_start = Throughput(), time.perf_counter()  # the clock starts with the first step
    return run


def resume(run: Run) -> None:
    """Load the training state saved in --out into `run` (model, optimizer, schedule, RNG, step, KeepBest's)."""
    state = load_training_state(run.state_dir)
    if state is None:
        raise TrainingError(f"--resume: {run.state_dir} holds no training state; run without --resume first")
    note = _check_identity(state.get("identity") or {}, run.identity or {}, run.state_dir)
    run.step = _restore(state, run.raw_model, run.optimizer, run.scheduler, run.scaler, run.cfg, run.world)
    if run.keep_best is not None:
        run.keep_best.load(state.get("extra", {}))  # fine-tuning's best score so far
    if run.main:
        if note:
            print(note, file=sys.stderr)
        print(f"resuming {run.cfg.out} at step {run.step}", file=sys.stderr)


def optimizer_step(run: Run, data: Batches, loss_fn: LossFn) -> tuple[float, bool]:
    """One optimizer step: its micro-batches and their loss weights, the ranks' agreement on the loss and on
    a stop signal, then the update (skipped when the loss is not finite). Returns the step's loss (the mean
    over the whole step, all ranks) and whether any rank was signalled to stop."""
    cfg = run.cfg
    run.model.train()
    batches = [data.batch(run.step, micro) for micro in range(cfg.grad_accum)]  # on the host: counted there
    if LOSS_UNITS in batches[0]:  # the same on every rank: the same kind of batches
        weights = loss_weights([b.pop(LOSS_UNITS) for b in batches], cfg.grad_accum, run.world)
    else:
        weights = [LossWeights(rows=1 / cfg.grad_accum, tokens=1 / cfg.grad_accum)] * cfg.grad_accum
    step_tokens = sum(int((b["attention_mask"] > 0).sum()) for b in batches if "attention_mask" in b)
    step_loss = torch.zeros((), device=run.device)
    for micro, (batch, weight) in enumerate(zip(batches, weights)):
        batch = {k: v.to(run.device, non_blocking=True) if isinstance(v, Tensor) else v for k, v in batch.items()}
        sync = micro == cfg.grad_accum - 1 or run.world == 1  # DDP averages gradients once, at the last one
        with (
            contextlib.nullcontext() if sync else run.model.no_sync(),
            torch.autocast(run.device.type, dtype=run.amp, enabled=run.amp is not None),
        ):
            loss = loss_fn(run.model, batch, weight)
        (run.scaler.scale(loss) if run.scaler else loss).backward()
        step_loss += loss.detach()

    # one sync per step; under DDP every rank must agree on stepping and on stopping
    agreed = torch.stack([step_loss.float(), torch.tensor(float(run.stop.requested), device=run.device)])
    if run.world > 1:
        dist.all_reduce(agreed)
        agreed[0] /= run.world
    loss_value, signalled = float(agreed[0]), bool(agreed[1] > 0)
    if math.isfinite(loss_value):
        _update(run)
        run.bad_in_a_row, run.last_loss = 0, loss_value
        run.window.add(step_tokens * run.world)
    else:  # skip the update; the step still counts (logging, evaluation and saving go on)
        run.bad_in_a_row += 1
        if run.main:
            warnings.warn(
                f"step {run.step}: loss is {loss_value}; skipping this step", stacklevel=3
            )  # shown at the line that called train()
        if run.bad_in_a_row >= cfg.max_bad_steps:
            raise TrainingError(
                f"the loss was not finite for {run.bad_in_a_row} steps in a row (last at step "
                f"{run.step}): lower --lr, use --precision fp32, or check the data"
            )
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    run.step += 1
    return loss_value, signalled


def _update(run: Run) -> None:
    """Clip the gradient norm, then step the optimizer (through the fp16 scaler, if any)."""
    if run.scaler:
        run.scaler.unscale_(run.optimizer)
    if run.cfg.max_grad_norm > 0:
        nn.utils.clip_grad_norm_(run.model.parameters(), run.cfg.max_grad_norm)
    if run.scaler:
        run.scaler.step(run.optimizer)
        run.scaler.update()
    else:
        run.optimizer.step()


def after_step(
    run: Run,
    loss: float,
    signalled: bool,
    evaluate: Callable[[nn.Module], dict] | None,
    save_model: Callable[[nn.Module, str], None] | None,
) -> None:
    """What is due after step `run.step`: the progress bar, a metrics row, an evaluation (whose KeepBest may
    end the run), then whether the run stops (the one place that decides it), the training state."""
    cfg, step = run.cfg, run.step
    if run.bar is not None:
        _show_progress(run, loss)
    if step % cfg.log_every == 0 or step == cfg.steps:
        _log_row(run, loss)
    early = False
    if evaluate is not None and (step == cfg.steps or (cfg.eval_every and step % cfg.eval_every == 0)):
        early = _evaluate_and_keep_best(run, evaluate, save_model)
    run.stopping = signalled or early
    if early:
        run.stopped_early = step
    if run.stopping or step == cfg.steps or (cfg.save_every and step % cfg.save_every == 0):
        if run.main:
            save_training_state(
                run.state_dir,
                _state(
                    run.raw_model,
                    run.optimizer,
                    run.scheduler,
                    run.scaler,
                    step,
                    cfg,
                    run.world,
                    run.keep_best,
                    run.identity,
                ),
            )
        _barrier(run.world)


def _show_progress(run: Run, loss: float) -> None:
    run.bar.update(1)
    rate = run.window.rate()
    run.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{run.scheduler.get_last_lr()[0]:.2e}", tok_s=f"{rate:,.0f}")


def _log_row(run: Run, loss: float) -> None:
    """A training row in the logs (rank 0); tokens/s over the window since the last row, all ranks' tokens."""
    row = {
        "step": run.step,
        "loss": round(loss, 6),
        "lr": run.scheduler.get_last_lr()[0],
        "tokens_per_s": round(run.window.restart(), 1),
        "elapsed_s": round(time.perf_counter() - run.run_start, 2),
    }
    run.tokens_per_s = row["tokens_per_s"]
    if run.main:
        run.log.row(row)


def _evaluate_and_keep_best(run: Run, evaluate, save_model) -> bool:
    """Rank 0 evaluates and writes the row; with KeepBest it saves a new best model. Returns whether the
    run stops early (KeepBest's patience ran out: decided on rank 0, agreed by every rank)."""
    report = _evaluate(evaluate, run.raw_model, run.step, run.log, run.world)
    run.eval = _numbers(report)
    if run.bar is not None:
        line = ", ".join(f"{k} {v:.4g}" for k, v in run.eval.items())
        run.bar.write(f"step {run.step}: {line}", file=sys.stderr)
    keep = run.keep_best
    if keep is None:
        return False
    if run.main and keep.update(report):
        if save_model is not None:
            save_model(run.raw_model, run.cfg.out)  # the best model so far, at the top of --out
        if keep.on_best is not None:
            keep.on_best(report)
    _barrier(run.world)
    return keep.patience > 0 and _agree(run.main and keep.patience_ran_out(), run.world, run.device)


def finish(run: Run, save_model: Callable[[nn.Module, str], None] | None) -> TrainSummary:
    """Close the bar; unless a signal cut the run: the final model (save_model) and loss.png. Returns the summary."""
    if run.bar is not None:
        run.bar.close()
    summary = TrainSummary(
        step=run.step,
        loss=run.last_loss,
        seconds=round(time.perf_counter() - run.run_start, 1),
        interrupted=run.stopping and run.step < run.cfg.steps and run.stopped_early is None,
        tokens_per_s=run.tokens_per_s,
        eval=run.eval,
        stopped_early=run.stopped_early,
    )
    if run.main and not summary.interrupted:
        if save_model is not None and run.keep_best is None:  # with KeepBest the best model is there already
            save_model(run.raw_model, run.cfg.out)
        plot_losses(run.metrics_path, os.path.join(run.cfg.out, "loss.png"))
    _barrier(run.world)
    return summary


# ----- pieces of the loop ------------------------------------------------------------------------
def _check(cfg: TrainConfig) -> None:
    for name in ("steps", "batch_size", "grad_accum", "log_every"):
        if getattr(cfg, name) < 1:
            raise TrainingError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}")
    if cfg.lr <= 0 or not 0 <= cfg.warmup < 1:
        raise TrainingError(f"need --lr > 0 and 0 <= --warmup < 1, got {cfg.lr} and {cfg.warmup}")
    check_log_to(cfg.log_to)  # every process, before any work: e.g. tensorboard not installed


def _state(
    model,
    optimizer,
    scheduler,
    scaler,
    step: int,
    cfg: TrainConfig,
    world: int,
    keep_best: KeepBest | None,
    identity: dict | None = None,
) -> dict:
    settings = {k: v for k, v in asdict(cfg).items() if v is None or isinstance(v, (int, float, str, bool))}
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "config": {**settings, "world_size": world},
    }
    if torch.cuda.is_available():
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    if scaler is not None:
        state["scaler"] = scaler.state_dict()
    if keep_best is not None:
        state["extra"] = keep_best.state()
    if identity:
        state["identity"] = identity
    return state


def _check_identity(saved: dict, now: dict, state_dir: str) -> str | None:
    """--resume continues the same model: the same vocabulary and labels; new training data only warns.

    A dataset named by a flag (identity "data_from": "--data PATH", with "data_parts": what it holds, by name) is
    known by its content, not its path: a copy at another path continues the run (the note returned says so);
    another dataset under another path is refused, naming the parts that differ; new content under the same
    path is new training data (a warning, as above)."""
    if saved.get("vocab") and now.get("vocab") and saved["vocab"] != now["vocab"]:
        raise TrainingError(
            f"--resume: {state_dir} was trained with another vocabulary (fingerprint {saved['vocab']}, "
            f"now {now['vocab']}); its embeddings fit only that one: resume with the run's own "
            "tokenizer (its tokenizer/ folder, or --tokenizer as before), or start a new run"
        )
    if saved.get("objective") and now.get("objective") and saved["objective"] != now["objective"]:
        raise TrainingError(
            f"--resume: {state_dir} was pretrained with --objective {saved['objective']}, not "
            f"{now['objective']}; its models and their state belong to that objective: resume with "
            f"--objective {saved['objective']}, or start a new run (--overwrite, or another --out)"
        )
    if "labels" in saved and "labels" in now and saved["labels"] != now["labels"]:
        raise TrainingError(
            f"--resume: {state_dir} was trained with the labels {saved['labels']}, the data now "
            f"gives {now['labels']}; the classifier has one output per label: train on the old "
            "label set, or start a new run (--overwrite)"
        )
    moved = bool(now.get("data_from")) and now["data_from"] != saved.get("data_from")
    if moved and saved.get("data") and now.get("data") and saved["data"] != now["data"]:
        was, parts = saved.get("data_parts") or {}, now.get("data_parts") or {}
        differ = [
            f"{part} was {was.get(part, '?')}, now {value}" for part, value in parts.items() if was.get(part) != value
        ]
        raise TrainingError(
            f"--resume: {now['data_from']} is another dataset than the one the run trained on "
            f"({saved.get('data_from', 'unnamed')}; fingerprint {saved['data']}, now {now['data']}): "
            f"{'; '.join(differ) or 'their contents differ'}; resume with the run's dataset (or a "
            "copy of it), or start a new run (--overwrite, or another --out)"
        )
    if moved and saved.get("data") == now.get("data"):
        return (
            f"note: --resume: {now['data_from']} holds the same dataset as the run's "
            f"{saved.get('data_from', 'data')} (fingerprint {now['data']}): continuing on it"
        )
    if saved.get("data") and now.get("data") and saved["data"] != now["data"]:
        warnings.warn(
            f"--resume: the training data differ from the run's first part (fingerprint {saved['data']}, "
            f"now {now['data']}); continuing on the new data",
            stacklevel=5,
        )  # shown at the line that called train() (train -> start -> resume -> here)


def _restore(state: dict, model, optimizer, scheduler, scaler, cfg: TrainConfig, world: int) -> int:
    saved = dict(state.get("config", {}))
    if saved.pop("world_size", world) != world:
        raise TrainingError(
            f"--resume: the run had {state['config']['world_size']} processes, now {world}: the "
            "data order depends on it; resume with the same number of processes"
        )
    free = may_change_on_resume(type(cfg))  # opt(..., may_change_on_resume=True) in the settings
    changed = [k for k, v in saved.items() if k not in free and getattr(cfg, k, v) != v]
    if changed:
        raise TrainingError(
            "--resume needs the settings of the run it continues; these differ: "
            + ", ".join(f"--{k.replace('_', '-')} was {saved[k]}, now {getattr(cfg, k)}" for k in changed)
        )
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    if "cuda_rng" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    if scaler is not None and "scaler" in state:
        scaler.load_state_dict(state["scaler"])
    return int(state["step"])


def _evaluate(evaluate, model, step: int, log: RunLog | None, world: int) -> dict:
    """Rank 0 (the one with the logs) evaluates (the model is the same on every rank) and logs its numbers;
    the others wait and get {}."""
    report: dict = {}
    if log is not None:
        model.eval()
        with torch.no_grad():
            report = dict(evaluate(model))
        log.row({"step": step, "split": "eval", **{k: round(v, 6) for k, v in _numbers(report).items()}})
    _barrier(world)
    return report


def _numbers(report: dict) -> dict[str, float]:
    """The numbers of an evaluation report (not its tables: per class, confusion matrix)."""
    return {k: float(v) for k, v in report.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _agree(decision: bool, world: int, device: torch.device) -> bool:
    """True on every rank when it is True on any rank."""
    if world == 1:
        return bool(decision)
    flag = torch.tensor([float(decision)], device=device)
    dist.all_reduce(flag)
    return bool(flag > 0)


def _barrier(world: int) -> None:
    if world > 1:
        dist.barrier()


def _progress(cfg: TrainConfig, start: int):
    if not cfg.progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=cfg.steps, initial=start, desc="train", unit="step", dynamic_ncols=True)


class _StopFlag:
    """SIGINT / SIGTERM ask the loop to save and stop after the current step."""

    def __init__(self):
        self.requested = False

    def _handler(self, signum, frame):
        self.requested = True

    @contextlib.contextmanager
    def installed(self):
        if threading_main():
            old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield self
            finally:
                for s, h in old.items():
                    signal.signal(s, h)
        else:  # signal handlers can only be set from the main thread
            yield self


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
