"""Prometheus metrics of `bertkit serve`: the series /metrics shows, and the middleware that counts every answer.

app.py makes one PrometheusSeries per app; connections.py counts connections in it, the batcher its batches.

    PrometheusSeries    the app's series, in a registry of its own (several apps can live in one process):
                        requests by route and status, latency, inputs, batches, queue depth, connections
    MetricsMiddleware   the ASGI middleware that counts each answer by route and status and times it
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from .batcher import BatchStats


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
