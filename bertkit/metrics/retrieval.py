"""Scores of retrieval and reranking, equal to sentence-transformers' evaluators (tests/tasks/test_retrieval_metrics.py
checks them against sentence-transformers 5.7 and scikit-learn):

    information_retrieval  queries against a corpus by embedding similarity: accuracy@k, precision@k, recall@k,
                           MRR@k, NDCG@k, MAP@k, keyed cosine_accuracy@1, ..., cosine_map@100
                           (InformationRetrievalEvaluator's)
    ranking_metrics        the same scores of ranked lists from any ranker (BM25, a reranker, ...)
    top_k_search           the exact top k of a corpus per query, in corpus chunks (memory: queries x chunk)
    reranking_metrics      MAP, MRR@k, NDCG@k of scored candidate lists (CrossEncoderRerankingEvaluator's)

    embeddings --top_k_search--> ranked corpus ids per query --ranking_metrics--> {score_name}_{metric}@{k}

Ties: a ranking orders by score, then by corpus id (ascending, as Python compares strings), so a result never
depends on the chunk size; this is sentence-transformers 6's rule (5.x leaves tied documents in torch.topk's
order). Retrieval scores are means over the queries with at least one relevant document (the others are left
out, as the evaluator does); MAP@k divides by min(k, relevant documents) as the evaluator does (trec_eval divides
by all relevant documents). Reranking scores are means over every sample: one without a positive scores 0.
torch loads when top_k_search (or information_retrieval) runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .common import MetricError

if TYPE_CHECKING:
    from torch import Tensor

SCORE_NAMES = ("cosine", "dot", "euclidean", "manhattan")  # sentence-transformers' similarity_fn_name values


def _shown(value: Any, width: int = 40) -> str:
    """repr(value) cut to about `width` characters: a message never holds an unbounded value."""
    text = repr(value)
    return text if len(text) <= width else f"{text[:width]}... ({len(text)} characters)"


# ---------------------------------------------------------------- input checks


def _ks(name: str, ks: Iterable[int]) -> list[int]:
    """The cut-offs `ks` without repeats (first-seen order); each must be an int >= 1."""
    out: list[int] = []
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise MetricError(f"{name} holds {_shown(k)}: each cut-off k must be an int >= 1")
        if k not in out:
            out.append(k)
    return out


def _unique_ids(ids: Iterable[str], name: str) -> list[str]:
    """`ids` as a list of strings, none twice."""
    if isinstance(ids, str):
        raise MetricError(f"{name} is a string: give a list of ids")
    out = list(ids)
    seen: set[str] = set()
    for i, x in enumerate(out):
        if not isinstance(x, str):
            raise MetricError(f"{name}[{i}] is a {type(x).__name__}: ids must be strings")
        if x in seen:
            raise MetricError(f"{name} holds {_shown(x)} twice: each id must name one item")
        seen.add(x)
    return out


def _relevant_queries(
    relevant: Mapping[str, Iterable[str]], query_ids: Sequence[str], corpus_ids: set[str] | None
) -> dict[str, set[str]]:
    """{query id: relevant corpus ids} for the queries of `query_ids` (in that order) that have one; a relevant
    pair naming a query or (when `corpus_ids` is given) a document that does not exist is a MetricError."""
    known = set(query_ids)
    for qid, docs in relevant.items():
        if isinstance(docs, str):
            raise MetricError(f"relevant[{_shown(qid)}] is a string: give a set of corpus ids")
    sets = {qid: set(docs) for qid, docs in relevant.items()}
    for qid, docs in sets.items():
        if docs and qid not in known:
            raise MetricError(f"relevant names query {_shown(qid)}, which is not among the {len(known)} query ids")
        unknown = docs - corpus_ids if corpus_ids is not None else set()
        if unknown:
            raise MetricError(
                f"relevant[{_shown(qid)}] names document {_shown(min(unknown))}, which is not among the "
                f"{len(corpus_ids or ())} corpus ids"
            )
    kept = {qid: sets[qid] for qid in query_ids if sets.get(qid)}
    if not kept:
        raise MetricError(f"none of the {len(known)} queries has a relevant document: nothing to score")
    return kept


def _embeddings(values: Any, name: str, rows: int | None = None, ids_name: str = "") -> Tensor:
    """`values` as a finite (rows, H) float tensor (float64 stays float64, anything else becomes float32); `rows`
    None takes any number of rows."""
    import torch

    x = torch.as_tensor(values)
    if x.dim() != 2:
        raise MetricError(f"{name} has shape {tuple(x.shape)}: expected (items, hidden), one row per item")
    if rows is not None and x.shape[0] != rows:
        raise MetricError(f"{name} has {x.shape[0]} rows but {ids_name} has {rows} ids: one row per id")
    if x.dtype != torch.float64:
        x = x.float()
    if not bool(torch.isfinite(x).all()):
        raise MetricError(f"{name} holds NaN or Infinity: the model that made them is broken")
    return x


# ---------------------------------------------------------------- exact top-k search


def _similarity(score_name: str, queries: Tensor, docs: Tensor) -> Tensor:
    """(Q, n) similarity of each query to each document, as sentence-transformers' similarity functions compute
    it (cosine of normalised rows; euclidean and manhattan are negative distances)."""
    import torch

    if score_name == "cosine":
        queries = torch.nn.functional.normalize(queries, p=2, dim=1)
        docs = torch.nn.functional.normalize(docs, p=2, dim=1)
    if score_name in ("cosine", "dot"):
        return torch.mm(queries, docs.transpose(0, 1))
    return -torch.cdist(queries, docs, p=2.0 if score_name == "euclidean" else 1.0)


def _best(scores: Tensor, order: Tensor, k: int, n_total: int) -> tuple[Tensor, Tensor]:
    """The k best columns of each row of `scores` (Q, n) by (-score, order), best first: (scores (Q, k),
    column indices (Q, k)). `order` (Q, n) holds distinct ints in [0, n_total) per row (corpus id ranks)."""
    import torch

    k = min(k, scores.shape[1])
    values, picked = scores.topk(k, dim=1)  # (Q, k) best first; torch orders ties as it likes
    threshold = values[:, -1:]  # (Q, 1) the k-th best score
    tied = ((scores >= threshold).sum(dim=1) > k).nonzero().squeeze(1)  # rows with ties across the cut
    if len(tied):
        # every score above the threshold is kept; of the ties at it, those of lowest order; the rest never
        s, o, t = scores[tied], order[tied], threshold[tied]
        key = torch.where(s > t, o, torch.where(s == t, o + n_total, 3 * n_total))
        picked[tied] = key.topk(k, dim=1, largest=False).indices
    by_order = order.gather(1, picked).argsort(dim=1)  # orders are distinct: no tie to break
    picked = picked.gather(1, by_order)
    by_score = scores.gather(1, picked).sort(dim=1, descending=True, stable=True).indices  # ties keep their order
    picked = picked.gather(1, by_score)
    return scores.gather(1, picked), picked


def top_k_search(
    query_embeddings: Any,
    corpus_embeddings: Any,
    k: int,
    *,
    corpus_order: Any = None,
    corpus_chunk_size: int = 50000,
    score_name: str = "cosine",
) -> tuple[Tensor, Tensor]:
    """The exact top min(k, C) corpus rows of each query: (scores (Q, k), corpus row indices (Q, k)), best first.

    The corpus is scored `corpus_chunk_size` rows at a time, so memory grows with Q x chunk, never Q x C. Ties
    go to the row of lower `corpus_order` (C distinct ints, e.g. the rank of each row's id; default the row
    index), so the result is the same for every chunk size. Embeddings are (rows, H) tensors or arrays."""
    import torch

    if score_name not in SCORE_NAMES:
        raise MetricError(f"score_name {_shown(score_name)} is not one of {', '.join(SCORE_NAMES)}")
    if isinstance(corpus_chunk_size, bool) or not isinstance(corpus_chunk_size, int) or corpus_chunk_size < 1:
        raise MetricError(f"corpus_chunk_size is {_shown(corpus_chunk_size)}: it must be an int >= 1")
    _ks("k", [k])
    queries = _embeddings(query_embeddings, "query_embeddings")
    corpus = _embeddings(corpus_embeddings, "corpus_embeddings")
    if queries.shape[1] != corpus.shape[1]:
        raise MetricError(
            f"query_embeddings are {queries.shape[1]} wide but corpus_embeddings are {corpus.shape[1]}: "
            "embed both with the same model"
        )
    n = corpus.shape[0]
    if n == 0:
        raise MetricError("corpus_embeddings has no rows: nothing to search")
    dtype = torch.promote_types(queries.dtype, corpus.dtype)
    queries, corpus = queries.to(dtype), corpus.to(device=queries.device, dtype=dtype)
    order = torch.arange(n) if corpus_order is None else torch.as_tensor(corpus_order, dtype=torch.long).flatten()
    if not torch.equal(order.sort().values, torch.arange(n)):
        raise MetricError(f"corpus_order must hold each of 0..{n - 1} once, one per corpus row")
    order = order.to(queries.device)
    best_scores = queries.new_empty(queries.shape[0], 0)
    best_rows = torch.empty(queries.shape[0], 0, dtype=torch.long, device=queries.device)
    for start in range(0, n, corpus_chunk_size):
        scores = _similarity(score_name, queries, corpus[start : start + corpus_chunk_size])  # (Q, chunk)
        if bool(torch.isnan(scores).any()):
            raise MetricError(f"{score_name} similarity is NaN: the embeddings overflow {dtype}")
        chunk_order = order[start : start + scores.shape[1]].expand_as(scores)
        chunk_scores, chunk_cols = _best(scores, chunk_order, k, n)
        scores = torch.cat([best_scores, chunk_scores], dim=1)  # (Q, <= 2k) the best so far and this chunk's
        rows = torch.cat([best_rows, chunk_cols + start], dim=1)
        best_scores, cols = _best(scores, order[rows], k, n)
        best_rows = rows.gather(1, cols)
    return best_scores, best_rows


# ---------------------------------------------------------------- retrieval scores


def information_retrieval(
    query_embeddings: Any,
    corpus_embeddings: Any,
    query_ids: Sequence[str],
    corpus_ids: Sequence[str],
    relevant: Mapping[str, Iterable[str]],
    *,
    corpus_chunk_size: int = 50000,
    accuracy_at_k: Iterable[int] = (1, 3, 5, 10),
    precision_recall_at_k: Iterable[int] = (1, 3, 5, 10),
    mrr_at_k: Iterable[int] = (10,),
    ndcg_at_k: Iterable[int] = (10,),
    map_at_k: Iterable[int] = (100,),
    score_name: str = "cosine",
) -> dict[str, float]:
    """Retrieval scores of queries against a corpus, equal to sentence-transformers' InformationRetrievalEvaluator
    on the same embeddings: {"cosine_accuracy@1": ..., "cosine_precision@1", "cosine_recall@1", "cosine_ndcg@10",
    "cosine_mrr@10", "cosine_map@100"} (the prefix is `score_name`: cosine, dot, euclidean or manhattan).

    Row i of query_embeddings (Q, H) embeds query_ids[i], row j of corpus_embeddings (C, H) corpus_ids[j];
    relevant maps a query id to the ids of its relevant documents. Queries without one are left out."""
    query_ids, corpus_ids = _unique_ids(query_ids, "query_ids"), _unique_ids(corpus_ids, "corpus_ids")
    kept = _relevant_queries(relevant, query_ids, set(corpus_ids))
    ks = _cut_offs(accuracy_at_k, precision_recall_at_k, mrr_at_k, ndcg_at_k, map_at_k)
    max_k = max(k for family in ks for k in family)
    queries = _embeddings(query_embeddings, "query_embeddings", len(query_ids), "query_ids")
    corpus = _embeddings(corpus_embeddings, "corpus_embeddings", len(corpus_ids), "corpus_ids")
    rows = [i for i, qid in enumerate(query_ids) if qid in kept]  # the evaluator embeds only these queries
    rank = sorted(range(len(corpus_ids)), key=corpus_ids.__getitem__)
    order = [0] * len(corpus_ids)
    for position, j in enumerate(rank):
        order[j] = position  # order[j]: where corpus_ids[j] stands in ascending id order (the tie rule)
    _, top = top_k_search(
        queries[rows], corpus, max_k, corpus_order=order, corpus_chunk_size=corpus_chunk_size, score_name=score_name
    )
    ranked = {query_ids[i]: [corpus_ids[j] for j in row] for i, row in zip(rows, top.tolist())}
    return _scores(ranked, kept, ks, score_name)


def ranking_metrics(
    ranked: Mapping[str, Sequence[str]],
    relevant: Mapping[str, Iterable[str]],
    *,
    accuracy_at_k: Iterable[int] = (1, 3, 5, 10),
    precision_recall_at_k: Iterable[int] = (1, 3, 5, 10),
    mrr_at_k: Iterable[int] = (10,),
    ndcg_at_k: Iterable[int] = (10,),
    map_at_k: Iterable[int] = (100,),
    score_name: str = "cosine",
) -> dict[str, float]:
    """information_retrieval's scores (same keys, prefix `score_name`) of ranked lists from any ranker:
    ranked maps a query id to its corpus ids, best first, at least max k long where the corpus allows (a
    shorter list scores as if nothing followed). Queries without a relevant document are left out."""
    query_ids = _unique_ids(ranked, "ranked")
    for qid in query_ids:
        _unique_ids(ranked[qid], f"ranked[{_shown(qid)}]")
    kept = _relevant_queries(relevant, query_ids, None)
    ks = _cut_offs(accuracy_at_k, precision_recall_at_k, mrr_at_k, ndcg_at_k, map_at_k)
    return _scores({qid: list(ranked[qid]) for qid in kept}, kept, ks, score_name)


def _cut_offs(*families: Iterable[int]) -> list[list[int]]:
    """The five cut-off lists (accuracy, precision / recall, MRR, NDCG, MAP), checked; at least one k in all."""
    names = ("accuracy_at_k", "precision_recall_at_k", "mrr_at_k", "ndcg_at_k", "map_at_k")
    ks = [_ks(name, family) for name, family in zip(names, families)]
    if not any(ks):
        raise MetricError("every list of cut-offs is empty: give at least one k")
    return ks


def _dcg(gains: Sequence[int], k: int) -> float:
    """Discounted cumulative gain of the first k gains (log2 discount from rank 1)."""
    return sum(gains[i] / math.log2(i + 2) for i in range(min(len(gains), k)))


def _scores(
    ranked: dict[str, list[str]], relevant: dict[str, set[str]], ks: list[list[int]], score_name: str
) -> dict[str, float]:
    """Mean accuracy, precision, recall, NDCG, MRR and MAP at their cut-offs over the queries of `ranked` (each
    with relevant documents), keyed and ordered as the evaluator's results."""
    accuracy_ks, pr_ks, mrr_ks, ndcg_ks, map_ks = ks
    per: dict[str, list[float]] = {}

    def add(name: str, k: int, value: float) -> None:
        per.setdefault(f"{score_name}_{name}@{k}", []).append(value)

    for qid, docs in ranked.items():
        rel = relevant[qid]
        hits = [doc in rel for doc in docs]
        first = hits.index(True) + 1 if any(hits) else math.inf  # rank of the first relevant document
        for k in accuracy_ks:
            add("accuracy", k, float(first <= k))
        for k in pr_ks:
            add("precision", k, sum(hits[:k]) / k)
        for k in pr_ks:
            add("recall", k, sum(hits[:k]) / len(rel))
        for k in ndcg_ks:
            add("ndcg", k, _dcg(hits, k) / _dcg([1] * len(rel), k))
        for k in mrr_ks:
            add("mrr", k, 1 / first if first <= k else 0.0)
        for k in map_ks:
            found = [i + 1 for i, hit in enumerate(hits[:k]) if hit]  # ranks of the relevant documents
            add("map", k, sum((n + 1) / r for n, r in enumerate(found)) / min(k, len(rel)))
    return {key: float(np.mean(values)) for key, values in per.items()}


