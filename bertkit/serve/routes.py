"""`bertkit serve`'s routes: one table entry each, its request model (schemas.py) and its handler.

    Route(path, request model, handler, summary, needs)
    handler(engine, request, call) -> (answer, inputs answered)     async; `call` (calls.py) runs tokenizer work
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
from .answers import NON_FINITE, bertkit_error, openai_error
from .engine import FILL_MASK_MAX_TOP_K, Engine, InputProblem, Prepared
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
    from .calls import Call

# what a route needs beyond the encoder, in words for its refusal (400 not_supported)
NEEDS = {
    "task": "a fine-tuned task head (bertkit finetune's --out)",
    "mlm": "an MLM head (bertkit pretrain's --out)",
    "reranker": "a re-ranker head: a classifier with one output, fine-tuned with problem_type regression on (query, "
    "text) pairs",
}


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


# ----- bertkit's own work: inputs -> rows -> the model -> answers (every route below runs one of these) -----------
async def tei_embeddings(
    engine: Engine,
    call: Call,
    texts: list,
    truncate: bool,
    direction: str,
    prompt_name: str | None,
    normalize: bool | None,
) -> list:
    """Embeddings with TEI's options: a prompt, the left end cut, normalization asked for."""
    prepared = await call.tokenize(engine.rows_for_tei_embed, texts, truncate, direction, prompt_name, normalize)
    return finite(engine.tei_vectors(await call.model(prepared), normalize))


async def predictions(engine: Engine, call: Call, inputs: list, truncate: bool) -> tuple[Prepared, list, list]:
    """The task head's rows for `inputs` (as `bertkit predict` writes them), with the prepared rows and the model's
    outputs they came from (raw scores, entity scores)."""
    prepared = await call.tokenize(engine.rows_for_predict, inputs, truncate)
    outputs = await call.model(prepared)
    return prepared, outputs, await call.tokenize(engine.predictions, prepared, outputs)


async def masks(engine: Engine, call: Call, texts: list, top_k: int) -> list:
    """Per text, per [MASK]: the top_k tokens with their probabilities."""
    prepared = await call.tokenize(engine.rows_for_fill_mask, texts)
    return await call.tokenize(engine.fill_mask_answers, prepared.rows, await call.model(prepared), top_k)


# ----- bertkit's routes ----------------------------------------------------------------------------------------
async def embed(engine: Engine, request: EmbedRequest, call: Call) -> tuple[Any, int]:
    texts, _ = request.items()
    if request.tei():  # TEI's fields: a prompt, the left end cut, normalization asked for
        vectors = await tei_embeddings(
            engine,
            call,
            texts,
            request.truncate,
            request.truncation_direction,
            request.prompt_name,
            request.normalize,
        )
        return vectors, len(texts)
    prepared = await call.tokenize(engine.rows_for_embed, texts, request.truncate)  # the hot path: no detour
    return finite(await call.model(prepared)), len(texts)


async def predict(engine: Engine, request: PredictRequest, call: Call) -> tuple[Any, int]:
    inputs, single = request.items()
    assert engine.task is not None  # the route needs a task head (app.py refuses it otherwise)
    if request.raw_scores and engine.task.name != "classify":
        raise InputProblem(
            422, "invalid_input", f"'raw_scores' is for a classifier; {engine.name} is a {engine.task.name} model"
        )
    prepared, outputs, rows = await predictions(engine, call, inputs, request.truncate)
    if request.raw_scores:
        rows = [
            {**row, "logits": logits} if logits is not None else row
            for row, logits in zip(rows, engine.class_logits(prepared, outputs))
        ]
    return (rows[0] if single else rows), len(inputs)


async def fill_mask(engine: Engine, request: FillMaskRequest, call: Call) -> tuple[Any, int]:
    texts, single = request.items()
    answers = await masks(engine, call, texts, request.top_k)
    rows = [{"text": text, "masks": found} for text, found in zip(texts, answers)]  # one object per input
    return (rows[0] if single else rows), len(texts)


async def tokenize(engine: Engine, request: TokenizeRequest, call: Call) -> tuple[Any, int]:
    texts, single = request.items()
    answers = await call.tokenize(engine.tokenize, texts, request.add_special_tokens)
    return (answers[0] if single else answers), len(texts)


