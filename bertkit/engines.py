"""What runs a model folder (--engine): "auto", the default, bertkit's model and its exported graph (bertkit
export) in ONNX Runtime, each batch on the one faster for its shape; "torch", bertkit's model alone; "onnx", the
graph alone. Tokenizing, windows, pooling, batching and the answers stay bertkit's whichever runs, and the engines'
answers equal the torch engine's to 1e-4.

    load_task_model(dir, task, engine=...)  a fine-tuned folder for evaluate / predict / serve (inference.TaskModel)
    load_mlm(dir, engine=...)               a pretrained MLM for fill-mask
    (embed's Encoder.from_pretrained(dir, engine=...) is the third)
    onnx_folder(dir, kind)                  the export the onnx engine runs: dir itself when it holds model.onnx,
                                            else one made on first use in the cache (BERTKIT_CACHE, default
                                            ~/.cache/bertkit), keyed by the content of the files that make the
                                            graph (content_key: weights, config, tokenizer, pooling): new weights,
                                            new export, whatever their size and times; one line on stderr says
                                            when a graph is built. The export loads the folder as the torch engine
                                            does, with its refusals (a head that would be random, a --task that is
                                            not the folder's head); it is written atomically (export.py), so
                                            replicas that start together each run the one that lands first.
                                            A cache that cannot be written (read-only, full, a path through a
                                            file) is a CacheError naming the folder and BERTKIT_CACHE.
    load_graph(dir, kind)                   OnnxModel(onnx_folder(dir, kind))
    auto_model(torch_model, dir, kind)      AutoModel(torch_model, load_graph(dir, kind)); torch_model alone, with
                                            one warning, where the cache cannot be written
    OnnxModel(folder)                       a graph in a torch model's place: called with input_ids, attention_mask,
                                            token_type_ids tensors, it returns its outputs by name (logits,
                                            last_hidden_state, ...), so inference.py's forward passes run it;
                                            .pooled(rows, pad_id): an encoder graph's own pooled vectors
    AutoModel(torch_model, graph)           both in one model's place; each call runs on the engine
                                            prefers_onnx(rows, length, tokens) names for the batch's shape
    choose(engine, quantize, device)        (the engine that runs, why): "auto" is "torch" where the onnx engine
                                            cannot give the same numbers (--quantize, a GPU) or is not installed
                                            (with one warning); announce(command, ...) says it in a command's
                                            first line; resolve(...) is the engine alone
ONNX Runtime runs the export's fused graph (model_optimized.onnx: onnxruntime.transformers' attention, LayerNorm
and GELU fusions, checked at export) with every graph optimisation it has, on as many threads as torch uses; the
onnx engine runs float32 on the CPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import warnings
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

import numpy as np
import torch

from .checkpoint import read_config
from .devices import CPU, NAMES, Placement, placement
from .errors import BertkitError, BertkitWarning
from .export import (
    GRAPH_FORM,
    ONNX_FILE,
    OPSET,
    OPTIMIZED_FILE,
    SENTENCE_TRANSFORMERS_FILES,
    ExportWriteError,
    check_kind,
    export,
    failed_write,
)
from .files import atomic_write_text, digest, file_stamp, folder_files, read_json
from .finite import check_outputs
from .tasks import TASKS

if TYPE_CHECKING:
    from torch import nn

    from .inference import TaskModel
    from .model import BertModel, BertPreTrainedModel, InferenceModel

Engine = Literal["torch", "onnx", "auto"]  # the --engine flag's type (options.py reads the choices from it)
ENGINES = get_args(Engine)
DEFAULT_ENGINE: Engine = "auto"  # the fastest that gives the torch engine's numbers (to 1e-4): every loader's default
ENGINE_HELP = (
    "auto (the default): bertkit's model and its exported graph (bertkit export, made once on first use) in "
    "ONNX Runtime, each batch on the faster for its shape (ONNX Runtime for few or equal-length texts, torch's "
    "padding-free path for ragged batches); torch: bertkit's model alone; onnx: the graph alone"
)


def require_onnxruntime(
    quantize: str | None = None, device: torch.device | str | None = None, dtype: torch.dtype | None = None
) -> ModuleType:
    """The onnxruntime module; an error naming the package that installs it, or the torch engine's flags given:
    int8 and half precision are the torch engine's; a GPU needs onnxruntime's CUDA provider (onnxruntime-gpu)."""
    if quantize is not None:
        raise BertkitError(
            "--engine onnx runs the float32 graph: --quantize is the torch engine's (--engine torch). ONNX Runtime's "
            "dynamic int8 keeps too little of the answers (cosine 0.80 to float32 at worst on Chinese reviews, "
            "bench/results/cpu_anchors.md), so int8 is the torch engine's (cosine 0.993)"
        )
    if dtype is not None and dtype != torch.float32:
        raise BertkitError(
            "--engine onnx runs the float32 graph: --precision bf16 / fp16 is the torch engine's (--engine torch), "
            "or pass --precision float32"
        )
    try:
        import onnxruntime
    except ImportError:
        raise BertkitError(
            "--engine onnx needs ONNX Runtime: pip install onnxruntime (a dependency of bertkit's that is missing "
            "here; or use --engine torch)"
        ) from None
    if device is not None and torch.device(device).type != "cpu" and CUDA_PROVIDER not in providers(onnxruntime):
        raise BertkitError(
            f"--engine onnx --device {device}: the installed onnxruntime {onnxruntime.__version__} has no CUDA "
            f"provider (it has {', '.join(providers(onnxruntime))}); install onnxruntime-gpu for it, or use "
            "--engine torch (what --engine auto runs on a GPU)"
        )
    return onnxruntime


CUDA_PROVIDER = "CUDAExecutionProvider"


def providers(ort: ModuleType) -> list[str]:
    """The execution providers the installed onnxruntime has."""
    return list(ort.get_available_providers())


def choose(
    engine: str,
    quantize: str | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> tuple[Engine, str]:
    """(the engine that runs for --engine `engine`, why, as a line says it): "auto" is "torch" where the onnx
    engine cannot run the same numbers (--quantize, a GPU, bf16 / fp16) or at all (no onnxruntime: with a
    warning)."""
    if engine != "auto":
        asked = cast("Engine", engine)  # the options' choices, checked where they entered
        return asked, "--engine torch: bertkit's model" if engine == "torch" else "--engine onnx: ONNX Runtime"
    if quantize is not None:
        return "torch", (
            f"--quantize {quantize} is the torch engine's (ONNX Runtime's dynamic int8 keeps too little of the answers)"
        )
    if device is not None and torch.device(device).type != "cpu":
        return "torch", f"--device {device}: the onnx engine runs on the CPU"
    if dtype is not None and dtype != torch.float32:
        return "torch", f"{NAMES[dtype]}: the onnx engine runs the float32 graph"
    try:
        require_onnxruntime()
    except BertkitError:
        warnings.warn(
            "--engine auto: ONNX Runtime is not installed (pip install onnxruntime), so every batch runs on the "
            "torch engine",
            BertkitWarning,
            stacklevel=3,
        )
        return "torch", "ONNX Runtime is not installed"
    return "auto", AUTO_RULE


AUTO_RULE = "ONNX Runtime for few or equal-length texts, torch's padding-free path for ragged batches"


def resolve(
    engine: str, quantize: str | None = None, device: torch.device | str | None = None, dtype: torch.dtype | None = None
) -> str:
    """The engine that runs for --engine `engine` (choose, without the why)."""
    return choose(engine, quantize, device, dtype)[0]


def runs_on(
    engine: str, quantize: str | None, device: str | torch.device | None, precision: str | None
) -> tuple[Engine, str, Placement]:
    """(the engine that runs, why, where and in which float type): --device / --precision checked
    (devices.placement), and what the onnx engine cannot do refused, before any work."""
    where = placement(device, precision, quantize)
    chosen, why = choose(engine, quantize, where.device, where.dtype)
    if chosen != "torch":
        require_onnxruntime(quantize, where.device, where.dtype)
    return chosen, why, where


def announce(
    command: str, engine: str, quantize: str | None = None, device: str | None = None, precision: str | None = None
) -> Engine:
    """The engine `bertkit COMMAND` runs on (choose), once its first line on stderr said which, why, and where
    (--device / --precision, checked here before any work: devices.placement), e.g.
    `bertkit predict: engine torch (--quantize int8 is the torch engine's ...); on cpu, float32`."""
    chosen, why, where = runs_on(engine, quantize, device, precision)
    print(f"bertkit {command}: engine {chosen} ({why}); on {where.describe()}", file=sys.stderr, flush=True)
    return chosen


# The auto engine's rule, from timing both engines on 21-23 batch shapes per CPU kind (bench/bench_engines.py, tables
# in bench/results/engines.md): ONNX Runtime's fused graph pays less per call (one short text: 1.8-2.7x faster),
# torch's padding-free path computes no padding (a batch half padding: up to 2.3x faster), and on larger batches
# torch's packed products catch up even without padding. So ONNX Runtime takes a batch whose padded positions and
# share of padding are both within one of its CPU kind's tiers; torch the rest. On AVX-512 the packed oneDNN
# products catch up sooner (from about 128 positions) than on AVX2 (2,048); another kind takes AVX2's tiers.
# One text is ONNX Runtime's at any length: embedding one review of 65-512 tokens end to end, its graph was
# 1.09-1.32x faster than torch on AVX-512 too (bench/results/engines.md).
ONNX_TIERS = {
    "AVX2": ((64, 0.5), (512, 0.3), (2048, 0.1)),  # (padded positions, padding share) at most
    "AVX512": ((64, 0.5), (128, 0.1)),
}


def onnx_tiers() -> tuple[tuple[int, float], ...]:
    """The tiers of this CPU's kind (kernels.cpu_kind: torch's name for its vector units)."""
    from .kernels import cpu_kind

    return ONNX_TIERS.get(cpu_kind(), ONNX_TIERS["AVX2"])


def prefers_onnx(rows: int, length: int, tokens: int, tiers: tuple[tuple[int, float], ...] | None = None) -> bool:
    """Whether the auto engine runs a batch of `rows` sequences padded to `length`, holding `tokens` real tokens,
    on ONNX Runtime: one text always, a batch by this CPU kind's tiers (or those given)."""
    positions = rows * length
    padding = 1 - tokens / max(positions, 1)
    return rows == 1 or any(positions <= most and padding <= share for most, share in tiers or onnx_tiers())


