"""--log-to: metrics.csv and TensorBoard event files beside metrics.jsonl (bertkit/train/runlog.py), and the
loss curve's evaluation panel and whole-step ticks.

Real pretraining runs of a tiny model on People's Daily text (CPU, seconds), as in test_runfolder.py. The event
files are read back with TensorBoard's own reader (EventAccumulator), metrics.csv with the csv module, and both
must hold exactly metrics.jsonl's numbers at metrics.jsonl's steps.
"""

import csv
import json
import math
import sys

import pytest
from helpers import torch_threads

from bertkit.cli import main
from bertkit.train import loop
from bertkit.train.loop import TrainingError
from bertkit.train.pretrain import PretrainConfig, run
from bertkit.train.runlog import RunLog, read_metrics

STEPS, SAVE_EVERY = 8, 4


def settings(out, corpus, tokenizer, **kw):
    base = dict(
        out=str(out),
        corpus=corpus,
        tokenizer=tokenizer,
        model_config="tiny",
        seq_len=32,
        batch_size=8,
        steps=STEPS,
        lr=2e-3,
        log_every=1,
        eval_every=SAVE_EVERY,
        save_every=SAVE_EVERY,
        progress=False,
        device="cpu",
        seed=3,
        log_to=["tensorboard", "csv"],
    )
    base.update(kw)
    return PretrainConfig(**base)


def jsonl_numbers(out) -> dict[str, dict[int, float]]:
    """metrics.jsonl's numbers as {split/name: {step: value}} (training rows have no split: "train")."""
    numbers: dict[str, dict[int, float]] = {}
    for row in read_metrics(out / "metrics.jsonl"):
        split = row.get("split", "train")
        for name, value in row.items():
            if name not in ("step", "split"):
                assert row["step"] not in numbers.get(f"{split}/{name}", {}), (split, name, row["step"])
                numbers.setdefault(f"{split}/{name}", {})[row["step"]] = value
    return numbers


def csv_numbers(out) -> dict[str, dict[int, float]]:
    """metrics.csv's numbers, the same way; a step logged twice under one name fails."""
    with open(out / "metrics.csv", newline="", encoding="utf-8") as fh:
        header, *lines = list(csv.reader(fh))
    assert header == ["step", "split", "name", "value"]
    numbers: dict[str, dict[int, float]] = {}
    for step, split, name, value in lines:
        assert int(step) not in numbers.get(f"{split}/{name}", {}), (split, name, step)
        numbers.setdefault(f"{split}/{name}", {})[int(step)] = float(value)
    return numbers


