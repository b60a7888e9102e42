"""How token vectors become one sentence vector, as sentence-transformers says it in a model folder.

read_pooling(folder)       modules.json -> Pooling (mode, normalize, max_seq_length), or None without one;
                           a module or mode bertkit does not run is an error, never other vectors
write_pooling(folder, p)   read_pooling's inverse, for a folder whose BERT is at its root
trained_dims(folder)       the shorter sizes its vectors were trained for (MatryoshkaLoss), () without
pooling_settings(p, ...)   the folder's settings with the flags over them
pool(hidden, mask, mode)   (B, S, H) -> (B, H) over the real tokens: mean | cls | max | mean_sqrt_len
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

from torch import Tensor

from .errors import BertkitError
from .files import read_json

POOLING_MODES = ("mean", "cls", "max", "mean_sqrt_len")
# sentence-transformers' mode names (pooling_mode / pooling_mode_*_token(s) keys) -> bertkit's
_ST_MODES = {
    "mean": "mean",
    "cls": "cls",
    "max": "max",
    "mean_sqrt_len_tokens": "mean_sqrt_len",
    "weightedmean": None,
    "lasttoken": None,
}  # None: sentence-transformers has it, bertkit does not
_ST_LEGACY_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


class PoolingConfigError(BertkitError, ValueError):
    """A sentence-transformers folder whose pooling settings cannot be read or are not implemented."""


@dataclass(frozen=True)
class Pooling:
    """How token vectors become one sentence vector."""

    mode: str  # "mean" | "cls" | "max" | "mean_sqrt_len"
    normalize: bool  # L2-normalize the pooled vector
    max_seq_length: int | None  # from sentence_bert_config.json, else None (the model's max_position_embeddings)
    source: str  # where the settings came from, e.g. "1_Pooling/config.json" or "flags"


# ----- reading a sentence-transformers folder ----------------------------------------------------
def read_pooling(model_dir: str | os.PathLike) -> Pooling | None:
    """The pooling a sentence-transformers folder declares; None when `model_dir` has no modules.json.

    modules.json lists the pipeline: a Transformer module (the BERT), a Pooling module (its
    config.json: pooling_mode_* keys, or pooling_mode in sentence-transformers 5), an optional
    Normalize module (its folder may be missing: it has no settings). sentence_bert_config.json
    holds max_seq_length. A module or pooling mode bertkit does not implement (Dense, weightedmean,
    lasttoken, several modes concatenated) is an error: the vectors would differ from the reference.
    """
    model_dir = os.fspath(model_dir)
    modules_path = os.path.join(model_dir, "modules.json")
    if not os.path.isfile(modules_path):
        return None
    modules = read_json(modules_path, PoolingConfigError, should_hold="a list of the sentence-transformers modules")
    if not isinstance(modules, list) or not all(
        isinstance(m, dict) and isinstance(m.get("type"), str) for m in modules
    ):
        raise PoolingConfigError(
            f'{modules_path}: expected a JSON list of objects each with a "type" (e.g. '
            "sentence_transformers.models.Pooling)"
        )
    pooling_path, normalize, transformer_dir = None, False, model_dir
    for module in modules:
        kind = module["type"].rsplit(".", 1)[-1]
        path = module.get("path", "")
        if not isinstance(path, str):
            raise PoolingConfigError(f'{modules_path}: module {module["type"]} has a "path" that is not a string')
        if kind == "Transformer":
            transformer_dir = os.path.join(model_dir, path)
        elif kind == "Pooling":
            pooling_path = os.path.join(model_dir, path, "config.json")
        elif kind == "Normalize":
            normalize = True
        else:
            raise PoolingConfigError(
                f"{modules_path}: module {module['type']} is not implemented by bertkit (it "
                "runs Transformer, Pooling and Normalize only), so its embeddings would differ "
                "from sentence-transformers'"
            )
    if pooling_path is None:
        raise PoolingConfigError(
            f"{modules_path}: has no sentence_transformers.models.Pooling module, so it does not "
            "say how to pool; pass --pooling (mean, cls, max, mean_sqrt_len)"
        )
    mode = _pooling_mode(pooling_path)
    max_seq_length = _max_seq_length(transformer_dir, model_dir)
    return Pooling(mode, normalize, max_seq_length, os.path.relpath(pooling_path, model_dir))


def write_pooling(folder: str, pooling: Pooling, hidden_size: int) -> None:
    """The sentence-transformers files that say `pooling` for a folder whose BERT is at its root (read_pooling's
    inverse): modules.json (Transformer, Pooling, Normalize when normalizing), 1_Pooling/config.json,
    sentence_bert_config.json with max_seq_length when one is set."""
    from .files import atomic_write_text

    st = "sentence_transformers.models."
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": st + "Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": st + "Pooling"},
    ]
    if pooling.normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": st + "Normalize"})
    mode = {v: k for k, v in _ST_MODES.items() if v is not None}[pooling.mode]
    settings = {
        "word_embedding_dimension": hidden_size,
        **{key: value == mode for key, value in _ST_LEGACY_KEYS.items()},
    }
    os.makedirs(os.path.join(folder, "1_Pooling"), exist_ok=True)
    atomic_write_text(os.path.join(folder, "modules.json"), json.dumps(modules, indent=2) + "\n")
    atomic_write_text(os.path.join(folder, "1_Pooling", "config.json"), json.dumps(settings, indent=2) + "\n")
    if pooling.max_seq_length:
        atomic_write_text(
            os.path.join(folder, "sentence_bert_config.json"),
            json.dumps({"max_seq_length": pooling.max_seq_length}, indent=2) + "\n",
        )


def _pooling_mode(path: str) -> str:
    if not os.path.isfile(path):
        raise PoolingConfigError(f"{path}: no such file; modules.json names a Pooling module there")
    settings = "the pooling settings (pooling_mode_mean_tokens: true, ...)"
    config = read_json(path, PoolingConfigError, should_hold=settings)
    if not isinstance(config, dict):
        raise PoolingConfigError(f"{path}: expected a JSON object of pooling settings, got a {type(config).__name__}")
    if "pooling_mode" in config:  # sentence-transformers 5: "mean" or a list of modes
        modes = config["pooling_mode"]
        modes = [modes] if isinstance(modes, str) else modes
        if not isinstance(modes, list) or not modes or not all(isinstance(m, str) for m in modes):
            raise PoolingConfigError(
                f"{path}: pooling_mode must be a mode name or a list of them, got {config['pooling_mode']!r}"
            )
    else:
        for key, value in config.items():
            if key.startswith("pooling_mode") and not isinstance(value, bool):
                raise PoolingConfigError(f"{path}: {key} must be true or false, got {value!r}")
        unknown = [k for k in config if k.startswith("pooling_mode") and k not in _ST_LEGACY_KEYS]
        if unknown:
            raise PoolingConfigError(
                f"{path}: unknown pooling setting(s) {', '.join(unknown)}; known: " + ", ".join(_ST_LEGACY_KEYS)
            )
        modes = [mode for key, mode in _ST_LEGACY_KEYS.items() if config.get(key)] or ["mean"]  # as ST defaults
    if len(modes) > 1:
        raise PoolingConfigError(
            f"{path}: pooling modes {', '.join(modes)} together (vectors concatenated) are not "
            "implemented by bertkit; pass --pooling to pick one"
        )
    mode = modes[0]
    if mode not in _ST_MODES:
        raise PoolingConfigError(
            f"{path}: unknown pooling mode {mode!r}; sentence-transformers' modes are " + ", ".join(_ST_MODES)
        )
    ours = _ST_MODES[mode]
    if ours is None:
        raise PoolingConfigError(
            f"{path}: pooling mode {mode!r} is not implemented by bertkit (it has "
            f"{', '.join(POOLING_MODES)}); pass --pooling to pick one of them"
        )
    return ours


def _max_seq_length(transformer_dir: str, model_dir: str) -> int | None:
    for folder in dict.fromkeys((transformer_dir, model_dir)):
        path = os.path.join(folder, "sentence_bert_config.json")
        if not os.path.isfile(path):
            continue
        config = read_json(path, PoolingConfigError, should_hold="the Transformer module's settings (max_seq_length)")
        if not isinstance(config, dict):
            raise PoolingConfigError(f"{path}: expected a JSON object, got a {type(config).__name__}")
        value = config.get("max_seq_length")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 2):
            raise PoolingConfigError(f"{path}: max_seq_length must be an integer >= 2 ([CLS] and [SEP]), got {value!r}")
        return value
    return None


# ----- pooling -----------------------------------------------------------------------------------
def trained_dims(model_dir: str | os.PathLike) -> tuple[int, ...]:
    """The shorter vector sizes a folder's model was trained to keep meaning at (MatryoshkaLoss's dims, which
    `bertkit finetune --task embed --matryoshka-dims` writes to config_sentence_transformers.json); () without."""
    path = os.path.join(os.fspath(model_dir), "config_sentence_transformers.json")
    if not os.path.isfile(path):
        return ()
    settings = read_json(path, PoolingConfigError, should_hold="sentence-transformers' model settings")
    dims = settings.get("matryoshka_dims", []) if isinstance(settings, dict) else []
    if not isinstance(dims, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
        raise PoolingConfigError(f"{path}: matryoshka_dims must be a list of positive integers, got {str(dims)[:60]}")
    return tuple(sorted(set(dims), reverse=True))


def pool(hidden: Tensor, attention_mask: Tensor, mode: str) -> Tensor:
    """(B, S, H) token vectors, (B, S) mask of real tokens -> (B, H), padding left out.

    mean: the average of the real tokens; mean_sqrt_len: their sum / sqrt(count); max: the
    largest value of each dimension over the real tokens; cls: the first token ([CLS]).
    """
    if mode not in POOLING_MODES:
        raise BertkitError(f"pooling mode {mode!r} is not one of {', '.join(POOLING_MODES)}")
    if hidden.dim() != 3 or attention_mask.shape != hidden.shape[:2]:
        raise BertkitError(
            f"pool takes hidden (B, S, H) and attention_mask (B, S); got {tuple(hidden.shape)} and "
            f"{tuple(attention_mask.shape)}"
        )
    if mode == "cls":
        return hidden[:, 0]
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, S, 1)
    if mode == "max":
        return hidden.masked_fill(mask == 0, float("-inf")).max(dim=1).values
    total = (hidden * mask).sum(dim=1)  # (B, H)
    count = mask.sum(dim=1).clamp(min=1e-9)  # (B, 1), as sentence-transformers clamps
    return total / count if mode == "mean" else total / count.sqrt()


def pooling_settings(folder: Pooling | None, pooling: str | None, normalize: bool | None) -> Pooling:
    """The folder's settings with the flags over them; mean, unnormalized without either."""
    if pooling is not None and pooling not in POOLING_MODES:
        raise BertkitError(f"pooling must be one of {', '.join(POOLING_MODES)}, got {pooling!r}")
    if normalize is not None and not isinstance(normalize, bool):
        raise BertkitError(f"normalize must be True, False or None, got {normalize!r}")
    flags = [f"{name}={value}" for name, value in (("pooling", pooling), ("normalize", normalize)) if value is not None]
    if folder is None:
        base = Pooling("mean", False, None, "default (mean, not normalized)")
    else:
        base = folder
    if not flags:
        return base
    source = "flags" if len(flags) == 2 or folder is None else f"{folder.source} + flags"
    return dataclasses.replace(
        base,
        mode=pooling or base.mode,
        normalize=base.normalize if normalize is None else normalize,
        source=f"{source} ({', '.join(flags)})",
    )
