"""bertkit: BERT end to end in plain PyTorch, checkpoint-compatible with transformers.

Names load on first use (PEP 562), so commands that need no model (`bertkit prepare`, `bertkit tokenize`)
and the worker processes of `bertkit prepare` start without importing torch.
"""

from typing import TYPE_CHECKING, Any

from .errors import BertkitError, BertkitWarning, CheckpointError, ConfigError, InputError, NonFiniteError
from .threads import wait_quietly

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and editors (never run)
    from .api import evaluate, finetune, predict, pretrain
    from .config import PRESETS, BertConfig
    from .electra import (
        ElectraForMaskedLM,
        ElectraForMultipleChoice,
        ElectraForPreTraining,
        ElectraForPreTrainingOutput,
        ElectraForQuestionAnswering,
        ElectraForSequenceClassification,
        ElectraForTokenClassification,
        ElectraModel,
    )
    from .embed import Encoder, encode
    from .heads import (
        BertForMaskedLM,
        BertForMultipleChoice,
        BertForNextSentencePrediction,
        BertForPreTraining,
        BertForQuestionAnswering,
        BertForSequenceClassification,
        BertForTokenClassification,
        BertLMHeadModel,
    )
    from .model import BertModel, BertModelOutput, BertPreTrainedModel

wait_quietly()  # before anything loads torch: its OpenMP threads do not spin long (threads.py)

__version__ = "0.1.0"

__all__ = [
    "BertConfig",
    "PRESETS",
    "BertModel",
    "BertModelOutput",
    "BertPreTrainedModel",
    "BertForPreTraining",
    "BertForMaskedLM",
    "BertForNextSentencePrediction",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertForQuestionAnswering",
    "BertForMultipleChoice",
    "BertLMHeadModel",
    "ElectraModel",
    "ElectraForPreTraining",
    "ElectraForPreTrainingOutput",
    "ElectraForMaskedLM",
    "ElectraForSequenceClassification",
    "ElectraForTokenClassification",
    "ElectraForQuestionAnswering",
    "ElectraForMultipleChoice",
    "BertkitError",
    "BertkitWarning",
    "CheckpointError",
    "ConfigError",
    "InputError",
    "NonFiniteError",
    "__version__",
    "encode",
    "Encoder",
    "pretrain",
    "finetune",
    "evaluate",
    "predict",
]

_LAZY = {
    **dict.fromkeys(("BertConfig", "PRESETS"), "bertkit.config"),
    **dict.fromkeys(("BertModel", "BertModelOutput", "BertPreTrainedModel"), "bertkit.model"),
    **dict.fromkeys(
        (
            "BertForPreTraining",
            "BertForMaskedLM",
            "BertForNextSentencePrediction",
            "BertForSequenceClassification",
            "BertForTokenClassification",
            "BertForQuestionAnswering",
            "BertForMultipleChoice",
            "BertLMHeadModel",
        ),
        "bertkit.heads",
    ),
    **dict.fromkeys(
        (
            "ElectraModel",
            "ElectraForPreTraining",
            "ElectraForPreTrainingOutput",
            "ElectraForMaskedLM",
            "ElectraForSequenceClassification",
            "ElectraForTokenClassification",
            "ElectraForQuestionAnswering",
            "ElectraForMultipleChoice",
        ),
        "bertkit.electra",
    ),
    **dict.fromkeys(("encode", "Encoder"), "bertkit.embed"),
    **dict.fromkeys(("pretrain", "finetune", "evaluate", "predict"), "bertkit.api"),
}


if not TYPE_CHECKING:  # the names load on first use

    def __getattr__(name: str) -> Any:
        if name in _LAZY:
            import importlib

            value = getattr(importlib.import_module(_LAZY[name]), name)
            globals()[name] = value  # looked up once
            return value
        raise AttributeError(f"module 'bertkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
