"""`bertkit info`: build or load a model, show its heads, count parameters, run one forward pass."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from .config import MODEL_TYPES, PRESETS
from .errors import CheckpointError
from .options import opt, parse

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
    """A folder that holds no BERT or ELECTRA model: no config.json, or another model's config."""


@dataclass
class InfoConfig:
    """Build or load a model, show it with its heads, count parameters, run one forward pass."""

    model: str | None = opt(None, "a local HF model directory (config.json + weights)", positional=True, nargs="?")
    preset: str | None = opt(None, "a built-in architecture, randomly initialised", choices=sorted(PRESETS))
    seq_len: int = opt(8, "length of the random input ids of the forward pass")

    def problem(self) -> str | None:
        if (self.model is None) == (self.preset is None):
            return "give a model directory or --preset NAME (one of them)"
        if self.seq_len < 1:
            return f"argument --seq-len: must be a positive integer, got {self.seq_len}"
        return None


def check_model_folder(path: str) -> None:
    """`path` must hold a BERT or ELECTRA config.json; else a NotAModelError that says what the folder is and how to
    get a model folder (or, for a run's parent folder such as runs/quickstart, which folders in it are models)."""
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
    """Why `path` is not a BERT or ELECTRA model directory, in words; None where it looks like one. What is wrong
    inside a BERT config (bad JSON, a bad field) or with its weights is for loading to say."""
    config = os.path.join(path, "config.json")
    if not os.path.isdir(path):
        return "not a directory" if os.path.exists(path) else "no such directory"
    if not os.path.isfile(config):
        return "no config.json here, so not a model directory"
    try:
        with open(config, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    model_type = data.get("model_type", "bert") if isinstance(data, dict) else "bert"  # no field: BERT's default
    if model_type in MODEL_TYPES:
        return None
    return (
        f"config.json says model_type {model_type!r}: not a BERT or ELECTRA model "
        f"({' or '.join(repr(t) for t in MODEL_TYPES)}), the only kinds bertkit runs"
    )


def info_main(argv: list[str]) -> int:
    import torch

    args = parse(InfoConfig, argv, prog="bertkit info")

    from .explain.loading import load

    if args.model is not None:
        check_model_folder(args.model)
    loaded = load(args.model, args.preset, head="base")
    model = loaded.model.eval()
    for note in loaded.notes:
        print(f"note: {note}")
    cfg = model.config
    print(model)
    print(
        f"\n{cfg.num_hidden_layers} layers run one after another; in each, hidden {cfg.hidden_size} is split "
        f"into {cfg.num_attention_heads} heads x {cfg.head_dim} dims that attend in parallel."
    )
    print(f"parameters: {model.num_parameters():,}")
    ids = torch.randint(0, cfg.vocab_size, (1, args.seq_len))
    with torch.no_grad():
        out = model(ids)
    print(
        f"input_ids {tuple(ids.shape)} -> last_hidden_state {tuple(out.last_hidden_state.shape)}, "
        f"pooler_output {tuple(out.pooler_output.shape)}"
    )
    return 0
