"""What `bertkit serve` runs: a model directory loaded once, and the work of each route on it.

    model dir --load (bertkit/inference.py, as the commands load it)--> encoder (every BERT: /embed,
                        /v1/embeddings); task model (a fine-tuned folder: /predict, through bertkit/tasks as
                        `bertkit predict`); MLM model (a pretrained folder with its MLM head: /fill-mask)
    request inputs --rows_for_*--> rows (token ids / task features) --Batcher--> run(key, rows) --> answers

Other clients' routes (compat.py shapes their answers) use the same rows and results, and a few more: TEI's
/embed options (rows_for_tei_embed, tei_vectors; "embed-raw": vectors before the folder's Normalize), token
ids on /v1/embeddings (rows_for_embed_ids), raw scores (class_logits), entity scores (tag_scores), /decode.

What a /predict input may hold is the task's: its input fields (task.input_fields: name and kind) check
an object, task.from_line reads a string as `bertkit predict` reads a line, task.example_from makes the
example (qa numbers it), task.batch_group says which requests' features may share a batch.
Converting inputs to rows and rows' results to answers runs in calls.py's tokenizer thread (inline on the
event loop for a small request while that thread is idle); `run` runs in the batcher's worker thread and
is the only code that touches the model.

An input with no text (only whitespace, zero-width or control characters: text.is_empty_text, as `bertkit
predict` and `bertkit embed` decide) is /predict's "empty input" row and /embed's 422 empty_input. At start-up
the weights are checked (inference.check_weights) and one tiny request of each kind is run (probe): a model
whose outputs are not finite is a NonFiniteError, and the server does not start. While serving, the same checks
of every forward pass raise it in `run` (an error answer, never NaN in a 200).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, replace
from typing import Any, cast

import torch
import torch.nn.functional as F

from ..checkpoint import read_config
from ..embed import Encoder, TooLong
from ..engines import DEFAULT_ENGINE, AutoModel, load_mlm, load_task_model, runs_on
from ..errors import BertkitError
from ..inference import run_model, with_windows
from ..masked_lm import fill_mask, filled_text, mask_positions
from ..model import BertModel, InferenceModel
from ..pooling import trained_dims
from ..pretrained import PreTrainedModel
from ..tasks import Field, Task, TaskDataError, TaskOptions, task_of
from ..tasks.classify import aggregate_windows
from ..text import is_empty_text
from .batcher import Handlers, Key
from .settings import PREDICT_MAX_TOKENS

MLM_ARCHITECTURES = ("BertForMaskedLM", "BertForPreTraining", "ElectraForMaskedLM")
FILL_MASK_MAX_TOP_K = 20  # the largest "top_k" a /fill-mask request may ask for


class InputProblem(BertkitError):
    """A request the server refuses: an HTTP status (4xx), a type for clients to switch on, a message."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


@dataclass
class Prepared:
    """A request's inputs as rows for the batcher."""

    key: Key  # what kind of batch the rows go in (Engine.handlers: the table that runs them)
    rows: list
    tokens: list[int]  # real tokens of each row
    examples: list | None = None  # /predict: the examples the rows came from
    empty: list[int] | None = None  # /predict: inputs without text (answered without the model)


def raw_encoder(encoder: Encoder) -> Encoder:
    """The folder's encoder without its Normalize module (same weights); the encoder itself if it has none."""
    if not encoder.pooling.normalize:
        return encoder
    return Encoder(encoder.model, encoder.tokenizer, replace(encoder.pooling, normalize=False), encoder.model_dir)


