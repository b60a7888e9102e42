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

import dataclasses
import io
import json
import os
import sys
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .errors import BertkitError, CheckpointError
from .finite import check_outputs, check_weights
from .inference import calibration, check_output, encoder_forward, to_json
from .options import opt, parse
from .quantize import CHOICES as QUANTIZE_CHOICES, FLAG_HELP as QUANTIZE_HELP, quantize as quantize_model
from .text import is_empty_text

POOLING_MODES = ("mean", "cls", "max", "mean_sqrt_len")
# sentence-transformers' mode names (pooling_mode / pooling_mode_*_token(s) keys) -> bertkit's
_ST_MODES = {"mean": "mean", "cls": "cls", "max": "max", "mean_sqrt_len_tokens": "mean_sqrt_len",
             "weightedmean": None, "lasttoken": None}  # None: sentence-transformers has it, bertkit does not
_ST_LEGACY_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                   "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                   "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
OUTPUT_SUFFIXES = (".npy", ".jsonl")
DATA_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json")  # (+ .gz) --file rows read as `bertkit predict --file` reads them
# what an EmptyText says of the text it names
EMPTY_TEXT = ("is empty (no text once whitespace, zero-width and control characters are left out): there is nothing "
              "to embed")


class PoolingConfigError(BertkitError, ValueError):
    """A sentence-transformers folder whose pooling settings cannot be read or are not implemented."""


class EmptyText(BertkitError, ValueError):
    """A text with nothing to embed (text.is_empty_text): refused rather than embedded as [CLS] [SEP]."""

    def __init__(self, index: int, where: str | None = None):
        super().__init__(f"{where or f'texts[{index}]'} {EMPTY_TEXT}")
        self.index = index


class TooLong(BertkitError, ValueError):
    """A text with more tokens than the encoder takes (and truncation was not allowed)."""

    def __init__(self, tokens: int, limit: int):
        super().__init__(f"the text has {tokens} tokens with [CLS] and [SEP]; the limit is {limit}: shorten it or "
                         "allow truncation")
        self.tokens = tokens
        self.limit = limit


@dataclass(frozen=True)
class Pooling:
    """How token vectors become one sentence vector."""

    mode: str  # "mean" | "cls" | "max" | "mean_sqrt_len"
    normalize: bool  # L2-normalize the pooled vector
    max_seq_length: int | None  # from sentence_bert_config.json, else None (the model's max_position_embeddings)
    source: str  # where the settings came from, e.g. "1_Pooling/config.json" or "flags"


# ----- reading a sentence-transformers folder ----------------------------------------------------
def _read_json(path: str, what: str):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as e:
        raise PoolingConfigError(f"{path}: not valid JSON ({e.msg}, line {e.lineno} column {e.colno}); it should "
                                 f"hold {what}") from None
    except UnicodeDecodeError:
        raise PoolingConfigError(f"{path}: not UTF-8 text; it should hold {what}") from None
    except OSError as e:
        raise PoolingConfigError(f"{path}: cannot read ({e.strerror or e})") from None


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
    modules = _read_json(modules_path, "a list of the sentence-transformers modules")
    if not isinstance(modules, list) or not all(isinstance(m, dict) and isinstance(m.get("type"), str)
                                                for m in modules):
        raise PoolingConfigError(f"{modules_path}: expected a JSON list of objects each with a \"type\" (e.g. "
                                 "sentence_transformers.models.Pooling)")
    pooling_path, normalize, transformer_dir = None, False, model_dir
    for module in modules:
        kind = module["type"].rsplit(".", 1)[-1]
        path = module.get("path", "")
        if not isinstance(path, str):
            raise PoolingConfigError(f"{modules_path}: module {module['type']} has a \"path\" that is not a string")
        if kind == "Transformer":
            transformer_dir = os.path.join(model_dir, path)
        elif kind == "Pooling":
            pooling_path = os.path.join(model_dir, path, "config.json")
        elif kind == "Normalize":
            normalize = True
        else:
            raise PoolingConfigError(f"{modules_path}: module {module['type']} is not implemented by bertkit (it "
                                     "runs Transformer, Pooling and Normalize only), so its embeddings would differ "
                                     "from sentence-transformers'")
    if pooling_path is None:
        raise PoolingConfigError(f"{modules_path}: has no sentence_transformers.models.Pooling module, so it does not "
                                 "say how to pool; pass --pooling (mean, cls, max, mean_sqrt_len)")
    mode = _pooling_mode(pooling_path)
    max_seq_length = _max_seq_length(transformer_dir, model_dir)
    return Pooling(mode, normalize, max_seq_length, os.path.relpath(pooling_path, model_dir))


