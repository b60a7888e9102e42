"""`bertkit serve`'s routes: one table entry each, its request model (schemas.py) and its handler.

    Route(path, request model, handler, summary, needs)
    handler(engine, request, call) -> (answer, inputs answered)     async; `call` (app.py) runs tokenizer work
                                                                    and the model's batches

A new route is a model in schemas.py and an entry in ROUTES; app.py reads the body, checks it against the
model, counts its inputs (413 past --max-inputs), and turns what a handler raises into JSON errors.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import NonFiniteError
from . import compat
from .engine import FILL_MASK_MAX_TOP_K, Engine, InputProblem
from .schemas import (
    Body,
    DecodeRequest,
    EmbedRequest,
    FillMaskRequest,
    InferenceRequest,
    OpenAIEmbedRequest,
    PredictRequest,
    RerankRequest,
    TokenizeRequest,
)

if TYPE_CHECKING:
    from .app import Call

NON_FINITE = (
    "the model's output holds NaN or Infinity, so nothing was answered; its weights (or --quantize) are "
    "broken: check the model folder"
)
# what a route needs beyond the encoder, in words for its refusal (400 not_supported)
NEEDS = {
    "task": "a fine-tuned task head (bertkit finetune's --out)",
    "mlm": "an MLM head (bertkit pretrain's --out)",
    "reranker": "a re-ranker head: a classifier with one output, fine-tuned with problem_type regression on (query, "
    "text) pairs",
}


def bertkit_error(status: int, kind: str, message: str) -> dict:
    """bertkit's refusal body (every route but OpenAI's)."""
    return {"error": message, "type": kind}


def openai_error(status: int, kind: str, message: str) -> dict:
    """OpenAI's error shape, which the openai client shows the message of."""
    return compat.openai_error(status, message, kind, param=None)


@dataclass(frozen=True)
class Route:
    """A POST route: where, what its body is, what answers it."""

    path: str
    request: type[Body]
    handle: Callable[[Engine, Any, Call], Awaitable[tuple[Any, int]]]  # Any: the route's own request model
    summary: str  # one line for /openapi.json and /docs: what the answer is
    needs: str | None = None  # a key of NEEDS: the Engine attribute the route needs (None: the encoder)
    error_body: Callable[[int, str, str], dict] = bertkit_error  # (status, kind, message) -> a refusal's JSON


def finite(vectors: list) -> list:
    """Embeddings checked before they are answered: a NaN would travel silently in base64."""
    if len(vectors) and not np.isfinite(np.asarray(vectors, dtype=np.float32)).all():
        raise NonFiniteError(NON_FINITE)
    return vectors


async def embed(engine: Engine, request: EmbedRequest, call: Call) -> tuple[Any, int]:
    texts, _ = request.items()
    if request.tei():  # TEI's fields: a prompt, the left end cut, normalization asked for
        prepared = await call.tokenize(
            engine.rows_for_tei_embed,
            texts,
            request.truncate,
            request.truncation_direction,
            request.prompt_name,
            request.normalize,
        )
        return finite(engine.tei_vectors(await call.model(prepared), request.normalize)), len(texts)
    prepared = await call.tokenize(engine.rows_for_embed, texts, request.truncate)
    return finite(await call.model(prepared)), len(texts)


async def openai_embeddings(engine: Engine, request: OpenAIEmbedRequest, call: Call) -> tuple[Any, int]:
    inputs, _ = request.items()
    if request.dimensions not in (None, engine.dim, *engine.trained_dims):
        trained = f", or {', '.join(map(str, engine.trained_dims))} (trained with MatryoshkaLoss)"
        raise InputProblem(
            400,
            "invalid_input",
            f"'dimensions' {request.dimensions!r}: this model's embeddings have {engine.dim}"
            + (trained if engine.trained_dims else " and are not cut shorter; leave dimensions out"),
        )
    if isinstance(inputs[0], list):  # token ids: a list per input (items() made one flat list one input)
        prepared = await call.tokenize(engine.rows_for_embed_ids, inputs, False)
    else:
        prepared = await call.tokenize(engine.rows_for_embed, inputs, False)
    vectors = finite(await call.model(prepared))
    if request.dimensions is not None and request.dimensions < engine.dim:
        vectors = compat.shortened(vectors, request.dimensions, engine.encoder.pooling.normalize)
    return compat.openai_embeddings(vectors, request.encoding_format, engine.name, sum(prepared.tokens)), len(inputs)


async def predict(engine: Engine, request: PredictRequest, call: Call) -> tuple[Any, int]:
    inputs, single = request.items()
    assert engine.task is not None  # the route needs a task head (app.py refuses it otherwise)
    if request.raw_scores and engine.task.name != "classify":
        raise InputProblem(
            422, "invalid_input", f"'raw_scores' is for a classifier; {engine.name} is a {engine.task.name} model"
        )
    prepared = await call.tokenize(engine.rows_for_predict, inputs, request.truncate)
    outputs = await call.model(prepared)
    rows = await call.tokenize(engine.predictions, prepared, outputs)
    if request.raw_scores:
        rows = [
            {**row, "logits": logits} if logits is not None else row
            for row, logits in zip(rows, engine.class_logits(prepared, outputs))
        ]
    return (rows[0] if single else rows), len(inputs)