class CacheError(BertkitError):
    """The onnx engine's cache cannot take a graph (a read-only or full disk, a path through a file); `what` says
    what could not be written where, and why."""

    def __init__(self, engine: str, what: str) -> None:
        super().__init__(
            f"--engine {engine}: {what}; set BERTKIT_CACHE to a folder that can be written, or use --engine torch"
        )
        self.what = what


def cache_root() -> str:
    return os.environ.get("BERTKIT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "bertkit")


def onnx_folder(model_dir: str, kind: str, engine: str = "onnx") -> str:
    """The folder holding the graph of `model_dir` as `kind` (see the module's docstring); `engine` names the
    --engine that asked, in what is said."""
    if os.path.isfile(os.path.join(model_dir, ONNX_FILE)):
        return model_dir
    if kind in TASKS and os.path.isdir(model_dir):  # predict --task tag on a classifier: not its head's graph
        check_kind(model_dir, kind, flag="--task")
    real = os.path.realpath(model_dir)
    key = content_key(real, kind) if os.path.isdir(real) else "none"  # none: export() says what is wrong
    folder = os.path.join(cache_root(), "onnx", f"{os.path.basename(real)}-{kind}-{key}")
    if os.path.isfile(os.path.join(folder, ONNX_FILE)):
        return folder
    try:  # a cache that cannot be written says so before any work (a full disk: when the graph is written)
        os.makedirs(os.path.dirname(folder), exist_ok=True)
    except OSError as e:
        problem = failed_write(e, os.path.dirname(folder))
        raise CacheError(engine, f"cannot write the {kind} graph of {model_dir} to {folder}: {problem}") from None
    print(f"--engine {engine}: exporting {model_dir} as {kind} to {folder} (once per weights)", file=sys.stderr)
    try:
        export(model_dir, folder, kind=kind)
    except ExportWriteError as e:
        raise CacheError(engine, f"cannot write the {kind} graph of {model_dir} to {folder}: {e.problem}") from None
    except BertkitError:
        if not os.path.isfile(os.path.join(folder, ONNX_FILE)):  # not another process's export that won
            raise
    return folder


# The files whose content makes the graph (export.py copies or reads them): config.json, the tokenizer's, the
# sentence-transformers pooling (the encoder's graph applies it), and the weights, whole or in shards
WEIGHT_ENDINGS = (".safetensors", ".bin", ".index.json")


def graph_files(folder: str) -> list[str]:
    """The files of `folder` that make its graph, as paths relative to it, sorted."""
    from .tokenizer import TOKENIZER_FILES

    named = {"config.json", *TOKENIZER_FILES, *SENTENCE_TRANSFORMERS_FILES}  # 1_Pooling/... under its folder's name
    return [
        n for n in folder_files(folder) if n.split("/")[0] in named or ("/" not in n and n.endswith(WEIGHT_ENDINGS))
    ]


def content_key(folder: str, kind: str) -> str:
    """What names the cached graph of `folder` as `kind`: a digest of the SHA-256 of each of its graph_files, of
    bertkit's version and of the opset. A user cannot keep it equal by accident: weights rewritten with their size
    and mtime put back (os.utime) hash differently. Hashing takes time (the 90 MB model.safetensors of
    all-MiniLM-L6-v2: 0.15 s from the page cache, 0.4 s read from disk, on one AMD EPYC core), so each file's hash
    is kept in a record in the cache (hashes/) beside its (device, inode, size, mtime, ctime) and computed again
    only when one of those changed; ctime is the one os.utime cannot put back."""
    from . import __version__

    record_path = os.path.join(cache_root(), "hashes", f"{digest([folder])}.json")
    record = _read_record(record_path)
    sums, known = {}, {}
    for name in graph_files(folder):
        path = os.path.join(folder, name)
        stamp = list(file_stamp(path))
        entry = record.get(name)
        if isinstance(entry, dict) and entry.get("stat") == stamp and isinstance(entry.get("sha256"), str):
            sums[name] = entry["sha256"]
        else:
            sums[name] = _sha256(path)
        if list(file_stamp(path)) == stamp:  # not rewritten while it was read: the hash is the file's
            known[name] = {"stat": stamp, "sha256": sums[name]}
    if known != record:
        try:
            atomic_write_text(record_path, json.dumps(known, indent=1) + "\n")
        except OSError:  # a cache that cannot be written: hashed again next time (the export says why)
            pass
    graphs = (
        f"{ONNX_FILE}+{OPTIMIZED_FILE}+{GRAPH_FORM}"  # what the export writes: a graph made otherwise is made again
    )
    return digest([__version__, str(OPSET), graphs, kind, *(f"{name}:{sha}" for name, sha in sums.items())])


def _sha256(path: str) -> str:
    """The SHA-256 of a file, read in chunks of 1 MiB."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(2**20):
                h.update(chunk)
        return h.hexdigest()
    except OSError as e:
        raise BertkitError(
            f"{path}: cannot read it ({e.strerror or e}); the onnx engine's graph is made from it"
        ) from None


def _read_record(path: str) -> dict[str, Any]:
    """The hashes content_key recorded for a folder; empty when there is none (or it cannot be read)."""
    try:
        record = read_json(path)
    except BertkitError:  # none yet, or damaged: hashed again and written anew
        return {}
    return record if isinstance(record, dict) else {}


def session_providers(device: torch.device) -> list[Any]:
    """ONNX Runtime's providers for a graph on `device`: the CUDA provider on its GPU (require_onnxruntime checked
    that it is there), the CPU's for what it leaves."""
    if device.type == "cuda":
        return [(CUDA_PROVIDER, {"device_id": device.index or 0}), "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


class OnnxModel:
    """An exported graph where a torch model would run: what evaluate, predict, serve and fill-mask call of one.
    It runs the folder's fused graph (OPTIMIZED_FILE) where the export wrote one, else model.onnx."""

    training = False

    def __init__(self, folder: str, threads: int | None = None, spin: bool = True, device: torch.device = CPU.device):
        ort = require_onnxruntime(device=device)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads or torch.get_num_threads()
        if not spin:  # beside torch (auto): threads left spinning after a call would take torch's cores; they
            # spin during a run (one text: ~1 ms faster than never spinning) and stop the moment it returns
            options.add_session_config_entry("session.force_spinning_stop", "1")
        fused = os.path.join(folder, OPTIMIZED_FILE)
        path = fused if os.path.isfile(fused) else os.path.join(folder, ONNX_FILE)
        try:
            self.session = ort.InferenceSession(path, options, providers=session_providers(device))
        except Exception as e:  # ONNX Runtime's own kinds: a truncated file, a graph it cannot run
            raise BertkitError(
                f"{path}: ONNX Runtime cannot load it ({str(e).strip().splitlines()[0][:300]}); "
                "write it again with `bertkit export`"
            ) from None
        self.outputs = [o.name for o in self.session.get_outputs()]
        # what the graph reads: INPUTS, less token_type_ids where the model has none (ModernBERT's graph)
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.config = read_config(folder)
        self.folder = folder

    def eval(self) -> OnnxModel:
        return self

    def train(self, mode: bool = True) -> OnnxModel:  # nothing trains here
        return self

    def parameters(self) -> Iterator[torch.Tensor]:
        """What callers read the device from: the CPU."""
        yield torch.empty(0)

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        **_: object,
    ) -> SimpleNamespace:
        """The graph's outputs, by name, as tensors: logits (B, ...) or start_logits / end_logits, or
        last_hidden_state and sentence_embedding."""
        given = {
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids) if attention_mask is None else attention_mask,
            "token_type_ids": torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids,
        }
        values = self.session.run(self.outputs, {k: given[k].cpu().numpy().astype(np.int64) for k in self.inputs})
        out = {name: torch.from_numpy(v) for name, v in zip(self.outputs, values)}
        check_outputs(self.folder, "outputs", *[out[k] for k in ("logits", "start_logits", "end_logits") if k in out])
        return SimpleNamespace(**out)

    def pooled(self, rows: list[list[int]], pad_id: int) -> torch.Tensor:
        """(B, H) the encoder graph's sentence_embedding of rows of ids (padded here with `pad_id`): the pooling
        the graph was exported with, without the token vectors leaving ONNX Runtime."""
        ids = np.full((len(rows), max(map(len, rows))), pad_id, dtype=np.int64)  # (B, S)
        mask = np.zeros_like(ids)
        for i, row in enumerate(rows):
            ids[i, : len(row)], mask[i, : len(row)] = row, 1
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        feed = {k: v for k, v in feed.items() if k in self.inputs}
        (vectors,) = self.session.run(["sentence_embedding"], feed)
        return torch.from_numpy(vectors)


