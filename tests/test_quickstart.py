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
from conftest import window_logits
from test_readme import bash_commands, check_command

from bertkit.cli import main
from bertkit.quickstart import MARKER, OUTPUTS, QuickstartError, prepare_out

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
    test = [
        json.loads(line) for line in (out / "data" / "sentiment-test.jsonl").read_text(encoding="utf-8").splitlines()
    ]
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
    assert all(seconds[stage] > 0 for stage in ("pretrain", "finetune", "scratch", "labels")), (
        seconds
    )  # training takes time
    assert summary["total_seconds"] == pytest.approx(sum(seconds.values()), abs=0.051)
    # the vocabulary: the size written, and the size asked under its own name (why they differ: when they do)
    written = (out / "pretrain" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert summary["vocab_size"] == len(written) and summary["budget"]["vocab_size_asked"] == 2000
    assert "vocab_size" not in summary["budget"]
    assert (summary["vocab_shortfall"] is None) == (len(written) == 2000)
    assert summary["machine"]["torch_threads"] == 1  # tiny_run's


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
    from bertkit.quickstart import machine_line

    assert machine_line(summary["machine"])[1:] in report  # what the time depends on (capitalised there)
    assert f"A WordPiece vocabulary of {summary['vocab_size']:,} entries" in report
    assert "try 3x" not in "".join(f for facts in summary["control_facts"].values() for f in facts)
    links = re.findall(r"\]\(([^)\s]+)\)", report)
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", report)
    assert {
        "pretrain/loss.png",
        "pretrain/mlm_accuracy.png",
        "finetune/loss.png",
        "labels.png",
        "inside/attention.png",
        "inside/attention.html",
        "inside/pretrained_attention.png",
        "test/confusion_matrix_pretrained.png",
    } <= set(links)
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
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bertkit",
            "quickstart",
            "--tiny",
            "--out",
            str(tmp_path / "again"),
            "--no-progress",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
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
    import bertkit.train.devices as devices
    from bertkit.quickstart import cpu_precision

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert not devices.cpu_has_native_bf16() and cpu_precision("cpu") == []
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert cpu_precision("cpu") == ["--precision", "bf16"]
    assert cpu_precision("cuda") == []  # a GPU: --precision auto already picks bf16 / fp16


# ----- what the report and stderr say, tested without a whole quickstart -----------------------------
def test_machine_line_names_this_cpu_and_the_precision_it_decides(monkeypatch):
    """The CPU's model name, the cores and torch's threads, the two bf16 features and the precision they decide."""
    import bertkit.train.devices as devices
    from bertkit.quickstart import cpu_precision, machine, machine_line

    host = machine("cpu")
    line = machine_line(host)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            names = [l.split(":", 1)[1].strip() for l in fh if l.split(":", 1)[0].strip() == "model name"]
    except OSError:
        names = []
    if names:
        assert host["cpu"] == names[0]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert line.startswith(f"machine: {host['cpu']}, {cores} cores, {torch.get_num_threads()} torch threads; ")
    yes = lambda probe: "yes" if getattr(torch.cpu, probe, lambda: False)() else "no"
    assert f"AVX-512 BF16: {yes('_is_avx512_bf16_supported')}, AMX: {yes('_is_amx_tile_supported')} -> " in line
    precision = "bf16 (autocast)" if cpu_precision("cpu") else "float32"
    assert line.endswith(f"-> {precision} training") and (precision != "float32") == devices.cpu_has_native_bf16()
    # the other machines, as cpu_precision sees them
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert machine_line(machine("cpu")).endswith("; AVX-512 BF16: no, AMX: no -> float32 training")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert machine_line(machine("cpu")).endswith("; AVX-512 BF16: no, AMX: yes -> bf16 (autocast) training")


@pytest.fixture(scope="module")
def still_model(tmp_path_factory):
    """A tiny classifier-to-be without dropout and two labelled reviews: at a learning rate of 1e-9 every step
    sees the same batch and the same loss, so finetune warns that the loss did not fall."""
    from bertkit import BertConfig, BertForMaskedLM
    from bertkit.vocab import train_vocab

    folder = tmp_path_factory.mktemp("still")
    reviews = ["这本书很好看，推荐", "质量太差了"]
    tok = train_vocab(texts=reviews * 2, vocab_size=200)
    tok.save_pretrained(folder / "model")
    torch.manual_seed(0)
    BertForMaskedLM(
        BertConfig.from_preset(
            "tiny", vocab_size=tok.vocab_size, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
        )
    ).save_pretrained(folder / "model")
    train = folder / "train.jsonl"
    train.write_text(
        "".join(
            json.dumps({"text": t, "label": l}, ensure_ascii=False) + "\n" for t, l in zip(reviews, ["pos", "neg"])
        ),
        encoding="utf-8",
    )
    return folder


@pytest.mark.parametrize("control", [False, True])
def test_a_control_run_says_what_happened_without_advice(still_model, tmp_path, capsys, control):
    from bertkit.quickstart import finetune

    argv = [
        "--task",
        "classify",
        "--model",
        str(still_model / "model"),
        "--train",
        str(still_model / "train.jsonl"),
        "--steps",
        "6",
        "--batch-size",
        "2",
        "--lr",
        "1e-9",
        "--log-every",
        "1",
        "--save-every",
        "0",
        "--seq-len",
        "16",
        "--device",
        "cpu",
        "--no-progress",
        "--out",
        str(tmp_path / "run"),
    ]
    result = finetune(argv, control=control)
    err = capsys.readouterr().err
    if not control:  # a run of one's own: the warning and its advice, as `bertkit finetune` prints them
        assert "warning: the training loss did not fall" in err and "try 3x larger" in err
        assert result["summary"].warnings and "facts" not in result
        assert [line for line in err.splitlines() if line.startswith("warning: ")] == result["summary"].warning_lines()
        return
    assert "try 3x" not in err and "likely cause" not in err and "warning:" not in err, err
    notes = [line for line in err.splitlines() if line.startswith("note: control run: ")]
    assert len(notes) == 1 and notes[0].startswith("note: control run: the training loss did not fall (mean ")
    assert result["facts"] == result["summary"].warnings == [notes[0].removeprefix("note: control run: ")]


def test_vocabulary_says_the_size_written_and_why_it_is_smaller(tmp_path, capsys):
    from types import SimpleNamespace

    from bertkit.data.builtin import peoples_daily_texts
    from bertkit.quickstart import vocabulary
    from bertkit.vocab import train_vocab

    tok = train_vocab(texts=peoples_daily_texts()[:50], vocab_size=21128)
    tok.save_pretrained(tmp_path)
    learned = vocabulary(SimpleNamespace(out=str(tmp_path), vocab_size=21128))
    assert learned["vocab_size"] == tok.vocab_size < 21128
    assert learned["vocab_shortfall"].startswith(
        f"the vocabulary has {tok.vocab_size:,} entries, not the 21,128 asked: the corpus gives no more"
    )
    assert capsys.readouterr().err == ""  # pretraining says it, as it learns the vocabulary
    full = vocabulary(SimpleNamespace(out=str(tmp_path), vocab_size=tok.vocab_size))
    assert full == {"vocab_size": tok.vocab_size, "vocab_shortfall": None} and capsys.readouterr().err == ""


def test_report_says_the_machine_the_vocabulary_and_the_controls_facts(tmp_path):
    """write_report on a summary of the shape main() writes: the machine line, why the vocabulary is smaller
    than asked, what the control runs showed (as facts, without advice)."""
    from dataclasses import asdict

    from bertkit.quickstart import PROFILES, machine, machine_line, write_report

    budget = asdict(PROFILES["cpu"])
    budget["vocab_size_asked"] = budget.pop("vocab_size")
    stages = ("data",) + STAGES
    fact = "the training loss did not fall (mean 0.6931 over the first 4 logged steps, 0.6932 over the last 4)"
    shortfall = "the vocabulary has 5,837 entries, not the 21,128 asked: the corpus gives no more. It holds ..."
    summary = {
        "profile": "cpu",
        "device": "cpu",
        "seed": 0,
        "budget": budget,
        "machine": machine("cpu"),
        "vocab_size": 5837,
        "vocab_shortfall": shortfall,
        "mlm_accuracy": 0.3,
        "neighbour_attention": 0.8,
        "test_accuracy_pretrained": 0.77,
        "test_accuracy_scratch": 0.72,
        "test_accuracy_bag_of_chars": 0.82,
        "test_macro_f1_pretrained": 0.76,
        "test_macro_f1_scratch": 0.7,
        "dev_accuracy_pretrained": 0.78,
        "dev_accuracy_scratch": 0.73,
        "pretrain_steps": 1400,
        "finetune_steps": 150,
        "test_examples": 2000,
        "label_efficiency": [
            {"labels": n, "pretrained": 0.7, "scratch": 0.5, "bag_of_chars": 0.8} for n in (200, 1000, 13889)
        ],
        "control_facts": {"scratch": [fact], "scratch-200": [fact], "scratch-1000": []},
        "review": {
            "text": "很好",
            "label": "pos",
            "predicted": "pos",
            "score": 0.9,
            "tokens": ["[CLS]", "很", "好", "[SEP]"],
        },
        "local_head": {"layer": 0, "head": 1, "offset": 1, "weight": 0.92},
        "stage_seconds": {name: 1.0 for name in stages},
        "total_seconds": float(len(stages)),
        "commands": {"quickstart": "bertkit quickstart", **{name: [] for name in stages}},
    }
    report = open(write_report(str(tmp_path), summary, "BertForSequenceClassification(...)"), encoding="utf-8").read()
    line = machine_line(summary["machine"])
    assert f"M{line[1:]}." in report  # the sentence under the title
    assert (
        "A WordPiece vocabulary of 5,837 entries" in report
        and "The vocabulary has 5,837 entries, not the 21,128 asked: the corpus gives no more." in report
    )
    scratch, labels = report.index("### 3. The baseline"), report.index("### 4. Fewer labels")
    assert report.index(f"- `scratch`: {fact}") > scratch and report.index(f"- `scratch-200`: {fact}") > labels
    assert "`scratch-1000`" not in report and "try 3x" not in report
