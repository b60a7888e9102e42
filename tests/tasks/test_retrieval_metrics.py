"""Retrieval and reranking scores (bertkit/metrics/retrieval.py) against sentence-transformers 5.7's
InformationRetrievalEvaluator and CrossEncoderRerankingEvaluator run on the same vectors and scores, and against
scikit-learn's ndcg_score / average_precision_score. The evaluators embed or score text with a model: here a
stand-in model looks each text's vector (or each pair's score) up, so both sides see the very same numbers.

Random vectors have no tied scores, so 5.7 (which leaves ties in torch.topk's order) is a fair reference; the
tie rule (score, then corpus id: sentence-transformers 6's) is tested on its own with exact integer scores."""

import random
import string

import numpy as np
import pytest
import torch

from bertkit.errors import BertkitError
from bertkit.metrics import MetricError, information_retrieval, ranking_metrics, reranking_metrics, top_k_search

TOL = 1e-9
CHUNKS = (1, 7, 50000)


# ----- the reference evaluators, fed precomputed numbers ------------------------------------------
class _Card:
    """The model-card store the evaluators write their results to; nothing to keep here."""

    def set_evaluation_metrics(self, *args, **kwargs):
        pass


class _LookupEncoder:
    """A SentenceTransformer stand-in: a text's embedding is its row in `table` (texts are ids)."""

    def __init__(self, table, similarity_fn_name="cosine"):
        from sentence_transformers import util

        self.table, self.similarity_fn_name = table, similarity_fn_name
        self.similarity = {"cosine": util.cos_sim, "dot": util.dot_score}[similarity_fn_name]
        self.model_card_data = _Card()

    def encode_query(self, sentences, **kwargs):
        return torch.stack([self.table[s] for s in sentences])

    encode_document = encode_query


class _LookupScorer:
    """A CrossEncoder stand-in: a (query, document) pair's score is looked up in `table`."""

    def __init__(self, table):
        self.table, self.model_card_data = table, _Card()

    def predict(self, pairs, **kwargs):
        return np.array([self.table[tuple(p)] for p in pairs], dtype=np.float32)


def _st_information_retrieval(queries, corpus, query_ids, corpus_ids, relevant, score_name="cosine", **kw):
    """InformationRetrievalEvaluator's results on these embeddings."""
    import sentence_transformers.sentence_transformer.evaluation as ev

    table = {f"q:{q}": row for q, row in zip(query_ids, queries)} | {
        f"d:{c}": row for c, row in zip(corpus_ids, corpus)
    }
    evaluator = ev.InformationRetrievalEvaluator(
        {q: f"q:{q}" for q in query_ids}, {c: f"d:{c}" for c in corpus_ids}, relevant, write_csv=False, **kw
    )
    return evaluator(_LookupEncoder(table, score_name))


