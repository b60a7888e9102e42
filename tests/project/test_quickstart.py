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
from helpers import torch_threads, window_logits
from test_readme import bash_commands, check_command

from bertkit import BertConfig
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
    # step 0 (the model before any training step, evaluated as the run's evaluations are), then 8 or more of 20 steps
    assert [r["step"] for r in summary["pretrain_curve"]] == [0, *range(2, 21, 2)]
    step0 = summary["locality"]["step0"]
    assert summary["pretrain_curve"][0] == {"step": 0, **{k: step0[k] for k in ("mlm_accuracy", "neighbour_attention")}}
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
    assert "masked-language modelling teaches" not in report
    seeded = [h for h in summary["locality"]["heads"] if h["seeded"]]
    assert f"| {sum(h['step0'] for h in seeded) / len(seeded):.2f} |" in report  # the seeded heads at step 0
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
def test_a_second_run_in_another_process_gives_the_same_numbers_and_models(tmp_path):
    """Two fresh processes, as a user runs it twice. (Against the in-process tiny_run of a full test session the
    5th-6th decimals of the attention measures and one score moved: state an earlier test leaves in the test
    process, not a run's own.)"""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # float sums depend on the thread count
    summaries = []
    for name in ("first", "again"):
        proc = subprocess.run(
            [sys.executable, "-m", "bertkit", "quickstart", "--tiny", "--out", str(tmp_path / name), "--no-progress"]
            + ["--device", "cpu"],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        summaries.append(json.loads((tmp_path / name / "summary.json").read_text(encoding="utf-8")))
    timeless = lambda s: {k: v for k, v in s.items() if k not in ("stage_seconds", "total_seconds", "commands")}
    assert timeless(summaries[1]) == timeless(summaries[0])
    for name in ("pretrain/vocab.txt", "pretrain/model.safetensors", "finetune/model.safetensors"):
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "first" / name).read_bytes(), name


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


FACT = "the training loss did not fall (mean 0.6931 over the first 4 logged steps, 0.6932 over the last 4)"


def report_summary(**changes):
    """A summary of the shape run() writes, for write_report and results_table without a whole quickstart: the cpu
    profile's mini (4 layers x 4 heads), its seeded heads at 0.95 at step 0 and 0.94 after, the others at 0.05."""
    from dataclasses import asdict

    from bertkit.quickstart import PROFILES, machine

    budget = asdict(PROFILES["cpu"])
    budget["vocab_size_asked"] = budget.pop("vocab_size")
    stages = ("data",) + STAGES
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
        "pretrain_curve": [
            {"step": 0, "mlm_accuracy": 0.01, "neighbour_attention": 0.96},
            {"step": 1400, "mlm_accuracy": 0.3, "neighbour_attention": 0.8},
        ],
        "locality": locality(0.95, 0.94, 0.05, 0.06),
        "test_examples": 2000,
        "label_efficiency": [
            {"labels": n, "pretrained": 0.7, "scratch": 0.5, "bag_of_chars": 0.8} for n in (200, 1000, 13889)
        ],
        "control_facts": {"scratch": [FACT], "scratch-200": [FACT], "scratch-1000": []},
        "review": {
            "text": "很好",
            "label": "pos",
            "predicted": "pos",
            "score": 0.9,
            "tokens": ["[CLS]", "很", "好", "[SEP]"],
        },
        "local_head": {"layer": 0, "head": 1, "offset": 1, "weight": 0.92, "seeded_offset": 1, "step0_weight": 0.95},
        "stage_seconds": {name: 1.0 for name in stages},
        "total_seconds": float(len(stages)),
        "commands": {"quickstart": "bertkit quickstart", **{name: [] for name in stages}},
    }
    summary.update(changes)
    return summary


