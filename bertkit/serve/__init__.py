"""`bertkit serve`: a model folder behind HTTP, with dynamic batching.

    bertkit serve --model runs/quickstart/finetune              # http://127.0.0.1:8080
    curl -s localhost:8080/predict -d '{"inputs": "质量很好，物流也快"}'
    curl -s localhost:8080/embed -d '{"inputs": ["今天天气很好", "The weather is nice"]}'

Routes (JSON in and out; app.py checks requests, engine.py runs them, batcher.py batches them):
    POST /embed            {"inputs": str | [str], "truncate": false}   -> [[float, ...], ...]
    POST /v1/embeddings    OpenAI's request {"input": ..., "model": ...} and response shape (a list of token ids is
                           one input; a list of such lists, one per list)
    POST /                 the Hugging Face inference API (huggingface_hub's InferenceClient): the task the body
                           asks for (compat.py's docstring says how it is read) if the model has it
    POST /predict          {"inputs": str | object | [...]}   -> a row as `bertkit predict` writes it (a list for a
                           list); objects hold the task's fields (text / text_pair, question / context, ...)
    POST /fill-mask        {"inputs": "今天天气很[MASK]。", "top_k": 5}   (a model with its MLM head)
    POST /tokenize         {"inputs": str | [str]}   -> tokens with ids and character offsets
    GET  /health, /info (model, task, labels, limits; the model folder's name, never its path), /metrics
                           (Prometheus text format)

Requests that arrive together run as one padding-free forward pass in the main thread, where the
model was loaded, while uvicorn's event loop runs in a second thread and never waits on the model;
batcher.py's docstring has the batching policy. Tokenizing a large request (and writing a large
answer) runs in a third thread, so that a 1 MB /tokenize does not hold /health back.

Answers: bad requests get a 4xx JSON error {"error", "type"} (under /v1/, OpenAI's shape); past --max-queue waiting
requests, 429. A task the model has not is 400 "not_supported", naming the task and the model's head: /predict
without a task head, /fill-mask without an MLM head, /rerank without a re-ranker, POST / asked for a task its head
does not do. Embeddings (/embed, /v1/embeddings, POST / feature extraction and sentence similarity) come from
every model: its encoder, pooled as its folder says.
A forward pass whose outputs are not finite: 500 {"type": "non_finite_output"} (never NaN in a 200); any
other failure is a JSON 500 too. A client that leaves before its answer is counted as status 499 in
/metrics (as nginx does), without a traceback, and its request, if still waiting, is not run.

Careless or hostile clients (connections.py's GuardedHttp):
    --max-connections (1000)  open connections at most: past it the oldest idle one is closed to make
                              room, or if every one has a request under way the new one gets 503
    --header-timeout (10 s)   for a request's headers: then 408 (a connection that sent nothing: closed)
    --body-timeout (30 s)     for its body once the headers came: then 408, and the connection closed
    --max-body-bytes (1 MiB)  past it 413; the body is read and dropped first (up to 16 MiB or 4x the
                              limit), so clients that send the whole body before reading the answer
                              (urllib, requests) get the 413 and not a reset; Expect: 100-continue gets it
                              at once, unread
A --host that is not a loopback address gets a warning at start-up: there is no authentication.
SIGTERM / Ctrl-C: uvicorn stops accepting connections; reads still under way end at once (a body not
complete: 503 "shutting_down"; headers not complete: closed), every request read whole is answered,
then the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import signal
import socket
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, cast

from ..deprecated import moved
from .settings import ServeConfig

if TYPE_CHECKING:
    from .engine import Engine


def run(cfg: ServeConfig) -> int:
    """Load the model, serve until SIGTERM / Ctrl-C, answer what is in flight; the exit status (2: uvicorn could
    not start, e.g. the port is in use)."""
    import uvicorn

    from .app import build_app
    from .engine import Engine

    # oneDNN keeps a compiled kernel per input shape (default: up to 1024); batches of every length would
    # grow the server's memory for hours. 16 bounds it at no measured cost (bench/results/serve_attempts.md)
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16")
    engine = Engine(
        cfg.model,
        quantize=cfg.quantize,
        pooling=cfg.pooling,
        normalize=cfg.normalize,
        max_input_tokens=cfg.max_input_tokens,
        engine=cfg.engine,
        device=cfg.device,
        precision=cfg.precision,
    )
    app, batcher, protocol = build_app(engine, cfg)
    announce(cfg, engine)
    enough_file_descriptors(cfg.max_connections)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=cfg.host,
            port=cfg.port,
            log_level=cfg.log_level,
            http=cast("type[asyncio.Protocol]", protocol),  # a factory of GuardedHttp: uvicorn calls it as the class
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=30,
        )
    )

    def http() -> None:  # uvicorn in a second thread; the model stays in this one (batcher.py says why)
        try:
            server.run()
        finally:
            batcher.stop()  # also when uvicorn could not start (a port in use): nothing is left waiting

    def drain(
        sig: int, frame: FrameType | None
    ) -> None:  # SIGTERM / Ctrl-C: stop accepting, answer what is in flight, shut down
        server.force_exit = server.should_exit and sig == signal.SIGINT  # a second Ctrl-C: now
        server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, drain)
    thread = threading.Thread(target=http, name="bertkit-http")
    thread.start()
    batcher.work()  # forward passes, until the app has shut down and every job is done
    thread.join()
    return 0 if server.started else 2


def announce(cfg: ServeConfig, engine: Engine) -> None:
    """What is served, on stderr; a warning when --host is not a loopback address (there is no authentication)."""
    print(
        f"bertkit serve: {engine.architecture} from {cfg.model} ({engine.task.name if engine.task else 'no task'}"
        f" head), engine {engine.engine_name} ({engine.engine_why}) on {engine.where.describe()}, routes"
        f" {', '.join(engine.routes)}",
        file=sys.stderr,
        flush=True,
    )
    if not is_loopback(cfg.host):
        print(
            f"bertkit serve: warning: --host {cfg.host} is not a loopback address: other machines can reach port "
            f"{cfg.port}, and there is no authentication (anyone who reaches it can use the model); put a proxy "
            "that authenticates in front, or serve on --host 127.0.0.1",
            file=sys.stderr,
            flush=True,
        )


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one (127.0.0.0/8, ::1; "localhost")."""
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def enough_file_descriptors(connections: int) -> None:
    """Raise the soft limit on open files (ulimit -n) to hold --max-connections and the model's files; warn if
    the hard limit is lower (connections past it would fail to be accepted)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return
    need = connections + 128  # the model's files, the tokenizer's, pipes, torch's
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        soft = raised
    if soft < need:
        print(
            f"bertkit serve: warning: --max-connections {connections} needs about {need} open files, and this "
            f"process may open {soft} (ulimit -n); lower --max-connections or raise the limit",
            file=sys.stderr,
            flush=True,
        )


if not TYPE_CHECKING:  # old names, for one release
    __getattr__ = moved(
        __name__,
        {
            "serve_main": "bertkit.commands.serve:main",
        },
    )