def tensorboard_numbers(out) -> dict[str, dict[int, float]]:
    """Every scalar TensorBoard shows from <out>/tensorboard/ (all its event files): {tag: {step: value}}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})  # 0: keep every event
    events.Reload()
    numbers: dict[str, dict[int, float]] = {}
    for tag in events.Tags()["scalars"]:
        steps = [e.step for e in events.Scalars(tag)]
        assert len(steps) == len(set(steps)), f"{tag}: a step shown twice: {steps}"
        numbers[tag] = {e.step: e.value for e in events.Scalars(tag)}
    return numbers


def assert_same_numbers(shown: dict, logged: dict, tolerance: float = 0.0) -> None:
    assert sorted(shown) == sorted(logged)
    for tag, values in logged.items():
        assert shown[tag] == pytest.approx(values, rel=tolerance, abs=tolerance * 1e-6), tag


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory, corpus_file, tokenizer_dir):
    """A finished 8-step run with --log-to tensorboard csv (a row every step, an evaluation every 4)."""
    out = tmp_path_factory.mktemp("logged") / "run"
    with torch_threads(1):  # tiny tensors: see one_torch_thread in conftest.py
        run(settings(out, corpus_file, tokenizer_dir))
    return out


# ----- every number in every log ------------------------------------------------------------------
def test_tensorboard_shows_every_number_of_metrics_jsonl_at_its_step(logged_run):
    logged = jsonl_numbers(logged_run)
    assert sorted(logged["train/loss"]) == list(range(1, STEPS + 1))
    assert sorted(logged["eval/loss"]) == [4, 8]
    assert {"train/lr", "eval/mlm_accuracy"} <= set(logged)
    assert_same_numbers(tensorboard_numbers(logged_run), logged, tolerance=1e-6)  # event files hold float32


def test_metrics_csv_holds_metrics_jsonls_numbers_one_per_line(logged_run):
    text = (logged_run / "metrics.csv").read_text(encoding="utf-8")
    assert text.startswith("step,split,name,value\n1,train,loss,") and text.endswith("\n")
    assert_same_numbers(csv_numbers(logged_run), jsonl_numbers(logged_run))  # the same digits: exactly equal


# ----- --resume -------------------------------------------------------------------------------------------
def test_resume_after_a_crash_logs_each_step_once_everywhere(
    tmp_path, corpus_file, tokenizer_dir, monkeypatch, one_torch_thread
):
    """A run that dies in step 7 (its state saved at step 4, its rows logged up to step 6), then --resume: every
    log holds steps 1..8 once: the dead run's rows for steps 1..4 (the saved evaluation at step 4 included) as they
    were written, then the resumed run's."""
    out = tmp_path / "run"
    real_step, real_close, closed = loop.optimizer_step, RunLog.close, []

    def close(log):
        closed.append(log.tensorboard is not None)  # an open TensorBoard writer
        real_close(log)

    def crash_in_step_7(r, data, loss_fn):
        if r.step == 6:
            raise RuntimeError("the process died")
        return real_step(r, data, loss_fn)

    monkeypatch.setattr(loop, "optimizer_step", crash_in_step_7)
    monkeypatch.setattr(RunLog, "close", close)
    with pytest.raises(RuntimeError, match="the process died"):
        run(settings(out, corpus_file, tokenizer_dir))
    assert closed == [True]  # the writers are closed on the way out of an error too
    monkeypatch.setattr(loop, "optimizer_step", real_step)
    assert sorted(csv_numbers(out)["train/loss"]) == [1, 2, 3, 4, 5, 6]
    assert sorted(tensorboard_numbers(out)["train/loss"]) == [1, 2, 3, 4, 5, 6]
    saved_rows = [
        line
        for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        if json.loads(line)["step"] <= 4
    ]

    done = run(settings(out, corpus_file, tokenizer_dir, resume=True))
    assert done.step == STEPS
    logged = jsonl_numbers(out)
    assert sorted(logged["train/loss"]) == list(range(1, STEPS + 1)) and sorted(logged["eval/loss"]) == [4, 8]
    lines = (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines[: len(saved_rows)] == saved_rows  # the saved part's rows kept, line for line
    assert_same_numbers(csv_numbers(out), logged)
    assert_same_numbers(tensorboard_numbers(out), logged, tolerance=1e-6)


def test_resume_drops_metrics_csv_lines_after_the_saved_step_and_a_cut_last_line(tmp_path):
    from bertkit.train.runlog import truncate_csv

    path = tmp_path / "metrics.csv"
    path.write_text(
        "step,split,name,value\n4,train,loss,2.5\n4,eval,accuracy,0.5\n5,train,loss,2.4\n6,train,lo", encoding="utf-8"
    )
    truncate_csv(str(path), 4)
    assert path.read_text(encoding="utf-8") == "step,split,name,value\n4,train,loss,2.5\n4,eval,accuracy,0.5\n"
    path.write_text("step,split,name,value\n4,train,loss,2.5\nstep?,train,loss,2.4\n", encoding="utf-8")
    with pytest.raises(TrainingError, match=r"metrics.csv, line 3: not a metrics.csv row"):
        truncate_csv(str(path), 4)


# ----- what is refused --------------------------------------------------------------------------------
def test_log_to_tensorboard_without_the_package_is_an_error_before_any_step(
    tmp_path, corpus_file, tokenizer_dir, monkeypatch, capsys, one_torch_thread
):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # its import fails, as without tensorboard
    out = tmp_path / "run"
    code = main(
        [
            "pretrain",
            "--corpus",
            corpus_file,
            "--tokenizer",
            tokenizer_dir,
            "--out",
            str(out),
            "--model-config",
            "tiny",
            "--seq-len",
            "32",
            "--batch-size",
            "8",
            "--steps",
            "4",
            "--device",
            "cpu",
            "--no-progress",
            "--log-to",
            "csv",
            "tensorboard",
        ]
    )
    assert code == 2
    error = capsys.readouterr().err
    assert "--log-to tensorboard needs the tensorboard package" in error
    assert "pip install 'bertkit[tensorboard]'" in error
    assert not (out / "metrics.jsonl").exists() and not (out / "metrics.csv").exists()
    assert not (out / "checkpoint").exists()


def test_an_unknown_logger_is_refused_by_the_flag_and_in_python(tmp_path, corpus_file, tokenizer_dir, capsys):
    with pytest.raises(SystemExit) as refused:
        main(["pretrain", "--corpus", corpus_file, "--out", str(tmp_path / "a"), "--log-to", "wandb"])
    assert refused.value.code == 2 and "invalid choice: 'wandb'" in capsys.readouterr().err
    with pytest.raises(TrainingError, match=r"--log-to wandb: not a logger; choose from tensorboard, csv"):
        run(settings(tmp_path / "b", corpus_file, tokenizer_dir, log_to=["wandb"]))


def test_a_full_disk_under_any_logger_is_one_error_naming_the_file(tmp_path, monkeypatch):
    import builtins
    import errno

    from torch.utils.tensorboard import SummaryWriter

    log = RunLog(str(tmp_path), ["tensorboard", "csv"])
    log.row({"step": 1, "loss": 2.0})
    real_open = builtins.open

    def csv_disk_full(path, mode="r", *args, **kwargs):
        if str(path).endswith("metrics.csv") and "a" in mode:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_open(path, mode, *args, **kwargs)

    def tensorboard_disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(builtins, "open", csv_disk_full)
    with pytest.raises(
        TrainingError,
        match=r"metrics.csv: the disk is full \([\d,]+ MiB free\); the training state "
        r"saved so far is intact: make room, then continue with --resume",
    ):
        log.row({"step": 2, "loss": 1.9})
    monkeypatch.setattr(builtins, "open", real_open)
    monkeypatch.setattr(SummaryWriter, "add_scalar", tensorboard_disk_full)
    with pytest.raises(TrainingError, match=r"tensorboard: the disk is full \([\d,]+ MiB free\)"):
        log.row({"step": 3, "loss": 1.8})
    log.close()


# ----- loss.png ------------------------------------------------------------------------------------------
def fake_rows(steps: int, eval_at: list[int]) -> list[dict]:
    rows = [
        {"step": s, "loss": 7 - s / steps, "lr": 1e-3, "tokens_per_s": 900.0, "elapsed_s": s / 10}
        for s in range(1, steps + 1)
    ]
    return rows + [
        {
            "step": s,
            "split": "eval",
            "loss": 6.5 - s / steps,
            "mlm_accuracy": s / (2 * steps),
            "perplexity": math.exp(6.5 - s / steps),
            "n": 64,
        }
        for s in eval_at
    ]


def outside_the_figure(fig) -> list[str]:
    """What of each panel (title, axis labels, tick labels, legend) the renderer draws past the figure's edges:
    text a saved PNG cuts off. [] when everything is inside."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    edge = fig.bbox
    cut = []
    for n, ax in enumerate(fig.axes):
        box = ax.get_tightbbox(renderer)
        if box.x0 < edge.x0 - 1 or box.y0 < edge.y0 - 1 or box.x1 > edge.x1 + 1 or box.y1 > edge.y1 + 1:
            cut.append(f"panel {n} ({ax.get_title()!r}): {box} beyond {edge}")
    return cut


def mlm_bow_rows(steps: int, eval_at: list[int]) -> list[dict]:
    """Rows as mlm-bow pretraining logs them: the training objective (MLM + bag of words) near 12, the held-out
    MLM loss near 6, and its bow_loss."""
    rows = [{"step": s, "loss": 12.5 - s / steps, "lr": 1e-3} for s in range(1, steps + 1)]
    return rows + [
        {"step": s, "split": "eval", "loss": 6.1 - s / steps, "bow_loss": 6.2, "mlm_accuracy": 0.03 + s / 1000}
        for s in eval_at
    ]


def test_loss_png_keeps_the_training_objective_off_the_held_out_losses_axis():
    """mlm-bow's training loss (MLM + bag of words) and the held-out MLM loss are different numbers: each on its
    own titled panel, never two curves on one axis as if comparable; no title or label cut off."""
    import matplotlib.pyplot as plt

    from bertkit.train.runlog import loss_figure

    fig = loss_figure(mlm_bow_rows(20, [5, 10, 15, 20]))
    try:
        train_ax, losses_ax, others_ax = fig.axes
        assert [line.get_label() for line in train_ax.get_lines()] == ["training loss"]
        assert sorted(line.get_label() for line in losses_ax.get_lines()) == ["held-out bow_loss", "held-out loss"]
        assert [line.get_label() for line in others_ax.get_lines()] == ["mlm_accuracy"]
        assert "training" in train_ax.get_title() and all("held-out" in ax.get_title() for ax in fig.axes[1:])
        assert outside_the_figure(fig) == []
    finally:
        plt.close(fig)


def test_loss_png_shows_a_single_point_as_a_point_on_an_axis_that_takes_in_zero():
    """A fine-tuning run with one logged step and one evaluation (accuracy 0.87, F1 0.865): each is drawn with a
    marker, and the axis does not magnify a 0.005 difference into its whole height."""
    import matplotlib.pyplot as plt

    from bertkit.train.runlog import loss_figure

    rows = [
        {"step": 150, "loss": 0.41, "lr": 0.0},
        {"step": 150, "split": "eval", "accuracy": 0.87, "macro_f1": 0.865, "n": 2000},
    ]
    fig = loss_figure(rows)
    try:
        train_ax, eval_ax = fig.axes
        for ax in (train_ax, eval_ax):
            assert all(line.get_marker() not in ("None", "", None) for line in ax.get_lines()), ax.get_title()
            low, high = ax.get_ylim()
            top = max(max(line.get_ydata()) for line in ax.get_lines())
            assert low <= 0 < top < high and high - low >= top, (ax.get_title(), low, high)
            assert list(ax.get_xticks()) == [150]  # the one step, not 149.8 and 150.2 around it
        assert outside_the_figure(fig) == []
    finally:
        plt.close(fig)


@pytest.mark.parametrize("steps, eval_at", [(30, [10, 20, 30]), (3, [2, 3])])
def test_loss_png_shows_the_evaluation_beside_the_loss_on_whole_steps(steps, eval_at):
    import matplotlib.pyplot as plt

    from bertkit.train.runlog import loss_figure

    fig = loss_figure(fake_rows(steps, eval_at))
    try:
        fig.canvas.draw()
        train_ax, loss_ax, eval_ax = fig.axes
        assert [line.get_label() for line in train_ax.get_lines()] == ["training loss"]
        assert list(train_ax.get_lines()[0].get_xdata()) == list(range(1, steps + 1))
        assert [line.get_label() for line in loss_ax.get_lines()] == ["held-out loss"]
        assert list(loss_ax.get_lines()[0].get_xdata()) == eval_at
        # the panel beside it: what the evaluation measured, not counts and not perplexity (the loss, exponentiated)
        lines = {line.get_label(): line for line in eval_ax.get_lines()}
        assert sorted(lines) == ["mlm_accuracy"]
        assert list(lines["mlm_accuracy"].get_ydata()) == [s / (2 * steps) for s in eval_at]
        for ax in fig.axes:
            low, high = ax.get_xlim()
            ticks = [t for t in ax.get_xticks() if low <= t <= high]
            assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks
    finally:
        plt.close(fig)


def test_loss_png_without_evaluations_is_the_loss_alone():
    import matplotlib.pyplot as plt

    from bertkit.train.runlog import loss_figure

    fig = loss_figure(fake_rows(5, []))
    try:
        assert len(fig.axes) == 1 and [line.get_label() for line in fig.axes[0].get_lines()] == ["training loss"]
    finally:
        plt.close(fig)
