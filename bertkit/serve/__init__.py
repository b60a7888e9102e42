"""`bertkit serve`: a model folder behind HTTP, with dynamic batching.

    bertkit serve --model runs/quickstart/finetune              # http://127.0.0.1:8080
    curl -s localhost:8080/predict -d '{"inputs": "质量很好，物流也快"}'
    curl -s localhost:8080/embed -d '{"inputs": ["今天天气很好", "The weather is nice"]}'

Routes (JSON in and out; app.py checks requests, engine.py runs them, batcher.py batches them):
    POST /embed            {"inputs": str | [str], "truncate": false}   -> [[float, ...], ...]
    POST /v1/embeddings    OpenAI's request {"input": ..., "model": ...} and response shape
    POST /predict          {"inputs": str | object | [...]}   -> a row as `bertkit predict` writes it (a list for a
                           list); objects hold the task's fields (text / text_pair, question / context, ...)
    POST /fill-mask        {"inputs": "今天天气很[MASK]。", "top_k": 5}   (a model with its MLM head)
    POST /tokenize         {"inputs": str | [str]}   -> tokens with ids and character offsets
    GET  /health, /info (model, task, labels, limits), /metrics (Prometheus text format)

Requests that arrive together run as one padding-free forward pass in the main thread, where the
model was loaded, while uvicorn's event loop runs in a second thread and never waits on the model;
batcher.py's docstring has the batching policy. Bad requests get a
4xx JSON error {"error", "type"}; past --max-queue waiting requests, 429. SIGTERM / Ctrl-C: uvicorn
stops accepting connections, every request in flight is answered, then the process exits 0.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from ..options import parse
from .settings import ServeConfig


def serve_main(argv: list[str]) -> int:
    import uvicorn

    from .app import build_app
    from .engine import Engine

    cfg = parse(ServeConfig, argv, prog="bertkit serve")
    # oneDNN keeps a compiled kernel per input shape (default: up to 1024); batches of every length would
    # grow the server's memory for hours. 16 bounds it at no measured cost (bench/results/serve_attempts.md)
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16")
    engine = Engine(cfg.model, quantize=cfg.quantize, pooling=cfg.pooling, normalize=cfg.normalize,
                    max_input_tokens=cfg.max_input_tokens)
    app, batcher = build_app(engine, cfg)
    print(f"bertkit serve: {engine.architecture} from {cfg.model} ({engine.task.name if engine.task else 'no task'}"
          f" head), routes {', '.join(engine.routes)}", file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level=cfg.log_level,
                                           access_log=False, lifespan="on", timeout_graceful_shutdown=30))

    def http() -> None:  # uvicorn in a second thread; the model stays in this one (batcher.py says why)
        try:
            server.run()
        finally:
            batcher.stop()  # also when uvicorn could not start (a port in use): nothing is left waiting

    def drain(sig, frame) -> None:  # SIGTERM / Ctrl-C: stop accepting, answer what is in flight, shut down
        server.force_exit = server.should_exit and sig == signal.SIGINT  # a second Ctrl-C: now
        server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, drain)
    thread = threading.Thread(target=http, name="bertkit-http")
    thread.start()
    batcher.work()  # forward passes, until the app has shut down and every job is done
    thread.join()
    return 0 if server.started else 2
