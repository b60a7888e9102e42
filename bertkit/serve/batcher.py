"""Dynamic batching: requests that arrive together run as one forward pass, off the event loop.

    handler (event loop) --submit(key, rows, tokens)--> queue of jobs (one job per request)
    worker (`work`, in the thread that loaded the model): wait for a job -> up to max_wait_ms for more
        -> take rows -> run(key, rows) -> results
    results --loop.call_soon_threadsafe--> each job's future, once all its rows are done

`bertkit serve` runs `work` in the main thread, where the model was loaded, and the HTTP server in a
second thread: torch's OpenMP workers then belong to one thread, and a one-sentence forward pass
takes the time it takes in a script (a second thread calling torch doubled it on 2 cores).

The policy (README "Serve" has it too):
- A batch holds rows of one key (one kind of work: embed, predict, fill-mask, ...), the key of the
  oldest waiting job. Its rows are padded to their longest and run padding-free (varlen), so its
  cost is its real tokens: a batch is bounded by max_batch_tokens real tokens (a single row past
  the bound runs alone).
- Rows are taken round-robin over the waiting jobs of that key, oldest first: one row of each job,
  then a second of each, ... until the token bound. A request of 64 long inputs is spread over
  several batches while a one-sentence request that arrives behind it rides in the next batch:
  nobody waits for more than their share. Jobs of another key wait at most one batch (the oldest
  job decides the next key).
- When the worker is free, the waiting rows hold fewer than max_batch_tokens tokens and the last
  batch held more than one row (requests are coming together), it waits up to max_wait_ms after the
  oldest job arrived for more to come. One client at a time never waits: its batches hold one row.
  Under load the queue fills while the model runs, so batches form without waiting anyway.
- batching=False (the benchmark's baseline): one request per forward pass, in arrival order.
- More than max_queue requests waiting or running: submit raises QueueFull (the server answers 429).
- A request cancelled while it waits (the task awaiting submit cancelled: its client went away) is dropped:
  its rows not yet in a batch never run, and a failed batch is not run again for it.

What runs a batch is a table, not a chain of `if key == "embed"`: `Handlers({"embed": fn, ...})` is the
`run` of a Batcher, and a Key(kind, group) names its entry (group: rows of one kind that still cannot
share a batch, e.g. multiple-choice rows of different choice counts). A new kind of work is one entry.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)  # what kind of batch rows go in: a Key, or any hashable the caller's run takes


class QueueFull(Exception):
    """max_queue requests are already waiting or running."""


@dataclass(frozen=True)
class Key:
    """What kind of batch a request's rows go in: `kind` names the Handlers entry that runs them; `group`
    keeps apart rows of one kind that cannot share a forward pass (None: all rows of the kind can)."""

    kind: str
    group: Hashable = None


class Handlers:
    """A Batcher's `run` as a table: kind of work -> fn(rows) -> one result per row.

    handlers = Handlers({"embed": embed_rows, "predict": predict_rows, "fill-mask": fill_mask_rows})
    key = handlers.key("predict", group=4)   # an unknown kind fails here, where the request is prepared
    Batcher(handlers, ...)                   # a batch of `key` runs handlers.table[key.kind](rows)
    """

    def __init__(self, table: Mapping[str, Callable[[list], list]]) -> None:
        self.table = dict(table)

    def key(self, kind: str, group: Hashable = None) -> Key:
        """The key of rows of `kind` (one of the table's) and `group`."""
        self._handler(kind)
        return Key(kind, group)

    def __call__(self, key: Key | str, rows: list) -> list:
        """The results of a batch of `key` (a Key, or a kind's name for a kind without groups)."""
        return self._handler(key.kind if isinstance(key, Key) else key)(rows)

    def _handler(self, kind: str) -> Callable[[list], list]:
        try:
            return self.table[kind]
        except (KeyError, TypeError):  # TypeError: an unhashable key
            raise LookupError(
                f"no handler for batches of {kind!r}; the kinds are {', '.join(map(repr, self.table))}"
            ) from None


@dataclass
class Job(Generic[K]):
    key: K
    rows: list
    tokens: list[int]  # real tokens of each row
    future: asyncio.Future[list]
    loop: asyncio.AbstractEventLoop
    arrived: float = field(default_factory=time.monotonic)
    next: int = 0  # the next row to put in a batch
    left: int = 0  # rows not computed yet
    results: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.left = len(self.rows)
        self.results = [None] * len(self.rows)


@dataclass
class BatchStats:
    rows: int
    tokens: int
    seconds: float


class Batcher(Generic[K]):
    """A worker running `run(key, rows) -> one result per row` on batches of submitted rows: in a thread of its
    own, or (thread=False) in whichever thread calls `work()`, until `stop()`."""

    def __init__(
        self,
        run: Callable[[K, list], list],
        *,
        max_batch_tokens: int,
        max_wait_ms: float,
        max_queue: int,
        batching: bool = True,
        on_batch: Callable[[BatchStats], None] | None = None,
        thread: bool = True,
    ) -> None:
        self.run = run
        self.max_batch_tokens = max_batch_tokens
        self.max_wait = max_wait_ms / 1000
        self.max_queue = max_queue
        self.batching = batching
        self.on_batch = on_batch
        self.waiting: deque[Job[K]] = deque()  # jobs with rows not yet in a batch, oldest first
        self.in_flight = 0  # jobs submitted and not answered
        self.last_rows = 0  # rows of the last batch: more than one, and a free worker waits for company
        self.cond = threading.Condition()
        self.stopping = False
        self.thread = threading.Thread(target=self.work, name="bertkit-batcher", daemon=True) if thread else None
        if self.thread is not None:
            self.thread.start()

    # ----- the event loop's side ----------------------------------------------------------------
    async def submit(self, key: K, rows: list, tokens: list[int]) -> list:
        """One result per row, in order, once every row has been through the model."""
        loop = asyncio.get_running_loop()
        job = Job(key, rows, tokens, loop.create_future(), loop)
        if not rows:
            return []
        with self.cond:
            if self.stopping:
                raise QueueFull("the server is shutting down")
            if self.in_flight >= self.max_queue:
                raise QueueFull(f"{self.in_flight} requests are waiting or running (--max-queue {self.max_queue})")
            self.in_flight += 1
            self.waiting.append(job)
            self.cond.notify()
        try:
            return await job.future
        finally:
            with self.cond:
                self.in_flight -= 1

    def depth(self) -> int:
        """Requests waiting or running."""
        return self.in_flight

    def stop(self, timeout: float | None = None) -> None:
        """Finish every submitted job, then end the worker (its thread: joined)."""
        with self.cond:
            self.stopping = True
            self.cond.notify()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout)

    # ----- the worker -------------------------------------------------------------------------------
    def work(self) -> None:
        """Run batches until stop() was called and every submitted job is done."""
        while True:
            with self.cond:
                while not self.waiting and not self.stopping:
                    self.cond.wait()
                if not self.waiting:  # stopping and nothing left
                    return
                self._wait_for_more()
                taken = self._take()
            if taken is not None:
                self._run(*taken)

    def _wait_for_more(self) -> None:
        """Up to max_wait after the oldest job arrived, while the waiting rows do not fill a batch."""
        if not self.batching or self.max_wait <= 0 or self.last_rows <= 1:
            return
        while not self.stopping:
            left = self.waiting[0].arrived + self.max_wait - time.monotonic()
            if left <= 0 or self._waiting_tokens(self.waiting[0].key) >= self.max_batch_tokens:
                return
            self.cond.wait(left)

    def _waiting_tokens(self, key: K) -> int:
        return sum(sum(job.tokens[job.next :]) for job in self.waiting if job.key == key)

    def _take(self) -> tuple[K, list[tuple[Job[K], int]]] | None:
        """(key, [(job, row index), ...]): round-robin over the waiting jobs of the oldest job's key (None: no job
        waits, all were cancelled)."""
        for job in [job for job in self.waiting if job.future.done()]:  # cancelled: its client is gone
            self.waiting.remove(job)
        if not self.waiting:
            return None
        key = self.waiting[0].key
        jobs = [job for job in self.waiting if job.key == key] if self.batching else [self.waiting[0]]
        picked: list[tuple[Job[K], int]] = []
        used = 0
        while jobs:
            for job in jobs:
                cost = job.tokens[job.next]
                if picked and used + cost > self.max_batch_tokens:
                    jobs = []
                    break
                picked.append((job, job.next))
                used += cost
                job.next += 1
            jobs = [job for job in jobs if job.next < len(job.rows)]
        for job in {id(j): j for j, _ in picked}.values():
            if job.next == len(job.rows):
                self.waiting.remove(job)
        return key, picked

    def _run(self, key: K, picked: list[tuple[Job[K], int]]) -> None:
        if not picked:
            return
        self.last_rows = len(picked)
        start = time.perf_counter()
        try:
            results = self.run(key, [job.rows[i] for job, i in picked])
            if len(results) != len(picked):
                raise RuntimeError(f"run gave {len(results)} results for {len(picked)} rows")
            error = None
        except Exception as e:  # the worker goes on; the requests whose rows failed get the error
            results, error = None, e
        if self.on_batch is not None:
            self.on_batch(BatchStats(len(picked), sum(job.tokens[i] for job, i in picked), time.perf_counter() - start))
        jobs = list({id(job): job for job, _ in picked}.values())
        if error is not None and len(jobs) > 1:  # one request's bad row must not fail its batch-mates:
            for job in jobs:  # each request's rows again, alone (not a cancelled one's: its client is gone)
                if not job.future.done():
                    self._run(key, [(j, i) for j, i in picked if j is job])
            return
        for n, (job, i) in enumerate(picked):
            if job.future.done():
                continue
            if error is not None:
                _notify(job, None, error)
                with self.cond:  # its other rows need not run
                    if job in self.waiting:
                        self.waiting.remove(job)
                continue
            assert results is not None  # the batch ran without an error
            job.results[i] = results[n]
            job.left -= 1
            if job.left == 0:
                _notify(job, job.results, None)


def _notify(job: Job[Any], value: list | None, error: BaseException | None) -> None:
    """Settle the job's future on its event loop (gone when uvicorn was forced to stop: nobody waits then)."""
    try:
        job.loop.call_soon_threadsafe(_settle, job.future, value, error)
    except RuntimeError:  # the loop is closed
        pass


def _settle(future: asyncio.Future[list], value: list | None, error: BaseException | None) -> None:
    if future.done():  # the client went away and the handler was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        assert value is not None  # a job without an error is settled with its results
        future.set_result(value)
