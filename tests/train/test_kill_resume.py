"""kill -9 at random points of a short pretraining, then --resume: the same model and log as an uninterrupted run.

SIGTERM is the polite stop (tests/train/test_train.py); SIGKILL gives the run no chance to tidy up: a save or a metrics
row may be cut halfway and the run folder's .lock stays behind. What must hold anyway (issue #18):

- the resumed run takes the folder over (its .lock names a dead process) and goes on from the last training state;
- model.safetensors equals the uninterrupted run's, tensor for tensor;
- metrics.jsonl holds every training step exactly once, in order, with the uninterrupted run's losses.
"""

import os
import random
import signal
import subprocess
import sys
import time
import warnings

import pytest
import torch
from safetensors.torch import load_file

from bertkit import BertConfig
from bertkit.train.runlog import read_metrics

pytestmark = pytest.mark.slow  # every test here kills a training subprocess and resumes it

STEPS = 40
# Seeds of the kill points, chosen in steps, not seconds (a sleep lands at another step on a faster or slower
# machine, and a fast one finished the run before a late kill): the first kill comes as soon as the first run
# has a checkpoint and has written training row 12 / 19 / 28 (early, middle and late in the run; at least 12
# steps and the final save are left then); the second one once the resumed run has written 1-8 rows past the
# last one the killed run wrote. A kill lands wherever the run is when the row is seen: in the next step, in a
# save (every 5 steps), in the metrics log.
SEEDS = (4, 9, 20)
FIRST_KILL_ROWS = (5, 30)  # the first kill's row is drawn from these (inclusive)
NEXT_KILL_AFTER = (1, 8)  # later kills: this many rows past the last kill's last row
KILLS_PER_SEED = 2  # the first run, then the first resumed run (when it is still running by then)
TIMEOUT = 120  # seconds for any one process: far more than a run needs, most of which is starting Python and torch


