"""Metrics against hand-computed examples (and scikit-learn, when it happens to be installed)."""

import math
import os
import random
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from bertkit.errors import BertkitWarning
from bertkit.text import display_width
from bertkit.metrics import (MetricError, bio_entities, classification_report, confusion_matrix, entity_report,
                             format_report, multilabel_report, plot_confusion_matrix, regression_report, squad_scores)

approx = pytest.approx


# ----- classification ----------------------------------------------------------------------------
def test_classification_report_by_hand():
    # a: tp 2 of 2 predicted, 3 true -> P 1, R 2/3, F1 0.8;  b: 1/2, 1/2 -> 0.5;  c: P 1/2, R 1 -> 2/3
    r = classification_report([0, 0, 0, 1, 1, 2], [0, 0, 1, 1, 2, 2], ["a", "b", "c", "d"])
    assert r["accuracy"] == approx(4 / 6)
    assert r["per_class"]["a"] == approx({"precision": 1.0, "recall": 2 / 3, "f1": 0.8, "support": 3})
    assert r["per_class"]["b"] == approx({"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2})
    assert r["per_class"]["c"] == approx({"precision": 0.5, "recall": 1.0, "f1": 2 / 3, "support": 1})
    assert r["per_class"]["d"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}  # 0/0 -> 0
    assert r["macro_f1"] == approx((0.8 + 0.5 + 2 / 3) / 3)  # "d" occurs nowhere: not in the average
    assert r["weighted_f1"] == approx((0.8 * 3 + 0.5 * 2 + 2 / 3) / 6)
    assert r["n"] == 6
    same = classification_report(torch.tensor([0, 0, 0, 1, 1, 2]), np.array([0, 0, 1, 1, 2, 2]), ["a", "b", "c", "d"])
    assert same == r


def test_a_class_predicted_but_never_true_counts_in_macro():
    r = classification_report([0, 0], [0, 1], ["a", "b"])
    assert r["per_class"]["b"]["f1"] == 0.0 and r["macro_f1"] == approx((2 / 3 + 0.0) / 2)


def test_against_counting_by_hand_on_random_predictions():
    rng = random.Random(0)
    y_true = [rng.randrange(4) for _ in range(200)]
    y_pred = [t if rng.random() < 0.6 else rng.randrange(4) for t in y_true]
    r = classification_report(y_true, y_pred, list("abcd"))
    f1s, supports = [], []
    for c in range(4):  # an independent count of true/false positives and negatives per class
        tp = sum(t == c and p == c for t, p in zip(y_true, y_pred))
        fp = sum(t != c and p == c for t, p in zip(y_true, y_pred))
        fn = sum(t == c and p != c for t, p in zip(y_true, y_pred))
        f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
        assert r["per_class"]["abcd"[c]]["f1"] == approx(f1)
        f1s.append(f1)
        supports.append(tp + fn)
    assert r["accuracy"] == approx(sum(t == p for t, p in zip(y_true, y_pred)) / 200)
    assert r["macro_f1"] == approx(sum(f1s) / 4)
    assert r["weighted_f1"] == approx(sum(f * n for f, n in zip(f1s, supports)) / 200)
    cm = confusion_matrix(y_true, y_pred, 4)
    assert all(cm[t][p] == sum(a == t and b == p for a, b in zip(y_true, y_pred)) for t in range(4) for p in range(4))


def test_classification_errors():
    with pytest.raises(MetricError, match="y_true has 2 items but y_pred has 1"):
        classification_report([0, 1], [0], ["a", "b"])
    with pytest.raises(MetricError, match="label id 2 is out of range for 2 labels"):
        classification_report([0, 1], [0, 2], ["a", "b"])
    with pytest.raises(MetricError, match="y_true is empty"):
        classification_report([], [], ["a"])
    with pytest.raises(MetricError, match=r"y_pred\[0\] is 0.5"):
        classification_report([0], [0.5], ["a"])


def test_multilabel_report_by_hand():
    # x: right once; y: predicted once wrongly, missed once; z: right once. micro: 2 right of 3 / 3
    y_true, y_pred = [[0, 1], [2], []], [[0], [1, 2], []]
    r = multilabel_report(y_true, y_pred, ["x", "y", "z"])
    assert r["micro_precision"] == approx(2 / 3) and r["micro_recall"] == approx(2 / 3)
    assert r["micro_f1"] == approx(2 / 3)
    assert r["per_class"]["y"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert r["macro_f1"] == approx((1 + 0 + 1) / 3)
    assert r["exact_match"] == approx(1 / 3)  # only the empty one is all right
    multi_hot = multilabel_report(np.array([[1, 1, 0], [0, 0, 1], [0, 0, 0]]),
                                  torch.tensor([[1, 0, 0], [0, 1, 1], [0, 0, 0]]), ["x", "y", "z"])
    assert multi_hot == r
    with pytest.raises(MetricError, match=r"y_pred\[0\] has 2 columns but there are 3 labels"):
        multilabel_report(np.zeros((1, 3)), np.zeros((1, 2)), ["x", "y", "z"])


def test_regression_report_by_hand():
    r = regression_report([1, 2, 3, 4], [2, 2, 3, 5])
    assert r["mse"] == approx(0.5) and r["mae"] == approx(0.5) and r["n"] == 4
    assert r["pearson"] == approx(5 / math.sqrt(30))  # deviations (-1.5,-.5,.5,1.5) . (-1,-1,0,2) = 5
    assert r["spearman"] == approx(4.5 / math.sqrt(5 * 4.5))  # ranks of [2, 2, 3, 5]: 1.5 1.5 3 4
    assert math.isnan(regression_report([1, 2], [3, 3])["pearson"])  # constant: undefined


def test_confusion_matrix():
    assert confusion_matrix([0, 1, 1, 2], [0, 2, 1, 2], 3) == [[1, 0, 0], [0, 1, 1], [0, 0, 1]]
    assert confusion_matrix([], [], 2) == [[0, 0], [0, 0]]


# ----- entities ----------------------------------------------------------------------------------
@pytest.mark.parametrize("tags, entities", [
    ([], []),
    (["O", "O"], []),
    (["B-LOC", "I-LOC"], [("LOC", 0, 2)]),  # an entity at the end is closed
    (["O", "I-LOC"], [("LOC", 1, 2)]),  # I- without B- starts one, also at the end
    (["I-PER", "I-PER", "O"], [("PER", 0, 2)]),
    (["B-PER", "B-PER", "I-PER"], [("PER", 0, 1), ("PER", 1, 3)]),  # adjacent, same type
    (["I-PER", "B-PER"], [("PER", 0, 1), ("PER", 1, 2)]),
    (["B-PER", "I-LOC", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 3)]),  # type change inside I-
    (["B-PER", "I-PER", "I-ORG", "O", "B-ORG"], [("PER", 0, 2), ("ORG", 2, 3), ("ORG", 4, 5)]),
    (["S-PER", "B-LOC", "E-LOC", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 3), ("LOC", 3, 4)]),  # IOBES
    (["B-LOC", "M-LOC", "E-LOC"], [("LOC", 0, 3)]),  # BMES: M is I
])
def test_bio_entities(tags, entities):
    assert bio_entities(tags) == entities


def test_bio_entities_rejects_unknown_tags():
    with pytest.raises(MetricError, match=r"tag 1 is 'PER'"):
        bio_entities(["O", "PER"])


def test_entity_report_by_hand():
    true = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-PER"], ["I-ORG", "O"]]  # I-ORG at the start is still ORG (0, 1)
    r = entity_report(true, pred)
    assert (r["n_true"], r["n_pred"], r["n_correct"]) == (3, 3, 2)
    assert r["precision"] == approx(2 / 3) and r["recall"] == approx(2 / 3) and r["f1"] == approx(2 / 3)
    assert r["accuracy"] == approx(4 / 6)
    assert r["per_type"]["PER"] == approx({"precision": 0.5, "recall": 1.0, "f1": 2 / 3, "support": 1})
    assert r["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert r["per_type"]["ORG"] == approx({"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1})
    with pytest.raises(MetricError, match="sequence 1: 2 true tags but 1 predicted"):
        entity_report(true, [pred[0], ["O"]])
    with pytest.raises(MetricError, match="2 true tag sequences but 1 predicted"):
        entity_report(true, pred[:1])


