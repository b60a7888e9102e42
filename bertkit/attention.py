"""Attention math, and only attention math: masks, relative-position scores, and the backends.

Every backend has one signature:

    backend(q, k, v, mask, *, dropout_p, scale=None, head_mask=None, position_scores=None)
        q: (B, heads, S, head_dim)   k, v: (B, heads, T, head_dim)   T = past + S (or encoder length)
        mask: additive float mask broadcastable to (B, heads, S, T), or None (all visible)
        position_scores: relative-position terms (B, heads, S, T) added to q k^T before scaling
        scale: None for BERT's 1 / sqrt(head_dim)
        -> context (B, heads, S, head_dim), probabilities (B, heads, S, T) or None

ModernBERT's layers add rotary positions (rotary_tables, rotate: q and k turned before the scores) and a local
window on some layers (window_mask); the backends are the same.

`eager` writes softmax(q k^T * scale + mask) v out by hand and returns the probabilities.
`sdpa` calls torch's fused scaled_dot_product_attention (flash / memory-efficient kernels) and
returns no probabilities. Features only `eager` can do (returning probabilities, head_mask,
relative position scores) make `padded_backend` choose eager.

The unpadded ("varlen") path has no batch dimension at all:

    varlen_attention(q, k, v, cu_seqlens, max_seqlen, *, dropout_p, bounds, layout)
        q, k, v: (N, heads, head_dim), the N real tokens of every sequence one after another
        cu_seqlens: (n + 1,) int32 offsets, sequence i is rows cu_seqlens[i] : cu_seqlens[i+1]
        -> context (N, heads, head_dim); no token attends outside its own sequence

Which of these runs is decided ONCE per forward pass, by BertModel, into an AttentionPath that
every layer reads:

    BertModel.forward --(inputs, the one host read)--> AttentionPath(backend, cross, tokens)
        backend "eager" | "sdpa"  -> BACKENDS[backend] on (B, heads, S, T), chosen by padded_backend
                "varlen"          -> varlen_attention on (N, heads, head_dim), as tokens.layout says
                                     (varlen_layout: "kernel" | "runs" | "groups")

padding.py says where those sequences are (padding.unpad turns an attention mask into the
offsets) and how the fallback lays them out for SDPA calls; the calls themselves are here. Called
by the model, nothing here reads from the device: every number the host needs comes with the
AttentionPath (a varlen_attention called on its own, without a layout, reads cu_seqlens itself).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from . import grouping, padding


def eager_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    *,
    dropout_p: float,
    scale: float | None = None,
    head_mask: Tensor | None = None,
    position_scores: tuple[Tensor, ...] | None = None,
) -> tuple[Tensor, Tensor]:
    scores = torch.matmul(q, k.transpose(-1, -2))  # (B, heads, S, T): one S x T score table per head
    for term in position_scores or ():
        scores = scores + term  # relative positions enter before scaling, as in BERT
    # dividing by sqrt(head_dim) (rather than multiplying by its inverse) keeps transformers' exact numbers
    scores = scores / math.sqrt(q.shape[-1]) if scale is None else scores * scale
    if mask is not None:
        scores = scores + mask  # masked keys get the dtype's most negative value
    probs = torch.softmax(scores, dim=-1)  # (B, heads, S, T), each row sums to 1
    if dropout_p > 0.0:
        probs = F.dropout(probs, p=dropout_p, training=True)
    if head_mask is not None:
        probs = probs * head_mask  # (1, heads, 1, 1): 0 silences a head
    return torch.matmul(probs, v), probs  # context (B, heads, S, head_dim)


def sdpa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    *,
    dropout_p: float,
    scale: float | None = None,
    head_mask: Tensor | None = None,
    position_scores: tuple[Tensor, ...] | None = None,
) -> tuple[Tensor, None]:
    if head_mask is not None or position_scores is not None:
        raise ValueError("sdpa attention takes no head_mask or position scores; padded_backend() chooses eager")
    if mask is not None and mask.dtype != q.dtype:
        # Under autocast q is bf16/fp16 while the mask was built in the parameters' dtype.
        mask = mask.clamp(min=torch.finfo(q.dtype).min).to(q.dtype)
    return sdpa(q, k, v, mask, dropout_p, scale), None


# On a GPU torch's SDPA picks cuDNN's attention for bf16 / fp16 where it can (Hopper: H100, H200), and cuDNN builds an
# execution plan for every new shape: 44 ms the first time a length is seen against 3 ms the second, for one text
# through a MiniLM-sized model in bf16 on an H200 (bench/gpu_hops.py, bench/results/gpu.md), so a server meeting new
# lengths at every request answered 24 texts/s. Without gradients on CUDA (inference) the flash and memory-efficient
# kernels, which take any shape with nothing to build, run instead; training keeps torch's choice.
ANY_SHAPE_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float, scale: float | None = None) -> Tensor:
    """torch's scaled_dot_product_attention, on the kernels that take any shape at no cost in inference on CUDA."""
    if q.is_cuda and not torch.is_grad_enabled():
        with sdpa_kernel(ANY_SHAPE_BACKENDS):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)


