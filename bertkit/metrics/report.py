"""Showing reports: any report of the scorers as a readable table (format_report), as JSON that strict
parsers read (finite_or_none), and a confusion matrix as a PNG (plot_confusion_matrix; matplotlib loads
only when a plot is drawn).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..text import display_width, pad
from .common import MetricError


def format_report(report: Mapping[str, Any], digits: int = 4) -> str:
    """A report (any the scorers return) as text: a table of its classes / types, then its totals."""
    rows = report.get("per_class") or report.get("per_type") or {}
    lines: list[str] = []
    if rows:
        first = "label" if "per_class" in report else "type"
        width = max([display_width(first)] + [display_width(str(name)) for name in rows]) + 2
        lines.append(
            pad(first, width)
            + "".join(f"{h:>{digits + 7}}" for h in ("precision", "recall", "f1"))
            + f"{'support':>10}"
        )
        for name, row in rows.items():
            lines.append(
                pad(str(name), width)
                + "".join(f"{row[h]:>{digits + 7}.{digits}f}" for h in ("precision", "recall", "f1"))
                + f"{row['support']:>10d}"
            )
        lines.append("")
    totals = [(k, v) for k, v in report.items() if k not in ("per_class", "per_type", "confusion_matrix")]
    width = max((len(k) for k, _ in totals), default=0) + 2
    for key, value in totals:
        shown = f"{value:.{digits}f}" if isinstance(value, float) else str(value)
        lines.append(f"{key:<{width}}{shown}")
    matrix = report.get("confusion_matrix")
    if matrix is not None:  # e.g. added by the caller: report["confusion_matrix"] = confusion_matrix(...)
        names = (
            list(report.get("per_class", {}))
            if len(report.get("per_class", {})) == len(matrix)
            else [str(k) for k in range(len(matrix))]
        )
        first_width = max([display_width("true \\ predicted")] + [display_width(n) for n in names]) + 2
        cell = max([display_width(n) for n in names] + [len(str(c)) for row in matrix for c in row]) + 2
        lines += [
            "",
            "confusion matrix (rows: true, columns: predicted)",
            pad("true \\ predicted", first_width) + "".join(" " * (cell - display_width(n)) + n for n in names),
        ]
        for name, row in zip(names, matrix):
            lines.append(pad(name, first_width) + "".join(f"{c:>{cell}}" for c in row))
    return "\n".join(lines)


def plot_confusion_matrix(
    matrix: Sequence[Sequence[int]] | np.ndarray,
    labels: list[str],
    path: str,
    title: str | None = None,
    *,
    dpi: int = 100,
) -> str:
    """Save the confusion matrix as a PNG (atomically): rows = true class, columns = predicted; the
    colour is the share of the true class (row), the number the count. CJK labels get a CJK font."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.font_manager import FontProperties

    from ..files import atomic_write
    from ..fonts import font_for

    counts = np.asarray(matrix, dtype=np.int64)
    n = len(labels)
    if counts.shape != (n, n):
        raise MetricError(f"a confusion matrix of {n} labels must be {n} x {n}, got shape {tuple(counts.shape)}")
    title = title or "confusion matrix"
    font_path = font_for([*map(str, labels), title])
    font = FontProperties(fname=font_path) if font_path else FontProperties()
    rows = counts.sum(axis=1, keepdims=True)
    share = np.divide(counts, rows, out=np.zeros(counts.shape, dtype=np.float64), where=rows > 0)
    longest = max(display_width(str(label)) for label in labels) if labels else 1
    cell = 0.6 if n <= 12 else max(0.2, 7.0 / n)  # inches
    margin = 0.9 + 0.08 * min(longest, 30)
    fig = Figure(figsize=(margin + n * cell + 1.4, margin + n * cell + 0.8), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_axes(
        (
            margin / fig.get_figwidth(),
            margin / fig.get_figheight(),
            n * cell / fig.get_figwidth(),
            n * cell / fig.get_figheight(),
        )
    )
    image = ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
    if n <= 30:  # numbers stay readable
        for i in range(n):
            for j in range(n):
                ax.text(
                    j,
                    i,
                    str(counts[i, j]),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if share[i, j] > 0.5 else "black",
                )
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
    ax.set_xticklabels(
        [str(label) for label in labels], fontproperties=font, fontsize=9, rotation=0 if longest <= 4 else 90
    )
    ax.set_yticklabels([str(label) for label in labels], fontproperties=font, fontsize=9)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title, fontproperties=font, fontsize=11)
    cax = fig.add_axes(
        (
            (margin + n * cell + 0.3) / fig.get_figwidth(),
            margin / fig.get_figheight(),
            0.15 / fig.get_figwidth(),
            n * cell / fig.get_figheight(),
        )
    )
    fig.colorbar(image, cax=cax, label="share of the true class")
    with warnings.catch_warnings():  # without a covering font, font_for has warned once already
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight"))
    return path


def finite_or_none(value: Any) -> Any:
    """`value` with every non-finite float (an undefined metric, e.g. a correlation of constant values)
    as None, so that JSON holds null instead of NaN, which strict parsers reject."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value