# ---------------------------------------------------------------- reranking scores


def reranking_metrics(
    samples: Sequence[tuple[Sequence[float], Sequence[int | bool]]], at_k: int = 10
) -> dict[str, float]:
    """{"map", "mrr@{at_k}", "ndcg@{at_k}"} of reranked candidate lists, equal to sentence-transformers'
    CrossEncoderRerankingEvaluator: each sample is (scores, labels) of one query's candidates, label 1 (True)
    for a relevant one, 0 (False) otherwise. MRR@k ranks by numpy's argsort (descending), NDCG@k averages over
    tied scores and MAP is average precision over all candidates (scikit-learn's ndcg_score and
    average_precision_score). A sample without a relevant candidate scores 0 on all three. (With one candidate
    scikit-learn's ndcg_score, and so the evaluator, refuses; here it scores as a list of one.)"""
    _ks("at_k", [at_k])
    if not samples:
        raise MetricError("samples is empty: nothing to score")
    maps, mrrs, ndcgs = [], [], []
    for i, sample in enumerate(samples):
        scores, labels = _sample(sample, i)
        if not labels.any():
            maps.append(0.0)
            mrrs.append(0.0)
            ndcgs.append(0.0)
        else:
            maps.append(_average_precision(labels, scores))
            mrrs.append(_reciprocal_rank(labels, scores, at_k))
            ndcgs.append(_tie_averaged_ndcg(labels, scores, at_k))
    return {"map": float(np.mean(maps)), f"mrr@{at_k}": float(np.mean(mrrs)), f"ndcg@{at_k}": float(np.mean(ndcgs))}