# name -> backend: (q, k, v, mask, *, dropout_p, scale, head_mask, position_scores) -> (context, probabilities or None)
BACKENDS: dict[str, Callable[..., tuple[Tensor, Tensor | None]]] = {"eager": eager_attention, "sdpa": sdpa_attention}


def padded_backend(implementation: str, *, need_probs: bool, head_mask: bool, relative: bool) -> str:
    """The padded backend for attn_implementation: eager where the call needs what only eager does
    (probabilities, head_mask, relative position scores); "varlen" and "auto" fall back to sdpa."""
    if need_probs or head_mask or relative:
        return "eager"
    return "sdpa" if implementation in ("varlen", "auto") else implementation


@dataclass(frozen=True)
class AttentionPath:
    """The attention of one forward pass: decided once by BertModel, read by every layer.

    backend: "eager" | "sdpa"  padded (B, heads, S, T) calls of BACKENDS[backend]
             "varlen"          unpadded (N, heads, head_dim) tokens; `tokens` says where the
                               sequences are and tokens.layout how attention runs over them
    cross:   the backend of cross-attention ("eager" | "sdpa"), in decoders that have it
    """

    backend: str
    cross: str | None = None
    tokens: padding.Unpadded | None = None


# ----- relative positions ------------------------------------------------------------------------
def relative_position_scores(
    q: Tensor, k: Tensor, distance_embedding: torch.nn.Embedding, kind: str, past_length: int
) -> tuple[Tensor, ...]:
    """Scores from the signed distance between query i and key j (Shaw et al.; Huang et al.).

    Query rows are absolute positions past_length .. past_length+S-1 and key columns 0 .. T-1, so a
    cached decoding step gives exactly the numbers of the full pass. (transformers 4.57 puts every
    query of a cached call at position T-1, which is only right when S == 1.)
    """
    max_positions = (distance_embedding.num_embeddings + 1) // 2
    S, T = q.shape[2], k.shape[2]
    rows = torch.arange(past_length, past_length + S, dtype=torch.long, device=q.device).view(-1, 1)
    cols = torch.arange(T, dtype=torch.long, device=q.device).view(1, -1)
    distance = rows - cols  # (S, T), in (-max_positions, max_positions)
    table = distance_embedding(distance + max_positions - 1).to(q.dtype)  # (S, T, head_dim)
    terms: tuple[Tensor, ...] = (torch.einsum("bhsd,std->bhst", q, table),)  # query . distance, (B, heads, S, T)
    if kind == "relative_key_query":
        terms += (torch.einsum("bhtd,std->bhst", k, table),)  # key . distance
    return terms  # added to the scores one by one, in transformers' order


# ----- masks -------------------------------------------------------------------------------------
def to_additive(keep: Tensor, dtype: torch.dtype) -> Tensor:
    """1 = attend, 0 = ignore  ->  0 and the dtype's most negative value."""
    return (1.0 - keep.to(dtype)) * torch.finfo(dtype).min


def self_attention_mask(attention_mask: Tensor, seq_len: int, causal: bool, dtype: torch.dtype) -> Tensor:
    """The additive self-attention mask all layers share.

    attention_mask (B, T) with T = past + S, or (B, S, T) -> (B, 1, 1, T) or (B, 1, S, T).
    A decoder (causal) may not look at later positions: query i sees keys 0 .. past + i.
    """
    if attention_mask.dim() == 3:
        return to_additive(attention_mask[:, None, :, :], dtype)
    B, T = attention_mask.shape
    if not causal:
        return to_additive(attention_mask[:, None, None, :], dtype)
    past = T - seq_len
    q_pos = torch.arange(past, T, device=attention_mask.device).view(-1, 1)  # (S, 1)
    k_pos = torch.arange(T, device=attention_mask.device).view(1, -1)  # (1, T)
    causal_keep = (k_pos <= q_pos).to(attention_mask.dtype)  # (S, T)
    return to_additive(causal_keep[None, None] * attention_mask[:, None, None, :], dtype)  # (B, 1, S, T)


