"""ModernBERT (Warner, Chaffin, Clavié et al. 2024) as bertkit models, with the class, parameter and output names of
transformers' modeling_modernbert: its config, the encoder and every task head in one file. What changed in six
years, against BERT (model.py):

    embeddings   tok_embeddings -> norm -> drop: no position table, no token types (positions are rotary)
    layer        pre-norm: h + attn(attn_norm(h)), then h + mlp(mlp_norm(h)); layer 0's attn_norm is Identity
                 (the embeddings were just normed); no biases by default (attention_bias, mlp_bias, norm_bias)
    attention    one fused Wqkv (H -> 3H), rotary positions on q and k (NeoX layout) with theta global_rope_theta,
                 or local_rope_theta on local layers; every layer whose index is not a multiple of
                 global_attn_every_n_layers is local: token i sees only |i - j| <= local_attention // 2
    mlp          GeGLU: Wi (H -> 2I) split into input and gate, Wo(act(input) * gate) (I -> H)
    final_norm   one LayerNorm after the last layer (pre-norm needs it); hidden_states are the layers' inputs and
                 the last layer's output before it, as transformers returns them

    ModernBertModel                       embeddings.*, layers.N.*, final_norm.*   (a head: model.*)
    ModernBertForMaskedLM                 head (dense, act, norm) -> decoder (H -> V, tied to tok_embeddings)
    ModernBertForSequenceClassification   cls or mean pooling (classifier_pooling) -> head -> drop -> classifier
    ModernBertForTokenClassification      every token -> head -> drop -> classifier
    ModernBertForQuestionAnswering        every token -> head -> drop -> classifier (H -> 2: start, end)
    ModernBertForMultipleChoice           (B, choices, S) as rows; pooled as sequence classification -> 1 score

Every forward also takes token_type_ids and ignores them (ModernBERT has no segment embeddings), so a BERT
tokenizer's output passes as is. The losses and label checks are the BERT heads' (heads.py). How a pass attends is
decided once (ModernBertModel._route) and read by every layer: padded through attention.py's backends (eager where
probabilities are asked for, else sdpa), or padding-free (varlen) where the batch has padding; the masks and the
rotary tables are made once per pass.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn

from . import attention, kernels, padding
from .activations import ACT2FN
from .config import ACTIVATIONS, PROBLEM_TYPES, ConfigBase, ProblemType, memory_bound
from .errors import ConfigError, InputError
from .heads import (
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    ClassifierOutput,
    MaskedLMOutput,
    QuestionAnsweringOutput,
    choice_loss,
    classification_loss,
    mlm_logits_and_loss,
    span_loss,
    token_classification_loss,
)
from .model import BertModel, BertModelOutput
from .plan import check_tensors
from .pretrained import PreTrainedModel

ClassifierPooling = Literal["cls", "mean"]
ModernAttnImplementation = Literal["auto", "eager", "sdpa", "varlen"]
# Fields that are settings of this process, not of the checkpoint: never written to config.json.
RUNTIME_FIELDS = ("attn_implementation", "extra", "num_labels")
# transformers' runtime switch (torch.compile of parts of the model), which its to_dict drops as well
DROPPED_KEYS = ("reference_compile",)


def _default_id2label() -> dict[int, str]:
    return {0: "LABEL_0", 1: "LABEL_1"}


@dataclass
class ModernBertConfig(ConfigBase):
    """Every number that shapes a ModernBERT. Defaults are ModernBERT-base's, as in transformers 4.57."""

    vocab_size: int = 50368
    hidden_size: int = 768  # H
    intermediate_size: int = 1152  # I: the GeGLU's width (Wi makes 2 I: input and gate)
    num_hidden_layers: int = 22
    num_attention_heads: int = 12
    hidden_activation: str = "gelu"  # the GeGLU's activation (on the input half)
    max_position_embeddings: int = 8192  # the longest input it was trained on (rotary: no table of this size)
    initializer_range: float = 0.02
    initializer_cutoff_factor: float = 2.0  # truncated-normal init cut at this many stds
    norm_eps: float = 1e-5
    norm_bias: bool = False  # LayerNorms with a bias
    pad_token_id: int = 50283
    eos_token_id: int = 50282
    bos_token_id: int = 50281
    cls_token_id: int = 50281
    sep_token_id: int = 50282
    global_rope_theta: float = 160000.0  # rotary base of the global layers
    attention_bias: bool = False  # Wqkv and Wo with biases
    attention_dropout: float = 0.0
    global_attn_every_n_layers: int = 3  # layer i is global when i % n == 0, else local
    local_attention: int = 128  # a local layer's window: |i - j| <= local_attention // 2
    local_rope_theta: float | None = 10000.0  # rotary base of the local layers (None: global_rope_theta)
    embedding_dropout: float = 0.0
    mlp_bias: bool = False
    mlp_dropout: float = 0.0
    decoder_bias: bool = True  # the MLM decoder's bias
    classifier_pooling: ClassifierPooling = "cls"  # sequence classification and multiple choice: [CLS] or mean
    classifier_dropout: float = 0.0
    classifier_bias: bool = False  # the heads' dense layer
    classifier_activation: str = "gelu"
    deterministic_flash_attn: bool = False  # transformers' flash-attention switch, kept for the file
    sparse_prediction: bool = False  # MLM with labels: logits only at the labelled positions
    sparse_pred_ignore_index: int = -100
    repad_logits_with_grad: bool = False  # transformers' flash-attention switch, kept for the file
    tie_word_embeddings: bool = True
    id2label: dict[int, str] = field(default_factory=_default_id2label)
    label2id: dict[str, int] | None = None
    num_labels: int | None = None
    problem_type: ProblemType | None = None
    output_attentions: bool = False
    output_hidden_states: bool = False
    architectures: list[str] | None = None
    model_type: str = "modernbert"
    # runtime, not saved: eager | sdpa (padded; both equal to transformers) | varlen (padding removed before the
    # layers; zeros at padded positions) | auto (the default: varlen when the batch has padding, else sdpa; eager
    # when probabilities are asked for)
    attn_implementation: ModernAttnImplementation = "auto"
    extra: dict[str, Any] = field(default_factory=dict)  # unknown config.json keys, kept as they were

    def __post_init__(self) -> None:
        self._settle_labels()

    # ----- derived numbers -------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def is_local(self, layer: int) -> bool:
        """Whether layer `layer` attends within a window (else to every token)."""
        return layer % self.global_attn_every_n_layers != 0

    def rope_theta(self, layer: int) -> float:
        """The rotary base of layer `layer`."""
        local = self.is_local(layer) and self.local_rope_theta is not None
        return float(self.local_rope_theta if local and self.local_rope_theta is not None else self.global_rope_theta)

    def parameter_count(self) -> int:
        """The encoder's parameters (biases and norm biases as configured): arithmetic only, a bound before a model
        is allocated."""
        H, W, L = self.hidden_size, self.intermediate_size, self.num_hidden_layers
        norm = H * (2 if self.norm_bias else 1)
        attention = 4 * H * H + (4 * H if self.attention_bias else 0)
        mlp = 3 * H * W + (2 * W + H if self.mlp_bias else 0)
        return self.vocab_size * H + norm + L * (attention + mlp + 2 * norm) + norm

    # ----- validation ------------------------------------------------------------------------
    def validate(self, *, size_bound: bool = True) -> ModernBertConfig:
        """Raise ConfigError listing every setting that cannot work; return self when all is well (size_bound as
        BertConfig.validate's)."""
        problems = self._dimension_problems() + self._setting_problems()
        if not problems and size_bound:
            count, (memory, where) = self.parameter_count(), memory_bound()
            if count * 4 > memory:
                problems.append(
                    f"these sizes make a model of about {count:.3g} parameters, {count * 4 / 2**30:,.0f} GiB in "
                    f"float32: more than {where} ({memory / 2**30:,.0f} GiB)"
                )
        if problems:
            raise ConfigError("invalid ModernBertConfig:\n  - " + "\n  - ".join(problems))
        return self

    def _dimension_problems(self) -> list[str]:
        problems = []
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "max_position_embeddings",
            "global_attn_every_n_layers",
            "local_attention",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                problems.append(f"{name} must be a positive integer, got {value!r:.40}")
        if not problems and self.hidden_size % self.num_attention_heads != 0:
            problems.append(
                f"hidden_size ({self.hidden_size}) is not divisible by num_attention_heads ({self.num_attention_heads})"
            )
        elif not problems and self.head_dim % 2:
            problems.append(f"head_dim {self.head_dim} is odd: rotary positions turn pairs of dimensions")
        return problems

    def _setting_problems(self) -> list[str]:
        problems = []
        for name, value, choices in (
            ("hidden_activation", self.hidden_activation, ACTIVATIONS),
            ("classifier_activation", self.classifier_activation, ACTIVATIONS),
            ("classifier_pooling", self.classifier_pooling, typing.get_args(ClassifierPooling)),
            ("attn_implementation", self.attn_implementation, typing.get_args(ModernAttnImplementation)),
            ("problem_type", self.problem_type, PROBLEM_TYPES),
        ):
            if value not in choices:
                problems.append(f"{name} must be one of {', '.join(map(str, choices))}, got {value!r:.40}")
        for name in ("attention_dropout", "embedding_dropout", "mlp_dropout", "classifier_dropout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                problems.append(f"{name} must be a probability in [0, 1), got {value!r:.40}")
        for name in ("norm_eps", "global_rope_theta"):
            if not isinstance(getattr(self, name), (int, float)) or getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)!r:.40}")
        if self.local_rope_theta is not None and not self.local_rope_theta > 0:
            problems.append(f"local_rope_theta must be > 0 or None, got {self.local_rope_theta!r:.40}")
        if not (isinstance(self.pad_token_id, int) and 0 <= self.pad_token_id < self.vocab_size):
            problems.append(f"pad_token_id must be in [0, vocab_size={self.vocab_size}), got {self.pad_token_id!r:.40}")
        if self.model_type != "modernbert":
            problems.append(f"model_type is {self.model_type!r:.40}; a ModernBertConfig is model_type 'modernbert'")
        return problems

    # ----- dict / JSON io --------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any], **overrides: Any) -> ModernBertConfig:
        """Build from a config.json dict of transformers 4.57 or 5.x (layer_types and rope_parameters read back
        into global_attn_every_n_layers and the two thetas); unknown keys go to `extra`, `overrides` win."""
        data = {k: v for k, v in {**data, **overrides}.items() if k not in DROPPED_KEYS}
        data.update(_from_layer_types(data.pop("layer_types", None), data.get("num_hidden_layers", 22)))
        data.update(_from_rope_parameters(data.pop("rope_parameters", None)))
        known = cls.field_names() - {"extra"}
        kwargs = {k: v for k, v in data.items() if k in known}
        if "num_labels" in kwargs and "id2label" in data and "num_labels" not in overrides:
            kwargs.pop("num_labels")  # id2label is the authority when both are in a file
        try:
            return cls(**kwargs, extra={k: v for k, v in data.items() if k not in known})
        except (TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"config values do not fit ModernBertConfig: {e}") from e

    def to_dict(self) -> dict[str, Any]:
        """The config.json dict in transformers 4.57's keys (5.x reads them too), unknown keys kept."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in RUNTIME_FIELDS}
        out["id2label"] = {str(k): v for k, v in self.id2label.items()}
        out.update(self.extra)
        return out

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> ModernBertConfig:
        """A named architecture (`modern-mini`, `modernbert-base`, ...) with any field overridden."""
        if name not in PRESETS:
            raise ConfigError(f"unknown ModernBERT preset {name!r}; choose one of: {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides}).validate()


# Architectures by name (weights load from a local directory). The small ones are BERT's tiny and mini (config.py)
# made modern, at about their parameter counts: the GeGLU's width I gives 3 H I weights where BERT's feed-forward
# has 2 H I', so mini's 1,024 becomes 672, tiny's 64 becomes 48 (its heads stay 8 wide for the rotary pairs). Their
# special ids are a WordPiece vocabulary's ([PAD] 0, [CLS] 2, [SEP] 3); pretraining sets them from its tokenizer.
_WORDPIECE_IDS = dict(pad_token_id=0, cls_token_id=2, bos_token_id=2, sep_token_id=3, eos_token_id=3)
PRESETS: dict[str, dict[str, Any]] = {
    "modernbert-base": {},  # the defaults
    "modernbert-large": dict(hidden_size=1024, intermediate_size=2624, num_hidden_layers=28, num_attention_heads=16),
    "modern-mini": dict(
        vocab_size=21128,
        hidden_size=256,
        intermediate_size=672,
        num_hidden_layers=4,
        num_attention_heads=4,
        **_WORDPIECE_IDS,
    ),
    "modern-tiny": dict(
        vocab_size=1000,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=128,
        local_attention=16,
        **_WORDPIECE_IDS,
    ),
}


def _from_layer_types(layer_types: list[str] | None, layers: int) -> dict[str, Any]:
    """transformers 5.x's layer_types (one "full_attention" / "sliding_attention" per layer) as 4.57's
    global_attn_every_n_layers, which can say only "every n-th layer is global, from layer 0"."""
    if layer_types is None:
        return {}
    full = [i for i, kind in enumerate(layer_types) if kind == "full_attention"]
    n = full[1] if len(full) > 1 else max(len(layer_types), 1)
    if [("full_attention" if i % n == 0 else "sliding_attention") for i in range(len(layer_types))] != layer_types:
        raise ConfigError(
            f"layer_types {layer_types!r:.80}: bertkit reads layers that are global every n-th layer from layer 0 "
            "(global_attn_every_n_layers)"
        )
    return {"global_attn_every_n_layers": n}


def _from_rope_parameters(rope: dict[str, Any] | None) -> dict[str, Any]:
    """transformers 5.x's rope_parameters {"full_attention": {...}, "sliding_attention": {...}} as the two thetas."""
    if rope is None:
        return {}
    out = {}
    for kind, name in (("full_attention", "global_rope_theta"), ("sliding_attention", "local_rope_theta")):
        params = rope.get(kind) or {}
        if params.get("rope_type", "default") != "default":
            raise ConfigError(f"rope_parameters[{kind!r}]: rope_type {params['rope_type']!r}; bertkit reads 'default'")
        if "rope_theta" in params:
            out[name] = params["rope_theta"]
    return out


