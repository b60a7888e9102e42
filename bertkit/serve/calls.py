"""Where one POST request's work runs: tokenizer work in the tokenizer's thread, rows through the batcher.

app.py makes a Call per POST request and hands it to the route's handler with the request's checked body.

    TokenizerThread   one thread for tokenizer work (engine.rows_for_*, tokenize, answers) and large JSON answers:
                      a call sets the tokenizer's truncation before encoding, and two calls at once would mix them
                      up; a small request's work runs inline while the thread is idle (a hop costs 0.1-0.2 ms)
    Call              what a route's handler (routes.py) is given: call.tokenize(fn, ...) where the tokenizer may
                      run, call.model(prepared) -> the model's results (429 when the queue is full; ClientGone when
                      the client went away first: its job is cancelled, rows not yet run never are)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from .batcher import Batcher, Key, QueueFull
from .body import ClientGone
from .engine import InputProblem, Prepared

if TYPE_CHECKING:
    from starlette.requests import Request

    from .metrics import PrometheusSeries

T = TypeVar("T")

INLINE_BYTES = 2048  # a body up to this size is worked on inline on the event loop (tokenizing ~700 CJK
# characters: about 1 ms) when the tokenizer thread is idle; a larger one in that thread (a hop costs 0.1-0.2 ms)


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
