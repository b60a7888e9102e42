"""Checkpoint IO: Hugging Face model directories in and out, and atomic file writes.

A model directory holds `config.json` and the weights as `model.safetensors` (preferred),
`pytorch_model.bin` (read with `torch.load(weights_only=True)`, never a full unpickle), or a
sharded form of either with its `.index.json`. Parameter names are transformers' names, so
loading is a plain `load_state_dict` after a small rename table:

    bert.<name>                  task checkpoints prefix the encoder with `bert.`
    LayerNorm.gamma / .beta      TF-era names of LayerNorm.weight / .bias
    embeddings.position_ids      a buffer older checkpoints saved; derived, so ignored

Loading never half-succeeds silently: a wrong shape or a missing tensor raises CheckpointError
with a table of names and shapes; head weights a checkpoint lacks are initialised and named in
one warning; checkpoint tensors the model has no place for are named in one warning
(`output_loading_info=True` returns both lists to the caller instead, as transformers does).
"""

from __future__ import annotations

import inspect
import json
import errno
import os
import re
import shutil
import tempfile
import warnings
from typing import Any, Callable

import torch

from .config import BertConfig
from .errors import BertkitWarning, CheckpointError, ConfigError

SAFE_WEIGHTS = "model.safetensors"
SAFE_INDEX = "model.safetensors.index.json"
TORCH_WEIGHTS = "pytorch_model.bin"
TORCH_INDEX = "pytorch_model.bin.index.json"
CONFIG = "config.json"

_RENAMES = [(re.compile(r"LayerNorm\.gamma$"), "LayerNorm.weight"),
            (re.compile(r"LayerNorm\.beta$"), "LayerNorm.bias"),
            # transformers' MLM decoder exposes the head bias twice; bertkit names it once
            (re.compile(r"^cls\.predictions\.decoder\.bias$"), "cls.predictions.bias")]
_DERIVED_BUFFERS = re.compile(r"(^|\.)embeddings\.(position_ids|token_type_ids)$")


# ----- atomic writes -----------------------------------------------------------------------------
def atomic_write(path: str, write: Callable[[str], None]) -> None:
    """Call write(tmp_path) for a temp file beside `path`, then rename it over `path`.

    A failed write leaves `path` as it was and no temp file; a full disk or a folder that cannot be
    written is a CheckpointError naming the path (and the free space), not the writer's own error.
    """
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
        os.close(fd)
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a saved model should read like any written file
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
        problem = write_problem(e, directory)
        if problem:
            raise CheckpointError(f"{path}: {problem}; nothing was written over it") from e
        raise


def write_problem(error: BaseException, directory: str) -> str | None:
    """A one-line reason for a failed write we can name (full disk, no permission), else None."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk is full ({_free_space(directory)})"
    if isinstance(error, PermissionError):
        return f"no permission to write there ({error.strerror})"
    # torch.save reports a full disk from its C++ writer: "unexpected pos", "file write failed"
    if isinstance(error, RuntimeError) and re.search(r"unexpected pos|file write failed", str(error)):
        return f"the write failed, most likely because the disk is full ({_free_space(directory)})"
    return None


def _free_space(directory: str) -> str:
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return "free space unknown"
    return f"{free / 2**20:,.0f} MiB free"


def atomic_write_text(path: str, text: str) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    atomic_write(path, write)


# ----- reading weights ---------------------------------------------------------------------------
def read_weights(directory: str) -> dict[str, torch.Tensor]:
    """All tensors of a model directory, whichever of the four HF layouts it uses."""
    for name in (SAFE_WEIGHTS, SAFE_INDEX, TORCH_WEIGHTS, TORCH_INDEX):
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            continue
        if name.endswith(".index.json"):
            return _read_sharded(path)
        return _read_file(path)
    found = ", ".join(sorted(os.listdir(directory))) or "nothing"
    raise CheckpointError(f"{directory}: no weights found; expected {SAFE_WEIGHTS} or {TORCH_WEIGHTS} "
                          f"(or a sharded .index.json), found: {found}")


def _read_file(path: str) -> dict[str, torch.Tensor]:
    try:
        if path.endswith(".safetensors"):
            from safetensors.torch import load_file

            return load_file(path)
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # corrupt, truncated, or (for .bin) not a plain tensor dict
        raise CheckpointError(f"{path}: cannot read weights ({type(e).__name__}: {e})") from e
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path}: expected a dict of tensors (a state_dict)")
    return state


def _read_sharded(index_path: str) -> dict[str, torch.Tensor]:
    try:
        with open(index_path, encoding="utf-8") as fh:
            weight_map = json.load(fh)["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{index_path}: not a valid shard index ({e})") from e
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        state.update(_read_file(os.path.join(os.path.dirname(index_path), shard)))
    return state


# ----- matching checkpoint names to the model ----------------------------------------------------
def _rename(key: str) -> str:
    for pattern, new in _RENAMES:
        key = pattern.sub(new, key)
    return key


def map_keys(state: dict[str, torch.Tensor], model_keys: set[str], prefix: str) -> dict[str, torch.Tensor]:
    """Rename checkpoint keys to the model's names; derived buffers are dropped."""
    model_has_prefix = any(k.startswith(prefix + ".") for k in model_keys)
    mapped = {}
    for key, tensor in state.items():
        if _DERIVED_BUFFERS.search(key):
            continue
        new = _rename(key)
        if not model_has_prefix and new.startswith(prefix + "."):
            new = new[len(prefix) + 1:]  # task checkpoint -> bare encoder
        elif model_has_prefix and new not in model_keys and f"{prefix}.{new}" in model_keys:
            new = f"{prefix}.{new}"  # bare-encoder checkpoint -> task model
        mapped[new] = tensor
    return mapped


