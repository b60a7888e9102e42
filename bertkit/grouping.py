"""How attention's varlen fallback lays sequences out for SDPA calls: one batched call per run of equal
lengths, or groups of similar length chosen by what a call costs against the padding it saves.

    bounds (cu_seqlens on the host, Python ints)
      -> equal_length_runs(bounds)        [(start, end, n)]: runs of n equal-length sequences, each a reshape
      -> group_plan(bounds, device, ...)  [(source, slots, keep, full)]: groups padded to their longest member
         cached_group_plan(...)           the same, built once per (bounds, device, single) and reused

attention.varlen_layout chooses between them once per forward pass; padding.py says where the tokens are.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

# one group of group_plan: (source, slots, keep, full); source and slots are None when every sequence has one length
Group = tuple[Tensor | None, Tensor | None, Tensor, bool]


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

_PLANS: dict[
    tuple[tuple[int, ...], str, bool], list[Group]
] = {}  # a plan is built once per (bounds, device, single) and reused by later batches


def cached_group_plan(bounds: tuple[int, ...], device: torch.device | str, single: bool) -> list[Group]:
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


def group_plan(bounds: tuple[int, ...], device: torch.device | str, single: bool = False) -> list[Group]:
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
    spans: list[tuple[int, int]] = []
    j = n
    while j > 0:
        spans.append((cut[j], j))
        j = cut[j]
    groups: list[Group] = []
    for i, j in reversed(spans):
        members = order[i:j]
        L = max(lengths[m] for m in members)
        source = torch.cat([torch.arange(bounds[m], bounds[m + 1]) for m in members])
        keep = torch.arange(L)[None, :] < torch.tensor([lengths[m] for m in members])[:, None]  # (n_g, L)
        slots = torch.cat([torch.arange(g * L, g * L + lengths[m]) for g, m in enumerate(members)])  # keep's Trues
        full = all(lengths[m] == L for m in members)
        source, slots, keep = (t.to(device, non_blocking=True) for t in (source, slots, keep))
        groups.append((source, slots, keep, full))
    return groups
