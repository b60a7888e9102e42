"""Checkpoint IO: Hugging Face model directories in and out (the training state for --resume: train/state.py).

A model directory holds `config.json` and the weights as `model.safetensors` (preferred),
`pytorch_model.bin` (read with `torch.load(weights_only=True)`, never a full unpickle), or a
sharded form of either with its `.index.json`. Parameter names are transformers' names, so
loading is a plain `load_state_dict` after a small rename table:

    bert.<name>                  task checkpoints prefix the encoder with `bert.` (ELECTRA's: `electra.`)
    LayerNorm.gamma / .beta      TF-era names of LayerNorm.weight / .bias
    embeddings.position_ids      a buffer older checkpoints saved; derived, so ignored

Loading never half-succeeds silently: a wrong shape or a missing tensor raises CheckpointError
with a table of names and shapes; head weights a checkpoint lacks are initialised and named in
one warning; checkpoint tensors the model has no place for are named in one warning where they are news (LoadReport
says when they are not). Loading is
    read_weights -> check_sizes -> map_keys -> drop_tied_copies -> match_weights (a LoadReport) -> raise or warn
    -> load -> finite.check_weights (a NaN / Infinity weight: one warning naming the tensor)
check_sizes runs before a module is built: the config's sizes against the shapes of the tensors read, one line
naming the field, its value and the tensor; then BertConfig.validate()'s bound on memory, for what no weights file
says (a config.json whose hidden_size is 1,000,000 would otherwise ask for terabytes, layer by layer).
A directory's config.json model_type picks the class (model_class_for): a BERT class asked to load an "electra"
directory builds its ELECTRA counterpart (bertkit.electra.ELECTRA_CLASSES), so
`BertForSequenceClassification.from_pretrained(d)` loads an ELECTRA discriminator as an
ElectraForSequenceClassification, its unused pretraining head listed in the report as BERT's cls.* are.
And `output_loading_info=True` returns the LoadReport to the caller instead of warning, as transformers
returns its info dict (the report reads as that dict too); such callers (every command's loader) run
check_weights themselves and refuse the model, so they are not warned about NaN here either.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple, Protocol, TypeVar, cast, overload

import torch

from .config import BertConfig, read_config_dict
from .errors import BertkitWarning, CheckpointError, ConfigError, NonFiniteError
from .files import atomic_write
from .finite import check_weights

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

    from .config import ModelType

SAFE_WEIGHTS = "model.safetensors"
SAFE_INDEX = "model.safetensors.index.json"
TORCH_WEIGHTS = "pytorch_model.bin"
TORCH_INDEX = "pytorch_model.bin.index.json"
WEIGHT_NAMES = (SAFE_WEIGHTS, SAFE_INDEX, TORCH_WEIGHTS, TORCH_INDEX)  # the layouts, in the order they are looked for
CONFIG = "config.json"

_RENAMES = [
    (re.compile(r"LayerNorm\.gamma$"), "LayerNorm.weight"),
    (re.compile(r"LayerNorm\.beta$"), "LayerNorm.bias"),
    # transformers' MLM decoder exposes the head bias twice; bertkit names it once
    (re.compile(r"^cls\.predictions\.decoder\.bias$"), "cls.predictions.bias"),
]
_DERIVED_BUFFERS = re.compile(r"(^|\.)embeddings\.(position_ids|token_type_ids)$")


class PretrainedModel(Protocol):
    """What checkpoint IO uses of a model: pretrained.PreTrainedModel and its subclasses are the ones there are.
    pretrained.py imports this module, so it is named here by its shape (an import would close a cycle)."""

    model_type: str  # read from the class too (model_class_for), so not a property
    base_model_prefix: str
    config_class: ClassVar[type[Any]]  # BertConfig, ModernBertConfig: what reads the family's config.json

    @property
    def config(self) -> Any: ...  # an instance of config_class
    @property
    def _missing_ok(self) -> tuple[str, ...]: ...
    def __init__(self, config: Any, **kwargs: Any) -> None: ...
    def tied_weights(self) -> dict[str, str]: ...
    def tie_weights(self) -> None: ...

    # nn.Module's, as load_pretrained and save_pretrained call them
    def state_dict(self) -> dict[str, Any]: ...
    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]: ...
    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> object: ...
    @overload
    def to(self, device: torch.device | str, /) -> Self: ...
    @overload
    def to(self, dtype: torch.dtype, /) -> Self: ...
    def eval(self) -> Self: ...


ModelT = TypeVar("ModelT", bound=PretrainedModel)


# ----- reading weights ---------------------------------------------------------------------------
def weights_file(directory: str) -> str:
    """The name of the weights file a model directory holds, whichever of the four HF layouts it uses; "" if none."""
    return next((n for n in WEIGHT_NAMES if os.path.exists(os.path.join(directory, n))), "")


def read_weights(directory: str) -> dict[str, torch.Tensor]:
    """All tensors of a model directory, whichever of the four HF layouts it uses."""
    name = weights_file(directory)
    if not name:
        found = ", ".join(sorted(os.listdir(directory))) or "nothing"
        raise CheckpointError(
            f"{directory}: no weights found; expected {SAFE_WEIGHTS} or {TORCH_WEIGHTS} "
            f"(or a sharded .index.json), found: {found}"
        )
    path = os.path.join(directory, name)
    return _read_sharded(path) if name.endswith(".index.json") else _read_file(path)


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
    state: dict[str, torch.Tensor] = {}
    for shard in _shards(index_path):
        state.update(_read_file(shard))
    return state


def _shards(index_path: str) -> list[str]:
    """The paths of the shard files a sharded checkpoint's .index.json names."""
    try:
        with open(index_path, encoding="utf-8") as fh:
            weight_map = json.load(fh)["weight_map"]
        return [os.path.join(os.path.dirname(index_path), shard) for shard in sorted(set(weight_map.values()))]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{index_path}: not a valid shard index ({e})") from e