def load_graph(model_dir: str, kind: str, engine: str = "onnx", where: Placement = CPU) -> OnnxModel:
    """The graph of `model_dir` as `kind` in ONNX Runtime (onnx_folder: the folder's own export, or the cache's).
    Beside torch (`engine` auto) its threads stop spinning the moment a call returns: left spinning, they took the
    cores of the next batch torch ran (one text at a time, mixed lengths: p99 90-104 ms spinning, 38-44 ms not);
    never spinning, one text took ~1 ms more (threads woken for every operator)."""
    require_onnxruntime(device=where.device, dtype=where.dtype)  # what the graph cannot do, before an export
    return OnnxModel(onnx_folder(model_dir, kind, engine), spin=engine != "auto", device=where.device)


_UNWRITABLE: set[str] = set()  # the caches found unwritable: auto runs torch there without trying again


def auto_model(torch_model: BertPreTrainedModel, model_dir: str, kind: str) -> AutoModel | BertPreTrainedModel:
    """`torch_model` and the graph of `model_dir` as `kind` in one model's place (AutoModel); `torch_model` alone,
    with one warning a process, where the cache cannot be written."""
    root = cache_root()
    if root not in _UNWRITABLE:
        try:
            return AutoModel(torch_model, load_graph(model_dir, kind, "auto"))
        except CacheError as e:
            _UNWRITABLE.add(root)
            warnings.warn(
                f"--engine auto: {e.what}; every batch runs on the torch engine (set BERTKIT_CACHE to a folder "
                "that can be written)",
                BertkitWarning,
                stacklevel=3,
            )
    return torch_model


