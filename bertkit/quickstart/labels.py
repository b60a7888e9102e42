"""The quickstart's fewer-labels stage: balanced subsets of the training reviews, each fine-tuned from the
pretrained model and from random weights."""

from __future__ import annotations

import os

from .messages import say
from .outdir import LABELS, PRETRAIN, write_jsonl
from .profiles import Budget
from .training import finetune


def labelled_subset(examples: list, n: int, seed: int) -> list:
    """n examples, the same number of each label (as far as they go), picked at random by seed."""
    import random

    rng = random.Random(seed)
    by_label: dict = {}
    for e in examples:
        by_label.setdefault(e.label, []).append(e)
    picked = [
        e
        for label in sorted(by_label)
        for e in rng.sample(by_label[label], min(len(by_label[label]), n // len(by_label)))
    ]
    rng.shuffle(picked)
    return picked


def few_labels(budget: Budget, data: dict, out: str, common: list[str], seed: int) -> dict:
    """For each size: a labelled subset of the training reviews, then the pretrained model and the same
    architecture from random weights fine-tuned on it (a fixed number of steps, no dev evaluation)."""
    from ..tasks import read_task

    folder = os.path.join(out, LABELS)
    os.makedirs(folder)
    builtin = data["train"].startswith("builtin:")
    train = read_task("classify", data["train"], split="train" if builtin else None)
    pt_dir = os.path.join(out, PRETRAIN)
    result: dict = {"commands": [], "sizes": {}, "facts": {}}
    for n, steps in budget.few_labels:
        path = write_jsonl(
            os.path.join(folder, f"train-{n}.jsonl"),
            [{"text": e.text, "label": e.label} for e in labelled_subset(train, n, seed)],
        )
        runs = {}
        for name, model, tokenizer in (("pretrained", pt_dir, None), ("scratch", budget.model, pt_dir)):
            runs[name] = os.path.join(folder, f"{name}-{n}")
            say(f"{n} labels, {name}:")
            argv = few_labels_argv(budget, model, tokenizer, path, steps, common, runs[name])
            trained = finetune(argv, control=name == "scratch")
            result["commands"] += trained["commands"]
            if name == "scratch":
                result["facts"][f"{name}-{n}"] = trained["facts"]
        result["sizes"][n] = {"train": path, **runs}
    result["all"] = len(train)
    return result


def few_labels_argv(
    budget: Budget, model: str, tokenizer: str | None, train: str, steps: int, common: list[str], out: str
) -> list[str]:
    """`bertkit finetune`'s flags for one subset: a fixed number of steps, no dev evaluation."""
    argv = ["--task", "classify", "--model", model] + (["--tokenizer", tokenizer] if tokenizer else [])
    return argv + [
        "--train",
        train,
        "--steps",
        str(steps),
        "--batch-size",
        str(budget.few_labels_batch),
        "--lr",
        str(budget.finetune_lr),
        "--seq-len",
        str(budget.finetune_seq_len),
        *common,
        "--out",
        out,
    ]