# ----- the config's sizes against the weights, before anything is built --------------------------
# The config field each dimension of a tensor shows, by the tensor's name in the encoder; "E" is the embedding width:
# embedding_size where the config sets it (ELECTRA), else hidden_size
_SIZED_TENSORS = {
    "embeddings.word_embeddings.weight": ("vocab_size", "E"),
    "embeddings.position_embeddings.weight": ("max_position_embeddings", "E"),
    "embeddings.token_type_embeddings.weight": ("type_vocab_size", "E"),
    "embeddings_project.weight": ("hidden_size", "E"),
    "encoder.layer.0.intermediate.dense.weight": ("intermediate_size", "hidden_size"),
}
_LAYER = re.compile(r"(^|\.)encoder\.layer\.(\d+)\.")


def check_sizes(
    config: BertConfig,
    directory: str,
    state: dict[str, torch.Tensor] | None,
    source: str = CONFIG,
    *,
    tensors: bool = True,
) -> None:
    """Every loader's check before it builds a module: the sizes of `config` (read from `source`) must be those of
    the directory's weights (`state`, read_weights'; None where there are none), else a CheckpointError naming each
    field, its value and the tensor that says otherwise (tensors=False: the number of layers only, for
    ignore_mismatched_sizes, which re-initialises the rest); then BertConfig.validate()'s bound on memory, for what
    no weights file says."""
    shapes = {_rename(k): tuple(v.shape) for k, v in (state or {}).items()}
    problems = _size_mismatches(config, shapes, weights_file(directory), source, tensors=tensors)
    if problems:
        raise CheckpointError(
            f"{directory}: {'; '.join(problems)}; {source} does not describe these weights: correct it, or pass "
            "the folder the weights belong to"
        )
    try:
        config.validate()
    except ConfigError as e:
        raise CheckpointError(f"{os.path.join(directory, CONFIG) if source == CONFIG else directory}: {e}") from None


