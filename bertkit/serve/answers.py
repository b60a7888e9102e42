"""Writing answers as JSON: a route's answer (NaN refused), a refusal's body in bertkit's or OpenAI's shape.

A long answer is written in pieces (json.dumps holds the GIL); NaN and Infinity, which JSON cannot carry, are a
NonFiniteError. A refusal or failure is bertkit's {"error", "type"} or a client's own shape (OpenAI's on /v1/).

    json_answer(answer) -> a Response (NonFiniteError: NaN / Infinity, which JSON cannot carry)
    error(status, kind, message, close, shape) -> a JSONResponse; shape: bertkit_error or openai_error
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from starlette.responses import JSONResponse, Response

from ..errors import NonFiniteError
from . import compat

NON_FINITE = (
    "the model's output holds NaN or Infinity, so nothing was answered; its weights (or --quantize) are "
    "broken: check the model folder"
)


def bertkit_error(status: int, kind: str, message: str) -> dict:
    """bertkit's refusal body (every route but OpenAI's)."""
    return {"error": message, "type": kind}


def openai_error(status: int, kind: str, message: str) -> dict:
    """OpenAI's error shape, which the openai client shows the message of."""
    return compat.openai_error(status, message, kind, param=None)


def error(
    status: int,
    kind: str,
    message: str,
    close: bool = False,
    shape: Callable[[int, str, str], dict] = bertkit_error,
) -> JSONResponse:
    """A refusal or failure as JSON: bertkit's {"error", "type"} (or a route's own shape: OpenAI's)."""
    return JSONResponse(
        shape(status, kind, message), status_code=status, headers={"Connection": "close"} if close else None
    )


def json_answer(answer: Any) -> Response:
    """The answer as JSON (as JSONResponse writes it); NaN or Infinity: NonFiniteError."""
    try:
        return Response(dumps(answer).encode("utf-8"), media_type="application/json")
    except ValueError:  # json.dumps(allow_nan=False): JSON cannot carry them
        raise NonFiniteError(NON_FINITE) from None


def dumps(value: Any) -> str:
    """JSON of `value`, a long list written PIECE items at a time: json.dumps holds the GIL throughout, and one
    call on a 1 MB /tokenize request's answer (28 MB) held the event loop 0.7 s from the tokenizer thread."""
    if isinstance(value, list) and value and isinstance(value[0], list):  # per input
        return "[" + ",".join(dumps(item) for item in value) + "]"
    if isinstance(value, list) and len(value) > PIECE:
        return "[" + ",".join(_dumps(value[i : i + PIECE])[1:-1] for i in range(0, len(value), PIECE)) + "]"
    return _dumps(value)


_dumps = functools.partial(json.dumps, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
PIECE = 1024
