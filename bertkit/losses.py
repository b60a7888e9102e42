"""Losses for embedding models and rerankers: pure functions on embeddings or logits, no model inside.

Each one computes exactly what sentence-transformers (ST) 5.7 computes, so a model trained here learns what it
would learn there (tests/tasks/test_losses.py compares loss and gradients with ST's own loss classes):

    bi-encoders (embeddings, (B, H) per column)            cross-encoders (logits, one score per pair)
    multiple_negatives_ranking  ST MultipleNegativesRanking binary_cross_entropy   ST BinaryCrossEntropyLoss
    cosent                      ST CoSENTLoss               cross_encoder_ranking  ST cross_encoder MultipleNegatives...
    matryoshka (wraps another)  ST MatryoshkaLoss           listnet                ST ListNetLoss
                                                            in_batch_negatives     which documents pair with a query

Under torch.distributed, `multiple_negatives_ranking(..., gather=True)` ranks every anchor against the candidates of
all ranks (gather_with_grad keeps the gradient path back to the rank that embedded them), as ST's
gather_across_devices. The cached (GradCache) variant lives in bertkit/gradcache.py and calls these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from bertkit.errors import ConfigError, InputError

__all__ = [
    "binary_cross_entropy",
    "cosent",
    "cosine_matrix",
    "cross_encoder_ranking",
    "gather_with_grad",
    "in_batch_negatives",
    "listnet",
    "matryoshka",
    "multiple_negatives_ranking",
]


# ----- helpers ------------------------------------------------------------------------------------
def cosine_matrix(a: Tensor, b: Tensor) -> Tensor:
    """(N, H), (M, H) -> (N, M) cosine similarities, as ST's util.cos_sim (L2-normalise, then a matrix product)."""
    return F.normalize(a, p=2, dim=1) @ F.normalize(b, p=2, dim=1).T


def gather_with_grad(t: Tensor) -> Tensor:
    """(B, ...) on each rank -> (world * B, ...): every rank's rows in rank order, rank r's at r * B.

    The gradient flows back to the rank that computed each row (torch.distributed.nn's all_gather: its backward sums
    what every rank's loss puts on those rows). Without an initialised process group (one process) `t` itself."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return t
    import torch.distributed.nn.functional as dist_fn  # loads only where a process group runs

    return torch.cat(dist_fn.all_gather(t), dim=0)


def _rank() -> int:
    """This process's rank; 0 without a process group."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _check_columns(name: str, columns: Sequence[Tensor]) -> None:
    """Every column is (B, H) with the same B and H, else an InputError naming the loss and the shapes."""
    shapes = [tuple(c.shape) for c in columns]
    if any(len(s) != 2 for s in shapes) or len(set(shapes)) != 1:
        raise InputError(f"{name}: every column of embeddings must be (B, H) with the same B and H; got {shapes[:8]}")


# ----- bi-encoder losses --------------------------------------------------------------------------
def multiple_negatives_ranking(
    anchors: Tensor,
    candidates: Sequence[Tensor],
    *,
    scale: float = 20.0,
    symmetric: bool = False,
    gather: bool = False,
) -> Tensor:
    """In-batch negatives (InfoNCE): each anchor must score its own positive above every other candidate.

    anchors (B, H); candidates: positives (B, H), then any hard-negative columns (B, H) each. The candidate pool is
    cat(candidates) column by column (all B positives, then all B first negatives, ...), so every positive and hard
    negative of the batch is a candidate for every anchor. S = scale * cos, loss = mean_i [logsumexp_j S_ij - S_ii].

    symmetric: also rank each positive against all anchors and average the two log-partitions (ST's
    directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction"):
    loss = mean_i [(logsumexp_j S_ij + logsumexp_j S'_ij) / 2 - S_ii], S'_ij = scale * cos(positive_i, anchor_j).
    gather: under torch.distributed, anchors and candidates of all ranks are gathered with gradients; this rank's
    anchors (rows rank * B ...) rank against all candidates; the loss is the mean over this rank's rows.
    -> scalar."""
    if not candidates:
        raise InputError("multiple_negatives_ranking: no candidates; pass the positives column (then any negatives)")
    _check_columns("multiple_negatives_ranking", [anchors, *candidates])
    batch = anchors.size(0)
    offset = 0
    if gather:
        anchors = gather_with_grad(anchors)
        candidates = [gather_with_grad(c) for c in candidates]
        offset = _rank() * batch
    if anchors.size(0) * len(candidates) < 2:
        raise InputError(
            "multiple_negatives_ranking: a batch of 1 pair has no negative to rank against (the loss is 0); "
            "use a batch size of 2 or more, or add hard-negative columns"
        )
    local = torch.arange(offset, offset + batch, device=anchors.device)
    rows = torch.arange(batch, device=anchors.device)
    scores = cosine_matrix(anchors[local], torch.cat(list(candidates), dim=0)) * scale  # (B, world B * columns)
    positive = scores[rows, local]  # (B,)
    log_z = torch.logsumexp(scores, dim=1)
    if symmetric:
        backward_scores = cosine_matrix(anchors, candidates[0][local]).T * scale  # (B, world B): positive vs anchors
        log_z = (log_z + torch.logsumexp(backward_scores, dim=1)) / 2
    return -(positive - log_z).mean()