def _size_mismatches(
    config: BertConfig, shapes: dict[str, tuple[int, ...]], weights: str, source: str, *, tensors: bool
) -> list[str]:
    """One phrase per config field whose value the weights' shapes contradict (the first tensor that does)."""
    said: dict[str, str] = {}
    for suffix, fields in _SIZED_TENSORS.items() if tensors else ():
        key = next((k for k in shapes if k == suffix or k.endswith("." + suffix)), "")
        for field_name, size in zip(fields, shapes.get(key, ())):
            if field_name == "E":
                field_name = "embedding_size" if config.embedding_size is not None else "hidden_size"
            value = getattr(config, field_name)
            if value != size and field_name not in said:
                said[field_name] = (
                    f"{field_name} is {value} in {source}, but {weights} has {key} {_shape(shapes[key])}: "
                    f"{field_name} {size}"
                )
    layers = {k: int(m.group(2)) for k in shapes if (m := _LAYER.search(k))}
    last = max(layers.values(), default=-1)
    if layers and config.num_hidden_layers != last + 1:
        said["num_hidden_layers"] = (
            f"num_hidden_layers is {config.num_hidden_layers} in {source}, but {weights} has {last + 1} layers "
            f"(the last holds {min(k for k, n in layers.items() if n == last)})"
        )
    return list(said.values())


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
            new = new[len(prefix) + 1 :]  # task checkpoint -> bare encoder
        elif model_has_prefix and new not in model_keys and f"{prefix}.{new}" in model_keys:
            new = f"{prefix}.{new}"  # bare-encoder checkpoint -> task model
        mapped[new] = tensor
    return mapped


def _shape(t: Iterable[int]) -> str:
    return "(" + ", ".join(str(d) for d in t) + ")"


# ----- what a load found -------------------------------------------------------------------------
class Mismatch(NamedTuple):
    """A tensor the checkpoint and the model both have, in different shapes."""

    name: str
    model: tuple[int, ...]
    checkpoint: tuple[int, ...]


_INFO_KEYS = ("missing_keys", "unexpected_keys", "mismatched_keys")


