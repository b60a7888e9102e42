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

What the loop calls lives beside it, one job to a module: settings.py (TrainConfig), batches.py (what a step's
micro-batches hold: the data order, the loss weights), devices.py (device, processes, autocast dtype),
optim.py (AdamW and the schedule), state.py (the training state saved and resumed), runlog.py (the logs).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as dist
from torch import Tensor, nn

from .. import deprecated
from ..deprecated import moved
from ..errors import TrainingError
from .batches import LOSS_UNITS, LossWeights, loss_weights
from .devices import agree, autocast_dtype, barrier, pick_device, setup_distributed, threading_main
from .optim import lr_factor, make_optimizer
from .runlog import TRAIN_TITLE, RunLog, plot_losses
from .state import check_identity, load_training_state, restore, save_training_state, training_state

if TYPE_CHECKING:
    from .batches import Batches
    from .settings import TrainConfig


@dataclass
class TrainSummary:
    """What `train` did: where it stopped and why, its last training loss, its speed, its last evaluation."""

    step: int  # optimizer steps done (those of an earlier part of a resumed run included)
    loss: float  # the last finite training loss (nan if there was none)
    seconds: float  # wall time of this part of the run
    interrupted: bool  # stopped by SIGINT / SIGTERM before the last step (the state is saved: --resume)
    tokens_per_s: float | None = None  # over the last logged window; None before the first metrics row
    eval: dict[str, float] = field(default_factory=dict)  # the last evaluation ({} if none ran)
    stopped_early: int | None = None  # the step at which KeepBest's patience ended the run
    # --resume of a run that had reached its --steps: no step ran, so what to say instead of a summary of this part
    # (complete_note); "" otherwise
    already_complete: str = ""


# ----- the loop ----------------------------------------------------------------------------------
LossFn = Callable[[nn.Module, dict[str, Any], LossWeights], Tensor]  # (model, batch, its weights) -> the weighted loss
Evaluate = Callable[[nn.Module], dict[str, Any]]  # model -> a report: numbers (logged), and tables
SaveModel = Callable[[nn.Module, str], None]  # (model, folder): write the model there


def train(
    model: nn.Module,
    data: Batches,
    cfg: TrainConfig,
    loss_fn: LossFn,
    evaluate: Evaluate | None = None,
    save_model: SaveModel | None = None,
    keep_best: KeepBest | None = None,
    identity: dict[str, Any] | None = None,
    loss_title: str = TRAIN_TITLE,
) -> TrainSummary:
    """Train `model` for cfg.steps optimizer steps (the module docstring, in code); returns a TrainSummary.

    evaluate(model) -> a report: its numbers go to metrics.jsonl. save_model(model, folder) writes the final
    model, or, with keep_best, the best one so far each time an evaluation beats it (KeepBest: also early
    stopping). identity: what the run trains with ({"vocab": digest, "labels": [...], "data": digest}),
    saved with the training state; --resume refuses another vocabulary or label set and warns of new data.
    loss_title: what the training loss is, over its curve in loss.png.
    """
    run = start(model, cfg, keep_best, identity)
    try:
        with run.stop.installed():
            while run.step < cfg.steps and not run.stopping:
                loss, signalled = optimizer_step(run, data, loss_fn)
                after_step(run, loss, signalled, evaluate, save_model)
        return finish(run, save_model, loss_title)
    finally:
        if run.bar is not None:
            run.bar.close()  # on an error too: the error's line starts a line of its own
        if run.log is not None:
            run.log.close()  # on an error too: TensorBoard's writer holds the last rows


@dataclass
class KeepBest:
    """Keep the best model: after each evaluation, score(report) (higher is better); a new best is written
    at the top of --out by train's save_model, then on_best(report) runs (e.g. a confusion matrix), and
    `patience` evaluations in a row without a new best stop the run (0: never). Its progress is saved with
    the training state, so --resume goes on from it."""

    score: Callable[[dict[str, Any]], float]
    patience: int = 0
    on_best: Callable[[dict[str, Any]], object] | None = None  # what it returns is not used
    best: float = -math.inf  # progress: the best score so far, its report, evaluations since, the last report
    report: dict[str, Any] | None = None
    since: int = 0
    last: dict[str, Any] | None = None

    def update(self, report: dict[str, Any]) -> bool:
        """Take an evaluation's report; True when it is a new best."""
        self.last = report
        score = self.score(report)
        better = score > self.best
        self.best, self.report, self.since = (score, report, 0) if better else (self.best, self.report, self.since + 1)
        return better

    def patience_ran_out(self) -> bool:
        """Whether `patience` evaluations in a row brought no new best (never with patience 0)."""
        return self.patience > 0 and self.since >= self.patience

    def state(self) -> dict[str, Any]:
        """The progress saved with the training state (as "extra"): "score" (the best score so far), "report"
        (its report), "since" (evaluations since). load() reads these keys back; saved states on disk use
        them, so they stay even where a field's name differs (best)."""
        return {"score": self.best, "report": self.report, "since": self.since}

    def load(self, state: dict[str, Any]) -> None:
        """Go on from the progress state() saved ({}: from the start)."""
        self.best, self.report, self.since = state.get("score", -math.inf), state.get("report"), state.get("since", 0)


