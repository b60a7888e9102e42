"""Hard-negative mining: (anchor, positive) pairs -> training rows with negatives, as sentence-transformers'
mine_hard_negatives (v5.7, util/hard_negatives.py, use_faiss off) makes them.

    rows = mine_hard_negatives(anchors, positives, Encoder.from_pretrained(folder), num_negatives=3)
    bertkit mine-negatives --model DIR --data pairs.jsonl --out mined.jsonl --relative-margin 0.05

    anchors, positives (+ corpus)
      --dedupe--> queries (each anchor once, first-seen order), corpus (the corpus, then the positives, each text
                  once), each query's positives (corpus ids, each once)
      --Encoder, L2-normalized--> vectors; score = the folder's similarity_fn_name (cosine: a dot product)
      --per query, the range_max + max_positives best corpus rows, chunk_size x chunk_size scores at a time-->
        candidates (score, corpus id), best first, ties by corpus position
      --a query's own positives (include_positives keeps them); score + absolute_margin > p; score > p - |p| x
        relative_margin (p: the query's lowest positive score); score > max_score; score < min_score --> -inf (out)
      --the range_max best, skip range_min, then num_negatives: the best ("top") or a seeded sample of the
        window's survivors ("random", sorted best first again)--> negatives, -inf where too few survived
      --output_format--> rows

range_max defaults to range_min + num_negatives + max_positives, with num_negatives x 10 when a margin or
max_score may drop candidates (max_positives: the most rows one anchor has). Too few survivors: a triplet,
labeled-pair or labeled-list row is made of those found (a (query, positive) with none has no labeled-list row);
an n-tuple row needs all num_negatives, else it is left out. Those are ST's rules, as are the column names:

    triplet        {anchor: a, positive: p, "negative": n}                  one row per (query, positive, negative)
    n-tuple        {anchor: a, positive: p, "negative_1": ..., "negative_N": ...}   one per (query, positive)
    labeled-pair   {anchor: a, positive: text, "label": 1 | 0}    per query: its positives, then its negatives
    labeled-list   {anchor: a, positive: [p, n1, ...], "labels": [1, 0, ...]}       one per (query, positive)

where anchor / positive are the input's column names. output_scores adds "scores" ([positive, negatives...])
to triplet / n-tuple rows and replaces "label" / "labels" with "score" / "scores" in the labeled ones.
Random sampling draws as ST does from Python's `random` (random.sample per query, in query order), from
random.Random(seed): ST after random.seed(seed) draws the same negatives.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from .errors import ConfigError, InputError
from .files import read_json
from .options import opt, settings_of
from .text import is_empty_text

if TYPE_CHECKING:
    from .embed import Encoder

Row = dict[str, Any]
Log = Callable[[str], None]
OutputFormat = Literal["triplet", "n-tuple", "labeled-pair", "labeled-list"]
SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")  # sentence-transformers' similarity_fn_name values
INF = float("inf")


@dataclass
class MineSettings:
    """How negatives are mined: sentence-transformers' mine_hard_negatives arguments, same names and defaults."""

    range_min: int = opt(0, "skip this many best-scoring candidates (those the filters keep) before taking negatives")
    range_max: int | None = opt(
        None,
        "consider only the range_max best-scoring candidates; default: range_min + num_negatives (x 10 with a "
        "margin or max_score) + the most positives one anchor has",
    )
    max_score: float | None = opt(None, "drop candidates scoring above this")
    min_score: float | None = opt(None, "drop candidates scoring below this")
    absolute_margin: float | None = opt(
        None, "drop candidates with score + margin > p (p: the anchor's lowest positive score)"
    )
    relative_margin: float | None = opt(
        None,
        "drop candidates scoring above p - |p| x margin (p: the anchor's lowest positive score); NV-Retriever: 0.05",
    )
    num_negatives: int = opt(3, "negatives per anchor")
    sampling_strategy: Literal["top", "random"] = opt(
        "top", "top: the best candidates left; random: a seeded sample of those in the window"
    )
    output_format: OutputFormat = opt(
        "triplet",
        "triplet: (anchor, positive, negative) rows; n-tuple: (anchor, positive, negative_1..N); labeled-pair: "
        "(anchor, text, label 1/0); labeled-list: (anchor, [texts], [labels])",
    )
    output_scores: bool = opt(
        False, "add the scores (triplet, n-tuple: a 'scores' list; labeled: score(s), not labels)"
    )
    include_positives: bool = opt(False, "keep the positives among the candidates (for reranking sets; n-tuple only)")
    chunk_size: int = opt(4096, "anchors and corpus rows scored at a time: memory is about chunk_size^2 scores")
    batch_size: int = opt(32, "texts per forward pass")
    seed: int = opt(0, "seed of --sampling-strategy random")

    def problem(self) -> str | None:
        if self.num_negatives < 1:
            return f"num_negatives must be at least 1, got {self.num_negatives}"
        if self.range_min < 0:
            return f"range_min must be 0 or more, got {self.range_min}"
        if self.chunk_size < 1:
            return f"chunk_size must be a positive integer, got {self.chunk_size}"
        if self.batch_size < 1:
            return f"batch_size must be a positive integer, got {self.batch_size}"
        return None


