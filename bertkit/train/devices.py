"""The device and the processes a run trains on: which device, torchrun's process group, the autocast dtype,
and the few things every process does together (sum a count, agree on a decision, wait at a barrier).

Under torchrun (WORLD_SIZE > 1) each process is one rank of a process group (NCCL on GPUs, gloo on CPUs);
alone, every collective here is a no-op, so the loop reads the same either way.
"""

from __future__ import annotations

import os
import threading
import warnings

import torch
import torch.distributed as dist

from ..devices import pick_device

__all__ = [
    "pick_device",
    "setup_distributed",
    "autocast_dtype",
    "cpu_has_native_bf16",
    "threading_main",
    "all_processes",
    "agree",
    "barrier",
]


def setup_distributed(device: torch.device) -> tuple[int, int, torch.device]:
    """(rank, world size, device) under torchrun; (0, 1, device) otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), world, device


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """None = plain float32. auto: bf16 on a GPU that has it, else fp16; float32 on a CPU.
    On a CPU, bf16 autocast only when asked: it is faster on a CPU with AVX-512 BF16 / AMX
    (cpu_has_native_bf16; README, Speed), and CPUs without native bf16 may be slower."""
    if precision == "fp32":
        return None
    if device.type != "cuda":
        if precision == "fp16":
            warnings.warn(
                f"--precision fp16 is for GPUs; training in float32 on {device} (bf16 works on CPUs)", stacklevel=2
            )
        return torch.bfloat16 if precision == "bf16" else None
    if precision == "fp16":
        return torch.float16
    if precision == "bf16" or torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float16


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX-512 BF16 or AMX), where --precision bf16 is faster."""
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        check = getattr(torch.cpu, name, None)  # torch's own probes (private, so looked up with care)
        if check is not None and check():
            return True
    return False


def threading_main() -> bool:
    """Whether this is the main thread, the only one that may set signal handlers."""
    return threading.current_thread() is threading.main_thread()


# ----- what every process does together ----------------------------------------------------------------
def all_processes(counts: list[int], world: int) -> list[int]:
    """Each count summed over the processes (a sync: one small all-reduce under torchrun)."""
    if world == 1:
        return list(counts)
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    total = torch.tensor(counts, dtype=torch.int64, device=device)
    dist.all_reduce(total)
    return [int(t) for t in total]


def agree(decision: bool, world: int, device: torch.device) -> bool:
    """True on every rank when it is True on any rank."""
    if world == 1:
        return bool(decision)
    flag = torch.tensor([float(decision)], device=device)
    dist.all_reduce(flag)
    return bool(flag > 0)


def barrier(world: int) -> None:
    """Every rank waits here for the others (alone: nothing to wait for)."""
    if world > 1:
        dist.barrier()
