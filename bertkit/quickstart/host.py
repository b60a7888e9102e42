"""The machine the quickstart runs on: its CPU (or GPU), cores and threads, and the precision it trains in.

The report and stderr name these because the stages' wall times depend on them. Cheap probes only: no benchmark.
"""

from __future__ import annotations

import os


def machine(device: str) -> dict:
    """The CPU's model, the cores this process may use and torch's threads, and the two CPU features that make
    bf16 training pay (cpu_precision picks it where one is there); on a GPU, its name. Cheap: no benchmark."""
    import torch

    from ..train.devices import autocast_dtype

    dtype = autocast_dtype("bf16" if cpu_precision(device) else "auto", torch.device(device))
    return {
        "cpu": cpu_name(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "avx512_bf16": has_cpu_feature("_is_avx512_bf16_supported"),
        "amx": has_cpu_feature("_is_amx_tile_supported"),
        "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
        "precision": {torch.bfloat16: "bf16", torch.float16: "fp16", None: "float32"}[dtype],
    }


def has_cpu_feature(probe: str) -> bool:
    """torch.cpu's own probe `probe` says yes; the probes are private, so a missing one is a no (as in
    cpu_has_native_bf16)."""
    import torch

    check = getattr(torch.cpu, probe, None)
    return bool(check is not None and check())


def cpu_name() -> str:
    """The CPU's model name, as lscpu reads it from /proc/cpuinfo (elsewhere, what platform knows)."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_line(host: dict) -> str:
    """machine(), in a line: "machine: AMD EPYC, 2 cores, 2 torch threads; AVX-512 BF16: no, AMX: no -> float32
    training"."""
    yes = {True: "yes", False: "no"}
    cpu = (
        f"{host['cpu']}, {host['cores']} cores, {host['torch_threads']} torch threads; "
        f"AVX-512 BF16: {yes[host['avx512_bf16']]}, AMX: {yes[host['amx']]}"
    )
    precision = {"bf16": "bf16 (autocast)", "fp16": "fp16 (autocast)"}.get(host["precision"], host["precision"])
    if host["gpu"]:
        return f"machine: {host['gpu']} -> {precision} training; CPU: {cpu}"
    return f"machine: {cpu} -> {precision} training"


def cpu_precision(device: str) -> list[str]:
    """Training in bf16 autocast on a CPU that has it natively (AVX-512 BF16 / AMX): faster, and the same
    held-out MLM accuracy as float32 (measured: bench/results/pretraining_recipes.md)."""
    from ..train.devices import cpu_has_native_bf16

    return ["--precision", "bf16"] if device == "cpu" and cpu_has_native_bf16() else []
