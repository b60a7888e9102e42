"""GradCache: an in-batch-negatives loss over a batch far larger than the activations memory holds.

In-batch losses (losses.multiple_negatives_ranking) get better with more negatives, but a batch of B texts keeps B
texts' activations alive until backward. GradCache (Gao et al. 2021; ST's CachedMultipleNegativesRankingLoss) cuts
the batch into parts and pays one extra forward pass:

    (1) embed every part, noting the RNG state before each; keep the (b, H) embeddings, drop each part's graph
    (2) the loss on all embeddings at once; backward to the embeddings only    -> d loss / d embedding, cached
    (3) later, when the training loop calls loss.backward(g): for each part, replay its RNG state (same dropout
        masks) and the autocast of (1), embed it again with a graph, back-propagate dot(embedding, cached
        gradient * g), free the graph

Only one part's activations are alive at a time, so memory stays flat in the batch size, and the parameter
gradients equal the uncached loss's up to rounding. Step (3) runs from a hook on the returned loss tensor, so
whatever scales the loss on its way back (an fp16 GradScaler, gradient accumulation's 1 / steps) scales every part.

Step (1) runs without gradients, as ST's does: a model in training mode must compute the same way with and without
them (bertkit's BertModel does: it takes its training attention layout either way, the same numbers and dropout
masks).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import Tensor

from bertkit.errors import ConfigError, InputError

Part = TypeVar("Part")

__all__ = ["RngState", "cached_loss", "split_features"]


@dataclass(frozen=True)
class RngState:
    """The random generators' states before a part was embedded: the CPU's, and every CUDA device's (empty without
    CUDA), so the second pass draws the same dropout masks."""

    cpu: Tensor
    cuda: list[Tensor]

    @staticmethod
    def now() -> RngState:
        """The current states."""
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
        return RngState(torch.get_rng_state(), list(cuda))

    @contextlib.contextmanager
    def replayed(self) -> Iterator[None]:
        """Inside: the generators start from this state. After: they are back where they were before."""
        with torch.random.fork_rng(devices=list(range(len(self.cuda)))):
            torch.set_rng_state(self.cpu)
            if self.cuda:
                torch.cuda.set_rng_state_all(self.cuda)
            yield


def cached_loss(
    embed: Callable[[Part], Tensor],
    columns: Sequence[Sequence[Part]],
    loss_on: Callable[[list[Tensor]], Tensor],
) -> Tensor:
    """The loss `loss_on` would give on all embeddings, computed part by part with cached gradients (GradCache).

    columns: the batch's input columns (anchors, positives, hard negatives ...), each cut into parts (whatever
    `embed` takes: a dict of features of b rows, say); embed(part) -> (b, H) embeddings, run under autograd; loss_on
    takes one (N, H) tensor per column (its parts' embeddings concatenated) -> a scalar (e.g. a lambda around
    losses.multiple_negatives_ranking; it may call matryoshka or gather across ranks). loss_on must not hold trainable
    parameters of its own: only the embeddings get gradients.

    -> a scalar loss tensor. With gradients on, calling .backward() on it (or on anything computed from it)
    re-embeds each part with its RNG state replayed and accumulates the parameter gradients into .grad; the
    gradient it receives (a GradScaler's scale, say) multiplies every part's. With gradients off (evaluation) it is
    simply loss_on of the embeddings."""
    if not columns or any(len(parts) == 0 for parts in columns):
        raise InputError("cached_loss: every column needs at least one part; got an empty column or no column")
    grad_on = torch.is_grad_enabled()
    reps: list[list[Tensor]] = []
    states: list[list[RngState]] = []
    for parts in columns:  # step (1): RNG state noted before each part; the embeddings, without a graph
        reps.append([])
        states.append([])
        for part in parts:
            states[-1].append(RngState.now())
            with torch.no_grad():
                reps[-1].append(embed(part).requires_grad_(grad_on))
    if not grad_on:
        return loss_on([torch.cat(r) for r in reps])
    flat = [r for column in reps for r in column]
    loss = loss_on([torch.cat(r) for r in reps])  # step (2): the loss on the whole batch
    grads = torch.autograd.grad(loss, flat, allow_unused=True)
    if any(g is None for g in grads):  # typed Tensor, None where allow_unused found no use
        raise InputError("cached_loss: loss_on did not use every column's embeddings; drop the unused column")
    cached = iter(grads)
    cache = [[next(cached) for _ in column] for column in reps]
    out = loss.detach().requires_grad_()
    casts = _autocasts()  # step (3) runs inside backward, outside the caller's autocast: it re-enters it
    out.register_hook(lambda grad_out: _replay(embed, columns, states, cache, casts, grad_out))
    return out


def _replay(
    embed: Callable[[Part], Tensor],
    columns: Sequence[Sequence[Part]],
    states: list[list[RngState]],
    cache: list[list[Tensor]],
    casts: list[tuple[str, torch.dtype]],
    grad_out: Tensor,
) -> None:
    """Step (3): embed each part again with its RNG state and step (1)'s autocast replayed, and back-propagate
    dot(embedding, cached gradient * grad_out), one part's graph at a time."""
    with torch.enable_grad():
        for parts, part_states, part_grads in zip(columns, states, cache):
            for part, state, grad in zip(parts, part_states, part_grads):
                with state.replayed(), contextlib.ExitStack() as stack:
                    for device_type, dtype in casts:
                        stack.enter_context(torch.autocast(device_type, dtype=dtype))
                    rep = embed(part)
                # fp32 surrogate: under autocast the cached gradient may be half precision
                surrogate = torch.dot(rep.flatten().float(), grad.flatten().float()) * grad_out
                surrogate.backward()
                del rep, surrogate  # this part's graph is gone before the next part is embedded


def _autocasts() -> list[tuple[str, torch.dtype]]:
    """The autocast regions the caller is in: (device type, dtype) of each enabled one."""
    return [(d, torch.get_autocast_dtype(d)) for d in ("cpu", "cuda") if torch.is_autocast_enabled(d)]


def split_features(features: Mapping[str, Tensor], size: int) -> list[dict[str, Tensor]]:
    """A batch of features ({name: (B, ...)}, e.g. input_ids, attention_mask) -> parts of `size` rows (the last
    may be shorter). Where an attention_mask (B, S) is given, a part drops the padding columns at the end that all
    its rows share, so that short rows are not embedded at the batch's full width (as ST does)."""
    if size < 1:
        raise ConfigError(f"mini-batch size must be 1 or more; got {size}")
    rows = next(iter(features.values())).size(0) if features else 0
    mask = features.get("attention_mask")
    parts = []
    for begin in range(0, rows, size):
        end = min(begin + size, rows)
        width: int | None = None
        if mask is not None and mask.dim() == 2 and bool(mask[begin:end].any()):
            width = int(mask[begin:end].any(dim=0).nonzero().max()) + 1
        parts.append({k: _rows(v, begin, end, width, mask) for k, v in features.items()})
    return parts


def _rows(value: Tensor, begin: int, end: int, width: int | None, mask: Tensor | None) -> Tensor:
    """Rows begin:end of one feature, cut to `width` columns where it is laid out like the mask (B, S, ...)."""
    if width is not None and mask is not None and value.dim() >= 2 and value.size(1) == mask.size(1):
        return value[begin:end, :width]
    return value[begin:end]
