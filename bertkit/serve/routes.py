"""`bertkit serve`'s routes: one table entry each, its request model (schemas.py) and its handler.

    Route(path, request model, handler, summary, needs)
    handler(engine, request, call) -> (answer, inputs answered)     async; `call` (app.py) runs tokenizer work
                                                                    and the model's batches

A new route is a model in schemas.py and an entry in ROUTES; app.py reads the body, checks it against the
model, counts its inputs (413 past --max-inputs), and turns what a handler raises into JSON errors.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import numpy as np

from ..errors import NonFiniteError
from .engine import Engine, InputProblem
from .schemas import (Body, EmbedRequest, FillMaskRequest, OpenAIEmbedRequest, PredictRequest, TokenizeRequest)

NON_FINITE = ("the model's output holds NaN or Infinity, so nothing was answered; its weights (or --quantize) are "
              "broken: check the model folder")
# what a route needs beyond the encoder, in words for its refusal (400 not_supported)
NEEDS = {"task": "a fine-tuned task head (bertkit finetune's --out)",
         "mlm": "an MLM head (bertkit pretrain's --out)"}


@dataclass(frozen=True)
class Route:
    """A POST route: where, what its body is, what answers it."""

    path: str
    request: type[Body]
    handle: Callable[[Engine, Any, Any], Awaitable[tuple[Any, int]]]
    summary: str  # one line for /openapi.json and /docs: what the answer is
    needs: str | None = None  # "task" / "mlm": the Engine attribute the route needs (None: the encoder)


def finite(vectors: list) -> list:
    """Embeddings checked before they are answered: a NaN would travel silently in base64."""
    if len(vectors) and not np.isfinite(np.asarray(vectors, dtype=np.float32)).all():
        raise NonFiniteError(NON_FINITE)
    return vectors


async def embed(engine: Engine, request: EmbedRequest, call) -> tuple[Any, int]:
    texts, _ = request.items()
    prepared = await call.tokenize(engine.rows_for_embed, texts, request.truncate)
    return finite(await call.model(prepared)), len(texts)


async def openai_embeddings(engine: Engine, request: OpenAIEmbedRequest, call) -> tuple[Any, int]:
    texts, _ = request.items()
    if request.dimensions not in (None, engine.dim):
        raise InputProblem(422, "invalid_input", f"'dimensions' {request.dimensions!r}: this model's embeddings "
                           f"have {engine.dim}")
    prepared = await call.tokenize(engine.rows_for_embed, texts, False)
    vectors = finite(await call.model(prepared))
    data = [{"object": "embedding", "index": i, "embedding": v if request.encoding_format == "float"
             else base64.b64encode(np.asarray(v, "<f4").tobytes()).decode()} for i, v in enumerate(vectors)]
    used = sum(prepared.tokens)
    return {"object": "list", "data": data, "model": request.model or engine.name,
            "usage": {"prompt_tokens": used, "total_tokens": used}}, len(texts)


async def predict(engine: Engine, request: PredictRequest, call) -> tuple[Any, int]:
    inputs, single = request.items()
    prepared = await call.tokenize(engine.rows_for_predict, inputs, request.truncate)
    rows = await call.tokenize(engine.predictions, prepared, await call.model(prepared))
    return (rows[0] if single else rows), len(inputs)


async def fill_mask(engine: Engine, request: FillMaskRequest, call) -> tuple[Any, int]:
    texts, single = request.items()
    prepared = await call.tokenize(engine.rows_for_fill_mask, texts)
    answers = await call.tokenize(engine.fill_mask_answers, prepared.rows, await call.model(prepared), request.top_k)
    return (answers[0] if single else answers), len(texts)


async def tokenize(engine: Engine, request: TokenizeRequest, call) -> tuple[Any, int]:
    texts, single = request.items()
    answers = await call.tokenize(engine.tokenize, texts, request.add_special_tokens)
    return (answers[0] if single else answers), len(texts)


ROUTES = (
    Route("/embed", EmbedRequest, embed, "a list of numbers per input (one list for one text)"),
    Route("/v1/embeddings", OpenAIEmbedRequest, openai_embeddings, "OpenAI's embeddings response"),
    Route("/predict", PredictRequest, predict, "a row per input as `bertkit predict` writes it (one row for one "
          "input)", needs="task"),
    Route("/fill-mask", FillMaskRequest, fill_mask, "per [MASK], the top_k tokens with their probabilities",
          needs="mlm"),
    Route("/tokenize", TokenizeRequest, tokenize, "per input, its tokens with ids and character offsets"),
)
