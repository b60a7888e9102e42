"""The logs of a run folder. metrics.jsonl, always: one JSON row per logged step or evaluation, written whole
(appended line by line, so a kill cuts at most the last line, which readers skip). Beside it when asked
(--log-to): metrics.csv, the same numbers one per line, and TensorBoard event files. And the loss curve drawn
from the rows. The training loop writes them (rank 0, through a RunLog); quickstart, tests and benchmarks read them.

    log = RunLog(out, log_to, resumed_at)  the loggers of a run; on --resume each drops what came after the saved step
    log.row(row)                   {"step": 100, "loss": 2.31, "lr": ..., "tokens_per_s": ..., "elapsed_s": ...}
                                   {"step": 100, "split": "eval", "mlm_accuracy": 0.31, ...}
                                   -> metrics.jsonl, metrics.csv (100,train,loss,2.31), tensorboard/ (train/loss)
    log.close()                    TensorBoard's writer flushes (the files are written a row at a time)
    append_row(path, row)          one row of metrics.jsonl
    read_metrics(path)             -> [row, ...]
    truncate_metrics(path, step)   on --resume: drop the rows written after the saved step (truncate_csv: metrics.csv)
    plot_losses(path, png)         loss.png: the training loss per step; the held-out losses and the other held-out
                                   numbers beside it, each on its own titled panel (loss_figure)
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import TrainingError
from ..files import atomic_write, atomic_write_text, write_problem
from ..metrics import finite_or_none

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from torch.utils.tensorboard import SummaryWriter

LOGGERS = ("tensorboard", "csv")  # what --log-to may add to metrics.jsonl
CSV_HEADER = ("step", "split", "name", "value")


class RunLog:
    """Where a run's rows go: metrics.jsonl always, metrics.csv and TensorBoard (<out>/tensorboard/) when in
    `log_to`, each row to each with the same step. resumed_at: the step a resumed run continues from; what a
    killed run logged after it goes (the resumed run logs those steps again)."""

    def __init__(self, out: str, log_to: Sequence[str] = (), resumed_at: int | None = None) -> None:
        self.jsonl_path = os.path.join(out, "metrics.jsonl")
        self.csv_path = os.path.join(out, "metrics.csv")
        self.tensorboard_dir = os.path.join(out, "tensorboard")
        self.csv = "csv" in log_to
        if resumed_at is not None:
            truncate_metrics(self.jsonl_path, resumed_at)
            truncate_csv(self.csv_path, resumed_at)  # also when this part does not log to it: no step twice
        self.tensorboard: SummaryWriter | None = None
        if "tensorboard" in log_to:
            # purge_step: TensorBoard hides the earlier event files' events from the step after the saved one on
            # (those a killed run logged after its last save), as truncate_metrics drops those rows
            purge = None if resumed_at is None else resumed_at + 1
            writer = summary_writer()
            with _writing(self.tensorboard_dir):
                self.tensorboard = writer(self.tensorboard_dir, purge_step=purge)

    def row(self, row: dict[str, Any]) -> None:
        """One training row (split "train" when it names none) or evaluation (split "eval") to every logger."""
        append_row(self.jsonl_path, row)
        if self.csv:
            append_csv(self.csv_path, row)
        if self.tensorboard is not None:
            split = row.get("split", "train")
            with _writing(self.tensorboard_dir):
                for name, value in numbers(row).items():
                    self.tensorboard.add_scalar(f"{split}/{name}", value, row["step"])  # tag: train/loss, eval/f1

    def close(self) -> None:
        if self.tensorboard is not None:
            writer, self.tensorboard = self.tensorboard, None
            with _writing(self.tensorboard_dir):
                writer.close()


def check_log_to(log_to: Sequence[str]) -> None:
    """A TrainingError, before any work, for a logger that is not one or cannot be opened here."""
    if isinstance(log_to, str):
        raise TrainingError(f"log_to={log_to!r}: a list of loggers, e.g. log_to=[{log_to!r}]")
    unknown = [name for name in log_to if name not in LOGGERS]
    if unknown:
        raise TrainingError(
            f"--log-to {' '.join(unknown)}: not a logger; choose from {', '.join(LOGGERS)} "
            "(metrics.jsonl is always written)"
        )
    if "tensorboard" in log_to:
        summary_writer()


def summary_writer() -> type[SummaryWriter]:
    """torch's TensorBoard SummaryWriter class (it needs the tensorboard package, an optional extra)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise TrainingError(
            "--log-to tensorboard needs the tensorboard package, which is not installed here: "
            "pip install 'bertkit[tensorboard]' (or leave tensorboard out of --log-to)"
        ) from None
    return SummaryWriter