def _sample(sample: Any, i: int) -> tuple[np.ndarray, np.ndarray]:
    """One (scores, labels) sample as float64 scores and 0/1 int labels of the same length."""
    try:
        raw_scores, raw_labels = sample
    except (TypeError, ValueError):
        raise MetricError(f"samples[{i}] is not a (scores, labels) pair") from None
    scores = np.asarray(raw_scores.tolist() if hasattr(raw_scores, "tolist") else raw_scores, dtype=object)
    labels = np.asarray(raw_labels.tolist() if hasattr(raw_labels, "tolist") else raw_labels, dtype=object)
    if scores.ndim != 1 or labels.ndim != 1 or len(scores) != len(labels):
        raise MetricError(f"samples[{i}] has {scores.shape} scores but {labels.shape} labels: one of each per document")
    if not all(x in (0, 1) and isinstance(x, (bool, int, np.integer)) for x in labels):
        raise MetricError(f"samples[{i}] labels must be 0 / 1 or False / True (relevant or not)")
    try:
        values = scores.astype(np.float64)
    except (TypeError, ValueError):
        raise MetricError(f"samples[{i}] scores must be numbers") from None
    if not np.isfinite(values).all():
        raise MetricError(f"samples[{i}] scores hold NaN or Infinity: the model that made them is broken")
    return values, labels.astype(np.int64)