def locality(seeded_step0, seeded_final, other_step0, other_final):
    """summary["locality"] of mini: the heads bertkit.init seeds at seeded_*, the others at other_* (the last of them
    at exactly that, the rest a little lower)."""
    from bertkit.init import default_heads

    seeded = {(layer, head): offset for layer, head, offset in default_heads(4, 4)}
    others = [(layer, head) for layer in range(4) for head in range(4) if (layer, head) not in seeded]
    heads = [
        {"layer": layer, "head": head, "seeded": True, "offset": offset, "step0": seeded_step0, "final": seeded_final}
        for (layer, head), offset in seeded.items()
    ]
    heads += [
        {
            "layer": layer,
            "head": head,
            "seeded": False,
            "offset": -1,
            "step0": other_step0 - 0.01 * (len(others) - 1 - n),
            "final": other_final - 0.01 * (len(others) - 1 - n),
        }
        for n, (layer, head) in enumerate(others)
    ]
    return {"rows": 16, "tokens": 128, "step0": {"mlm_accuracy": 0.01, "neighbour_attention": 0.96}, "heads": heads}


def test_report_says_the_machine_the_vocabulary_and_the_controls_facts(tmp_path):
    """write_report on a summary of the shape main() writes: the machine line, why the vocabulary is smaller
    than asked, what the control runs showed (as facts, without advice)."""
    from bertkit.quickstart import machine_line, write_report

    summary = report_summary()
    fact = FACT
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


# ----- what initialisation set, what training changed ------------------------------------------------------
def report_text(tmp_path, **changes) -> str:
    from bertkit.quickstart import write_report

    return open(write_report(str(tmp_path), report_summary(**changes), "..."), encoding="utf-8").read()


def test_report_credits_initialisation_when_training_did_not_change_the_seeded_heads(tmp_path):
    """Seeded heads 0.95 at step 0 and 0.94 after, the others 0.05 -> 0.06: the stripes are initialisation's; the
    report says so with the step-0 numbers and credits training with nothing."""
    from bertkit.quickstart import results_table

    report = report_text(tmp_path)
    assert "| the 12 seeded heads: mean attention on the neighbour each was pointed at | 0.95 | 0.94 |" in report
    assert "| the 4 other heads: the most one puts on one neighbour | 0.05 | 0.06 |" in report
    assert "they already put 0.95 on their neighbour at step 0" in report
    assert "training left it about there (0.94)" in report
    assert "Training made none of the other heads local (the most local one: 0.05 at step 0, 0.06 after)" in report
    assert "layers 0-1: every head; layers 2-3: heads 0-1" in report
    for credit in ("masked-language modelling teaches", "sharpened", "loosened", "training made this stripe"):
        assert credit not in report, credit
    # the review's head: seeded there, so its stripe is initialisation's
    assert "The `local` recipe pointed this head at the next token before training: at step 0 it already put 0.95" in (
        report
    )
    assert "neighbouring token | 0.8000 (step 0, from initialisation: 0.96) |" in report
    table = results_table(report_summary())
    assert "most attention a head puts on one neighbour 0.8000 (step 0, from initialisation: 0.96)" in table
    assert table.endswith(
        "(the review in report.md: layer 0 head 1 puts 0.92 of its attention on the token at offset +1, "
        "where the local recipe pointed it: 0.95 at step 0)"
    )


@pytest.mark.parametrize(
    "numbers, says, never",
    [
        (
            (0.95, 0.79, 0.05, 0.06),
            ["training loosened it to 0.79", "Training made none of the other heads"],
            ["Training moved other heads"],
        ),
        (
            (0.80, 0.93, 0.05, 0.06),
            ["training sharpened it to 0.93", "Training made none of the other heads"],
            ["Training moved other heads"],
        ),
        (
            (0.95, 0.96, 0.05, 0.62),
            [
                "training left it about there (0.96)",
                "the most local one (layer 3 head 3, offset -1) went from 0.05 to 0.62",
            ],
            ["Training made none"],
        ),
    ],
)
def test_report_says_what_training_changed_as_the_numbers_say(tmp_path, numbers, says, never):
    report = report_text(tmp_path, locality=locality(*numbers))
    for words in says:
        assert words in report, words
    for words in never:
        assert words not in report, words


def test_report_says_training_made_the_stripe_of_a_head_the_recipe_did_not_seed(tmp_path):
    head = {"layer": 3, "head": 3, "offset": -1, "weight": 0.7, "seeded_offset": None, "step0_weight": 0.1}
    report = report_text(tmp_path, local_head=head, locality=locality(0.95, 0.96, 0.05, 0.62))
    assert "The `local` recipe did not seed this head: at step 0 it put 0.10 there, so training made this stripe" in (
        report
    )