@dataclass
class Pairs:
    """The data deduplicated as ST does: each anchor once, each corpus text once, each query's positives."""

    queries: list[str]  # each anchor once, in first-seen order
    corpus: list[str]  # the corpus, then the positives, each text once (first-seen order)
    positives: list[list[int]]  # per query: its positives' corpus ids, each once, in first-seen order
    max_positives: int  # the most rows one anchor has, duplicate pairs counted (ST's count, for range_max)

    def positive_rows(self) -> list[tuple[int, int]]:
        """(query, corpus id) of every positive, query by query: the rows of triplet / n-tuple / labeled-list."""
        return [(q, p) for q, ids in enumerate(self.positives) for p in ids]


def mine_hard_negatives(
    anchors: Sequence[str],
    positives: Sequence[str],
    encoder: Encoder,
    corpus: Sequence[str] | None = None,
    *,
    range_min: int = 0,
    range_max: int | None = None,
    max_score: float | None = None,
    min_score: float | None = None,
    absolute_margin: float | None = None,
    relative_margin: float | None = None,
    num_negatives: int = 3,
    sampling_strategy: str = "top",
    output_format: str = "triplet",
    output_scores: bool = False,
    include_positives: bool = False,
    chunk_size: int = 4096,
    batch_size: int = 32,
    seed: int = 0,
    columns: tuple[str, str] = ("anchor", "positive"),
    log: Log | None = None,
) -> list[Row]:
    """Rows of (anchor, positive) pairs with hard negatives from `corpus` (default: the positives), as
    sentence-transformers' mine_hard_negatives returns them (the module docstring has the steps and formats).
    columns: the names of the anchor and positive columns in the rows; log: where progress lines go."""
    s = settings_of(
        MineSettings,
        where="bertkit.mine_hard_negatives",
        range_min=range_min,
        range_max=range_max,
        max_score=max_score,
        min_score=min_score,
        absolute_margin=absolute_margin,
        relative_margin=relative_margin,
        num_negatives=num_negatives,
        sampling_strategy=sampling_strategy,
        output_format=output_format,
        output_scores=output_scores,
        include_positives=include_positives,
        chunk_size=chunk_size,
        batch_size=batch_size,
        seed=seed,
    )
    say = log or (lambda line: None)
    pairs = pair_up(anchors, positives, corpus, encoder)
    window = window_end(s, pairs.max_positives, say)
    if s.include_positives and s.output_format != "n-tuple":  # ST switches, so that the ranking keeps its order
        say(f"include_positives: output_format {s.output_format} -> n-tuple, which keeps the ranking's order")
        s.output_format = "n-tuple"
    similarity = similarity_of(encoder)
    say(f"embedding {len(pairs.corpus)} corpus text(s) and {len(pairs.queries)} unique anchor(s) of {len(anchors)}")
    queries, docs = embed(encoder, pairs.queries, s.batch_size), embed(encoder, pairs.corpus, s.batch_size)
    k = window + pairs.max_positives  # room for the positives, which are dropped from the candidates
    scores, ids = top_candidates(queries, docs, k, s.chunk_size, similarity)
    rows = pairs.positive_rows()
    positive_scores = score_pairs(queries[[q for q, _ in rows]], docs[[p for _, p in rows]], similarity)
    drop_candidates(scores, ids, pairs, positive_scores, s, say)
    negative_scores, negative_ids = pick(scores, ids, s, window)
    out = ROWS[s.output_format](pairs, positive_scores, negative_scores, negative_ids, columns, s.output_scores)
    most = {"triplet": len(rows) * s.num_negatives, "labeled-pair": len(pairs.queries) * s.num_negatives + len(anchors)}
    missing = most.get(s.output_format, len(rows)) - len(out)  # ST's count of the rows it could not fill
    if missing > 0:
        say(f"could not find enough negatives for {missing} row(s): consider range_max, range_min or the filters")
    return out