def _reciprocal_rank(labels: np.ndarray, scores: np.ndarray, k: int) -> float:
    """1 / rank of the first relevant document in the top k (ranked as the evaluator does: argsort, reversed)."""
    for rank, index in enumerate(np.argsort(scores)[::-1][:k]):
        if labels[index]:
            return 1 / (rank + 1)
    return 0.0


def _tie_averaged_ndcg(labels: np.ndarray, scores: np.ndarray, k: int) -> float:
    """NDCG@k where each group of tied scores shares the mean gain of its members (McSherry & Najork 2008,
    scikit-learn's ndcg_score with ignore_ties=False)."""
    discount = 1 / (np.log(np.arange(len(labels)) + 2) / np.log(2))
    discount[k:] = 0
    cumulative = np.cumsum(discount)
    _, group, counts = np.unique(-scores, return_inverse=True, return_counts=True)  # groups by descending score
    gains = np.zeros(len(counts))
    np.add.at(gains, group, labels)
    ends = np.cumsum(counts) - 1  # last rank of each group
    discounts = np.diff(cumulative[ends], prepend=0.0)  # sum of the discounts of each group's ranks
    ideal = float(np.sort(labels)[::-1] @ discount)
    return float((gains / counts * discounts).sum()) / ideal


def _average_precision(labels: np.ndarray, scores: np.ndarray) -> float:
    """Average precision over every candidate, a group of tied scores counting as one threshold (scikit-learn's
    average_precision_score): sum over distinct scores, descending, of recall gained x precision there."""
    _, group, counts = np.unique(-scores, return_inverse=True, return_counts=True)
    positives = np.zeros(len(counts))
    np.add.at(positives, group, labels)
    precision = np.cumsum(positives) / np.cumsum(counts)
    return float((positives / labels.sum() * precision).sum())
