"""`bertkit serve`'s HTTP app: one served model's state and handlers (App), assembled by build_app.

App holds the state (settings, engine, batcher, metrics, connection guard, tokenizer thread) and
answers the routes: App.answer every POST route of the table (routes.py), a method each GET route (/health, /info,
/metrics, /openapi.json and /docs from openapi.py). What a request goes through, and where each step lives:

    connection --GuardedHttp (connections.py: uvicorn's httptools protocol with a Guard): at most
        --max-connections open (the oldest idle one closed to make room, else 503); headers within
        --header-timeout (else 408, closed); SIGTERM: reads under way end at once (503), the rest answered
    request --MetricsMiddleware (metrics.py: status, latency; 499: the client went away before its answer)--> App.answer
        read_body (body.py): within --body-timeout (408), size limit (413, once the body was read and dropped up to a
            bound, so that clients that send the whole body before reading see it), UTF-8 (400), JSON (400)
        parse_body: the route's request model (schemas.py: 422 naming the field), then its inputs counted (413)
        route.handle (routes.py: the table of routes, each a request model and a handler)
        engine.rows_for_*: tokens per input (413 unless "truncate": true); in the tokenizer's thread
        Call.model (calls.py): batcher.submit (429 when --max-queue requests wait) -> engine.run in the model's
            thread; a client that goes away meanwhile: its job is cancelled, rows not yet run never are
        answer as JSON (answers.py; NaN / Infinity: 500 non_finite_output, never in a 200)

Every refusal is a 4xx JSON body {"error": message, "type": kind} (OpenAI's shape on /v1/embeddings, and for an
unknown route or method under /v1/); a 503 when the server is full or stopping;
a 500 is JSON too: non_finite_output (the model gave NaN / Infinity), model_error (another BertkitError while
running a batch), internal_error (a bug in bertkit: its traceback is in the log).

Threads: uvicorn's event loop answers HTTP; the model runs in the thread that loaded it (batcher.py); the
tokenizer runs in one thread of its own (calls.py's TokenizerThread), because a call sets the tokenizer's truncation
before encoding and two calls at once would mix them up. A small request's tokenizer work runs inline on the
event loop when that thread is idle: the hop to it costs more than a sentence's tokenization.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route as StarletteRoute

from .. import __version__
from ..deprecated import moved
from ..errors import BertkitError, NonFiniteError
from .answers import bertkit_error, error, json_answer, openai_error
from .batcher import Batcher, Key
from .body import ClientGone, EndsConnection, parse_json, read_body
from .calls import Call, TokenizerThread
from .compat import tei_info
from .connections import Guard, GuardedHttp
from .engine import Engine, InputProblem
from .metrics import MetricsMiddleware, PrometheusSeries
from .openapi import docs_html, openapi
from .routes import NEEDS, ROUTES, Route
from .schemas import Body, parse_body
from .settings import ServeConfig

INLINE_INPUTS = 8  # an answer to more inputs is written as JSON in the tokenizer thread (64 vectors: ~10 ms)
log = logging.getLogger("uvicorn.error")


class App:
    """One served model's state (its engine, settings, batcher, metrics, connections' guard, tokenizer thread and
    OpenAPI document) and the handlers of its routes: `answer` for every POST route, a method per GET route."""

    def __init__(self, engine: Engine, settings: ServeConfig, routes: Sequence[Route] = ROUTES) -> None:
        self.engine, self.settings = engine, settings
        self.metrics = PrometheusSeries()
        self.batcher: Batcher[Key] = Batcher(
            engine.run,
            max_batch_tokens=settings.max_batch_tokens,
            max_wait_ms=settings.max_wait_ms,
            max_queue=settings.max_queue,
            batching=settings.batching,
            on_batch=self.metrics.batch,
            thread=False,
        )
        self.guard = Guard(settings, self.metrics)
        self.tokenizer = TokenizerThread()
        self.document = openapi(routes, GET_ROUTES, f"bertkit serve: {engine.name}", __version__)
        self.page = docs_html(self.document)

    async def answer(self, route: Route, request: Request) -> Response:
        """A POST route: its body read and checked against its model, inputs counted, refusals and errors -> JSON."""
        try:
            raw = await read_body(request, self.settings, self.guard)  # first: refusing an unread body resets clients
            if route.needs is not None and getattr(self.engine, route.needs) is None:
                return self.not_supported(route)
            call = Call(request, len(raw), self.tokenizer, self.batcher, self.metrics)
            body = parse_body(route.request, await call.tokenize(parse_json, raw))
            self.count(body)
            result, inputs = await route.handle(self.engine, body, call)
            response = await self.tokenizer.run(call.small and inputs <= INLINE_INPUTS, json_answer, result)
        except Exception as e:
            return self.failure(route, e)
        self.metrics.inputs.labels(route.path).inc(inputs)
        return response

    def failure(self, route: Route, e: Exception) -> Response:
        """What a POST route answers for what it raised (called in its `except`: a bug's traceback is logged)."""
        shape = route.error_body
        if isinstance(e, ClientGone):
            return Response(status_code=499)  # nobody reads it: the status is for /metrics
        if isinstance(e, InputProblem):
            return error(e.status, e.kind, self.public(e), close=isinstance(e, EndsConnection), shape=shape)
        if isinstance(e, NonFiniteError):
            return error(500, "non_finite_output", self.public(e), shape=shape)
        if isinstance(e, BertkitError):
            return error(500, "model_error", self.public(e), shape=shape)
        log.exception("%s failed", route.path)
        return error(
            500,
            "internal_error",
            f"a bug in bertkit ({type(e).__name__}: {self.public(e)}); the server's log has the traceback",
            shape=shape,
        )

    def not_supported(self, route: Route) -> JSONResponse:
        """400: the route needs a head this model has not."""
        assert route.needs is not None
        return error(
            400,
            "not_supported",
            f"{route.path} needs a model with {NEEDS[route.needs]}; "
            f"{self.engine.described} (routes here: {', '.join(self.engine.routes)})",
            shape=route.error_body,
        )

    def public(self, e: Exception) -> str:
        """An error's message for a client: the model folder named by its name, never by its path."""
        message, engine = str(e), self.engine
        for path in sorted({os.path.abspath(engine.model_dir), engine.model_dir}, key=len, reverse=True):
            message = message.replace(path, engine.name)
        return message

    def count(self, request: Body) -> int:
        """How many inputs a checked request holds; 413 past --max-inputs."""
        items, _ = request.items()
        if len(items) > self.settings.max_inputs:
            raise InputProblem(
                413,
                "too_many_inputs",
                f"{len(items)} inputs, more than the limit of "
                f"{self.settings.max_inputs} per request (--max-inputs); split the request",
            )
        return len(items)

    def gets(self) -> dict[str, Callable[[Request], Awaitable[Response]]]:
        """The GET routes' handlers, by path (GET_ROUTES describes them)."""
        return {
            "/health": self.health,
            "/info": self.info,
            "/metrics": self.prometheus,
            "/openapi.json": self.openapi_json,
            "/docs": self.docs,
        }

    async def health(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def info(self, request: Request) -> JSONResponse:
        engine, settings = self.engine, self.settings
        return JSONResponse(
            {
                "model": engine.name,
                "model_dir": engine.name,
                "architecture": engine.architecture,
                "task": engine.task.name if engine.task else None,
                "labels": engine.labels(),
                "routes": engine.routes,
                "embedding_dim": engine.dim,
                "pooling": engine.pooling_info(),
                "quantize": engine.quantize,
                "engine": engine.engine_name,
                "engine_reason": engine.engine_why,
                "device": str(engine.where.device),
                "device_name": engine.where.describe().rsplit(", ", 1)[0],
                "precision": engine.where.name,
                "version": __version__,
                "limits": {
                    "max_body_bytes": settings.max_body_bytes,
                    "max_inputs": settings.max_inputs,
                    "max_input_tokens": {"embed": engine.embed_limit, "predict": engine.predict_limit},
                    "max_queue": settings.max_queue,
                    "max_connections": settings.max_connections,
                    "header_timeout": settings.header_timeout,
                    "body_timeout": settings.body_timeout,
                },
                "batching": {
                    "enabled": settings.batching,
                    "max_batch_tokens": settings.max_batch_tokens,
                    "max_wait_ms": settings.max_wait_ms,
                },
                **tei_info(engine, settings, __version__),
            }
        )  # TEI's field names beside bertkit's

    async def prometheus(self, request: Request) -> Response:
        self.metrics.queue_depth.set(self.batcher.depth())
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def openapi_json(self, request: Request) -> JSONResponse:
        return JSONResponse(self.document)

    async def docs(self, request: Request) -> HTMLResponse:
        return HTMLResponse(self.page)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        self.batcher.stop()  # uvicorn ends the lifespan after answering every request in flight
        self.tokenizer.pool.shutdown(wait=False)


def build_app(
    engine: Engine, settings: ServeConfig, routes: Sequence[Route] = ROUTES
) -> tuple[MetricsMiddleware, Batcher[Key], Callable[..., GuardedHttp]]:
    """The app serving `engine` on `routes` (routes.py's table, and the GET routes), its batcher (for the caller
    to run `batcher.work()` in the thread that loaded the model) and the HTTP protocol for uvicorn's
    Config(http=...). The app's shutdown stops the batcher once every request in flight was answered."""
    state = App(engine, settings, routes)
    table = [StarletteRoute(r.path, functools.partial(state.answer, r), methods=["POST"]) for r in routes]
    table += [StarletteRoute(path, handler) for path, handler in state.gets().items()]
    app = Starlette(
        routes=table, exception_handlers={HTTPException: functools.partial(http_error, engine)}, lifespan=state.lifespan
    )
    middleware = MetricsMiddleware(app, state.metrics, {r.path for r in table})
    return middleware, state.batcher, functools.partial(GuardedHttp, state.guard)


async def http_error(engine: Engine, request: Request, exc: Exception) -> JSONResponse:
    """The answer to an unknown route (404), a wrong method (405) or another HTTP error starlette raises, in
    bertkit's error shape (OpenAI's under /v1/)."""
    assert isinstance(exc, HTTPException)  # the handler of HTTPException only
    path = request.url.path if len(request.url.path) <= 100 else request.url.path[:100] + "..."
    openai = path.startswith("/v1/")  # OpenAI's client reads its own error shape (chat, completions, ...)
    shape = openai_error if openai else bertkit_error
    if exc.status_code == 404:
        return error(
            404,
            "unknown_route",
            f"no route {path}; routes: GET /health, /info, /metrics; POST {', '.join(engine.routes)}"
            + (f" (of OpenAI's API, embeddings only: {engine.described})" if openai else ""),
            shape=shape,
        )
    if exc.status_code == 405:
        return error(
            405,
            "wrong_method",
            f"{request.method} {path} is not allowed; use {'GET' if path in GET_ROUTES else 'POST'}",
            shape=shape,
        )
    return error(exc.status_code, "http_error", str(exc.detail), shape=shape)


GET_ROUTES = {
    "/health": '{"status": "ok"}',
    "/info": "the model, its task, labels, limits and batching",
    "/metrics": "Prometheus' text format",
    "/openapi.json": "this description of the routes",
    "/docs": "the routes as a page to read",
}


if not TYPE_CHECKING:  # old names, for one release
    __getattr__ = moved(__name__, {"Metrics": "bertkit.serve.metrics:PrometheusSeries"})