# ----- the encoder -----------------------------------------------------------------------------------
class ModernBertEmbeddings(nn.Module):
    """token id -> vector: the token embedding, normed, dropout. No positions (rotary, in attention)."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.drop = nn.Dropout(config.embedding_dropout)

    def forward(self, input_ids: Tensor | None, inputs_embeds: Tensor | None = None) -> Tensor:
        embeddings = self.tok_embeddings(input_ids) if inputs_embeds is None else inputs_embeds  # (B, S, H)
        return self.drop(self.norm(embeddings))


@dataclass(frozen=True)
class Route:
    """How one forward pass attends, decided once by ModernBertModel and read by every layer.

    backend "eager" | "sdpa": padded (B, heads, S, S) calls of attention.BACKENDS, masks[local] the additive
            (B, 1, S, S) mask of a global (False) or local (True) layer
            "varlen": the real tokens only, (N, heads, head_dim); tokens says where the sequences are
    window: a local layer's window (config.local_attention)
    """

    backend: str
    window: int
    masks: dict[bool, Tensor | None] = field(default_factory=dict)
    tokens: padding.Unpadded | None = None


class ModernBertAttention(nn.Module):
    """Self-attention with rotary positions: Wqkv -> q, k turned by position -> attention -> Wo."""

    def __init__(self, config: ModernBertConfig, layer_id: int) -> None:
        super().__init__()
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.dropout_p = config.attention_dropout
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.Wo = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        self.out_drop = nn.Dropout(config.attention_dropout) if config.attention_dropout > 0.0 else nn.Identity()

    def forward(
        self, hidden_states: Tensor, rotary: tuple[Tensor, Tensor], local: bool, route: Route
    ) -> tuple[Tensor, Tensor | None]:
        dropout_p = self.dropout_p if self.training else 0.0
        if route.tokens is not None:  # padding-free: (N, H), the real tokens of every sequence one after another
            N, H = hidden_states.shape
            q, k, v = (
                kernels.linear(hidden_states, self.Wqkv).view(N, 3, self.num_heads, self.head_dim).unbind(1)
            )  # (N, heads, D)
            q, k = attention.rotate(q, *rotary), attention.rotate(k, *rotary)
            tokens = route.tokens
            context = attention.varlen_attention(
                q,
                k,
                v,
                tokens.cu_seqlens,
                tokens.max_seqlen,
                dropout_p=dropout_p,
                layout=tokens.layout,
                window=route.window if local else None,
            )
            return self.out_drop(kernels.linear(context.reshape(N, H), self.Wo)), None
        B, S, H = hidden_states.shape
        qkv = kernels.linear(hidden_states, self.Wqkv).view(B, S, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.transpose(3, 1).unbind(dim=2)  # (B, heads, S, head_dim) each
        q, k = attention.rotate(q, *rotary), attention.rotate(k, *rotary)
        context, probs = attention.BACKENDS[route.backend](
            q, k, v, route.masks[local], dropout_p=dropout_p, scale=self.head_dim**-0.5
        )
        context = context.transpose(1, 2).reshape(B, S, H)  # heads side by side again
        return self.out_drop(kernels.linear(context, self.Wo)), probs


class ModernBertMLP(nn.Module):
    """GeGLU: Wi makes an input and a gate (I each); Wo(act(input) * gate)."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.Wi = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.act = ACT2FN[config.hidden_activation]
        self.drop = nn.Dropout(config.mlp_dropout)
        self.Wo = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, hidden_states: Tensor) -> Tensor:
        input, gate = kernels.linear(hidden_states, self.Wi).chunk(2, dim=-1)  # (B, S, I) each
        return kernels.linear(self.drop(self.act(input) * gate), self.Wo)  # (B, S, H)