# ----- SQuAD -------------------------------------------------------------------------------------
def test_squad_scores_by_hand():
    predictions = {"a": "The Cat!", "b": "a black cat sat", "c": "江泽民主席", "d": "", "e": "x", "g": "“北京”。"}
    references = {"a": ["cat"], "b": ["the cat", "dog"], "c": ["江泽民"], "d": [], "e": [], "f": ["y"], "g": ["北京"]}
    with pytest.warns(UserWarning, match="1 of 7 questions have no prediction"):
        r = squad_scores(predictions, references)
    # a: normalised equal; b: {black, cat, sat} vs {cat}: P 1/3, R 1 -> 0.5; c: per character: 3 of 5 -> 0.75;
    # d: unanswerable, no answer -> 1; e: unanswerable, answered -> 0; f: missing -> 0; g: punctuation dropped -> 1
    assert r["exact_match"] == approx(3 / 7)
    assert r["f1"] == approx((1 + 0.5 + 0.75 + 1 + 0 + 0 + 1) / 7)
    assert (r["n"], r["missing"]) == (7, 1)
    assert r["has_answer_exact_match"] == approx(2 / 5) and r["has_answer_f1"] == approx(3.25 / 5)
    assert r["no_answer_exact_match"] == approx(0.5) and r["no_answer_n"] == 2


