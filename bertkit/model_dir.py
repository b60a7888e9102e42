"""What a model directory is: a folder with a BERT, ELECTRA or ModernBERT config.json, checked before anything loads
it."""

from __future__ import annotations

import os

from .config import FAMILIES
from .errors import BertkitError, CheckpointError
from .files import read_json

# how to get a model folder: bertkit itself never downloads (the README's tour has the same command)
GET_A_MODEL = (
    "bertkit reads local model directories only and downloads nothing: download one once with "
    "huggingface_hub's `hf` command (pip install huggingface_hub): `hf download "
    'google-bert/bert-base-chinese --include "*.json" vocab.txt model.safetensors --local-dir '
    "models/bert-base-chinese` (older versions: `huggingface-cli download` with the same arguments), and "
    "bertkit reads that folder offline from then on; or make one: `bertkit quickstart` (its pretrained "
    "model is runs/quickstart/pretrain) or `bertkit pretrain --corpus builtin:peoples-daily --out DIR`"
)


class NotAModelError(CheckpointError):
    """A folder that holds no BERT, ELECTRA or ModernBERT model: no config.json, or another model's config."""


def check_model_folder(path: str) -> None:
    """`path` must hold a BERT, ELECTRA or ModernBERT config.json; else a NotAModelError that says what the folder is
    and how to get a model folder (or, for a run's parent folder such as runs/quickstart, which folders in it are
    models)."""
    problem = not_a_model(path)
    if problem is None:
        return
    models = (
        sorted(d for d in os.listdir(path) if not_a_model(os.path.join(path, d)) is None) if os.path.isdir(path) else []
    )
    if models:
        raise NotAModelError(
            f"{path}: {problem}; the folders in it that are: {', '.join(models[:6])}"
            f"{', ...' * (len(models) > 6)} (e.g. `bertkit info {os.path.join(path, models[0])}`)"
        )
    raise NotAModelError(f"{path}: {problem}; {GET_A_MODEL}")


def not_a_model(path: str) -> str | None:
    """Why `path` is not a BERT, ELECTRA or ModernBERT model directory, in words; None where it looks like one. What
    is wrong inside a config (bad JSON, a bad field) or with its weights is for loading to say."""
    config = os.path.join(path, "config.json")
    if not os.path.isdir(path):
        return "not a directory" if os.path.exists(path) else "no such directory"
    if not os.path.isfile(config):
        return "no config.json here, so not a model directory"
    try:
        data = read_json(config)
    except BertkitError:  # a config.json that cannot be read: loading says why
        return None
    model_type = data.get("model_type", "bert") if isinstance(data, dict) else "bert"  # no field: BERT's default
    if model_type in FAMILIES:
        return None
    return (
        f"config.json says model_type {model_type!r}: not a BERT, ELECTRA or ModernBERT model "
        f"({', '.join(repr(t) for t in FAMILIES)}), the only kinds bertkit runs"
    )
