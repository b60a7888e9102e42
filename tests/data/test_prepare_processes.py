"""The worker processes of `bertkit prepare` (and of `bertkit pretrain --corpus`, which prepares first) never
outlive it, and a stop signal while preparing ends the command cleanly (bertkit/data/prepare.py, bertkit/cli.py).

Each run reads its corpus from a FIFO that a thread of the test feeds without end: the command can never finish
on its own, whatever the machine's speed, and its workers exist once the first block has been handed out. The
test waits for them (by the parent pid in /proc), kills or signals the parent only, and then looks for the
workers by pid and start time (a pid used again later is another process; a zombie is dead).
"""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from bertkit.config import BertConfig
from bertkit.data import prepare as prepare_module

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and os.path.isdir("/proc/self/task")),
    reason="reads processes from /proc and the corpus from a FIFO (Linux)",
)

TIMEOUT = 300  # seconds for anything to happen in a subprocess (far more than it needs)
# seconds after the parent's end by which its workers must be gone: the kernel ends them at once (they are gone in
# well under 2 s, the target); the margin is for a machine busy with other work, not a speed assumption
GONE_WITHIN = 10.0
WORKERS = 2


# ----- processes, as /proc shows them --------------------------------------------------------------
def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name: [state, ppid, ...]; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()


def children(pid: int) -> dict[int, str]:
    """{child pid: its start time} of the live children of `pid`."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat(int(name))
            if fields and fields[1] == str(pid) and fields[0] != "Z":
                found[int(name)] = fields[19]  # starttime: tells this process from a later one with its pid
    return found


def alive(pid: int, started: str) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z" and fields[19] == started


def wait_for_workers(proc: subprocess.Popen, log) -> dict[int, str]:
    """The parent's worker processes, once WORKERS of them exist (a bound far above the need, not a guess)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        found = children(proc.pid)
        if len(found) >= WORKERS:
            return found
        if proc.poll() is not None:
            pytest.fail(f"the command ended ({proc.returncode}) before its workers started:\n{log.read_text()}")
        time.sleep(0.02)
    pytest.fail(f"no {WORKERS} worker processes after {TIMEOUT} s:\n{log.read_text()}")


def survivors(workers: dict[int, str]) -> list[int]:
    """The workers still alive GONE_WITHIN seconds from now at the latest (fewer as soon as they die)."""
    start = time.monotonic()
    while True:
        left = [pid for pid, started in workers.items() if alive(pid, started)]
        if not left or time.monotonic() >= start + GONE_WITHIN:
            print(f"workers {'gone' if not left else 'still alive'} {time.monotonic() - start:.3f} s after")
            return left
        time.sleep(0.02)


# ----- a corpus without end ------------------------------------------------------------------------
class EndlessCorpus:
    """A FIFO fed by a thread with the same text again and again, for every reader that opens it (pretrain
    reads the corpus once to check it, then prepares it)."""

    def __init__(self, path, text: str):
        self.path, self.data, self.stopped = str(path), text.encode("utf-8"), False
        os.mkfifo(self.path)
        self.thread = threading.Thread(target=self._feed, daemon=True)
        self.thread.start()

    def _feed(self) -> None:
        while not self.stopped:
            try:
                with open(self.path, "wb") as fh:  # waits for a reader
                    while not self.stopped:
                        fh.write(self.data)
            except BrokenPipeError:  # that reader is done; the next one gets the stream from the start
                continue

    def close(self) -> None:
        self.stopped = True
        # a feeder waiting in open() for a reader: open one, so that it wakes, writes into nothing and stops
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        os.close(fd)
        self.thread.join(timeout=10)


@pytest.fixture
def endless_corpus(tmp_path, corpus_file):
    with open(corpus_file, encoding="utf-8") as fh:
        corpus = EndlessCorpus(tmp_path / "endless.txt", fh.read())
    yield corpus.path
    corpus.close()