class Engine:
    """A model directory served: its encoder, its task head or MLM head, its tokenizer and limits."""

    def __init__(
        self,
        model_dir: str,
        *,
        quantize: str | None = None,
        pooling: str | None = None,
        normalize: bool | None = None,
        max_input_tokens: int | None = None,
        engine: str = DEFAULT_ENGINE,
        device: str = "auto",
        precision: str = "auto",
    ) -> None:
        if not os.path.isdir(model_dir):
            raise BertkitError(
                f"--model {model_dir}: not a directory; pass a model folder (bertkit finetune / "
                "pretrain --out, or a sentence-transformers / Hugging Face BERT folder)"
            )
        config = read_config(model_dir)
        self.model_dir = model_dir
        self.name = os.path.basename(os.path.normpath(model_dir))
        self.architecture = (config.architectures or ["BertModel"])[0]
        # once, before loading: a device that is not here is refused; "auto" without ONNX Runtime warns once
        engine, self.engine_why, self.where = runs_on(engine, quantize, device, precision)
        self.quantize, self.engine_name = quantize, engine
        runs = {"engine": engine, "device": device, "precision": precision}
        self.load_heads(model_dir, quantize, runs)
        self.encoder = Encoder.from_pretrained(
            model_dir, pooling=pooling, normalize=normalize, quantize=quantize, model=self.shared_encoder(), **runs
        )
        self.tokenizer = self.encoder.tokenizer
        self.embed_limit = (
            self.encoder.max_tokens if max_input_tokens is None else min(max_input_tokens, self.encoder.max_tokens)
        )
        self.predict_limit = max_input_tokens or PREDICT_MAX_TOKENS
        self.dim = self.encoder.model.config.hidden_size
        # shorter sizes the vectors were trained to keep meaning at (MatryoshkaLoss): /v1/embeddings' dimensions
        self.trained_dims = tuple(d for d in trained_dims(model_dir) if d < self.dim)
        # what runs a batch, by its key's kind: one entry per kind of work this model can do
        self.handlers = Handlers(
            {
                "embed": self._embed,
                "embed-raw": self._embed_raw,
                **({"predict": self._predict} if self.task else {}),
                **({"fill-mask": self._fill_mask} if self.mlm else {}),
            }
        )
        self.raw_encoder = raw_encoder(self.encoder)  # TEI's "normalize": false
        self.probe()

    def load_heads(self, model_dir: str, quantize: str | None, runs: dict[str, str]) -> None:
        """The folder's task model (a fine-tuned folder: task, task_model, opts) or MLM model (a pretrained folder
        with its MLM head: mlm); neither for an encoder alone."""
        self.task: Task | None = None
        self.task_model: InferenceModel | None = None  # a BertFor* model, or AutoModel / OnnxModel in its place
        self.mlm: InferenceModel | None = None
        try:
            task_name = task_of(model_dir)
        except TaskDataError:
            task_name = None
        if task_name is not None:
            loaded = load_task_model(model_dir, task_name, quantize=quantize, **runs)
            self.task, self.task_model = loaded.task, loaded.model
            self.opts = with_windows(TaskOptions(), loaded.tokenizer, self.task_model)  # as `bertkit predict` cuts them
        elif self.architecture in MLM_ARCHITECTURES:
            self.mlm = load_mlm(model_dir, quantize=quantize, **runs)

    def shared_encoder(self) -> BertModel | None:
        """The torch task / MLM model's encoder, which serves /embed too: one copy of the weights (None: no head,
        or a graph, which has no encoder to share: the onnx engine runs the encoder's own graph, auto shares the
        torch encoder beside it)."""
        headed = self.task_model if self.task_model is not None else self.mlm
        if headed is None or self.engine_name == "onnx":
            return None
        assert isinstance(headed, (PreTrainedModel, AutoModel))  # a graph alone only on the onnx engine
        # a ModernBertModel (ModernBERT's task and MLM models) stands in for a BertModel: the same call and output
        return cast("BertModel", headed.base_model)

    def probe(self) -> None:
        """One tiny request of each kind this model answers, run as requests run: outputs that are not finite
        (weights that overflow, e.g. in bfloat16) are a NonFiniteError before the server takes a request."""
        word = self.tokenizer.mask_token  # a token every vocabulary has
        prepared = [self.rows_for_embed([word], truncate=True)]
        if self.task:
            values = {f.name: [word, word] if f.kind == "texts" else word for f in self.task.input_fields if f.required}
            prepared.append(self.rows_for_predict([values], truncate=True))
        if self.mlm:
            prepared.append(self.rows_for_fill_mask([word]))
        for p in prepared:
            self.run(p.key, p.rows)

    @property
    def routes(self) -> list[str]:
        """The POST routes this model can answer."""
        return (
            ["/", "/embed", "/v1/embeddings", "/tokenize", "/decode"]
            + (["/predict"] if self.task else [])
            + (["/rerank"] if self.reranker else [])
            + (["/fill-mask"] if self.mlm else [])
        )

    @property
    def reranker(self) -> InferenceModel | None:
        """The task model where it is a re-ranker (/rerank): a classifier with one output, fine-tuned with
        problem_type regression, whose logit is the relevance score; else None."""
        task, model = self.task, self.task_model
        if task is not None and task.name == "classify" and model is not None:
            return model if model.config.problem_type == "regression" else None
        return None

    @property
    def head(self) -> str:
        """The model's head in words, as refusals name it: "a classify task head", "an MLM head", "no head"."""
        if self.task is not None:
            return f"a {self.task.name} task head"
        return "an MLM head" if self.mlm is not None else "no head (the encoder alone)"

    @property
    def described(self) -> str:
        """What a refusal says the served model is: its folder's name, architecture and head."""
        return f"{self.name} is a {self.architecture} with {self.head}"

    def pooling_info(self) -> dict:
        pooling = self.encoder.pooling
        return {"mode": pooling.mode, "normalize": pooling.normalize, "from": pooling.source}

    def labels(self) -> list[str] | None:
        if self.task is None or not self.task.labelled_outputs:
            return None
        assert self.task_model is not None  # loaded with its task
        config = self.task_model.config
        assert config.num_labels is not None  # BertConfig sets it from id2label
        return [config.id2label[i] for i in range(config.num_labels)]

    # ----- inputs -> rows (tokenizer thread) -------------------------------------------------------
    def rows_for_embed(self, texts: list[str], truncate: bool) -> Prepared:
        """/embed's rows: each text's [CLS] ... [SEP] ids, a long one refused (413) or cut at its end."""
        return self.rows_for_tei_embed(texts, truncate)

    def rows_for_predict(self, inputs: list, truncate: bool) -> Prepared:
        """inputs: strings (as lines of `bertkit predict --file`) or objects of the task's input fields."""
        task = self.task
        assert task is not None and self.task_model is not None  # /predict needs a task head (routes.NEEDS)
        examples: list = []
        for i, value in enumerate(inputs):
            if isinstance(value, str):
                # a character is at most one WordPiece token: count tokens only when the text could be too long
                tokens = len(self.tokenizer.encode(value)) if len(value) + 2 > self.predict_limit else 0
                if tokens > self.predict_limit:
                    if not truncate:
                        raise _too_long(i, tokens, self.predict_limit)
                    value = self._cut(value, self.predict_limit)
                try:
                    examples.append(task.from_line(value, i))  # as line i of `bertkit predict --file`
                except TaskDataError as e:
                    raise InputProblem(
                        422,
                        "wrong_type",
                        f"inputs[{i}]: {e}; send an object with {', '.join(f.name for f in task.input_fields)}",
                    ) from None
            else:
                values = _fields(i, value, task.input_fields)
                tokens = (
                    sum(
                        len(self.tokenizer.tokenize(text))
                        for f in task.input_fields
                        for text in f.texts(values.get(f.name))
                    )
                    + 3
                )
                if tokens > self.predict_limit:  # an object is not cut: which field to shorten is the client's call
                    raise _too_long(
                        i, tokens, self.predict_limit, hint="shorten its texts (truncate cuts plain string inputs only)"
                    )
                examples.append(task.example_from(values, i))
        blank = [task.is_empty(e, self.tokenizer) for e in examples]
        empty = [i for i, b in enumerate(blank) if b]
        kept = [e for e, b in zip(examples, blank) if not b]
        assert self.opts.seq_len is not None and self.opts.stride is not None  # with_windows settled both
        try:
            features = (
                task.encode(
                    self.tokenizer,
                    kept,
                    self.opts.seq_len,
                    self.opts.stride,
                    None,
                    self.task_model.config.problem_type,
                )
                if kept
                else []
            )
        except BertkitError as e:  # e.g. a question longer than the windows, choices of different counts
            raise InputProblem(422, "invalid_input", str(e)) from None
        group = task.batch_group(features[0]) if features else None  # choice: as many choices
        return Prepared(self.handlers.key("predict", group), features, [f.tokens for f in features], examples, empty)

    def rows_for_fill_mask(self, texts: list[str]) -> Prepared:
        assert self.mlm is not None  # /fill-mask needs an MLM head (routes.NEEDS)
        rows: list[list[int]] = []
        for i, text in enumerate(texts):
            ids = self.tokenizer.encode(text)
            if not mask_positions(ids, self.tokenizer):
                raise InputProblem(
                    422,
                    "invalid_input",
                    f"inputs[{i}] has no {self.tokenizer.mask_token}: put "
                    f"{self.tokenizer.mask_token} where a token is missing",
                )
            limit = self.mlm.config.max_position_embeddings
            if len(ids) > limit:
                raise _too_long(i, len(ids), limit, hint="fill-mask does not cut inputs (a [MASK] could be cut off)")
            rows.append(ids)
        return Prepared(self.handlers.key("fill-mask"), rows, [len(r) for r in rows])

    def rows_for_tei_embed(
        self,
        texts: list[str],
        truncate: bool,
        direction: str = "right",
        prompt_name: str | None = None,
        normalize: bool | None = None,
    ) -> Prepared:
        """TEI's /embed (huggingface_hub's feature_extraction): each text's [CLS] ... [SEP] ids, after the folder's
        prompt `prompt_name` (config_sentence_transformers.json "prompts", as sentence-transformers puts it), a long
        one refused (413) or, when truncate, cut on the `direction` side (Left / Right, either case);
        normalize=False on a folder that L2-normalizes runs as "embed-raw" (tei_vectors normalizes for True)."""
        side = direction.lower() if isinstance(direction, str) else direction
        if side not in ("left", "right"):
            raise InputProblem(
                422, "wrong_type", f'\'truncation_direction\' must be "Left" or "Right", got {direction!r}'
            )
        prompt = "" if prompt_name is None else self.prompt(prompt_name)
        rows = []
        for i, text in enumerate(texts):
            if is_empty_text(text, self.tokenizer):  # the text itself, not the prompt before it
                raise InputProblem(
                    422,
                    "empty_input",
                    f"inputs[{i}] is empty (no text once whitespace, zero-width "
                    "and control characters are left out): there is nothing to embed",
                )
            try:
                ids = self.encoder.token_ids(
                    prompt + text, truncate=truncate and side == "right", limit=self.embed_limit
                )
            except TooLong as e:
                if not truncate:
                    raise _too_long(i, e.tokens, e.limit) from None
                ids = self.tokenizer.encode(prompt + text)
                ids = ids[:1] + ids[1 - e.limit :]  # [CLS] + the last limit - 2 tokens + [SEP]
            rows.append(ids)
        raw = normalize is False and self.encoder.pooling.normalize
        return Prepared(self.handlers.key("embed-raw" if raw else "embed"), rows, [len(r) for r in rows])

    def rows_for_embed_ids(self, id_lists: list[list[int]], truncate: bool) -> Prepared:
        """/v1/embeddings' token-id inputs as rows: ids of this model's vocabulary, [CLS] put first and [SEP] last
        where they are not, so that tokenizer.encode(text) and tokenizer.encode(text, add_special_tokens=False)
        both give the text's own row (TEI and vLLM run ids as they come: without [CLS] the pooled vector is not
        the text's). Longer than the limit: cut to [CLS] + the first limit - 2 + [SEP] when truncate, else 413."""
        cls, sep, size = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id, self.encoder.model.config.vocab_size
        rows = []
        for i, ids in enumerate(id_lists):
            bad = next(
                (j for j, t in enumerate(ids) if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < size),
                None,
            )
            if bad is not None:
                raise InputProblem(
                    422,
                    "invalid_input",
                    f"input[{i}][{bad}] is {ids[bad]!r}, not a token id of this "
                    f"model (a whole number from 0 to {size - 1})",
                )
            row = ([] if ids[:1] == [cls] else [cls]) + list(ids) + ([] if ids[-1:] == [sep] else [sep])
            if len(row) <= 2:
                raise InputProblem(
                    422, "empty_input", f"input[{i}] holds no token but [CLS] / [SEP]: there is nothing to embed"
                )
            if len(row) > self.embed_limit:
                if not truncate:
                    raise InputProblem(
                        413,
                        "too_long",
                        f"input[{i}] has {len(row)} tokens with [CLS] and [SEP], more "
                        f"than the limit of {self.embed_limit}; send fewer ids",
                    )
                row = row[: self.embed_limit - 1] + [sep]
            rows.append(row)
        return Prepared(self.handlers.key("embed"), rows, [len(r) for r in rows])

    @functools.cached_property
    def prompts(self) -> dict[str, str]:
        """The folder's sentence-transformers prompts (config_sentence_transformers.json "prompts"), or {}."""
        path = os.path.join(self.model_dir, "config_sentence_transformers.json")
        if not os.path.isfile(path):
            return {}
        try:
            with open(path, encoding="utf-8") as fh:
                prompts = json.load(fh).get("prompts") or {}
        except (ValueError, AttributeError) as e:
            raise BertkitError(f"{self.name}/config_sentence_transformers.json cannot be read: {e}") from None
        if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
            raise BertkitError(f'{self.name}/config_sentence_transformers.json: "prompts" must map names to texts')
        return prompts

    def prompt(self, name: str) -> str:
        if name not in self.prompts:
            raise InputProblem(
                422,
                "invalid_input",
                f"prompt_name {name!r} is not one of this model's prompts: "
                f"{', '.join(map(repr, self.prompts)) or 'its folder has none'} "
                "(config_sentence_transformers.json)",
            )
        return self.prompts[name]

    def _cut(self, text: str, limit: int) -> str:
        """The start of `text` that tokenizes to at most `limit` tokens with [CLS] and [SEP]."""
        offsets = self.tokenizer(text, return_offsets_mapping=True)["offset_mapping"]
        return text[: offsets[limit - 2][1]]

    # ----- rows -> results (the batcher's worker thread) ------------------------------------------
    @torch.inference_mode()
    def run(self, key: Key, rows: list) -> list:
        return self.handlers(key, rows)

    def _embed(self, rows: list[list[int]]) -> list:
        return self.encoder.embed_ids(rows).tolist()

    def _embed_raw(self, rows: list[list[int]]) -> list:
        return self.raw_encoder.embed_ids(rows).tolist()

    def _predict(self, rows: list) -> list:
        assert self.task is not None and self.task_model is not None  # a "predict" handler only with a task head
        return run_model(self.task, self.task_model, rows, self.tokenizer.pad_token_id, batch_size=len(rows))

    def _fill_mask(self, rows: list[list[int]]) -> list:
        assert self.mlm is not None  # a "fill-mask" handler only with an MLM head
        # the most a request may ask for; fill_mask_answers keeps its top_k
        return fill_mask(self.mlm, self.tokenizer, rows, top_k=FILL_MASK_MAX_TOP_K)

    # ----- results -> answers (tokenizer thread) ---------------------------------------------------
    def predictions(self, prepared: Prepared, outputs: list) -> list[dict]:
        """One row per input, as `bertkit predict` writes them (empty inputs: the task's empty row)."""
        task, examples = self.task, prepared.examples
        assert task is not None and self.task_model is not None  # /predict needs a task head (routes.NEEDS)
        assert examples is not None and prepared.empty is not None  # rows_for_predict's
        rows = [task.empty_row(e) for e in examples]
        empty = set(prepared.empty)
        kept = [i for i in range(len(examples)) if i not in empty]
        if kept:
            answers = task.predictions(
                self.task_model.config, prepared.rows, outputs, [examples[i] for i in kept], self.opts
            )
            for i, row in zip(kept, answers):
                rows[i] = row
        return rows

    def fill_mask_answers(self, rows: list[list[int]], results: list, top_k: int) -> list:
        """Per input, per [MASK]: its top_k candidates as transformers' fill-mask pipeline writes them."""
        return [
            [
                [
                    {
                        "token": c.token,
                        "token_id": c.token_id,
                        "score": c.probability,
                        "sequence": filled_text(self.tokenizer, ids, fill.position, c.token_id),
                    }
                    for c in fill.candidates[:top_k]
                ]
                for fill in fills
            ]
            for ids, fills in zip(rows, results)
        ]

    def tei_vectors(self, vectors: list, normalize: bool | None) -> list:
        """rows_for_tei_embed's results as asked: normalize=True L2-normalizes vectors of a folder that does not
        (as embed_ids does it); None or False: as they came (the folder's, or embed-raw's)."""
        if normalize and not self.encoder.pooling.normalize and len(vectors):
            return F.normalize(torch.tensor(vectors, dtype=torch.float32), p=2, dim=1).tolist()
        return vectors

    def class_logits(self, prepared: Prepared, outputs: list) -> list[list[float] | None]:
        """Per /predict input of a classifier: its logits, the mean over its windows (those its probabilities come
        from: TEI's raw_scores); None for an input without text."""
        if self.task is None or self.task.name != "classify":
            raise BertkitError(f"class_logits needs a classifier; {self.name} is {self.architecture}")
        kept = _with_text(prepared)
        logits = aggregate_windows(prepared.rows, outputs, len(kept)) if kept else []
        return _per_input(prepared, kept, [x.tolist() for x in logits])

    def tag_scores(self, prepared: Prepared, outputs: list) -> list[list[float | None] | None]:
        """Per /predict input of a tagger, per word: the probability of its tag (the softmax at the word's first
        piece in the first window holding it: the piece tag_predictions reads); None for a word without pieces
        (a space) and for an input without text."""
        if self.task is None or self.task.name != "tag":
            raise BertkitError(f"tag_scores needs a tagger; {self.name} is {self.architecture}")
        kept = _with_text(prepared)
        assert prepared.examples is not None  # rows_for_predict's
        scores: list[list[float | None]] = [[None] * len(prepared.examples[i].tokens) for i in kept]
        for f, logits in zip(prepared.rows, outputs):
            best = logits.softmax(-1).max(-1).values.tolist()
            for j, w in enumerate(f.words):
                if w is not None and scores[f.example][w] is None:
                    scores[f.example][w] = best[j]
        return _per_input(prepared, kept, scores)

    def decode(self, id_lists: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        """TEI's /decode: each list of ids as text (bertkit's tokenizer: no spaces beside CJK characters)."""
        texts: list[str] = []
        for i, ids in enumerate(id_lists):
            try:
                texts.append(self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))
            except BertkitError as e:  # an id outside the vocabulary
                raise InputProblem(422, "invalid_input", f"ids[{i}]: {e}") from None
        return texts

    def tokenize(self, texts: list[str], add_special_tokens: bool) -> list[list[dict]]:
        enc = self.tokenizer(
            texts, return_offsets_mapping=True, return_special_tokens_mask=True, add_special_tokens=add_special_tokens
        )
        out: list[list[dict]] = []
        for i, text in enumerate(texts):
            ids, offsets, special = enc["input_ids"][i], enc["offset_mapping"][i], enc["special_tokens_mask"][i]
            out.append(
                [
                    {
                        "id": t,
                        "token": tok,
                        "special": bool(s),
                        "start": None if s else a,
                        "stop": None if s else b,
                        "text": "" if s else text[a:b],
                    }
                    for t, tok, (a, b), s in zip(ids, self.tokenizer.convert_ids_to_tokens(ids), offsets, special)
                ]
            )
        return out