def test_pretraining_plot_starts_at_step_0_and_cuts_no_title():
    """mlm_accuracy.png: both curves from step 0 (initialisation), every title and label inside the figure."""
    import matplotlib.pyplot as plt
    from test_run_logging import outside_the_figure

    from bertkit.quickstart import pretraining_figure

    fig = pretraining_figure(report_summary())
    try:
        assert outside_the_figure(fig) == []
        accuracy_ax, local_ax = fig.axes
        assert list(accuracy_ax.get_lines()[0].get_xdata()) == [0, 1400]
        assert list(local_ax.get_lines()[0].get_xdata()) == [0, 1400]
        labels = [line.get_label() for line in local_ax.get_lines()]
        assert any(label.startswith("the 12 seeded heads") for label in labels), labels
        assert any(label.startswith("the 4 other heads") for label in labels), labels
    finally:
        plt.close(fig)


@pytest.fixture(scope="module")
def still_pretraining(tmp_path_factory, corpus_file, tokenizer_dir):
    """One step of mlm-bow pretraining with the local recipe at a learning rate of 1e-30: its evaluation after the
    step is the evaluation of the step-0 model (the weights cannot move by 1e-30)."""
    from bertkit.quickstart import pretrain

    out = tmp_path_factory.mktemp("still-pretraining") / "pt"
    argv = ["--corpus", corpus_file, "--tokenizer", tokenizer_dir, "--objective", "mlm-bow", "--recipe", "local"]
    argv += ["--model-config", "tiny", "--steps", "1", "--batch-size", "4", "--lr", "1e-30", "--seq-len", "32"]
    argv += ["--heldout", "0.05", "--eval-rows", "32", "--eval-every", "1", "--device", "cpu", "--no-progress"]
    with torch_threads(1):
        return pretrain([*argv, "--out", str(out)])


def test_step_0_is_the_run_before_its_first_step(still_pretraining):
    """head_locality rebuilds the model pretraining started from: evaluated as the run evaluates, it gives the run's
    own numbers (after a step that cannot move a weight); each head at step 0 and after agree; the heads it calls
    seeded are bertkit.init's for this model (tiny: 2 layers x 4 heads)."""
    from bertkit.init import default_heads
    from bertkit.train.runlog import read_metrics

    cfg, local = still_pretraining["cfg"], still_pretraining["locality"]
    (logged,) = [r for r in read_metrics(f"{cfg.out}/metrics.jsonl") if r.get("split") == "eval"]
    for key in ("loss", "mlm_accuracy", "bow_loss", "neighbour_attention"):
        assert local["step0"][key] == pytest.approx(logged[key], abs=2e-6), key
    assert {(h["layer"], h["head"], h["offset"]) for h in local["heads"] if h["seeded"]} == set(default_heads(2, 4))
    assert len(local["heads"]) == 8
    for h in local["heads"]:
        assert h["step0"] == pytest.approx(h["final"], abs=1e-5), h
    # the curve's measure is the most any head puts on one neighbour: at least what each head here puts
    assert max(h["step0"] for h in local["heads"]) <= local["step0"]["neighbour_attention"] + 1e-6
    assert local["tokens"] == 32 and 1 <= local["rows"] <= 16


def test_heads_without_a_full_held_out_row_are_not_measured_and_the_report_says_so():
    """Held-out rows that all hold padding leave nothing to measure the heads on: no numbers (None), a line in
    the report, not an error after the pretraining ran."""
    from types import SimpleNamespace

    import numpy as np

    from bertkit.model import BertModel
    from bertkit.quickstart import locality_lines, offset_shares

    class Padded:  # rows of 12 tokens, the last 3 of each padding
        def __len__(self) -> int:
            return 4

        def batch(self, indices, words=False):
            ids = np.full((len(indices), 12), 5)
            mask = np.ones_like(ids)
            mask[:, -3:] = 0
            return SimpleNamespace(input_ids=ids, attention_mask=mask, token_type_ids=np.zeros_like(ids))

    model = BertModel(BertConfig.from_preset("tiny")).eval()
    assert offset_shares(model, Padded()) is None
    assert locality_lines({"locality": None}) == ["(No full held-out row to measure the heads on at step 0.)", ""]