@dataclass(eq=False)
class LoadReport(Mapping[str, Any]):
    """What matching a checkpoint's tensors to a model found, before anything is loaded.

    missing     model tensors the checkpoint lacks: they keep their fresh initialisation
    unexpected  checkpoint tensors the model has no place for: left unused
    mismatched  tensors both have, in different shapes
    Some of them stop the load (`fatal`, `raise_if_fatal()`): a missing tensor the class does not
    list in `_missing_ok` (its head, its pooler), an unused encoder tensor, and a wrong shape unless
    ignore_mismatched_sizes=True. The rest are news for the caller: `warn()` says it. As transformers does, unused
    tensors are said only when the checkpoint was saved from this very class (config.json's architectures name it,
    or name nothing): a pretraining run's MLM head going unused in a classifier is what loading another class means
    (`from_another_class`). Nor is a pooler, in a model built without one (`without_pooler`: BertForMaskedLM from a
    pretraining run, which saves a trained one beside the MLM head). Both stay listed in `unexpected`.

    It also reads as transformers' loading-info dict, so code written for
    `from_pretrained(..., output_loading_info=True)` works unchanged: report["missing_keys"],
    report["unexpected_keys"], report["mismatched_keys"] ((name, checkpoint shape, model shape) each).
    """

    directory: str
    class_name: str
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[Mismatch] = field(default_factory=list)
    fatal_missing: dict[str, tuple[int, ...]] = field(default_factory=dict)  # name -> the model's shape
    fatal_unexpected: dict[str, tuple[int, ...]] = field(default_factory=dict)  # name -> the checkpoint's shape
    mismatched_fatal: bool = True  # False under ignore_mismatched_sizes: those are re-initialised instead
    encoder_prefix: str = ""  # "bert." in a task model; "" in BertModel, which is all encoder
    from_another_class: bool = False  # saved as another class (architectures): unused tensors are expected
    without_pooler: bool = False  # the model has no pooler: a checkpoint's is expected to go unused

    # ----- what a caller reads -----------------------------------------------------------------
    @property
    def fatal(self) -> bool:
        return bool(self.fatal_missing or self.fatal_unexpected or (self.mismatched and self.mismatched_fatal))

    @property
    def head_missing(self) -> list[str]:
        """Missing tensors of the task head (outside the encoder): a task model that was never trained."""
        return [k for k in self.missing if not k.startswith(self.encoder_prefix)]

    def missing_under(self, *prefixes: str) -> list[str]:
        """Missing tensors whose name starts with one of `prefixes`, matched with and without the
        encoder prefix: "pooler." finds the pooler of a BertModel and of a task model alike."""
        return self._under(self.missing, prefixes)

    def unexpected_under(self, *prefixes: str) -> list[str]:
        """Unused checkpoint tensors whose name starts with one of `prefixes` (as in missing_under)."""
        return self._under(self.unexpected, prefixes)

    def _under(self, names: list[str], prefixes: tuple[str, ...]) -> list[str]:
        return [k for k in names if k.startswith(prefixes) or k.removeprefix(self.encoder_prefix).startswith(prefixes)]

    # ----- transformers' loading-info dict -----------------------------------------------------
    def __getitem__(self, key: str) -> list[str] | list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
        if key == "missing_keys":
            return self.missing
        if key == "unexpected_keys":
            return self.unexpected
        if key == "mismatched_keys":
            return [(m.name, m.checkpoint, m.model) for m in self.mismatched]
        raise KeyError(f"{key!r}: a loading report holds {', '.join(_INFO_KEYS)}")

    def __iter__(self) -> Iterator[str]:
        return iter(_INFO_KEYS)

    def __len__(self) -> int:
        return len(_INFO_KEYS)

    # ----- raising and warning -----------------------------------------------------------------
    def raise_if_fatal(self) -> None:
        """CheckpointError with a table of every tensor that stops the load; nothing when none does."""
        problems = []
        if self.mismatched and self.mismatched_fatal:
            rows = "\n".join(
                f"    {k}: model expects {_shape(m)}, checkpoint has {_shape(c)}" for k, m, c in self.mismatched
            )
            hint = (
                "pass ignore_mismatched_sizes=True to re-initialise them (e.g. a new num_labels)"
                if not any(self._in_encoder_body(k) for k, _, _ in self.mismatched)
                else "does config.json match the weights?"
            )
            problems.append(f"tensors with the wrong shape ({hint}):\n{rows}")
        if self.fatal_missing:
            rows = "\n".join(f"    {k} {_shape(shape)}" for k, shape in self.fatal_missing.items())
            problems.append(f"tensors the model needs but the checkpoint lacks:\n{rows}")
        if self.fatal_unexpected:
            rows = "\n".join(f"    {k} {_shape(shape)}" for k, shape in self.fatal_unexpected.items())
            problems.append(f"encoder tensors the model has no place for (more layers than config.json says?):\n{rows}")
        if problems:
            raise CheckpointError(f"{self.directory}: cannot load into {self.class_name}:\n  " + "\n  ".join(problems))

    def _in_encoder_body(self, name: str) -> bool:
        return name.startswith(
            tuple(self.encoder_prefix + part for part in ("embeddings.", "embeddings_project.", "encoder."))
        )

    def warn(self, *, stacklevel: int = 2) -> None:
        """The loader's warnings: tensors initialised anew (train before use), tensors left unused.

        stacklevel as in warnings.warn: 2 (the default) names the line that called warn(), 3 its caller."""
        self.warn_missing(stacklevel=stacklevel + 1)
        self.warn_unexpected(stacklevel=stacklevel + 1)

    def warn_missing(self, *, stacklevel: int = 2) -> None:
        if self.missing:
            warnings.warn(
                f"{self.directory}: newly initialised (not in the checkpoint), train before use: "
                + ", ".join(self.missing),
                BertkitWarning,
                stacklevel=stacklevel,
            )

    def warn_unexpected(self, *, stacklevel: int = 2) -> None:
        """The unused tensors that are news (see the class docstring for those that are not)."""
        expected = set(self.unexpected_under("pooler.")) if self.without_pooler else set()
        news = [] if self.from_another_class else [k for k in self.unexpected if k not in expected]
        if news:
            warnings.warn(
                f"{self.directory}: checkpoint tensors not used by {self.class_name}: " + ", ".join(news),
                BertkitWarning,
                stacklevel=stacklevel,
            )

    def warn_reinitialised(self, *, stacklevel: int = 2) -> None:
        """Under ignore_mismatched_sizes: which tensors keep a fresh initialisation, and their shapes."""
        if self.mismatched and not self.mismatched_fatal:
            warnings.warn(
                f"{self.directory}: re-initialised tensors whose shape differs from the checkpoint: "
                + ", ".join(f"{k} {_shape(c)} -> {_shape(m)}" for k, m, c in self.mismatched),
                BertkitWarning,
                stacklevel=stacklevel,
            )


