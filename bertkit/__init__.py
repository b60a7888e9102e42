"""bertkit: BERT end to end in plain PyTorch, checkpoint-compatible with transformers."""

from .config import PRESETS, BertConfig
from .errors import BertkitError, BertkitWarning, CheckpointError, ConfigError, InputError
from .heads import (BertForMaskedLM, BertForMultipleChoice, BertForNextSentencePrediction, BertForPreTraining,
                    BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification,
                    BertLMHeadModel)
from .model import BertModel, BertModelOutput, BertPreTrainedModel

__version__ = "0.1.0"

__all__ = [
    "BertConfig", "PRESETS", "BertModel", "BertModelOutput", "BertPreTrainedModel",
    "BertForPreTraining", "BertForMaskedLM", "BertForNextSentencePrediction", "BertForSequenceClassification",
    "BertForTokenClassification", "BertForQuestionAnswering", "BertForMultipleChoice", "BertLMHeadModel",
    "BertkitError", "BertkitWarning", "CheckpointError", "ConfigError", "InputError", "__version__",
    "encode", "Encoder",
]

_LAZY = {"encode": "bertkit.embed", "Encoder": "bertkit.embed"}  # loaded on first use: numpy, the tokenizer


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bertkit' has no attribute {name!r}")