def cosent(u: Tensor, v: Tensor, labels: Tensor, *, scale: float = 20.0) -> Tensor:
    """CoSENT: pairs with a higher label must have a higher cosine than pairs with a lower one.

    u, v (B, H) the two sides of each pair; labels (B,) any ordered scores. s_i = scale * cos(u_i, v_i);
    loss = log(1 + sum over (i, j) with label_i < label_j of exp(s_i - s_j)) -> scalar (0 where all labels tie)."""
    _check_columns("cosent", [u, v])
    if labels.shape != (u.size(0),):
        raise InputError(f"cosent: labels must be (B,) = ({u.size(0)},); got {tuple(labels.shape)}")
    if u.size(0) < 2:
        raise InputError(
            "cosent: a batch of 1 pair has nothing to order (the loss is 0); use a batch size of 2 or more"
        )
    s = (F.normalize(u, p=2, dim=1) * F.normalize(v, p=2, dim=1)).sum(dim=-1) * scale  # (B,)
    diff = s[:, None] - s[None, :]  # (B, B): s_i - s_j
    lower = (labels[:, None] < labels[None, :]).to(diff.dtype)  # pair (i, j) counts where label_i < label_j
    diff = diff - (1 - lower) * 1e12  # other pairs vanish after exp(), as ST masks them
    return torch.logsumexp(torch.cat((diff.new_zeros(1), diff.reshape(-1))), dim=0)


def matryoshka(
    loss: Callable[[list[Tensor]], Tensor],
    columns: list[Tensor],
    dims: Sequence[int],
    weights: Sequence[float] | None = None,
) -> Tensor:
    """The same loss at several leading sizes of the embeddings, so that truncated embeddings work too.

    columns: the embedding columns (N, H) the inner loss takes; dims: sizes to train, each in 1..H; weights: one
    per dim (default 1). For each dim, largest first: truncate every column to its first dim values, L2-normalise,
    and call `loss` on them; return sum_k weights_k * loss_k -> scalar (ST's MatryoshkaLoss)."""
    size = columns[0].size(-1) if columns else 0
    _check_dims(dims, weights, size)
    pairs = sorted(zip(dims, weights if weights is not None else [1.0] * len(dims)), key=lambda p: p[0], reverse=True)
    total: Tensor | float = 0.0
    for dim, weight in pairs:
        total = total + weight * loss([F.normalize(c[..., :dim], p=2, dim=-1) for c in columns])
    assert isinstance(total, Tensor)  # dims is not empty (_check_dims)
    return total


def _check_dims(dims: Sequence[int], weights: Sequence[float] | None, size: int) -> None:
    """Matryoshka dims are distinct integers in 1..size, with one weight each, else a ConfigError."""
    where = "matryoshka dims"
    if len(dims) == 0:
        raise ConfigError(f"{where}: none given; list one or more embedding sizes, e.g. {size} {size // 2}")
    if any(isinstance(d, bool) or not isinstance(d, int) or not 0 < d <= size for d in dims):
        raise ConfigError(f"{where} {list(dims)[:16]}: each must be an integer in 1..{size} (the embedding size)")
    if len(set(dims)) != len(dims):
        raise ConfigError(f"{where} {list(dims)[:16]}: a size is listed twice; list each size once")
    if weights is not None and len(weights) != len(dims):
        raise ConfigError(f"{where}: {len(dims)} sizes but {len(weights)} weights; give one weight per size")