@dataclass
class Throughput:
    """Tokens per second over the window since the last metrics row (all ranks' tokens)."""

    tokens: int = 0
    start: float = field(default_factory=time.perf_counter)

    def add(self, tokens: int) -> None:
        """Count a step's tokens (all ranks')."""
        self.tokens += tokens

    def rate(self) -> float:
        """Tokens per second since the window started."""
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
    identity: dict[str, Any] | None
    stop: _StopFlag = field(default_factory=lambda: _StopFlag())
    bar: Any = None  # the progress bar (rank 0, --progress)
    log: RunLog | None = None  # metrics.jsonl and --log-to's loggers (rank 0)
    stopping: bool = False  # what all ranks agreed on (a signal, or KeepBest's patience), at a step boundary
    bad_in_a_row: int = 0  # non-finite losses
    last_loss: float = float("nan")  # the last finite one
    window: Throughput = field(default_factory=Throughput)
    run_start: float = field(default_factory=time.perf_counter)
    tokens_per_s: float | None = None  # of the last metrics row
    eval: dict[str, float] = field(default_factory=dict)  # the last evaluation
    stopped_early: int | None = None
    resumed_at: int | None = None  # the step --resume found saved

    @property
    def is_main(self) -> bool:
        """Whether this process is rank 0: the one that writes (logs, models, the training state)."""
        return self.rank == 0

    @property
    def main(self) -> bool:
        """Deprecated: Run.is_main (kept for one release)."""
        deprecated.warn("Run.main", "Run.is_main")
        return self.is_main

    @property
    def metrics_path(self) -> str:
        """The run's metrics.jsonl."""
        return os.path.join(self.cfg.out, "metrics.jsonl")

    @property
    def state_dir(self) -> str:
        """Where the training state is saved (checkpoint.py writes it)."""
        return os.path.join(self.cfg.out, "checkpoint")


def start(model: nn.Module, cfg: TrainConfig, keep_best: KeepBest | None, identity: dict[str, Any] | None) -> Run:
    """Device and processes, the seed, optimizer, schedule and AMP scaler, the resumed state if any, then the
    DDP / compile wrapping. The order is the run's RNG order: a change here changes what every run computes."""
    rank, world, device = setup_distributed(pick_device(cfg.device))
    torch.manual_seed(cfg.seed)
    model.to(device)
    set_attention = getattr(model, "set_attn_implementation", None)  # bertkit's models; any nn.Module trains
    if set_attention is not None:
        set_attention(cfg.attention)
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
    elif run.is_main and os.path.exists(run.metrics_path):  # pretrain / finetune claim --out first (runfolder.py)
        raise TrainingError(
            f"{run.metrics_path}: an earlier run's log is there; pass resume=True to continue it, "
            "or use another out (bertkit.train.runfolder.claim moves an old run aside)"
        )
    if world > 1:
        ids = [device.index] if device.type == "cuda" else None
        run.model = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    if cfg.compile:
        run.model = cast(nn.Module, torch.compile(run.model))  # typed as a callable; of a Module, a Module
    if run.is_main:  # on --resume, each log drops what a killed run wrote after the saved step
        run.log = RunLog(cfg.out, cfg.log_to, resumed_at=run.step if cfg.resume else None)
    run.bar = _progress(cfg, run.step) if run.is_main else None
    run.window, run.run_start = Throughput(), time.perf_counter()  # the clock starts with the first step
    return run


def resume(run: Run) -> None:
    """Load the training state saved in --out into `run` (model, optimizer, schedule, RNG, step, KeepBest's)."""
    state = load_training_state(run.state_dir)
    if state is None:
        raise TrainingError(f"--resume: {run.state_dir} holds no training state; run without --resume first")
    note = check_identity(state.get("identity") or {}, run.identity or {}, run.state_dir)
    run.step = run.resumed_at = restore(
        state, run.raw_model, run.optimizer, run.scheduler, run.scaler, run.cfg, run.world
    )
    if run.keep_best is not None:
        run.keep_best.load(state.get("extra", {}))  # fine-tuning's best score so far
    if run.is_main:
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
            # not sync: world > 1, so run.model is DDP's wrapper (or torch.compile's of it, which passes no_sync on)
            contextlib.nullcontext() if sync else cast(nn.parallel.DistributedDataParallel, run.model).no_sync(),
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
        if run.is_main:
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
    evaluate: Evaluate | None,
    save_model: SaveModel | None,
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
        if run.is_main:
            save_training_state(
                run.state_dir,
                training_state(
                    run.raw_model,
                    run.optimizer,
                    run.scheduler,
                    run.scaler,
                    step,
                    cfg,
                    run.world,
                    run.keep_best.state() if run.keep_best is not None else None,
                    run.identity,
                ),
            )
        barrier(run.world)


