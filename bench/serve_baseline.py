"""The server a user would write without bertkit serve: the baseline of bench/bench_serve.py.

    python bench/serve_baseline.py [--embed-model DIR] [--predict-model DIR] [--host 127.0.0.1] --port P

The standard library's ThreadingHTTPServer (one thread per connection) around the usual calls, one
model call per request, no batching across requests:

    POST /embed     {"inputs": "text" | ["t1", ...]}  ->  [[float, ...], ...]
                    SentenceTransformer(DIR, device="cpu").encode(texts)
    POST /predict   {"inputs": "text"}                ->  {"label": ..., "score": ...}
                    {"inputs": ["t1", ...]}           ->  [{"label": ..., "score": ...}, ...]
                    transformers.pipeline("text-classification", model=DIR, device=-1)(texts,
                    truncation=True)   (a review longer than the model's positions would fail without it)
    GET  /health    200 {"status": "ok"} once the models are loaded (they load before the port opens)

Bad JSON or inputs are a 400 {"error", "type"}; an exception in the model a 500. torch's thread count
is left at its default, as a user would leave it. The listen backlog is raised from socketserver's 5
to 128 (class Server), or 32 clients connecting at once see resets. HTTP/1.1 keep-alive is on (protocol_version), so the
load generator's clients keep one connection each, as they do with bertkit serve. Runs offline: every
model is a local folder (HF_HUB_OFFLINE is set before transformers is imported).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class BadRequest(ValueError):
    pass


def read_inputs(body: bytes) -> tuple[list[str], bool]:
    """The texts of a request body and whether it held a single string (the reply is then one row)."""
    try:
        data = json.loads(body)
    except ValueError as e:  # also bad UTF-8
        raise BadRequest(f"the body is not JSON: {e}") from None
    inputs = data.get("inputs") if isinstance(data, dict) else None
    if isinstance(inputs, str):
        return [inputs], True
    if isinstance(inputs, list) and inputs and all(isinstance(t, str) for t in inputs):
        return inputs, False
    raise BadRequest('expected {"inputs": "text"} or {"inputs": ["text", ...]} with at least one text')


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's listen backlog is 5: with 32 clients connecting at once the kernel's accept queue
    # overflows and connections are reset or wait for SYN retries (seconds). One line a user adds once
    # they see it; uvicorn's backlog is 2048.
    request_queue_size = 128


def make_handler(embedder, classifier):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def reply(self, status: int, payload) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                self.reply(200, {"status": "ok"})
            else:
                self.reply(404, {"error": f"no route {self.path}", "type": "not_found"})

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            model = {"/embed": embedder, "/predict": classifier}.get(self.path)
            if model is None:
                self.reply(404, {"error": f"no model serves {self.path}", "type": "not_found"})
                return
            try:
                texts, single = read_inputs(body)
            except BadRequest as e:
                self.reply(400, {"error": str(e), "type": "bad_request"})
                return
            try:
                if self.path == "/embed":
                    self.reply(200, embedder.encode(texts).tolist())
                else:
                    rows = [
                        {"label": r["label"], "score": float(r["score"])} for r in classifier(texts, truncation=True)
                    ]
                    self.reply(200, rows[0] if single else rows)
            except Exception as e:  # noqa: BLE001 - a user's server answers 500 and keeps serving
                self.reply(500, {"error": str(e), "type": type(e).__name__})

        def log_message(self, format, *args):  # one line per request would slow the server down
            pass

    return Handler


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--embed-model", default=None, help="a sentence-transformers folder for /embed")
    p.add_argument("--predict-model", default=None, help="a HF text-classification folder for /predict")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    if not (args.embed_model or args.predict_model):
        p.error("give --embed-model, --predict-model or both")

    embedder = classifier = None
    if args.embed_model:
        from sentence_transformers import SentenceTransformer

        embedder = SentenceTransformer(args.embed_model, device="cpu")
    if args.predict_model:
        import transformers

        transformers.logging.set_verbosity_error()
        classifier = transformers.pipeline("text-classification", model=args.predict_model, device=-1)

    server = Server((args.host, args.port), make_handler(embedder, classifier))
    # SIGTERM (how bench_serve.py stops every server): stop accepting, exit 0
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    print(
        f"serve_baseline: listening on http://{args.host}:{args.port} "
        f"(embed: {args.embed_model}, predict: {args.predict_model})",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
