"""Masked-language modelling as BERT does it (--objective mlm), and with next-sentence prediction (mlm-nsp).

rows (packed, or sentence pairs) -> MaskingCollator: mlm_probability of the ordinary tokens selected,
80% [MASK] / 10% random / 10% kept -> BertForMaskedLM (BertForPreTraining with NSP), the vocabulary
projection only at the selected positions -> cross-entropy over them (+ NSP's over rows)
held out: MLM loss, accuracy and perplexity at 15% masking (+ NSP accuracy), and how local the most
local head is
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...data.masking import MaskingCollator
from ...heads import IGNORE, BertForMaskedLM, BertForPreTraining, BertForPreTrainingOutput, MaskedLMOutput
from ...init import initialise
from ...metrics import neighbour_attention
from ...modernbert import ModernBertConfig, ModernBertForMaskedLM
from ..batches import LOSS_UNITS, LossWeights, StepSampler
from .base import ModelConfig, Objective, Rows, Setup

EVAL_STEP = 10**9  # masks of held-out batches come from steps no training batch uses: fixed across evals
EVAL_MLM_PROBABILITY = 0.15  # held-out tokens are masked as BERT does, whatever --mlm-probability trains with


class PretrainBatches:
    """Step-addressed batches: each process takes its rows of the global batch (StepSampler), cuts them from the
    dataset and masks them as their place in the global batch says (MaskingCollator), so all processes
    together mask exactly what one process would. Each batch counts its selected tokens (LOSS_UNITS), so the
    loop weighs each process's MLM mean into the mean over the whole step, as one process would compute it."""

    def __init__(self, rows: Rows, collator: MaskingCollator, sampler: StepSampler) -> None:
        self.rows, self.collator, self.sampler = rows, collator, sampler

    def places(self, micro: int) -> np.ndarray:
        """(B,) this process's rows' places in micro-batch `micro` of a step (micro-batch x global batch +
        row): draws keyed by them are the same whatever the split of the step into processes and micro-batches."""
        return micro * self.sampler.global_batch + self.sampler.own_rows()

    def batch(self, step: int, micro: int) -> dict[str, Any]:
        """The masked tensors, and LOSS_UNITS: the count of selected tokens (an int)."""
        rows = self.rows.batch(self.sampler.indices(step, micro), words=self.collator.wwm)
        out: dict[str, Any] = self.collator(rows, step=step, positions=self.places(micro))
        out[LOSS_UNITS] = int((out["labels"] != IGNORE).sum())
        return out


class MaskingObjective(Objective):
    """What the masking objectives share: the training and held-out collators, and their batches."""

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        tok = self.tokenizer
        self.collator = MaskingCollator(
            vocab_size=tok.vocab_size,
            mask_id=tok.mask_token_id,
            pad_id=tok.pad_token_id,
            special_ids=tuple(tok.all_special_ids),
            mlm_probability=setup.mlm_probability,
            wwm=self.cfg.wwm,
            seed=self.cfg.seed,
        )
        self.heldout_collator = dataclasses.replace(self.collator, mlm_probability=EVAL_MLM_PROBABILITY)

    def batches(self, rows: Rows, sampler: StepSampler) -> PretrainBatches:
        return PretrainBatches(rows, self.collator, sampler)

    def heldout_batches(self, rows: Rows) -> Iterator[tuple[np.ndarray, dict[str, torch.Tensor]]]:
        """The first --eval-rows held-out rows, masked at 15%, --batch-size at a time (heldout_batches)."""
        return heldout_batches(rows, self.heldout_collator, self.cfg.batch_size, self.cfg.eval_rows)


def heldout_batches(
    rows: Rows, collator: MaskingCollator, batch_size: int, count: int = 0
) -> Iterator[tuple[np.ndarray, dict[str, torch.Tensor]]]:
    """(row positions, masked batch) pairs over the first `count` rows (0: all); the masks are the same at
    every evaluation (drawn for a step no training batch has)."""
    count = min(count or len(rows), len(rows))
    for i in range(0, count, batch_size):
        positions = np.arange(i, min(i + batch_size, count))
        yield positions, collator(rows.batch(positions, words=collator.wwm), step=EVAL_STEP, positions=positions)


class MaskedLM(MaskingObjective):
    """BERT's masked-language model: a loss on the selected tokens only."""

    name = "mlm"
    model_class: type[BertForMaskedLM] | type[BertForPreTraining] = BertForMaskedLM

    def build(self, config: ModelConfig, token_counts: torch.Tensor) -> nn.Module:
        if isinstance(config, ModernBertConfig):  # --model-config modern-*: the same objective, a ModernBERT
            return initialise(ModernBertForMaskedLM(config), self.setup.init, token_counts=token_counts)
        return initialise(self.model_class(config), self.setup.init, token_counts=token_counts)

    def load(self, folder: str) -> nn.Module:
        return self.model_class.from_pretrained(folder)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor], weights: LossWeights) -> torch.Tensor:
        return pretraining_loss(model, batch, weights)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, rows: Rows) -> dict[str, float]:
        return evaluate_mlm(model, rows, self.heldout_batches(rows))


class MaskedLMWithNSP(MaskedLM):
    """BERT's full pretraining: MLM on sentence pairs, and whether sentence B followed sentence A."""

    name, pairs, model_class = "mlm-nsp", True, BertForPreTraining