# ----- cross-encoder losses -----------------------------------------------------------------------
def binary_cross_entropy(logits: Tensor, labels: Tensor, *, pos_weight: Tensor | None = None) -> Tensor:
    """logits (B,) one score per (query, document) pair, labels (B,) in [0, 1] -> scalar: the mean of
    BCE(sigmoid(logit), label) (ST's cross-encoder BinaryCrossEntropyLoss, num_labels 1)."""
    if logits.dim() != 1 or labels.shape != logits.shape:
        raise InputError(
            f"binary_cross_entropy: logits and labels must both be (B,); "
            f"got {tuple(logits.shape)}, {tuple(labels.shape)}"
        )
    return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), pos_weight=pos_weight)


def listnet(logits: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
    """ListNet: the cross-entropy between softmax(labels) and softmax(logits) over each query's documents.

    logits, labels (B, n): one score and one relevance label per (query, document); mask (B, n) True where a real
    document sits (lists of unequal length are padded). As ST pads: a padded logit is -1e16 and a padded label
    -inf, so padding takes no probability on either side. -> scalar, the mean over queries."""
    if logits.dim() != 2 or labels.shape != logits.shape or mask.shape != logits.shape:
        raise InputError(
            f"listnet: logits, labels and mask must all be (B, n); got {tuple(logits.shape)}, "
            f"{tuple(labels.shape)}, {tuple(mask.shape)}"
        )
    real = mask.bool()
    if not bool(real.any(dim=1).all()):
        raise InputError("listnet: a query has no document (its mask row is all False); drop it or give it one")
    logits = logits.masked_fill(~real, -1e16)
    target = labels.to(logits.dtype).masked_fill(~real, float("-inf")).softmax(dim=1)
    return F.cross_entropy(logits, target)


def cross_encoder_ranking(logits: Tensor, *, scale: float = 10.0, sigmoid: bool = True) -> Tensor:
    """Multiple-negatives ranking for cross-encoders: each query's positive must outscore its negatives.

    logits (B, 1 + n): column 0 the (query, positive) score, then the n negatives (in-batch, then hard). Each
    logit goes through the sigmoid (ST's default activation) and times scale, then cross-entropy with target
    column 0 -> scalar (ST's cross_encoder MultipleNegativesRankingLoss.calculate_loss)."""
    if logits.dim() != 2 or logits.size(1) < 2:
        raise InputError(
            f"cross_encoder_ranking: logits must be (B, 1 + n) with n >= 1 negatives; got {tuple(logits.shape)}"
        )
    if sigmoid:
        logits = torch.sigmoid(logits)
    targets = torch.zeros(logits.size(0), dtype=torch.long, device=logits.device)
    return F.cross_entropy(logits * scale, targets)


def in_batch_negatives(
    batch_size: int, columns: int = 1, num_negatives: int | None = 4, *, generator: torch.Generator | None = None
) -> Tensor:
    """Which in-batch documents serve as negatives of each query, for cross_encoder_ranking.

    The batch's documents are `columns` columns of batch_size (positives, then hard negatives), numbered column by
    column: document c * batch_size + j is row j of column c. A query's own documents (row i of every column) are
    never its negatives. num_negatives None, or at least the number available: all the others, in order
    (deterministic); else that many drawn at random without replacement per query (torch.multinomial with
    `generator`; the global RNG without one, as ST). -> (batch_size, k) LongTensor of document numbers."""
    available = (batch_size - 1) * columns
    if available < 1:
        raise InputError(
            f"in_batch_negatives: a batch of {batch_size} with {columns} document column(s) has no in-batch "
            "negative; use a batch size of 2 or more"
        )
    if num_negatives is not None and num_negatives < 1:
        raise ConfigError(f"in_batch_negatives: num_negatives must be 1 or more (or None for all); got {num_negatives}")
    others = ~torch.eye(batch_size, dtype=torch.bool).repeat(1, columns)  # (B, B * columns)
    if num_negatives is not None and num_negatives < available:
        return torch.multinomial(others.float(), num_negatives, generator=generator)
    return torch.arange(batch_size * columns).repeat(batch_size, 1)[others].reshape(batch_size, -1)