def write_pooling(folder: str, pooling: Pooling, hidden_size: int) -> None:
    """The sentence-transformers files that say `pooling` for a folder whose BERT is at its root (read_pooling's
    inverse): modules.json (Transformer, Pooling, Normalize when normalizing), 1_Pooling/config.json,
    sentence_bert_config.json with max_seq_length when one is set."""
    from .files import atomic_write_text

    st = "sentence_transformers.models."
    modules = [{"idx": 0, "name": "0", "path": "", "type": st + "Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": st + "Pooling"}]
    if pooling.normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": st + "Normalize"})
    mode = {v: k for k, v in _ST_MODES.items() if v is not None}[pooling.mode]
    settings = {"word_embedding_dimension": hidden_size,
                **{key: value == mode for key, value in _ST_LEGACY_KEYS.items()}}
    os.makedirs(os.path.join(folder, "1_Pooling"), exist_ok=True)
    atomic_write_text(os.path.join(folder, "modules.json"), json.dumps(modules, indent=2) + "\n")
    atomic_write_text(os.path.join(folder, "1_Pooling", "config.json"), json.dumps(settings, indent=2) + "\n")
    if pooling.max_seq_length:
        atomic_write_text(os.path.join(folder, "sentence_bert_config.json"),
                          json.dumps({"max_seq_length": pooling.max_seq_length}, indent=2) + "\n")


def _pooling_mode(path: str) -> str:
    if not os.path.isfile(path):
        raise PoolingConfigError(f"{path}: no such file; modules.json names a Pooling module there")
    config = _read_json(path, "the pooling settings (pooling_mode_mean_tokens: true, ...)")
    if not isinstance(config, dict):
        raise PoolingConfigError(f"{path}: expected a JSON object of pooling settings, got a "
                                 f"{type(config).__name__}")
    if "pooling_mode" in config:  # sentence-transformers 5: "mean" or a list of modes
        modes = config["pooling_mode"]
        modes = [modes] if isinstance(modes, str) else modes
        if not isinstance(modes, list) or not modes or not all(isinstance(m, str) for m in modes):
            raise PoolingConfigError(f"{path}: pooling_mode must be a mode name or a list of them, got "
                                     f"{config['pooling_mode']!r}")
    else:
        for key, value in config.items():
            if key.startswith("pooling_mode") and not isinstance(value, bool):
                raise PoolingConfigError(f"{path}: {key} must be true or false, got {value!r}")
        unknown = [k for k in config if k.startswith("pooling_mode") and k not in _ST_LEGACY_KEYS]
        if unknown:
            raise PoolingConfigError(f"{path}: unknown pooling setting(s) {', '.join(unknown)}; known: "
                                     + ", ".join(_ST_LEGACY_KEYS))
        modes = [mode for key, mode in _ST_LEGACY_KEYS.items() if config.get(key)] or ["mean"]  # as ST defaults
    if len(modes) > 1:
        raise PoolingConfigError(f"{path}: pooling modes {', '.join(modes)} together (vectors concatenated) are not "
                                 "implemented by bertkit; pass --pooling to pick one")
    mode = modes[0]
    if mode not in _ST_MODES:
        raise PoolingConfigError(f"{path}: unknown pooling mode {mode!r}; sentence-transformers' modes are "
                                 + ", ".join(_ST_MODES))
    if _ST_MODES[mode] is None:
        raise PoolingConfigError(f"{path}: pooling mode {mode!r} is not implemented by bertkit (it has "
                                 f"{', '.join(POOLING_MODES)}); pass --pooling to pick one of them")
    return _ST_MODES[mode]


def _max_seq_length(transformer_dir: str, model_dir: str) -> int | None:
    for folder in dict.fromkeys((transformer_dir, model_dir)):
        path = os.path.join(folder, "sentence_bert_config.json")
        if not os.path.isfile(path):
            continue
        config = _read_json(path, "the Transformer module's settings (max_seq_length)")
        if not isinstance(config, dict):
            raise PoolingConfigError(f"{path}: expected a JSON object, got a {type(config).__name__}")
        value = config.get("max_seq_length")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 2):
            raise PoolingConfigError(f"{path}: max_seq_length must be an integer >= 2 ([CLS] and [SEP]), got "
                                     f"{value!r}")
        return value
    return None


