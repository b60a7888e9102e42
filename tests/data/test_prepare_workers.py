"""`bertkit prepare` with worker processes, killed with kill -9 and run on corpora of two sizes (all slow)."""

import gzip
import json
import os
import random
import signal
import subprocess
import sys

import pytest
from prepare_helpers import (
    HELDOUT,
    SEED,
    TIMEOUT,
    assert_same_folders,
    check_round_trip,
    sha256_of,
    siblings,
)

from bertkit.data import prepare as prepare_module
from bertkit.data.dataset import DataError, PretrainingData
from bertkit.data.prepare import prepare


# ----- worker processes ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def all_paragraphs(tmp_path_factory):
    """All of People's Daily, Jan 1998 (19,484 paragraphs, 5.5 MB), one per line."""
    from bertkit.data.builtin import peoples_daily_texts

    texts = peoples_daily_texts()
    path = tmp_path_factory.mktemp("big") / "pd_all.txt"
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return str(path), texts


@pytest.mark.slow
def test_one_or_two_workers_write_the_same_bytes(tmp_path, all_paragraphs, tok):
    path, texts = all_paragraphs  # 5.5 MB: 4 blocks of the default size
    folders = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        prepare(path, tok, str(out), heldout=HELDOUT, seed=SEED, workers=workers)
        folders.append(out)
    assert_same_folders(*folders)
    manifest = json.load(open(folders[0] / "manifest.json"))
    assert manifest["documents_read"] == len(texts) and manifest["splits"]["train"]["tokens"] > 1_500_000
    check_round_trip(str(folders[1]), texts, tok)


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(prepare_module, "BLOCK_CHARS", 3000)  # many blocks from a small corpus


@pytest.mark.slow
def test_a_folder_of_text_and_gzipped_jsonl_gives_the_same_bytes_with_two_workers(tmp_path, docs, tok, small_blocks):
    corpus = tmp_path / "corpus"
    (corpus / "b_sub").mkdir(parents=True)
    (corpus / "a.txt").write_text("\n".join(docs[:200]) + "\n", encoding="utf-8")
    with gzip.open(corpus / "b_sub" / "c.jsonl.gz", "wt", encoding="utf-8") as fh:
        for d in docs[200:450]:
            fh.write(json.dumps({"id": 1, "text": d}, ensure_ascii=False) + "\n")
    (corpus / "d.jsonl").write_text(
        "".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in docs[450:]), encoding="utf-8"
    )
    (corpus / ".hidden.txt").write_text("不读我\n", encoding="utf-8")
    folders = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        manifest = prepare(str(corpus), tok, str(out), heldout=HELDOUT, seed=SEED, workers=workers).manifest
        folders.append(out)
    assert_same_folders(*folders)
    names = [str(corpus / "a.txt"), str(corpus / "b_sub" / "c.jsonl.gz"), str(corpus / "d.jsonl")]
    assert [s["name"] for s in manifest["sources"]] == names
    assert [(s["bytes"], s["sha256"]) for s in manifest["sources"]] == [
        (os.path.getsize(n), sha256_of(n)) for n in names
    ]
    check_round_trip(str(folders[1]), docs, tok)  # the same 600 documents, in the same order


@pytest.mark.slow
def test_wwm_with_two_workers_gives_the_same_bytes(tmp_path, docs, tok, small_blocks):
    pytest.importorskip("jieba")
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(docs[:150]) + "\n", encoding="utf-8")
    folders = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        prepare(str(corpus), tok, str(out), wwm=True, heldout=HELDOUT, seed=SEED, workers=workers)
        folders.append(out)
    assert_same_folders(*folders)
    check_round_trip(str(folders[1]), docs[:150], tok, wwm=True)


# ----- kill -9 ------------------------------------------------------------------------------------
KILL_SEEDS = (1, 2, 3)


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory, all_paragraphs):
    """People's Daily paragraphs four times over, each time in another order (22 MB, 78k documents)."""
    _, texts = all_paragraphs
    path = tmp_path_factory.mktemp("bigger") / "pd_x4.txt"
    with open(path, "w", encoding="utf-8") as fh:
        for round_ in range(4):
            order = list(texts)
            random.Random(round_).shuffle(order)
            fh.write("\n".join(order) + "\n")
    return str(path)


def prepare_command(corpus, tokenizer, out, workers=2) -> list[str]:
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
        str(workers),
        "--no-progress",
    ]


