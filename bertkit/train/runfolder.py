"""One run owns its --out folder: claimed at the start of `bertkit pretrain` / `finetune`, released at the end.

    with claim(cfg.out, resume=cfg.resume, overwrite=cfg.overwrite, rank=rank, world=world):
        ... the whole run ...

    run_claimed(cfg, run_in)      the same for a command: run_in(cfg, rank, world) in its claimed --out
    keep_settings(cfg, command)   <out>/settings.yaml, which `--config` reads back to rerun the run

    1. <out>/.lock, made with O_CREAT | O_EXCL, holds "pid hostname": a second writer is refused
       (naming the pid); a lock whose process is gone from this host is taken over, with a note
    2. an earlier run in <out> (metrics.jsonl, checkpoint/, model files, ...) is refused unless
       --resume (continue it) or --overwrite (move it to a sibling <out>.replaced-<time>; nothing is deleted);
       --overwrite is refused, before anything moves, where it would move the working directory or an input
    3. temp files of saves that were killed halfway (.<name>.<random>.tmp, files.atomic_write) go
    4. a folder the claim created is removed again if the run ends without writing anything into it
The rules for --out that every command writing a folder shares (a file, the working directory, inputs,
moving aside) are in outfolder.py.

Only rank 0 claims; under torchrun the other ranks wait for it, so none reads the folder while it changes.
"""

from __future__ import annotations

import contextlib
import glob
import os
import sys
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch
import torch.distributed as dist

from ..errors import TrainingError
from ..files import lock_file, release_lock
from ..options import write_settings
from ..outfolder import check_out, move_aside
from .devices import pick_device, setup_distributed
from .settings import TrainConfig
from .state import TRAIN_STATE

T = TypeVar("T")
ConfigT = TypeVar("ConfigT", bound=TrainConfig)  # a command's settings: PretrainConfig, FinetuneConfig
LOCK = ".lock"
# what a pretraining or fine-tuning run leaves in its folder; any of these means "an earlier run is here"
RUN_FILES = (
    "metrics.jsonl",
    "checkpoint",
    "model.safetensors",
    "config.json",
    "tokenizer",
    "vocab.txt",
    "eval_report.json",
    "loss.png",
    "confusion_matrix.png",
    "data",
    "plans",
    "settings.yaml",
)
SETTINGS = "settings.yaml"  # the run's settings: `bertkit COMMAND --config <out>/settings.yaml --out NEW` reruns it


@contextlib.contextmanager
def claim(
    out: str,
    *,
    resume: bool,
    overwrite: bool,
    rank: int = 0,
    world: int = 1,
    inputs: dict[str, str | None] | None = None,
) -> Iterator[str]:
    """Own `out` for the length of the `with` block (see the module docstring); the lock goes on any exit.
    inputs: the run's input paths by flag ({"--train": ...}), which --overwrite must not move aside."""
    if resume and overwrite:
        raise TrainingError(f"--out {out}: --resume continues the run there, --overwrite moves it aside; pass one")
    lock, created = None, not os.path.lexists(out)
    try:
        if rank == 0:
            lock = take_lock(out)
            check_earlier_run(out, resume, overwrite, inputs or {})
            remove_stale_temp_files(out)
        if world > 1:
            dist.barrier()  # the other ranks read --out only once rank 0 has it ready
        yield out
    finally:
        if lock is not None:
            release_lock(lock)
            if created:  # a run that failed before writing anything leaves no empty folder behind
                with contextlib.suppress(OSError):
                    os.rmdir(out)


def run_claimed(cfg: ConfigT, run_in: Callable[[ConfigT, int, int], T], inputs: dict[str, str | None]) -> T:
    """run_in(cfg, rank, world) with cfg.out claimed for it: `bertkit pretrain` / `finetune` after their own checks.
    inputs: the paths the run reads, by flag. Under torchrun every process joins first (rank, world size);
    (0, 1) otherwise."""
    rank, world, _ = setup_distributed(pick_device(cfg.device))
    with claim(cfg.out, resume=cfg.resume, overwrite=cfg.overwrite, rank=rank, world=world, inputs=inputs):
        return run_in(cfg, rank, world)