# ----- pooling -----------------------------------------------------------------------------------
def pool(hidden: Tensor, attention_mask: Tensor, mode: str) -> Tensor:
    """(B, S, H) token vectors, (B, S) mask of real tokens -> (B, H), padding left out.

    mean: the average of the real tokens; mean_sqrt_len: their sum / sqrt(count); max: the
    largest value of each dimension over the real tokens; cls: the first token ([CLS]).
    """
    if mode not in POOLING_MODES:
        raise BertkitError(f"pooling mode {mode!r} is not one of {', '.join(POOLING_MODES)}")
    if hidden.dim() != 3 or attention_mask.shape != hidden.shape[:2]:
        raise BertkitError(f"pool takes hidden (B, S, H) and attention_mask (B, S); got {tuple(hidden.shape)} and "
                           f"{tuple(attention_mask.shape)}")
    if mode == "cls":
        return hidden[:, 0]
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, S, 1)
    if mode == "max":
        return hidden.masked_fill(mask == 0, float("-inf")).max(dim=1).values
    total = (hidden * mask).sum(dim=1)  # (B, H)
    count = mask.sum(dim=1).clamp(min=1e-9)  # (B, 1), as sentence-transformers clamps
    return total / count if mode == "mean" else total / count.sqrt()


# ----- the encoder -------------------------------------------------------------------------------
def _settings(folder: Pooling | None, pooling: str | None, normalize: bool | None) -> Pooling:
    """The folder's settings with the flags over them; mean, unnormalized without either."""
    if pooling is not None and pooling not in POOLING_MODES:
        raise BertkitError(f"pooling must be one of {', '.join(POOLING_MODES)}, got {pooling!r}")
    if normalize is not None and not isinstance(normalize, bool):
        raise BertkitError(f"normalize must be True, False or None, got {normalize!r}")
    flags = [f"{name}={value}" for name, value in (("pooling", pooling), ("normalize", normalize))
             if value is not None]
    if folder is None:
        base = Pooling("mean", False, None, "default (mean, not normalized)")
    else:
        base = folder
    if not flags:
        return base
    source = "flags" if len(flags) == 2 or folder is None else f"{folder.source} + flags"
    return dataclasses.replace(base, mode=pooling or base.mode, normalize=base.normalize if normalize is None
                               else normalize, source=f"{source} ({', '.join(flags)})")


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
        return (f"Encoder(hidden={self.model.config.hidden_size}, pooling={self.pooling.mode}, "
                f"normalize={self.pooling.normalize}, max_tokens={self.max_tokens}, from {self.pooling.source})")

    @classmethod
    def from_pretrained(cls, model_dir, *, pooling: str | None = None, normalize: bool | None = None,
                        quantize: str | None = None, device: str | torch.device | None = None,
                        model=None) -> "Encoder":
        """The encoder of a model folder: a plain BertModel, a sentence-transformers folder, or a
        fine-tuned task model (its `bert.` weights; the head is left out). Flags override the folder.
        model: the folder's encoder already loaded (a task model's `.bert`, quantized or not as it is),
        shared instead of loading a second copy."""
        from .checkpoint import load_pretrained
        from .model import BertModel
        from .tokenizer import Tokenizer

        model_dir = os.fspath(model_dir)
        if not os.path.isdir(model_dir):
            what = "not a directory" if os.path.exists(model_dir) else "no such directory"
            raise CheckpointError(f"{model_dir}: {what}; pass a local model folder (config.json and weights)")
        settings = _settings(read_pooling(model_dir), pooling, normalize)
        if model is not None:
            return cls(model, Tokenizer.from_pretrained(model_dir), settings, model_dir)
        # A task checkpoint's encoder is under `bert.`: load_pretrained strips it, and a missing
        # encoder tensor is a CheckpointError naming it; head tensors (classifier.*, cls.*) are unused here.
        model, _report = load_pretrained(BertModel, model_dir, add_pooling_layer=False, output_loading_info=True)
        check_weights(model, model_dir)  # before quantizing: int8 cannot be built from NaN
        if device is not None:
            model.to(device)
        tokenizer = Tokenizer.from_pretrained(model_dir)
        model = quantize_model(model, quantize, calibration(quantize, tokenizer))  # None: as it is
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
        rows = self.tokenizer(texts, truncation=True, max_length=self.max_tokens, return_token_type_ids=False,
                              return_attention_mask=False)["input_ids"]
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
        out = np.empty((len(rows), self.model.config.hidden_size), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
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


def encode(model, texts, batch_size: int = 32, normalize: bool | None = None, pooling: str | None = None,
           tokenizer=None) -> np.ndarray:
    """Sentence vectors: one string -> (H,), a list -> (n, H) float32, in input order.

    model: a model folder (loaded on every call: keep an Encoder to encode many times), an Encoder,
    or a bertkit model (BertModel or a task model: its encoder), then with `tokenizer` (a Tokenizer
    or its folder). pooling / normalize override what the folder says (default: mean, not normalized).
    """
    from .model import BertPreTrainedModel
    from .tokenizer import Tokenizer

    single = isinstance(texts, str)
    batch = _check_texts([texts] if single else texts)
    _check_batch_size(batch_size)
    if isinstance(model, Encoder):
        if tokenizer is not None:
            raise BertkitError("an Encoder has its own tokenizer; pass tokenizer only with a BertModel")
        encoder = model if pooling is None and normalize is None else \
            Encoder(model.model, model.tokenizer, _settings(model.pooling, pooling, normalize), model.model_dir)
    elif isinstance(model, BertPreTrainedModel):
        if tokenizer is None:
            raise BertkitError("encode(model, ...) with a model object needs tokenizer= (a Tokenizer or its folder)")
        if not isinstance(tokenizer, Tokenizer):
            tokenizer = Tokenizer.from_pretrained(tokenizer)
        encoder = Encoder(model.base_model, tokenizer, _settings(None, pooling, normalize))
    elif isinstance(model, (str, os.PathLike)):
        if tokenizer is not None:
            raise BertkitError("a model folder has its own tokenizer; pass tokenizer only with a BertModel")
        encoder = Encoder.from_pretrained(model, pooling=pooling, normalize=normalize)
    else:
        raise BertkitError(f"model must be a model folder, an Encoder or a bertkit BertModel, got "
                           f"{type(model).__name__}")
    vectors = encoder.encode(batch, batch_size)
    return vectors[0] if single else vectors


# ----- bertkit embed -----------------------------------------------------------------------------
@dataclass
class EmbedConfig:
    """Sentence embeddings of texts (arguments, or --file: a text per line, or a .csv / .tsv / .jsonl column): .npy
    or JSON lines."""

    model: str = opt("", "a model folder: sentence-transformers, plain BERT, or bertkit finetune's --out",
                     required=True)
    texts: list[str] = opt(list, "texts, one per argument", positional=True, nargs="*")
    file: str | None = opt(None, "one text per line (UTF-8; no empty lines); .csv / .tsv (a header row) or .jsonl / "
                                 ".json (an object per line), also .gz: the --text-field of each row, as `bertkit "
                                 "predict --file` reads them")
    text_field: str = opt("text", "--file .csv / .tsv / .jsonl: the column / field with the texts")
    output: str = opt("", "where to write: .npy (an (n, H) float32 array) or .jsonl "
                          '({"index": i, "embedding": [...]} per line)', required=True)
    batch_size: int = opt(32, "texts per forward pass")
    pooling: str | None = opt(None, "default: from the folder (1_Pooling/config.json), else mean",
                              choices=list(POOLING_MODES))
    normalize: bool | None = opt(None, "L2-normalize each vector; None: as the folder says (a sentence-transformers "
                                "Normalize module), else not")  # None: the folder decides
    quantize: str | None = opt(None, QUANTIZE_HELP, choices=QUANTIZE_CHOICES)

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
        rows = [(n, "" if r is None else records.string(path, n, r, text_field, "text_field", required=True))
                for n, r in table.records]
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
    encoder = Encoder.from_pretrained(cfg.model, pooling=cfg.pooling, normalize=cfg.normalize, quantize=cfg.quantize)
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
        atomic_write_text(cfg.output, "".join(to_json({"index": i, "embedding": v.tolist()}) + "\n"
                                              for i, v in enumerate(vectors)))
    print(f"embedded {len(texts)} text(s) -> {vectors.shape[1]}-dim vectors ({encoder.pooling.mode} pooling"
          f"{', normalized' if encoder.pooling.normalize else ''}; {encoder.pooling.source}) -> {cfg.output}",
          file=sys.stderr)
    return 0
