"""Where the real tokens of a padded batch are: removing padding, putting it back, packed documents.

    attention_mask (B, S): 0/1, or packed document numbers (1 1 2 2 2 0: 0 = padding)
      -> unpad(mask) -> Unpadded(indices (N,), cu_seqlens (n + 1,), max_seqlen, shape (B, S))
           .remove(x)   (B, S, ...) -> (N, ...)   the N real tokens, sequence after sequence
           .restore(x)  (N, ...) -> (B, S, ...)   zeros at the padding
      sequence i is rows cu_seqlens[i] : cu_seqlens[i+1] of the N tokens; 0/1 masks give one
      sequence per row, a packed mask one per document

    packed rows: is_packed(mask), document_keep(documents) (B, S, S), document_positions (B, S)

    bounds (cu_seqlens on the host) -> how the varlen fallback lays sequences out for SDPA calls:
      equal_length_runs(bounds)   runs of equal-length sequences: each run is a reshape, no copy
      group_plan(bounds, ...)     groups of similar length, each padded to its longest member

Only bookkeeping lives here: which rows hold which tokens. The attention over them is attention.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .errors import InputError


# ----- packed documents --------------------------------------------------------------------------
def is_packed(attention_mask: Tensor | None) -> bool:
    """A 2-D integer mask with values above 1 numbers documents packed into one row."""
    return (attention_mask is not None and attention_mask.dim() == 2 and not attention_mask.dtype.is_floating_point
            and attention_mask.numel() > 0 and bool(attention_mask.max() > 1))


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
@dataclass
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
    bounds: list[int]  # cu_seqlens on the host, read once per forward pass (not once per layer)

    @classmethod
    def full(cls, B: int, S: int, device) -> "Unpadded":
        bounds = list(range(0, (B + 1) * S, S))  # known without reading the device
        return cls(None, torch.tensor(bounds, dtype=torch.int32, device=device), S, (B, S), bounds)

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


def unpad(attention_mask: Tensor) -> Unpadded:
    """(B, S) 0/1 mask or packed document numbers -> the real tokens and their sequences.

    A row's tokens with the same nonzero number form one sequence (0/1 masks: the whole row); the
    numbers of one document must be contiguous in its row (padding between them is allowed).
    """
    B, S = attention_mask.shape
    flat = attention_mask.reshape(-1).long()
    indices = flat.nonzero().view(-1)  # (N,)
    doc = flat.index_select(0, indices)
    row = torch.div(indices, S, rounding_mode="floor")
    new = torch.ones_like(doc, dtype=torch.bool)
    new[1:] = (doc[1:] != doc[:-1]) | (row[1:] != row[:-1])
    starts = new.nonzero().view(-1)
    if doc.numel() and int(doc.max()) > 1:  # packed: each (row, number) must be one run
        if len(torch.unique(row * (int(doc.max()) + 1) + doc)) != starts.numel():
            raise InputError("attention_mask: a packed document's tokens must be contiguous in their row "
                             "(numbers like 1 1 2 2 0, not 1 2 1)")
    cu_seqlens = torch.cat([starts, starts.new_tensor([indices.numel()])]).to(torch.int32)
    bounds = cu_seqlens.tolist()  # the one host read, which max_seqlen needed anyway
    max_seqlen = max((b - a for a, b in zip(bounds, bounds[1:])), default=0)
    return Unpadded(indices, cu_seqlens, max_seqlen, (B, S), bounds)


# ----- laying sequences out for padded SDPA calls ------------------------------------------------
def equal_length_runs(bounds: list[int]) -> list[tuple[int, int, int]]:
    """Sequence offsets -> (first token, end token, how many sequences) per run of equal lengths."""
    runs: list[tuple[int, int, int]] = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b == a:
            continue
        if runs and (runs[-1][1] - runs[-1][0]) // runs[-1][2] == b - a and runs[-1][1] == a:
            runs[-1] = (runs[-1][0], b, runs[-1][2] + 1)
        else:
            runs.append((a, b, 1))
    return runs


# What one more SDPA call costs on a CPU, in units of one query-key pair of attention work: a group
# is split off only when the padding it saves is worth more than that (a small call, forward and
# backward, costs about as much as 64 x 64 pairs of work; see README "Speed").
CALL_COST = 64 * 64

_PLANS: dict = {}  # every layer of one forward pass (and its backward) uses the same plan


def cached_group_plan(bounds: tuple[int, ...], device, single: bool):
    """group_plan, computed once per (bounds, device, single) and reused by every layer."""
    if torch.compiler.is_compiling():
        return group_plan(bounds, device, single)
    key = (bounds, str(device), single)
    if key not in _PLANS:
        if len(_PLANS) >= 16:
            _PLANS.clear()
        with torch.inference_mode(False):  # plain tensors, usable by a later call that trains
            _PLANS[key] = group_plan(bounds, device, single)
    return _PLANS[key]


def group_plan(bounds: tuple[int, ...], device, single: bool = False):
    """Sequence offsets -> groups of sequences for padded SDPA calls: [(source, slots, keep, full)].

    Sequences sorted by length are cut into consecutive groups, chosen (dynamic programming) to
    minimise  calls x CALL_COST + sum over groups of (sequences x longest^2), the attention work
    padding included. source (T_g,): the group's token rows; slots (T_g,): their rows in the
    group's (n_g * L) padded layout; keep (n_g, L): True at real tokens; full: no padding in the
    group. A batch of equal lengths is [(None, None, keep, True)]. `single`: one group (CUDA, where a call
    costs little).
    """
    lengths = [b - a for a, b in zip(bounds[:-1], bounds[1:])]
    real = [i for i, n in enumerate(lengths) if n > 0]
    if real and all(lengths[i] == lengths[real[0]] for i in real) and len(real) == len(lengths):
        return [(None, None, torch.ones(len(lengths), lengths[0], dtype=torch.bool), True)]
    order = sorted(real, key=lambda i: lengths[i])
    n = len(order)
    best = [0.0] + [math.inf] * n  # best[j]: cost of grouping the j shortest sequences
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        longest = lengths[order[j - 1]] ** 2
        for i in ([0] if single else range(j)):  # group = order[i:j]
            cost = best[i] + CALL_COST + (j - i) * longest
            if cost < best[j]:
                best[j], cut[j] = cost, i
    spans, j = [], n
    while j > 0:
        spans.append((cut[j], j))
        j = cut[j]
    groups = []
    for i, j in reversed(spans):
        members = order[i:j]
        L = max(lengths[m] for m in members)
        source = torch.cat([torch.arange(bounds[m], bounds[m + 1]) for m in members])
        keep = torch.arange(L)[None, :] < torch.tensor([lengths[m] for m in members])[:, None]  # (n_g, L)
        slots = keep.reshape(-1).nonzero().view(-1)
        groups.append((source.to(device), slots.to(device), keep.to(device), bool(keep.all())))
    return groups