class ModernBertEncoderLayer(nn.Module):
    """Pre-norm: h + attn(attn_norm(h)), then h + mlp(mlp_norm(h))."""

    def __init__(self, config: ModernBertConfig, layer_id: int) -> None:
        super().__init__()
        self.attn_norm: nn.Module = (
            nn.Identity()  # layer 0 reads the embeddings, normed already
            if layer_id == 0
            else nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        )
        self.attn = ModernBertAttention(config, layer_id)
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.mlp = ModernBertMLP(config)

    def forward(
        self, hidden_states: Tensor, rotary: tuple[Tensor, Tensor], local: bool, route: Route
    ) -> tuple[Tensor, Tensor | None]:
        attended, probs = self.attn(self.attn_norm(hidden_states), rotary, local, route)
        hidden_states = hidden_states + attended
        return hidden_states + self.mlp(self.mlp_norm(hidden_states)), probs


class ModernBertPreTrainedModel(PreTrainedModel):
    """What every ModernBERT class shares: its config, transformers' truncated-normal initialisation."""

    config: ModernBertConfig
    config_class = ModernBertConfig
    base_model_prefix = "model"
    model_type = "modernbert"

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        if not isinstance(config, ModernBertConfig):
            raise TypeError(f"config must be a bertkit.modernbert.ModernBertConfig, got {type(config).__name__}")
        self.config = config.validate()

    def post_init(self) -> None:
        self.apply(self._init_weights)
        self.tie_weights()
        kernels.track(self)  # packed inference weights then see every later edit of them (kernels.py)

    def _init_weights(self, module: nn.Module) -> None:
        """transformers' init: truncated normal weights (std initializer_range; outputs scaled down by
        sqrt(2 layers); classifiers hidden_size^-0.5), zero biases, LayerNorm 1 / 0."""
        cfg = self.config
        stds = {
            "in": cfg.initializer_range,
            "out": cfg.initializer_range / math.sqrt(2.0 * cfg.num_hidden_layers),
            "final_out": cfg.hidden_size**-0.5,
        }
        if isinstance(module, ModernBertEmbeddings):
            _truncated_normal(module.tok_embeddings, stds["in"], cfg.initializer_cutoff_factor)
        elif isinstance(module, (ModernBertMLP, ModernBertAttention)):
            first = module.Wi if isinstance(module, ModernBertMLP) else module.Wqkv
            _truncated_normal(first, stds["in"], cfg.initializer_cutoff_factor)
            _truncated_normal(module.Wo, stds["out"], cfg.initializer_cutoff_factor)
        elif isinstance(module, ModernBertPredictionHead):
            _truncated_normal(module.dense, stds["out"], cfg.initializer_cutoff_factor)
        elif isinstance(module, ModernBertForMaskedLM):
            _truncated_normal(module.decoder, stds["out"], cfg.initializer_cutoff_factor)
        elif isinstance(module, _ModernBertClassifier):
            _truncated_normal(module.classifier, stds["final_out"], cfg.initializer_cutoff_factor)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    @property
    def base_model(self) -> ModernBertModel:
        # the encoder at self.model; a ModernBertModel is its own
        return typing.cast("ModernBertModel", getattr(self, self.base_model_prefix, self))

    def get_input_embeddings(self) -> nn.Embedding:
        return self.base_model.embeddings.tok_embeddings