# ----- the commands --------------------------------------------------------------------------------
def prepare_command(corpus, tokenizer, out) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bertkit",
        "prepare",
        "--corpus",
        corpus,
        "--tokenizer",
        tokenizer,
        "--out",
        str(out),
        "--workers",
        str(WORKERS),
        "--no-progress",
    ]


def pretrain_command(corpus, tokenizer, config, out) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bertkit",
        "pretrain",
        "--corpus",
        corpus,
        "--tokenizer",
        tokenizer,
        "--model-config",
        config,
        "--out",
        str(out),
        "--workers",
        str(WORKERS),
        "--steps",
        "2",
        "--seq-len",
        "32",
        "--batch-size",
        "4",
        "--eval-every",
        "0",
        "--save-every",
        "0",
        "--no-progress",
        "--device",
        "cpu",
    ]


@pytest.fixture(scope="module")
def tiny_config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    BertConfig.from_preset("tiny").to_json(path)
    return str(path)


@pytest.fixture
def start(tmp_path):
    """start(command) -> (process, its log): in a session of its own; the whole group is killed at the end, so
    that a failing test leaves no process behind either."""
    started = []

    def run(command):
        log = tmp_path / f"run{len(started)}.log"
        with open(log, "w") as fh:
            proc = subprocess.Popen(
                command, stdout=fh, stderr=fh, start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
            )
        started.append(proc)
        return proc, log

    yield run
    for proc in started:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=TIMEOUT)


def partial_folders(folder) -> list[str]:
    return [os.path.join(root, name) for root, dirs, _ in os.walk(folder) for name in dirs if name.endswith(".partial")]


# ----- kill -9 -------------------------------------------------------------------------------------
def test_the_workers_of_a_killed_prepare_die_with_it(tmp_path, endless_corpus, tokenizer_dir, start):
    proc, log = start(prepare_command(endless_corpus, tokenizer_dir, tmp_path / "data"))
    workers = wait_for_workers(proc, log)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=TIMEOUT) == -signal.SIGKILL
    assert survivors(workers) == [], f"workers alive {GONE_WITHIN} s after their parent was killed"


def test_the_workers_of_a_killed_pretrain_die_with_it(tmp_path, endless_corpus, tokenizer_dir, tiny_config_file, start):
    proc, log = start(pretrain_command(endless_corpus, tokenizer_dir, tiny_config_file, tmp_path / "run"))
    workers = wait_for_workers(proc, log)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=TIMEOUT) == -signal.SIGKILL
    assert survivors(workers) == [], f"workers alive {GONE_WITHIN} s after their parent was killed"


# ----- a stop signal -------------------------------------------------------------------------------
def stopped_cleanly(proc, log, workers, signum, folder) -> str:
    """Checks what a stop signal must leave: its exit status, one line and no traceback, no worker, no partial
    folder. Returns that line."""
    code = proc.wait(timeout=TIMEOUT)
    text = log.read_text()
    assert code == 128 + signum, text
    assert "Traceback" not in text, text
    stops = [line for line in text.splitlines() if "stopped by" in line]
    assert stops and stops == text.splitlines()[-len(stops) :] and len(stops) == 1, text
    assert survivors(workers) == [], f"workers alive {GONE_WITHIN} s after their parent stopped"
    assert partial_folders(folder) == []
    return stops[0]


# Ctrl-C in a terminal signals the whole process group, as `timeout` or a container's stop may do with SIGTERM:
# the workers' ends must not be taken for crashes ("a worker process died")
@pytest.mark.parametrize(
    "signum, to_group",
    [(signal.SIGTERM, False), (signal.SIGTERM, True), (signal.SIGINT, True)],
    ids=["SIGTERM", "SIGTERM-to-group", "Ctrl-C"],
)
def test_a_stop_signal_ends_prepare_cleanly(tmp_path, endless_corpus, tokenizer_dir, start, signum, to_group):
    out = tmp_path / "data"
    proc, log = start(prepare_command(endless_corpus, tokenizer_dir, out))
    workers = wait_for_workers(proc, log)
    (os.killpg if to_group else os.kill)(proc.pid, signum)
    line = stopped_cleanly(proc, log, workers, signum, tmp_path)
    name = signal.Signals(signum).name
    assert (
        line == f"bertkit prepare: stopped by {name}; nothing was written to --out {out} (run it again to start over)"
    )
    assert not os.path.exists(out)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".lock")]  # the lock went with it


