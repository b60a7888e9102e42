"""Sentence embeddings: one vector per text, pooled as sentence-transformers pools them.

    from bertkit import Encoder, encode
    vectors = encode("path/to/all-MiniLM-L6-v2", ["今天天气很好。", "A sentence."])   # (2, 384) float32
    encoder = Encoder.from_pretrained("path/to/all-MiniLM-L6-v2")                  # loaded once, for many calls
    vectors = encoder.encode(["今天天气很好。"])                                       # (1, 384)

    bertkit embed --model path/to/all-MiniLM-L6-v2 "今天天气很好。" "A sentence." --output vectors.npy
    bertkit embed --model runs/sent --file reviews.txt --output vectors.jsonl --pooling cls
    bertkit embed --model runs/sent --file reviews.csv --text-field review --output vectors.npy   # a column

    texts: a text with no content (empty, whitespace, zero-width or control characters only: text.is_empty_text,
         the rule `bertkit predict` and `bertkit serve` follow) is refused, naming it; vectors that are not
         finite (broken weights) are refused (NonFiniteError), never written

    text --Tokenizer--> [CLS] ... [SEP] ids, cut to max_tokens (sentence_bert_config.json's max_seq_length,
         else the model's max_position_embeddings)
         --sort by length, batch, pad--> input_ids, attention_mask (B, S)
         --BertModel (padding-free "auto"/"varlen" path when rows are padded)--> last_hidden_state (B, S, H)
           (the batch and the forward pass: inference.encoder_forward, as `bertkit serve` runs them)
         --pool over the real tokens: mean | cls | max | mean_sqrt_len--> (B, H)
         --L2-normalize (when the folder has a Normalize module, or --normalize)--> back in input order (n, H)

A sentence-transformers folder (modules.json) says how to pool (1_Pooling/config.json), whether to
normalize (a Normalize module) and how long a text may be (sentence_bert_config.json): read_pooling
reads it. Any other model folder (a plain BertModel, a `bertkit finetune` output: its `bert.` encoder
is used, its head is not) pools by the mean, unnormalized, unless flags say otherwise.

encode(folder, ...) keeps the last encoders it loaded (EncoderCache: two, by the folder's real path, the settings
and the identity of the folder's files) and reuses one while its folder's files are unchanged, so calling it in a
loop does not load the model each time; a folder whose files were written since loads again.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .deprecated import moved
from .devices import CPU, Precision, device_opt, place, placement, precision_opt
from .engines import (
    DEFAULT_ENGINE,
    ENGINE_HELP,
    AutoModel,
    Engine,
    OnnxModel,
    auto_model,
    choose,
    load_graph,
    require_onnxruntime,
)
from .errors import BertkitError, CheckpointError, ConfigError
from .files import file_stamp, folder_files
from .finite import check_outputs, check_weights
from .inference import calibration, encoder_forward
from .options import opt, settings_of, shown
from .pooling import POOLING_MODES, Pooling, PoolingConfigError, pool, pooling_settings, read_pooling  # noqa: F401 (bertkit.embed's names too)
from .quantize import CHOICES as QUANTIZE_CHOICES
from .quantize import FLAG_HELP as QUANTIZE_HELP
from .quantize import quantize as quantize_model
from .text import is_empty_text

if TYPE_CHECKING:
    from numpy.typing import NDArray
    from typing_extensions import Unpack

    from .model import BertModel, BertPreTrainedModel, InferenceModel
    from .tokenizer import Tokenizer

# what an EmptyText says of the text it names
EMPTY_TEXT = (
    "is empty (no text once whitespace, zero-width and control characters are left out): there is nothing to embed"
)


class EmptyText(BertkitError, ValueError):
    """A text with nothing to embed (text.is_empty_text): refused rather than embedded as [CLS] [SEP]."""

    def __init__(self, index: int, where: str | None = None) -> None:
        super().__init__(f"{where or f'texts[{index}]'} {EMPTY_TEXT}")
        self.index = index


class TooLong(BertkitError, ValueError):
    """A text with more tokens than the encoder takes (and truncation was not allowed)."""

    def __init__(self, tokens: int, limit: int) -> None:
        super().__init__(
            f"the text has {tokens} tokens with [CLS] and [SEP]; the limit is {limit}: shorten it or allow truncation"
        )
        self.tokens = tokens
        self.limit = limit


# ----- what encode and Encoder.from_pretrained take -------------------------------------------------
@dataclass
class EmbedSettings:
    """How texts are embedded, besides the model and the texts: checked as `bertkit embed`'s flags are
    (options.settings_of), so an unknown name or a choice not offered is a ConfigError naming the closest."""

    pooling: str | None = opt(
        None, "default: from the folder (1_Pooling/config.json), else mean", choices=list(POOLING_MODES)
    )
    normalize: bool | None = opt(None, "L2-normalize each vector; None: as the folder says, else not")
    engine: Engine = opt(DEFAULT_ENGINE, ENGINE_HELP)
    device: str = device_opt()
    precision: Precision = precision_opt()

    def problem(self) -> str | None:
        if self.device == "auto":
            return None
        try:
            torch.device(self.device)
        except (RuntimeError, ValueError):  # torch's own message lists twenty device types
            return f"device: {shown(self.device)} is not a device (auto, cpu, cuda, cuda:N, mps)"
        return None


@dataclass
class EncoderSettings(EmbedSettings):
    """What Encoder.from_pretrained takes besides the folder (and a model already loaded)."""

    quantize: str | None = opt(None, QUANTIZE_HELP, choices=QUANTIZE_CHOICES)


@dataclass
class EncodeSettings(EmbedSettings):
    """What encode takes besides the model, the texts and a tokenizer."""

    batch_size: int = opt(32, "texts per forward pass")

    def problem(self) -> str | None:
        if self.batch_size < 1:
            return f"batch_size must be a positive integer, got {self.batch_size}"
        return super().problem()


class NoOtherSettings(TypedDict):
    """The keyword arguments encode and Encoder.from_pretrained take besides their own: none. Typing their
    **unknown so makes a type checker flag a misspelt name as it flags one to any function; at run time
    settings_of makes it a ConfigError naming the closest setting."""


# ----- the encoder -------------------------------------------------------------------------------
class Encoder:
    """A BertModel + Tokenizer + Pooling: texts -> one vector each."""

    def __init__(
        self, model: InferenceModel, tokenizer: Tokenizer, pooling: Pooling, model_dir: str | None = None
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.model_dir = model_dir or "the model"  # what errors name
        limit = model.config.max_position_embeddings
        self.max_tokens = min(pooling.max_seq_length, limit) if pooling.max_seq_length else limit
        # the engine that runs, and why where from_pretrained chose it (engines.choose)
        self.engine = "onnx" if isinstance(model, OnnxModel) else "auto" if isinstance(model, AutoModel) else "torch"
        self.engine_why = ""
        self.graph: OnnxModel | AutoModel | None = None  # set where the graph pools as this encoder does
        self.where = CPU  # the device and float type from_pretrained put the model on (devices.placement)

    def __repr__(self) -> str:
        return (
            f"Encoder(hidden={self.model.config.hidden_size}, pooling={self.pooling.mode}, "
            f"normalize={self.pooling.normalize}, max_tokens={self.max_tokens}, engine={self.engine}, "
            f"from {self.pooling.source})"
        )

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | os.PathLike[str],
        *,
        pooling: str | None = None,
        normalize: bool | None = None,
        quantize: str | None = None,
        device: str | torch.device = "auto",
        precision: str = "auto",
        model: BertModel | None = None,
        engine: str = DEFAULT_ENGINE,
        **unknown: Unpack[NoOtherSettings],
    ) -> Encoder:
        """The encoder of a model folder: a plain BertModel, a sentence-transformers folder, or a
        fine-tuned task model (its `bert.` weights; the head is left out). Flags override the folder.
        model: the folder's encoder already loaded (a task model's `.bert`, quantized or not as it is),
        shared instead of loading a second copy. engine "auto" (the default): the model and its exported graph
        in ONNX Runtime, each batch on the faster for its shape, the torch engine where the graph cannot give its
        numbers (quantize, a GPU, bf16: .engine and .engine_why say so); "onnx": the graph alone (engines.py; float32);
        "torch": the model alone. device: auto (a GPU when there is one), cpu, cuda, cuda:N; precision: auto (bf16 on
        a GPU, float32 on the CPU), float32, bf16, fp16 (devices.py; .where says what was chosen).
        The settings are checked first (EncoderSettings): a misspelt name or choice is a ConfigError."""
        from .checkpoint import load_pretrained
        from .model import BertModel
        from .tokenizer import Tokenizer

        settings_of(
            EncoderSettings,
            where="bertkit.Encoder.from_pretrained",
            pooling=pooling,
            normalize=normalize,
            quantize=quantize,
            device=str(device),
            precision=precision,
            engine=engine,
            **unknown,
        )
        model_dir = os.fspath(model_dir)
        if not os.path.isdir(model_dir):
            what = "not a directory" if os.path.exists(model_dir) else "no such directory"
            raise CheckpointError(f"{model_dir}: {what}; pass a local model folder (config.json and weights)")
        folder = read_pooling(model_dir)
        settings = pooling_settings(folder, pooling, normalize)
        where = placement(device, precision, quantize)
        engine, why = choose(engine, quantize, where.device, where.dtype)
        tokenizer = Tokenizer.from_pretrained(model_dir)
        if engine == "onnx" and model is None:
            require_onnxruntime(quantize, where.device, where.dtype)
            encoder = cls(load_graph(model_dir, "encoder", where=where), tokenizer, settings, model_dir)
        else:
            if model is None:
                # A task checkpoint's encoder is under `bert.`: load_pretrained strips it, and a missing
                # encoder tensor is a CheckpointError naming it; head tensors (classifier.*, cls.*) are unused here.
                model, _ = load_pretrained(BertModel, model_dir, add_pooling_layer=False, output_loading_info=True)
                check_weights(model, model_dir)  # before quantizing: int8 cannot be built from NaN
                model = place(model, where)
                model = quantize_model(model, quantize, calibration(quantize, tokenizer))  # None: as it is
            # auto: the torch side is the BertModel (quantized in place or not) loaded above, or the one given
            runs = auto_model(model, model_dir, "encoder") if engine == "auto" else model
            encoder = cls(runs, tokenizer, settings, model_dir)
        encoder.engine_why, encoder.where = why, where
        graph_pooling = pooling_settings(folder, None, None)  # what the export's graph applies
        if isinstance(encoder.model, (OnnxModel, AutoModel)) and (settings.mode, settings.normalize) == (
            graph_pooling.mode,
            graph_pooling.normalize,
        ):
            encoder.graph = encoder.model
        return encoder

    def token_ids(self, text: str, *, truncate: bool = True, limit: int | None = None) -> list[int]:
        """[CLS] ... [SEP] ids of one text; past `limit` (default max_tokens): cut (keeping [SEP] last)
        when truncate, else TooLong."""
        if not isinstance(text, str):
            raise BertkitError(f"a text must be a string, got {type(text).__name__}")
        limit = self.max_tokens if limit is None else min(limit, self.max_tokens)
        if truncate:  # the tokenizer cuts: [CLS] + the first limit - 2 tokens + [SEP]
            return self.tokenizer.encode(text, truncation=True, max_length=limit)
        ids = self.tokenizer.encode(text)
        if len(ids) > limit:
            raise TooLong(len(ids), limit)
        return ids

    def embed_ids(self, rows: list[list[int]]) -> Tensor:
        """One forward pass over rows of ids, padded to the longest -> (len(rows), H) float32 vectors; vectors that
        are not finite (NaN / Infinity: broken weights) are a NonFiniteError."""
        if not rows:
            return torch.zeros(0, self.model.config.hidden_size)
        with torch.inference_mode():
            # the graph's own pooled output where the batch runs on ONNX Runtime (None: it runs on torch)
            vectors = None if self.graph is None else self.graph.pooled(rows, self.tokenizer.pad_token_id)
            if vectors is None:
                hidden, mask = encoder_forward(self.model, rows, self.tokenizer.pad_token_id)  # (B, S, H), (B, S)
                vectors = pool(hidden, mask, self.pooling.mode)  # (B, H)
                if self.pooling.normalize:
                    vectors = F.normalize(vectors, p=2, dim=1)
            check_outputs(self.model_dir, "vectors", vectors)
        return vectors.float().cpu()

    def encode(self, texts: list[str], batch_size: int = 32) -> NDArray[np.float32]:
        """(n, H) float32 vectors in input order; batches hold texts of similar length (less padding). A text with
        nothing to embed (text.is_empty_text) is an EmptyText error naming it."""
        texts = _check_texts(texts)
        _check_batch_size(batch_size)
        for i, text in enumerate(texts):
            if is_empty_text(text, self.tokenizer):
                raise EmptyText(i)
        if not texts:
            return np.zeros((0, self.model.config.hidden_size), dtype=np.float32)
        rows = self.tokenizer(
            texts, truncation=True, max_length=self.max_tokens, return_token_type_ids=False, return_attention_mask=False
        )["input_ids"]
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
        out = np.empty((len(rows), self.model.config.hidden_size), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            out[chunk] = self.embed_ids([rows[i] for i in chunk]).numpy()
        return out


def _check_texts(texts: object) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise BertkitError(f"texts must be a list of strings, got {type(texts).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise BertkitError(f"texts[{i}] is a {type(text).__name__}, not a string")
    return list(texts)


def _check_batch_size(batch_size: object) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise BertkitError(f"batch_size must be a positive integer, got {batch_size!r}")


def encode(
    model: str | os.PathLike[str] | Encoder | BertPreTrainedModel,
    texts: str | list[str] | tuple[str, ...],
    batch_size: int = 32,
    normalize: bool | None = None,
    pooling: str | None = None,
    tokenizer: Tokenizer | str | os.PathLike[str] | None = None,
    engine: str | None = None,
    device: str | None = None,
    precision: str | None = None,
    **unknown: Unpack[NoOtherSettings],
) -> NDArray[np.float32]:
    """Sentence vectors: one string -> (H,), a list -> (n, H) float32, in input order.

    model: a model folder (loaded on the first call and kept while its files are unchanged: ENCODERS; an
    Encoder of one's own says when it is loaded and freed), an Encoder, or a bertkit model (BertModel or a task
    model: its encoder), then with `tokenizer` (a Tokenizer or its folder). pooling / normalize override what
    the folder says (default: mean, not normalized).
    engine, device, precision: for a model folder, the engine it loads on, where and in which float type
    (Encoder.from_pretrained; None: its defaults, "auto"); an Encoder or a model object runs as it is (engine "onnx" /
    "auto", a device or a precision is refused there).
    The settings are checked first (EncodeSettings): a misspelt name or choice is a ConfigError.
    """
    from .model import BertPreTrainedModel
    from .tokenizer import Tokenizer

    settings_of(
        EncodeSettings,
        where="bertkit.encode",
        batch_size=batch_size,
        normalize=normalize,
        pooling=pooling,
        engine=engine or DEFAULT_ENGINE,
        device=device or "auto",
        precision=precision or "auto",
        **unknown,
    )
    if not isinstance(model, (str, os.PathLike)):
        given = [f"{k}={v!r}" for k, v in (("engine", engine), ("device", device), ("precision", precision)) if v]
        if given and given != ["engine='torch'"]:
            raise ConfigError(
                f"bertkit.encode: {', '.join(given)} is for a model folder, which encode loads; an Encoder or a model "
                "object runs as it is (Encoder.from_pretrained(folder, engine=..., device=...) loads one elsewhere)"
            )
    single = isinstance(texts, str)
    batch = _check_texts([texts] if single else texts)
    if isinstance(model, Encoder):
        if tokenizer is not None:
            raise BertkitError("an Encoder has its own tokenizer; pass tokenizer only with a BertModel")
        encoder = (
            model
            if pooling is None and normalize is None
            else Encoder(
                model.model, model.tokenizer, pooling_settings(model.pooling, pooling, normalize), model.model_dir
            )
        )
    elif isinstance(model, BertPreTrainedModel):
        if tokenizer is None:
            raise BertkitError("encode(model, ...) with a model object needs tokenizer= (a Tokenizer or its folder)")
        if not isinstance(tokenizer, Tokenizer):
            tokenizer = Tokenizer.from_pretrained(tokenizer)
        encoder = Encoder(model.base_model, tokenizer, pooling_settings(None, pooling, normalize))
    elif isinstance(model, (str, os.PathLike)):
        if tokenizer is not None:
            raise BertkitError("a model folder has its own tokenizer; pass tokenizer only with a BertModel")
        encoder = ENCODERS.get(
            model,
            pooling=pooling,
            normalize=normalize,
            engine=engine or DEFAULT_ENGINE,
            device=device or "auto",
            precision=precision or "auto",
        )
    else:
        raise BertkitError(
            f"model must be a model folder, an Encoder or a bertkit BertModel, got {type(model).__name__}"
        )
    vectors = encoder.encode(batch, batch_size)
    return vectors[0] if single else vectors


# ----- the encoders encode(folder) loaded ----------------------------------------------------------
# A file system keeps a file's times in ticks (a few ms on ext4 and tmpfs, 2 s on FAT): a file written again within
# the tick of its last write, at the same size, keeps its identity. A folder with a file changed this recently is
# not kept, so no second write can hide in the tick of the one that was read.
RECENT_NS = 2 * 10**9
FolderState = tuple[tuple[str, tuple[int, ...]], ...]  # (path in the folder, files.file_stamp) per file
RunsOn = tuple[str, str, str]  # engine, device, precision
CacheKey = tuple[str, str | None, bool | None, RunsOn, FolderState]  # real path, pooling, normalize, ..., files


def folder_state(real: str) -> FolderState:
    """The stamp (files.file_stamp) of each file in folder `real` and in its folders one level down, sorted: what a
    load reads (weights, config, tokenizer, pooling) is there."""
    return tuple((name, file_stamp(os.path.join(real, name))) for name in folder_files(real))


class EncoderCache:
    """The last `size` Encoders loaded from model folders, each kept under its folder's real path, the settings
    it was loaded with and folder_state: a folder whose files changed is loaded again, never answered from the
    old weights. A folder with a file changed in the last `recent_ns` nanoseconds is not kept (RECENT_NS).
    Thread-safe; `loads` counts the encoders loaded."""

    def __init__(self, size: int = 2, recent_ns: int = RECENT_NS) -> None:
        self.size, self.recent_ns = size, recent_ns
        self.loads = 0
        self._encoders: OrderedDict[CacheKey, Encoder] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()

    def get(
        self,
        model_dir: str | os.PathLike[str],
        *,
        pooling: str | None = None,
        normalize: bool | None = None,
        engine: str = DEFAULT_ENGINE,
        device: str = "auto",
        precision: str = "auto",
    ) -> Encoder:
        """The Encoder of `model_dir` with these settings (Encoder.from_pretrained's): the one kept if its folder
        is unchanged, else one loaded now, and kept if its folder did not change while it loaded."""
        runs = (engine, device, precision)
        key = _key(model_dir, pooling, normalize, runs)
        with self._lock:
            kept = self._encoders.get(key) if key is not None else None
            if key is not None and kept is not None:
                self._encoders.move_to_end(key)
                return kept
        encoder = Encoder.from_pretrained(
            model_dir, pooling=pooling, normalize=normalize, engine=engine, device=device, precision=precision
        )
        with self._lock:
            self.loads += 1
        if key is not None and key == _key(model_dir, pooling, normalize, runs) and self._still(key[-1]):
            with self._lock:
                self._encoders[key] = encoder
                while len(self._encoders) > self.size:
                    self._encoders.popitem(last=False)
        return encoder

    def clear(self) -> None:
        """Forget the encoders kept (their memory is freed once nothing else holds them)."""
        with self._lock:
            self._encoders.clear()

    def _still(self, state: FolderState) -> bool:
        """Whether no file of `state` changed in the last recent_ns nanoseconds."""
        newest = max((max(stamp[-2:]) for _, stamp in state), default=0)  # the latest mtime or ctime
        return time.time_ns() - newest >= self.recent_ns


def _key(
    model_dir: str | os.PathLike[str], pooling: str | None, normalize: bool | None, runs: RunsOn
) -> CacheKey | None:
    """What an encoder is kept under; None for a folder that cannot be read (from_pretrained says why)."""
    real = os.path.realpath(model_dir)
    try:
        return (real, pooling, normalize, runs, folder_state(real))
    except OSError:
        return None


ENCODERS = EncoderCache()  # what encode(folder, ...) loads


if not TYPE_CHECKING:  # old names, for one release
    __getattr__ = moved(
        __name__,
        {
            "embed_main": "bertkit.commands.embed:main",
            "EmbedConfig": "bertkit.commands.embed:EmbedConfig",
            "OUTPUT_SUFFIXES": "bertkit.commands.embed:OUTPUT_SUFFIXES",
            "DATA_SUFFIXES": "bertkit.commands.embed:DATA_SUFFIXES",
        },
    )