def _truncated_normal(module: nn.Linear | nn.Embedding, std: float, cutoff: float) -> None:
    nn.init.trunc_normal_(module.weight, mean=0.0, std=std, a=-cutoff * std, b=cutoff * std)
    bias = getattr(module, "bias", None)
    if bias is not None:
        nn.init.zeros_(bias)


class ModernBertModel(ModernBertPreTrainedModel):
    """The bare encoder: embeddings, the layers (global and local), the final norm."""

    def __init__(self, config: ModernBertConfig, add_pooling_layer: bool = False) -> None:
        """add_pooling_layer: BertModel's argument, so a caller that loads an encoder as BertModel(..., False) loads
        a ModernBERT folder too; ModernBERT has no pooler, so True is refused."""
        if add_pooling_layer:
            raise ConfigError("ModernBERT has no pooler: pass add_pooling_layer=False (the heads pool cls or mean)")
        super().__init__(config)
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList(ModernBertEncoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: Tensor | None = None,
    ) -> BertModelOutput | tuple[Any, ...]:
        """-> BertModelOutput's last_hidden_state (B, S, H), hidden_states, attentions (no pooler: ModernBERT has
        none); return_dict=False: transformers' tuple of the fields that are set."""
        cfg = self.config
        want_probs = cfg.output_attentions if output_attentions is None else output_attentions
        want_hidden = cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        B, S, lengths = _check_inputs(input_ids, attention_mask, position_ids, inputs_embeds, cfg.vocab_size)
        hidden = self.embeddings(input_ids, inputs_embeds)  # (B, S, H)
        if attention_mask is None:
            attention_mask = torch.ones(B, S, dtype=torch.long, device=hidden.device)
        if position_ids is None:
            position_ids = torch.arange(S, device=hidden.device)[None]  # (1, S): every row from 0, as transformers
        route = self._route(attention_mask, lengths, want_probs, hidden)
        if route.tokens is not None:  # padding-free from here on: (N, H) and each token's position (N,)
            hidden, position_ids = route.tokens.remove(hidden), route.tokens.remove(position_ids.expand(B, S))
        thetas = [cfg.rope_theta(i) for i in range(cfg.num_hidden_layers)]
        tables = {theta: attention.rotary_tables(position_ids, cfg.head_dim, theta, hidden.dtype) for theta in thetas}
        states: tuple[Tensor, ...] = ()
        probs_per_layer: tuple[Tensor, ...] = ()
        for i, layer in enumerate(self.layers):
            states += (hidden,) if want_hidden else ()
            hidden, probs = layer(hidden, tables[thetas[i]], cfg.is_local(i), route)
            probs_per_layer += (probs,) if want_probs and probs is not None else ()
        states += (hidden,) if want_hidden else ()
        hidden = self.final_norm(hidden)
        if route.tokens is not None:  # back to (B, S, H), zeros at the padding
            hidden, states = route.tokens.restore(hidden), tuple(route.tokens.restore(h) for h in states)
        out = BertModelOutput(
            last_hidden_state=hidden,
            hidden_states=states if want_hidden else None,
            attentions=probs_per_layer if want_probs else None,
        )
        return out.to_tuple() if return_dict is False else out

    def _route(self, attention_mask: Tensor, lengths: list[int] | None, want_probs: bool, hidden: Tensor) -> Route:
        """eager where probabilities are asked for (or configured); else sdpa, or padding-free (varlen) when the
        batch has padding (auto) or always (varlen). Made from the lengths already read: no device read (lengths
        None, nothing was read: the padded path with the mask as given)."""
        cfg, (B, S) = self.config, attention_mask.shape
        implementation = cfg.attn_implementation
        if want_probs or implementation == "eager":
            implementation = "eager"
        elif lengths is None:
            implementation = "sdpa"
        elif implementation == "auto":
            implementation = "varlen" if sum(lengths) < B * S else "sdpa"
        if implementation == "varlen" and lengths is not None:
            tokens = padding.unpad(attention_mask, lengths, largest=1)
            layout = attention.varlen_layout(
                tokens.bounds,
                device=hidden.device,
                dtype=hidden.dtype,
                dropout_p=cfg.attention_dropout if self.training else 0.0,
                grad=torch.is_grad_enabled() and hidden.requires_grad,
                windowed=cfg.global_attn_every_n_layers > 1,
            )
            return Route("varlen", cfg.local_attention, tokens=dataclasses.replace(tokens, layout=layout))
        if lengths is not None and sum(lengths) == B * S:  # every position real: no mask on global layers (SDPA's
            # fastest), the window alone
            band = attention.band(S, cfg.local_attention, hidden)  # (S, S), or None where the window holds them all
            return Route(
                implementation, cfg.local_attention, {False: None, True: None if band is None else band[None, None]}
            )
        masks: dict[bool, Tensor | None] = {  # additive (B, 1, S, S): global layers see every real token, local
            # ones those near them too
            False: attention.to_additive(attention_mask[:, None, None, :], hidden.dtype).expand(B, 1, S, S),
            True: attention.window_mask(attention_mask, cfg.local_attention, hidden.dtype),
        }
        return Route(implementation, cfg.local_attention, masks)


