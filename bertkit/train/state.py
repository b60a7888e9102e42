"""The training state saved in a run's checkpoint/ folder, and read back by --resume.

training_state: what is saved (model, optimizer, scheduler, RNG, step, the settings, what the run trains on);
check_identity and restore: --resume continues only the same run (the same model, labels, settings and number
of processes), then puts the saved state back; save_training_state / load_training_state write and read its file.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..errors import CheckpointError, TrainingError
from ..files import atomic_write
from ..options import may_change_on_resume

if TYPE_CHECKING:
    from .settings import TrainConfig


def training_state(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    scaler: torch.amp.GradScaler | None,
    step: int,
    cfg: TrainConfig,
    world: int,
    extra: dict[str, Any] | None,
    identity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The state after `step`, for save_training_state. extra: KeepBest's progress (loop.py), given back to it
    on --resume; identity: what the run trains with (check_identity); the settings that are plain values."""
    settings = {k: v for k, v in asdict(cfg).items() if v is None or isinstance(v, (int, float, str, bool))}
    state: dict[str, Any] = {
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
    if extra is not None:
        state["extra"] = extra
    if identity:
        state["identity"] = identity
    return state


def check_identity(saved: dict[str, Any], now: dict[str, Any], state_dir: str) -> str | None:
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
    return None


def restore(
    state: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    scaler: torch.amp.GradScaler | None,
    cfg: TrainConfig,
    world: int,
) -> int:
    """Put a saved state back, after checking the run's settings and number of processes match; its step."""
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


TRAIN_STATE = "training_state.pt"


def save_training_state(directory: str, state: dict[str, Any]) -> None:
    """Model, optimizer, scheduler, RNG states and the step, in one file written atomically.

    Only tensors, numbers, strings and containers of them go in, so it reads back with
    torch.load(weights_only=True).
    """
    os.makedirs(directory, exist_ok=True)
    atomic_write(os.path.join(directory, TRAIN_STATE), lambda tmp: torch.save(state, tmp))


def load_training_state(directory: str) -> dict[str, Any] | None:
    """The state save_training_state wrote, or None when the directory has none."""
    path = os.path.join(directory, TRAIN_STATE)
    if not os.path.exists(path):
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(
            f"{path}: cannot read the training state ({type(e).__name__}: {e}); delete it "
            "to start over, or point --out at another run"
        ) from e