def keep_settings(cfg: TrainConfig, command: str) -> str:
    """<out>/settings.yaml: the settings the run trains with (defaults filled in), all but how --out was claimed
    (--resume / --overwrite), so that `bertkit COMMAND --config` on it reruns the run."""
    return write_settings(cfg, os.path.join(cfg.out, SETTINGS), command=command, leave_out=("resume", "overwrite"))


# ----- the lock ----------------------------------------------------------------------------------
def take_lock(out: str) -> str:
    """Create <out>/.lock holding our pid and host; take over a lock whose process has died. Returns its path."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise TrainingError(f"--out {out}: is a file, not a folder; pass a folder (it is created if missing)")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, LOCK)
    lock_file(
        path,
        TrainingError,
        f"--out {out}",
        "is writing there",
        "pass another --out, or delete {path} if that run is gone",
        takeover="taking the folder over",
    )
    return path


# ----- an earlier run ----------------------------------------------------------------------------
def check_earlier_run(out: str, resume: bool, overwrite: bool, inputs: dict[str, str | None]) -> None:
    """Refuse to write over an earlier run unless asked to continue it (--resume) or move it (--overwrite)."""
    saved = os.path.exists(os.path.join(out, "checkpoint", TRAIN_STATE))
    found = describe_run(out)
    if resume:
        if not saved:
            raise TrainingError(
                f"--resume: {os.path.join(out, 'checkpoint')} holds no training state"
                + (
                    f"; the run in {out} stopped before its first save ({', '.join(found)}): start it over with "
                    "--overwrite instead of --resume (what is there is moved aside)"
                    if found
                    else "; run without --resume first"
                )
            )
        return
    if not found:
        return
    if not overwrite:
        raise TrainingError(
            f"{out} already holds a run: {', '.join(found)}; "
            + (
                "pass --resume to continue it, "
                if saved
                else "it stopped before its first save, so there is nothing to --resume; pass "
            )
            + "--overwrite to move it aside and start over, or another --out"
        )
    check_movable(out, inputs)
    move_aside(out, keep=(LOCK,), what="the earlier run", found=", ".join(found))


def describe_run(out: str) -> list[str]:
    """What an earlier run left in `out`, in words: ["metrics.jsonl (125 rows)", "checkpoint/ (step 900)", ...]."""
    found = []
    for name in RUN_FILES:
        path = os.path.join(out, name)
        if not os.path.lexists(path):
            continue
        if name == "metrics.jsonl":
            with open(path, "rb") as fh:
                found.append(f"{name} ({sum(1 for line in fh if line.strip())} rows)")
        elif name == "checkpoint":
            step = saved_step(path)
            found.append(f"{name}/" + (f" (step {step})" if step is not None else ""))
        else:
            found.append(name + ("/" if os.path.isdir(path) else ""))
    return found


def saved_step(state_dir: str) -> int | None:
    """The step of the training state in `state_dir`, read without loading its tensors; None if unreadable."""
    try:
        return int(
            torch.load(os.path.join(state_dir, TRAIN_STATE), map_location="cpu", weights_only=True, mmap=True)["step"]
        )
    except Exception:
        return None


def check_movable(out: str, inputs: dict[str, str | None]) -> None:
    """--overwrite moves everything in `out` aside: refuse (before anything moves) when that would take the working
    directory (`--out .`, or a folder above it) or a file the run reads (a --train file kept in --out)."""
    check_out(out, TrainingError, overwrite=True, inputs=inputs, ours=lambda name: True, what="a run", keep=(LOCK,))


# ----- leftovers of killed saves -----------------------------------------------------------------
def remove_stale_temp_files(out: str) -> list[str]:
    """Remove .<name>.<random>.tmp files (files.atomic_write) a killed save left; we hold the lock, so
    no live writer owns them. Returns the paths removed."""
    stale = []
    for folder in (out, os.path.join(out, "checkpoint"), os.path.join(out, "tokenizer")):
        stale += [p for p in glob.glob(os.path.join(glob.escape(folder), ".*.tmp")) if os.path.isfile(p)]
    for path in stale:
        os.remove(path)
    if stale:
        print(
            f"removed {len(stale)} temp file(s) of a save that did not finish: "
            + ", ".join(os.path.relpath(p, out) for p in stale),
            file=sys.stderr,
        )
    return stale