def _check_inputs(
    input_ids: Tensor | None,
    attention_mask: Tensor | None,
    position_ids: Tensor | None,
    inputs_embeds: Tensor | None,
    vocab_size: int,
) -> tuple[int, int, list[int] | None]:
    """(B, S, real tokens per row) of a forward pass's inputs, or an InputError naming the input that cannot work.
    The one host read of the pass: the ids' range and the mask's row sums together (none under torch.compile, in an
    ONNX export or for an empty batch: the lengths are then None)."""
    check_tensors(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, inputs_embeds=inputs_embeds
    )
    if (input_ids is None) == (inputs_embeds is None):
        raise InputError("pass exactly one of input_ids (batch, seq_len) or inputs_embeds (batch, seq_len, hidden)")
    if input_ids is not None and (input_ids.dim() != 2 or input_ids.dtype not in (torch.long, torch.int)):
        raise InputError(f"input_ids must be (batch, seq_len) int64, got {tuple(input_ids.shape)} {input_ids.dtype}")
    if inputs_embeds is not None and inputs_embeds.dim() != 3:
        raise InputError(f"inputs_embeds must be (batch, seq_len, hidden), got {tuple(inputs_embeds.shape)}")
    first = input_ids if input_ids is not None else inputs_embeds
    assert first is not None  # one of the two, checked above
    B, S = first.shape[:2]
    if attention_mask is not None and tuple(attention_mask.shape) != (B, S):
        raise InputError(f"attention_mask must be ({B}, {S}) like the input, got {tuple(attention_mask.shape)}")
    if position_ids is not None and tuple(position_ids.shape) not in ((B, S), (1, S)):
        raise InputError(f"position_ids must be ({B}, {S}) or (1, {S}), got {tuple(position_ids.shape)}")
    if torch.compiler.is_compiling() or torch.onnx.is_in_onnx_export() or not B * S:
        return B, S, None  # nothing read: the padded path, with the mask as given (a graph for every batch)
    mask = attention_mask.long() if attention_mask is not None else first.new_ones(B, S, dtype=torch.long)
    ids = input_ids.long() if input_ids is not None else mask.new_zeros(1)
    low, high, mask_low, mask_high, *lengths = torch.cat(
        [ids.min()[None], ids.max()[None], mask.min()[None], mask.max()[None], mask.sum(-1)]
    ).tolist()
    if low < 0 or high >= vocab_size:
        raise InputError(f"input_ids hold {low if low < 0 else high}, outside the vocabulary [0, {vocab_size})")
    if mask_low < 0 or mask_high > 1:
        raise InputError(f"attention_mask holds {mask_high if mask_high > 1 else mask_low}: 1 (attend) or 0 (padding)")
    return B, S, lengths


