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

    bounds -> how the varlen fallback lays sequences out for SDPA calls (a Layout, chosen once per
    forward pass by attention.varlen_layout):
      equal_length_runs(bounds)   runs of equal-length sequences: each run is a reshape, no copy
      group_plan(bounds, ...)     groups of similar length, each padded to its longest member

Host reads: the tokens per row and the mask's largest number come with BertModel's one read of its
inputs; unpad reads nothing more for a 0/1 mask, and once more (the document offsets) for packed
documents. Everything after that is Python ints: bounds, layouts and plans read nothing.

Only bookkeeping lives here: which rows hold which tokens. The attention over them is attention.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import accumulate

import torch
from torch import Tensor

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
    def full(cls, B: int, S: int, device) -> Unpadded:
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

_PLANS: dict = {}  # a plan is built once per (bounds, device, single) and reused by later batches


def cached_group_plan(bounds: tuple[int, ...], device, single: bool):
    """group_plan, computed once per (bounds, device, single) and reused by later forward passes."""
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
    costs little). Built on the host from Python ints (nothing is read from the device) and copied
    over without waiting.
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
        for i in [0] if single else range(j):  # group = order[i:j]
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
        slots = torch.cat([torch.arange(g * L, g * L + lengths[m]) for g, m in enumerate(members)])  # keep's Trues
        full = all(lengths[m] == L for m in members)
        groups.append(tuple(t.to(device, non_blocking=True) for t in (source, slots, keep)) + (full,))
    return groups
