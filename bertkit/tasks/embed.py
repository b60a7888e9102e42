"""embed: train sentence embeddings, vectors whose cosine ranks the right texts first (sentence-transformers' losses).

Data (bertkit/data/pairs.py: input columns by order, a label / score column is the label):
    anchor, positive[, negative_1 .. negative_n]  -> MultipleNegativesRankingLoss (the default without a label):
                                                     every positive and hard negative of the batch is a candidate
                                                     for every anchor; --symmetric also ranks anchors per positive
    text1, text2, score                           -> CoSENTLoss (the default with a label)
    text                                          -> unsupervised SimCSE: the text is its own positive, dropout the
                                                     difference between the two
    builtin:peoples-daily-retrieval               -> (sentence, its passage) pairs; dev / test: a retrieval set
Evaluation data: a retrieval set (queries, corpus, relevant pairs: the built-in set, or a BEIR folder of corpus.jsonl,
queries.jsonl, qrels/*.tsv) scored as sentence-transformers' InformationRetrievalEvaluator (cosine_ndcg@10 picks the
best model); pairs become one (queries: the anchors, corpus: every positive and negative); scored pairs give the
Spearman correlation of cosine and score (spearman_cosine), as its EmbeddingSimilarityEvaluator.

    rows --encode--> EmbedFeature: the ids of each text (cut to --seq-len)
         --collate--> the batch's texts column by column (anchors, then positives, then ...) as one padded batch
         --training_loss--> BertModel (padding-free) -> pool (the folder's pooling, else --pooling) -> (columns, B, H)
                            -> the loss (bertkit/losses.py); --matryoshka-dims: the loss over each prefix of the
                            vectors too; --mini-batch-size: GradCache (the same gradients, memory flat in the batch);
                            under torchrun the candidates of every rank, with their gradients
The model folder is a sentence-transformers folder (BertModel at the root, modules.json, 1_Pooling, 2_Normalize when
normalizing, sentence_bert_config.json, config_sentence_transformers.json): `SentenceTransformer(folder)`, `bertkit
embed` and `bertkit serve` take it as it is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from .. import __version__
from ..data import records
from ..data.batching import id_batch
from ..data.pairs import rows_of
from ..data.records import TaskDataError
from ..errors import TrainingError
from ..files import atomic_write_text
from ..model import BertModel
from ..options import opt
from ..pooling import POOLING_MODES, Pooling, pool, pooling_settings, read_pooling, write_pooling
from .base import Feature, LossChoice, Task

if TYPE_CHECKING:
    from ..config import BertConfig
    from ..data.retrieval import RetrievalSet
    from ..model import BertPreTrainedModel, InferenceModel
    from ..tokenizer import Tokenizer
    from ..train.batches import LossWeights
    from ..train.loop import LossFn

EMBED_LOSSES = ("MultipleNegativesRankingLoss", "CoSENTLoss")
RETRIEVAL_METRIC = "cosine_ndcg@10"
SIMILARITY_METRIC = "spearman_cosine"
BM25_METRIC = "bm25_ndcg@10"  # BM25's score on the same retrieval set, beside the model's


@dataclass
class EmbedExample:
    """One row: its texts (anchor, positive, negatives...; or text1, text2) and its score, if scored."""

    texts: list[str]
    label: float | None = None


@dataclass(kw_only=True)
class EmbedFeature(Feature):
    """The ids of each text of a row (input_ids: the first text's, as every Feature has)."""

    texts: list[list[int]]

    @property
    def tokens(self) -> int:
        return sum(len(ids) for ids in self.texts)


@dataclass
class EmbedOptions(LossChoice):
    symmetric: bool = opt(False, "embed: MultipleNegativesRankingLoss ranks the anchors for each positive too")
    matryoshka_dims: list[int] = opt(
        list,
        "embed: the loss also over these leading dimensions of the vectors (MatryoshkaLoss), e.g. 384 128 64",
        nargs="*",
    )
    mini_batch_size: int = opt(
        0,
        "embed: GradCache: embed this many texts at a time (the same gradients, memory flat in --batch-size)",
    )
    pooling: Literal["mean", "cls", "max", "mean_sqrt_len"] | None = opt(
        None, "embed: how token vectors become one (default: the model folder's, else mean)"
    )
    normalize: bool | None = opt(
        None, "embed: the model folder L2-normalizes its vectors (a Normalize module; default: as the starting folder)"
    )


class Embed(Task[EmbedExample, EmbedFeature]):
    name = "embed"
    example = EmbedExample
    model_class = BertModel
    metric = RETRIEVAL_METRIC
    formats = ("jsonl", "csv", "tsv")
    formats_note = ", .parquet, or a retrieval folder (corpus.jsonl, queries.jsonl, qrels/)"
    options = EmbedOptions
    reads_lines = False

    # ----- data ---------------------------------------------------------------------------------
    def read(
        self, spec: str | os.PathLike[str], *, split: str | None = None, labeled: bool = True, **settings: Any
    ) -> list[Any]:
        """Rows of a file (JSONL / CSV / TSV / Parquet), a retrieval folder (as one RetrievalSet), or the built-in
        set's split: training pairs, or the dev / test retrieval set."""
        path = os.fspath(spec) if isinstance(spec, (str, os.PathLike)) else spec
        if isinstance(path, str) and os.path.isdir(path) and split is None:
            from ..data.retrieval import read_retrieval

            return [read_retrieval(path)]
        if isinstance(path, str) and path.endswith(".parquet") and split is None:
            from ..data.pairs import read_rows

            return _examples(read_rows(path))
        return super().read(spec, split=split, labeled=labeled, **settings)

    def parse(self, path: str, lines: list[str], fmt: str, columns: dict[str, Any], *, labeled: bool) -> list[Any]:
        return _examples(rows_of(path, iter(records.table(path, lines, fmt).records), "line"))

    def builtin_examples(self, split: str, labeled: bool) -> list[Any]:
        from ..data.retrieval import builtin_pairs, builtin_retrieval

        if split == "train":
            return [EmbedExample([query, passage]) for query, passage in builtin_pairs(split)]
        return [builtin_retrieval(split)]

    def count(self, examples: list[Any]) -> int:
        return sum(len(e.queries) if not isinstance(e, EmbedExample) else 1 for e in examples)

    def is_empty(self, example: Any, tok: Tokenizer | None = None) -> bool:
        return False  # the readers refuse an empty text, naming its line

    # ----- features and batches -----------------------------------------------------------------
    def encode(
        self,
        tok: Tokenizer,
        examples: list[EmbedExample],
        seq_len: int,
        stride: int,
        label2id: dict[str, int] | None,
        problem_type: str | None,
    ) -> list[EmbedFeature]:
        """One feature per row: each text's ids cut to seq_len; a one-text row becomes (text, text) (SimCSE)."""
        training_rows(examples, "the training data")
        width = len(examples[0].texts)
        flat = [text for e in examples for text in (e.texts * 2 if width == 1 else e.texts)]
        ids = tok(flat, truncation=True, max_length=seq_len, return_token_type_ids=False, return_attention_mask=False)[
            "input_ids"
        ]
        k = max(2, width)
        features = []
        for i, e in enumerate(examples):
            texts = ids[i * k : (i + 1) * k]
            features.append(
                EmbedFeature(
                    input_ids=texts[0], token_type_ids=[0] * len(texts[0]), example=i, labels=e.label, texts=texts
                )
            )
        return features

    def collate(self, features: list[EmbedFeature], pad_id: int) -> dict[str, Any]:
        """The batch's texts column by column, (columns x B, S), and `columns`; the scores (B,) of scored rows."""
        columns = len(features[0].texts)
        batch: dict[str, Any] = dict(id_batch([f.texts[c] for c in range(columns) for f in features], pad_id))
        batch["columns"] = columns
        if features[0].labels is not None:
            batch["labels"] = torch.tensor([float(f.labels) for f in features])  # type: ignore[arg-type]
        return batch

    # ----- training -----------------------------------------------------------------------------
    def training_loss(self, opts: Any, examples: list[EmbedExample], tok: Tokenizer) -> LossFn:
        training_rows(examples, "the training data")
        name = loss_name(opts.loss, examples[0].label is not None)
        if name == "CoSENTLoss" and examples[0].label is None:
            raise TrainingError(
                "--loss CoSENTLoss needs scored pairs: rows of text1, text2 and a label / score column; the training "
                "data has no label column"
            )
        check_in_batch(opts, name, hard_negatives=len(examples[0].texts) > 2)
        return EmbeddingLoss(
            name,
            pooling_of(opts).mode,
            symmetric=opts.symmetric,
            dims=opts.matryoshka_dims or (),
            mini_batch_size=opts.mini_batch_size,
        )

    def prepare_model(self, model: BertPreTrainedModel, opts: Any) -> None:
        """Check --matryoshka-dims against the model's width; freeze the pooler: it is not in the vectors, so it has
        no gradient (and DDP expects none)."""
        hidden, dims = model.config.hidden_size, list(opts.matryoshka_dims or [])
        bad = [d for d in dims if not 0 < d <= hidden]
        if bad or len(set(dims)) < len(dims):
            what = f"{bad[0]} is not between 1 and the model's {hidden}" if bad else "a size is given twice"
            raise TrainingError(f"--matryoshka-dims {' '.join(map(str, dims))}: {what}")
        if getattr(model, "pooler", None) is not None:
            model.pooler.requires_grad_(False)

    def write_model_files(self, model: BertPreTrainedModel, folder: str, opts: Any) -> list[str]:
        """The sentence-transformers modules around the BertModel at the folder's root."""
        pooling = pooling_of(opts)
        pooling = Pooling(pooling.mode, pooling.normalize, opts.seq_len, "the training settings")
        write_pooling(folder, pooling, model.config.hidden_size)
        path = os.path.join(folder, "config_sentence_transformers.json")
        settings = {
            "model_type": "SentenceTransformer",
            "__version__": {"bertkit": __version__, "pytorch": torch.__version__.split("+")[0]},
            "prompts": {},
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
            **({"matryoshka_dims": sorted(set(opts.matryoshka_dims), reverse=True)} if opts.matryoshka_dims else {}),
        }
        atomic_write_text(path, json.dumps(settings, indent=2) + "\n")
        return [os.path.join(folder, "modules.json"), path]

    def untrained(self, missing: list[str]) -> bool:
        return any(not name.startswith("pooler.") for name in missing)  # the pooler is not in the vectors

    # ----- results ------------------------------------------------------------------------------
    def evaluate_model(self, model: InferenceModel, tok: Tokenizer, examples: list[Any], opts: Any) -> dict[str, Any]:
        """Retrieval metrics (a retrieval set, or pairs made one), or the similarity of scored pairs."""
        pooling, limit = pooling_of(opts), opts.seq_len or model.config.max_position_embeddings

        def encode(texts: list[str]) -> Tensor:
            return vectors(model, tok, texts, pooling.mode, limit)

        if examples and isinstance(examples[0], EmbedExample) and examples[0].label is not None:
            return similarity_report(encode, examples)
        return retrieval_report(encode, retrieval_set(examples))

    def report(
        self, config: BertConfig, features: list[Any], outputs: list[Any], examples: list[Any], opts: Any
    ) -> dict[str, Any]:
        raise TaskDataError("embed evaluates through evaluate_model (vectors, not logits)")

    def score(self, report: dict[str, Any], problem_type: str | None) -> float:
        return float(report[RETRIEVAL_METRIC] if RETRIEVAL_METRIC in report else report[SIMILARITY_METRIC])

    def predictions(
        self, config: BertConfig, features: list[Any], outputs: list[Any], examples: list[Any], opts: Any
    ) -> list[dict[str, Any]]:
        raise TaskDataError("an embedding model has no predictions: `bertkit embed --model DIR` gives its vectors")


# ----- the loss ------------------------------------------------------------------------------------
def loss_name(asked: str | None, labelled: bool) -> str:
    """The loss: --loss, else the data's kind (a label column: CoSENTLoss; none: MultipleNegativesRankingLoss)."""
    name = asked or ("CoSENTLoss" if labelled else "MultipleNegativesRankingLoss")
    if name not in EMBED_LOSSES:
        raise TrainingError(f"--loss {name}: the embed task trains with {' or '.join(EMBED_LOSSES)}")
    return name


class EmbeddingLoss:
    """A micro-batch's loss (the shared loop's LossFn): one forward over all its texts, pooled, the loss over the
    columns; GradCache with --mini-batch-size."""

    def __init__(
        self, name: str, mode: str, *, symmetric: bool = False, dims: Sequence[int] = (), mini_batch_size: int = 0
    ) -> None:
        self.name, self.mode = name, mode  # the loss's name, the pooling mode
        self.symmetric, self.dims, self.mini_batch_size = symmetric, list(dims), mini_batch_size

    def __call__(self, model: torch.nn.Module, batch: dict[str, Any], weights: LossWeights) -> Tensor:
        batch = dict(batch)  # the caller's batch keeps its keys
        columns, labels = batch.pop("columns"), batch.pop("labels", None)
        if self.mini_batch_size and distributed():
            raise TrainingError(
                "--mini-batch-size (GradCache) runs in one process: under torchrun DDP would average the gradients of "
                "each re-embedded part; leave it out, or train in one process"
            )
        if self.mini_batch_size:
            from ..gradcache import cached_loss, split_features

            rows = batch["input_ids"].shape[0] // columns
            parts = [
                split_features({k: v[c * rows : (c + 1) * rows] for k, v in batch.items()}, self.mini_batch_size)
                for c in range(columns)
            ]
            loss = cached_loss(lambda part: self.embed(model, part), parts, lambda cols: self.loss(cols, labels))
        else:
            vectors = self.embed(model, batch)  # (columns x B, H)
            loss = self.loss(list(vectors.view(columns, -1, vectors.shape[-1]).unbind(0)), labels)
        return loss * weights.rows

    def embed(self, model: torch.nn.Module, batch: dict[str, Tensor]) -> Tensor:
        """(N, S) ids -> (N, H) pooled vectors, float32 (the loss runs in float32 under autocast)."""
        hidden = model(**batch).last_hidden_state  # (N, S, H)
        return pool(hidden, batch["attention_mask"], self.mode).float()

    def loss(self, columns: list[Tensor], labels: Tensor | None) -> Tensor:
        """One (B, H) tensor per column -> the loss (Matryoshka: summed over the leading dimensions asked)."""
        from .. import losses

        inner = self.inner(labels)
        return losses.matryoshka(inner, columns, self.dims) if self.dims else inner(columns)

    def inner(self, labels: Tensor | None) -> Callable[[list[Tensor]], Tensor]:
        from .. import losses

        if self.name == "CoSENTLoss":
            if labels is None:
                raise TrainingError("CoSENTLoss needs scored pairs: rows of text1, text2 and a label / score column")
            return lambda cols: losses.cosent(cols[0], cols[1], labels)
        return lambda cols: losses.multiple_negatives_ranking(
            cols[0], cols[1:], symmetric=self.symmetric, gather=distributed()
        )


def distributed() -> bool:
    """Whether this process is one of several (torchrun): in-batch candidates then come from every rank."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def check_in_batch(opts: Any, loss: str, hard_negatives: bool = False) -> None:
    """A loss over the rows of a batch needs two: at --batch-size 1 MultipleNegativesRankingLoss would rank a
    positive against nothing (unless the row has its own negatives), CoSENTLoss order one pair against nothing."""
    if opts.batch_size < 2 and not (loss == "MultipleNegativesRankingLoss" and hard_negatives):
        what = (
            "ranks each pair's score against the other pairs' of its batch"
            if loss == "CoSENTLoss"
            else "ranks each positive against the other rows of its batch"
        )
        raise TrainingError(
            f"--batch-size {opts.batch_size}: {loss} {what}; use --batch-size 2 or more (with --mini-batch-size for "
            "a large batch in little memory)"
        )


# ----- settings ------------------------------------------------------------------------------------
def pooling_of(opts: Any) -> Pooling:
    """The pooling: --pooling / --normalize over the model folder's (sentence-transformers) settings, else mean."""
    model = getattr(opts, "model", None)
    folder = read_pooling(model) if isinstance(model, str) and os.path.isdir(model) else None
    return pooling_settings(folder, opts.pooling, opts.normalize)


def training_rows(examples: list[Any], where: str) -> None:
    """Training rows: pairs (not a retrieval folder), every row with as many texts."""
    if not examples:
        raise TaskDataError(f"{where}: no rows")
    if not isinstance(examples[0], EmbedExample):
        raise TaskDataError(
            f"{where}: a retrieval set (queries, corpus, relevant pairs) is evaluation data; train on rows of "
            "(anchor, positive[, negatives]) or (text1, text2, score)"
        )
    width = len(examples[0].texts)
    uneven = next((i for i, e in enumerate(examples) if len(e.texts) != width), None)
    if uneven is not None:
        raise TaskDataError(
            f"{where}: row {uneven + 1} has {len(examples[uneven].texts)} texts, the first has {width}; every row "
            "needs as many"
        )


# ----- evaluation ----------------------------------------------------------------------------------
def retrieval_set(examples: list[Any]) -> RetrievalSet:
    """A retrieval set as read, or one made of pairs: queries = the anchors, corpus = every other text, each
    anchor's relevant text its positive (an anchor given twice: both positives)."""
    from ..data.retrieval import RetrievalSet

    if not examples:
        raise TaskDataError("no evaluation data")
    if not isinstance(examples[0], EmbedExample):
        return examples[0]
    if len(examples[0].texts) < 2:
        raise TaskDataError("evaluation rows need an anchor and its positive (and maybe negatives)")
    queries: dict[str, str] = {}
    corpus: dict[str, str] = {}
    relevant: dict[str, set[str]] = {}
    for e in examples:
        qid = queries.setdefault(e.texts[0], f"q{len(queries)}")
        ids = [corpus.setdefault(text, f"d{len(corpus)}") for text in e.texts[1:]]
        relevant.setdefault(qid, set()).add(ids[0])
    return RetrievalSet(
        queries={qid: text for text, qid in queries.items()},
        corpus={cid: text for text, cid in corpus.items()},
        relevant=relevant,
        source="pairs",
    )


@torch.inference_mode()
def vectors(model: InferenceModel, tok: Tokenizer, texts: list[str], mode: str, limit: int, batch: int = 64) -> Tensor:
    """(len(texts), H) pooled float32 vectors of a model being trained or evaluated, texts cut to `limit` tokens and
    batched by length (bertkit.embed.Encoder is the serving side of the same computation)."""
    model.eval()
    rows = tok(texts, truncation=True, max_length=limit, return_token_type_ids=False, return_attention_mask=False)[
        "input_ids"
    ]
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
    device = next(model.parameters()).device
    out = torch.empty(len(rows), model.config.hidden_size)
    for start in range(0, len(order), batch):
        chunk = order[start : start + batch]
        inputs = {k: v.to(device) for k, v in id_batch([rows[i] for i in chunk], tok.pad_token_id).items()}
        out[chunk] = pool(model(**inputs).last_hidden_state, inputs["attention_mask"], mode).float().cpu()
    return out


def retrieval_report(encode: Callable[[list[str]], Tensor], data: RetrievalSet) -> dict[str, Any]:
    """sentence-transformers' InformationRetrievalEvaluator's numbers for the vectors encode(texts) gives."""
    from ..metrics.retrieval import information_retrieval

    query_ids, corpus_ids = list(data.queries), list(data.corpus)
    queries = encode([data.queries[q] for q in query_ids])
    corpus = encode([data.corpus[c] for c in corpus_ids])
    report = information_retrieval(queries, corpus, query_ids, corpus_ids, data.relevant)
    return {**report, BM25_METRIC: bm25_ndcg(data), "queries": len(query_ids), "corpus": len(corpus_ids)}


_BM25: list[tuple[RetrievalSet, float]] = []  # the last set's BM25 score: evaluations during training repeat it


def bm25_ndcg(data: RetrievalSet) -> float:
    """NDCG@10 of BM25 on the set: the classical baseline, reported beside the model's."""
    from ..bm25 import bm25_ranking
    from ..metrics.retrieval import ranking_metrics

    if not _BM25 or _BM25[0][0] is not data:
        ranked = bm25_ranking(data, k=10)
        _BM25[:] = [(data, ranking_metrics(ranked, data.relevant, score_name="bm25")["bm25_ndcg@10"])]
    return _BM25[0][1]


def similarity_report(encode: Callable[[list[str]], Tensor], examples: list[EmbedExample]) -> dict[str, Any]:
    """Pearson and Spearman correlation of the pairs' cosine with their scores (EmbeddingSimilarityEvaluator's
    pearson_cosine / spearman_cosine)."""
    from ..metrics.regression import regression_report

    a, b = encode([e.texts[0] for e in examples]), encode([e.texts[1] for e in examples])
    cosine = torch.nn.functional.cosine_similarity(a.double(), b.double()).numpy()
    numbers = regression_report(np.array([e.label for e in examples], dtype=np.float64), cosine)
    return {"pearson_cosine": numbers["pearson"], "spearman_cosine": numbers["spearman"], "pairs": len(examples)}


def _examples(rows: Any) -> list[EmbedExample]:
    labels = rows.labels if rows.labels is not None else [None] * len(rows.texts)
    return [EmbedExample(texts, label) for texts, label in zip(rows.texts, labels)]


EMBED = Embed()

__all__ = ["EMBED", "EmbedExample", "EmbedOptions", "POOLING_MODES"]
