"""What every bertkit model family shares (BERT and ELECTRA in model.py, ModernBERT in modernbert.py): the
checkpoint folder in and out (checkpoint.py does the work), tied weights, the packed inference weights' lifetime,
the device, dtype and parameter count. A family's base class adds its own initialisation and settings."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, overload

import torch
from torch import nn

from . import kernels

if TYPE_CHECKING:
    from .checkpoint import LoadReport

_Model = TypeVar("_Model", bound="PreTrainedModel")


class PreTrainedModel(nn.Module):
    """A model that loads from and saves to a Hugging Face folder, whatever its family."""

    config: Any  # the family's config dataclass (config_class)
    config_class: ClassVar[type[Any]]  # what reads its config.json (BertConfig, ModernBertConfig)
    base_model_prefix = "bert"  # where a task head keeps its encoder, as transformers names it
    # The config.model_type this class builds, written to config.json
    model_type = "bert"
    # Parameters a checkpoint may lack; they are freshly initialised and listed in a warning.
    _missing_ok: tuple[str, ...] = ()
    # {parameter: the parameter it shares storage with} while config.tie_word_embeddings is True;
    # heads with an MLM decoder tie it to the word embeddings. The loader reads a tied pair once.
    _tied_weights: dict[str, str] = {}

    def train(self, mode: bool = True) -> PreTrainedModel:
        """nn.Module.train; training drops the packed inference weights (kernels.py), which it does not use."""
        if mode:
            kernels.forget(self)
        return super().train(mode)

    def tied_weights(self) -> dict[str, str]:
        """{parameter name: the parameter it shares storage with}: the class's _tied_weights when the
        config ties word embeddings (tie_word_embeddings=True), else none."""
        return dict(self._tied_weights) if self.config.tie_word_embeddings else {}

    def tie_weights(self) -> None:
        """Make the parameters named in tied_weights() one tensor again (after init or loading)."""
        for name, source in self.tied_weights().items():
            module, _, attribute = name.rpartition(".")
            setattr(self.get_submodule(module), attribute, self.get_parameter(source))

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def num_parameters(self, trainable_only: bool = False) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    @overload
    @classmethod
    def from_pretrained(
        cls: type[_Model], path: str | os.PathLike[str], *, output_loading_info: Literal[True], **kwargs: Any
    ) -> tuple[_Model, LoadReport]: ...

    @overload
    @classmethod
    def from_pretrained(
        cls: type[_Model], path: str | os.PathLike[str], *, output_loading_info: Literal[False] = False, **kwargs: Any
    ) -> _Model: ...

    @overload
    @classmethod
    def from_pretrained(
        cls: type[_Model], path: str | os.PathLike[str], *, output_loading_info: bool, **kwargs: Any
    ) -> _Model | tuple[_Model, LoadReport]: ...

    @classmethod
    def from_pretrained(
        cls: type[_Model], path: str | os.PathLike[str], **kwargs: Any
    ) -> _Model | tuple[_Model, LoadReport]:
        """Load an HF-layout directory (config.json + model.safetensors or pytorch_model.bin); with
        output_loading_info=True, (model, the LoadReport: the tensors missing, unexpected, mismatched)."""
        from .checkpoint import load_pretrained

        return load_pretrained(cls, path, **kwargs)

    def save_pretrained(self, path: str | os.PathLike[str]) -> None:
        """Write config.json + model.safetensors that bertkit and transformers both load."""
        from .checkpoint import save_pretrained

        save_pretrained(self, path)