def test_sigterm_while_pretrain_prepares_its_corpus_ends_it_cleanly(
    tmp_path, endless_corpus, tokenizer_dir, tiny_config_file, start
):
    out = tmp_path / "run"
    proc, log = start(pretrain_command(endless_corpus, tokenizer_dir, tiny_config_file, out))
    workers = wait_for_workers(proc, log)
    os.kill(proc.pid, signal.SIGTERM)
    line = stopped_cleanly(proc, log, workers, signal.SIGTERM, tmp_path)
    assert line.startswith(f"bertkit pretrain: stopped by SIGTERM; it was preparing --corpus into {out / 'data'}: ")
    assert not os.path.exists(out / "data") and not os.path.exists(out / ".lock")


# ----- the guard in each worker, alone -------------------------------------------------------------
def _arm_and_wait(parent: int, prctl: bool) -> None:
    if not prctl:
        prepare_module._set_parent_death_signal = lambda: False  # as where prctl is missing: the watcher
    prepare_module._die_with_parent(parent)
    time.sleep(TIMEOUT)


@pytest.mark.parametrize("prctl", [True, False], ids=["prctl", "watcher"])
def test_a_worker_whose_parent_is_already_gone_ends_at_once(prctl):
    # a pid that is not the child's parent stands for a parent that died before the worker was armed (getppid
    # then names whoever adopted it)
    import multiprocessing

    child = multiprocessing.get_context("fork").Process(target=_arm_and_wait, args=(os.getpid() + 10**7, prctl))
    child.start()
    try:
        child.join(timeout=60)  # it ends at once; a bound far above the need
        assert child.exitcode == -signal.SIGKILL
    finally:
        child.kill()
        child.join()


def test_an_armed_worker_lives_while_its_parent_does():
    import multiprocessing

    context = multiprocessing.get_context("fork")
    child = context.Process(target=_arm_and_wait, args=(os.getpid(), False))
    child.start()
    try:
        child.join(timeout=3 * prepare_module.PARENT_CHECK_SECONDS)  # the watcher looked at least twice
        assert child.is_alive()
    finally:
        child.kill()
        child.join()


# ----- stopping the pool while a worker is halfway through a result --------------------------------
_FORKED = {}  # the pool and an event, as the forked worker inherits them


def _half_a_result() -> None:
    """Send the first bytes of a 1 MB result and stop there, as a worker killed halfway through sending does."""
    import struct

    os.write(_FORKED["pool"]._result_queue._writer.fileno(), struct.pack("!i", 1 << 20) + b"x" * 10)
    _FORKED["sent"].set()
    time.sleep(TIMEOUT)


def test_stopping_the_workers_does_not_wait_for_a_result_cut_halfway():
    import concurrent.futures
    import multiprocessing

    context = multiprocessing.get_context("fork")
    pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=context)
    _FORKED.update(pool=pool, sent=context.Event())
    writer = pool._result_queue._writer
    job = pool.submit(_half_a_result)
    while not _FORKED["sent"].wait(0.05):
        assert not job.done(), job.exception()
    stopping = threading.Thread(target=prepare_module._stop_workers, args=(pool,), daemon=True)
    stopping.start()
    stopping.join(timeout=60)  # it takes a moment; a bound far above the need
    stuck = stopping.is_alive()
    if stuck:  # let the pool's thread go, or the interpreter would wait for it at exit
        writer.close()
        stopping.join(timeout=60)
    assert not stuck, "the pool's thread still waits for the rest of the result"
