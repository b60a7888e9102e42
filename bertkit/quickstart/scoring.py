"""The quickstart's scoring stages: the bag-of-characters baseline, every fine-tuned model on the test split, and
test accuracy by number of labels."""

from __future__ import annotations

import json
import os
import shlex

from ..options import parse
from .messages import say
from .outdir import FINETUNE, SCRATCH, TEST
from .profiles import Budget


def bag_of_chars(data: dict, few: dict) -> dict:
    """The logistic regression on the same labels, scored on the test split (bertkit.baseline)."""
    from ..baseline import BagOfChars

    dev, test = read_reviews(data["dev"] or data["train"], "dev"), read_reviews(data["test"], "test")
    result: dict = {"commands": []}
    for n, train in [("all", data["train"])] + [(n, r["train"]) for n, r in few["sizes"].items()]:
        clf = BagOfChars.fit(read_reviews(train, "train"), dev)
        result[n] = {"test_accuracy": clf.accuracy(test), "l2": clf.l2, "dev_accuracy": clf.dev_accuracy}
        say(f"{n} labels: test accuracy {result[n]['test_accuracy']:.4f} (L2 {clf.l2:g}, chosen on dev)")
    return result


def read_reviews(spec: str, split: str) -> list:
    """The labelled reviews of a built-in set's `split`, or of a JSONL file."""
    from ..tasks import read_task

    return read_task("classify", spec, split=split if spec.startswith("builtin:") else None)


def evaluate_all(budget: Budget, data: dict, out: str, few: dict) -> dict:
    """`bertkit evaluate` on every fine-tuned model; a confusion matrix picture of the two full-set ones."""
    folder = os.path.join(out, TEST)
    os.makedirs(folder)
    result: dict = {"commands": []}
    models = {"pretrained": os.path.join(out, FINETUNE), "scratch": os.path.join(out, SCRATCH)}
    for n, runs in few["sizes"].items():
        models.update({f"pretrained-{n}": runs["pretrained"], f"scratch-{n}": runs["scratch"]})
    for name, model_dir in models.items():
        report_path = os.path.join(folder, f"{name}.json")
        argv = (
            ["--model", model_dir, "--data", data["test"]]
            + (["--split", "test"] if data["test"].startswith("builtin:") else [])
            + ["--seq-len", str(budget.finetune_seq_len), "--json", report_path]
        )
        say(f"{name}:")
        result[name] = evaluate(argv, report_path)
        if name in ("pretrained", "scratch"):
            plot_confusion(result[name], name, os.path.join(folder, f"confusion_matrix_{name}.png"))
        result["commands"].append(shlex.join(["bertkit", "evaluate", *argv]))
    return result


def evaluate(argv: list[str], report_path: str) -> dict:
    """`bertkit evaluate argv` in this process, its report printed; the JSON report it wrote to report_path."""
    from ..evaluation import EvaluateConfig, run_evaluate
    from ..metrics import format_report

    print(format_report(run_evaluate(parse(EvaluateConfig, argv, prog="bertkit evaluate"))))
    with open(report_path, encoding="utf-8") as fh:
        return json.load(fh)


def plot_confusion(report: dict, name: str, path: str) -> None:
    """The test split's confusion matrix of the full-set model `name` (pretrained or scratch), as a picture."""
    from ..metrics import plot_confusion_matrix

    title = "pretrained, then fine-tuned" if name == "pretrained" else "from scratch"
    plot_confusion_matrix(report["confusion_matrix"], list(report["per_class"]), path, title=f"test split: {title}")


def label_efficiency(few: dict, base: dict, test: dict) -> list[dict]:
    """Test accuracy by number of labelled reviews: pretrained, from scratch, bag of characters."""
    rows = [
        {
            "labels": n,
            "pretrained": test[f"pretrained-{n}"]["accuracy"],
            "scratch": test[f"scratch-{n}"]["accuracy"],
            "bag_of_chars": base[n]["test_accuracy"],
        }
        for n in few["sizes"]
    ]
    rows.append(
        {
            "labels": few["all"],
            "pretrained": test["pretrained"]["accuracy"],
            "scratch": test["scratch"]["accuracy"],
            "bag_of_chars": base["all"]["test_accuracy"],
        }
    )
    return rows
