"""The optimizer and the learning-rate schedule of a run: AdamW without decay on biases and LayerNorm, and a
linear warm-up then a linear, cosine or constant rate (lr_factor, the LambdaLR multiplier)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from .settings import TrainConfig


def make_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """AdamW; biases and LayerNorm weights get no weight decay (as in BERT)."""
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = device.type == "cuda"  # one kernel for all parameters
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.999), eps=1e-6, fused=fused)


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Multiplier of the peak lr at `step`: linear warm-up, then linear / cosine decay to 0."""
    warm = max(1, int(cfg.warmup * cfg.steps)) if cfg.warmup > 0 else 0
    if step < warm:
        return (step + 1) / warm
    if cfg.schedule == "constant":
        return 1.0
    progress = (step - warm) / max(1, cfg.steps - warm)
    if cfg.schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return max(0.0, 1.0 - progress)
