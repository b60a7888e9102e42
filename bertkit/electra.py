"""ELECTRA (Clark, Luong, Le, Manning, ICLR 2020) as bertkit models, with the class, parameter and output names of
transformers' modeling_electra. The encoder is BERT's (model.py); what differs:

    embeddings E = config.embedding_size wide, projected to the layers' H by embeddings_project (only when E != H)
    no pooler; the heads read the first token or every token of last_hidden_state

    ElectraModel                      embeddings (B, S, E) -> embeddings_project -> encoder (B, S, H)
                                                    embeddings.*, embeddings_project.*, encoder.* (a head: electra.*)
    ElectraForPreTraining             the discriminator: dense H -> H, hidden_act, dense H -> 1: one logit per
                                      token (B, S), > 0 says "replaced"; BCE over the real tokens
                                                                          discriminator_predictions.*
    ElectraForMaskedLM                the generator: dense H -> E, gelu, LayerNorm E, then generator_lm_head
                                      E -> V, its weight the word embeddings (tie_word_embeddings), its bias its
                                      own; masked_positions_only as BertForMaskedLM
                                                                          generator_predictions.*, generator_lm_head.*
    ElectraForSequenceClassification  first token -> dropout, dense, gelu, dropout, out_proj -> (B, num_labels)
                                                                          classifier.dense.*, classifier.out_proj.*
    ElectraForTokenClassification     every token -> dropout -> classifier (B, S, num_labels)   classifier.*
    ElectraForQuestionAnswering       every token -> start / end logits (B, S)                  qa_outputs.*
    ElectraForMultipleChoice          first token -> sequence_summary (dense, gelu, dropout) -> classifier
                                      -> (B, choices)                     sequence_summary.summary.*, classifier.*

The task heads subclass their BERT counterparts: the forward, the losses (problem_type, ...) and the label checks
are BERT's; written here are the encoder at `self.electra` and where a head's layers differ. ELECTRA_CLASSES pairs
each BERT class with its ELECTRA one: `BertForSequenceClassification.from_pretrained(d)` of a directory whose
config.json says model_type "electra" builds an ElectraForSequenceClassification (checkpoint.model_class_for).

A generator sharing the discriminator's embeddings (as ELECTRA pretrains; the same embedding_size):
    gen.electra.embeddings = disc.electra.embeddings; gen.tie_weights()

A pretraining run's folder (bertkit pretrain --objective electra --out RUN) holds the discriminator, and the
generator in RUN/generator (GENERATOR_FOLDER); a discriminator has no MLM head, so what fills masks is the generator
(discriminator_has_no_mlm_head says so, naming that folder).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import kernels
from .activations import ACT2FN
from .config import BertConfig
from .errors import ConfigError, InputError
from .heads import (
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    ClassifierOutput,
    no_rows_loss,
)
from .model import BertModel, BertModelOutput, BertPreTrainedModel
from .plan import check_tensors

# transformers' name for the discriminator's record: loss, logits (B, S), hidden_states, attentions
ElectraForPreTrainingOutput = ClassifierOutput


def electra_config(config: BertConfig) -> BertConfig:
    """ELECTRA's classes take a BERT-typed config too (the same fields): a copy that says model_type "electra"."""
    if isinstance(config, BertConfig) and config.model_type == "bert":
        return config.replace(model_type="electra")
    return config


class ElectraModel(BertModel):
    """The bare ELECTRA encoder: BertModel's embeddings, embeddings_project (E -> H, when they differ) and layers,
    without a pooler (pooler_output is None)."""

    base_model_prefix = "electra"
    model_type = "electra"
    _missing_ok: tuple[str, ...] = ()

    def __init__(self, config: BertConfig, add_pooling_layer: bool = False) -> None:
        """add_pooling_layer is there for BertModel's callers (`BertModel.from_pretrained(d, add_pooling_layer=False)`
        of an ELECTRA directory); ELECTRA has no pooler, so True is refused."""
        if add_pooling_layer:
            raise ConfigError(
                "ELECTRA has no pooler (transformers' ElectraModel neither): pass "
                "add_pooling_layer=False or leave it out; the heads read the first token of "
                "last_hidden_state"
            )
        super().__init__(electra_config(config), add_pooling_layer=False)

    def forward(self, *args: Any, return_dict: bool | None = None, **kwargs: Any) -> BertModelOutput | tuple[Any, ...]:
        """BertModel.forward (the same arguments); return_dict=False leaves the missing pooler_output out of the
        tuple, as transformers' ElectraModel does: (last_hidden_state, [past_key_values, hidden_states, ...])."""
        # return_dict is taken here, not passed on: BertModel.forward returns its dataclass
        out = cast(BertModelOutput, super().forward(*args, **kwargs))
        return out.to_tuple() if return_dict is False else out