def _show_progress(run: Run, loss: float) -> None:
    """The bar's step, and the loss, lr and tokens/s beside it."""
    run.bar.update(1)
    rate = run.window.rate()
    run.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{run.scheduler.get_last_lr()[0]:.2e}", tok_s=f"{rate:,.0f}")


def _log_row(run: Run, loss: float) -> None:
    """A training row in the logs (rank 0); tokens/s over the window since the last row, all ranks' tokens."""
    row: dict[str, Any] = {
        "step": run.step,
        "loss": round(loss, 6),
        "lr": run.scheduler.get_last_lr()[0],
        "tokens_per_s": round(run.window.restart(), 1),
        "elapsed_s": round(time.perf_counter() - run.run_start, 2),
    }
    run.tokens_per_s = row["tokens_per_s"]
    if run.log is not None:  # rank 0's (start)
        run.log.row(row)


def _evaluate_and_keep_best(run: Run, evaluate: Evaluate, save_model: SaveModel | None) -> bool:
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
    if run.is_main and keep.update(report):
        if save_model is not None:
            save_model(run.raw_model, run.cfg.out)  # the best model so far, at the top of --out
        if keep.on_best is not None:
            keep.on_best(report)
    barrier(run.world)
    return keep.patience > 0 and agree(run.is_main and keep.patience_ran_out(), run.world, run.device)


def finish(run: Run, save_model: SaveModel | None, loss_title: str = TRAIN_TITLE) -> TrainSummary:
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
    if run.resumed_at is not None and run.resumed_at >= run.cfg.steps:
        best = run.keep_best is not None and run.keep_best.report is not None
        summary.already_complete = complete_note(run.cfg, run.resumed_at, "best model" if best else "final model")
    if run.is_main and not summary.interrupted:
        # with KeepBest the best model is there already; an already complete run's final model is saved again, in
        # case the run was stopped between its last training state and its model
        if save_model is not None and run.keep_best is None:
            save_model(run.raw_model, run.cfg.out)
        plot_losses(run.metrics_path, os.path.join(run.cfg.out, "loss.png"), loss_title)
    barrier(run.world)
    return summary


def complete_note(
    cfg: TrainConfig,
    step: int,
    model: str,
    longer: str = "pass a larger --steps with --resume (the learning-rate schedule then spans the new --steps)",
) -> str:
    """What --resume of a run that had already reached its --steps says: there was nothing to train, where its
    model is, and how to train longer (--steps may change on --resume; lr_factor then lays the schedule over the
    new --steps, so a rate that had decayed rises again)."""
    reached = f"step {step} of --steps {cfg.steps}" if step == cfg.steps else f"step {step}, past --steps {cfg.steps}"
    return (
        f"{cfg.out}: the run is already complete: it reached {reached} before, so --resume trained nothing; its "
        f"{model} is in {cfg.out}. To train longer, {longer}"
    )


# ----- pieces of the loop ------------------------------------------------------------------------
def _evaluate(evaluate: Evaluate, model: nn.Module, step: int, log: RunLog | None, world: int) -> dict[str, Any]:
    """Rank 0 (the one with the logs) evaluates (the model is the same on every rank) and logs its numbers;
    the others wait and get {}."""
    report: dict[str, Any] = {}
    if log is not None:
        model.eval()
        with torch.no_grad():
            report = dict(evaluate(model))
        log.row({"step": step, "split": "eval", **{k: round(v, 6) for k, v in _numbers(report).items()}})
    barrier(world)
    return report


def _numbers(report: dict[str, Any]) -> dict[str, float]:
    """The numbers of an evaluation report (not its tables: per class, confusion matrix)."""
    return {k: float(v) for k, v in report.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _progress(cfg: TrainConfig, start: int) -> Any:  # a tqdm bar (tqdm is imported only when one is shown)
    """Rank 0's progress bar (--progress), from step `start`; None without one."""
    if not cfg.progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=cfg.steps, initial=start, desc="train", unit="step", dynamic_ncols=True)


class _StopFlag:
    """SIGINT / SIGTERM ask the loop to save and stop after the current step."""

    def __init__(self) -> None:
        self.requested = False

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True

    @contextlib.contextmanager
    def installed(self) -> Iterator[_StopFlag]:
        """The handlers set while the loop runs (only the main thread may set them), the old ones put back."""
        if threading_main():
            old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield self
            finally:
                for s, h in old.items():
                    signal.signal(s, h)
        else:  # signal handlers can only be set from the main thread
            yield self


# Old names, for one release: the ones this module does not import itself (those it imports, such as LossWeights,
# pick_device and make_optimizer, are attributes of it as any import is).
if not TYPE_CHECKING:
    __getattr__ = moved(
        __name__,
        {
            "TrainConfig": "bertkit.train.settings:TrainConfig",
            "with_default": "bertkit.train.settings:with_default",
            "Batches": "bertkit.train.batches:Batches",
            "TOKENS": "bertkit.train.batches:TOKENS",
            "StepSampler": "bertkit.train.batches:StepSampler",
            "all_processes": "bertkit.train.devices:all_processes",
            "cpu_has_native_bf16": "bertkit.train.devices:cpu_has_native_bf16",
        },
    )