# ----- the data ---------------------------------------------------------------------------------------
def pair_up(anchors: Sequence[str], positives: Sequence[str], corpus: Sequence[str] | None, encoder: Encoder) -> Pairs:
    """The checked texts, deduplicated as ST does (Pairs); an empty or missing text is an InputError naming it."""
    anchors = _texts("anchors", anchors, encoder)
    positives = _texts("positives", positives, encoder)
    extra = _texts("corpus", corpus, encoder) if corpus is not None else list(positives)
    if len(anchors) != len(positives):
        raise InputError(f"{len(anchors)} anchors but {len(positives)} positives: pass one positive per anchor")
    if not anchors:
        raise InputError("no (anchor, positive) pairs: there is nothing to mine negatives for")
    texts = list(dict.fromkeys(extra + positives))
    corpus_id = {text: i for i, text in enumerate(texts)}
    queries = list(dict.fromkeys(anchors))
    query_id = {text: i for i, text in enumerate(queries)}
    found: list[dict[int, None]] = [{} for _ in queries]  # an ordered set per query
    rows_per_query = [0] * len(queries)
    for anchor, positive in zip(anchors, positives):
        found[query_id[anchor]][corpus_id[positive]] = None
        rows_per_query[query_id[anchor]] += 1
    return Pairs(queries, texts, [list(ids) for ids in found], max(rows_per_query))