def test_squad_mixed_chinese_and_latin():
    assert squad_scores({"q": "iPhone 手机"}, {"q": ["iphone手机"]})["exact_match"] == 1.0
    assert squad_scores({"q": "北京大学"}, {"q": ["北京"]})["f1"] == approx(2 * 0.5 * 1 / 1.5)
    assert squad_scores({"q": "the"}, {"q": []})["exact_match"] == 1.0  # normalises to nothing: "no answer"
    assert "has_answer_f1" not in squad_scores({"q": "a"}, {"q": ["a"]})


# ----- showing -----------------------------------------------------------------------------------
def test_format_report_aligns_cjk_labels():
    text = format_report(classification_report([0, 1, 1], [0, 1, 0], ["正面", "negative"]))
    lines = text.splitlines()
    assert lines[0].split() == ["label", "precision", "recall", "f1", "support"]
    assert len({display_width(line) for line in lines[:3]}) == 1  # CJK label pads to the same width
    assert "accuracy" in text and "0.6667" in text and "macro_f1" in text
    report = classification_report([0, 1, 1], [0, 1, 0], ["正面", "negative"])
    report["confusion_matrix"] = confusion_matrix([0, 1, 1], [0, 1, 0], 2)
    table = format_report(report).split("confusion matrix (rows: true, columns: predicted)\n")[1].splitlines()
    assert [line.split() for line in table] == [["true", "\\", "predicted", "正面", "negative"],
                                                ["正面", "1", "0"], ["negative", "1", "1"]]
    assert len({display_width(line) for line in table}) == 1
    entity = format_report(entity_report([["B-PER"]], [["B-PER"]]))
    assert entity.splitlines()[0].startswith("type") and "PER" in entity
    assert "pearson" in format_report(regression_report([1, 2], [1, 3]))


def test_plot_confusion_matrix_writes_png_atomically(tmp_path):
    path = str(tmp_path / "out" / "cm.png")
    matrix = confusion_matrix([0, 1, 2, 2], [0, 2, 2, 1], 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BertkitWarning)  # a font covers the Chinese labels
        assert plot_confusion_matrix(matrix, ["正面", "负面", "neutral"], path, title="情感 dev") == path
    with open(path, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.listdir(tmp_path / "out") == ["cm.png"]  # no temp file left behind
    with pytest.raises(MetricError, match="must be 2 x 2"):
        plot_confusion_matrix(matrix, ["a", "b"], path)


@st.composite
def _entities(draw):
    """Non-overlapping (type, start, end) spans in a sequence of random length, and that length."""
    length = draw(st.integers(0, 30))
    cuts = sorted(draw(st.sets(st.integers(0, length), max_size=12)))
    spans = [(a, b) for a, b in zip(cuts, cuts[1:]) if draw(st.booleans())]
    return [(draw(st.sampled_from(["PER", "LOC", "ORG"])), a, b) for a, b in spans], length


@given(_entities(), st.sampled_from(["BIO", "IOBES"]))
@settings(max_examples=200, deadline=None)
def test_bio_entities_round_trip(case, scheme):
    entities, length = case
    tags = ["O"] * length
    for kind, start, end in entities:
        for i in range(start, end):
            tags[i] = f"{'B' if i == start else 'I'}-{kind}"
        if scheme == "IOBES":
            tags[end - 1] = f"S-{kind}" if end - start == 1 else f"E-{kind}"
    assert bio_entities(tags) == entities
    assert entity_report([tags], [tags])["f1"] == (1.0 if entities else 0.0)


def test_undefined_metrics_become_null_in_json(tmp_path):
    import json

    from bertkit.metrics import finite_or_none, regression_report
    from bertkit.train.loop import _append, read_metrics

    report = regression_report([1.0, 2.0, 3.0], [0.5, 0.5, 0.5])  # constant predictions: no correlation
    assert any(isinstance(v, float) and v != v for v in report.values())  # nan somewhere
    text = json.dumps(finite_or_none(report), allow_nan=False)  # strict JSON
    assert "NaN" not in text and None in json.loads(text).values()
    _append(str(tmp_path / "metrics.jsonl"), {"step": 1, "split": "eval", **report})
    assert "NaN" not in (tmp_path / "metrics.jsonl").read_text() and read_metrics(str(tmp_path / "metrics.jsonl"))