async def decode(engine: Engine, request: DecodeRequest, call: Call) -> tuple[Any, int]:
    ids, _ = request.items()
    return await call.tokenize(engine.decode, ids, request.skip_special_tokens), len(ids)


# ----- other clients' routes: their request -> bertkit's work -> their answer (compat.py shapes it) ------------
async def openai_embeddings(engine: Engine, request: OpenAIEmbedRequest, call: Call) -> tuple[Any, int]:
    """POST /v1/embeddings: OpenAI's client."""
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


async def rerank(engine: Engine, request: RerankRequest, call: Call) -> tuple[Any, int]:
    """POST /rerank: TEI's, a re-ranker's score per (query, text)."""
    pairs = [{"text": request.query, "text_pair": text} for text in request.texts]
    _, _, rows = await predictions(engine, call, pairs, request.truncate)
    return compat.tei_rerank(rows, request.texts, request.raw_scores, request.return_text), len(request.texts)


async def inference(engine: Engine, request: InferenceRequest, call: Call) -> tuple[Any, int]:
    """POST /: the Hugging Face inference API; the task is what the body asks for, if the model has it (compat.py's
    docstring: hf_task)."""
    body = request.model_dump(exclude_none=True)
    task = compat.hf_task(body, engine)
    params = compat.hf_parameters(task, body)
    inputs, single = request.items()
    if task in ("feature-extraction", "sentence-similarity"):
        return await hf_embeddings(engine, call, task, inputs, params), len(inputs)
    if task == "fill-mask":
        out = await hf_fill_mask(engine, call, inputs, params)
    else:
        out = await hf_predictions(engine, call, task, inputs, params)
        if task == "text-classification":  # a list per input, also for one: the client keeps the first
            return out, len(inputs)
    return (out[0] if single else out), len(inputs)


async def hf_embeddings(engine: Engine, call: Call, task: str, inputs: list, params: dict) -> list:
    """feature-extraction (the vectors) and sentence-similarity (the source's cosine with each sentence)."""
    if task == "feature-extraction" and any(isinstance(x, dict) for x in inputs):
        raise InputProblem(422, "wrong_type", "feature extraction takes a text or a list of texts")
    if any(not isinstance(x, str) for x in inputs):
        raise InputProblem(
            422, "wrong_type", 'sentence similarity takes {"source_sentence": a text, "sentences": a list of texts}'
        )
    vectors = await tei_embeddings(
        engine,
        call,
        inputs,
        params.get("truncate", False),
        params.get("truncation_direction", "right"),
        params.get("prompt_name"),
        params.get("normalize"),
    )
    return compat.cosine_similarities(vectors) if task == "sentence-similarity" else vectors


async def hf_fill_mask(engine: Engine, call: Call, inputs: list, params: dict) -> list:
    """fill-mask: per input, the client's list of {score, token, token_str, sequence}."""
    if any(not isinstance(x, str) for x in inputs):
        raise InputProblem(422, "wrong_type", "fill-mask takes a text with [MASK], or a list of them")
    top_k = params.get("top_k", 5)
    if top_k > FILL_MASK_MAX_TOP_K:
        raise InputProblem(422, "wrong_type", f"'top_k' must be at most {FILL_MASK_MAX_TOP_K}, got {top_k}")
    return [compat.hf_fill_mask(a) for a in await masks(engine, call, inputs, top_k)]


async def hf_predictions(engine: Engine, call: Call, task: str, inputs: list, params: dict) -> list:
    """text-classification, token-classification, question-answering: the task head's rows in the client's shape."""
    prepared, outputs, rows = await predictions(engine, call, inputs, False)
    if task == "text-classification":
        return [compat.hf_classification(r, params.get("top_k")) for r in rows]
    if task == "token-classification":
        return [
            compat.hf_entities(r, s, params.get("aggregation_strategy"), params.get("ignore_labels"))
            for r, s in zip(rows, engine.tag_scores(prepared, outputs))
        ]
    return [compat.hf_answer(r) for r in rows]


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