def _retrieval_set(seed, n_queries=23, n_corpus=150, hidden=16):
    """Random float32 vectors (no ties), ids in shuffled non-sorted order, 1-5 relevant documents per query near
    the query, a few queries with none and one with an empty set."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    corpus = torch.randn(n_corpus, hidden, generator=g)
    corpus_ids = [f"{rng.choice(string.ascii_lowercase)}{i}" for i in rng.sample(range(1000), n_corpus)]
    query_ids = [f"q{i}" for i in rng.sample(range(1000), n_queries)]
    relevant, queries = {}, []
    for i, qid in enumerate(query_ids):
        docs = rng.sample(range(n_corpus), rng.randint(1, 5))
        queries.append(corpus[docs].mean(0) + 1.5 * torch.randn(hidden, generator=g))
        if i % 7 != 3:
            relevant[qid] = {corpus_ids[j] for j in docs}
    relevant[query_ids[3]] = set()
    return torch.stack(queries), corpus, query_ids, corpus_ids, relevant


# ----- information retrieval against the evaluator ---------------------------------------------------
@pytest.mark.parametrize("chunk", CHUNKS)
def test_information_retrieval_equals_the_evaluator_at_each_chunk_size(chunk):
    queries, corpus, query_ids, corpus_ids, relevant = _retrieval_set(0)
    ours = information_retrieval(queries, corpus, query_ids, corpus_ids, relevant, corpus_chunk_size=chunk)
    theirs = _st_information_retrieval(queries, corpus, query_ids, corpus_ids, relevant, corpus_chunk_size=chunk)
    assert list(ours) == list(theirs)  # same keys, same order
    assert ours == pytest.approx(theirs, abs=TOL, rel=0)
    assert 0 < ours["cosine_ndcg@10"] < 1 and 0 < ours["cosine_map@100"] < 1  # neither trivial nor perfect


def test_information_retrieval_equals_the_evaluator_with_other_cut_offs_and_dot_product():
    queries, corpus, query_ids, corpus_ids, relevant = _retrieval_set(1, n_corpus=40)
    ks = dict(accuracy_at_k=[2, 50], precision_recall_at_k=[4, 1], mrr_at_k=[1, 3], ndcg_at_k=[5, 60], map_at_k=[7, 2])
    ours = information_retrieval(queries, corpus, query_ids, corpus_ids, relevant, score_name="dot", **ks)
    theirs = _st_information_retrieval(queries, corpus, query_ids, corpus_ids, relevant, "dot", **ks)
    assert list(ours) == list(theirs) and "dot_ndcg@60" in ours
    assert ours == pytest.approx(theirs, abs=TOL, rel=0)


def test_information_retrieval_is_the_same_for_every_chunk_size():
    queries, corpus, query_ids, corpus_ids, relevant = _retrieval_set(2, n_corpus=230)
    runs = [
        information_retrieval(queries, corpus, query_ids, corpus_ids, relevant, corpus_chunk_size=c) for c in CHUNKS
    ]
    assert runs[0] == runs[1] == runs[2]


def test_ranking_metrics_equal_the_evaluators_scoring_of_ranked_lists():
    # lists of any length (shorter than k too), relevant documents that are never retrieved
    import sentence_transformers.sentence_transformer.evaluation as ev

    rng = random.Random(3)
    corpus_ids = [f"d{i}" for i in range(30)]
    ranked = {f"q{i}": rng.sample(corpus_ids, rng.randint(0, 15)) for i in range(40)}
    relevant = {q: set(rng.sample(corpus_ids, rng.randint(1, 6))) for q in ranked}
    evaluator = ev.InformationRetrievalEvaluator({q: q for q in ranked}, {c: c for c in corpus_ids}, relevant)
    lists = [[{"corpus_id": c, "score": float(-r)} for r, c in enumerate(ranked[q])] for q in ranked]
    theirs = {
        f"bm25_{m.replace('@k', '@' + str(k))}": v
        for m, d in evaluator.compute_metrics(lists).items()
        for k, v in d.items()
    }
    ours = ranking_metrics(ranked, relevant, score_name="bm25")
    assert list(ours) == list(theirs)
    assert ours == pytest.approx(theirs, abs=TOL, rel=0)


def test_ranking_metrics_of_the_search_equal_information_retrieval():
    queries, corpus, query_ids, corpus_ids, relevant = _retrieval_set(4)
    _, rows = top_k_search(queries, corpus, 100)
    ranked = {q: [corpus_ids[j] for j in row] for q, row in zip(query_ids, rows.tolist())}
    assert ranking_metrics(ranked, relevant) == information_retrieval(queries, corpus, query_ids, corpus_ids, relevant)


def test_retrieval_scores_by_hand():
    # q1 relevant {a, c}: ranked c, b, a -> acc@1 1, P@3 2/3, R@1 1/2, MRR 1, MAP@100 (1 + 2/3) / 2,
    # NDCG@10 (1 + 1/2) / (1 + 1/log2 3);  q2 relevant {b}: ranked a, c -> all 0
    out = ranking_metrics({"q1": ["c", "b", "a"], "q2": ["a", "c"]}, {"q1": {"a", "c"}, "q2": {"b"}})
    assert out["cosine_accuracy@1"] == 0.5 and out["cosine_precision@3"] == pytest.approx(1 / 3)
    assert out["cosine_recall@1"] == 0.25 and out["cosine_mrr@10"] == 0.5
    assert out["cosine_map@100"] == pytest.approx((1 + 2 / 3) / 4)
    assert out["cosine_ndcg@10"] == pytest.approx((1 + 1 / 2) / (1 + 1 / np.log2(3)) / 2)


# ----- the tie rule (sentence-transformers 6): score, then corpus id ---------------------------------
def test_top_k_search_breaks_ties_by_corpus_order_at_every_chunk_size():
    corpus = torch.ones(5, 3)  # five identical documents: every score ties
    for chunk in (1, 2, 50000):
        scores, rows = top_k_search(torch.ones(1, 3), corpus, 3, corpus_order=[4, 2, 0, 3, 1], corpus_chunk_size=chunk)
        assert rows.tolist() == [[2, 4, 1]]
        assert scores[0].tolist() == pytest.approx([1.0, 1.0, 1.0])


def test_tied_documents_rank_by_corpus_id():
    # three identical documents: "a" ranks first, then "b", whatever their rows and the chunk size
    corpus, queries = torch.tensor([[1.0, 0.0]] * 3 + [[0.0, 1.0]]), torch.tensor([[1.0, 0.0]])
    for chunk in CHUNKS:
        out = information_retrieval(queries, corpus, ["q"], ["c", "b", "a", "z"], {"q": {"b"}}, corpus_chunk_size=chunk)
        assert out["cosine_accuracy@1"] == 0.0 and out["cosine_mrr@10"] == 0.5


def _tied_set(seed):
    """Integer vectors (exact dot products, many ties at every cut-off), ids not in row order."""
    g = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    corpus = torch.randint(0, 3, (60, 4), generator=g).float()
    queries = torch.randint(0, 3, (9, 4), generator=g).float()
    corpus_ids = [f"{rng.choice('xyz')}{i}" for i in rng.sample(range(100), 60)]
    query_ids = [f"q{i}" for i in range(9)]
    relevant = {q: set(rng.sample(corpus_ids, rng.randint(1, 8))) for q in query_ids}
    return queries, corpus, query_ids, corpus_ids, relevant


TIE_KS = dict(accuracy_at_k=[1, 3], precision_recall_at_k=[5], mrr_at_k=[10], ndcg_at_k=[10], map_at_k=[20, 3])


@pytest.mark.parametrize("seed", range(3))
def test_many_ties_follow_the_score_then_id_order(seed):
    # the reference sorts (-exact score, id) in Python
    queries, corpus, query_ids, corpus_ids, relevant = _tied_set(seed)
    exact = queries.double() @ corpus.double().T
    ranked = {q: [c for _, c in sorted(zip((-exact[i]).tolist(), corpus_ids))][:20] for i, q in enumerate(query_ids)}
    expected = ranking_metrics(ranked, relevant, score_name="dot", **TIE_KS)
    for chunk in (1, 2, 7, 13, 50000):
        ours = information_retrieval(
            queries, corpus, query_ids, corpus_ids, relevant, corpus_chunk_size=chunk, score_name="dot", **TIE_KS
        )
        assert ours == expected


@pytest.mark.parametrize("score_name", ["dot", "cosine"])
def test_ties_equal_the_evaluator_of_sentence_transformers_6(score_name):
    import sentence_transformers as st  # a dev dependency: the reference

    if int(st.__version__.split(".")[0]) < 6:
        pytest.skip(f"sentence-transformers {st.__version__} leaves tied documents in torch.topk's order")
    queries, corpus, query_ids, corpus_ids, relevant = _tied_set(7)
    for chunk in CHUNKS:
        ours = information_retrieval(
            queries, corpus, query_ids, corpus_ids, relevant, corpus_chunk_size=chunk, score_name=score_name, **TIE_KS
        )
        theirs = _st_information_retrieval(
            queries, corpus, query_ids, corpus_ids, relevant, score_name, corpus_chunk_size=chunk, **TIE_KS
        )
        assert list(ours) == list(theirs)
        assert ours == pytest.approx(theirs, abs=TOL, rel=0)


# ----- input checks -------------------------------------------------------------------------------
def _ok():
    return torch.eye(3)[:2], torch.eye(3), ["q1", "q2"], ["a", "b", "c"], {"q1": {"a"}, "q2": {"b", "c"}}


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda a: a.update(corpus_ids=["a", "b", "a"]), "corpus_ids holds 'a' twice"),
        (lambda a: a.update(query_ids=["q1", "q1"]), "query_ids holds 'q1' twice"),
        (lambda a: a.update(relevant={"q1": {"a"}, "q9": {"b"}}), "relevant names query 'q9'"),
        (lambda a: a.update(relevant={"q1": {"a", "zz"}}), "relevant['q1'] names document 'zz'"),
        (lambda a: a.update(relevant={"q1": set(), "q2": []}), "none of the 2 queries has a relevant document"),
        (lambda a: a.update(corpus=torch.ones(3, 4)), "query_embeddings are 3 wide but corpus_embeddings are 4"),
        (lambda a: a.update(corpus=torch.ones(4, 3)), "corpus_embeddings has 4 rows but corpus_ids has 3"),
        (lambda a: a.update(queries=torch.ones(3, 3)), "query_embeddings has 3 rows but query_ids has 2"),
        (lambda a: a.update(queries=torch.ones(2)), "query_embeddings has shape (2,)"),
        (lambda a: a.update(corpus=torch.tensor([[1.0, 0, 0]] * 2 + [[float("nan"), 0, 0]])), "NaN or Infinity"),
        (lambda a: a.update(corpus_ids=["a", "b", 3]), "corpus_ids[2] is a int"),
        (lambda a: a.update(map_at_k=[0]), "map_at_k holds 0"),
        (lambda a: a.update(relevant={"q1": "a"}), "relevant['q1'] is a string"),
        (lambda a: a.update(corpus_chunk_size=0), "corpus_chunk_size is 0"),
        (lambda a: a.update(score_name="cos"), "score_name 'cos' is not one of"),
    ],
)
def test_information_retrieval_input_errors(change, message):
    queries, corpus, query_ids, corpus_ids, relevant = _ok()
    args = dict(queries=queries, corpus=corpus, query_ids=query_ids, corpus_ids=corpus_ids, relevant=relevant)
    information_retrieval(*args.values())  # the unchanged input is fine
    change(args)
    options = {k: args.pop(k) for k in ("map_at_k", "corpus_chunk_size", "score_name") if k in args}
    with pytest.raises(MetricError) as err:
        information_retrieval(*args.values(), **options)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, BertkitError)


def test_long_ids_are_cut_in_messages():
    with pytest.raises(MetricError, match=r"\.\.\. \(1002 characters\)") as err:
        ranking_metrics({"q": ["x" * 1000, "x" * 1000]}, {"q": {"a"}})
    assert len(str(err.value)) < 200


def test_ranking_metrics_input_errors():
    with pytest.raises(MetricError, match=r"ranked\['q'\] holds 'a' twice"):
        ranking_metrics({"q": ["a", "b", "a"]}, {"q": {"a"}})
    with pytest.raises(MetricError, match="relevant names query 'p'"):
        ranking_metrics({"q": ["a"]}, {"q": {"a"}, "p": {"a"}})
    with pytest.raises(MetricError, match="none of the 1 queries"):
        ranking_metrics({"q": ["a"]}, {})
    with pytest.raises(MetricError, match="every list of cut-offs is empty"):
        ranking_metrics(
            {"q": ["a"]},
            {"q": {"a"}},
            accuracy_at_k=(),
            precision_recall_at_k=(),
            mrr_at_k=(),
            ndcg_at_k=(),
            map_at_k=(),
        )


def test_top_k_search_input_errors():
    with pytest.raises(MetricError, match="corpus_order must hold each of 0..2 once"):
        top_k_search(torch.ones(1, 2), torch.ones(3, 2), 2, corpus_order=[0, 0, 1])
    with pytest.raises(MetricError, match="k holds 0"):
        top_k_search(torch.ones(1, 2), torch.ones(3, 2), 0)


# ----- reranking against the evaluator and scikit-learn --------------------------------------------
def _rerank_set(seed, n=60):
    """Samples in the evaluator's order (positives first): 2-20 candidates, scores with ties (one decimal),
    some samples without a positive."""
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(n):
        size = int(rng.integers(2, 21))
        positives = 0 if i % 9 == 4 else int(rng.integers(1, size + 1))
        labels = [1] * positives + [0] * (size - positives)
        scores = np.round(rng.normal(size=size) + np.array(labels) * 0.8, 1).tolist()
        samples.append((scores, labels))
    return samples


def _st_reranking(samples, at_k):
    """CrossEncoderRerankingEvaluator's results on these scores."""
    import sentence_transformers.cross_encoder.evaluation as ev

    table, st_samples = {}, []
    for i, (scores, labels) in enumerate(samples):
        docs = [f"doc {i}.{j}" for j in range(len(scores))]
        table |= {(f"query {i}", d): s for d, s in zip(docs, scores)}
        positive = [d for d, y in zip(docs, labels) if y]
        st_samples.append({"query": f"query {i}", "positive": positive, "negative": docs[len(positive) :]})
    evaluator = ev.CrossEncoderRerankingEvaluator(st_samples, at_k=at_k, write_csv=False)
    return evaluator(_LookupScorer(table))