# ----- heads -------------------------------------------------------------------------------------------
class ModernBertPredictionHead(nn.Module):
    """dense (H -> H) -> classifier_activation -> norm: before the MLM decoder and every classifier."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.classifier_bias)
        self.act = ACT2FN[config.classifier_activation]
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.norm(self.act(kernels.linear(hidden_states, self.dense)))


def _encoded(
    model: ModernBertModel,
    input_ids: Tensor | None,
    attention_mask: Tensor | None,
    position_ids: Tensor | None,
    inputs_embeds: Tensor | None,
    output_attentions: bool | None,
    output_hidden_states: bool | None,
) -> BertModelOutput:
    out = model(input_ids, attention_mask, position_ids, inputs_embeds, output_attentions, output_hidden_states)
    assert isinstance(out, BertModelOutput)  # return_dict left at its default
    return out


class ModernBertForMaskedLM(ModernBertPreTrainedModel):
    """Every token -> head -> decoder (B, S, V). With labels and sparse_prediction (or masked_positions_only=True, as
    BertForMaskedLM takes it): logits (N_masked, V) only at the labelled tokens, and masked_positions (B, S) saying
    where they are."""

    _tied_weights = {"decoder.weight": "model.embeddings.tok_embeddings.weight"}
    _missing_ok: tuple[str, ...] = ("head.", "decoder.")  # from a bare encoder's folder: a fresh MLM head

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__(config)
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=config.decoder_bias)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.decoder

    def _vocabulary_logits(self, hidden: Tensor) -> Tensor:
        return kernels.linear(self.head(hidden), self.decoder)  # (..., V)

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        labels: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: Tensor | None = None,
        masked_positions_only: bool | None = None,
    ) -> MaskedLMOutput | tuple[Any, ...]:
        check_tensors(labels=labels)
        out = _encoded(
            self.model, input_ids, attention_mask, position_ids, inputs_embeds, output_attentions, output_hidden_states
        )
        sparse = self.config.sparse_prediction if masked_positions_only is None else masked_positions_only
        logits, loss, selected = mlm_logits_and_loss(
            self._vocabulary_logits,
            out.last_hidden_state,
            labels,
            self.config.vocab_size,
            sparse and labels is not None,
            self.training,
        )
        result = MaskedLMOutput(loss, logits, out.hidden_states, out.attentions, selected)
        return result.to_tuple() if return_dict is False else result


class _ModernBertClassifier(ModernBertPreTrainedModel):
    """The classifier heads' layers: the encoder, head, dropout and a classifier of `outputs` scores."""

    # what fine-tuning starts fresh: the classifier, and the head where the folder has none (an MLM's head loads)
    _missing_ok: tuple[str, ...] = ("head.", "classifier.")

    def __init__(self, config: ModernBertConfig, outputs: int) -> None:
        super().__init__(config)
        self.num_labels = len(config.id2label)
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.drop = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, outputs)
        self.post_init()

    def pooled(self, hidden: Tensor, attention_mask: Tensor | None) -> Tensor:
        """(B, S, H) -> (B, H): the first token, or the mean over the real tokens (classifier_pooling)."""
        if self.config.classifier_pooling == "cls":
            return hidden[:, 0]
        keep = attention_mask if attention_mask is not None else hidden.new_ones(hidden.shape[:2])
        return (hidden * keep.unsqueeze(-1)).sum(dim=1) / keep.sum(dim=1, keepdim=True)

    def scores(self, hidden: Tensor) -> Tensor:
        return self.classifier(self.drop(self.head(hidden)))


