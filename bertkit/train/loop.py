"""The training loop every bertkit run uses (pretraining and fine-tuning), top to bottom.

    for step in range(start, steps):
        for micro in range(grad_accum):      batch = data.batch(step, micro); loss = loss_fn(model, batch)
                                             (loss / grad_accum).backward()
        skip the step if the loss is not finite; clip; optimizer.step(); scheduler.step()
        every log_every:  a row in metrics.jsonl (step, loss, lr, tokens/s)
        every eval_every: evaluate(model) -> a row in metrics.jsonl
        every save_every: the whole training state, atomically (model, optimizer, scheduler, RNG, step)
        SIGINT / SIGTERM: save the state and stop cleanly

Data is addressed by step: `data.batch(step, micro)` must return the same batch for the same
step, so a resumed run sees exactly what the uninterrupted one saw. Under torchrun each process
gets its share of the global batch from `data`, DDP averages the gradients, and only rank 0 writes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import signal
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Callable, Protocol

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..checkpoint import (atomic_write, atomic_write_text, load_training_state, save_training_state,
                          write_problem)
from ..errors import BertkitError
from ..metrics import finite_or_none
from ..options import opt


class TrainingError(BertkitError, RuntimeError):
    """A run that cannot go on (diverged, bad settings, incompatible resume)."""


@dataclass
class TrainConfig:
    """Settings of the shared training loop."""

    out: str = opt("runs/run", "run folder: metrics.jsonl, training state, loss curve, final model")
    steps: int = opt(300, "optimizer steps")
    batch_size: int = opt(32, "examples per micro-batch on each process (x --grad-accum per step)")
    grad_accum: int = opt(1, "micro-batches per optimizer step (a larger batch in the same memory)")
    lr: float = opt(1e-3, "peak learning rate")
    weight_decay: float = opt(0.01, "AdamW weight decay (never on biases and LayerNorm)")
    warmup: float = opt(0.06, "fraction of the steps over which the learning rate rises linearly")
    schedule: str = opt("linear", "decay after warm-up", choices=["linear", "cosine", "constant"])
    max_grad_norm: float = opt(1.0, "clip the gradient norm to this (0: no clipping)")
    seed: int = opt(0, "seed of initialisation, data order, masking and dropout")
    log_every: int = opt(10, "steps between metrics rows")
    eval_every: int = opt(100, "steps between evaluations (0: only at the end)")
    save_every: int = opt(100, "steps between saved training states (0: only at the end)")
    device: str = opt("auto", "cpu, cuda, cuda:N, or auto (cuda when there is one)")
    precision: str = opt("auto", "autocast dtype: auto is bf16 (or fp16) on a GPU and float32 on a CPU; "
                         "bf16 is also taken on a CPU (faster where it has AVX-512 BF16 or AMX)",
                         choices=["auto", "fp32", "bf16", "fp16"])
    compile: bool = opt(False, "torch.compile the model")
    attention: str = opt("auto", "attention implementation: auto (varlen where a batch has padding or packed "
                         "documents, else sdpa), varlen (padding always removed), sdpa, eager",
                         choices=["auto", "varlen", "sdpa", "eager"])
    resume: bool = opt(False, "continue from the training state saved in --out")
    overwrite: bool = opt(False, "start over in an --out that holds an earlier run: it is moved to "
                          "<out>.replaced-<time> first (nothing is deleted)")
    max_bad_steps: int = opt(5, "stop after this many non-finite losses in a row")
    progress: bool = opt(True, "show a progress bar")


# Settings that do not change what a resumed run computes; every other one must stay the same.
MAY_CHANGE_ON_RESUME = {"out", "resume", "overwrite", "steps", "progress", "log_every", "eval_every", "save_every",
                        "device", "max_bad_steps", "compile", "precision", "attention"}


class Batches(Protocol):
    def batch(self, step: int, micro: int) -> dict[str, Tensor]:
        """This process's share of micro-batch `micro` of optimizer step `step` (deterministic)."""