def cross_attention_mask(encoder_attention_mask: Tensor, dtype: torch.dtype) -> Tensor:
    """(B, T_enc) or (B, S, T_enc) -> additive (B, 1, 1, T_enc) or (B, 1, S, T_enc)."""
    if encoder_attention_mask.dim() == 3:
        return to_additive(encoder_attention_mask[:, None, :, :], dtype)
    return to_additive(encoder_attention_mask[:, None, None, :], dtype)


def window_mask(attention_mask: Tensor, window: int, dtype: torch.dtype) -> Tensor:
    """ModernBERT's local layers: the additive (B, 1, S, S) self-attention mask of `attention_mask` (B, S) where
    query i also ignores every key j with |i - j| > window // 2 (transformers' sliding_window_mask)."""
    near = _near(attention_mask.shape[1], window, attention_mask.device)  # (S, S)
    return to_additive(attention_mask[:, None, None, :].bool() & near[None, None], dtype)  # (B, 1, S, S)


# ----- rotary positions (ModernBERT) -----------------------------------------------------------------
def rotary_tables(position_ids: Tensor, head_dim: int, theta: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos and sin (B, S, head_dim) of rotary positions (Su et al. 2021) at `position_ids` (B or 1, S), frequency
    theta^(-2i / head_dim) for pair i, in float32 as transformers computes them (NeoX layout: the two halves of a
    head are the pairs' two coordinates)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=position_ids.device).float() / head_dim
    inv_freq = 1.0 / (theta**exponents)  # (head_dim / 2,)
    freqs = position_ids[..., None].float() * inv_freq  # (B, S, head_dim / 2)
    angles = torch.cat((freqs, freqs), dim=-1)  # (B, S, head_dim)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, heads, S, head_dim) turned by its positions' angles: x cos + rotate_half(x) sin, cos / sin (B, S, D)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)  # rotate_half: (-x2, x1)
    return x * cos[:, None] + rotated * sin[:, None]


# ----- the unpadded (varlen) path ----------------------------------------------------------------
def _varlen_kernel() -> Callable[..., Tensor] | None:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:  # torch without it
        return None
    # typed Tensor | tuple: the tuple only with return_aux, which varlen_attention never passes
    return cast("Callable[..., Tensor]", varlen_attn)


def varlen_layout(
    bounds: list[int],
    *,
    device: torch.device | str,
    dtype: torch.dtype,
    dropout_p: float,
    grad: bool,
    windowed: bool = False,
) -> padding.Layout:
    """How varlen_attention runs, for one forward pass (dtype: what q will be, autocast included).

    On CUDA in bf16/fp16 without attention dropout: torch's variable-length flash kernel. Otherwise
    SDPA itself: without gradients on a CPU, once per run of equal-length sequences (views, no
    copies: a call costs little there); when training, on groups of sequences of similar length,
    each padded to its longest member (`grouping.group_plan`: a call with its backward costs about
    as much as grouping.CALL_COST query-key pairs of work); on CUDA, as one padded call. A batch
    without padding is one call in every case. Only Python ints are looked at: no device read.
    windowed: some layers attend within a window (ModernBERT): the kernel only where torch's takes window_size.
    """
    cuda = torch.device(device).type == "cuda"
    kernel = _varlen_kernel()
    fits = kernel is not None and (not windowed or "window_size" in inspect.signature(kernel).parameters)
    if cuda and dtype in (torch.float16, torch.bfloat16) and dropout_p == 0.0 and fits:
        return padding.Layout("kernel")
    if not cuda and not grad:
        return padding.Layout("runs", tuple(grouping.equal_length_runs(bounds)))
    return padding.Layout("groups", tuple(grouping.cached_group_plan(tuple(bounds), device, cuda)))


def varlen_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens: Tensor,
    max_seqlen: int,
    *,
    dropout_p: float,
    bounds: list[int] | None = None,
    layout: padding.Layout | None = None,
    window: int | None = None,
) -> Tensor:
    """Attention within each sequence of an unpadded batch; q, k, v (N, heads, head_dim). window: token i sees only
    the keys j of its sequence with |i - j| <= window // 2 (ModernBERT's local layers); None: all of them.

    Runs as `layout` says (varlen_layout, chosen once per forward pass by BertModel). A call
    without one (on its own, outside a model) chooses it here by the same rule, reading
    cu_seqlens to the host unless `bounds` holds them.
    """
    if layout is None:
        bounds = cu_seqlens.tolist() if bounds is None else bounds  # a call on its own: its own host read
        layout = varlen_layout(
            bounds,
            device=q.device,
            dtype=q.dtype,
            dropout_p=dropout_p,
            grad=q.requires_grad and torch.is_grad_enabled(),
            windowed=window is not None,
        )
    if layout.how == "kernel":
        kernel = _varlen_kernel()
        assert kernel is not None, "varlen_layout chooses the kernel only where torch has it"
        sides = {} if window is None else {"window_size": (window // 2, window // 2)}
        return kernel(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, **sides)
    if layout.how == "runs":
        return _per_run_attention(q, k, v, layout.plan, dropout_p, window)
    groups = layout.plan
    if len(groups) == 1 and groups[0][0] is None:  # every sequence the same length: a reshape, one call
        n = groups[0][2].shape[0]

        def heads(x: Tensor) -> Tensor:  # (n * L, heads, d) -> (n, heads, L, d)
            return x.view(n, x.shape[0] // n, *x.shape[1:]).transpose(1, 2)

        mask = band(q.shape[0] // n, window, q)
        context = sdpa(heads(q), heads(k), heads(v), mask, dropout_p)
        return context.transpose(1, 2).reshape(q.shape)
    sources, contexts = [], []
    for source, slots, keep, full in groups:  # source: the group's token rows; slots: their places in (n_g * L)
        n_g, L = keep.shape

        # (N, heads, d) -> (n_g, heads, L, d), zeros at padding
        def pad(x: Tensor, source: Tensor = source, slots: Tensor = slots, n_g: int = n_g, L: int = L) -> Tensor:
            return (
                x.new_zeros(n_g * L, *x.shape[1:])
                .index_copy(0, slots, x.index_select(0, source))
                .view(n_g, L, *x.shape[1:])
                .transpose(1, 2)
            )

        mask = None if full else keep[:, None, None, :]  # (n_g, 1, 1, L): keys that are real
        if window is not None and window // 2 < L - 1:  # and near: additive, so a padded query's row stays finite
            near = _near(L, window, q.device)[None, None]  # (1, 1, L, L)
            mask = to_additive(near & keep[:, None, None, :] if not full else near, q.dtype)
        context = sdpa(pad(q), pad(k), pad(v), mask, dropout_p)
        contexts.append(context.transpose(1, 2).reshape(n_g * L, *q.shape[1:]).index_select(0, slots))
        sources.append(source)
    if not sources:
        return q
    return q.new_empty(q.shape).index_copy(0, torch.cat(sources), torch.cat(contexts))


def _per_run_attention(
    q: Tensor, k: Tensor, v: Tensor, runs: Sequence[tuple[int, int, int]], dropout_p: float, window: int | None = None
) -> Tensor:
    out = []
    for start, end, n in runs:  # n sequences of equal length (grouping.equal_length_runs): one batched call
        # (n * L, heads, d) -> (n, heads, L, d)
        def heads(x: Tensor, start: int = start, end: int = end, n: int = n) -> Tensor:
            return x[start:end].view(n, (end - start) // n, *x.shape[1:]).transpose(1, 2)

        mask = band((end - start) // n, window, q)
        context = sdpa(heads(q), heads(k), heads(v), mask, dropout_p)
        out.append(context.transpose(1, 2).reshape(end - start, *q.shape[1:]))
    return torch.cat(out) if len(out) > 1 else out[0] if out else q


def band(L: int, window: int | None, like: Tensor) -> Tensor | None:
    """The additive (L, L) mask of a window over sequences of length L (|i - j| <= window // 2), in like's dtype and
    device; None without a window or where the window holds the whole sequence."""
    if window is None or window // 2 >= L - 1:
        return None
    return to_additive(_near(L, window, like.device), like.dtype)


def _near(L: int, window: int, device: torch.device) -> Tensor:
    """(L, L) bool: key j is within query i's window (|i - j| <= window // 2)."""
    positions = torch.arange(L, device=device)
    return (positions[None, :] - positions[:, None]).abs() <= window // 2
