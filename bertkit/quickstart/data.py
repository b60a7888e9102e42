"""The quickstart's data stage: where every later stage reads its texts (the built-in sets, or a sliver of them)."""

from __future__ import annotations

import os

from .messages import say
from .outdir import DATA, write_jsonl
from .profiles import CORPUS, SENTIMENT, Budget


def prepare_data(budget: Budget, out: str) -> dict:
    """Where each stage reads: the built-in sets, or with a subset the first N of each as JSONL files."""
    if not budget.subset:
        say(f"built in: {CORPUS} to pretrain on; {SENTIMENT}'s train / dev / test split to fine-tune and test on")
        return {"corpus": CORPUS, "train": SENTIMENT, "dev": None, "test": SENTIMENT}
    from ..data.corpus import read_corpus
    from ..tasks import read_task

    folder = os.path.join(out, DATA)
    os.makedirs(folder)
    sizes = {"train": budget.subset, "dev": max(16, budget.subset // 4), "test": max(16, budget.subset // 4)}
    data = {
        "corpus": write_jsonl(
            os.path.join(folder, "peoples-daily.jsonl"), [{"text": d} for d in read_corpus(CORPUS)[: budget.subset]]
        )
    }
    for split, n in sizes.items():
        examples = balanced(read_task("classify", SENTIMENT, split=split), n)
        data[split] = write_jsonl(
            os.path.join(folder, f"sentiment-{split}.jsonl"), [{"text": e.text, "label": e.label} for e in examples]
        )
    say(f"a subset: {budget.subset} articles of {CORPUS}; {sizes} reviews of {SENTIMENT}, in {folder}")
    return data


def balanced(examples: list, n: int) -> list:
    """The first n examples taking the labels in turn (a split's first reviews can share one label)."""
    by_label: dict = {}
    for e in examples:
        by_label.setdefault(e.label, []).append(e)
    return [e for group in zip(*by_label.values()) for e in group][:n]