# ----- loading -----------------------------------------------------------------------------------
def match_weights(
    model: PretrainedModel, state: dict[str, torch.Tensor], directory: str, *, ignore_mismatched_sizes: bool = False
) -> LoadReport:
    """Compare checkpoint tensors (named as the model names them: see map_keys) with the model's.

    Parameters a checkpoint may lack: the class's `_missing_ok` (head, pooler), and the
    cross-attention of a decoder warm-started from an encoder checkpoint that never had any.
    `state` must no longer hold the copies of tied weights (see drop_tied_copies).
    """
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    tied = model.tied_weights()
    prefix = model.base_model_prefix + "."
    prefix = prefix if any(k.startswith(prefix) for k in shapes) else ""
    no_cross = not any(".crossattention." in k for k in state)
    saved_as = model.config.architectures or ()  # the classes config.json says the checkpoint was saved from

    def may_be_missing(key: str) -> bool:
        return key.startswith(tuple(model._missing_ok)) or (no_cross and ".crossattention." in key)

    missing = sorted(k for k in set(shapes) - set(state) if not (k in tied and tied[k] in state))
    unexpected = sorted(set(state) - set(shapes))
    report = LoadReport(
        directory,
        type(model).__name__,
        missing,
        unexpected,
        mismatched=[
            Mismatch(k, shapes[k], tuple(v.shape))
            for k, v in state.items()
            if k in shapes and tuple(v.shape) != shapes[k]
        ],
        fatal_missing={k: shapes[k] for k in missing if not may_be_missing(k)},
        mismatched_fatal=not ignore_mismatched_sizes,
        encoder_prefix=prefix,
        from_another_class=bool(saved_as) and type(model).__name__ not in saved_as,
        without_pooler=not any(k.removeprefix(prefix).startswith("pooler.") for k in shapes),
    )
    report.fatal_unexpected = {k: tuple(state[k].shape) for k in unexpected if report._in_encoder_body(k)}
    return report


def drop_tied_copies(
    state: dict[str, torch.Tensor], tied: dict[str, str], directory: str, *, stacklevel: int = 2
) -> None:
    """A tied tensor (MLM decoder = word embeddings) loads through the one it shares storage with:
    drop its own copy from `state`, with a warning when that copy held other numbers."""
    for key, source in tied.items():
        if key in state and source in state and not torch.equal(state[key], state[source]):
            warnings.warn(
                f"{directory}: {key} differs from {source} in the checkpoint, but the config ties them "
                f"(tie_word_embeddings=True): {source} is used for both; pass "
                "tie_word_embeddings=False to keep them apart",
                BertkitWarning,
                stacklevel=stacklevel,
            )
        if source in state:
            state.pop(key, None)


_USER = 4  # a warning's stacklevel, in a function load_pretrained calls, that names the from_pretrained call


@overload
def load_pretrained(
    cls: type[ModelT],
    path: str | os.PathLike[str],
    *,
    config: BertConfig | None = None,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
    ignore_mismatched_sizes: bool = False,
    output_loading_info: Literal[True],
    **kwargs: Any,
) -> tuple[ModelT, LoadReport]: ...


@overload
def load_pretrained(
    cls: type[ModelT],
    path: str | os.PathLike[str],
    *,
    config: BertConfig | None = None,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
    ignore_mismatched_sizes: bool = False,
    output_loading_info: Literal[False] = False,
    **kwargs: Any,
) -> ModelT: ...


@overload
def load_pretrained(
    cls: type[ModelT],
    path: str | os.PathLike[str],
    *,
    config: BertConfig | None = None,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
    ignore_mismatched_sizes: bool = False,
    output_loading_info: bool = False,
    **kwargs: Any,
) -> ModelT | tuple[ModelT, LoadReport]: ...


