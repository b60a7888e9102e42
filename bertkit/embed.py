"""Sentence embeddings: one vector per text, pooled as sentence-transformers pools them.

    from bertkit import encode
    vectors = encode("path/to/all-MiniLM-L6-v2", ["今天天气很好。", "A sentence."])   # (2, 384) float32

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
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .deprecated import moved
from .engines import AutoModel, load_graph, require_onnxruntime, resolve
from .errors import BertkitError, CheckpointError
from .finite import check_outputs, check_weights
from .inference import calibration, encoder_forward
from .pooling import POOLING_MODES, Pooling, PoolingConfigError, pool, pooling_settings, read_pooling  # noqa: F401 (bertkit.embed's names too)
from .quantize import quantize as quantize_model
from .text import is_empty_text

if TYPE_CHECKING:
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

    def __repr__(self) -> str:
        return (
            f"Encoder(hidden={self.model.config.hidden_size}, pooling={self.pooling.mode}, "
            f"normalize={self.pooling.normalize}, max_tokens={self.max_tokens}, from {self.pooling.source})"
        )

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | os.PathLike[str],
        *,
        pooling: str | None = None,
        normalize: bool | None = None,
        quantize: str | None = None,
        device: str | torch.device | None = None,
        model: BertModel | None = None,
        engine: str = "torch",
    ) -> Encoder:
        """The encoder of a model folder: a plain BertModel, a sentence-transformers folder, or a
        fine-tuned task model (its `bert.` weights; the head is left out). Flags override the folder.
        model: the folder's encoder already loaded (a task model's `.bert`, quantized or not as it is),
        shared instead of loading a second copy. engine "onnx": its exported graph in ONNX Runtime
        (engines.py; float32 on the CPU); "auto": both, each batch on the faster for its shape."""
        from .checkpoint import load_pretrained
        from .model import BertModel
        from .tokenizer import Tokenizer

        model_dir = os.fspath(model_dir)
        if not os.path.isdir(model_dir):
            what = "not a directory" if os.path.exists(model_dir) else "no such directory"
            raise CheckpointError(f"{model_dir}: {what}; pass a local model folder (config.json and weights)")
        settings = pooling_settings(read_pooling(model_dir), pooling, normalize)
        engine = resolve(engine, quantize, device)
        if engine == "onnx" and model is None:
            require_onnxruntime(quantize, device)
            return cls(load_graph(model_dir, "encoder"), Tokenizer.from_pretrained(model_dir), settings, model_dir)
        tokenizer = Tokenizer.from_pretrained(model_dir)
        if model is None:
            # A task checkpoint's encoder is under `bert.`: load_pretrained strips it, and a missing
            # encoder tensor is a CheckpointError naming it; head tensors (classifier.*, cls.*) are unused here.
            model, _report = load_pretrained(BertModel, model_dir, add_pooling_layer=False, output_loading_info=True)
            check_weights(model, model_dir)  # before quantizing: int8 cannot be built from NaN
            if device is not None:
                model.to(device)
            model = quantize_model(model, quantize, calibration(quantize, tokenizer))  # None: as it is
        if engine == "auto":
            # the torch side is the BertModel (quantized in place or not) loaded above, or the one given
            return cls(AutoModel(model, load_graph(model_dir, "encoder")), tokenizer, settings, model_dir)
        return cls(model, tokenizer, settings, model_dir)

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
            hidden, mask = encoder_forward(self.model, rows, self.tokenizer.pad_token_id)  # (B, S, H), (B, S)
            vectors = pool(hidden, mask, self.pooling.mode)  # (B, H)
            if self.pooling.normalize:
                vectors = F.normalize(vectors, p=2, dim=1)
            check_outputs(self.model_dir, "vectors", vectors)
        return vectors.float().cpu()

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
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
    engine: str = "torch",
) -> np.ndarray:
    """Sentence vectors: one string -> (H,), a list -> (n, H) float32, in input order.

    model: a model folder (loaded on every call: keep an Encoder to encode many times), an Encoder,
    or a bertkit model (BertModel or a task model: its encoder), then with `tokenizer` (a Tokenizer
    or its folder). pooling / normalize override what the folder says (default: mean, not normalized).
    engine: "torch", or "onnx" / "auto" for a model folder (Encoder.from_pretrained).
    """
    from .model import BertPreTrainedModel
    from .tokenizer import Tokenizer

    single = isinstance(texts, str)
    batch = _check_texts([texts] if single else texts)
    _check_batch_size(batch_size)
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
        encoder = Encoder.from_pretrained(model, pooling=pooling, normalize=normalize, engine=engine)
    else:
        raise BertkitError(
            f"model must be a model folder, an Encoder or a bertkit BertModel, got {type(model).__name__}"
        )
    vectors = encoder.encode(batch, batch_size)
    return vectors[0] if single else vectors


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