@pytest.mark.parametrize("at_k", [10, 3])
def test_reranking_metrics_equal_the_evaluator(at_k):
    samples = _rerank_set(at_k)
    ours = reranking_metrics(samples, at_k=at_k)
    theirs = _st_reranking(samples, at_k)
    assert list(ours) == list(theirs) == ["map", f"mrr@{at_k}", f"ndcg@{at_k}"]
    assert ours == pytest.approx(theirs, abs=TOL, rel=0)


def test_reranking_metrics_equal_scikit_learn_per_sample():
    import sklearn.metrics as sk

    rng = np.random.default_rng(5)
    for _ in range(200):
        size = int(rng.integers(2, 25))
        labels = rng.integers(0, 2, size)
        labels[rng.integers(size)] = 1
        scores = np.round(rng.normal(size=size), int(rng.integers(0, 2)))  # many ties
        ours = reranking_metrics([(scores, labels)], at_k=int(rng.integers(1, 12)))
        k = int(next(key for key in ours if key.startswith("ndcg")).split("@")[1])
        assert ours["map"] == pytest.approx(sk.average_precision_score(labels, scores), abs=TOL, rel=0)
        assert ours[f"ndcg@{k}"] == pytest.approx(sk.ndcg_score([labels], [scores], k=k), abs=TOL, rel=0)