def masked_lm_forward(model: nn.Module, batch: dict[str, torch.Tensor]) -> MaskedLMOutput | BertForPreTrainingOutput:
    """The model on a masked batch, projecting to the vocabulary only at the selected tokens (labels != -100).

    Its output holds .loss, the mean cross-entropy over those tokens (computed by the head; MLM only, the NSP
    labels are not passed), their logits (N_selected, V), and .masked_positions (B, S) saying where they are.
    """
    return model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        token_type_ids=batch["token_type_ids"],
        labels=batch["labels"],
        masked_positions_only=True,
    )


def selected_logits(out: MaskedLMOutput | BertForPreTrainingOutput) -> torch.Tensor:
    """(N_selected, V): the MLM logits of masked_lm_forward's output (BertForMaskedLM or BertForPreTraining)."""
    logits = out.logits if hasattr(out, "logits") else out.prediction_logits
    assert logits is not None  # the heads always return their MLM logits
    return logits


def pretraining_loss(model: nn.Module, batch: dict[str, torch.Tensor], weights: LossWeights) -> torch.Tensor:
    """This micro-batch's share of the step's loss: the mean cross-entropy over the selected tokens of the
    whole step (all micro-batches, all processes; weights.tokens), + NSP's mean over rows when labelled."""
    out = masked_lm_forward(model, batch)
    assert out.loss is not None  # labels were passed
    loss = out.loss * weights.tokens  # no selected token here: the head's loss is a 0 with a graph
    if "next_sentence_label" in batch:
        nsp = _nsp_logits(out)
        loss = loss + F.cross_entropy(nsp.float(), batch["next_sentence_label"]) * weights.rows
    return loss


def _nsp_logits(out: MaskedLMOutput | BertForPreTrainingOutput) -> torch.Tensor:
    """(B, 2): the next-sentence logits of masked_lm_forward's output on sentence pairs."""
    # only the pairs objective (mlm-nsp) has rows with a next-sentence label, and its model is BertForPreTraining
    assert isinstance(out, BertForPreTrainingOutput) and out.seq_relationship_logits is not None
    return out.seq_relationship_logits


class MLMScore:
    """Held-out MLM numbers summed over batches: loss (the mean over all selected tokens), accuracy, perplexity."""

    def __init__(self) -> None:
        self.total, self.correct, self.selected = 0.0, 0, 0

    def add(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        """logits (N, V) and targets (N,) of one batch's selected tokens."""
        # a sum, not the head's mean: the mean over all held-out tokens weighs every token the same
        self.total += float(F.cross_entropy(logits.float(), targets, reduction="sum"))
        self.correct += int((logits.argmax(-1) == targets).sum())
        self.selected += len(targets)

    def result(self) -> dict[str, float]:
        loss = self.total / max(1, self.selected)
        return {
            "loss": loss,
            "mlm_accuracy": self.correct / max(1, self.selected),
            "perplexity": math.exp(min(loss, 50.0)),
        }


@torch.no_grad()
def evaluate_mlm(
    model: nn.Module, rows: Rows, batches: Iterable[tuple[np.ndarray, dict[str, torch.Tensor]]]
) -> dict[str, float]:
    """Held-out MLM loss, accuracy over selected tokens, perplexity (and NSP accuracy) on `batches`
    ((positions, masked batch) pairs: MaskingObjective.heldout_batches), and the most local head."""
    device = next(model.parameters()).device
    score, nsp_correct, count = MLMScore(), 0, 0
    for positions, batch in batches:
        batch = {k: v.to(device) for k, v in batch.items()}
        out = masked_lm_forward(model, batch)
        assert out.masked_positions is not None  # masked_positions_only: where the selected tokens are
        score.add(selected_logits(out), batch["labels"][out.masked_positions])  # (N, V), (N,)
        count += len(positions)
        if "next_sentence_label" in batch:
            nsp_correct += int((_nsp_logits(out).argmax(-1) == batch["next_sentence_label"]).sum())
    result = score.result()
    if rows.pairs:
        result["nsp_accuracy"] = nsp_correct / max(1, count)
    local = neighbour_attention_of(model, rows)
    if local is not None:
        result["neighbour_attention"] = local
    return result


def neighbour_attention_of(model: nn.Module, rows: Rows, count: int = 16) -> float | None:
    """The most any head attends to one neighbouring offset (+-1, +-2) on the first held-out rows that are full
    (full_row_attentions): 1/S for uniform heads, 0.99 for a real BERT's previous-token head."""
    found = full_row_attentions(model, rows, count)
    return None if found is None else neighbour_attention(found[0])


@torch.no_grad()
def full_row_attentions(model: nn.Module, rows: Rows, count: int = 16) -> tuple[tuple[Tensor, ...], int, int] | None:
    """The attention maps ((B, heads, S, S) per layer) of the first held-out rows that are full (no padding, one
    document), up to `count` of them, with their number and length S; None where none is (or S is under 8)."""
    batch = rows.batch(np.arange(min(len(rows), 4 * count)))
    full = np.flatnonzero((batch.attention_mask == 1).all(axis=1))[:count]
    if not len(full) or batch.input_ids.shape[1] < 8:
        return None
    device = next(model.parameters()).device
    out = model(
        input_ids=torch.from_numpy(batch.input_ids[full]).to(device),
        token_type_ids=torch.from_numpy(batch.token_type_ids[full]).to(device),
        output_attentions=True,
    )
    return out.attentions, len(full), int(batch.input_ids.shape[1])