async def fill_mask(engine: Engine, request: FillMaskRequest, call: Call) -> tuple[Any, int]:
    texts, single = request.items()
    prepared = await call.tokenize(engine.rows_for_fill_mask, texts)
    answers = await call.tokenize(engine.fill_mask_answers, prepared.rows, await call.model(prepared), request.top_k)
    rows = [{"text": text, "masks": masks} for text, masks in zip(texts, answers)]  # one object per input
    return (rows[0] if single else rows), len(texts)


async def tokenize(engine: Engine, request: TokenizeRequest, call: Call) -> tuple[Any, int]:
    texts, single = request.items()
    answers = await call.tokenize(engine.tokenize, texts, request.add_special_tokens)
    return (answers[0] if single else answers), len(texts)


async def rerank(engine: Engine, request: RerankRequest, call: Call) -> tuple[Any, int]:
    pairs = [{"text": request.query, "text_pair": text} for text in request.texts]
    prepared = await call.tokenize(engine.rows_for_predict, pairs, request.truncate)
    rows = await call.tokenize(engine.predictions, prepared, await call.model(prepared))
    return compat.tei_rerank(rows, request.texts, request.raw_scores, request.return_text), len(request.texts)


async def decode(engine: Engine, request: DecodeRequest, call: Call) -> tuple[Any, int]:
    ids, _ = request.items()
    return await call.tokenize(engine.decode, ids, request.skip_special_tokens), len(ids)


async def inference(engine: Engine, request: InferenceRequest, call: Call) -> tuple[Any, int]:
    """POST /: the Hugging Face inference API; the task is what the body asks for, if the model has it (compat.py's
    docstring: hf_task)."""
    body = request.model_dump(exclude_none=True)
    task = compat.hf_task(body, engine)
    params = compat.hf_parameters(task, body)
    inputs, single = request.items()
    if task in ("feature-extraction", "sentence-similarity"):
        if task == "feature-extraction" and any(isinstance(x, dict) for x in inputs):
            raise InputProblem(422, "wrong_type", "feature extraction takes a text or a list of texts")
        if any(not isinstance(x, str) for x in inputs):
            raise InputProblem(
                422, "wrong_type", 'sentence similarity takes {"source_sentence": a text, "sentences": a list of texts}'
            )
        prepared = await call.tokenize(
            engine.rows_for_tei_embed,
            inputs,
            params.get("truncate", False),
            params.get("truncation_direction", "right"),
            params.get("prompt_name"),
            params.get("normalize"),
        )
        vectors = finite(engine.tei_vectors(await call.model(prepared), params.get("normalize")))
        answer = compat.cosine_similarities(vectors) if task == "sentence-similarity" else vectors
        return answer, len(inputs)
    if task == "fill-mask":
        if any(not isinstance(x, str) for x in inputs):
            raise InputProblem(422, "wrong_type", "fill-mask takes a text with [MASK], or a list of them")
        top_k = params.get("top_k", 5)
        if top_k > FILL_MASK_MAX_TOP_K:
            raise InputProblem(422, "wrong_type", f"'top_k' must be at most {FILL_MASK_MAX_TOP_K}, got {top_k}")
        prepared = await call.tokenize(engine.rows_for_fill_mask, inputs)
        answers = await call.tokenize(engine.fill_mask_answers, prepared.rows, await call.model(prepared), top_k)
        out: list = [compat.hf_fill_mask(a) for a in answers]
        return (out[0] if single else out), len(inputs)
    prepared = await call.tokenize(engine.rows_for_predict, inputs, False)
    outputs = await call.model(prepared)
    rows = await call.tokenize(engine.predictions, prepared, outputs)
    if task == "text-classification":  # a list per input, also for one: the client keeps the first
        return [compat.hf_classification(r, params.get("top_k")) for r in rows], len(inputs)
    if task == "token-classification":
        out = [
            compat.hf_entities(r, s, params.get("aggregation_strategy"), params.get("ignore_labels"))
            for r, s in zip(rows, engine.tag_scores(prepared, outputs))
        ]
    else:
        out = [compat.hf_answer(r) for r in rows]
    return (out[0] if single else out), len(inputs)


ROUTES = (
    Route("/embed", EmbedRequest, embed, "a list of numbers per input (one list for one text)"),
    Route(
        "/v1/embeddings", OpenAIEmbedRequest, openai_embeddings, "OpenAI's embeddings response", error_body=openai_error
    ),
    Route(
        "/predict",
        PredictRequest,
        predict,
        "a row per input as `bertkit predict` writes it (one row for one input)",
        needs="task",
    ),
    Route(
        "/fill-mask",
        FillMaskRequest,
        fill_mask,
        "per input {text, masks}: per [MASK], the top_k tokens with their probabilities",
        needs="mlm",
    ),
    Route("/tokenize", TokenizeRequest, tokenize, "per input, its tokens with ids and character offsets"),
    Route("/rerank", RerankRequest, rerank, "TEI's: [{index, score, text?}] best first", needs="reranker"),
    Route("/decode", DecodeRequest, decode, "TEI's: a text per list of ids"),
    Route(
        "/",
        InferenceRequest,
        inference,
        "the Hugging Face inference API's answer for the task the body asks for (400: a task the model has not)",
    ),
)
