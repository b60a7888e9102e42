"""Masked-language-model prediction, explained: where the masks are, what the logits are, what the loss uses.

BertForMaskedLM scores every vocabulary entry at every position: logits (B, S, V). Training puts
the true token id in `labels` at the masked positions and -100 everywhere else, so only the masked
rows enter the cross-entropy; `masked_positions_only=True` computes just those rows, (N_masked, V),
and gives the same loss.

    text --tokenizer--> ids (1, S) --masked_lm.mlm_logits: ONE forward pass--> logits (1, S, V)
         --masked_lm.mask_fills--> top-k per [MASK] (as `bertkit fill-mask` and serve's /fill-mask)
         --cross_entropy(logits, labels)--> the loss;  logits[labels != -100] (N_masked, V) --> the same loss
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from ..heads import IGNORE, BertForMaskedLM
from ..masked_lm import MaskFill, mask_fills, mlm_logits
from ..modernbert import ModernBertForMaskedLM
from ..text import pad
from .common import ExplainError, PrettyPrinter, shape_str

if TYPE_CHECKING:
    from ..model import BertPreTrainedModel
    from ..tokenizer import Tokenizer


@dataclass
class MLMExplanation:
    tokens: list[str]
    input_ids: Tensor  # (1, S)
    masked_positions: list[int]
    logits_shape: tuple[int, ...]  # (1, S, V)
    predictions: list[MaskFill]  # per [MASK]: its position, candidates (token, id, probability, logit) best first
    labels: list[int]  # example labels: each mask's top prediction, -100 elsewhere
    loss: float  # cross-entropy with those labels over the full (1, S, V) logits
    masked_logits_shape: tuple[int, ...]  # (N_masked, V): the rows masked_positions_only=True computes
    masked_loss: float  # the same loss from those rows only

    def __str__(self) -> str:
        return format_mlm(self)

    def _repr_pretty_(self, printer: PrettyPrinter, cycle: bool) -> None:
        printer.text(str(self))


def explain_mlm(
    model: BertPreTrainedModel | ModernBertForMaskedLM,
    tokenizer: Tokenizer,
    text: str,
    text_pair: str | None = None,
    top_k: int = 5,
) -> MLMExplanation:
    """Predict the [MASK] tokens of `text` and show which positions a training loss would use."""
    if not isinstance(model, (BertForMaskedLM, ModernBertForMaskedLM)):
        raise ExplainError(
            f"MLM needs a BertForMaskedLM, got {type(model).__name__}: load it with "
            "BertForMaskedLM.from_pretrained(path) (a ModernBERT folder loads as a ModernBertForMaskedLM)"
        )
    if top_k < 1:
        raise ExplainError(f"top_k must be at least 1, got {top_k}")
    enc = tokenizer(text, text_pair, return_tensors="pt", return_token_type_ids=True)
    ids = enc["input_ids"]  # (1, S)
    mask_token = tokenizer.mask_token
    masked = (ids[0] == tokenizer.mask_token_id).nonzero().view(-1).tolist()
    if not masked:
        raise ExplainError(
            f"no {mask_token} in {text!r}: write {mask_token} where a token should be predicted, "
            f"e.g. 今天{mask_token}气很好"
        )
    # (1, S, V), on the host: what follows is the explanation's arithmetic, wherever the model ran (--device)
    logits = mlm_logits(model, ids.tolist(), tokenizer.pad_token_id, enc["token_type_ids"].tolist()).float().cpu()
    predictions = mask_fills(logits[0], ids[0].tolist(), tokenizer, top_k)
    labels = torch.full_like(ids, IGNORE)  # (1, S): -100 = not in the loss
    for pred in predictions:
        labels[0, pred.position] = pred.candidates[0].token_id
    scores = logits.float()
    full = F.cross_entropy(scores.view(-1, scores.shape[-1]), labels.view(-1), ignore_index=IGNORE)
    rows = scores[labels != IGNORE]  # (N_masked, V): what masked_positions_only=True projects, and nothing else
    masked_loss = F.cross_entropy(rows, labels[labels != IGNORE])
    return MLMExplanation(
        enc.tokens(),
        ids,
        masked,
        tuple(logits.shape),
        predictions,
        labels[0].tolist(),
        float(full),
        tuple(rows.shape),
        float(masked_loss),
    )


def format_mlm(e: MLMExplanation) -> str:
    S, V = e.logits_shape[1], e.logits_shape[2]
    n = len(e.masked_positions)
    cells = [f"{i}:{t}" for i, t in enumerate(e.tokens)]
    lines = [
        "tokens: " + " ".join(cells),
        f"masked positions: {e.masked_positions} ({n} of {S} tokens)",
        "",
        f"logits {shape_str(e.logits_shape)} = (B, S, V): a score for each of the V={V} vocabulary entries at "
        f"EVERY position, masked or not.",
        "The loss uses only the masked positions: labels hold the true token id there and -100 elsewhere,",
        f"  labels = {_labels_text(e)}",
        "  (no true tokens are known here, so each mask's top prediction stands in for it)",
        f"  loss = cross_entropy over the {n} labelled position(s) of logits {shape_str(e.logits_shape)} "
        f"= {e.loss:.4f}",
        f"  masked_positions_only=True projects only those rows: logits {shape_str(e.masked_logits_shape)} "
        f"= (N_masked, V), loss {e.masked_loss:.4f}",
        "",
    ]
    for pred in e.predictions:
        lines.append(f"top {len(pred.candidates)} at position {pred.position} ({e.tokens[pred.position]}):")
        for rank, (token, token_id, prob, logit) in enumerate(pred.candidates, 1):
            lines.append(f"  {rank}. {pad(token, 12)} id {token_id:>6}  p={prob:6.2%}  logit {logit:8.3f}")
    if any(c.token.startswith("<id ") for pred in e.predictions for c in pred.candidates):
        lines.append("(<id N>: an id the tokenizer's vocabulary does not have, e.g. a preset's character vocabulary)")
    return "\n".join(lines)


def _labels_text(e: MLMExplanation) -> str:
    if len(e.labels) > 24:  # long inputs: show the labelled positions only
        return "-100 everywhere except " + ", ".join(f"[{p}]={e.labels[p]}" for p in e.masked_positions)
    return "[" + ", ".join(str(x) for x in e.labels) + "]"
