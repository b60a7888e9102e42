"""NaN and Infinity: one check for every model bertkit runs, float32, bf16 and int8 alike.

    model loaded --check_weights--> every floating weight finite, else NonFiniteError naming the first bad tensor
                                    (before quantizing: int8's quantizer cannot be built from NaN)
    forward pass --check_outputs--> logits / vectors finite, else NonFiniteError (weights that overflow)

Used by the loaders (inference.py, embed.py, explain), quantize() and serve's start-up probe.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .errors import NonFiniteError


def finite(tensor: Tensor) -> bool:
    """No NaN or Infinity in `tensor`: its smallest and largest values are finite (NaN propagates through both;
    ten times faster than isfinite(t).all() on a weight matrix, which builds a tensor of booleans)."""
    return tensor.numel() == 0 or bool(torch.isfinite(torch.stack(torch.aminmax(tensor))).all())


def check_weights(model: nn.Module, model_dir: str) -> None:
    """Refuse a model with a NaN or Infinity in any weight (parameter or buffer), naming the first such tensor.
    One pass over the weights (6 ms for MiniLM's 22.6M on 2 CPU cores; its loading takes about 0.9 s); call it
    before quantizing."""
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.is_floating_point() and not finite(tensor):
            raise NonFiniteError(
                f"{model_dir}: the weight tensor {name} is not finite (holds NaN or Infinity), so "
                "the model is broken (saved by a run that diverged?); train or fine-tune it again, "
                "or use another checkpoint"
            )


def check_outputs(model_dir: str, what: str, *tensors: Tensor) -> None:
    """Refuse outputs with a NaN or Infinity (weights that overflow, e.g. in bfloat16): nothing is written."""
    if not all(finite(t) for t in tensors):
        raise NonFiniteError(
            f"{model_dir}: the model's {what} are not finite (NaN or Infinity): its weights are "
            "broken or overflow; run it in float32 (without --quantize), or train / fine-tune it "
            "again"
        )
