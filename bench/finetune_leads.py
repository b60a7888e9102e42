"""Fine-tuning leads on the payoff bench's models: the same pretrained `mini` (and the same from random weights)
fine-tuned with another learning rate or more steps than bench/pretraining_transfer.py's budgets, chosen on dev.

    python bench/finetune_leads.py LEAD [LEAD ...] [--model mlm] [--seeds 0] [--labels 200,1000]

A lead changes the fine-tuning only (LEADS below); `--model` names the payoff attempt whose pretrained seed-s
folder (runs/payoff/ATTEMPT-seedS) is fine-tuned with seed s, and "scratch" the same architecture from random
weights with its vocabulary. The budgets' own runs (lead "budget") are read from bench/results/pretraining_payoff.json,
not run again. Results: bench/results/finetune_leads.{json,md}; a run already there is not run again. The table
ends with the learning rate chosen on dev per model and label count (chosen_on_dev) and its test accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pretraining_transfer as transfer  # noqa: E402

RUNS = os.path.join(os.path.dirname(HERE), "runs", "payoff")
PAYOFF = os.path.join(transfer.RESULTS, "pretraining_payoff.json")

# lead: (what it changes, {n labels: finetune_and_test overrides})
LEADS = {
    "lr5e-4": ("fine-tuning lr 5e-4 (budget: 2e-4)", {n: {"lr": 5e-4} for n in (200, 1000, "all")}),
    "lr1e-3": ("fine-tuning lr 1e-3 (budget: 2e-4)", {n: {"lr": 1e-3} for n in (200, 1000, "all")}),
    "steps3x": (
        "3x the budget's fine-tuning steps (300 / 450 / 600)",
        {n: {"steps": 3 * transfer.BUDGETS[n][0]} for n in (200, 1000, "all")},
    ),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("leads", nargs="+", choices=list(LEADS))
    p.add_argument("--model", default="mlm")
    p.add_argument("--seeds", default="0")
    p.add_argument("--labels", default="200,1000")
    args = p.parse_args()
    results, record = transfer.results_file(os.path.join(transfer.RESULTS, "finetune_leads.json"), write_table)
    labels = [n if n == "all" else int(n) for n in args.labels.split(",")]
    for seed in [int(s) for s in args.seeds.split(",")]:
        pretrained = os.path.join(RUNS, f"{args.model}-seed{seed}")
        tokenizer = os.path.join(RUNS, "tokenizer")
        for lead in args.leads:
            for n in labels:
                for name, model, tok in ((args.model, pretrained, None), ("scratch", "mini", tokenizer)):
                    if any(
                        r["lead"] == lead and r["model"] == name and r["seed"] == seed and r["labels"] == n
                        for r in results
                    ):
                        continue
                    out = os.path.join(RUNS, f"lead-{lead}-{name}-{n}-seed{seed}")
                    ft = transfer.finetune_and_test(model, tok, n, seed, out, **LEADS[lead][1][n])
                    record(
                        {
                            **ft,
                            "lead": lead,
                            "what": LEADS[lead][0],
                            "model": name,
                            "seed": seed,
                            "labels": n,
                            "measured": time.strftime("%Y-%m-%d"),
                        }
                    )


def write_table(results: list[dict]) -> None:
    payoff = json.load(open(PAYOFF, encoding="utf-8")) if os.path.exists(PAYOFF) else []

    def budget(model, n, seeds):
        rows = [
            r
            for r in payoff
            if r["attempt"] == model
            and str(r["labels"]) == str(n)
            and r["seed"] in seeds
            and (model == "scratch" or r.get("steps") == 1400)
        ]
        return rows if len(rows) == len(seeds) else []

    lines = [
        "# Fine-tuning leads on the payoff bench's models (2 CPU cores)",
        "",
        "`python bench/finetune_leads.py LEAD --model ATTEMPT` (bench/pretraining_payoff.py's models and `scratch`, "
        "the budget's batch and evaluation; the best dev evaluation kept). Choose on dev, report on test.",
        "",
        "| lead | what | model | labels | seeds | dev | test (mean; each seed) | budget's dev | budget's test |",
        "|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    keys = sorted(
        {(r["lead"], r["model"], str(r["labels"])) for r in results}, key=lambda k: (k[0], k[2], k[1] == "scratch")
    )
    for lead, model, n in keys:
        ours = sorted(
            (r for r in results if (r["lead"], r["model"], str(r["labels"])) == (lead, model, n)),
            key=lambda r: r["seed"],
        )
        seeds = [r["seed"] for r in ours]
        base = budget(model, n, seeds)
        test = [r["test_accuracy"] for r in ours]
        cell = f"{statistics.mean(test):.4f} ({', '.join(f'{v:.3f}' for v in test)})"
        lines.append(
            f"| {lead} | {ours[0]['what']} | {model} | {n} | {len(ours)} | "
            f"{statistics.mean(r['dev_accuracy'] for r in ours):.4f} | {cell} | "
            + (
                f"{statistics.mean(r['dev_accuracy'] for r in base):.4f} | "
                f"{statistics.mean(r['test_accuracy'] for r in base):.4f} |"
                if base
                else " | |"
            )
        )
    lines += chosen_on_dev(results, payoff)
    transfer.write_markdown("finetune_leads.md", lines)


def chosen_on_dev(results: list[dict], payoff: list[dict]) -> list[str]:
    """Per model and label count, the fine-tuning learning rate with the best mean dev accuracy over the seeds
    every candidate has (the budget's 2e-4 from pretraining_payoff.json, and each lr lead), and its test accuracy."""
    lines = [
        "",
        "## The learning rate chosen on dev",
        "",
        "Per model and label count, among the budget's lr (2e-4) and the lr leads run on the same seeds, the one "
        "with the best mean dev accuracy; its test accuracy is the result (choose on dev, report on test).",
        "",
        "| model | labels | seeds | dev by lr (2e-4 / 5e-4 / 1e-3) | chosen | test (mean; each seed) | "
        "the budget's test |",
        "|---|---|---:|---|---|---:|---:|",
    ]
    lrs = {"budget": "2e-4", "lr5e-4": "5e-4", "lr1e-3": "1e-3"}
    for model, n in sorted({(r["model"], str(r["labels"])) for r in results}, key=lambda k: (k[1], k[0])):
        runs = {
            "budget": {
                r["seed"]: r
                for r in payoff
                if r["attempt"] == model and str(r["labels"]) == n and (model == "scratch" or r.get("steps") == 1400)
            }
        }
        for lead in ("lr5e-4", "lr1e-3"):
            runs[lead] = {
                r["seed"]: r for r in results if (r["lead"], r["model"], str(r["labels"])) == (lead, model, n)
            }
        seeds = sorted(set.intersection(*(set(v) for v in runs.values())))
        if not seeds:
            continue
        dev = {lead: statistics.mean(runs[lead][s]["dev_accuracy"] for s in seeds) for lead in lrs}
        best = max(lrs, key=lambda lead: dev[lead])
        test = [runs[best][s]["test_accuracy"] for s in seeds]
        budget = statistics.mean(runs["budget"][s]["test_accuracy"] for s in seeds)
        lines.append(
            f"| {model} | {n} | {len(seeds)} | {' / '.join(f'{dev[k]:.4f}' for k in lrs)} | {lrs[best]} | "
            f"{statistics.mean(test):.4f} ({', '.join(f'{v:.3f}' for v in test)}) | {budget:.4f} |"
        )
    return lines


if __name__ == "__main__":
    main()
