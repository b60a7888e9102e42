"""Scores of predicted classes against the true ones, each equal to scikit-learn's (tests/tasks/test_metrics.py checks):

    classification_report  accuracy, macro / weighted F1, per class precision, recall, F1, support
                           (zero_division=0)
    multilabel_report      micro / macro F1 and exact-match accuracy (every label of an example right)
    roc_auc                area under the ROC curve of scores for binary labels (roc_auc_score)
    confusion_matrix       counts, row = true class, column = predicted class

Macro averages are over the classes that occur in y_true or y_pred, so a class absent from an evaluation
set does not pull the average down (scikit-learn's default for single-label data; for multi-label data
scikit-learn averages over every label unless given labels=).
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

import numpy as np

from .common import ClassScores, MetricError, ids, in_range, mean, prf, ranks, same_length, to_list

if TYPE_CHECKING:
    from .common import Values


def classification_report(y_true: Values, y_pred: Values, labels: list[str]) -> dict[str, Any]:
    """{accuracy, macro_f1, weighted_f1, n, per_class: {label: {precision, recall, f1, support}}} for
    label ids (ints indexing `labels`); lists, numpy arrays or tensors."""
    y_true, y_pred = ids(y_true, "y_true"), ids(y_pred, "y_pred")
    same_length(y_true, y_pred)
    in_range(y_true + y_pred, len(labels))
    n = len(y_true)
    matrix = confusion_matrix(y_true, y_pred, len(labels))
    per_class: dict[str, ClassScores] = {}
    for k, label in enumerate(labels):
        tp = matrix[k][k]
        predicted = sum(row[k] for row in matrix)
        support = sum(matrix[k])
        per_class[label] = prf(tp, predicted, support)
    present = [labels[k] for k in range(len(labels)) if per_class[labels[k]]["support"] or sum(r[k] for r in matrix)]
    return {
        "accuracy": sum(t == p for t, p in zip(y_true, y_pred)) / n,
        "macro_f1": mean(per_class[label]["f1"] for label in present),
        "weighted_f1": sum(c["f1"] * c["support"] for c in per_class.values()) / n,
        "n": n,
        "per_class": per_class,
    }


def multilabel_report(y_true: Values, y_pred: Values, labels: list[str]) -> dict[str, Any]:
    """{micro_precision, micro_recall, micro_f1, macro_f1, exact_match, n, per_class} for multi-label
    predictions. Each example's labels are a list of label ids ([0, 3]: labels 0 and 3); a 2-D numpy
    array or tensor is read as multi-hot rows instead (row[k] = 1: label k)."""
    y_true, y_pred = _label_sets(y_true, "y_true", len(labels)), _label_sets(y_pred, "y_pred", len(labels))
    same_length(y_true, y_pred)
    tp = collections.Counter(k for t, p in zip(y_true, y_pred) for k in t & p)
    predicted = collections.Counter(k for p in y_pred for k in p)
    support = collections.Counter(k for t in y_true for k in t)
    per_class = {label: prf(tp[k], predicted[k], support[k]) for k, label in enumerate(labels)}
    micro = prf(sum(tp.values()), sum(predicted.values()), sum(support.values()))
    present = [labels[k] for k in range(len(labels)) if predicted[k] or support[k]]
    return {
        "micro_precision": micro["precision"],
        "micro_recall": micro["recall"],
        "micro_f1": micro["f1"],
        "macro_f1": mean(per_class[label]["f1"] for label in present),
        "exact_match": sum(t == p for t, p in zip(y_true, y_pred)) / len(y_true),
        "n": len(y_true),
        "per_class": per_class,
    }


def roc_auc(y_true: Values, scores: Values) -> float:
    """Area under the ROC curve of binary labels (0/1, False/True) ranked by `scores` (scikit-learn's
    roc_auc_score): the chance that a random positive scores above a random negative, ties counting half;
    nan when only one class occurs."""
    y, s = np.asarray(y_true, dtype=bool).ravel(), np.asarray(scores, dtype=np.float64).ravel()
    if len(y) != len(s):
        raise MetricError(f"roc_auc: {len(y)} labels but {len(s)} scores")
    positives, negatives = int(y.sum()), int((~y).sum())
    if not positives or not negatives:
        return float("nan")
    rank_sum = float(ranks(s)[y].sum())  # the Mann-Whitney U statistic of the positives, from their ranks
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def confusion_matrix(y_true: Values, y_pred: Values, n: int) -> list[list[int]]:
    """n x n counts: matrix[true][pred]."""
    y_true, y_pred = ids(y_true, "y_true", allow_empty=True), ids(y_pred, "y_pred", allow_empty=True)
    same_length(y_true, y_pred)
    in_range(y_true + y_pred, n)
    matrix = [[0] * n for _ in range(n)]
    for t, p in zip(y_true, y_pred):
        matrix[t][p] += 1
    return matrix


def _label_sets(values: Values, name: str, n_labels: int) -> list[frozenset[int]]:
    """Each example's set of label ids, from lists of ids or from multi-hot rows (a 2-D array or tensor)."""
    multi_hot = hasattr(values, "tolist") and getattr(values, "ndim", 0) == 2
    rows = to_list(values, name)
    if not rows:
        raise MetricError(f"{name} is empty: nothing to score")
    out: list[frozenset[int]] = []
    for i, row in enumerate(rows):
        if multi_hot:
            if len(row) != n_labels:
                raise MetricError(f"{name}[{i}] has {len(row)} columns but there are {n_labels} labels")
            row = [k for k, v in enumerate(row) if v]
        if not isinstance(row, (list, tuple)):
            raise MetricError(f"{name}[{i}] is {row!r}: expected a list of label ids")
        in_range(ids(list(row), f"{name}[{i}]", allow_empty=True), n_labels)
        out.append(frozenset(row))
    return out