def load_pretrained(
    cls: type[ModelT],
    path: str | os.PathLike[str],
    *,
    config: BertConfig | None = None,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
    ignore_mismatched_sizes: bool = False,
    output_loading_info: bool = False,
    **kwargs: Any,
) -> ModelT | tuple[ModelT, LoadReport]:
    """Build `cls` from a local HF model directory. See the module docstring for the rules.

    Keyword arguments `cls.__init__` takes (e.g. add_pooling_layer) go to the model; BertConfig
    field names (num_labels, id2label, attn_implementation, ...) override config.json.
    output_loading_info=True returns (model, LoadReport) as transformers returns (model, info): the
    report reads as transformers' dict (`missing_keys`, `unexpected_keys`, `mismatched_keys`); the
    caller then decides what to say about the missing and unused tensors, and they are not warned
    about here.
    """
    model_kwargs, config_overrides = _split_kwargs(cls, kwargs)
    directory = _model_directory(path)
    cls = model_class_for(cls, config.model_type if config is not None else _model_type_of(directory), directory)
    config, source = _read_config(cls.config_class, directory, config, config_overrides)
    state = read_weights(directory) if weights_file(directory) else None
    check_sizes(config, directory, state, source, tensors=not ignore_mismatched_sizes)  # before a module is built
    if state is None:
        state = read_weights(directory)  # none there: its error says what was looked for

    model = cls(config, **model_kwargs)
    state = map_keys(state, set(model.state_dict()), cls.base_model_prefix)
    drop_tied_copies(state, model.tied_weights(), directory, stacklevel=_USER)
    report = match_weights(model, state, directory, ignore_mismatched_sizes=ignore_mismatched_sizes)
    report.raise_if_fatal()
    report.warn_reinitialised(stacklevel=_USER)
    if not output_loading_info:
        report.warn(stacklevel=_USER)

    fresh = set(report.unexpected) | {m.name for m in report.mismatched}  # mismatched: keep the fresh init
    model_dtype = next(model.parameters()).dtype
    model.load_state_dict({k: v.to(model_dtype) for k, v in state.items() if k not in fresh}, strict=False)
    model.tie_weights()
    if not output_loading_info:  # the commands ask for the report and refuse such weights (check_weights) instead
        _warn_not_finite(model, directory)
    if dtype is not None:
        model.to(_resolve_dtype(dtype, state))
    if device is not None:
        model.to(device)
    return (model.eval(), report) if output_loading_info else model.eval()


# The module that defines a model type's classes and its table {BERT class: that type's counterpart}. Found by name
# when a directory of that type is loaded: the module builds on model.py, which imports this one, so a static import
# here would close a cycle (transformers' Auto classes find a model type's module by name the same way).
MODEL_TYPE_CLASSES = {
    "electra": ("bertkit.electra", "ELECTRA_CLASSES"),
    "modernbert": ("bertkit.modernbert", "MODERNBERT_CLASSES"),
}


def model_class_for(cls: type[ModelT], model_type: str, directory: str = "the model") -> type[ModelT]:
    """The class that loads a directory whose config.json says `model_type`: `cls` when it builds that type; a BERT
    class's counterpart of that type (BertForSequenceClassification -> ElectraForSequenceClassification for
    "electra"); otherwise a CheckpointError naming the class to use. A counterpart subclasses its BERT class."""
    if model_type == cls.model_type:
        return cls
    kind = model_type if model_type != "bert" else cls.model_type  # the type other than BERT's
    if kind not in MODEL_TYPE_CLASSES:
        known = ", ".join(repr(t) for t in ("bert", *MODEL_TYPE_CLASSES))
        raise CheckpointError(f"{directory}: config.json's model_type is {model_type!r}; bertkit reads {known} folders")
    module, table = MODEL_TYPE_CLASSES[kind]
    found = importlib.import_module(module)
    pairs = getattr(found, table)  # {BERT class: its counterpart of type `kind`}
    if model_type == kind and cls in pairs:
        return pairs[cls]
    if model_type == "bert":
        bert = {v: k for k, v in pairs.items()}.get(cls)
        hint = f"load it with {bert.__name__ if bert is not None else 'a Bert* class'}"
    else:
        classes = [name for name in found.__all__ if getattr(getattr(found, name), "model_type", None) == kind]
        hint = f"load it with one of {', '.join(classes)}"
    raise CheckpointError(
        f"{directory}: config.json's model_type is {model_type!r}, but {cls.__name__} builds "
        f"{cls.model_type!r} models; {hint}"
    )


