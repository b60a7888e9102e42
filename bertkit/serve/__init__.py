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
from dataclasses import dataclass

from ..options import opt, parse
from ..embed import POOLING_MODES
from ..quantize import CHOICES as QUANTIZE_CHOICES, FLAG_HELP as QUANTIZE_HELP


@dataclass
class ServeConfig:
    """Serve a model folder over HTTP: embeddings, predictions, fill-mask, with dynamic batching."""

    model: str = opt("", "a model folder: bertkit finetune / pretrain --out, or a (sentence-transformers) BERT folder",
                     required=True)
    host: str = opt("127.0.0.1", "address to listen on (0.0.0.0: every interface; there is no authentication)")
    port: int = opt(8080, "port to listen on")
    max_batch_tokens: int = opt(8192, "real tokens per forward pass at most (a single longer input runs alone)")
    max_wait_ms: float = opt(2.0, "how long a free worker waits for more requests to fill a batch")
    batching: bool = opt(True, "--no-batching runs one request per forward pass (a baseline)")
    max_queue: int = opt(512, "requests waiting or running at most; more are answered 429")
    max_inputs: int = opt(64, "inputs per request at most (413 past it)")
    max_body_bytes: int = opt(1 << 20, "request body size at most, in bytes (413 past it)")
    max_input_tokens: int | None = opt(None, "tokens per input at most (default: the embedding model's "
                                             "max_seq_length for /embed, 2048 for /predict, which windows)")
    quantize: str | None = opt(None, QUANTIZE_HELP, choices=QUANTIZE_CHOICES)
    pooling: str | None = opt(None, "embedding pooling (default: the sentence-transformers folder's, else mean)",
                              choices=list(POOLING_MODES))
    normalize: bool = opt(None, "L2-normalize each embedding; None: as the folder says (a sentence-transformers "
                                "Normalize module), else not")
    log_level: str = opt("info", "uvicorn's log level", choices=["critical", "error", "warning", "info", "debug"])

    def problem(self) -> str | None:
        for name in ("max_batch_tokens", "max_queue", "max_inputs", "max_body_bytes"):
            if getattr(self, name) < 1:
                return f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}"
        if self.max_wait_ms < 0:
            return f"--max-wait-ms must be 0 or more, got {self.max_wait_ms}"
        if self.max_input_tokens is not None and self.max_input_tokens < 3:
            return f"--max-input-tokens must be at least 3 ([CLS] a token [SEP]), got {self.max_input_tokens}"
        if not 0 <= self.port <= 65535:
            return f"--port must be from 0 to 65535, got {self.port}"
        return None


def serve_main(argv: list[str]) -> int:
    import uvicorn

    from .app import Limits, build_app
    from .engine import Engine

    cfg = parse(ServeConfig, argv, prog="bertkit serve")
    # oneDNN keeps a compiled kernel per input shape (default: up to 1024); batches of every length would
    # grow the server's memory for hours. 16 bounds it at no measured cost (bench/results/serve_attempts.md)
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16")
    engine = Engine(cfg.model, quantize=cfg.quantize, pooling=cfg.pooling, normalize=cfg.normalize,
                    max_input_tokens=cfg.max_input_tokens)
    limits = Limits(max_body_bytes=cfg.max_body_bytes, max_inputs=cfg.max_inputs,
                    max_batch_tokens=cfg.max_batch_tokens, max_wait_ms=cfg.max_wait_ms, max_queue=cfg.max_queue,
                    batching=cfg.batching)
    app, batcher = build_app(engine, limits)
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