def test_reranking_metrics_by_hand():
    # scores 0.9 (no), 0.5 (yes), 0.5 (no), 0.1 (yes): the evaluator's reversed argsort ranks 0, 2, 1, 3 (the
    # later of two ties first), so the first positive is 3rd: MRR@10 1/3; the sample without a positive scores 0
    samples = [([0.9, 0.5, 0.5, 0.1], [0, 1, 0, 1]), ([0.2, 0.1], [0, 0])]
    out = reranking_metrics(samples)
    assert out["mrr@10"] == pytest.approx((1 / 3) / 2)
    # AP: thresholds .9 (P 0), .5 (recall 1/2, P 1/3), .1 (recall 1, P 1/2): 1/2 * 1/3 + 1/2 * 1/2
    assert out["map"] == pytest.approx((1 / 6 + 1 / 4) / 2)
    # NDCG: ranks 2 and 3 share gain 1/2; rank 4 gain 1; ideal 1 + 1/log2 3
    dcg = 0.5 * (1 / np.log2(3) + 1 / np.log2(4)) + 1 / np.log2(5)
    assert out["ndcg@10"] == pytest.approx(dcg / (1 + 1 / np.log2(3)) / 2)


def test_reranking_single_candidate_and_bools():
    assert reranking_metrics([([0.3], [True])]) == {"map": 1.0, "mrr@10": 1.0, "ndcg@10": 1.0}


@pytest.mark.parametrize(
    "samples, message",
    [
        ([], "samples is empty"),
        ([([0.1, 0.2], [1])], "samples[0] has (2,) scores but (1,) labels"),
        ([([0.1], [1]), ([0.1, 0.2], [2, 0])], "samples[1] labels must be 0 / 1"),
        ([([0.1, float("nan")], [1, 0])], "samples[0] scores hold NaN or Infinity"),
        ([([0.1, "x"], [1, 0])], "samples[0] scores must be numbers"),
        ([[0.1]], "samples[0] is not a (scores, labels) pair"),
    ],
)
def test_reranking_input_errors(samples, message):
    with pytest.raises(MetricError) as err:
        reranking_metrics(samples)
    assert message in str(err.value) and "\n" not in str(err.value)