def _shape(t) -> str:
    return "(" + ", ".join(str(d) for d in t) + ")"


def load_pretrained(cls, path, *, config: BertConfig | None = None, dtype: torch.dtype | str | None = None,
                    device: torch.device | str | None = None, ignore_mismatched_sizes: bool = False,
                    output_loading_info: bool = False, **kwargs: Any):
    """Build `cls` from a local HF model directory. See the module docstring for the rules.

    Keyword arguments `cls.__init__` takes (e.g. add_pooling_layer) go to the model; BertConfig
    field names (num_labels, id2label, attn_implementation, ...) override config.json.
    output_loading_info=True returns (model, info) as transformers does, info holding
    `missing_keys` (newly initialised), `unexpected_keys` (unused) and `mismatched_keys`; the caller
    then decides what to say about the first two, and they are not warned about here.
    """
    init_params = set(inspect.signature(cls.__init__).parameters) - {"self", "config"}
    model_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in init_params}
    unknown = sorted(set(kwargs) - (BertConfig.field_names() - {"extra"}))
    if unknown:
        raise ConfigError(f"{cls.__name__}.from_pretrained got unknown argument(s) {', '.join(unknown)}: "
                          f"pass BertConfig fields, {', '.join(sorted(init_params)) or 'no model arguments'}, "
                          "config, dtype, device, ignore_mismatched_sizes or output_loading_info")
    config_overrides = kwargs
    directory = os.fspath(path)
    if not os.path.isdir(directory):
        what = "not a directory" if os.path.exists(directory) else "no such directory"
        raise CheckpointError(f"{directory}: {what}; bertkit loads local model directories only (no hub "
                              "downloads): pass the folder holding config.json and the weights")
    if config is None:
        try:
            config = BertConfig.from_json(os.path.join(directory, CONFIG), **config_overrides)
        except ConfigError as e:
            raise CheckpointError(str(e)) from None
    elif config_overrides:
        config = config.replace(**config_overrides)
    state = read_weights(directory)

    model = cls(config, **model_kwargs)
    model_state = model.state_dict()
    state = map_keys(state, set(model_state), cls.base_model_prefix)

    # A tied tensor (MLM decoder = word embeddings) loads through the one it shares storage with.
    for key, source in model.tied_weights().items():
        if key in state and source in state and not torch.equal(state[key], state[source]):
            warnings.warn(f"{directory}: {key} differs from {source} in the checkpoint, but the config ties them "
                          f"(tie_word_embeddings=True): {source} is used for both; pass "
                          "tie_word_embeddings=False to keep them apart", BertkitWarning, stacklevel=3)
        if source in state:
            state.pop(key, None)
    tied = model.tied_weights()

    mismatched = [(k, tuple(model_state[k].shape), tuple(v.shape)) for k, v in state.items()
                  if k in model_state and tuple(v.shape) != tuple(model_state[k].shape)]
    missing = sorted(k for k in set(model_state) - set(state) if not (k in tied and tied[k] in state))
    unexpected = sorted(set(state) - set(model_state))

    prefix = cls.base_model_prefix + "." if any(k.startswith(cls.base_model_prefix + ".") for k in model_state) else ""
    # Parameters a checkpoint may lack: the class's head (and pooler), and the cross-attention of a
    # decoder warm-started from an encoder checkpoint that never had any.
    no_cross = not any(".crossattention." in k for k in state)
    fatal_missing = [k for k in missing if not (k.startswith(tuple(model._missing_ok))
                                                or (no_cross and ".crossattention." in k))]
    own = tuple(prefix + p for p in ("embeddings.", "encoder."))
    fatal_unexpected = [k for k in unexpected if k.startswith(own)]

    problems = []
    if mismatched and not ignore_mismatched_sizes:
        rows = "\n".join(f"    {k}: model expects {_shape(m)}, checkpoint has {_shape(c)}" for k, m, c in mismatched)
        hint = ("pass ignore_mismatched_sizes=True to re-initialise them (e.g. a new num_labels)"
                if all(not k.startswith(own) for k, _, _ in mismatched) else "does config.json match the weights?")
        problems.append(f"tensors with the wrong shape ({hint}):\n{rows}")
    if fatal_missing:
        rows = "\n".join(f"    {k} {_shape(model_state[k].shape)}" for k in fatal_missing)
        problems.append(f"tensors the model needs but the checkpoint lacks:\n{rows}")
    if fatal_unexpected:
        rows = "\n".join(f"    {k} {_shape(state[k].shape)}" for k in fatal_unexpected)
        problems.append(f"encoder tensors the model has no place for (more layers than config.json says?):\n{rows}")
    if problems:
        raise CheckpointError(f"{directory}: cannot load into {cls.__name__}:\n  " + "\n  ".join(problems))

    if mismatched:  # ignore_mismatched_sizes: keep the fresh initialisation for these
        for k, _, _ in mismatched:
            del state[k]
        warnings.warn(f"{directory}: re-initialised tensors whose shape differs from the checkpoint: "
                      + ", ".join(f"{k} {_shape(c)} -> {_shape(m)}" for k, m, c in mismatched),
                      BertkitWarning, stacklevel=3)
    if not output_loading_info:
        warn_loading(directory, cls.__name__, missing, unexpected, stacklevel=3)

    model_dtype = next(model.parameters()).dtype
    model.load_state_dict({k: v.to(model_dtype) for k, v in state.items() if k in model_state}, strict=False)
    model.tie_weights()
    if dtype is not None:
        model.to(_resolve_dtype(dtype, state))
    if device is not None:
        model.to(device)
    if output_loading_info:
        return model.eval(), {"missing_keys": missing, "unexpected_keys": unexpected,
                              "mismatched_keys": [(k, c, m) for k, m, c in mismatched]}
    return model.eval()