class AutoModel:
    """The torch model and its graph in one model's place: each call runs on the engine prefers_onnx() names for
    its batch (rows, padded length, real tokens); `runs` counts the calls each engine took."""

    training = False

    def __init__(self, torch_model: BertPreTrainedModel, graph: OnnxModel) -> None:
        self.torch, self.onnx = torch_model.eval(), graph
        self.config = torch_model.config
        self.runs = {"torch": 0, "onnx": 0}

    def eval(self) -> AutoModel:
        return self

    def train(self, mode: bool = True) -> AutoModel:  # nothing trains here
        return self

    def parameters(self) -> Iterator[nn.Parameter]:
        return self.torch.parameters()

    @property
    def base_model(self) -> BertModel:
        """The torch model's encoder (serve's /embed shares it)."""
        return self.torch.base_model

    def pooled(self, rows: list[list[int]], pad_id: int) -> torch.Tensor | None:
        """The graph's pooled vectors of rows of ids (OnnxModel.pooled) where the rule puts their batch on ONNX
        Runtime; None where it puts it on torch (the caller runs the torch model)."""
        length = max(map(len, rows))
        if not prefers_onnx(len(rows), length, sum(map(len, rows))):
            return None
        self.runs["onnx"] += 1
        return self.onnx.pooled(rows, pad_id)

    def engine_for(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> str:
        length = input_ids.shape[-1]  # (B, S), or (B, choices, S) for multiple choice
        rows = input_ids.numel() // max(length, 1)
        tokens = rows * length if attention_mask is None else int(attention_mask.count_nonzero())
        return "onnx" if prefers_onnx(rows, length, tokens) else "torch"

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        **_: object,
    ) -> Any:  # the outputs of the engine that ran (a SimpleNamespace, or the torch model's), read by field name
        name = self.engine_for(input_ids, attention_mask)
        self.runs[name] += 1
        model = self.onnx if name == "onnx" else self.torch
        return model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)


