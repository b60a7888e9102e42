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

import io
import os
import sys
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .engines import ENGINE_HELP, AutoModel, Engine, load_graph, require_onnxruntime, resolve
from .errors import BertkitError, CheckpointError
from .finite import check_outputs, check_weights
from .inference import calibration, check_output, encoder_forward, to_json
from .options import opt, parse
from .pooling import POOLING_MODES, Pooling, PoolingConfigError, pool, pooling_settings, read_pooling  # noqa: F401 (bertkit.embed's names too)
from .quantize import CHOICES as QUANTIZE_CHOICES
from .quantize import FLAG_HELP as QUANTIZE_HELP
from .quantize import quantize as quantize_model
from .text import is_empty_text

OUTPUT_SUFFIXES = (".npy", ".jsonl")
DATA_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json")  # (+ .gz) --file rows read as `bertkit predict --file` reads them
# what an EmptyText says of the text it names
EMPTY_TEXT = (
    "is empty (no text once whitespace, zero-width and control characters are left out): there is nothing to embed"
)


class EmptyText(BertkitError, ValueError):
    """A text with nothing to embed (text.is_empty_text): refused rather than embedded as [CLS] [SEP]."""

    def __init__(self, index: int, where: str | None = None):
        super().__init__(f"{where or f'texts[{index}]'} {EMPTY_TEXT}")
        self.index = index


class TooLong(BertkitError, ValueError):
    """A text with more tokens than the encoder takes (and truncation was not allowed)."""

    def __init__(self, tokens: int, limit: int):
        super().__init__(
            f"the text has {tokens} tokens with [CLS] and [SEP]; the limit is {limit}: shorten it or allow truncation"
        )
        self.tokens = tokens
        self.limit = limit


# ----- the encoder -------------------------------------------------------------------------------
class Encoder:
    """A BertModel + Tokenizer + Pooling: texts -> one vector each."""

    def __init__(self, model, tokenizer, pooling: Pooling, model_dir: str | None = None):
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
        model_dir,
        *,
        pooling: str | None = None,
        normalize: bool | None = None,
        quantize: str | None = None,
        device: str | torch.device | None = None,
        model=None,
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
            model = AutoModel(model, load_graph(model_dir, "encoder"))
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


def _check_texts(texts) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise BertkitError(f"texts must be a list of strings, got {type(texts).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise BertkitError(f"texts[{i}] is a {type(text).__name__}, not a string")
    return list(texts)


def _check_batch_size(batch_size) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise BertkitError(f"batch_size must be a positive integer, got {batch_size!r}")


def encode(
    model,
    texts,
    batch_size: int = 32,
    normalize: bool | None = None,
    pooling: str | None = None,
    tokenizer=None,
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


# ----- bertkit embed -----------------------------------------------------------------------------
@dataclass
class EmbedConfig:
    """Sentence embeddings of texts (arguments, or --file: a text per line, or a .csv / .tsv / .jsonl column): .npy
    or JSON lines."""

    model: str = opt(
        "", "a model folder: sentence-transformers, plain BERT, or bertkit finetune's --out", required=True
    )
    texts: list[str] = opt(list, "texts, one per argument", positional=True, nargs="*")
    file: str | None = opt(
        None,
        "one text per line (UTF-8; no empty lines); .csv / .tsv (a header row) or .jsonl / "
        ".json (an object per line), also .gz: the --text-field of each row, as `bertkit "
        "predict --file` reads them",
    )
    text_field: str = opt("text", "--file .csv / .tsv / .jsonl: the column / field with the texts")
    output: str = opt(
        "",
        'where to write: .npy (an (n, H) float32 array) or .jsonl ({"index": i, "embedding": [...]} per line)',
        required=True,
    )
    batch_size: int = opt(32, "texts per forward pass")
    pooling: str | None = opt(
        None, "default: from the folder (1_Pooling/config.json), else mean", choices=list(POOLING_MODES)
    )
    normalize: bool | None = opt(
        None, "L2-normalize each vector; None: as the folder says (a sentence-transformers Normalize module), else not"
    )  # None: the folder decides
    quantize: str | None = opt(None, QUANTIZE_HELP, choices=QUANTIZE_CHOICES)
    engine: Engine = opt("torch", ENGINE_HELP)

    def problem(self) -> str | None:
        if bool(self.texts) == bool(self.file):
            return "pass texts as arguments or --file FILE (one of them)"
        if not self.output.endswith(OUTPUT_SUFFIXES):
            return f"argument --output: {self.output} must end in .npy or .jsonl"
        if self.batch_size < 1:
            return f"argument --batch-size: must be a positive integer, got {self.batch_size}"
        return None


def _read_texts(path: str, text_field: str) -> list[tuple[int, str]]:
    """(line number, text) of --file: the `text_field` of each row of a .csv / .tsv / .jsonl / .json file (the
    records `bertkit predict --file` reads; a blank line is an empty text), else every line."""
    from .data import records
    from .data.corpus import read_lines

    if not os.path.exists(path):
        raise BertkitError(f"--file {path}: no such file")
    if (path[:-3] if path.endswith(".gz") else path).lower().endswith(DATA_SUFFIXES):
        fmt = records.file_format(path, "embed", ("csv", "tsv", "jsonl"))
        table = records.table(path, records.file_lines(path), fmt, keep_empty=True)
        table.require(path, text_field, "text", "text_field")
        rows = [
            (n, "" if r is None else records.string(path, n, r, text_field, "text_field", required=True))
            for n, r in table.records
        ]
    else:
        rows = list(enumerate(read_lines(path), 1))
    if not rows:
        raise BertkitError(f"--file {path}: the file is empty: there is nothing to embed")
    return rows


def embed_main(argv: list[str]) -> int:
    from .files import atomic_write, atomic_write_text

    cfg = parse(EmbedConfig, argv, prog="bertkit embed")
    check_output(cfg.output, "--output", [cfg.file])
    if cfg.file:
        lines = _read_texts(cfg.file, cfg.text_field)
        texts, where = [text for _, text in lines], [f"--file {cfg.file}: line {n}" for n, _ in lines]
    else:
        texts, where = cfg.texts, [f"text {i + 1}" for i in range(len(cfg.texts))]
    for i, text in enumerate(texts):  # before the model loads
        if is_empty_text(text):
            raise EmptyText(i, where[i])
    encoder = Encoder.from_pretrained(
        cfg.model, pooling=cfg.pooling, normalize=cfg.normalize, quantize=cfg.quantize, engine=cfg.engine
    )
    try:
        vectors = encoder.encode(texts, cfg.batch_size)
    except EmptyText as e:  # by the tokenizer's own normaliser: e.g. only accents, which an uncased one drops
        raise EmptyText(e.index, where[e.index]) from None
    if cfg.output.endswith(".npy"):
        buffer = io.BytesIO()
        np.save(buffer, vectors)

        def write(tmp: str) -> None:
            with open(tmp, "wb") as fh:
                fh.write(buffer.getvalue())

        atomic_write(cfg.output, write)
    else:
        atomic_write_text(
            cfg.output, "".join(to_json({"index": i, "embedding": v.tolist()}) + "\n" for i, v in enumerate(vectors))
        )
    print(
        f"embedded {len(texts)} text(s) -> {vectors.shape[1]}-dim vectors ({encoder.pooling.mode} pooling"
        f"{', normalized' if encoder.pooling.normalize else ''}; {encoder.pooling.source}) -> {cfg.output}",
        file=sys.stderr,
    )
    return 0