def _with_text(prepared: Prepared) -> list[int]:
    """The /predict inputs that have text (the others are answered without the model), in order."""
    assert prepared.examples is not None and prepared.empty is not None  # rows_for_predict's
    empty = set(prepared.empty)
    return [i for i in range(len(prepared.examples)) if i not in empty]


def _per_input(prepared: Prepared, kept: list[int], values: list) -> list:
    """`values` of the inputs `kept`, placed at their inputs; None at the inputs without text."""
    assert prepared.examples is not None  # rows_for_predict's
    out: list = [None] * len(prepared.examples)
    for i, value in zip(kept, values):
        out[i] = value
    return out


def _too_long(i: int, tokens: int, limit: int, hint: str = 'send "truncate": true to cut it') -> InputProblem:
    return InputProblem(413, "too_long", f"inputs[{i}] has {tokens} tokens, more than the limit of {limit}; {hint}")


def _fields(i: int, value: Any, fields: tuple[Field, ...]) -> dict:
    """An input object's values, checked against the task's input fields (their kinds say what each holds)."""
    names = ", ".join(f.name for f in fields)
    if not isinstance(value, dict):
        raise InputProblem(
            422, "wrong_type", f"inputs[{i}] is {json_type(value)}; each input is a string or an object with {names}"
        )
    unknown = sorted(set(value) - {f.name for f in fields})
    if unknown:
        raise InputProblem(
            422, "wrong_type", f"inputs[{i}] has unknown field(s) {', '.join(unknown)}; this model takes {names}"
        )
    values: dict[str, Any] = {}
    for field in fields:
        v = value.get(field.name)
        if v is None:
            if field.required:
                raise InputProblem(422, "wrong_type", f"inputs[{i}] has no {field.name!r} ({field.expects})")
            continue
        if not field.accepts(v):
            raise InputProblem(
                422, "wrong_type", f"inputs[{i}].{field.name} must be {field.expects}, got {json_type(v)}"
            )
        values[field.name] = v
    return values


def json_type(value: Any) -> str:
    """How a JSON value is called in an error message."""
    names: dict[type, str] = {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)