@pytest.fixture(scope="module")
def setup(tmp_path_factory, corpus_file, tokenizer_dir):
    """A real People's Daily corpus (600 paragraphs), one learned vocabulary (1,500: conftest's, shared with the
    other runs), a tiny config without dropout."""
    config = tmp_path_factory.mktemp("kill_resume") / "config.json"
    BertConfig.from_preset("tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0).to_json(config)
    return {"corpus": corpus_file, "tokenizer": tokenizer_dir, "config": str(config)}


def command(setup, out, objective="mlm") -> list[str]:
    """`objective` "modern": --objective mlm on a ModernBERT (--model-config modern-tiny, no dropout)."""
    return [
        sys.executable,
        "-m",
        "bertkit",
        "pretrain",
        "--objective",
        "mlm" if objective == "modern" else objective,
        "--corpus",
        setup["corpus"],
        "--model-config",
        "modern-tiny" if objective == "modern" else setup["config"],
        "--tokenizer",
        setup["tokenizer"],
        "--out",
        str(out),
        "--steps",
        str(STEPS),
        "--save-every",
        "5",
        "--log-every",
        "1",
        "--eval-every",
        "0",
        "--seq-len",
        "32",
        "--batch-size",
        "8",
        "--no-progress",
        "--device",
        "cpu",
        "--seed",
        "3",
    ]


def start(cmd, log) -> subprocess.Popen:
    """The command with its output in files (a pipe nobody reads could block it)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(f"{log}.out", "w") as stdout, open(f"{log}.err", "w") as stderr:
        return subprocess.Popen(cmd, stdout=stdout, stderr=stderr, env=env)


def tail(log) -> str:
    return "".join(open(f"{log}.{kind}", encoding="utf-8", errors="replace").read()[-1500:] for kind in ("out", "err"))


def wait_until(ready, what, proc, log) -> bool:
    """Poll until ready() holds (True) or the run ends first (False)."""
    deadline = time.monotonic() + TIMEOUT
    while not ready():
        if proc.poll() is not None:
            return False
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no {what} after {TIMEOUT} s: {tail(log)}")
        time.sleep(0.005)
    return True


def last_train_step(out) -> int:
    """The last training step in metrics.jsonl so far (0: none); read while a run appends to it."""
    if not (out / "metrics.jsonl").exists():
        return 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a row cut by a kill, or being written right now
        return max((r["step"] for r in train_rows(out)), default=0)


def train_rows(out) -> list[dict]:
    return [r for r in read_metrics(os.path.join(out, "metrics.jsonl")) if r.get("split") != "eval"]


@pytest.fixture(scope="module")
def references(setup, tmp_path_factory):
    """One uninterrupted run of the same command per objective, made when a test first asks for it."""
    made = {}

    def reference(objective: str):
        if objective not in made:
            out = tmp_path_factory.mktemp(f"reference-{objective}") / "run"
            log = out.parent / "log"
            proc = start(command(setup, out, objective), log)
            assert proc.wait(timeout=TIMEOUT) == 0, tail(log)
            made[objective] = out
        return made[objective]

    return reference


# MLM at every seed's kill points; ELECTRA (generator and discriminator, its seeded samples) and a ModernBERT's MLM
# at the middle one
@pytest.mark.parametrize(
    "objective, seed", [("mlm", seed) for seed in SEEDS] + [("electra", SEEDS[1]), ("modern", SEEDS[1])]
)
def test_sigkill_at_a_random_point_then_resume_equals_an_uninterrupted_run(
    setup, references, tmp_path, objective, seed
):
    reference = references(objective)
    rng = random.Random(seed)
    out = tmp_path / "run"
    cmd = command(setup, out, objective)
    state_file = out / "checkpoint" / "training_state.pt"
    landed = []  # where each kill landed: (run, the step of the training state on disk, the last training row)
    for attempt in range(1, KILLS_PER_SEED + 2):
        log = tmp_path / f"run{attempt}"
        proc = start(cmd + (["--resume"] if attempt > 1 else []), log)
        if attempt == 1:  # kill only a run that has saved at least one checkpoint
            row = rng.randint(*FIRST_KILL_ROWS)
            alive = wait_until(state_file.exists, state_file, proc, log) and wait_until(
                lambda: last_train_step(out) >= row, f"training row {row}", proc, log
            )
        elif attempt <= KILLS_PER_SEED:  # a resumed run, once it trains past the rows the last kill left
            row = landed[-1][-1] + rng.randint(*NEXT_KILL_AFTER)
            alive = wait_until(lambda: last_train_step(out) >= row, f"training row {row}", proc, log)
        else:
            alive = False
        if alive and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=TIMEOUT)
            state = torch.load(state_file, weights_only=True, map_location="cpu")
            landed.append((attempt, int(state["step"]), last_train_step(out)))
            if landed[-1][-1] < STEPS:  # still training: the run held the folder, and its .lock stays
                assert (out / ".lock").exists(), f"seed {seed}, run {attempt}: a SIGKILLed run leaves its .lock"
        else:
            code = proc.wait(timeout=TIMEOUT)
            assert code == 0, f"seed {seed}, run {attempt} (kills so far: {landed}) exited {code}: {tail(log)}"
        if attempt > 1 and landed[attempt - 2][-1] < STEPS:  # the kill before this run left its .lock
            assert "taking the folder over" in (tmp_path / f"run{attempt}.err").read_text(), tail(log)
        if proc.returncode == 0:
            break
    assert landed, f"seed {seed}: the run ended before it could be killed; pick earlier kill rows"
    print(f"seed {seed}: kills (run, saved step, last training row) {landed}; {attempt} runs")

    for folder in ("", "generator") if objective == "electra" else ("",):  # ELECTRA's generator in <out>/generator
        expected, got = (load_file(run / folder / "model.safetensors") for run in (reference, out))
        assert set(got) == set(expected)
        for name in expected:
            assert torch.equal(got[name], expected[name]), f"seed {seed}, kills {landed}: {folder}/{name} differs"
    rows, reference_rows = train_rows(out), train_rows(reference)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1)), f"seed {seed}, kills {landed}"
    for row, ref in zip(rows, reference_rows):
        assert row["loss"] == pytest.approx(ref["loss"], abs=1e-6), f"seed {seed}, kills {landed}: step {row['step']}"
    assert not (out / ".lock").exists(), "the run that finished releases the folder"
    leftovers = [p for p in out.rglob(".*.tmp")]
    assert not leftovers, f"temp files of killed saves stay behind: {leftovers}"