if TYPE_CHECKING:
    _HeadBase = BertPreTrainedModel  # to mypy: what every class mixing _ElectraHead in is (its self's attributes)
else:
    _HeadBase = object


class _ElectraHead(_HeadBase):
    """What ELECTRA's heads share, placed before the BERT head class they subclass: the encoder at self.electra
    (an ElectraModel) where BERT's heads have self.bert. Each head builds its own layers after it."""

    base_model_prefix = "electra"
    model_type = "electra"

    def __init__(self, config: BertConfig) -> None:
        # BertPreTrainedModel's __init__ alone: the BERT head's layers are not built, the subclass builds ELECTRA's
        BertPreTrainedModel.__init__(self, electra_config(config))
        self.electra = ElectraModel(self.config)

    def post_init(self) -> None:
        """Initialise the head; the encoder at self.electra initialised (and pruned) itself."""
        for name, child in self.named_children():
            if name != "electra":
                child.apply(self._init_weights)
        self.tie_weights()
        kernels.track(self)  # as BertPreTrainedModel.post_init

    def _encode(self, *inputs: Tensor | bool | None, **extra: Any) -> BertModelOutput:
        """The heads' one encoder call, on self.electra. inputs: input_ids, attention_mask, token_type_ids,
        position_ids, head_mask, inputs_embeds (ElectraModel's first six), output_attentions, output_hidden_states."""
        *tensors, output_attentions, output_hidden_states = inputs
        return self.electra(
            *tensors, output_attentions=output_attentions, output_hidden_states=output_hidden_states, **extra
        )


# ----- pretraining: the discriminator and the generator ----------------------------------------------------------
class DiscriminatorPredictions(nn.Module):
    """transformers' ElectraDiscriminatorPredictions: (B, S, H) -> dense, hidden_act, dense_prediction -> (B, S)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = ACT2FN[config.hidden_act]
        self.dense_prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.dense_prediction(self.activation(self.dense(hidden_states))).squeeze(-1)  # (B, S)


def replaced_token_loss(logits: Tensor, labels: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """The discriminator's loss: binary cross-entropy with logits (B, S) against labels (B, S) (1 = replaced,
    0 = original; integers, bools or floats), over the real tokens: where a 2-D attention_mask is not 0 (transformers
    takes == 1: the same for 0/1 masks; packed documents, numbered 1, 2, ..., all count), else every position."""
    if tuple(labels.shape) != tuple(logits.shape):
        raise InputError(
            f"labels must have shape {tuple(logits.shape)} like the input (1 = replaced, 0 = original), "
            f"got {tuple(labels.shape)}"
        )
    if (
        not labels.dtype.is_floating_point
        and labels.numel()
        and not torch.compiler.is_compiling()
        and bool(((labels != 0) & (labels != 1)).any())
    ):
        raise InputError(
            f"labels hold {labels[(labels != 0) & (labels != 1)].unique()[:5].tolist()}: the "
            "discriminator's labels are 1 (replaced) and 0 (original)"
        )
    if attention_mask is not None and attention_mask.dim() == 2:
        real = attention_mask != 0  # (B, S)
        logits, labels = logits[real], labels[real]
    if not logits.numel():  # no real token: a zero loss that still has a graph
        return no_rows_loss(logits)
    return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


class ElectraForPreTraining(_ElectraHead, BertPreTrainedModel):
    """ELECTRA's discriminator: for every token, was it replaced (by the generator's sample)? logits (B, S)."""

    _missing_ok: tuple[str, ...] = ("discriminator_predictions.",)

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.discriminator_predictions = DiscriminatorPredictions(self.config)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        head_mask: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        labels: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> ElectraForPreTrainingOutput | tuple[Any, ...]:
        check_tensors(labels=labels)
        out = self._encode(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            head_mask,
            inputs_embeds,
            output_attentions,
            output_hidden_states,
        )
        logits = self.discriminator_predictions(out.last_hidden_state)  # (B, S)
        loss = replaced_token_loss(logits, labels, attention_mask) if labels is not None else None
        result = ElectraForPreTrainingOutput(loss, logits, out.hidden_states, out.attentions)
        return result.to_tuple() if return_dict is False else result


GENERATOR_FOLDER = "generator"  # where an ELECTRA pretraining run saves its generator, inside the run's folder


def discriminator_has_no_mlm_head(model_dir: str, command: str) -> str:
    """Why `model_dir`, an ELECTRA discriminator, cannot predict tokens, and where its run's generator is: `command`
    (e.g. "bertkit fill-mask --model") with <model_dir>/generator when that holds a model, else where it would be."""
    generator = os.path.join(model_dir, GENERATOR_FOLDER)
    what = (
        f"{model_dir}: an ELECTRA discriminator (ElectraForPreTraining), which has no MLM head "
        "(generator_predictions.*, generator_lm_head.*): it tells replaced tokens, the generator predicts them"
    )
    if os.path.isfile(os.path.join(generator, "config.json")):
        return f"{what}; its run's generator has one: {command} {generator}"
    return (
        f"{what}; use the run's generator (ElectraForMaskedLM): bertkit pretrain --objective electra saves it in "
        f"{generator}, which is not there (a copy of the discriminator alone, or a run that did not finish?)"
    )


class GeneratorPredictions(nn.Module):
    """transformers' ElectraGeneratorPredictions: (..., H) -> dense to E, gelu (whatever hidden_act), LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.activation = ACT2FN["gelu"]
        self.LayerNorm = nn.LayerNorm(config.embedding_width, eps=config.layer_norm_eps)
        self.dense = nn.Linear(config.hidden_size, config.embedding_width)

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.LayerNorm(self.activation(self.dense(hidden_states)))  # (..., E)


