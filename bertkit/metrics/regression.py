"""Scores of predicted numbers against the true ones: regression_report, mse and mae equal to scikit-learn's,
Pearson and Spearman correlation to scipy's (tests/tasks/test_metrics.py checks). A correlation of a constant
sequence is undefined: nan.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .common import floats, ranks, same_length

if TYPE_CHECKING:
    from .common import Values


def regression_report(y_true: Values, y_pred: Values) -> dict[str, float]:
    """{mse, mae, pearson, spearman, n}; spearman is Pearson of the ranks (ties share their mean rank)."""
    true_values, pred_values = floats(y_true, "y_true"), floats(y_pred, "y_pred")
    same_length(true_values, pred_values)
    t, p = np.asarray(true_values, dtype=np.float64), np.asarray(pred_values, dtype=np.float64)
    return {
        "mse": float(np.mean((t - p) ** 2)),
        "mae": float(np.mean(np.abs(t - p))),
        "pearson": _pearson(t, p),
        "spearman": _pearson(ranks(t), ranks(p)),
        "n": len(t),
    }


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    """nan for a constant sequence (as scipy): its deviations from the mean are rounding noise (0.1 three
    times has a mean of 0.10000000000000002), not a signal to correlate."""
    if len(a) < 2 or (a == a[0]).all() or (b == b[0]).all():
        return float("nan")
    a, b = a - a.mean(), b - b.mean()
    denominator = math.sqrt(float((a * a).sum()) * float((b * b).sum()))
    return float((a * b).sum()) / denominator if denominator > 0 else float("nan")
