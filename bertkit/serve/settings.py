"""`bertkit serve`'s settings: its flags, and the limits and batching the app reads from them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from uvicorn.config import LOG_LEVELS

from ..devices import Precision, device_opt, precision_opt
from ..engines import DEFAULT_ENGINE, ENGINE_HELP, Engine
from ..options import opt
from ..pooling import POOLING_MODES
from ..quantize import CHOICES as QUANTIZE_CHOICES
from ..quantize import FLAG_HELP as QUANTIZE_HELP

PREDICT_MAX_TOKENS = 2048  # tokens per /predict input without --max-input-tokens (longer inputs run as windows)


@dataclass
class ServeConfig:
    """Serve a model folder over HTTP: embeddings, predictions, fill-mask, with dynamic batching."""

    model: str = opt(
        "", "a model folder: bertkit finetune / pretrain --out, or a (sentence-transformers) BERT folder", required=True
    )
    host: str = opt("127.0.0.1", "address to listen on (0.0.0.0: every interface; there is no authentication)")
    port: int = opt(8080, "port to listen on")
    max_batch_tokens: int = opt(8192, "real tokens per forward pass at most (a single longer input runs alone)")
    max_wait_ms: float = opt(2.0, "how long a free worker waits for more requests to fill a batch")
    batching: bool = opt(True, "--no-batching runs one request per forward pass (a baseline)")
    max_queue: int = opt(512, "requests waiting or running at most; more are answered 429")
    max_inputs: int = opt(64, "inputs per request at most (413 past it)")
    max_body_bytes: int = opt(
        1 << 20,
        "request body size at most, in bytes (413 past it, once the body was read "
        "and dropped: bodies up to 4x the limit or 16 MiB; larger ones are not read)",
    )
    max_input_tokens: int | None = opt(
        None,
        "tokens per input at most (default: the embedding model's "
        f"max_seq_length for /embed, {PREDICT_MAX_TOKENS} for /predict, "
        "which windows)",
    )
    quantize: str | None = opt(None, QUANTIZE_HELP, choices=QUANTIZE_CHOICES)
    engine: Engine = opt(DEFAULT_ENGINE, ENGINE_HELP + "; with a task or MLM head, /embed runs the encoder's own graph")
    device: str = device_opt()
    precision: Precision = precision_opt()
    pooling: str | None = opt(
        None, "embedding pooling (default: the sentence-transformers folder's, else mean)", choices=list(POOLING_MODES)
    )
    normalize: bool | None = opt(
        None,
        "L2-normalize each embedding; None: as the folder says (a sentence-transformers Normalize module), else not",
    )
    max_connections: int = opt(
        1000,
        "open connections at most: past it the oldest idle one (no request under way) "
        "is closed to make room, or if none is idle the new one gets 503",
    )
    header_timeout: float = opt(
        10.0,
        "seconds a client has to send a request's headers, from connecting (or from a "
        "kept-alive request's first byte); then 408 and the connection closed",
    )
    body_timeout: float = opt(
        30.0,
        "seconds a client has to send a request's body once its headers arrived; then 408 and the connection closed",
    )
    log_level: str = opt("info", "uvicorn's log level", choices=list(LOG_LEVELS))

    def problem(self) -> str | None:
        for name in ("max_batch_tokens", "max_queue", "max_inputs", "max_body_bytes", "max_connections"):
            if getattr(self, name) < 1:
                return f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}"
        for name in ("header_timeout", "body_timeout"):
            if not 0 < getattr(self, name) < math.inf:
                return f"--{name.replace('_', '-')} must be a number of seconds above 0, got {getattr(self, name)}"
        if self.max_wait_ms < 0:
            return f"--max-wait-ms must be 0 or more, got {self.max_wait_ms}"
        if self.max_input_tokens is not None and self.max_input_tokens < 3:
            return f"--max-input-tokens must be at least 3 ([CLS] a token [SEP]), got {self.max_input_tokens}"
        if not 0 <= self.port <= 65535:
            return f"--port must be from 0 to 65535, got {self.port}"
        return None
