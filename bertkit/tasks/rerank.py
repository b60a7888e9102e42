"""rerank: train a cross-encoder, one relevance score per (query, document) pair (sentence-transformers' CrossEncoder).

Data (bertkit/data/pairs.py: input columns by order, a label / score column is the label):
    query, document, label                 -> BinaryCrossEntropyLoss (the default with a label): label 1 relevant,
                                              0 not (or a grade in between)
    query, positive[, negative_1 ..]       -> the positive is relevant, the negatives are not: BinaryCrossEntropyLoss
                                              over those pairs (the default), MultipleNegativesRankingLoss (each
                                              query's positive above its negatives and every other document of the
                                              batch), or ListNetLoss (each query's documents as one list)
    rows --encode--> RerankFeature: the (query, document) pairs of a row as [CLS] query [SEP] document [SEP] ids
         --collate--> every pair of the batch, padded (P, S); `groups`: how many pairs each row has; the labels
         --training_loss--> BertForSequenceClassification with one output -> logits (P,) -> the loss (losses.py)
Evaluation groups the rows by query (its documents and their labels) and scores each query's documents as
sentence-transformers' CrossEncoderRerankingEvaluator does: map, mrr@10, ndcg@10 (the best model's).
The model folder is a classifier with one output (problem_type regression, so `bertkit serve` answers /rerank
with sigmoid(logit), as `CrossEncoder(folder).predict` does with its default Sigmoid, named in config.json).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..data import records
from ..data.batching import id_batch
from ..data.pairs import rows_of
from ..errors import TrainingError
from ..files import atomic_write_text
from ..heads import BertForSequenceClassification
from .base import MODEL_INPUTS, Feature, Head, LossChoice, Task
from .embed import check_in_batch

if TYPE_CHECKING:
    from ..config import BertConfig
    from ..model import BertPreTrainedModel
    from ..tokenizer import Tokenizer
    from ..train.batches import LossWeights
    from ..train.loop import LossFn

RERANK_LOSSES = ("BinaryCrossEntropyLoss", "MultipleNegativesRankingLoss", "ListNetLoss")
SIGMOID = "torch.nn.modules.activation.Sigmoid"


@dataclass
class RerankExample:
    """A query and its documents with their labels (1: relevant, 0: not; a grade in between)."""

    query: str
    documents: list[str]
    labels: list[float]
    from_label_column: bool = False  # a (query, document, label) row, not (query, positive, negatives...)


@dataclass(kw_only=True)
class RerankFeature(Feature):
    """The (query, document) pairs of one example as ids (input_ids: the first pair's, as every Feature has)."""

    pairs: list[list[int]]
    pair_types: list[list[int]]
    scores: list[float]  # the documents' labels
    query: str
    documents: list[str]

    @property
    def tokens(self) -> int:
        return sum(len(ids) for ids in self.pairs)


@dataclass
class RerankOptions(LossChoice):
    """rerank's own settings: the loss (LossChoice)."""


class Rerank(Task[RerankExample, RerankFeature]):
    name = "rerank"
    example = RerankExample
    model_class = BertForSequenceClassification
    metric = "ndcg@10"
    formats = ("jsonl", "csv", "tsv")
    formats_note = ", .parquet"
    options = RerankOptions
    reads_lines = False

    # ----- data ---------------------------------------------------------------------------------
    def read(
        self, spec: str | os.PathLike[str], *, split: str | None = None, labeled: bool = True, **settings: Any
    ) -> list[RerankExample]:
        path = os.fspath(spec) if isinstance(spec, (str, os.PathLike)) else spec
        if isinstance(path, str) and path.endswith(".parquet") and split is None:
            from ..data.pairs import read_rows

            return _examples(read_rows(path))
        return super().read(spec, split=split, labeled=labeled, **settings)

    def parse(
        self, path: str, lines: list[str], fmt: str, columns: dict[str, Any], *, labeled: bool
    ) -> list[RerankExample]:
        return _examples(rows_of(path, iter(records.table(path, lines, fmt).records), "line"))

    def head(self, train: list[RerankExample], evaluation: list[RerankExample], *a: Any, **k: Any) -> Head:
        """One output, the relevance logit (problem_type regression: what serve's /rerank answers from)."""
        return Head(None, "regression", {"num_labels": 1})

    def is_empty(self, example: RerankExample, tok: Tokenizer | None = None) -> bool:
        return False  # the readers refuse an empty text, naming its line

    # ----- features and batches -----------------------------------------------------------------
    def encode(
        self,
        tok: Tokenizer,
        examples: list[RerankExample],
        seq_len: int,
        stride: int,
        label2id: dict[str, int] | None,
        problem_type: str | None,
    ) -> list[RerankFeature]:
        """One feature per example: its (query, document) pairs cut to seq_len as a tokenizer cuts a pair."""
        queries = [e.query for e in examples for _ in e.documents]
        documents = [d for e in examples for d in e.documents]
        encoded = pair_ids(tok, queries, documents, seq_len)
        features, at = [], 0
        for i, e in enumerate(examples):
            ids, types = (
                encoded["input_ids"][at : at + len(e.documents)],
                encoded["token_type_ids"][at : at + len(e.documents)],
            )
            at += len(e.documents)
            features.append(
                RerankFeature(
                    input_ids=ids[0],
                    token_type_ids=types[0],
                    example=i,
                    pairs=ids,
                    pair_types=types,
                    scores=e.labels,
                    query=e.query,
                    documents=e.documents,
                )
            )
        return features

    def collate(self, features: list[RerankFeature], pad_id: int) -> dict[str, Any]:
        """Every pair of the batch (P, S), `groups` (pairs per feature), the labels (P,), and the texts (the
        in-batch negatives of MultipleNegativesRankingLoss pair a query with other rows' documents)."""
        batch: dict[str, Any] = dict(
            id_batch([p for f in features for p in f.pairs], pad_id, [t for f in features for t in f.pair_types])
        )
        batch["groups"] = [len(f.pairs) for f in features]
        batch["labels"] = torch.tensor([s for f in features for s in f.scores])
        batch["texts"] = [(f.query, f.documents) for f in features]
        return batch

    def outputs(self, features: list[RerankFeature], out: Any) -> list[Any]:
        """Each feature's logits, one per pair (run_model's batches: the pairs of its features in order)."""
        logits = out.logits.float().cpu().view(-1)
        result, at = [], 0
        for f in features:
            result.append(logits[at : at + len(f.pairs)])
            at += len(f.pairs)
        return result

    # ----- training -----------------------------------------------------------------------------
    def training_loss(self, opts: Any, examples: list[RerankExample], tok: Tokenizer) -> LossFn:
        name = opts.loss or "BinaryCrossEntropyLoss"
        if name not in RERANK_LOSSES:
            raise TrainingError(f"--loss {name}: the rerank task trains with {', '.join(RERANK_LOSSES)}")
        if name != "BinaryCrossEntropyLoss" and examples and examples[0].from_label_column:
            raise TrainingError(
                f"--loss {name} ranks each query's positive (the second column) above its negatives (the columns "
                "after it): train it on rows of query, positive[, negatives], without a label column"
            )
        if name == "MultipleNegativesRankingLoss":
            check_in_batch(opts, name)
        return RerankLoss(name, tok, opts.seq_len)

    def write_model_files(self, model: BertPreTrainedModel, folder: str, opts: Any) -> list[str]:
        """config.json says, for sentence-transformers' CrossEncoder, that the score is sigmoid(logit)."""
        path = os.path.join(folder, "config.json")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        config["sentence_transformers"] = {"activation_fn": SIGMOID}
        atomic_write_text(path, json.dumps(config, indent=2, ensure_ascii=False) + "\n")
        return [path]

    # ----- results ------------------------------------------------------------------------------
    def report(
        self, config: BertConfig, features: list[RerankFeature], outputs: list[Any], examples: list[Any], opts: Any
    ) -> dict[str, Any]:
        """CrossEncoderRerankingEvaluator's map, mrr@10, ndcg@10 over the queries (rows of one query together)."""
        from ..metrics.retrieval import reranking_metrics

        lists: dict[str, tuple[list[float], list[float]]] = {}
        for f, logits in zip(features, outputs):
            scores, labels = lists.setdefault(f.query, ([], []))
            scores += logits.tolist()
            labels += f.scores
        report = reranking_metrics([(s, [int(x > 0) for x in y]) for s, y in lists.values()], at_k=10)
        return {**report, "queries": len(lists)}

    def predictions(
        self, config: BertConfig, features: list[RerankFeature], outputs: list[Any], examples: list[Any], opts: Any
    ) -> list[dict[str, Any]]:
        return [
            {"query": f.query, "scores": [float(torch.sigmoid(x)) for x in logits]}
            for f, logits in zip(features, outputs)
        ]


class RerankLoss:
    """A micro-batch's loss (the shared loop's LossFn) for the cross-encoder losses."""

    def __init__(self, name: str, tok: Tokenizer, seq_len: int) -> None:
        self.name, self.tok, self.seq_len = name, tok, seq_len

    def __call__(self, model: torch.nn.Module, batch: dict[str, Any], weights: LossWeights) -> Tensor:
        from .. import losses

        groups, labels, texts = batch.pop("groups"), batch.pop("labels"), batch.pop("texts")
        logits = model(**{k: batch[k] for k in MODEL_INPUTS}).logits.view(-1).float()  # (P,)
        if self.name == "BinaryCrossEntropyLoss":
            loss = losses.binary_cross_entropy(logits, labels.to(logits.dtype))
        elif self.name == "ListNetLoss":
            lists, mask = _lists(logits, groups)
            target, _ = _lists(labels.to(logits.dtype), groups)
            loss = losses.listnet(lists, target, mask)
        else:
            loss = losses.cross_encoder_ranking(self._ranking_logits(model, logits, groups, texts))
        return loss * weights.rows

    def _ranking_logits(self, model: torch.nn.Module, own: Tensor, groups: list[int], texts: list[Any]) -> Tensor:
        """(B, 1 + in-batch + hard) logits: each query's positive, every other row's documents, its negatives."""
        from .. import losses

        if len(set(groups)) != 1:
            raise TrainingError("MultipleNegativesRankingLoss needs every row to have as many negatives")
        rows, columns = len(groups), groups[0]
        documents = [texts[r][1][c] for c in range(columns) for r in range(rows)]  # column by column
        others = losses.in_batch_negatives(rows, columns, None)  # (B, k) document numbers
        queries = [texts[r][0] for r in range(rows) for _ in range(others.shape[1])]
        pairs = pair_ids(self.tok, queries, [documents[int(j)] for j in others.view(-1)], self.seq_len)
        device = own.device
        batch = {
            k: v.to(device)
            for k, v in id_batch(pairs["input_ids"], self.tok.pad_token_id, pairs["token_type_ids"]).items()
        }
        in_batch = model(**batch).logits.view(rows, -1).float()
        own = own.view(rows, columns)  # positive, hard negatives
        return torch.cat([own[:, :1], in_batch, own[:, 1:]], dim=1)


def pair_ids(tok: Tokenizer, queries: list[str], documents: list[str], seq_len: int) -> dict[str, list[list[int]]]:
    """[CLS] query [SEP] document [SEP] ids and token types of each pair, cut to seq_len as the tokenizer cuts a
    pair (the longer text first), as sentence-transformers' CrossEncoder tokenizes."""
    encoded = tok(
        queries,
        documents,
        truncation=True,
        max_length=seq_len,
        return_attention_mask=False,
        return_token_type_ids=True,
    )
    return {"input_ids": encoded["input_ids"], "token_type_ids": encoded["token_type_ids"]}


def _lists(values: Tensor, groups: list[int]) -> tuple[Tensor, Tensor]:
    """Flat per-pair values (P,) -> (B, n) per row, padded, and the mask of real entries."""
    rows, width = len(groups), max(groups)
    out = values.new_zeros(rows, width)
    mask = torch.zeros(rows, width, dtype=torch.bool, device=values.device)
    at = 0
    for r, n in enumerate(groups):
        out[r, :n], mask[r, :n] = values[at : at + n], True
        at += n
    return out, mask


def _examples(rows: Any) -> list[RerankExample]:
    """Rows -> examples: (query, document, label), or (query, positive, negatives...) labelled 1, 0, 0, ..."""
    if len(rows.columns) < 2:
        raise TrainingError(f"{rows.source}: the rerank task reads rows of a query and at least one document")
    if rows.labels is not None:
        if len(rows.columns) != 2:
            raise TrainingError(
                f"{rows.source}: a labelled row is one query, one document and its label; it has {len(rows.columns)} "
                f"texts ({', '.join(rows.columns)})"
            )
        return [RerankExample(t[0], [t[1]], [label], True) for t, label in zip(rows.texts, rows.labels)]
    return [RerankExample(t[0], t[1:], [1.0] + [0.0] * (len(t) - 2)) for t in rows.texts]


RERANK = Rerank()