class _ModernBertLabelled(_ModernBertClassifier, abc.ABC):
    """A classifier whose forward takes `labels`: the encoder, then `logits`, then `loss` (the subclass's two)."""

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        labels: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: Tensor | None = None,
    ) -> ClassifierOutput | tuple[Any, ...]:
        check_tensors(labels=labels)
        out = _encoded(
            self.model, input_ids, attention_mask, position_ids, inputs_embeds, output_attentions, output_hidden_states
        )
        logits = self.logits(out.last_hidden_state, attention_mask)
        loss = self.loss(logits, labels) if labels is not None else None
        result = ClassifierOutput(loss, logits, out.hidden_states, out.attentions)
        return result.to_tuple() if return_dict is False else result

    @abc.abstractmethod
    def logits(self, hidden: Tensor, attention_mask: Tensor | None) -> Tensor:
        """The head's logits of the encoder's last hidden state (B, S, H)."""

    @abc.abstractmethod
    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        """The head's loss of its logits against `labels`."""


class ModernBertForSequenceClassification(_ModernBertLabelled):
    """Pooled (cls or mean) -> head -> drop -> classifier (B, num_labels); the loss by problem_type (heads.py)."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__(config, len(config.id2label))

    def logits(self, hidden: Tensor, attention_mask: Tensor | None) -> Tensor:
        return self.scores(self.pooled(hidden, attention_mask))  # (B, num_labels)

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        return classification_loss(self.config, logits, labels)


class ModernBertForTokenClassification(_ModernBertLabelled):
    """Every token -> head -> drop -> classifier (B, S, num_labels); labels -100 skipped."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__(config, len(config.id2label))

    def logits(self, hidden: Tensor, attention_mask: Tensor | None) -> Tensor:
        return self.scores(hidden)  # (B, S, num_labels)

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        return token_classification_loss(logits, labels)


