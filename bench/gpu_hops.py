"""Where one /embed request's time goes on a GPU: the encoder called in this process (one text of the same length
again and again; a new length each call; 64 texts), the profiler's top operations over new-length calls, and
`bertkit serve` at one client, on the MiniLM-shaped model of bench/gpu_check.py's serve step.

    python bench/gpu_hops.py [--device cuda] [--tokenizer DIR] [--md FILE]

A lead for issue 54's serve target: gpu_check's first run served 24 sentences/s at one client (p50 67 ms) and 788 at
64, where the encoder alone runs 256 texts in a few ms; this says which hop holds the time. --device cpu runs the
same on tiny sizes (a check of the script).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # gpu_check's helpers
import gpu_check  # noqa: E402
import torch  # noqa: E402

from bertkit import Encoder  # noqa: E402


def timed(call, repeat: int, device: torch.device) -> float:
    """Median milliseconds of `call()` over `repeat` calls (synchronised on a GPU)."""
    times = []
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(1000 * (time.perf_counter() - start))
    return round(statistics.median(times), 3)


def in_process(folder: str, device: str, precision: str, texts: list[str]) -> dict:
    """The encoder's calls timed: same length, new lengths (first and second pass), 64 texts, the bare model."""
    enc = Encoder.from_pretrained(folder, device=device, precision=precision, engine="torch")
    where = enc.where.device
    rows = [enc.token_ids(t) for t in texts[:120]]
    one = rows[0]
    enc.embed_ids([one])  # warm
    out = {"where": enc.where.describe(), "same_ms": timed(lambda: enc.embed_ids([one]), 30, where)}
    lengths = sorted({len(r) for r in rows})
    by_length = {len(r): r for r in rows}
    first = [timed(lambda r=by_length[n]: enc.embed_ids([r]), 1, where) for n in lengths]
    second = [timed(lambda r=by_length[n]: enc.embed_ids([r]), 1, where) for n in lengths]
    out.update(
        new_length_first_ms=round(statistics.median(first), 3),
        new_length_second_ms=round(statistics.median(second), 3),
        distinct_lengths=len(lengths),
        batch64_ms=timed(lambda: enc.embed_ids(rows[:64]), 10, where),
    )
    ids = torch.tensor([one], device=where)
    with torch.inference_mode():
        out["bare_model_ms"] = timed(lambda: enc.model(input_ids=ids), 30, where)
        out["bare_model_mask_ms"] = timed(
            lambda: enc.model(input_ids=ids, attention_mask=torch.ones_like(ids)), 30, where
        )
    out["profile"] = profile(enc, [by_length[n] for n in lengths[:20]], where)
    return out


def profile(enc: Encoder, rows: list[list[int]], where: torch.device) -> str:
    """The profiler's top operations by self CPU time over one call per row (new lengths)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if where.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for r in rows:
            enc.embed_ids([r])
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=60)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--md", default=None)
    args = p.parse_args(argv)
    tokenizer = args.tokenizer or gpu_check.default_tokenizer()
    texts = gpu_check.reviews()
    report: dict = {"device": args.device}
    with tempfile.TemporaryDirectory() as scratch:
        folder = gpu_check.minilm_folder(tokenizer, os.path.join(scratch, "minilm"), args.device == "cpu")
        for precision in ("auto", "float32"):
            report[precision] = in_process(folder, args.device, precision, texts)
            shown = {k: v for k, v in report[precision].items() if k != "profile"}
            print(json.dumps(shown), flush=True)
        print(report["auto"]["profile"], flush=True)
        for flags in ([], ["--max-wait-ms", "0"]):
            served = gpu_check.serve_once(folder, args.device, 8192, texts, 4.0, [1], flags)
            report["serve " + " ".join(flags)] = served
            print(json.dumps(served), flush=True)
    if args.md:
        with open(args.md, "w", encoding="utf-8") as fh:
            fh.write("```\n" + json.dumps(report, indent=1) + "\n```\n")
    return report


if __name__ == "__main__":
    main()