def warn_loading(directory: str, class_name: str, missing: list[str], unexpected: list[str], *,
                 stacklevel: int = 2) -> None:
    """The loader's warnings: tensors initialised anew (train before use), tensors left unused."""
    if missing:
        warnings.warn(f"{directory}: newly initialised (not in the checkpoint), train before use: "
                      + ", ".join(missing), BertkitWarning, stacklevel=stacklevel + 1)
    if unexpected:
        warnings.warn(f"{directory}: checkpoint tensors not used by {class_name}: " + ", ".join(unexpected),
                      BertkitWarning, stacklevel=stacklevel + 1)


def _resolve_dtype(dtype, state) -> torch.dtype:
    if dtype == "auto":
        floats = [t.dtype for t in state.values() if t.is_floating_point()]
        return floats[0] if floats else torch.float32
    if isinstance(dtype, str):
        try:
            dtype = getattr(torch, dtype)
        except AttributeError:
            raise CheckpointError(f"unknown dtype {dtype!r}; use float32, bfloat16, float16 or 'auto'") from None
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise CheckpointError(f"dtype must be a floating torch dtype or 'auto', got {dtype!r}")
    return dtype


# ----- saving ------------------------------------------------------------------------------------
def save_pretrained(model, path) -> None:
    """config.json + model.safetensors (metadata format=pt, as transformers requires)."""
    from safetensors.torch import save_file

    directory = os.fspath(path)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise CheckpointError(f"{directory}: exists and is not a directory")
    os.makedirs(directory, exist_ok=True)
    config = model.config
    config.architectures = [type(model).__name__]
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    config.extra["torch_dtype"] = dtype  # what transformers' dtype="auto" reads (5.x also reads "dtype")
    if "dtype" in config.extra:
        config.extra["dtype"] = dtype

    state, seen = {}, {}
    for key, tensor in model.state_dict().items():
        ptr = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if ptr in seen:  # a tied weight (e.g. MLM decoder = word embeddings) is stored once
            continue
        seen[ptr] = key
        state[key] = tensor.detach().to("cpu").contiguous().clone()
    atomic_write(os.path.join(directory, SAFE_WEIGHTS), lambda tmp: save_file(state, tmp, metadata={"format": "pt"}))
    config.to_json(os.path.join(directory, CONFIG))


# ----- training state (for --resume) -------------------------------------------------------------
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
        raise CheckpointError(f"{path}: cannot read the training state ({type(e).__name__}: {e}); delete it "
                              "to start over, or point --out at another run") from e