class ModernBertForQuestionAnswering(_ModernBertClassifier):
    """Every token -> head -> drop -> classifier (H -> num_labels, 2): start and end logits (B, S) each."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__(config, len(config.id2label))

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        start_positions: Tensor | None = None,
        end_positions: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: Tensor | None = None,
    ) -> QuestionAnsweringOutput | tuple[Any, ...]:
        check_tensors(start_positions=start_positions, end_positions=end_positions)
        out = _encoded(
            self.model, input_ids, attention_mask, position_ids, inputs_embeds, output_attentions, output_hidden_states
        )
        logits = self.scores(out.last_hidden_state)  # (B, S, 2)
        start_logits, end_logits = (t.squeeze(-1).contiguous() for t in logits.split(1, dim=-1))  # (B, S) each
        loss = span_loss(start_logits, end_logits, start_positions, end_positions)
        result = QuestionAnsweringOutput(loss, start_logits, end_logits, out.hidden_states, out.attentions)
        return result.to_tuple() if return_dict is False else result


class ModernBertForMultipleChoice(_ModernBertClassifier):
    """(B, choices, S) inputs as B * choices rows; each pooled -> head -> drop -> one score: (B, choices)."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__(config, 1)

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        labels: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: Tensor | None = None,
    ) -> ClassifierOutput | tuple[Any, ...]:
        check_tensors(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, labels=labels)
        first = input_ids if input_ids is not None else inputs_embeds
        if first is None or first.dim() != (3 if input_ids is not None else 4):
            raise InputError("pass input_ids (batch, num_choices, seq_len) or inputs_embeds (..., hidden)")
        B, C, S = first.shape[:3]
        mask = attention_mask.reshape(B * C, S) if attention_mask is not None else None
        out = _encoded(
            self.model,
            input_ids.reshape(B * C, S) if input_ids is not None else None,
            mask,
            position_ids.reshape(-1, S) if position_ids is not None else None,
            inputs_embeds.reshape(B * C, S, -1) if inputs_embeds is not None else None,
            output_attentions,
            output_hidden_states,
        )
        logits = self.scores(self._choice_vector(out.last_hidden_state, mask)).view(B, C)  # (B, choices)
        loss = choice_loss(logits, labels) if labels is not None else None
        result = ClassifierOutput(loss, logits, out.hidden_states, out.attentions)
        return result.to_tuple() if return_dict is False else result

    def _choice_vector(self, hidden: Tensor, attention_mask: Tensor | None) -> Tensor:
        """As pooled, but "cls" takes each row's first real token (a left-padded row's too), as transformers."""
        if self.config.classifier_pooling == "cls" and attention_mask is not None:
            rows = torch.arange(hidden.shape[0], device=hidden.device)
            return hidden[rows, attention_mask.argmax(dim=-1)]
        return self.pooled(hidden, attention_mask)


# {BERT class: its ModernBERT counterpart}: a BERT class asked to load a "modernbert" folder builds this one
# (checkpoint.model_class_for), so the commands load ModernBERT folders as they load BERT's
MODERNBERT_CLASSES: dict[type, type[ModernBertPreTrainedModel]] = {
    BertModel: ModernBertModel,
    BertForMaskedLM: ModernBertForMaskedLM,
    BertForSequenceClassification: ModernBertForSequenceClassification,
    BertForTokenClassification: ModernBertForTokenClassification,
    BertForQuestionAnswering: ModernBertForQuestionAnswering,
    BertForMultipleChoice: ModernBertForMultipleChoice,
}
__all__ = ["ModernBertConfig", *(cls.__name__ for cls in MODERNBERT_CLASSES.values())]
