"""The scores bertkit reports, by what they measure, and the ways to show them. Each score equals a reference
(tests/tasks/test_metrics.py and, for retrieval.py, tests/tasks/test_retrieval_metrics.py check them against
it); import them from here:

    classification.py  predicted classes: classification_report, multilabel_report, roc_auc, confusion_matrix
                       (scikit-learn's)
    regression.py      predicted numbers: regression_report (scikit-learn's mse / mae, scipy's correlations)
    entities.py        tagged entities: bio_entities, entity_report (seqeval / conlleval.pl readings of the tags)
    qa.py              extractive answers: squad_scores, squad_question, cmrc_question, ... (the official SQuAD
                       v1.1 / v2.0 and CMRC 2018 scripts)
    attention.py       where attention heads look: offset_mass, neighbour_attention
    retrieval.py       rankings: information_retrieval, ranking_metrics, top_k_search (sentence-transformers'
                       InformationRetrievalEvaluator), reranking_metrics (its CrossEncoderRerankingEvaluator)
    report.py          showing reports: format_report (a table), finite_or_none (JSON), plot_confusion_matrix
    common.py          what the scorers share: MetricError, the checks of their inputs, precision / recall / F1

Every score is a fraction in [0, 1] (SQuAD's scripts print percentages: multiply by 100 to compare).
Importing the package loads numpy, not torch, nltk or matplotlib: torch loads when attention is measured or a
corpus searched, nltk when CMRC 2018 segments are cut, matplotlib when a plot is drawn.
"""

from .attention import neighbour_attention, offset_mass
from .classification import classification_report, confusion_matrix, multilabel_report, roc_auc
from .common import MetricError
from .entities import ENTITY_SCHEMES, bio_entities, entity_report
from .qa import QA_LANGUAGES, cmrc_question, cmrc_segments, qa_language, squad_question, squad_scores, squad_tokens
from .regression import regression_report
from .report import finite_or_none, format_report, plot_confusion_matrix
from .retrieval import information_retrieval, ranking_metrics, reranking_metrics, top_k_search

__all__ = [
    "MetricError",
    "offset_mass",
    "neighbour_attention",
    "classification_report",
    "multilabel_report",
    "roc_auc",
    "confusion_matrix",
    "regression_report",
    "ENTITY_SCHEMES",
    "bio_entities",
    "entity_report",
    "QA_LANGUAGES",
    "squad_scores",
    "qa_language",
    "squad_question",
    "squad_tokens",
    "cmrc_question",
    "cmrc_segments",
    "information_retrieval",
    "ranking_metrics",
    "top_k_search",
    "reranking_metrics",
    "format_report",
    "plot_confusion_matrix",
    "finite_or_none",
]
