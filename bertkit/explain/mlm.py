"""Masked-language-model prediction, explained: where the masks are, what the logits are, what the loss uses.

BertForMaskedLM scores every vocabulary entry at every position: logits (B, S, V). Training puts
the true token id in `labels` at the masked positions and -100 everywhere else, so only the masked
rows enter the cross-entropy; `masked_positions_only=True` computes just those rows, (N_masked, V),
and gives the same loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..heads import IGNORE, BertForMaskedLM
from ..text import pad
from .common import ExplainError, shape_str


@dataclass
class MaskPrediction:
    position: int  # index in the token sequence
    candidates: list[tuple[str, int, float, float]]  # (token, id, probability, logit), best first


@dataclass
class MLMExplanation:
    tokens: list[str]
    input_ids: Tensor  # (1, S)
    masked_positions: list[int]
    logits_shape: tuple[int, ...]  # (1, S, V)
    predictions: list[MaskPrediction]
    labels: list[int]  # example labels: each mask's top prediction, -100 elsewhere
    loss: float  # cross-entropy with those labels over the full (1, S, V) logits
    masked_logits_shape: tuple[int, ...]  # (N_masked, V) with masked_positions_only=True
    masked_loss: float  # the same loss from those rows only

    def __str__(self) -> str:
        return format_mlm(self)

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))


def explain_mlm(model: nn.Module, tokenizer, text: str, text_pair: str | None = None,
                top_k: int = 5) -> MLMExplanation:
    """Predict the [MASK] tokens of `text` and show which positions a training loss would use."""
    if not isinstance(model, BertForMaskedLM):
        raise ExplainError(f"MLM needs a BertForMaskedLM, got {type(model).__name__}: load it with "
                           "BertForMaskedLM.from_pretrained(path)")
    if top_k < 1:
        raise ExplainError(f"top_k must be at least 1, got {top_k}")
    enc = tokenizer(text, text_pair, return_tensors="pt")
    ids = enc["input_ids"]  # (1, S)
    mask_token = tokenizer.mask_token
    masked = (ids[0] == tokenizer.mask_token_id).nonzero().view(-1).tolist()
    if not masked:
        raise ExplainError(f"no {mask_token} in {text!r}: write {mask_token} where a token should be predicted, "
                           f"e.g. 今天{mask_token}气很好")
    inputs = dict(input_ids=ids, token_type_ids=enc["token_type_ids"], attention_mask=enc["attention_mask"])
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(**inputs).logits  # (1, S, V)
            predictions = [_top(logits[0, p], p, tokenizer, top_k) for p in masked]
            labels = torch.full_like(ids, IGNORE)  # (1, S): -100 = not in the loss
            for p, pred in zip(masked, predictions):
                labels[0, p] = pred.candidates[0][1]
            full = model(**inputs, labels=labels)
            rows = model(**inputs, labels=labels, masked_positions_only=True)
    finally:
        model.train(was_training)
    return MLMExplanation(enc.tokens(), ids, masked, tuple(logits.shape), predictions, labels[0].tolist(),
                          float(full.loss), tuple(rows.logits.shape), float(rows.loss))


def _top(scores: Tensor, position: int, tokenizer, k: int) -> MaskPrediction:
    probs = torch.softmax(scores.float(), dim=-1)  # (V,)
    top = torch.topk(probs, min(k, probs.shape[0]))
    candidates = [(_token(tokenizer, int(i)), int(i), float(p), float(scores[i]))
                  for p, i in zip(top.values, top.indices)]
    return MaskPrediction(position, candidates)


def _token(tokenizer, token_id: int) -> str:
    """The token text; an id the tokenizer does not have (a preset's character vocabulary) as <id N>."""
    return tokenizer.ids_to_tokens.get(token_id, f"<id {token_id}>")


def format_mlm(e: MLMExplanation) -> str:
    S, V = e.logits_shape[1], e.logits_shape[2]
    n = len(e.masked_positions)
    cells = [f"{i}:{t}" for i, t in enumerate(e.tokens)]
    lines = ["tokens: " + " ".join(cells),
             f"masked positions: {e.masked_positions} ({n} of {S} tokens)", "",
             f"logits {shape_str(e.logits_shape)} = (B, S, V): a score for each of the V={V} vocabulary entries at "
             f"EVERY position, masked or not.",
             "The loss uses only the masked positions: labels hold the true token id there and -100 elsewhere,",
             f"  labels = {_labels_text(e)}",
             "  (no true tokens are known here, so each mask's top prediction stands in for it)",
             f"  loss = cross_entropy over the {n} labelled position(s) of logits {shape_str(e.logits_shape)} "
             f"= {e.loss:.4f}",
             f"  masked_positions_only=True projects only those rows: logits {shape_str(e.masked_logits_shape)} "
             f"= (N_masked, V), loss {e.masked_loss:.4f}", ""]
    for pred in e.predictions:
        lines.append(f"top {len(pred.candidates)} at position {pred.position} ({e.tokens[pred.position]}):")
        for rank, (token, token_id, prob, logit) in enumerate(pred.candidates, 1):
            lines.append(f"  {rank}. {pad(token, 12)} id {token_id:>6}  p={prob:6.2%}  logit {logit:8.3f}")
    if any(c[0].startswith("<id ") for pred in e.predictions for c in pred.candidates):
        lines.append("(<id N>: an id the tokenizer's vocabulary does not have, e.g. a preset's character vocabulary)")
    return "\n".join(lines)


def _labels_text(e: MLMExplanation) -> str:
    if len(e.labels) > 24:  # long inputs: show the labelled positions only
        return "-100 everywhere except " + ", ".join(f"[{p}]={e.labels[p]}" for p in e.masked_positions)
    return "[" + ", ".join(str(x) for x in e.labels) + "]"