class StepSampler:
    """Which examples make up global micro-batch `index`: a seeded order per epoch, walked in turn.

    Every process computes the same global batch (batch_size x world) and takes its own rows,
    so a run with 2 processes of batch 4 sees what 1 process of batch 8 sees, and a resumed run
    sees what the uninterrupted one saw.
    """

    def __init__(self, n: int, batch_size: int, grad_accum: int, seed: int, rank: int = 0, world: int = 1):
        self.n, self.batch_size, self.grad_accum, self.seed = n, batch_size, grad_accum, seed
        self.rank, self.world = rank, world
        self.global_batch = batch_size * world
        if n < self.global_batch:
            raise TrainingError(f"the data gives {n} examples, fewer than one batch of {self.global_batch}: "
                                "lower --batch-size, or add data")
        self._order: tuple[int, list[int]] = (-1, [])

    def order(self, epoch: int) -> list[int]:
        if self._order[0] != epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._order = (epoch, torch.randperm(self.n, generator=g).tolist())
        return self._order[1]

    def global_indices(self, step: int, micro: int) -> list[int]:
        start = (step * self.grad_accum + micro) * self.global_batch
        out = []
        for i in range(start, start + self.global_batch):
            epoch, pos = divmod(i, self.n)
            out.append(self.order(epoch)[pos])
        return out

    def mine(self) -> slice:
        """This process's rows of a global batch."""
        return slice(self.rank * self.batch_size, (self.rank + 1) * self.batch_size)


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
    On a CPU, bf16 autocast only when asked: it pretrains `mini` 1.2-1.4x faster on a CPU with
    AVX-512 BF16 / AMX (cpu_has_native_bf16; README, Speed); CPUs without native bf16 may be slower."""
    if precision == "fp32":
        return None
    if device.type != "cuda":
        if precision == "fp16":
            warnings.warn(f"--precision fp16 is for GPUs; training in float32 on {device} (bf16 works on CPUs)",
                          stacklevel=2)
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
def train(model: nn.Module, data: Batches, cfg: TrainConfig, loss_fn: Callable[[nn.Module, dict], Tensor],
          evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
          save_model: Callable[[nn.Module, str], None] | None = None, extra_state: dict | None = None,
          stop_when: Callable[[dict], bool] | None = None, identity: dict | None = None) -> dict:
    """Train `model` for cfg.steps optimizer steps; returns a summary (last loss, eval, tokens/s, ...).

    save_model(model, folder) runs at the end; stop_when(eval result) -> True ends the run early.
    identity: what the run trains with ({"vocab": digest, "labels": [...], "data": digest}), saved
    with the training state; --resume refuses another vocabulary or label set and warns of new data.
    """
    _check(cfg)
    device = pick_device(cfg.device)
    rank, world, device = setup_distributed(device)
    main = rank == 0
    torch.manual_seed(cfg.seed)
    model.to(device)
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(cfg.attention)
    raw_model = model
    optimizer = make_optimizer(model, cfg, device)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg))
    amp = autocast_dtype(cfg.precision, device)
    scaler = torch.amp.GradScaler("cuda") if amp == torch.float16 else None
    metrics_path = os.path.join(cfg.out, "metrics.jsonl")
    state_dir = os.path.join(cfg.out, "checkpoint")

    start = 0
    if cfg.resume:
        state = load_training_state(state_dir)
        if state is None:
            raise TrainingError(f"--resume: {state_dir} holds no training state; run without --resume first")
        _check_identity(state.get("identity") or {}, identity or {}, state_dir)
        start = _restore(state, raw_model, optimizer, scheduler, scaler, cfg, world)
        if extra_state is not None:
            extra_state.update(state.get("extra", {}))  # e.g. fine-tuning's best score so far
        if main:
            print(f"resuming {cfg.out} at step {start}", file=sys.stderr)
            truncate_metrics(metrics_path, start)
    elif main and os.path.exists(metrics_path):  # pretrain / finetune claim --out first (runfolder.py): never here
        raise TrainingError(f"{metrics_path}: an earlier run's log is there; pass resume=True to continue it, or "
                            "use another out (bertkit.train.runfolder.claim moves an old run aside)")

    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if cfg.compile:
        model = torch.compile(model)

    stop = _StopFlag()
    bar = _progress(cfg, start) if main else None
    bad_in_a_row, last_loss, summary = 0, float("nan"), {}
    window_tokens, window_start = 0, time.perf_counter()
    run_start = time.perf_counter()
    step = start
    with stop.installed():
        stopping = False  # what all ranks agreed on; a signal acts through it, at a step boundary
        while step < cfg.steps and not stopping:
            model.train()
            step_loss, step_tokens = torch.zeros((), device=device), 0
            for micro in range(cfg.grad_accum):
                batch = {k: v.to(device, non_blocking=True) if isinstance(v, Tensor) else v
                         for k, v in data.batch(step, micro).items()}
                step_tokens += int((batch["attention_mask"] > 0).sum()) if "attention_mask" in batch else 0
                sync = micro == cfg.grad_accum - 1 or world == 1
                with (contextlib.nullcontext() if sync else model.no_sync()), \
                        torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                    loss = loss_fn(model, batch) / cfg.grad_accum
                (scaler.scale(loss) if scaler else loss).backward()
                step_loss += loss.detach()

            # one sync per step; under DDP every rank must agree on stepping and on stopping
            agreed = torch.stack([step_loss.float(), torch.tensor(float(stop.requested), device=device)])
            if world > 1:
                dist.all_reduce(agreed)
                agreed[0] /= world
            loss_value, stopping = float(agreed[0]), bool(agreed[1] > 0)
            finite = math.isfinite(loss_value)
            if finite:
                bad_in_a_row = 0
                if scaler:
                    scaler.unscale_(optimizer)
                if cfg.max_grad_norm > 0:
                    nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                if scaler:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                last_loss = loss_value
                window_tokens += step_tokens * world
            else:  # skip the update; the step still counts (logging, evaluation and saving go on)
                bad_in_a_row += 1
                if main:
                    warnings.warn(f"step {step}: loss is {loss_value}; skipping this step", stacklevel=2)
                if bad_in_a_row >= cfg.max_bad_steps:
                    raise TrainingError(f"the loss was not finite for {bad_in_a_row} steps in a row (last at step "
                                        f"{step}): lower --lr, use --precision fp32, or check the data")
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1

            if bar is not None:
                bar.update(1)
                rate = window_tokens / max(time.perf_counter() - window_start, 1e-9)
                bar.set_postfix(loss=f"{loss_value:.3f}", lr=f"{scheduler.get_last_lr()[0]:.2e}",
                                tok_s=f"{rate:,.0f}")
            if step % cfg.log_every == 0 or step == cfg.steps:
                elapsed = time.perf_counter() - window_start
                row = {"step": step, "loss": round(loss_value, 6), "lr": scheduler.get_last_lr()[0],
                       "tokens_per_s": round(window_tokens / max(elapsed, 1e-9), 1),
                       "elapsed_s": round(time.perf_counter() - run_start, 2)}
                summary["tokens_per_s"] = row["tokens_per_s"]
                window_tokens, window_start = 0, time.perf_counter()
                if main:
                    _append(metrics_path, row)
            if evaluate is not None and (step == cfg.steps or (cfg.eval_every and step % cfg.eval_every == 0)):
                summary["eval"] = _evaluate(evaluate, raw_model, step, metrics_path, main, world)
                if bar is not None:
                    line = ", ".join(f"{k} {v:.4g}" for k, v in summary["eval"].items())
                    bar.write(f"step {step}: {line}", file=sys.stderr)
                if stop_when is not None and _agree(main and stop_when(summary["eval"]), world, device):
                    summary["stopped_early"] = step  # rank 0 decides (it evaluated); every rank stops
                    stopping = True
            if stopping or step == cfg.steps or (cfg.save_every and step % cfg.save_every == 0):
                if main:
                    save_training_state(state_dir, _state(raw_model, optimizer, scheduler, scaler, step, cfg,
                                                          world, extra_state, identity))
                _barrier(world)
    if bar is not None:
        bar.close()
    summary.update(step=step, loss=last_loss,
                   interrupted=stopping and step < cfg.steps and "stopped_early" not in summary,
                   seconds=round(time.perf_counter() - run_start, 1))
    if main and not summary["interrupted"]:
        if save_model is not None:
            save_model(raw_model, cfg.out)
        plot_losses(metrics_path, os.path.join(cfg.out, "loss.png"))
    _barrier(world)
    return summary


# ----- pieces of the loop ------------------------------------------------------------------------
def _check(cfg: TrainConfig) -> None:
    for name in ("steps", "batch_size", "grad_accum", "log_every"):
        if getattr(cfg, name) < 1:
            raise TrainingError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}")
    if cfg.lr <= 0 or not 0 <= cfg.warmup < 1:
        raise TrainingError(f"need --lr > 0 and 0 <= --warmup < 1, got {cfg.lr} and {cfg.warmup}")


def _state(model, optimizer, scheduler, scaler, step: int, cfg: TrainConfig, world: int, extra: dict | None,
           identity: dict | None = None) -> dict:
    settings = {k: v for k, v in asdict(cfg).items() if v is None or isinstance(v, (int, float, str, bool))}
    state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "scheduler": scheduler.state_dict(), "torch_rng": torch.get_rng_state(),
             "config": {**settings, "world_size": world}}
    if torch.cuda.is_available():
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    if scaler is not None:
        state["scaler"] = scaler.state_dict()
    if extra:
        state["extra"] = extra
    if identity:
        state["identity"] = identity
    return state


def digest(items) -> str:
    """A short fingerprint of a sequence of strings (a vocabulary in id order, training texts)."""
    h = hashlib.sha256()
    for item in items:
        h.update(str(item).encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def vocab_digest(tokenizer) -> str:
    """The fingerprint of a tokenizer's vocabulary, tokens in id order."""
    vocab = tokenizer.get_vocab()
    return digest(sorted(vocab, key=vocab.get))


