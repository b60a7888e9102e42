"""The HTTP side of `bertkit serve`: connections, body reading and limits, JSON errors, Prometheus metrics,
and the app made from the route table (routes.py) with /openapi.json and /docs (openapi.py).

    connection --GuardedHttp (connections.py: uvicorn's httptools protocol with a Guard): at most
        --max-connections open (the oldest idle one closed to make room, else 503); headers within
        --header-timeout (else 408, closed); SIGTERM: reads under way end at once (503), the rest answered
    request --MetricsMiddleware (status, latency; 499: the client went away before its answer)--> route handler
        read_body: within --body-timeout (408), size limit (413, once the body was read and dropped up to a
            bound, so that clients that send the whole body before reading see it), UTF-8 (400), JSON (400)
        parse_body: the route's request model (schemas.py: 422 naming the field), then its inputs counted (413)
        route.handle (routes.py: the table of routes, each a request model and a handler)
        engine.rows_for_*: tokens per input (413 unless "truncate": true); in the tokenizer's thread
        batcher.submit (429 when --max-queue requests wait) -> engine.run in the model's thread; a client that
            goes away meanwhile: its job is cancelled, rows not yet run never are
        answer as JSON (NaN / Infinity: 500 non_finite_output, never in a 200)

Every refusal is a 4xx JSON body {"error": message, "type": kind} (OpenAI's shape on /v1/embeddings, and for an
unknown route or method under /v1/); a 503 when the server is full or stopping;
a 500 is JSON too: non_finite_output (the model gave NaN / Infinity), model_error (another BertkitError while
running a batch), internal_error (a bug in bertkit: its traceback is in the log).

Threads: uvicorn's event loop answers HTTP; the model runs in the thread that loaded it (batcher.py); the
tokenizer runs in one thread of its own (TokenizerThread), because a call sets the tokenizer's truncation
before encoding and two calls at once would mix them up. A small request's tokenizer work runs inline on the
event loop when that thread is idle: the hop to it costs more than a sentence's tokenization.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route as StarletteRoute

from .. import __version__
from ..deprecated import moved
from ..errors import BertkitError, NonFiniteError
from .batcher import Batcher, BatchStats, Key, QueueFull
from .compat import tei_info
from .connections import Guard, GuardedHttp
from .engine import Engine, InputProblem, Prepared, json_type
from .openapi import docs_html, openapi
from .routes import NEEDS, NON_FINITE, ROUTES, Route, bertkit_error, openai_error
from .schemas import Body, parse_body
from .settings import ServeConfig

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

T = TypeVar("T")

INLINE_BYTES = 2048  # a body up to this size is worked on inline on the event loop (tokenizing ~700 CJK
# characters: about 1 ms) when the tokenizer thread is idle; a larger one in that thread (a hop costs 0.1-0.2 ms)
INLINE_INPUTS = 8  # an answer to more inputs is written as JSON in the tokenizer thread (64 vectors: ~10 ms)
DRAIN_BYTES = 16 << 20  # a body over --max-body-bytes is read (and dropped) up to max(this, 4x the limit)
# before the 413, so that clients that send the whole body before reading the answer (urllib, requests) see it
log = logging.getLogger("uvicorn.error")


class PrometheusSeries:
    """The Prometheus series /metrics shows (a registry per app, so that several apps can live in one process)."""

    def __init__(self) -> None:
        disable_created_metrics()  # no *_created series: counters and histograms only
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "bertkit_requests",
            "HTTP requests answered, by route and status (499: the client went away first)",
            ["route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "bertkit_request_seconds",
            "time from request to answer, by route",
            ["route"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.inputs = Counter(
            "bertkit_inputs",
            "inputs answered (texts embedded, predicted, ...), by route",
            ["route"],
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "bertkit_batch_size",
            "rows per forward pass",
            registry=self.registry,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
        )
        self.batch_tokens = Histogram(
            "bertkit_batch_tokens",
            "real tokens per forward pass",
            registry=self.registry,
            buckets=(16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768),
        )
        self.batch_seconds = Histogram(
            "bertkit_batch_seconds",
            "time of a forward pass",
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )
        self.queue_depth = Gauge(
            "bertkit_queue_depth", "requests waiting or running in the batcher", registry=self.registry
        )
        self.connections = Gauge(
            "bertkit_open_connections", "HTTP connections open (at most --max-connections)", registry=self.registry
        )
        self.closed = Counter(
            "bertkit_connections_closed",
            "connections the server closed, by reason: "
            "header_timeout, body_timeout (a body its route did not read), reclaimed (idle, "
            "closed to make room), refused (503: --max-connections busy ones)",
            ["reason"],
            registry=self.registry,
        )

    def batch(self, stats: BatchStats) -> None:
        self.batch_size.observe(stats.rows)
        self.batch_tokens.observe(stats.tokens)
        self.batch_seconds.observe(stats.seconds)


class MetricsMiddleware:
    """Counts every answer by route and status and times it (unknown paths count as route "other")."""

    def __init__(self, app: ASGIApp, metrics: PrometheusSeries, routes: set[str]) -> None:
        self.app, self.metrics, self.routes = app, metrics, routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route = scope["path"] if scope["path"] in self.routes else "other"
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - start)


class ClientGone(Exception):
    """The client closed its connection before its answer (counted as status 499, as nginx does)."""


class EndsConnection(InputProblem):
    """A refusal after which the connection is closed: its body was not read to the end (too large, too slow)
    or the server is stopping."""


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


# ----- the tokenizer's thread ------------------------------------------------------------------------------------
class TokenizerThread:
    """Where tokenizer work (engine.rows_for_*, tokenize, answers) and large JSON answers run: one thread, so
    that two calls never share the tokenizer's settings; inline on the event loop for small work while the
    thread is idle (nothing of the thread's then runs at the same time)."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="bertkit-tokenizer")
        self.pending = 0  # calls submitted to the thread and not finished there

    async def run(self, inline: bool, fn: Callable[..., T], *args: Any) -> T:
        if inline and self.pending == 0:
            return fn(*args)
        loop = asyncio.get_running_loop()
        self.pending += 1
        work = self.pool.submit(fn, *args)  # counted until it has finished, even if its request is gone

        def count_done(_: Future[T]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed (a forced exit): nobody counts any more
                loop.call_soon_threadsafe(self.finished)

        work.add_done_callback(count_done)
        return await asyncio.wrap_future(work)

    def finished(self) -> None:
        self.pending -= 1


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


def parse_json(raw: bytes) -> dict:
    """The request's JSON object (UTF-8, valid JSON, no lone surrogate, an object)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputProblem(
            400,
            "invalid_utf8",
            f"the body is not valid UTF-8 (byte {raw[e.start]:#04x} at offset {e.start}); send JSON encoded as UTF-8",
        ) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputProblem(
            400, "invalid_json", f"the body is not JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    except (ValueError, RecursionError) as e:  # a number of more than 4300 digits, nesting past the stack
        raise InputProblem(400, "invalid_json", f"the body is JSON this server cannot read: {e}") from None
    if "\\u" in text:  # an escaped lone surrogate (\ud800) is valid JSON but no text
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as e:
            raise InputProblem(
                400,
                "invalid_unicode",
                f"the body escapes a lone surrogate ({e.object[e.start]!r})"
                ", which is not a character; send text as UTF-8",
            ) from None
    if not isinstance(value, dict):
        raise InputProblem(
            422, "wrong_type", f'the body must be a JSON object like {{"inputs": ...}}, got {json_type(value)}'
        )
    return value


class Call:
    """One POST request on its way through a route: where its tokenizer work runs (inline when it is small),
    and its rows' trip through the batcher."""

    def __init__(
        self,
        request: Request,
        size: int,
        tokenizer: TokenizerThread,
        batcher: Batcher[Key],
        metrics: PrometheusSeries,
    ) -> None:
        self.request, self.small = request, size <= INLINE_BYTES
        self.tokenizer, self.batcher, self.metrics = tokenizer, batcher, metrics

    async def tokenize(self, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args) where the tokenizer may run (see TokenizerThread)."""
        return await self.tokenizer.run(self.small, fn, *args)

    async def model(self, prepared: Prepared) -> list:
        """The model's results for the rows; if the client goes away first, its job is cancelled (its rows
        not yet in a batch are never run) and ClientGone raised."""
        self.metrics.queue_depth.set(self.batcher.depth())
        job = asyncio.ensure_future(self.batcher.submit(prepared.key, prepared.rows, prepared.tokens))
        gone = asyncio.ensure_future(disconnect(self.request))
        try:
            await asyncio.wait({job, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when this handler is cancelled
            gone.cancel()
            if not job.done():
                job.cancel()  # at once cancels the job's future in the batcher, whose _take then drops it
        self.metrics.queue_depth.set(self.batcher.depth())
        if not job.done():
            raise ClientGone
        try:
            return job.result()
        except QueueFull as e:
            raise InputProblem(429, "overloaded", f"the server is busy: {e}; retry shortly") from None


async def disconnect(request: Request) -> None:
    """Returns when the client has closed the connection (the body was read whole: nothing else comes)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def build_app(
    engine: Engine, settings: ServeConfig, routes: Sequence[Route] = ROUTES
) -> tuple[MetricsMiddleware, Batcher[Key], Callable[..., GuardedHttp]]:
    """The app serving `engine` on `routes` (routes.py's table, and the GET routes), its batcher (for the caller
    to run `batcher.work()` in the thread that loaded the model) and the HTTP protocol for uvicorn's
    Config(http=...). The app's shutdown stops the batcher once every request in flight was answered."""
    metrics = PrometheusSeries()
    batcher = Batcher(
        engine.run,
        max_batch_tokens=settings.max_batch_tokens,
        max_wait_ms=settings.max_wait_ms,
        max_queue=settings.max_queue,
        batching=settings.batching,
        on_batch=metrics.batch,
        thread=False,
    )
    guard = Guard(settings, metrics)
    tokenizer = TokenizerThread()
    limit = settings.max_body_bytes
    drain = max(DRAIN_BYTES, 4 * limit)

    async def chunk(request: Request) -> tuple[bytes, bool]:
        """The body's next chunk and whether more follows; ClientGone when the client went away, 503 when
        SIGTERM came before the body's end."""
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        more = message.get("more_body", False)
        if more and guard.stopping:
            raise EndsConnection(
                503,
                "shutting_down",
                "the server is shutting down and the body was not complete; send the request again",
            )
        return message.get("body", b""), more

    async def read(request: Request) -> bytes:
        """The body; past --max-body-bytes, 413 once the body was read and dropped up to `drain` bytes (a client
        that sends Expect: 100-continue gets the 413 at once, and need not send the body)."""
        header = request.headers.get("content-length", "")
        declared = int(header) if header.isdigit() else None
        if (
            declared is not None
            and declared > limit
            and (declared > drain or request.headers.get("expect", "").lower() == "100-continue")
        ):
            raise EndsConnection(
                413,
                "body_too_large",
                f"the body has {declared} bytes, more than the limit of {limit} (--max-body-bytes)",
            )
        body, size, more = bytearray(), 0, True
        while more and size <= drain:
            data, more = await chunk(request)
            size += len(data)
            if size <= limit:
                body += data
        if size > limit:
            told = size if not more else declared or f"more than {size}"
            raise EndsConnection(
                413, "body_too_large", f"the body has {told} bytes, more than the limit of {limit} (--max-body-bytes)"
            )
        return bytes(body)

    async def read_body(request: Request) -> bytes:
        try:
            return await asyncio.wait_for(read(request), settings.body_timeout)
        except asyncio.TimeoutError:
            raise EndsConnection(
                408, "timeout", f"the body did not arrive within {settings.body_timeout:g} s (--body-timeout)"
            ) from None

    def public(e: Exception) -> str:
        """An error's message for a client: the model folder named by its name, never by its path."""
        message = str(e)
        for path in sorted({os.path.abspath(engine.model_dir), engine.model_dir}, key=len, reverse=True):
            message = message.replace(path, engine.name)
        return message

    def count(request: Body) -> int:
        """How many inputs a checked request holds; 413 past --max-inputs."""
        items, _ = request.items()
        if len(items) > settings.max_inputs:
            raise InputProblem(
                413,
                "too_many_inputs",
                f"{len(items)} inputs, more than the limit of "
                f"{settings.max_inputs} per request (--max-inputs); split the request",
            )
        return len(items)

    def endpoint(route: Route) -> StarletteRoute:
        """A POST route: its body read and checked against its model, refusals and errors -> JSON, inputs
        counted."""

        async def answer(request: Request) -> Response:
            shape = route.error_body
            try:
                raw = await read_body(request)  # read first: a refusal with the body unread resets the client
                if route.needs is not None and getattr(engine, route.needs) is None:
                    return error(
                        400,
                        "not_supported",
                        f"{route.path} needs a model with {NEEDS[route.needs]}; "
                        f"{engine.described} (routes here: {', '.join(engine.routes)})",
                        shape=shape,
                    )
                call = Call(request, len(raw), tokenizer, batcher, metrics)
                body = parse_body(route.request, await call.tokenize(parse_json, raw))
                count(body)
                result, inputs = await route.handle(engine, body, call)
                response = await tokenizer.run(call.small and inputs <= INLINE_INPUTS, json_answer, result)
            except ClientGone:
                return Response(status_code=499)  # nobody reads it: the status is for /metrics
            except InputProblem as e:
                return error(e.status, e.kind, public(e), close=isinstance(e, EndsConnection), shape=shape)
            except NonFiniteError as e:
                return error(500, "non_finite_output", public(e), shape=shape)
            except BertkitError as e:
                return error(500, "model_error", public(e), shape=shape)
            except Exception as e:
                log.exception("%s failed", route.path)
                return error(
                    500,
                    "internal_error",
                    f"a bug in bertkit ({type(e).__name__}: {public(e)}); the server's log has the traceback",
                    shape=shape,
                )
            metrics.inputs.labels(route.path).inc(inputs)
            return response

        return StarletteRoute(route.path, answer, methods=["POST"])

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def info(request: Request) -> JSONResponse:
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

    async def prometheus(request: Request) -> Response:
        metrics.queue_depth.set(batcher.depth())
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        batcher.stop()  # uvicorn ends the lifespan after answering every request in flight
        tokenizer.pool.shutdown(wait=False)

    document = openapi(routes, GET_ROUTES, f"bertkit serve: {engine.name}", __version__)
    page = docs_html(document)

    async def openapi_json(request: Request) -> JSONResponse:
        return JSONResponse(document)

    async def docs(request: Request) -> HTMLResponse:
        return HTMLResponse(page)

    gets: dict[str, Callable[[Request], Awaitable[Response]]] = {
        "/health": health,
        "/info": info,
        "/metrics": prometheus,
        "/openapi.json": openapi_json,
        "/docs": docs,
    }
    table = [endpoint(r) for r in routes] + [StarletteRoute(path, fn) for path, fn in gets.items()]
    app = Starlette(
        routes=table, exception_handlers={HTTPException: functools.partial(http_error, engine)}, lifespan=lifespan
    )
    return MetricsMiddleware(app, metrics, {r.path for r in table}), batcher, functools.partial(GuardedHttp, guard)


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
    __getattr__ = moved(__name__, {"Metrics": "bertkit.serve.app:PrometheusSeries"})