def load_task_model(
    model_dir: str,
    task: str | None = None,
    *,
    quantize: str | None = None,
    engine: str = DEFAULT_ENGINE,
    device: str | torch.device | None = "auto",
    precision: str | None = "auto",
) -> TaskModel:
    """inference.load_task_model on the engine named, on --device in --precision (devices.placement)."""
    from . import inference

    engine, _, where = runs_on(engine, quantize, device, precision)
    if engine == "torch":
        return inference.load_task_model(model_dir, task, quantize=quantize, where=where)
    if not os.path.isdir(model_dir):
        raise BertkitError(f"--model {model_dir}: not a directory; pass the folder `bertkit finetune --out` wrote")
    from .tasks import get_task, task_of
    from .tokenizer import Tokenizer

    found = get_task(task or task_of(model_dir))
    from .model import BertModel

    kind = "encoder" if found.model_class is BertModel else found.name  # embed's model is the encoder, no head
    if engine == "auto":  # the torch model first: its refusals (a head that would be random) before any export
        loaded = inference.load_task_model(model_dir, found.name)
        # the torch engine's model is a BertFor*; AutoModel and OnnxModel stand in for one (InferenceModel)
        auto = auto_model(cast("BertPreTrainedModel", loaded.model), model_dir, kind)
        return inference.TaskModel(found, auto, loaded.tokenizer)
    model = load_graph(model_dir, kind, where=where)
    if found.labelled(model.config):
        inference.check_label_ids(model_dir, model.config)
    return inference.TaskModel(found, model, Tokenizer.from_pretrained(model_dir))


def load_mlm(
    model_dir: str,
    *,
    quantize: str | None = None,
    engine: str = DEFAULT_ENGINE,
    device: str | torch.device | None = "auto",
    precision: str | None = "auto",
) -> InferenceModel:
    """inference.load_mlm on the engine named, on --device in --precision."""
    from . import inference

    engine, _, where = runs_on(engine, quantize, device, precision)
    if engine == "torch":
        return inference.load_mlm(model_dir, quantize=quantize, where=where)
    if not os.path.isdir(model_dir):
        raise BertkitError(f"--model {model_dir}: not a directory; pass the folder `bertkit pretrain --out` wrote")
    if engine == "auto":
        return auto_model(inference.load_mlm(model_dir), model_dir, "mlm")
    return load_graph(model_dir, "mlm", where=where)