def _texts(name: str, texts: object, encoder: Encoder) -> list[str]:
    """`texts` as a list of strings, each with something to embed (text.is_empty_text by the encoder's tokenizer)."""
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise InputError(f"{name} must be a list of strings, got {type(texts).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"{name}[{i}] is a {type(text).__name__}, not a string")
        if is_empty_text(text, encoder.tokenizer):
            raise InputError(f"{name}[{i}] is empty (no character the tokenizer keeps): give every pair two texts")
    return list(texts)


def window_end(s: MineSettings, max_positives: int, say: Log) -> int:
    """range_max: the given one, or ST's default; a window with room for fewer than num_negatives is a ConfigError."""
    window = s.range_max
    if window is None:
        filtered = s.absolute_margin is not None or s.relative_margin is not None or s.max_score is not None
        window = s.range_min + s.num_negatives * (10 if filtered else 1) + max_positives
        say(f"range_max {window} (range_min + num_negatives{' x 10' if filtered else ''} + {max_positives} positives)")
    if s.range_min >= window:
        raise ConfigError(f"range_min ({s.range_min}) must be smaller than range_max ({window})")
    if s.num_negatives > window - s.range_min:
        raise ConfigError(
            f"cannot mine {s.num_negatives} negatives per anchor: only {window - s.range_min} candidates remain after "
            f"skipping range_min={s.range_min} of range_max={window}; lower num_negatives or range_min, or raise "
            "range_max"
        )
    return window


# ----- scores -----------------------------------------------------------------------------------------
def similarity_of(encoder: Encoder) -> str:
    """The similarity a sentence-transformers folder names (config_sentence_transformers.json's
    similarity_fn_name), cosine when it names none or the encoder has no folder."""
    path = os.path.join(encoder.model_dir, "config_sentence_transformers.json")
    if not os.path.isfile(path):
        return "cosine"
    name = read_json(path, ConfigError).get("similarity_fn_name") or "cosine"
    if name not in SIMILARITIES:
        raise ConfigError(f"{path}: similarity_fn_name {str(name)[:40]!r} is not one of {', '.join(SIMILARITIES)}")
    return str(name)


def embed(encoder: Encoder, texts: list[str], batch_size: int) -> Tensor:
    """(n, H) float32 unit vectors of `texts` (ST encodes with normalize_embeddings=True)."""
    return F.normalize(torch.from_numpy(encoder.encode(texts, batch_size)), p=2, dim=1)


def score(a: Tensor, b: Tensor, similarity: str) -> Tensor:
    """(n, H) x (m, H) -> (n, m) scores, higher is closer: a dot product of unit vectors, or minus a distance."""
    if similarity in ("cosine", "dot"):
        return a @ b.T
    return -torch.cdist(a, b, p=2.0 if similarity == "euclidean" else 1.0)


def score_pairs(a: Tensor, b: Tensor, similarity: str) -> Tensor:
    """(n, H), (n, H) -> (n,) the score of each row of `a` with the same row of `b`."""
    if similarity in ("cosine", "dot"):
        return (a * b).sum(-1)
    return -(a - b).norm(p=2.0 if similarity == "euclidean" else 1.0, dim=-1)


def top_candidates(queries: Tensor, docs: Tensor, k: int, chunk_size: int, similarity: str) -> tuple[Tensor, Tensor]:
    """Per query, the k best-scoring corpus rows: (Q, k) scores best first, ties by lower corpus id, and their ids;
    -inf / -1 past the corpus' end. Exact, with at most chunk_size queries x (k + chunk_size) scores at a time."""
    scores = torch.full((len(queries), k), -INF)
    ids = torch.full((len(queries), k), -1, dtype=torch.long)
    for q0 in range(0, len(queries), chunk_size):
        block = queries[q0 : q0 + chunk_size]
        best = torch.empty(len(block), 0)
        best_ids = torch.empty(len(block), 0, dtype=torch.long)
        for d0 in range(0, len(docs), chunk_size):
            chunk = score(block, docs[d0 : d0 + chunk_size], similarity)  # (q, c)
            chunk_ids = torch.arange(d0, d0 + chunk.size(1)).expand_as(chunk)
            # best is sorted and its ids are all lower than the chunk's: a stable sort keeps ties by corpus id
            merged, merged_ids = torch.cat([best, chunk], 1), torch.cat([best_ids, chunk_ids], 1)
            order = merged.argsort(dim=1, descending=True, stable=True)[:, :k]
            best, best_ids = merged.gather(1, order), merged_ids.gather(1, order)
        scores[q0 : q0 + len(block), : best.size(1)] = best
        ids[q0 : q0 + len(block), : best.size(1)] = best_ids
    return scores, ids


def drop_candidates(
    scores: Tensor, ids: Tensor, pairs: Pairs, positive_scores: Tensor, s: MineSettings, say: Log
) -> None:
    """Set to -inf, in place, the candidates ST drops: the query's positives, those within a margin of its lowest
    positive score, those above max_score or below min_score. Says how many each rule dropped, as ST does."""
    if not s.include_positives:
        for q, positive_ids in enumerate(pairs.positives):
            scores[q, torch.isin(ids[q], torch.tensor(positive_ids))] = -INF
    per_query = positive_scores.split([len(p) for p in pairs.positives])
    lowest = torch.stack([p.min() for p in per_query]).unsqueeze(1)  # (Q, 1): the hardest positive's score
    rules: list[tuple[str, float | None, Callable[[float], Tensor]]] = [
        ("absolute_margin", s.absolute_margin, lambda m: scores + m > lowest),
        ("relative_margin", s.relative_margin, lambda m: scores > lowest - lowest.abs() * m),
        ("max_score", s.max_score, lambda m: scores > m),
        ("min_score", s.min_score, lambda m: scores < m),  # counts the -inf ones too, as ST's count does
    ]
    total = scores.numel()
    for name, value, rule in rules:
        if value is None:
            continue
        out = rule(value)
        scores[out] = -INF
        if int(out.sum()):
            say(f"skipped {int(out.sum()):,} potential negatives ({int(out.sum()) / total:.2%}) by {name} {value}")
        if name.endswith("margin"):  # ST's ratios: each margin's over the candidates the one before left
            total -= int(out.sum())


def pick(scores: Tensor, ids: Tensor, s: MineSettings, window: int) -> tuple[Tensor, Tensor]:
    """(Q, num_negatives) negative scores and corpus ids: the `window` best candidates left, range_min of them
    skipped, then the first num_negatives ("top") or a sample of the finite ones, best first ("random")."""
    order = scores.argsort(dim=1, descending=True, stable=True)[:, :window]
    scores, ids = scores.gather(1, order)[:, s.range_min :], ids.gather(1, order)[:, s.range_min :]
    n = s.num_negatives
    if s.sampling_strategy == "top":
        return scores[:, :n], ids[:, :n]
    rng = random.Random(s.seed)
    options = (scores.size(1) - scores.isinf().sum(1)).clamp(min=n)  # sample -inf ones only when too few are left
    chosen = torch.tensor([rng.sample(range(int(m)), k=n) for m in options], dtype=torch.long).view(-1, n)
    scores, ids = scores.gather(1, chosen), ids.gather(1, chosen)
    order = scores.argsort(dim=1, descending=True, stable=True)
    return scores.gather(1, order), ids.gather(1, order)


# ----- rows -------------------------------------------------------------------------------------------
def triplet_rows(
    pairs: Pairs, pos: Tensor, neg: Tensor, neg_ids: Tensor, columns: tuple[str, str], with_scores: bool
) -> list[Row]:
    """(anchor, positive, negative): one row per (query, positive, surviving negative)."""
    rows: list[Row] = []
    for r, (q, p) in enumerate(pairs.positive_rows()):
        for score_, n in zip(neg[q].tolist(), neg_ids[q].tolist()):
            if score_ == -INF:
                continue
            row: Row = {columns[0]: pairs.queries[q], columns[1]: pairs.corpus[p], "negative": pairs.corpus[n]}
            if with_scores:
                row["scores"] = [pos[r].item(), score_]
            rows.append(row)
    return rows


def ntuple_rows(
    pairs: Pairs, pos: Tensor, neg: Tensor, neg_ids: Tensor, columns: tuple[str, str], with_scores: bool
) -> list[Row]:
    """(anchor, positive, negative_1, ..., negative_N): one row per (query, positive) with all N negatives."""
    rows: list[Row] = []
    for r, (q, p) in enumerate(pairs.positive_rows()):
        if bool(neg[q].isinf().any()):
            continue
        row: Row = {columns[0]: pairs.queries[q], columns[1]: pairs.corpus[p]}
        row.update({f"negative_{i}": pairs.corpus[n] for i, n in enumerate(neg_ids[q].tolist(), 1)})
        if with_scores:
            row["scores"] = [pos[r].item(), *neg[q].tolist()]
        rows.append(row)
    return rows


def labeled_pair_rows(
    pairs: Pairs, pos: Tensor, neg: Tensor, neg_ids: Tensor, columns: tuple[str, str], with_scores: bool
) -> list[Row]:
    """(anchor, text, label): per query, its positives (1), then its surviving negatives (0)."""
    label = "score" if with_scores else "label"
    rows: list[Row] = []
    r = 0
    for q, positive_ids in enumerate(pairs.positives):
        for p in positive_ids:
            rows.append(
                {columns[0]: pairs.queries[q], columns[1]: pairs.corpus[p], label: pos[r].item() if with_scores else 1}
            )
            r += 1
        for score_, n in zip(neg[q].tolist(), neg_ids[q].tolist()):
            if score_ != -INF:
                rows.append(
                    {columns[0]: pairs.queries[q], columns[1]: pairs.corpus[n], label: score_ if with_scores else 0}
                )
    return rows


def labeled_list_rows(
    pairs: Pairs, pos: Tensor, neg: Tensor, neg_ids: Tensor, columns: tuple[str, str], with_scores: bool
) -> list[Row]:
    """(anchor, [positive, negatives...], [1, 0, ...]): one row per (query, positive) with a surviving negative."""
    rows: list[Row] = []
    for r, (q, p) in enumerate(pairs.positive_rows()):
        kept = [(score_, n) for score_, n in zip(neg[q].tolist(), neg_ids[q].tolist()) if score_ != -INF]
        if not kept:
            continue
        texts = [pairs.corpus[p]] + [pairs.corpus[n] for _, n in kept]
        row: Row = {columns[0]: pairs.queries[q], columns[1]: texts}
        if with_scores:
            row["scores"] = [pos[r].item()] + [score_ for score_, _ in kept]
        else:
            row["labels"] = [1] + [0] * len(kept)
        rows.append(row)
    return rows


RowMaker = Callable[[Pairs, Tensor, Tensor, Tensor, tuple[str, str], bool], list[Row]]
ROWS: dict[str, RowMaker] = {
    "triplet": triplet_rows,
    "n-tuple": ntuple_rows,
    "labeled-pair": labeled_pair_rows,
    "labeled-list": labeled_list_rows,
}
