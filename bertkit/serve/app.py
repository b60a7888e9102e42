"""The HTTP side of `bertkit serve`: routes, request checks, JSON errors, Prometheus metrics.

    request --MetricsMiddleware (status, latency)--> route handler
        read_body: size limit (413), UTF-8 (400), JSON (400)
        inputs_of: shape and types (422), count limit (413)
        engine.rows_for_*: tokens per input (413 unless "truncate": true)
        batcher.submit (429 when --max-queue requests wait) -> engine.run in the model's thread
        answer as JSON

Every refusal is a 4xx JSON body {"error": message, "type": kind}; a 5xx means a bug in bertkit.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time

import numpy as np
from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram,
                               disable_created_metrics, generate_latest)
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .. import __version__
from .batcher import Batcher, BatchStats, QueueFull
from .engine import FILL_MASK_MAX_TOP_K, Engine, InputProblem, json_type
from .settings import ServeConfig


class Metrics:
    """The Prometheus series /metrics shows (a registry per app, so that several apps can live in one process)."""

    def __init__(self):
        disable_created_metrics()  # no *_created series: counters and histograms only
        self.registry = CollectorRegistry()
        self.requests = Counter("bertkit_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=self.registry)
        self.latency = Histogram("bertkit_request_seconds", "time from request to answer, by route", ["route"],
                                 registry=self.registry,
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))
        self.inputs = Counter("bertkit_inputs", "inputs answered (texts embedded, predicted, ...), by route",
                              ["route"], registry=self.registry)
        self.batch_size = Histogram("bertkit_batch_size", "rows per forward pass", registry=self.registry,
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
        self.batch_tokens = Histogram("bertkit_batch_tokens", "real tokens per forward pass", registry=self.registry,
                                      buckets=(16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768))
        self.batch_seconds = Histogram("bertkit_batch_seconds", "time of a forward pass", registry=self.registry,
                                       buckets=(.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5))
        self.queue_depth = Gauge("bertkit_queue_depth", "requests waiting or running in the batcher",
                                 registry=self.registry)

    def batch(self, stats: BatchStats) -> None:
        self.batch_size.observe(stats.rows)
        self.batch_tokens.observe(stats.tokens)
        self.batch_seconds.observe(stats.seconds)


class MetricsMiddleware:
    """Counts every answer by route and status and times it (unknown paths count as route "other")."""

    def __init__(self, app, metrics: Metrics, routes: set[str]):
        self.app, self.metrics, self.routes = app, metrics, routes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route = scope["path"] if scope["path"] in self.routes else "other"
        start = time.perf_counter()
        status = 500

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - start)


def error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "type": kind}, status_code=status)


def build_app(engine: Engine, settings: ServeConfig) -> tuple[Starlette, Batcher]:
    """The app serving `engine`, and its batcher, for the caller to run `batcher.work()` in the thread that
    loaded the model. The app's shutdown stops the batcher once every request in flight was answered."""
    metrics = Metrics()
    batcher = Batcher(engine.run, max_batch_tokens=settings.max_batch_tokens, max_wait_ms=settings.max_wait_ms,
                      max_queue=settings.max_queue, batching=settings.batching, on_batch=metrics.batch,
                      thread=False)

    async def read_body(request: Request) -> dict:
        """The request's JSON object, read with the body-size limit."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > settings.max_body_bytes:
            raise InputProblem(413, "body_too_large", f"the body has {declared} bytes, more than the limit of "
                               f"{settings.max_body_bytes} (--max-body-bytes)")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > settings.max_body_bytes:
                raise InputProblem(413, "body_too_large", f"the body is longer than the limit of "
                                   f"{settings.max_body_bytes} bytes (--max-body-bytes)")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputProblem(400, "invalid_utf8", f"the body is not valid UTF-8 (byte {body[e.start]:#04x} at "
                               f"offset {e.start}); send JSON encoded as UTF-8") from None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputProblem(400, "invalid_json", f"the body is not JSON: {e.msg} at line {e.lineno} column "
                               f"{e.colno}") from None
        except (ValueError, RecursionError) as e:  # a number of more than 4300 digits, nesting past the stack
            raise InputProblem(400, "invalid_json", f"the body is JSON this server cannot read: {e}") from None
        if "\\u" in text:  # an escaped lone surrogate (\ud800) is valid JSON but no text
            try:
                json.dumps(value, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError as e:
                raise InputProblem(400, "invalid_unicode", f"the body escapes a lone surrogate ({e.object[e.start]!r})"
                                   ", which is not a character; send text as UTF-8") from None
        if not isinstance(value, dict):
            raise InputProblem(422, "wrong_type", f"the body must be a JSON object like {{\"inputs\": ...}}, got "
                               f"{json_type(value)}")
        return value

    def inputs_of(body: dict, allowed: set[str], name: str = "inputs", objects: bool = False) -> tuple[list, bool]:
        """(inputs as a list, whether one input came alone); unknown keys, wrong types and empty lists refused."""
        unknown = sorted(set(body) - allowed - {name})
        if unknown:
            raise InputProblem(422, "wrong_type", f"unknown field(s) {', '.join(unknown)}; this route takes "
                               f"{', '.join(sorted(allowed | {name}))}")
        if name not in body:
            raise InputProblem(422, "wrong_type", f"the body has no {name!r}: send {{\"{name}\": \"a text\"}} or a "
                               "list of texts")
        value = body[name]
        single = isinstance(value, str) or (objects and isinstance(value, dict))
        items = [value] if single else value
        if not isinstance(items, list):
            raise InputProblem(422, "wrong_type", f"{name!r} must be a string or a list of strings"
                               f"{' or objects' if objects else ''}, got {json_type(value)}")
        if not items:
            raise InputProblem(422, "empty_list", f"{name!r} is an empty list: send at least one input")
        if len(items) > settings.max_inputs:
            raise InputProblem(413, "too_many_inputs", f"{len(items)} inputs, more than the limit of "
                               f"{settings.max_inputs} per request (--max-inputs); split the request")
        for i, item in enumerate(items):
            if not isinstance(item, str) and not (objects and isinstance(item, dict)):
                raise InputProblem(422, "wrong_type", f"{name}[{i}] is {json_type(item)}; each input is a string"
                                   f"{' or an object' if objects else ''}")
        return items, single

    def flag(body: dict, name: str, default: bool) -> bool:
        value = body.get(name, default)
        if not isinstance(value, bool):
            raise InputProblem(422, "wrong_type", f"{name!r} must be true or false, got {json_type(value)}")
        return value

    async def run(prepared) -> list:
        metrics.queue_depth.set(batcher.depth())
        try:
            return await batcher.submit(prepared.key, prepared.rows, prepared.tokens)
        except QueueFull as e:
            raise InputProblem(429, "overloaded", f"the server is busy: {e}; retry shortly") from None
        finally:
            metrics.queue_depth.set(batcher.depth())

    def handler(route: str, needs: str | None = None):
        """A POST route: its body read and checked, InputProblem -> 4xx JSON, inputs counted."""
        def wrap(fn):
            async def endpoint(request: Request):
                if needs is not None and getattr(engine, needs) is None:
                    return error(400, "not_supported", f"{route} needs a model with {NEEDS[needs]}; "
                                 f"{engine.model_dir} is a {engine.architecture} (routes here: "
                                 f"{', '.join(engine.routes)})")
                try:
                    body = await read_body(request)
                    answer, count = await fn(body)
                except InputProblem as e:
                    return error(e.status, e.kind, str(e))
                metrics.inputs.labels(route).inc(count)
                return JSONResponse(answer)
            return Route(route, endpoint, methods=["POST"])
        return wrap

    @handler("/embed")
    async def embed(body):
        texts, single = inputs_of(body, {"truncate"})
        prepared = engine.rows_for_embed(texts, flag(body, "truncate", False))
        return await run(prepared), len(texts)

    @handler("/v1/embeddings")
    async def openai_embeddings(body):
        texts, _ = inputs_of(body, {"model", "encoding_format", "user", "dimensions"}, name="input")
        fmt = body.get("encoding_format", "float")
        if fmt not in ("float", "base64"):
            raise InputProblem(422, "wrong_type", f"'encoding_format' must be \"float\" or \"base64\", got {fmt!r}")
        if not isinstance(body.get("model", ""), str):
            raise InputProblem(422, "wrong_type", f"'model' must be a string, got {json_type(body['model'])}")
        if body.get("dimensions") not in (None, engine.dim):
            raise InputProblem(422, "invalid_input", f"'dimensions' {body['dimensions']!r}: this model's embeddings "
                               f"have {engine.dim}")
        prepared = engine.rows_for_embed(texts, truncate=False)
        vectors = await run(prepared)
        data = [{"object": "embedding", "index": i,
                 "embedding": v if fmt == "float" else base64.b64encode(np.asarray(v, "<f4").tobytes()).decode()}
                for i, v in enumerate(vectors)]
        used = sum(prepared.tokens)
        return {"object": "list", "data": data, "model": body.get("model") or engine.name,
                "usage": {"prompt_tokens": used, "total_tokens": used}}, len(texts)

    @handler("/predict", needs="task")
    async def predict(body):
        inputs, single = inputs_of(body, {"truncate"}, objects=True)
        prepared = engine.rows_for_predict(inputs, flag(body, "truncate", False))
        rows = engine.predictions(prepared, await run(prepared))
        return (rows[0] if single else rows), len(inputs)

    @handler("/fill-mask", needs="mlm")
    async def fill_mask(body):
        texts, single = inputs_of(body, {"top_k"})
        top_k = body.get("top_k", 5)
        if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= FILL_MASK_MAX_TOP_K:
            raise InputProblem(422, "wrong_type", f"'top_k' must be a whole number from 1 to {FILL_MASK_MAX_TOP_K}, "
                               f"got {top_k!r}")
        prepared = engine.rows_for_fill_mask(texts)
        answers = engine.fill_mask_answers(prepared.rows, await run(prepared), top_k)
        return (answers[0] if single else answers), len(texts)

    @handler("/tokenize")
    async def tokenize(body):
        texts, single = inputs_of(body, {"add_special_tokens"})
        answers = engine.tokenize(texts, flag(body, "add_special_tokens", True))
        return (answers[0] if single else answers), len(texts)

    async def health(request):
        return JSONResponse({"status": "ok"})

    async def info(request):
        return JSONResponse({
            "model": engine.name, "model_dir": engine.model_dir, "architecture": engine.architecture,
            "task": engine.task.name if engine.task else None, "labels": engine.labels(),
            "routes": engine.routes, "embedding_dim": engine.dim, "pooling": engine.pooling_info(),
            "quantize": engine.quantize, "version": __version__,
            "limits": {"max_body_bytes": settings.max_body_bytes, "max_inputs": settings.max_inputs,
                       "max_input_tokens": {"embed": engine.embed_limit, "predict": engine.predict_limit},
                       "max_queue": settings.max_queue},
            "batching": {"enabled": settings.batching, "max_batch_tokens": settings.max_batch_tokens,
                         "max_wait_ms": settings.max_wait_ms}})

    async def prometheus(request):
        metrics.queue_depth.set(batcher.depth())
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def http_error(request, exc: HTTPException):  # unknown route (404), wrong method (405)
        if exc.status_code == 404:
            return error(404, "unknown_route", f"no route {request.url.path}; routes: GET /health, /info, /metrics; "
                         f"POST {', '.join(engine.routes)}")
        if exc.status_code == 405:
            return error(405, "wrong_method", f"{request.method} {request.url.path} is not allowed; use "
                         f"{'GET' if request.url.path in GET_ROUTES else 'POST'}")
        return error(exc.status_code, "http_error", str(exc.detail))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        batcher.stop()  # uvicorn ends the lifespan after answering every request in flight

    routes = [embed, openai_embeddings, predict, fill_mask, tokenize,
              Route("/health", health), Route("/info", info), Route("/metrics", prometheus)]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error}, lifespan=lifespan)
    return MetricsMiddleware(app, metrics, {r.path for r in routes}), batcher


NEEDS = {"task": "a fine-tuned task head (bertkit finetune's --out)",
         "mlm": "an MLM head (bertkit pretrain's --out)"}
GET_ROUTES = ("/health", "/info", "/metrics")