def _check_identity(saved: dict, now: dict, state_dir: str) -> None:
    """--resume continues the same model: the same vocabulary and labels; new training data only warns."""
    if saved.get("vocab") and now.get("vocab") and saved["vocab"] != now["vocab"]:
        raise TrainingError(f"--resume: {state_dir} was trained with another vocabulary (fingerprint {saved['vocab']}, "
                            f"now {now['vocab']}); its embeddings fit only that one: resume with the run's own "
                            "tokenizer (its tokenizer/ folder, or --tokenizer as before), or start a new run")
    if "labels" in saved and "labels" in now and saved["labels"] != now["labels"]:
        raise TrainingError(f"--resume: {state_dir} was trained with the labels {saved['labels']}, the data now "
                            f"gives {now['labels']}; the classifier has one output per label: train on the old "
                            "label set, or start a new run (--overwrite)")
    if saved.get("data") and now.get("data") and saved["data"] != now["data"]:
        warnings.warn(f"--resume: the training data differ from the run's first part (fingerprint {saved['data']}, "
                      f"now {now['data']}); continuing on the new data", stacklevel=3)


def _restore(state: dict, model, optimizer, scheduler, scaler, cfg: TrainConfig, world: int) -> int:
    saved = dict(state.get("config", {}))
    if saved.pop("world_size", world) != world:
        raise TrainingError(f"--resume: the run had {state['config']['world_size']} processes, now {world}: the "
                            "data order depends on it; resume with the same number of processes")
    changed = [k for k, v in saved.items() if k not in MAY_CHANGE_ON_RESUME and getattr(cfg, k, v) != v]
    if changed:
        raise TrainingError("--resume needs the settings of the run it continues; these differ: "
                            + ", ".join(f"--{k.replace('_', '-')} was {saved[k]}, now {getattr(cfg, k)}"
                                        for k in changed))
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    if "cuda_rng" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    if scaler is not None and "scaler" in state:
        scaler.load_state_dict(state["scaler"])
    return int(state["step"])


