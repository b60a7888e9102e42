"""Small pieces the explain modules share: the error class and how shapes and numbers are written.

Terminal widths (CJK characters take two columns) are text.display_width / text.pad.
"""

from __future__ import annotations

from torch import nn

from ..errors import BertkitError


class ExplainError(BertkitError, ValueError):
    """An explain / attention request that cannot work (no tokenizer, no [MASK], wrong model, ...)."""


def shape_str(shape) -> str:
    """(1, 12, 7, 64) as Python writes a tuple, the form a learner sees with tensor.shape."""
    return str(tuple(int(d) for d in shape))


def count(n: int) -> str:
    return f"{n:,}"


def base_model(model: nn.Module) -> nn.Module:
    """The BertModel inside a task model (model.bert), or the model itself."""
    base = getattr(model, "base_model", model)
    if not hasattr(base, "encoder") or not hasattr(base, "embeddings"):
        raise ExplainError(f"expected a bertkit BertModel or a BertFor* task model, got {type(model).__name__}")
    return base
