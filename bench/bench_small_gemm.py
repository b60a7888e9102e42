"""The matrix multiplies of one short text on the CPU: torch's F.linear (MKL) against oneDNN with a prepacked
weight (what inductor's freezing uses) and MKL with a prepacked weight, at 1 and 2 threads.

    python bench/bench_small_gemm.py [--rows 15,48,512] [--hidden 384] [--inner 1536]

A text of M tokens through a BERT layer multiplies (M, hidden) by (hidden, hidden) four times and by
(hidden, inner) and (inner, hidden) once: microseconds per call are printed for each.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F


def micros(fn, calls: int = 2000) -> float:
    for _ in range(50):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="15,48,512")
    p.add_argument("--hidden", type=int, default=384)
    p.add_argument("--inner", type=int, default=1536)
    args = p.parse_args(argv)
    print("| rows | in -> out | threads | MKL F.linear us | oneDNN prepacked us | MKL prepacked us |")
    print("|---:|---|---:|---:|---:|---:|")
    for m in map(int, args.rows.split(",")):
        for k, n in ((args.hidden, args.hidden), (args.hidden, args.inner), (args.inner, args.hidden)):
            x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
            dnnl = torch.ops.mkldnn._reorder_linear_weight(w, m)
            mkl = torch.ops.mkl._mkl_reorder_linear_weight(w, m)
            for threads in (1, 2):
                torch.set_num_threads(threads)
                times = (
                    micros(lambda: F.linear(x, w, b)),
                    micros(lambda: torch.ops.mkldnn._linear_pointwise(x, dnnl, b, "none", [], "")),
                    micros(lambda: torch.ops.mkl._mkl_linear(x, mkl, w, b, m)),
                )
                print(f"| {m} | {k} -> {n} | {threads} | " + " | ".join(f"{t:,.1f}" for t in times) + " |")


if __name__ == "__main__":
    main()