# `bertkit prepare` in a process that stops itself (SIGSTOP) just before the Nth call of a step, so that the test
# kills it at a chosen point of the work whatever the machine's speed; "count" runs it whole and prints the calls
STOPPING = """\
import os, signal, sys
from bertkit.cli import main
from bertkit.data import dataset, prepare
point, nth = sys.argv[1], int(sys.argv[2])
owner, name = {"append": (dataset.SplitWriter, "append"), "replace": (prepare, "_replace")}[point]
step, calls = getattr(owner, name), [0]
def stopping(*args, **kwargs):
    calls[0] += 1
    if calls[0] == nth:
        os.kill(os.getpid(), signal.SIGSTOP)
    return step(*args, **kwargs)
setattr(owner, name, stopping)
code = main(sys.argv[3:])
print("calls", calls[0], file=sys.stderr)
sys.exit(code)
"""


def stopping_command(point: str, nth: int, corpus, tokenizer, out) -> list[str]:
    return [sys.executable, "-c", STOPPING, point, str(nth), *prepare_command(corpus, tokenizer, out)[3:]]


def wait_stopped(proc: subprocess.Popen) -> None:
    """Until `proc` has stopped itself (it cannot end first: it stops before the step it counts)."""
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), f"it ended instead (status {status})"


@pytest.mark.slow
def test_a_killed_preparation_leaves_nothing_that_looks_complete_and_a_rerun_finishes_it(
    tmp_path, all_paragraphs, tokenizer_dir
):
    """kill -9 (of the whole process group) before a write of the ids chosen at random, and just before the
    finished folder is renamed into place: no folder, nothing but the partial folder and the lock beside it;
    the rerun gives the uninterrupted run's files. The kill points are steps of the work, not moments."""
    corpus, _ = all_paragraphs
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    reference = tmp_path / "reference"
    done = subprocess.run(
        stopping_command("append", 0, corpus, tokenizer_dir, reference),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    appends = int(done.stderr.split("calls ")[-1])
    assert appends >= 6, done.stderr  # several blocks, each written to both splits
    points = [("append", random.Random(seed).randint(1, appends)) for seed in KILL_SEEDS] + [("replace", 1)]
    for point, nth in points:
        out = tmp_path / f"killed_{point}_{nth}"
        with open(tmp_path / f"{point}_{nth}.log", "w") as log:
            proc = subprocess.Popen(
                stopping_command(point, nth, corpus, tokenizer_dir, out),
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )  # its own process group, workers included
        try:
            wait_stopped(proc)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        assert proc.returncode == -signal.SIGKILL
        assert not out.exists(), (point, nth)
        with pytest.raises(DataError):
            PretrainingData.open(str(out))
        assert set(siblings(out)) <= {f".{out.name}.partial", f".{out.name}.lock"}
        rerun = subprocess.run(
            prepare_command(corpus, tokenizer_dir, out), capture_output=True, text=True, timeout=TIMEOUT, env=env
        )
        assert rerun.returncode == 0, rerun.stderr
        assert siblings(out) == [], (point, nth)
        assert_same_folders(out, reference)
        PretrainingData.open(str(out))


# ----- memory -------------------------------------------------------------------------------------
PEAK_RSS = (
    "import resource, subprocess, sys\n"
    "done = subprocess.run(sys.argv[1:])\n"
    "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)


@pytest.mark.slow
def test_memory_does_not_grow_with_the_corpus(tmp_path, all_paragraphs, big_corpus, tokenizer_dir):
    path, _ = all_paragraphs
    peaks = {}
    for name, corpus in (("small", path), ("large", big_corpus)):
        done = subprocess.run(
            [sys.executable, "-c", PEAK_RSS, *prepare_command(corpus, tokenizer_dir, tmp_path / name, workers=1)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        code, kib = done.stdout.split()[-2:]
        assert code == "0", done.stderr
        peaks[name] = int(kib) / 1024  # MiB
    small_tokens = json.load(open(tmp_path / "small" / "manifest.json"))["splits"]["train"]["tokens"]
    large_tokens = json.load(open(tmp_path / "large" / "manifest.json"))["splits"]["train"]["tokens"]
    assert large_tokens > 3.9 * small_tokens
    # measured (2 cores, --workers 1): 5.5 MB of text 106.6 MiB peak, 22 MB 107.7 MiB: flat
    print(f"peak RSS: {peaks}")
    assert peaks["large"] <= 1.25 * peaks["small"] + 30, peaks
