"""The quickstart's figures: the pretraining curves from step 0, and test accuracy by number of labels."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from .locality_words import head_groups

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# bench/pretraining_recipes.py's run of BERT's own recipe with the cpu profile's batch, lr and precision
CONTROL = "bert-bf16-2000"
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/ is beside bertkit/


def control_curve() -> list[dict] | None:
    """The control's held-out MLM accuracy by step, as bench/results holds it (in a checkout; else None)."""
    path = os.path.join(CHECKOUT, "bench", "results", "pretraining_recipes.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as fh:
        runs = [r for r in json.load(fh) if r["name"] == CONTROL and r["seed"] == 0]
    return runs[0]["curve"] if runs else None


def pyplot() -> ModuleType:
    """matplotlib.pyplot on the Agg backend: pictures written to files, no window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_pretraining(summary: dict, path: str) -> str:
    """mlm_accuracy.png: pretraining_figure."""
    return save(pyplot(), pretraining_figure(summary), path)


def pretraining_figure(summary: dict) -> Figure:
    """Held-out MLM accuracy and neighbour attention by step from step 0 (initialisation): this run, the seeded and
    the other heads at step 0 and at the end, and the control where known."""
    from matplotlib.ticker import MaxNLocator

    from ..train.runlog import least_span

    fig, (ax1, ax2) = pyplot().subplots(1, 2, figsize=(11, 4.2), dpi=100)
    curve = summary["pretrain_curve"]
    measured = [r for r in curve if r["mlm_accuracy"] is not None]
    ax1.plot(
        [r["step"] for r in measured], [r["mlm_accuracy"] for r in measured], "o-", label="this run (recipe local)"
    )
    ax2.plot(
        [r["step"] for r in curve],
        [r["neighbour_attention"] or 0 for r in curve],
        "o-",
        label="this run: the most local head",
    )
    if summary.get("locality"):
        end = curve[-1]["step"]
        for group, style in zip(head_groups(summary["locality"]).values(), ("s:", "^:")):
            ax2.plot([0, end], [group["step0"], group["final"]], style, label=f"{group['name']} (step 0, end)")
    control = control_curve() if summary["profile"] == "cpu" else None
    if control:
        plot_control(ax1, ax2, control)
    ax1.set(xlabel="step (0: initialisation)", ylabel="held-out MLM accuracy", title="masked tokens predicted right")
    ax2.set(
        xlabel="step (0: initialisation)",
        ylabel="share of attention",
        ylim=(0, 1),
        title="attention on one neighbouring token",
    )
    least_span(ax1, [r["mlm_accuracy"] for r in measured])  # a flat tiny run is drawn flat, not magnified
    for ax in (ax1, ax2):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return finish(fig, (ax1, ax2), legend_size=7)


def plot_control(accuracy_ax: Axes, local_ax: Axes, control: list[dict]) -> None:
    """The control run (BERT's own recipe, control_curve) on both panels, in grey."""
    steps = [r["step"] for r in control]
    label = f"BERT's recipe (--recipe bert; bench/pretraining_recipes.py, {control[-1]['step']:,} steps)"
    accuracy_ax.plot(steps, [r["mlm_accuracy"] for r in control], "s--", color="0.4", label=label)
    local_ax.plot(steps, [r["neighbour_attention"] or 0 for r in control], "s--", color="0.4", label="BERT's recipe")


def plot_label_efficiency(rows: list[dict], path: str) -> str:
    """Test accuracy against the number of labelled reviews (log scale)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    x = [r["labels"] for r in rows]
    for key, label, style in (
        ("pretrained", "pretrained, then fine-tuned", "o-"),
        ("scratch", "same model from random weights", "s-"),
        ("bag_of_chars", "bag-of-characters logistic regression", "^--"),
    ):
        ax.plot(x, [r[key] for r in rows], style, label=label)
    ax.set_xscale("log")
    ax.set_xticks(x, [f"{n:,}" for n in x])
    ax.set(xlabel="labelled training reviews", ylabel="test accuracy", title="sentiment: accuracy by number of labels")
    return save(plt, finish(fig, (ax,), legend_size=8), path)


def finish(fig: Figure, axes: Sequence[Axes], legend_size: int) -> Figure:
    """A grid and a legend on every panel, laid out inside the figure."""
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=legend_size)
    fig.tight_layout()
    return fig


def save(plt: ModuleType, fig: Figure, path: str) -> str:
    """The figure written to `path` and closed (pyplot keeps every open figure otherwise)."""
    fig.savefig(path)
    plt.close(fig)
    return path
