"""metrics.jsonl and loss.png of a run folder: one JSON row per logged step or evaluation, written whole
(appended line by line, so a kill cuts at most the last line, which readers skip); the loss curve drawn
from those rows. The training loop writes them; quickstart, tests and benchmarks read them.

    append_row(path, row)          {"step": 100, "loss": 2.31, "lr": ..., "tokens_per_s": ...}
                                   {"step": 100, "split": "eval", "mlm_accuracy": 0.31, ...}
    read_metrics(path)             -> [row, ...]
    truncate_metrics(path, step)   on --resume: drop the rows written after the saved step
    plot_losses(path, png)         loss.png: training loss per logged step, held-out loss where there is one
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from typing import Any

from ..errors import TrainingError
from ..files import atomic_write, atomic_write_text, write_problem
from ..metrics import finite_or_none


def append_row(path: str, row: dict[str, Any]) -> None:
    """One whole line per row (a write cut by a kill leaves at most a cut last line, which readers skip)."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(finite_or_none(row), ensure_ascii=False, allow_nan=False) + "\n")
    except OSError as e:
        problem = write_problem(e, directory)
        if not problem:
            raise
        raise TrainingError(f"{path}: {problem}; the training state saved so far is intact: make room, then "
                            "continue with --resume") from None


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
            warnings.warn(f"{path}, line {n}: a cut last row (the run stopped while writing it); skipped",
                          stacklevel=2)
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


def plot_losses(metrics_path: str, png_path: str) -> str | None:
    """loss.png: the training loss per logged step, and the eval loss where there is one."""
    if not os.path.exists(metrics_path):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics_path)
    train_rows = [r for r in rows if "loss" in r and r.get("split") != "eval"]
    eval_rows = [r for r in rows if r.get("split") == "eval" and "loss" in r]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.plot([r["step"] for r in train_rows], [r["loss"] for r in train_rows], label="train loss")
    if eval_rows:
        ax.plot([r["step"] for r in eval_rows], [r["loss"] for r in eval_rows], "o-", label="held-out loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        atomic_write(png_path, lambda tmp: fig.savefig(tmp, format="png"))  # whole or not at all
    finally:
        plt.close(fig)
    return png_path
