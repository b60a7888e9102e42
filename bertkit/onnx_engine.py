"""--engine onnx: a model folder's exported graph (bertkit export) run by ONNX Runtime where bertkit's torch model
would run; tokenizing, windows, pooling and batching stay bertkit's.

    onnx_folder(model_dir, kind)   the export to run: model_dir itself when it holds model.onnx, else one exported
                                   on first use into the cache (BERTKIT_CACHE, default ~/.cache/bertkit), keyed by
                                   the model folder's path and its files' sizes and times: new weights, new export
    OnnxEncoder(folder)            rows of token ids -> (last_hidden_state (B, S, H), mask (B, S)) as torch tensors,
                                   what inference.encoder_forward gives: embed's Encoder runs either
ONNX Runtime runs the graph with every graph optimisation it has (for BERT on CPU: the attention, LayerNorm and
GELU fusions) and as many threads as torch uses.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from .errors import BertkitError
from .export import ONNX_FILE, export
from .files import digest

ENGINES = ("torch", "onnx")
ENGINE_HELP = ("torch: bertkit's model; onnx: its exported graph (bertkit export, made on first use) in ONNX Runtime "
               "(pip install 'bertkit[onnx]')")


def require_onnxruntime():
    """The onnxruntime module, or an error naming the extra that installs it."""
    try:
        import onnxruntime
    except ImportError:
        raise BertkitError("--engine onnx needs ONNX Runtime: pip install 'bertkit[onnx]' (or use --engine torch)") \
            from None
    return onnxruntime


def cache_root() -> str:
    return os.environ.get("BERTKIT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "bertkit")


def onnx_folder(model_dir: str, kind: str) -> str:
    """The folder holding the graph of `model_dir` as `kind` (see the module's docstring)."""
    if os.path.isfile(os.path.join(model_dir, ONNX_FILE)):
        return model_dir
    real = os.path.realpath(model_dir)
    files = sorted(os.scandir(real), key=lambda e: e.name) if os.path.isdir(real) else []
    key = digest([real, kind, *(f"{e.name}:{e.stat().st_size}:{e.stat().st_mtime_ns}" for e in files
                                if e.is_file())])
    folder = os.path.join(cache_root(), "onnx", f"{os.path.basename(real)}-{kind}-{key}")
    if not os.path.isfile(os.path.join(folder, ONNX_FILE)):
        try:
            export(model_dir, folder, kind=kind)
        except BertkitError:
            if not os.path.isfile(os.path.join(folder, ONNX_FILE)):  # not another process's export that won
                raise
    return folder


class OnnxEncoder:
    """An exported encoder in a BertModel's place: padded rows of ids in, its last_hidden_state out."""

    def __init__(self, folder: str, threads: int | None = None):
        from .config import BertConfig

        ort = require_onnxruntime()
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads or torch.get_num_threads()
        self.session = ort.InferenceSession(os.path.join(folder, ONNX_FILE), options,
                                            providers=["CPUExecutionProvider"])
        self.config = BertConfig.from_json(folder)
        self.folder = folder

    def eval(self) -> "OnnxEncoder":
        return self

    def forward_rows(self, rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One run over `rows` padded to the longest: last_hidden_state (B, S, H) float32, attention mask (B, S)."""
        from .data.masking import id_batch

        batch = id_batch(rows, pad_id)
        (hidden,) = self.session.run(["last_hidden_state"], {k: v.numpy() for k, v in batch.items()})
        return torch.from_numpy(np.ascontiguousarray(hidden)), batch["attention_mask"]