class ElectraForMaskedLM(_ElectraHead, BertForMaskedLM):
    """ELECTRA's generator: the token at every position (B, S, V). The forward is BertForMaskedLM's, with
    masked_positions_only (logits (N_masked, V) only where labels != -100, and .masked_positions (B, S))."""

    _missing_ok: tuple[str, ...] = ("generator_predictions.", "generator_lm_head.")
    _tied_weights = {"generator_lm_head.weight": "electra.embeddings.word_embeddings.weight"}

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        if self.config.is_decoder:
            warnings.warn("ElectraForMaskedLM wants bidirectional attention: set is_decoder=False", stacklevel=2)
        self.generator_predictions = GeneratorPredictions(self.config)
        self.generator_lm_head = nn.Linear(self.config.embedding_width, self.config.vocab_size)
        self.post_init()

    def cls(self, hidden_states: Tensor) -> Tensor:
        """(..., H) -> (..., V): the vocabulary projection BertForMaskedLM.forward calls self.cls."""
        return self.generator_lm_head(self.generator_predictions(hidden_states))

    def get_output_embeddings(self) -> nn.Linear:
        return self.generator_lm_head


# ----- fine-tuning heads -----------------------------------------------------------------------------------------
class ClassificationHead(nn.Module):
    """transformers' ElectraClassificationHead: the first token -> dropout, dense, gelu, dropout, out_proj."""

    def __init__(self, config: BertConfig, dropout_p: float) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = ACT2FN["gelu"]  # BERT's pooler has tanh; ELECTRA's authors used gelu here
        self.dropout = nn.Dropout(dropout_p)
        assert config.num_labels is not None  # BertConfig.__post_init__ sets it
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, hidden_states: Tensor) -> Tensor:
        x = self.dropout(hidden_states[:, 0])  # (B, H): the first token ([CLS])
        return self.out_proj(self.dropout(self.activation(self.dense(x))))  # (B, num_labels)


class ElectraForSequenceClassification(_ElectraHead, BertForSequenceClassification):
    """The first token -> ClassificationHead -> (B, num_labels); the loss by problem_type, as BERT's."""

    _missing_ok: tuple[str, ...] = ("classifier.",)

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.num_labels = self._label_count()
        self.classifier = ClassificationHead(self.config, self._dropout_p())
        self.post_init()

    def logits(self, out: BertModelOutput) -> Tensor:
        return self.classifier(out.last_hidden_state)  # (B, num_labels)


class ElectraForTokenClassification(_ElectraHead, BertForTokenClassification):
    """Every token -> dropout -> (B, S, num_labels), as BERT's; labels -100 are skipped."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.num_labels = self._label_count()
        self.dropout = nn.Dropout(self._dropout_p())
        self.classifier = nn.Linear(self.config.hidden_size, self.num_labels)
        self.post_init()


class ElectraForQuestionAnswering(_ElectraHead, BertForQuestionAnswering):
    """A start and an end score per token, as BERT's (qa_outputs)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.num_labels = self._label_count()
        if self.num_labels != 2:
            warnings.warn(
                f"ElectraForQuestionAnswering splits its output into start/end: num_labels should be 2, "
                f"not {self.num_labels}",
                stacklevel=2,
            )
        self.qa_outputs = nn.Linear(self.config.hidden_size, self.num_labels)
        self.post_init()


# ElectraConfig's summary_* settings (a config.json's own win: config.extra); transformers' defaults
SUMMARY_DEFAULTS: dict[str, Any] = dict(
    summary_type="first",
    summary_use_proj=True,
    summary_proj_to_labels=False,
    summary_activation="gelu",
    summary_first_dropout=0.0,
    summary_last_dropout=0.1,
)
SUMMARY_TYPES = ("first", "last", "mean")  # the token summarised: the first, the last, or the mean of all


class SequenceSummary(nn.Module):
    """transformers' ElectraSequenceSummary: (B, S, H) -> one vector per row: a token (summary_type), first_dropout,
    summary (a dense layer, or none), activation, last_dropout. With ElectraConfig's defaults: the first token ->
    dense H -> H -> gelu -> dropout 0.1."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        s = {**SUMMARY_DEFAULTS, **{k: v for k, v in config.extra.items() if k in SUMMARY_DEFAULTS}}
        if s["summary_type"] not in SUMMARY_TYPES:
            raise ConfigError(
                f"summary_type {s['summary_type']!r} is not supported; bertkit's "
                f"ElectraForMultipleChoice takes {', '.join(SUMMARY_TYPES)}"
            )
        if s["summary_activation"] and s["summary_activation"] not in ACT2FN:
            raise ConfigError(
                f"summary_activation must be one of {', '.join(ACT2FN)} or null, got {s['summary_activation']!r}"
            )
        self.summary_type = s["summary_type"]
        assert config.num_labels is not None  # BertConfig.__post_init__ sets it
        width = config.num_labels if s["summary_proj_to_labels"] and config.num_labels > 0 else config.hidden_size
        self.summary = nn.Linear(config.hidden_size, width) if s["summary_use_proj"] else nn.Identity()
        self.activation = ACT2FN[s["summary_activation"]] if s["summary_activation"] else nn.Identity()
        self.first_dropout = nn.Dropout(s["summary_first_dropout"]) if s["summary_first_dropout"] > 0 else nn.Identity()
        self.last_dropout = nn.Dropout(s["summary_last_dropout"]) if s["summary_last_dropout"] > 0 else nn.Identity()

    def forward(self, hidden_states: Tensor) -> Tensor:
        h = hidden_states  # (B, S, H)
        x = h[:, 0] if self.summary_type == "first" else h[:, -1] if self.summary_type == "last" else h.mean(dim=1)
        x = self.first_dropout(x)  # (B, H)
        return self.last_dropout(self.activation(self.summary(x)))


class ElectraForMultipleChoice(_ElectraHead, BertForMultipleChoice):
    """(B, choices, S) flattened to (B * choices, S); the sequence summary of each -> one score -> (B, choices).
    The forward is BertForMultipleChoice's: the summary stands where BERT's pooler output does."""

    _missing_ok: tuple[str, ...] = ("sequence_summary.", "classifier.")

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.sequence_summary = SequenceSummary(self.config)
        self.dropout = nn.Identity()  # BERT's dropout before the classifier: ELECTRA's is the summary's last_dropout
        self.classifier = nn.Linear(self.config.hidden_size, 1)
        self.post_init()

    def _encode(self, *inputs: Tensor | bool | None, **extra: Any) -> BertModelOutput:
        out = super()._encode(*inputs, **extra)
        return replace(out, pooler_output=self.sequence_summary(out.last_hidden_state))  # (B * choices, H)


# {BERT class: its ELECTRA counterpart}: what a BERT class's from_pretrained builds for an "electra" directory
ELECTRA_CLASSES: dict[type, type] = {
    BertModel: ElectraModel,
    BertForMaskedLM: ElectraForMaskedLM,
    BertForSequenceClassification: ElectraForSequenceClassification,
    BertForTokenClassification: ElectraForTokenClassification,
    BertForQuestionAnswering: ElectraForQuestionAnswering,
    BertForMultipleChoice: ElectraForMultipleChoice,
}

__all__ = [
    "ElectraModel",
    "ElectraForPreTraining",
    "ElectraForPreTrainingOutput",
    "ElectraForMaskedLM",
    "ElectraForSequenceClassification",
    "ElectraForTokenClassification",
    "ElectraForQuestionAnswering",
    "ElectraForMultipleChoice",
    "ELECTRA_CLASSES",
    "replaced_token_loss",
    "electra_config",
    "GENERATOR_FOLDER",
    "discriminator_has_no_mlm_head",
    "DiscriminatorPredictions",
    "GeneratorPredictions",
    "ClassificationHead",
    "SequenceSummary",
]
