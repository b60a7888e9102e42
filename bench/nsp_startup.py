"""Next-sentence pairs planned by `bertkit prepare` against pairs walked at the start of `bertkit pretrain`.

For each corpus size (bench_corpus_scale.py's corpora: People's Daily, sentences shuffled per copy), the same
corpus is prepared twice, without a pair plan (--nsp-seq-len 0) and with one (the default, 128), and
`bertkit pretrain --objective mlm-nsp --seq-len 128` runs 10 steps from each: seconds from the command to the
first step and peak RSS. Without a plan the run walks every sentence first (what every --nsp run did before
prepare planned pairs); with one it maps the stored plan.

    python bench/nsp_startup.py --sizes 100MB,2GB

Time it with nothing else running. Results: bench/results/nsp_startup.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_corpus_scale as scale  # noqa: E402  (corpora, the measuring of a command, the pretraining flags)

RESULTS = os.path.join(os.path.dirname(HERE), "bench", "results")


def cpu() -> str:
    flags = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in flags.splitlines() if line.startswith("Model name")), "")
    kinds = sorted({f for f in flags.split() if f.startswith(("avx", "amx"))})
    return f"{model}, {os.cpu_count()} cores, flags {' '.join(kinds) or 'no avx'}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100MB,2GB")
    p.add_argument("--work", default=os.path.join(scale.REPO, "runs", "corpus-scale"))
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    tokenizer = scale.tokenizer_dir(args.work)
    report = {"machine": cpu(), "python": platform.python_version(), "sizes": {}}
    for size in [scale.parse_size(s) for s in args.sizes.split(",")]:
        name = f"{size / 1e6:.0f}MB"
        corpus = scale.make_corpus(os.path.join(args.work, f"corpus-{name}.txt"), size)
        entry = {"corpus_mb": round(os.path.getsize(corpus) / 1e6, 1)}
        for kind, flags in (("no_plan", ["--nsp-seq-len", "0"]), ("plan", [])):
            data = os.path.join(args.work, f"data-{name}-{kind}")
            shutil.rmtree(data, ignore_errors=True)
            prepared = scale.measure(
                scale.bertkit(
                    "prepare", "--corpus", corpus, "--tokenizer", tokenizer, "--out", data, "--no-progress", *flags
                )
            )
            run = scale.pretrain_from(data, args.work, f"pt-nsp-{name}-{kind}", 10, ["--objective", "mlm-nsp"])
            entry[kind] = {
                "prepare_s": prepared["seconds"],
                "prepare_mb_per_s": round(entry["corpus_mb"] / prepared["seconds"], 2),
                "first_step_s": run["first_step_s"],
                "peak_rss_mb": run["peak_rss_mb"],
                "disk_mb": round(
                    sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(data) for f in files)
                    / 1e6,
                    1,
                ),
            }
        report["sizes"][name] = entry
        print(json.dumps({name: entry}), flush=True)
    with open(os.path.join(RESULTS, "nsp_startup.json"), "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=1)
    lines = [
        "# NSP pairs planned by `bertkit prepare` against a walk at the start of `bertkit pretrain`",
        "",
        f"`python bench/nsp_startup.py --sizes {args.sizes}` on {report['machine']} (Python "
        f"{report['python']}). Corpora of bench_corpus_scale.py; `bertkit pretrain --data D --objective "
        "mlm-nsp`, `mini`, batch 8 x 128, 10 steps.",
        "",
        "| corpus | pairs | prepare (s) | prepare MB/s | dataset on disk (MB) | command to first step (s) | "
        "pretrain peak RSS (MB) |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, e in report["sizes"].items():
        for kind, what in (
            ("no_plan", "walked at the start (`prepare --nsp-seq-len 0`)"),
            ("plan", "planned by `prepare` (default)"),
        ):
            r = e[kind]
            lines.append(
                f"| {e['corpus_mb']:,.0f} MB | {what} | {r['prepare_s']} | {r['prepare_mb_per_s']} | "
                f"{r['disk_mb']:,.1f} | {r['first_step_s']} | {r['peak_rss_mb']:,.0f} |"
            )
    with open(os.path.join(RESULTS, "nsp_startup.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