def numbers(row: dict[str, Any]) -> dict[str, float]:
    """A row's numbers by name: all but its step and split."""
    return {
        k: v
        for k, v in row.items()
        if k not in ("step", "split") and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


@contextlib.contextmanager
def _writing(path: str) -> Iterator[None]:
    """Writes to `path` inside: a full disk (or no permission) is one TrainingError naming it, with what to do."""
    try:
        yield
    except OSError as e:
        directory = os.path.dirname(os.path.abspath(path))
        problem = write_problem(e, directory)
        if not problem:
            raise
        raise TrainingError(
            f"{path}: {problem}; the training state saved so far is intact: make room, then continue with --resume"
        ) from None


def _append(path: str, write: Callable[[TextIO], object]) -> None:
    """Open `path` to append, write(fh), close: the lines are in the file, not in a buffer, once this returns."""
    with _writing(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            write(fh)


def append_row(path: str, row: dict[str, Any]) -> None:
    """One whole line per row (a write cut by a kill leaves at most a cut last line, which readers skip)."""
    line = json.dumps(finite_or_none(row), ensure_ascii=False, allow_nan=False) + "\n"
    _append(path, lambda fh: fh.write(line))


def append_csv(path: str, row: dict[str, Any]) -> None:
    """metrics.csv in long form: a line step,split,name,value per number of `row` (the header first); a number
    that is not finite is an empty value, as it is null in metrics.jsonl."""
    split = row.get("split", "train")
    lines = [(row["step"], split, name, finite_or_none(value)) for name, value in numbers(row).items()]

    def write(fh: TextIO) -> None:
        out = csv.writer(fh, lineterminator="\n")
        if fh.tell() == 0:  # a new file
            out.writerow(CSV_HEADER)
        out.writerows(lines)

    _append(path, write)


def read_metrics(path: str) -> list[dict]:
    """The rows of a metrics.jsonl. A cut last line (a run killed while writing it) is skipped with a warning;
    a line that is not JSON anywhere else is an error naming the file and the line."""
    with open(path, encoding="utf-8") as fh:
        lines = [(n, line) for n, line in enumerate(fh, 1) if line.strip()]
    rows = []
    for i, (n, line) in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if i < len(lines) - 1:
                raise TrainingError(f"{path}, line {n}: not a JSON row ({e.msg}); fix or delete that line") from None
            warnings.warn(f"{path}, line {n}: a cut last row (the run stopped while writing it); skipped", stacklevel=2)
    return rows


def truncate_metrics(path: str, step: int) -> None:
    """On resume: keep the rows up to the saved `step` (and drop a cut last line), so that the rows a killed run
    wrote after its last saved state are not there twice once the resumed run writes them again."""
    if not os.path.exists(path):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a cut last row goes, as the rows after `step` do
        rows = read_metrics(path)
    kept = [r for r in rows if r.get("step", 0) <= step]
    with open(path, encoding="utf-8") as fh:
        lines = sum(1 for line in fh if line.strip())
    if lines != len(kept):
        atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))
        print(f"{path}: dropped {lines - len(kept)} row(s) written after step {step} (or cut)", file=sys.stderr)


def truncate_csv(path: str, step: int) -> None:
    """truncate_metrics for metrics.csv: the header and the lines up to the saved `step`; a cut last line (no
    newline at its end) goes too."""
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    lines = text.splitlines(keepends=True)
    whole = [line for line in lines if line.endswith("\n")]  # all but a cut last line
    header, rows = whole[:1], whole[1:]
    kept = [line for n, line in enumerate(rows, 2) if _csv_step(path, n, line) <= step]
    if "".join(header + kept) != text:
        atomic_write_text(path, "".join(header + kept))
        print(
            f"{path}: dropped {len(lines) - len(header) - len(kept)} line(s) written after step {step} (or cut)",
            file=sys.stderr,
        )


