"""Where the real tokens of a padded batch are: removing padding, putting it back, packed documents.

    attention_mask (B, S): 0/1, or packed document numbers (1 1 2 2 2 0: 0 = padding)
      -> unpad(mask, lengths, largest)
      -> Unpadded(indices (N,), cu_seqlens (n + 1,), max_seqlen, shape (B, S), bounds (cu_seqlens on
                  the host), layout (how attention runs over the sequences))
           .remove(x)   (B, S, ...) -> (N, ...)   the N real tokens, sequence after sequence
           .restore(x)  (N, ...) -> (B, S, ...)   zeros at the padding
      sequence i is rows cu_seqlens[i] : cu_seqlens[i+1] of the N tokens; 0/1 masks give one
      sequence per row, a packed mask one per document

    packed rows: document_keep(documents) (B, S, S), document_positions (B, S)

    Layout: how attention runs over the sequences, chosen once per forward pass by attention.varlen_layout
    (the runs or groups of grouping.py, or one kernel call)

Host reads: the tokens per row and the mask's largest number come with BertModel's one read of its
inputs; unpad reads nothing more for a 0/1 mask, and once more (the document offsets) for packed
documents. Everything after that is Python ints: bounds and layouts read nothing.

Only bookkeeping lives here: which rows hold which tokens. How the fallback groups them for SDPA calls is
grouping.py; the attention over them is attention.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .deprecated import moved
from .errors import InputError


# ----- packed documents --------------------------------------------------------------------------
def document_keep(documents: Tensor) -> Tensor:
    """(B, S) document numbers (0 = padding) -> (B, S, S) 1 where query and key share a document."""
    same = documents[:, :, None] == documents[:, None, :]
    return (same & (documents[:, None, :] > 0)).long()


def document_positions(documents: Tensor) -> Tensor:
    """(B, S) document numbers -> position ids restarting at 0 where each document starts."""
    B, S = documents.shape
    index = torch.arange(S, device=documents.device).expand(B, S)
    starts = torch.ones_like(documents, dtype=torch.bool)
    starts[:, 1:] = documents[:, 1:] != documents[:, :-1]
    first = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values  # start of my run
    return index - first


# ----- removing and restoring padding ------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """How the varlen path attends over the sequences; attention.varlen_layout chooses it once per
    forward pass, and every layer follows it.

    how: "kernel"  torch's variable-length flash kernel on cu_seqlens
         "runs"    one SDPA call per run of equal-length sequences, plan = equal_length_runs(bounds)
         "groups"  one SDPA call per group of similar length, padded to its longest member,
                   plan = group_plan(bounds) (one group on CUDA)
    """

    how: str
    plan: tuple = ()


@dataclass(frozen=True)
class Unpadded:
    """Where the real tokens of a (B, S) batch are, once padding is removed.

    indices: (N,) positions in the flattened (B * S) batch, or None when nothing is padded (every
    row is one full sequence, and removing padding is a reshape); cu_seqlens: (n + 1,) int32
    sequence offsets into the N tokens; max_seqlen: the longest; shape: (B, S) to pad back to.
    """

    indices: Tensor | None
    cu_seqlens: Tensor
    max_seqlen: int
    shape: tuple[int, int]
    bounds: list[int]  # cu_seqlens on the host: known once per forward pass, never read per layer
    layout: Layout | None = None  # how attention runs over the sequences; set with the attention path

    @classmethod
    def full(cls, B: int, S: int, device: torch.device | str) -> Unpadded:
        bounds = list(range(0, (B + 1) * S, S))  # known without reading the device
        cu_seqlens = torch.arange(0, (B + 1) * S, S, dtype=torch.int32, device=device)
        return cls(None, cu_seqlens, S, (B, S), bounds)

    def remove(self, x: Tensor) -> Tensor:
        """(B, S, ...) -> (N, ...)"""
        flat = x.reshape(-1, *x.shape[2:])
        return flat if self.indices is None else flat.index_select(0, self.indices)

    def restore(self, x: Tensor) -> Tensor:
        """(N, ...) -> (B, S, ...), zeros at the padding"""
        B, S = self.shape
        if self.indices is not None:
            x = x.new_zeros(B * S, *x.shape[1:]).index_copy(0, self.indices, x)
        return x.view(B, S, *x.shape[1:])


def unpad(attention_mask: Tensor, lengths: list[int] | None = None, largest: int | None = None) -> Unpadded:
    """(B, S) 0/1 mask or packed document numbers -> the real tokens and their sequences.

    A row's tokens with the same nonzero number form one sequence (0/1 masks: the whole row); the
    numbers of one document must be contiguous in its row (padding between them is allowed).
    lengths (real tokens per row) and largest (the largest number; above 1: packed documents) are
    what BertModel already read with its input checks; without them, unpad reads them itself.
    """
    B, S = attention_mask.shape
    device = attention_mask.device
    if lengths is None:  # called on its own: a host read of what BertModel's one read holds
        *lengths, largest = torch.cat([(attention_mask != 0).sum(-1), attention_mask.max()[None].long()]).tolist()
    if largest is None:
        raise TypeError("unpad: give lengths and largest together (BertModel's one read), or neither")
    N = sum(lengths)
    indices = torch.nonzero_static(attention_mask.reshape(-1), size=N).view(-1)  # (N,): nonzero, no read
    if largest <= 1:  # one sequence per row with tokens: the lengths say where, nothing more is read
        bounds = [0, *accumulate(n for n in lengths if n)]
        cu_seqlens = torch.tensor(bounds, dtype=torch.int32).to(device, non_blocking=True)  # host -> device
    else:  # packed documents: where each starts is read, once, with the check that each is one run
        new, split = _document_runs(attention_mask, indices, largest)
        most = min(N, B * largest)  # sequences at most: one per (row, number), unless a number repeats
        offsets = torch.nonzero_static(new, size=most).view(-1)  # (most,) where they start among the N
        # a second host read, for packed documents only: how many there are, and their offsets
        n, at_split, *at = torch.cat([new.sum()[None], split[None], offsets]).tolist()
        _refuse_split(attention_mask, at_split)
        bounds = at[:n] + [N]
        cu_seqlens = torch.cat([offsets[:n], torch.full((1,), N, device=device)]).to(torch.int32)
    max_seqlen = max((b - a for a, b in zip(bounds, bounds[1:])), default=0)
    return Unpadded(indices, cu_seqlens, max_seqlen, (B, S), bounds)


def check_documents(attention_mask: Tensor, lengths: list[int], largest: int) -> None:
    """Refuse packed document numbers whose document is not one run in its row (1 1 2 2 1 1), as unpad does: the
    padded paths (sdpa, eager) take the same masks as varlen. One host read (packed masks only)."""
    N = sum(lengths)
    indices = torch.nonzero_static(attention_mask.reshape(-1), size=N).view(-1)
    _refuse_split(attention_mask, int(_document_runs(attention_mask, indices, largest)[1]))


def _document_runs(attention_mask: Tensor, indices: Tensor, largest: int) -> tuple[Tensor, Tensor]:
    """Packed documents among the real tokens at `indices` (N,) of the flattened (B * S) mask: (new, split).
    new (N,): True where a sequence starts (a number or a row changes; padding between is skipped);
    split (): the flat position of the first token that starts a document a second time in its row, B * S if
    none. Nothing is read."""
    B, S = attention_mask.shape
    number = attention_mask.reshape(-1).long()[indices]  # (N,) each real token's document number
    row = torch.div(indices, S, rounding_mode="floor")
    new = torch.ones_like(number, dtype=torch.bool)
    new[1:] = (number[1:] != number[:-1]) | (row[1:] != row[:-1])
    key = torch.where(new, row * (largest + 1) + number, -1)  # (row, number) of each start
    order = torch.sort(key, stable=True).indices  # equal keys stay in token order
    again = (key[order[1:]] == key[order[:-1]]) & (key[order[1:]] >= 0)  # a (row, number) that starts again
    later = torch.where(again, indices[order[1:]], B * S)
    return new, torch.cat([later, later.new_full((1,), B * S)]).min()


def _refuse_split(attention_mask: Tensor, at: int) -> None:
    B, S = attention_mask.shape
    if at < B * S:
        row, position = divmod(at, S)
        number = int(attention_mask[row, position])  # a read on the way to an error only
        raise InputError(
            f"attention_mask: row {row}, position {position}: packed document {number} starts again "
            "after another document; a document's tokens must be contiguous in their row (numbers "
            "like 1 1 2 2 0, not 1 1 2 2 1 1)"
        )


if not TYPE_CHECKING:  # old names, for one release
    __getattr__ = moved(
        __name__,
        {
            "equal_length_runs": "bertkit.grouping:equal_length_runs",
            "CALL_COST": "bertkit.grouping:CALL_COST",
            "cached_group_plan": "bertkit.grouping:cached_group_plan",
            "group_plan": "bertkit.grouping:group_plan",
        },
    )
