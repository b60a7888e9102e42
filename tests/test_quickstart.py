"""`bertkit quickstart --tiny`: the whole pipeline end to end at a seconds-scale budget, and its report."""

import contextlib
import io
import json
import os
import re
import subprocess
import sys

import pytest
import torch

from bertkit.cli import main
from bertkit.quickstart import MARKER, OUTPUTS, QuickstartError, prepare_out
from conftest import window_logits
from test_readme import bash_commands, check_command

PNG = b"\x89PNG\r\n\x1a\n"
STAGES = ("pretrain", "finetune", "scratch", "labels", "baseline", "test", "inside")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("quickstart") / "report"
    stdout = io.StringIO()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: on a busy 2-core machine a second thread only waits (5x slower)
    try:
        with contextlib.redirect_stdout(stdout):
            code = main(["quickstart", "--tiny", "--out", str(out), "--no-progress", "--device", "cpu"])
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    return out, stdout.getvalue(), json.loads((out / "summary.json").read_text(encoding="utf-8"))


@pytest.mark.slow
def test_summary_has_the_numbers_and_stage_times(tiny_run):
    _, _, summary = tiny_run
    out = tiny_run[0]
    # the pretraining numbers are its last held-out evaluation's (the curve holds them rounded to 6 digits)
    last = summary["pretrain_curve"][-1]
    for key in ("mlm_accuracy", "neighbour_attention"):
        assert summary[key] == pytest.approx(last[key], abs=1e-6), key
    # test accuracies: recomputed here from each saved model's logits on the test reviews (windows of the
    # profile's 64 tokens, overlapping by a quarter: evaluate's defaults)
    test = [json.loads(line) for line in (out / "data" / "sentiment-test.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(test) == summary["test_examples"] >= 16
    for key, folder in (("test_accuracy_pretrained", "finetune"), ("test_accuracy_scratch", "scratch")):
        id2label = json.loads((out / folder / "config.json").read_text(encoding="utf-8"))["id2label"]
        logits = window_logits(out / folder, [r["text"] for r in test], seq_len=64, stride=16)
        right = sum(id2label[str(int(lg.argmax()))] == r["label"] for lg, r in zip(logits, test))
        assert summary[key] == pytest.approx(right / len(test), abs=1e-9), key
    # the baseline's accuracy is a share of those reviews (the logistic regression has its own tests)
    bag = summary["test_accuracy_bag_of_chars"]
    assert 0.0 <= bag <= 1.0 and bag * len(test) == pytest.approx(round(bag * len(test)), abs=1e-6), bag
    assert summary["profile"] == "tiny"
    # fewer labels, then all of them (the tiny profile's training subset: 64 reviews)
    assert [row["labels"] for row in summary["label_efficiency"]] == [16, 64]
    assert summary["label_efficiency"][-1]["pretrained"] == summary["test_accuracy_pretrained"]
    assert summary["label_efficiency"][-1]["bag_of_chars"] == summary["test_accuracy_bag_of_chars"]
    assert [r["step"] for r in summary["pretrain_curve"]] == list(range(2, 21, 2))  # 8 or more points of 20 steps
    head = summary["local_head"]
    assert head["offset"] in (-2, -1, 1, 2) and head["weight"] > 0.3  # a seeded head still looks at a neighbour
    assert set(STAGES) <= set(summary["stage_seconds"])
    seconds = summary["stage_seconds"]
    assert all(seconds[stage] > 0 for stage in ("pretrain", "finetune", "scratch", "labels")), seconds  # training takes time
    assert summary["total_seconds"] == pytest.approx(sum(seconds.values()), abs=0.051)


@pytest.mark.slow
def test_stdout_puts_the_numbers_side_by_side_and_names_the_report(tiny_run):
    out, stdout, summary = tiny_run
    for key in ("mlm_accuracy", "test_accuracy_pretrained", "test_accuracy_scratch"):
        assert f"{summary[key]:.4f}" in stdout
    assert stdout.rstrip().endswith(f"report: {out / 'report.md'}")


@pytest.mark.slow
def test_report_shows_the_numbers_and_every_link_exists(tiny_run):
    out, _, summary = tiny_run
    report = (out / "report.md").read_text(encoding="utf-8")
    for key in ("mlm_accuracy", "test_accuracy_pretrained", "test_accuracy_scratch"):
        assert f"{summary[key]:.4f}" in report, key
    for stage in STAGES:
        assert f"({summary['stage_seconds'][stage]} s)" in report, stage
    links = re.findall(r"\]\(([^)\s]+)\)", report)
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", report)
    assert {"pretrain/loss.png", "pretrain/mlm_accuracy.png", "finetune/loss.png", "labels.png",
            "inside/attention.png", "inside/attention.html", "inside/pretrained_attention.png",
            "test/confusion_matrix_pretrained.png"} <= set(links)
    for link in links:
        path = out / link
        assert path.exists(), link
        if path.is_file():
            data = path.read_bytes()
            assert data, f"{link} is empty"
            if link.endswith(".png"):
                assert data.startswith(PNG), f"{link} is not a PNG"
            if link.endswith(".html"):
                assert data.lstrip().lower().startswith(b"<!doctype html"), link
    assert all(link.endswith(".png") for link in images)


@pytest.mark.slow
def test_report_commands_are_real_commands(tiny_run):
    out, _, summary = tiny_run
    commands = bash_commands((out / "report.md").read_text(encoding="utf-8"))
    programs = [tokens[:2] for _, tokens in commands]
    for name in ("pretrain", "finetune", "evaluate", "predict", "explain", "attention"):
        assert ["bertkit", name] in programs, name
    for number, tokens in commands:
        check_command(tokens, f"report.md:{number}")
    assert "--model tiny --tokenizer" in summary["commands"]["scratch"][0]  # the baseline: random weights


@pytest.mark.slow
def test_a_second_run_in_another_process_gives_the_same_numbers_and_models(tiny_run, tmp_path):
    first, _, summary = tiny_run
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # as tiny_run: float sums depend on the thread count
    proc = subprocess.run([sys.executable, "-m", "bertkit", "quickstart", "--tiny", "--out", str(tmp_path / "again"),
                           "--no-progress", "--device", "cpu"], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = json.loads((tmp_path / "again" / "summary.json").read_text(encoding="utf-8"))
    timeless = lambda s: {k: v for k, v in s.items() if k not in ("stage_seconds", "total_seconds", "commands")}
    assert timeless(again) == timeless(summary)
    for name in ("pretrain/vocab.txt", "pretrain/model.safetensors", "finetune/model.safetensors"):
        assert (tmp_path / "again" / name).read_bytes() == (first / name).read_bytes(), name


def test_an_earlier_run_is_replaced_and_other_files_kept(tmp_path, capsys):
    for name in OUTPUTS[:3]:
        (tmp_path / name).mkdir() if "." not in name else (tmp_path / name).write_text("old")
    (tmp_path / "data" / "stale.jsonl").write_text("old")
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(QuickstartError, match="already holds report.md, summary.json, data, not written by"):
        prepare_out(str(tmp_path))  # not a quickstart folder: nothing is deleted
    assert (tmp_path / "data" / "stale.jsonl").exists()
    (tmp_path / MARKER).write_text("")
    prepare_out(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == [MARKER, "notes.txt"]
    assert "replacing: report.md, summary.json, data" in capsys.readouterr().err


def test_out_that_is_a_file_is_a_clear_error(tmp_path, capsys):
    target = tmp_path / "taken.txt"
    target.write_text("not a folder")
    assert main(["quickstart", "--tiny", "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"--out {target}: is a file, not a folder" in err and "Traceback" not in err
    assert main(["quickstart", "--tiny", "--out", str(target / "below")]) == 2
    assert f"--out {target / 'below'}: cannot create this folder" in capsys.readouterr().err
    assert target.read_text() == "not a folder"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_a_clear_error(tmp_path, capsys):
    assert main(["quickstart", "--device", "cuda", "--out", str(tmp_path / "q")]) == 2
    assert "--device cuda: no CUDA device is available here" in capsys.readouterr().err
    assert not (tmp_path / "q").exists()  # refused before anything was written


def test_a_stopped_stage_names_the_command_that_resumes_it(tmp_path, monkeypatch):
    """Ctrl-C in a stage: the message gives the stage's own command with --resume (report.md is not written yet)."""
    import bertkit.train.pretrain as pt
    from bertkit.quickstart import Stopped, pretrain
    from bertkit.train.loop import TrainSummary

    monkeypatch.setattr(pt, "run", lambda cfg: TrainSummary(step=7, loss=float("nan"), seconds=1.0, interrupted=True))
    out = str(tmp_path / "pt")
    with pytest.raises(Stopped) as stopped:
        pretrain(["--corpus", "builtin:peoples-daily", "--steps", "20", "--out", out])
    message = str(stopped.value)
    assert "stopped at step 7" in message and f"{out}/checkpoint" in message
    assert f"`bertkit pretrain --corpus builtin:peoples-daily --steps 20 --out {out} --resume` continues it" in message


def test_training_takes_bf16_only_on_a_cpu_that_has_it_natively(monkeypatch):
    import bertkit.train.loop as loop
    from bertkit.quickstart import cpu_precision

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert not loop.cpu_has_native_bf16() and cpu_precision("cpu") == []
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert cpu_precision("cpu") == ["--precision", "bf16"]
    assert cpu_precision("cuda") == []  # a GPU: --precision auto already picks bf16 / fp16