def _csv_step(path: str, n: int, line: str) -> int:
    try:
        return int(line.split(",", 1)[0])
    except ValueError:
        raise TrainingError(
            f"{path}, line {n}: not a metrics.csv row (it starts with no step); fix or delete that line"
        ) from None


def is_loss(name: str) -> bool:
    return name == "loss" or name.endswith("_loss")


def eval_curves(rows: list[dict]) -> tuple[dict[str, list], dict[str, list]]:
    """The evaluation numbers of `rows` as curves {name: [(step, value), ...]}: (losses, the others). Left out:
    counts (n, n_true, ...) and perplexity (the exp of the held-out loss, which is drawn)."""
    losses: dict[str, list] = {}
    others: dict[str, list] = {}
    for r in rows:
        if r.get("split") != "eval":
            continue
        for name, value in numbers(r).items():
            if name == "n" or name.startswith("n_") or name == "perplexity":
                continue
            (losses if is_loss(name) else others).setdefault(name, []).append((r["step"], value))
    return losses, others


TRAIN_TITLE = "training loss: the objective minimised"


def loss_figure(rows: list[dict], train_title: str = TRAIN_TITLE) -> Figure:
    """The figure of loss.png, one titled panel each: the training loss per logged step; the held-out losses;
    the evaluation's other numbers (accuracy, F1, ...), where there are. The training loss is the objective
    (mlm-bow: MLM + bag of words, at the recipe's masking) and the held-out loss what the evaluation scores (MLM
    at 15%): other numbers, so never on one axis. Steps are whole numbers; a panel whose values barely differ
    (one point, say) gets an axis that takes in 0 (least_span), so noise is not drawn as a trend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    train = [(r["step"], r["loss"]) for r in rows if "loss" in r and r.get("split") != "eval"]
    losses, others = eval_curves(rows)
    panels = [(train_title, "loss", {"training loss": train})]
    if losses:
        named = {("held-out loss" if name == "loss" else f"held-out {name}"): c for name, c in losses.items()}
        panels.append(("held-out losses (the evaluation's)", "loss", named))
    if others:
        panels.append(("held-out numbers (the evaluation's)", "value", others))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.6), dpi=100, squeeze=False)
    for ax, (title, ylabel, curves) in zip(axes[0], panels):
        for label, curve in curves.items():
            if curve:
                ax.plot(*zip(*curve), "o-" if len(curve) < 3 else "-", label=label)
        ax.set(title=fill(title, 44), xlabel="step", ylabel=ylabel)
        steps = {x for curve in curves.values() for x, _ in curve}
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no step 2.5 on a short run
        if len(steps) == 1:
            ax.set_xticks(sorted(steps))  # one step: its tick alone (MaxNLocator would add 7.8, 8.2 around it)
        least_span(ax, [v for curve in curves.values() for _, v in curve])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def least_span(ax: Axes, values: Sequence[float | None]) -> None:
    """Values that span under a tenth of their size (a single point, a flat curve) get an axis that takes in 0:
    matplotlib's own limits would stretch a 0.003 difference over the panel's height."""
    finite = [v for v in values if v is not None and math.isfinite(v)]  # a skipped step's loss is null
    if not finite:
        return
    low, high = min(finite), max(finite)
    size = max(abs(low), abs(high))
    if size == 0 or high - low >= 0.1 * size:
        return
    low, high = min(low, 0.0), max(high, 0.0)
    margin = 0.05 * (high - low)
    ax.set_ylim(low - (margin if low < 0 else 0.0), high + (margin if high > 0 else 0.0))


def fill(text: str, width: int) -> str:
    """A title wrapped at `width` characters (a panel is about that wide), so no title runs past the figure."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def plot_losses(metrics_path: str, png_path: str, train_title: str = TRAIN_TITLE) -> str | None:
    """loss.png from a metrics.jsonl (loss_figure; train_title: what the training loss is, where the caller knows
    more than "the objective"); None when there is no metrics.jsonl."""
    if not os.path.exists(metrics_path):
        return None
    # loss_figure sets matplotlib's Agg backend, then imports pyplot
    fig = loss_figure(read_metrics(metrics_path), train_title)
    import matplotlib.pyplot as plt

    try:
        atomic_write(png_path, lambda tmp: fig.savefig(tmp, format="png"))  # whole or not at all
    finally:
        plt.close(fig)
    return png_path
