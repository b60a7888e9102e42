"""What a masked-language model predicts for each [MASK]: the top-k tokens, from ONE forward pass.

    ids with [MASK] --mlm_logits--> logits (B, S, V) --mask_fills--> per [MASK] a MaskFill: its position and the
    top-k Candidates (token, id, probability, logit), best first; filled_text shows the text with one of them.
    An id the tokenizer does not have (a vocabulary smaller than the model's) reads "<id N>" wherever it is shown.

`bertkit fill-mask`, serve's /fill-mask and `bertkit explain --mlm` all run it; inference.load_mlm loads the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor

from .data.batching import id_batch
from .tokenizer import BPETokenizer

if TYPE_CHECKING:
    from .model import InferenceModel
    from .tokenizer import Tokenizer


class Candidate(NamedTuple):
    """One token a [MASK] could be (a named tuple: candidate.token_id or candidate[1])."""

    token: str  # its vocabulary entry; "<id N>" for an id the tokenizer does not have
    token_id: int
    probability: float
    logit: float


@dataclass
class MaskFill:
    position: int  # of the [MASK] in its row of ids
    candidates: list[Candidate]  # best first


def mask_positions(ids: list[int], tok: Tokenizer) -> list[int]:
    return [p for p, t in enumerate(ids) if t == tok.mask_token_id]


def token_text(tok: Tokenizer, token_id: int) -> str:
    """The token of an id as a reader reads it (a byte-level BPE token as its text, a WordPiece one as in the
    vocabulary); an id the tokenizer does not have (the model's vocabulary is larger, as a preset's with a character
    vocabulary) as <id N>."""
    token = tok.ids_to_tokens.get(token_id)
    if token is None:
        return f"<id {token_id}>"
    return tok.convert_tokens_to_string([token]) if isinstance(tok, BPETokenizer) else token


def filled_text(tok: Tokenizer, ids: list[int], position: int, token_id: int) -> str:
    """The text of `ids` with `token_id` at `position`, special tokens ([CLS], other [MASK]s) left out; an id the
    tokenizer does not have reads <id N>."""
    special = set(tok.all_special_ids)
    filled = [token_id if j == position else t for j, t in enumerate(ids)]
    return tok.convert_tokens_to_string([token_text(tok, t) for t in filled if t not in special])


@torch.no_grad()
def mlm_logits(
    model: InferenceModel, rows: list[list[int]], pad_id: int, token_type_ids: list[list[int]] | None = None
) -> Tensor:
    """ONE forward pass of a masked-language model over rows of ids padded to the longest: logits (B, S, V)."""
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in id_batch(rows, pad_id, token_type_ids).items()}
    was_training = model.training
    model.eval()
    try:
        return model(**batch).logits
    finally:
        model.train(was_training)


def mask_fills(logits: Tensor, ids: list[int], tok: Tokenizer, top_k: int) -> list[MaskFill]:
    """The top_k candidates at each [MASK] of one row: logits (S', V) of the row (S' >= len(ids); padding unused)."""
    fills = []
    for position in mask_positions(ids, tok):
        scores = logits[position].float()  # (V,)
        best = scores.softmax(-1).topk(min(top_k, scores.shape[-1]))
        fills.append(
            MaskFill(
                position,
                [
                    Candidate(token_text(tok, int(i)), int(i), float(p), float(scores[i]))
                    for p, i in zip(best.values, best.indices)
                ],
            )
        )
    return fills


def fill_mask(model: InferenceModel, tok: Tokenizer, rows: list[list[int]], top_k: int = 5) -> list[list[MaskFill]]:
    """Per row of ids, per [MASK] in it: the top_k candidates, from one forward pass over all rows."""
    logits = mlm_logits(model, rows, tok.pad_token_id)  # (B, S, V)
    return [mask_fills(logits[b], ids, tok, top_k) for b, ids in enumerate(rows)]