def _evaluate(evaluate, model, step: int, metrics_path: str, main: bool, world: int) -> dict[str, float]:
    """Rank 0 evaluates (the model is the same on every rank); the others wait."""
    result: dict[str, float] = {}
    if main:
        model.eval()
        with torch.no_grad():
            result = {k: float(v) for k, v in evaluate(model).items()}
        _append(metrics_path, {"step": step, "split": "eval", **{k: round(v, 6) for k, v in result.items()}})
    _barrier(world)
    return result


def _append(path: str, row: dict[str, Any]) -> None:
    """One whole line per row (a write cut by a kill leaves at most a cut last line, which readers skip)."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(finite_or_none(row), ensure_ascii=False, allow_nan=False) + "\n")
    except OSError as e:
        problem = write_problem(e, directory)
        if not problem:
            raise
        raise TrainingError(f"{path}: {problem}; the training state saved so far is intact: make room, then "
                            "continue with --resume") from None


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


def read_metrics(path: str) -> list[dict]:
    """The rows of a metrics.jsonl. A cut last line (a run killed while writing it) is skipped with a warning;
    a line that is not JSON anywhere else is an error naming the file and the line."""
    with open(path, encoding="utf-8") as fh:
        lines = [(n, line) for n, line in enumerate(fh, 1) if line.strip()]
    rows = []
    for i, (n, line) in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if i < len(lines) - 1:
                raise TrainingError(f"{path}, line {n}: not a JSON row ({e.msg}); fix or delete that line") from None
            warnings.warn(f"{path}, line {n}: a cut last row (the run stopped while writing it); skipped",
                          stacklevel=2)
    return rows


def truncate_metrics(path: str, step: int) -> None:
    """On resume: keep the rows up to the saved `step` (and drop a cut last line), so that the rows a killed run
    wrote after its last saved state are not there twice once the resumed run writes them again."""
    if not os.path.exists(path):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a cut last row goes, as the rows after `step` do
        rows = read_metrics(path)
    kept = [r for r in rows if r.get("step", 0) <= step]
    with open(path, encoding="utf-8") as fh:
        lines = sum(1 for line in fh if line.strip())
    if lines != len(kept):
        atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))
        print(f"{path}: dropped {lines - len(kept)} row(s) written after step {step} (or cut)", file=sys.stderr)


def plot_losses(metrics_path: str, png_path: str) -> str | None:
    """loss.png: the training loss per logged step, and the eval loss where there is one."""
    if not os.path.exists(metrics_path):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics_path)
    train_rows = [r for r in rows if "loss" in r and r.get("split") != "eval"]
    eval_rows = [r for r in rows if r.get("split") == "eval" and "loss" in r]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.plot([r["step"] for r in train_rows], [r["loss"] for r in train_rows], label="train loss")
    if eval_rows:
        ax.plot([r["step"] for r in eval_rows], [r["loss"] for r in eval_rows], "o-", label="held-out loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        atomic_write(png_path, lambda tmp: fig.savefig(tmp, format="png"))  # whole or not at all
    finally:
        plt.close(fig)
    return png_path
