"""Small pieces the explain modules share: the error class and how shapes and numbers are written.

Terminal widths (CJK characters take two columns) are text.display_width / text.pad.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, cast

from torch import nn

from ..errors import BertkitError

if TYPE_CHECKING:
    from ..model import BertModel, BertPreTrainedModel, Layer


class ExplainError(BertkitError, ValueError):
    """An explain / attention request that cannot work (no tokenizer, no [MASK], wrong model, ...)."""


class PrettyPrinter(Protocol):
    """IPython's RepresentationPrinter, as far as the _repr_pretty_ methods use it."""

    def text(self, obj: str) -> None: ...


def shape_str(shape: Iterable[int]) -> str:
    """(1, 12, 7, 64) as Python writes a tuple, the form a learner sees with tensor.shape."""
    return str(tuple(int(d) for d in shape))


def count(n: int) -> str:
    return f"{n:,}"


def base_model(model: BertPreTrainedModel) -> BertModel:
    """The BertModel inside a task model (model.bert), or the model itself."""
    base = getattr(model, "base_model", model)
    if not hasattr(base, "encoder") or not hasattr(base, "embeddings"):
        raise ExplainError(f"expected a bertkit BertModel or a BertFor* task model, got {type(model).__name__}")
    return cast("BertModel", base)  # checked as far as it can be: an encoder with embeddings, as BertModel is


def encoder_layers(layers: nn.ModuleList) -> Sequence[Layer]:
    """An encoder's `layer` list as the Layer modules it holds (an nn.ModuleList's items are typed nn.Module)."""
    return cast("Sequence[Layer]", layers)
