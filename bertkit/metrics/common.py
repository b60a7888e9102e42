"""What the scorers share: their error class, the checks that turn their inputs (lists, tuples, numpy arrays, torch
tensors) into plain lists, and the arithmetic more than one of them uses (precision / recall / F1, a mean, ranks).

A ratio with a zero denominator (precision of a class never predicted, ...) is 0.0 (scikit-learn's
zero_division=0).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Sized
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from ..errors import BertkitError

if TYPE_CHECKING:
    from typing import TypeAlias

    from torch import Tensor

    # what a scorer reads labels or numbers from: a list or tuple, a numpy array, a torch tensor
    Values: TypeAlias = Sequence[Any] | np.ndarray | Tensor


class MetricError(BertkitError, ValueError):
    """Predictions and references that cannot be compared (different lengths, ids out of range, bad tags)."""


class ClassScores(TypedDict):
    """Precision, recall and F1 of one class (or entity type, or all of them) and its support (true items)."""

    precision: float
    recall: float
    f1: float
    support: int


def prf(tp: int, predicted: int, support: int) -> ClassScores:
    """Precision, recall and F1 from the true positives, the predicted and the true counts."""
    precision = tp / predicted if predicted else 0.0
    recall = tp / support if support else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "support": int(support)}


def mean(values: Iterable[float]) -> float:
    """The mean; 0.0 of nothing."""
    items = list(values)
    return sum(items) / len(items) if items else 0.0


def to_list(values: Values, name: str) -> list[Any]:
    """`values` as a list; anything but a list, tuple, numpy array or tensor is a MetricError naming `name`."""
    if hasattr(values, "tolist"):  # numpy array, torch tensor
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        raise MetricError(f"{name} must be a list, array or tensor, got {type(values).__name__}")
    return list(values)


def ids(values: Values, name: str, allow_empty: bool = False) -> list[int]:
    """`values` as a list of label ids (ints, not bools); empty is an error unless allow_empty."""
    values = to_list(values, name)
    if not values and not allow_empty:
        raise MetricError(f"{name} is empty: nothing to score")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int):
            raise MetricError(f"{name}[{i}] is {v!r}: expected a label id (an int)")
    return values


def floats(values: Values, name: str) -> list[float]:
    """`values` as a non-empty list of floats."""
    values = to_list(values, name)
    if not values:
        raise MetricError(f"{name} is empty: nothing to score")
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        raise MetricError(f"{name} must hold numbers") from None


def check_choice(name: str, value: object, choices: tuple[str, ...], hint: str = "") -> None:
    """A MetricError unless `value` is one of `choices` (the message lists them, then `hint`)."""
    if value not in choices:
        raise MetricError(f"{name} {value!r} is not one of {', '.join(map(repr, choices))}{hint}")


def same_length(a: Sized, b: Sized) -> None:
    """A MetricError unless y_true (`a`) and y_pred (`b`) have as many items."""
    if len(a) != len(b):
        raise MetricError(f"y_true has {len(a)} items but y_pred has {len(b)}")


def in_range(ids: Sequence[int], n: int) -> None:
    """A MetricError unless every id is a label id of `n` labels (0..n-1)."""
    bad = [i for i in ids if not 0 <= i < n]
    if bad:
        raise MetricError(f"label id {bad[0]} is out of range for {n} labels (ids 0..{n - 1})")


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks from 1; tied values share their mean rank."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=np.float64)
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks
