"""Task heads on top of BertModel, with transformers' class, parameter and output names.

    BertForPreTraining             MLM logits (B, S, V) + NSP logits (B, 2)        cls.predictions.*,
                                                                                  cls.seq_relationship.*
    BertForMaskedLM                MLM logits (B, S, V); loss only where label != -100      cls.predictions.*
    BertForNextSentencePrediction  (B, 2): 0 = B follows A, 1 = B is random             cls.seq_relationship.*
    BertForSequenceClassification  pooled [CLS] -> (B, num_labels)                      classifier.*
    BertForTokenClassification     every token -> (B, S, num_labels)                    classifier.*
    BertForQuestionAnswering       every token -> start / end logits (B, S)             qa_outputs.*
    BertForMultipleChoice          (B, choices, S) flattened -> one score per choice    classifier.*
    BertLMHeadModel                causal decoder, next-token logits, generate()        cls.predictions.*

The MLM decoder shares its weight with the word embeddings (tie_word_embeddings) and has its own
bias, `cls.predictions.bias`.
"""

from __future__ import annotations

import warnings
from abc import ABCMeta, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .activations import ACT2FN
from .config import BertConfig
from .errors import InputError
from .labels import IGNORE
from .model import BertModel, BertModelOutput, BertPreTrainedModel, KVCache, LegacyCache, ModelOutput
from .plan import check_tensors


# ----- outputs -----------------------------------------------------------------------------------
@dataclass
class BertForPreTrainingOutput(ModelOutput):
    loss: Tensor | None = None
    prediction_logits: Tensor | None = None  # (B, S, V); (N_masked, V) with masked_positions_only
    seq_relationship_logits: Tensor | None = None  # (B, 2)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None
    masked_positions: Tensor | None = None  # (B, S) bool: the rows of sparse logits (None: dense logits)


@dataclass
class CausalLMOutput(ModelOutput):
    loss: Tensor | None = None
    logits: Tensor | None = None  # (B, S, V)
    past_key_values: KVCache | None = None
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None
    cross_attentions: tuple[Tensor, ...] | None = None


@dataclass
class ClassifierOutput(ModelOutput):
    """Sequence, token, next-sentence and multiple-choice heads all return this."""

    loss: Tensor | None = None
    logits: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class MaskedLMOutput(ClassifierOutput):
    """ClassifierOutput's fields, logits (B, S, V) or (N_masked, V) with masked_positions_only, and:"""

    masked_positions: Tensor | None = None  # (B, S) bool: the rows of sparse logits (None: dense logits)


@dataclass
class QuestionAnsweringOutput(ModelOutput):
    loss: Tensor | None = None
    start_logits: Tensor | None = None  # (B, S)
    end_logits: Tensor | None = None  # (B, S)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


# transformers' names for the same records
SequenceClassifierOutput = TokenClassifierOutput = NextSentencePredictorOutput = MultipleChoiceModelOutput = (
    ClassifierOutput
)
QuestionAnsweringModelOutput = QuestionAnsweringOutput


# ----- head modules ------------------------------------------------------------------------------
class PredictionHeadTransform(nn.Module):
    """dense -> activation -> LayerNorm, before the vocabulary projection."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = ACT2FN[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.LayerNorm(self.transform_act_fn(self.dense(hidden_states)))


class LMPredictionHead(nn.Module):
    """(..., H) -> (..., V): transform, then the (tied) word-embedding matrix plus a bias per token."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.transform = PredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden_states: Tensor) -> Tensor:
        return F.linear(self.transform(hidden_states), self.decoder.weight, self.bias)


class OnlyMLMHead(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.predictions = LMPredictionHead(config)

    def forward(self, sequence_output: Tensor) -> Tensor:
        return self.predictions(sequence_output)


class OnlyNSPHead(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.seq_relationship = nn.Linear(config.hidden_size, 2)

    def forward(self, pooled_output: Tensor) -> Tensor:
        return self.seq_relationship(pooled_output)


class PreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.predictions = LMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)

    def forward(self, sequence_output: Tensor, pooled_output: Tensor) -> tuple[Tensor, Tensor]:
        return self.predictions(sequence_output), self.seq_relationship(pooled_output)


# ----- base of all heads -------------------------------------------------------------------------
# The MLM decoder shares the word embedding matrix (while config.tie_word_embeddings).
DECODER_TIED_TO_EMBEDDINGS = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight"}


class _HeadModel(BertPreTrainedModel):
    """An encoder at `self.bert` plus a head; the encoder call is shared by all heads."""

    bert: BertModel  # set by each head's __init__ (ELECTRA's heads have self.electra instead)

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, LMPredictionHead):
            nn.init.zeros_(module.bias)

    def post_init(self) -> None:
        """Initialise the head; the encoder at self.bert initialised (and pruned) itself."""
        for name, child in self.named_children():
            if name != "bert":
                child.apply(self._init_weights)
        self.tie_weights()

    def get_output_embeddings(self) -> nn.Linear | None:
        predictions = getattr(getattr(self, "cls", None), "predictions", None)  # an MLM head's LMPredictionHead
        return predictions.decoder if predictions is not None else None

    def _encode(
        self,
        input_ids: Tensor | None,
        attention_mask: Tensor | None,
        token_type_ids: Tensor | None,
        position_ids: Tensor | None,
        head_mask: Tensor | None,
        inputs_embeds: Tensor | None,
        output_attentions: bool | None,
        output_hidden_states: bool | None,
        **extra: Any,
    ) -> BertModelOutput:
        return self.bert(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            head_mask=head_mask,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            **extra,
        )

    def _dropout_p(self) -> float:
        cfg = self.config
        return cfg.classifier_dropout if cfg.classifier_dropout is not None else cfg.hidden_dropout_prob

    def _label_count(self) -> int:
        """config.num_labels: never None once the config is built (__post_init__ counts id2label)."""
        assert self.config.num_labels is not None, "BertConfig.__post_init__ sets num_labels"
        return self.config.num_labels


class _LabelledHead(_HeadModel, metaclass=ABCMeta):
    """A head whose forward is: encode -> logits(out) -> loss(logits, labels) -> ClassifierOutput.

    The forward and its keyword signature (transformers') are written once, here; a subclass says
    how its logits come from the encoder output and how they are scored against labels.
    """

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
    ) -> ClassifierOutput | tuple[Any, ...]:
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
        logits = self.logits(out)
        loss = self.loss(logits, labels) if labels is not None else None  # the labels checked: shape, range
        if loss is not None and not len(logits):
            loss = no_rows_loss(logits)
        return _returned(ClassifierOutput(loss, logits, out.hidden_states, out.attentions), return_dict)

    @abstractmethod
    def logits(self, out: BertModelOutput) -> Tensor:
        """The head's logits from the encoder output."""

    @abstractmethod
    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        """The loss of `logits` against `labels` (checked first: shape, range)."""


class _TokenPredictionHead(_HeadModel):
    """An encoder without pooler + the MLM head (cls.predictions), its decoder tied to the word
    embeddings: BertForMaskedLM reads in both directions, BertLMHeadModel left to right."""

    _missing_ok: tuple[str, ...] = ("cls.",)
    _tied_weights = DECODER_TIED_TO_EMBEDDINGS
    _is_decoder: bool  # the config.is_decoder the subclass is built for
    _wrong_attention: str  # the warning when the config says otherwise
    cls: Callable[[Tensor], Tensor]  # (..., H) -> (..., V): OnlyMLMHead here, ELECTRA's generator its own method

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        if bool(config.is_decoder) != self._is_decoder:
            warnings.warn(self._wrong_attention, stacklevel=2)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = OnlyMLMHead(config)
        self.post_init()


_Output = TypeVar("_Output", bound=ModelOutput)


def _returned(out: _Output, return_dict: bool | None) -> _Output | tuple[Any, ...]:
    """The output dataclass, or its fields as a tuple when return_dict=False (as transformers returns them)."""
    return out.to_tuple() if return_dict is False else out


# ----- label checks ------------------------------------------------------------------------------
def _check_class_labels(
    name: str, labels: Tensor, shape: tuple[int, ...], num_classes: int, ignore: bool = False
) -> None:
    """Integer labels of `shape` in [0, num_classes) (or IGNORE where allowed)."""
    if tuple(labels.shape) != tuple(shape):
        raise InputError(f"{name} must have shape {tuple(shape)}, got {tuple(labels.shape)}")
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise InputError(f"{name} must be integer class ids, got {labels.dtype}")
    if labels.numel() == 0 or torch.compiler.is_compiling():
        return
    valid = (labels >= 0) & (labels < num_classes)
    if ignore:
        valid |= labels == IGNORE
    if not bool(valid.all()):
        bad = labels[~valid].unique()[:5].tolist()
        allowed = f"[0, {num_classes})" + (f" or {IGNORE} (ignored)" if ignore else "")
        raise InputError(f"{name} holds {bad}, outside {allowed}")


def no_rows_loss(logits: Tensor) -> Tensor:
    """The loss of a batch of 0 rows, in every head: 0, with a graph (backward gives zero gradients). A mean over
    no rows would be NaN (transformers' is); a loop that meets an empty batch goes on unharmed."""
    return logits.sum() * 0.0


def mlm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Cross-entropy over the positions whose label is not -100 (the masked ones)."""
    if not len(logits):
        return no_rows_loss(logits)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=IGNORE)


def mlm_logits_and_loss(
    head: Callable[[Tensor], Tensor],
    hidden: Tensor,
    labels: Tensor | None,
    vocab_size: int,
    masked_positions_only: bool | None,
    training: bool,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """-> (logits, loss or None, masked positions or None).

    Dense: logits (B, S, V). With masked_positions_only: logits (N_masked, V) computed only at the
    positions whose label is not -100 (the same loss for a fraction of the work), and those
    positions as a (B, S) bool. None (the default) means sparse when training with labels."""
    if labels is not None:
        _check_class_labels("labels", labels, hidden.shape[:2], vocab_size, ignore=True)
    if masked_positions_only is None:
        masked_positions_only = training and labels is not None
    if not masked_positions_only:
        logits = head(hidden)  # (B, S, V)
        return logits, mlm_loss(logits, labels) if labels is not None else None, None
    if labels is None:
        raise InputError("masked_positions_only=True needs labels (-100 marks positions to skip)")
    selected = labels != IGNORE  # (B, S) bool
    logits = head(hidden[selected])  # (N_masked, V): the vocabulary projection runs only here
    if not logits.shape[0]:  # no masked position in the batch (or no row): a zero loss that still has a graph
        return logits, no_rows_loss(logits), selected
    return logits, F.cross_entropy(logits.float(), labels[selected]), selected


def nsp_loss(logits: Tensor, labels: Tensor, name: str) -> Tensor:
    """Cross-entropy of the (B, 2) next-sentence logits; labels 0 = real next, 1 = random."""
    labels = labels.view(-1)
    _check_class_labels(name, labels, (logits.shape[0],), 2)
    return F.cross_entropy(logits.float(), labels) if len(logits) else no_rows_loss(logits)


def classification_loss(cfg: Any, logits: Tensor, labels: Tensor) -> Tensor:
    """The loss of (B, num_labels) sequence logits by cfg.problem_type (BertConfig or ModernBertConfig), inferred
    from the labels when None, as transformers infers it, and kept in cfg once the labels are valid."""
    B, n = logits.shape
    problem = cfg.problem_type
    if problem is None:  # inferred from the labels, as in transformers; kept (and saved) once they are valid
        problem = (
            "regression"
            if n == 1
            else "single_label_classification"
            if not labels.dtype.is_floating_point
            else "multi_label_classification"
        )
    where = f" (problem_type {problem!r}{', inferred from the labels' if cfg.problem_type is None else ''})"
    if problem == "regression":
        shapes = ((B,), (B, 1)) if n == 1 else ((B, n),)
        if tuple(labels.shape) not in shapes:
            raise InputError(f"regression labels must have shape {shapes[0]}, got {tuple(labels.shape)}{where}")
        loss = F.mse_loss(logits.reshape(-1).float(), labels.reshape(-1).to(torch.float32))
    elif problem == "single_label_classification":
        flat = labels.view(-1) if labels.dim() == 2 and labels.shape[1] == 1 else labels
        try:
            _check_class_labels("labels", flat, (B,), n)
        except InputError as e:
            raise InputError(f"{e}{where}") from None
        loss = F.cross_entropy(logits.float(), flat)
    else:
        if tuple(labels.shape) != (B, n):
            raise InputError(
                f"multi-label labels must be (batch, num_labels) = ({B}, {n}) of 0/1, got {tuple(labels.shape)}{where}"
            )
        loss = F.binary_cross_entropy_with_logits(logits.float(), labels.to(torch.float32))
    cfg.problem_type = problem
    return loss


def token_classification_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Cross-entropy of (B, S, num_labels) token logits; labels -100 (padding, sub-words) skipped."""
    n = logits.shape[-1]
    _check_class_labels("labels", labels, logits.shape[:2], n, ignore=True)
    return F.cross_entropy(logits.reshape(-1, n).float(), labels.reshape(-1), ignore_index=IGNORE)


def span_loss(
    start_logits: Tensor, end_logits: Tensor, start_positions: Tensor | None, end_positions: Tensor | None
) -> Tensor | None:
    """Extractive QA's loss: the mean of the start and end cross-entropies over (B, S) logits; a position outside
    the input (>= S) is ignored, as transformers clamps and ignores it. None without positions."""
    if (start_positions is None) != (end_positions is None):
        raise InputError("pass both start_positions and end_positions, or neither")
    if start_positions is None or end_positions is None:
        return None
    B, S = start_logits.shape
    positions = []
    for name, pos in (("start_positions", start_positions), ("end_positions", end_positions)):
        pos = pos.view(-1) if pos.dim() == 2 and pos.shape[1] == 1 else pos
        if tuple(pos.shape) != (B,) or pos.dtype.is_floating_point:
            raise InputError(f"{name} must be {B} integer token positions, got {tuple(pos.shape)} {pos.dtype}")
        positions.append(pos.clamp(0, S))  # S = "not in this input": ignored below
    if not B:
        return no_rows_loss(start_logits)
    return (
        F.cross_entropy(start_logits.float(), positions[0], ignore_index=S)
        + F.cross_entropy(end_logits.float(), positions[1], ignore_index=S)
    ) / 2


def choice_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Cross-entropy of (B, choices) scores against the right choice of each row."""
    B, C = logits.shape
    _check_class_labels("labels", labels, (B,), C)
    return F.cross_entropy(logits.float(), labels) if B else no_rows_loss(logits)


# ----- pretraining heads -------------------------------------------------------------------------
class BertForPreTraining(_HeadModel):
    """BERT's pretraining: masked-token prediction and next-sentence prediction, losses summed."""

    _missing_ok: tuple[str, ...] = ("cls.", "bert.pooler.")
    _tied_weights = DECODER_TIED_TO_EMBEDDINGS

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = PreTrainingHeads(config)
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
        next_sentence_label: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        masked_positions_only: bool | None = None,
    ) -> BertForPreTrainingOutput | tuple[Any, ...]:
        check_tensors(labels=labels, next_sentence_label=next_sentence_label)
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
        prediction_logits, mlm, where = mlm_logits_and_loss(
            self.cls.predictions,
            out.last_hidden_state,
            labels,
            self.config.vocab_size,
            masked_positions_only,
            self.training,
        )
        nsp_logits = self.cls.seq_relationship(out.pooler_output)  # (B, 2)
        losses = [mlm] if mlm is not None else []
        if next_sentence_label is not None:
            losses.append(nsp_loss(nsp_logits, next_sentence_label, "next_sentence_label"))
        # MLM + NSP (either alone when only its labels are given): a sum of one or two tensors, a Tensor (typeshed
        # says Tensor | 0, the start value sum returns for an empty list)
        loss = cast(Tensor, sum(losses)) if losses else None
        return _returned(
            BertForPreTrainingOutput(loss, prediction_logits, nsp_logits, out.hidden_states, out.attentions, where),
            return_dict,
        )


class BertForMaskedLM(_TokenPredictionHead):
    """Predict the token at every position; the loss counts only positions whose label != -100.

    `masked_positions_only=True` (with labels) projects to the vocabulary only at those positions:
    logits are then (N_masked, V), `masked_positions` (B, S) says where they come from, and the loss
    is the same number for a fraction of the work. That is the default in training mode with labels
    (model.train()); in eval mode, or with masked_positions_only=False, logits are (B, S, V) as in
    transformers.
    """

    _is_decoder = False
    _wrong_attention = "BertForMaskedLM wants bidirectional attention: set is_decoder=False"

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        head_mask: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        encoder_hidden_states: Tensor | None = None,
        encoder_attention_mask: Tensor | None = None,
        labels: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        masked_positions_only: bool | None = None,
    ) -> MaskedLMOutput | tuple[Any, ...]:
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
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask,
        )
        logits, loss, where = mlm_logits_and_loss(
            self.cls, out.last_hidden_state, labels, self.config.vocab_size, masked_positions_only, self.training
        )
        return _returned(MaskedLMOutput(loss, logits, out.hidden_states, out.attentions, where), return_dict)


class BertForNextSentencePrediction(_LabelledHead):
    """Is sentence B the real continuation of A? logits (B, 2); label 0 = real next, 1 = random."""

    _missing_ok: tuple[str, ...] = ("cls.", "bert.pooler.")

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = OnlyNSPHead(config)
        self.post_init()

    def logits(self, out: BertModelOutput) -> Tensor:
        return self.cls(out.pooler_output)  # (B, 2)

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        return nsp_loss(logits, labels, "labels")


# ----- fine-tuning heads -------------------------------------------------------------------------
class BertForSequenceClassification(_LabelledHead):
    """Pooled [CLS] -> dropout -> (B, num_labels). problem_type picks the loss:

    regression (num_labels == 1, or float labels of shape (B, num_labels) with problem_type set):
    MSE; single_label_classification (integer labels (B,)): cross-entropy;
    multi_label_classification (float 0/1 labels (B, num_labels)): BCE with logits.
    """

    _missing_ok: tuple[str, ...] = ("classifier.", "bert.pooler.")

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.num_labels = self._label_count()
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(self._dropout_p())
        self.classifier: nn.Module = nn.Linear(config.hidden_size, self.num_labels)  # ELECTRA's: ClassificationHead
        self.post_init()

    def logits(self, out: BertModelOutput) -> Tensor:
        return self.classifier(self.dropout(out.pooler_output))  # (B, num_labels)

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        return classification_loss(self.config, logits, labels)


class BertForTokenClassification(_LabelledHead):
    """Every token -> dropout -> (B, S, num_labels); labels -100 (padding, sub-words) are skipped."""

    _missing_ok: tuple[str, ...] = ("classifier.",)

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.num_labels = self._label_count()
        self.bert = BertModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(self._dropout_p())
        self.classifier = nn.Linear(config.hidden_size, self.num_labels)
        self.post_init()

    def logits(self, out: BertModelOutput) -> Tensor:
        return self.classifier(self.dropout(out.last_hidden_state))  # (B, S, num_labels)

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        return token_classification_loss(logits, labels)


class BertForQuestionAnswering(_HeadModel):
    """Extractive QA: a start and an end score per token. As in transformers, positions past the
    input are clamped to S and ignored in the loss (answers cut off by a window); negative ones are
    clamped to 0, the [CLS] token, which is how "no answer here" is trained."""

    _missing_ok: tuple[str, ...] = ("qa_outputs.",)

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.num_labels = self._label_count()
        if config.num_labels != 2:
            warnings.warn(
                f"BertForQuestionAnswering splits its output into start/end: num_labels should be 2, "
                f"not {config.num_labels}",
                stacklevel=2,
            )
        self.bert = BertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, self.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        head_mask: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        start_positions: Tensor | None = None,
        end_positions: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> QuestionAnsweringOutput | tuple[Any, ...]:
        check_tensors(start_positions=start_positions, end_positions=end_positions)
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
        logits = self.qa_outputs(out.last_hidden_state)  # (B, S, 2)
        start_logits, end_logits = (t.squeeze(-1).contiguous() for t in logits.split(1, dim=-1))  # (B, S) each
        loss = span_loss(start_logits, end_logits, start_positions, end_positions)
        return _returned(
            QuestionAnsweringOutput(loss, start_logits, end_logits, out.hidden_states, out.attentions), return_dict
        )


class BertForMultipleChoice(_HeadModel):
    """(B, choices, S) inputs are flattened to (B * choices, S); one score per choice -> (B, choices)."""

    _missing_ok: tuple[str, ...] = ("classifier.", "bert.pooler.")

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config)
        self.dropout: nn.Module = nn.Dropout(self._dropout_p())  # ELECTRA's: nn.Identity
        self.classifier = nn.Linear(config.hidden_size, 1)
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
    ) -> ClassifierOutput | tuple[Any, ...]:
        check_tensors(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            labels=labels,
        )
        if input_ids is not None and input_ids.dim() != 3:
            raise InputError(f"input_ids must be (batch, num_choices, seq_len), got {tuple(input_ids.shape)}")
        if inputs_embeds is not None and inputs_embeds.dim() != 4:
            raise InputError(
                f"inputs_embeds must be (batch, num_choices, seq_len, hidden), got {tuple(inputs_embeds.shape)}"
            )
        first = input_ids if input_ids is not None else inputs_embeds
        if first is None:
            raise InputError("pass input_ids (batch, num_choices, seq_len) or inputs_embeds")
        B, C, S = first.shape[:3]

        def flat(
            t: Tensor | None,
        ) -> Tensor | None:  # (..., S) -> (B * C, S): every choice becomes its own row; (1, S) stays broadcastable
            return t.reshape(-1, t.shape[-1]) if t is not None else None

        out = self._encode(
            flat(input_ids),
            flat(attention_mask),
            flat(token_type_ids),
            flat(position_ids),
            head_mask,
            inputs_embeds.reshape(B * C, S, -1) if inputs_embeds is not None else None,
            output_attentions,
            output_hidden_states,
        )
        logits = self.classifier(self.dropout(out.pooler_output)).view(B, C)  # (B, choices)
        loss = choice_loss(logits, labels) if labels is not None else None
        return _returned(ClassifierOutput(loss, logits, out.hidden_states, out.attentions), return_dict)


# ----- causal language model ---------------------------------------------------------------------
class BertLMHeadModel(_TokenPredictionHead):
    """BERT as a left-to-right decoder (is_decoder=True): logits for the NEXT token at each position.

    Labels are the input ids themselves: the loss compares logits[:, t] with labels[:, t + 1].
    """

    _is_decoder = True
    _wrong_attention = "BertLMHeadModel is a causal decoder: set is_decoder=True"

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        head_mask: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        encoder_hidden_states: Tensor | None = None,
        encoder_attention_mask: Tensor | None = None,
        labels: Tensor | None = None,
        past_key_values: KVCache | LegacyCache | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> CausalLMOutput | tuple[Any, ...]:
        check_tensors(labels=labels)
        if labels is not None:
            use_cache = False
        out = self._encode(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            head_mask,
            inputs_embeds,
            output_attentions,
            output_hidden_states,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask,
            past_key_values=past_key_values,
            use_cache=use_cache,
        )
        logits = self.cls(out.last_hidden_state)  # (B, S, V)
        loss = None
        if labels is not None:
            _check_class_labels("labels", labels, logits.shape[:2], self.config.vocab_size, ignore=True)
            loss = mlm_loss(logits[:, :-1], labels[:, 1:])  # position t predicts token t + 1
        return _returned(
            CausalLMOutput(loss, logits, out.past_key_values, out.hidden_states, out.attentions, out.cross_attentions),
            return_dict,
        )

    @torch.no_grad()
    def generate(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        max_new_tokens: int = 20,
        max_length: int | None = None,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        eos_token_id: int | None = None,
        pad_token_id: int | None = None,
        use_cache: bool = True,
        encoder_hidden_states: Tensor | None = None,
        encoder_attention_mask: Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Extend input_ids (B, S) token by token; returns (B, S + generated).

        Greedy by default; do_sample=True draws from softmax(logits / temperature) after keeping
        the top_k tokens and the smallest set whose probability reaches top_p. With use_cache each
        step feeds only the newest token and reuses the keys/values of the earlier ones. A row
        stops at eos_token_id (then padded with pad_token_id); all stop at max_length.
        """
        if input_ids.dim() != 2 or input_ids.shape[1] == 0:
            raise InputError(f"generate() needs input_ids of shape (batch, >=1 tokens), got {tuple(input_ids.shape)}")
        if temperature <= 0 or not 0 < top_p <= 1 or top_k < 0:
            raise InputError(f"need temperature > 0, 0 < top_p <= 1, top_k >= 0; got {temperature}, {top_p}, {top_k}")
        limit = self.config.max_position_embeddings
        total = min(max_length if max_length is not None else input_ids.shape[1] + max_new_tokens, limit)
        pad = pad_token_id if pad_token_id is not None else (self.config.pad_token_id or 0)
        tokens = input_ids
        mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
        finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        past = None
        kw = dict(encoder_hidden_states=encoder_hidden_states, encoder_attention_mask=encoder_attention_mask)
        while tokens.shape[1] < total:
            step_ids = tokens[:, -1:] if past is not None else tokens
            # positions count real tokens only, so a left-padded prompt starts at 0 (as transformers does)
            positions = (mask.long().cumsum(-1) - 1).clamp(min=0).masked_fill(mask == 0, 1)[:, -step_ids.shape[1] :]
            out = self(
                step_ids, attention_mask=mask, position_ids=positions, past_key_values=past, use_cache=use_cache, **kw
            )
            past = out.past_key_values if use_cache else None
            logits = out.logits[:, -1].float()  # (B, V): scores for the next token
            next_token = _next_token(logits, do_sample, temperature, top_k, top_p, generator)
            next_token = torch.where(finished, torch.full_like(next_token, pad), next_token)
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
            mask = torch.cat([mask, torch.ones_like(next_token[:, None])], dim=1)
            if eos_token_id is not None:
                finished |= next_token == eos_token_id
                if bool(finished.all()):
                    break
        return tokens


def _next_token(
    logits: Tensor, do_sample: bool, temperature: float, top_k: int, top_p: float, generator: torch.Generator | None
) -> Tensor:
    """One token id per row from next-token logits (B, V)."""
    if not do_sample:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k > 0:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative - sorted_logits.softmax(dim=-1) >= top_p  # mass before this token already >= top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(1, order, sorted_logits)
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(1)