def _warn_not_finite(model: PretrainedModel, directory: str) -> None:
    """The Python API returns a model with NaN / Infinity weights (it may be loaded to be inspected), with one
    warning naming the first such tensor: the refusal every command gives, by the same check (finite.py)."""
    try:
        check_weights(cast(torch.nn.Module, model), directory)  # every PretrainedModel is an nn.Module
    except NonFiniteError as e:
        warnings.warn(str(e), BertkitWarning, stacklevel=_USER)


def _split_kwargs(cls: type[PretrainedModel], kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """from_pretrained's extra keywords -> (cls.__init__ arguments, BertConfig overrides)."""
    init_params = set(inspect.signature(cls.__init__).parameters) - {"self", "config"}
    model_kwargs = {k: v for k, v in kwargs.items() if k in init_params}
    config_overrides = {k: v for k, v in kwargs.items() if k not in init_params}
    config_class = cls.config_class
    unknown = sorted(set(config_overrides) - (config_class.field_names() - {"extra"}))
    if unknown:
        raise ConfigError(
            f"{cls.__name__}.from_pretrained got unknown argument(s) {', '.join(unknown)}: "
            f"pass {config_class.__name__} fields, {', '.join(sorted(init_params)) or 'no model arguments'}, "
            "config, dtype, device, ignore_mismatched_sizes or output_loading_info"
        )
    return model_kwargs, config_overrides


def _model_directory(path: str | os.PathLike[str]) -> str:
    directory = os.fspath(path)
    if not os.path.isdir(directory):
        what = "not a directory" if os.path.exists(directory) else "no such directory"
        raise CheckpointError(
            f"{directory}: {what}; bertkit loads local model directories only (no hub "
            "downloads): pass the folder holding config.json and the weights"
        )
    return directory


def read_config(path: str | os.PathLike[str], **overrides: Any) -> Any:
    """A config.json (a file, or a folder holding one) as its family's config: a ModernBertConfig where it says
    model_type "modernbert", else a BertConfig (BERT, ELECTRA); ConfigError naming the file otherwise."""
    _, data = read_config_dict(path)
    if data.get("model_type") == "modernbert":
        return importlib.import_module("bertkit.modernbert").ModernBertConfig.from_json(path, **overrides)
    return BertConfig.from_json(path, **overrides)


def _model_type_of(directory: str) -> str:
    """config.json's model_type ("bert" where it names none, as BertConfig reads it): which family loads it."""
    try:
        _, data = read_config_dict(os.path.join(directory, CONFIG))
    except ConfigError as e:
        raise CheckpointError(str(e)) from None
    return str(data.get("model_type", "bert"))


def _read_config(
    config_class: type[Any], directory: str, config: Any | None, overrides: dict[str, Any]
) -> tuple[Any, str]:
    """config.json as `config_class` (BertConfig, ModernBertConfig) with `overrides`, or the given config object
    with them, validated but for the bound on memory (check_sizes applies it once the sizes are checked against the
    weights); and where it comes from, in words."""
    if config is not None:
        return (config.replace(**overrides) if overrides else config.validate(size_bound=False)), "the config given"
    try:
        config = config_class.from_json(os.path.join(directory, CONFIG), size_bound=False, **overrides)
    except ConfigError as e:
        raise CheckpointError(str(e)) from None
    return config, f"{CONFIG} with the arguments given" if overrides else CONFIG


def _resolve_dtype(dtype: torch.dtype | str, state: dict[str, torch.Tensor]) -> torch.dtype:
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
def save_pretrained(model: PretrainedModel, path: str | os.PathLike[str]) -> None:
    """config.json + model.safetensors (metadata format=pt, as transformers requires)."""
    from safetensors.torch import save_file

    directory = os.fspath(path)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise CheckpointError(f"{directory}: exists and is not a directory")
    os.makedirs(directory, exist_ok=True)
    config = model.config
    config.architectures = [type(model).__name__]
    # what transformers' AutoConfig reads ("bert", "electra"); a model class's model_type is one of config.MODEL_TYPES
    config.model_type = cast("ModelType", model.model_type)
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
