"""The BERT encoder, part by part, with the parameter names of `transformers` 4.x.

    input_ids (B, S)
      -> Embeddings: word + token type (+ absolute position), LayerNorm, dropout      (B, S, E)
      -> embeddings_project (ELECTRA only, where E = embedding_size != H): Linear E -> H   (B, S, H)
      -> BertEncoder: num_hidden_layers Layers, one AFTER another; in each:
           Attention: SelfAttention splits H into `heads` parallel heads of head_dim = H / heads,
                      each attends over all positions; SelfOutput merges them, residual + LayerNorm
           (decoders with add_cross_attention: a second Attention over the encoder's output)
           Intermediate (B, S, I) -> Output (B, S, H), residual + LayerNorm
      -> last_hidden_state (B, S, H); Pooler: tanh(dense(first token))   pooler_output (B, H)

Before the first layer, BertModel.forward's plan (plan.py) reads the device ONCE (the input checks' values
and where the real tokens are) and decides the attention path ONCE (eager, sdpa or the unpadded varlen path,
and how); every layer reads that AttentionPath and reads nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from . import attention, kernels, padding
from .activations import ACT2FN
from .config import AttnImplementation, BertConfig
from .deprecated import moved
from .errors import ConfigError, InputError
from .plan import KVCache, LegacyCache, make_plan
from .pretrained import PreTrainedModel

if TYPE_CHECKING:
    from dataclasses import Field


class ModelOutput:
    """Base of the output dataclasses: fields by name, or by index over the fields that are set."""

    if TYPE_CHECKING:  # every subclass is a dataclass: fields(self) reads its fields
        __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(v for v in (getattr(self, f.name) for f in fields(self)) if v is not None)

    # out["logits"], or out[0] = the first field that is set, as in transformers
    def __getitem__(self, key: str | int | slice) -> Any:
        return getattr(self, key) if isinstance(key, str) else self.to_tuple()[key]


@dataclass
class BertModelOutput(ModelOutput):
    """Field names of transformers' BaseModelOutputWithPoolingAndCrossAttentions."""

    last_hidden_state: Tensor  # (B, S, H)
    pooler_output: Tensor | None = None  # (B, H)
    past_key_values: KVCache | None = None
    hidden_states: tuple[Tensor, ...] | None = None  # embeddings + each layer's output, (B, S, H) each
    attentions: tuple[Tensor, ...] | None = None  # per layer (B, heads, S, T)
    cross_attentions: tuple[Tensor, ...] | None = None  # per layer (B, heads, S, T_enc)


# ----- embeddings --------------------------------------------------------------------------------
class Embeddings(nn.Module):
    """token id -> vector: word + token type (+ absolute position) embeddings, LayerNorm, dropout.

    E = config.embedding_width wide: hidden_size in BERT, ELECTRA's embedding_size (BertModel then projects)."""

    position_ids: Tensor  # (1, max_position_embeddings) 0, 1, 2, ...: a buffer, not saved

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        E = config.embedding_width
        self.word_embeddings = nn.Embedding(config.vocab_size, E, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, E)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, E)
        self.LayerNorm = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.position_embedding_type = config.position_embedding_type
        self.register_buffer(
            "position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)), persistent=False
        )

    def forward(
        self,
        input_ids: Tensor | None,
        token_type_ids: Tensor,
        position_ids: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        past_length: int = 0,
    ) -> Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # (B, S, E)
        # the length read from input_ids where given, as transformers' export reads it: ONNX Runtime's optimizer
        # then fuses the embeddings into one EmbedLayerNormalization
        S = inputs_embeds.shape[1] if input_ids is None else input_ids.shape[1]
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids)
        if self.position_embedding_type == "absolute":
            if position_ids is None:  # positions continue after the cached tokens
                position_ids = self.position_ids[:, past_length : past_length + S]
            embeddings = embeddings + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))  # (B, S, E)


# ----- attention ---------------------------------------------------------------------------------
class SelfAttention(nn.Module):
    """Multi-head attention. query/key/value are each H -> heads * head_dim, then split per head.

    As self-attention, keys and values come from the same tokens (plus the cache); as
    cross-attention, from `encoder_hidden_states`.
    """

    def __init__(self, config: BertConfig, position_embedding_type: str | None = None) -> None:
        super().__init__()
        self.num_attention_heads = config.num_attention_heads  # shrinks when heads are pruned
        self.attention_head_size = config.hidden_size // config.num_attention_heads  # head_dim
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.position_embedding_type = position_embedding_type or config.position_embedding_type
        if self.position_embedding_type != "absolute":  # one vector per signed distance
            self.distance_embedding = nn.Embedding(2 * config.max_position_embeddings - 1, self.attention_head_size)
        self.is_decoder = config.is_decoder
        self.attn_implementation = config.attn_implementation

    def extra_repr(self) -> str:
        return (
            f"heads={self.num_attention_heads}, head_dim={self.attention_head_size}, "
            f"position={self.position_embedding_type}, backend={self.attn_implementation}"
        )

    def split_heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape  # (B, T, heads * head_dim) -> (B, heads, T, head_dim)
        return x.view(B, T, self.num_attention_heads, self.attention_head_size).transpose(1, 2)

    def forward(
        self,
        hidden_states: Tensor,
        attention_mask: Tensor | None = None,
        head_mask: Tensor | None = None,
        encoder_hidden_states: Tensor | None = None,
        past_key_value: tuple[Tensor, ...] | None = None,
        output_attentions: bool = False,
        path: attention.AttentionPath | None = None,
    ) -> tuple[Tensor, Tensor | None, tuple[Tensor, ...] | None]:
        """-> (context, attention probabilities (eager) or None, this layer's keys and values (decoders) or None).

        `path` is the attention BertModel chose for the whole forward pass; a SelfAttention called on
        its own (no model around it) takes the padded backend its attn_implementation names."""
        is_cross = encoder_hidden_states is not None
        relative = self.position_embedding_type != "absolute"
        if path is None:
            backend = attention.padded_backend(
                self.attn_implementation,
                need_probs=output_attentions,
                head_mask=head_mask is not None,
                relative=relative,
            )
            path = attention.AttentionPath(backend, cross=backend)
        if path.tokens is not None:
            return self.forward_unpadded(hidden_states, path.tokens), None, None
        past_length = 0
        if not is_cross and kernels.packs(
            hidden_states, self.training
        ):  # inference on packed weights: q / k / v as ONE product
            qkv = kernels.linear(hidden_states, self.query, self.key, self.value)  # (B, S, 3 * heads * head_dim)
            q, k, v = (self.split_heads(x) for x in qkv.split(self.all_head_size, dim=-1))
        else:
            q = self.split_heads(kernels.linear(hidden_states, self.query))  # (B, heads, S, head_dim)
            if is_cross and past_key_value is not None:
                k, v = past_key_value  # the encoder output does not change while decoding: reuse
            else:
                source = encoder_hidden_states if encoder_hidden_states is not None else hidden_states  # is_cross
                k = self.split_heads(kernels.linear(source, self.key))  # (B, heads, T, head_dim)
                v = self.split_heads(kernels.linear(source, self.value))
        if not is_cross and past_key_value is not None:  # self-attention cache grows by S positions
            past_length = past_key_value[0].shape[2]
            k = torch.cat([past_key_value[0], k], dim=2)
            v = torch.cat([past_key_value[1], v], dim=2)
        present = (k, v) if self.is_decoder else None

        position_scores = None
        if relative:
            position_scores = attention.relative_position_scores(
                q, k, self.distance_embedding, self.position_embedding_type, past_length
            )
        name = path.cross if is_cross else path.backend
        assert name is not None, "an AttentionPath for cross-attention names its backend (path.cross)"
        context, probs = attention.BACKENDS[name](
            q,
            k,
            v,
            attention_mask,
            dropout_p=self.dropout.p if self.training else 0.0,
            head_mask=head_mask,
            position_scores=position_scores,
        )
        B, _, S, _ = context.shape  # merge heads: (B, heads, S, head_dim) -> (B, S, heads * head_dim)
        context = context.transpose(1, 2).reshape(B, S, self.all_head_size)
        return context, probs, present

    def forward_unpadded(self, hidden_states: Tensor, varlen: padding.Unpadded) -> Tensor:
        """The unpadded path: hidden_states (N, H) are the real tokens of all sequences, no batch axis.

        query, key and value run as ONE matrix multiply (their weights side by side, 3 * heads *
        head_dim outputs); the checkpoint still holds them as three Linears.
        """
        N = hidden_states.shape[0]
        qkv = kernels.linear(hidden_states, self.query, self.key, self.value)  # (N, 3 * heads * head_dim)
        qkv = qkv.view(N, 3, self.num_attention_heads, self.attention_head_size)
        q, k, v = qkv.unbind(1)  # each (N, heads, head_dim)
        context = attention.varlen_attention(
            q,
            k,
            v,
            varlen.cu_seqlens,
            varlen.max_seqlen,
            dropout_p=self.dropout.p if self.training else 0.0,
            bounds=varlen.bounds,
            layout=varlen.layout,
        )
        return context.reshape(N, self.all_head_size)  # heads side by side again, (N, heads * head_dim)


class ResidualOutput(nn.Module):
    """The end of both sub-blocks: dense (in_features -> H), dropout, + residual, LayerNorm."""

    def __init__(self, config: BertConfig, in_features: int) -> None:
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: Tensor, input_tensor: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(kernels.linear(hidden_states, self.dense)) + input_tensor)  # (B, S, H)


class SelfOutput(ResidualOutput):
    """Mix the concatenated heads back to H, dropout, residual + LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config, config.hidden_size)


class Attention(nn.Module):
    """SelfAttention + SelfOutput, and head pruning."""

    def __init__(self, config: BertConfig, position_embedding_type: str | None = None) -> None:
        super().__init__()
        self.self = SelfAttention(config, position_embedding_type)
        self.output = SelfOutput(config)
        self.pruned_heads: set[int] = set()  # original head numbers already removed

    def prune_heads(self, heads: Iterable[int]) -> None:
        """Remove heads (original numbering) from query/key/value rows and output.dense columns."""
        heads = set(heads) - self.pruned_heads
        if not heads:
            return
        sa = self.self
        keep = torch.ones(sa.num_attention_heads, sa.attention_head_size, dtype=torch.bool)
        for head in heads:  # position of `head` among the heads still present
            keep[head - sum(1 for p in self.pruned_heads if p < head)] = False
        index = keep.view(-1).nonzero().view(-1)
        sa.query = _prune_linear(sa.query, index, dim=0)
        sa.key = _prune_linear(sa.key, index, dim=0)
        sa.value = _prune_linear(sa.value, index, dim=0)
        self.output.dense = _prune_linear(self.output.dense, index, dim=1)
        sa.num_attention_heads -= len(heads)
        sa.all_head_size = sa.num_attention_heads * sa.attention_head_size
        self.pruned_heads |= heads

    def forward(
        self,
        hidden_states: Tensor,
        attention_mask: Tensor | None = None,
        head_mask: Tensor | None = None,
        encoder_hidden_states: Tensor | None = None,
        past_key_value: tuple[Tensor, ...] | None = None,
        output_attentions: bool = False,
        path: attention.AttentionPath | None = None,
    ) -> tuple[Tensor, Tensor | None, tuple[Tensor, ...] | None]:
        context, probs, present = self.self(
            hidden_states, attention_mask, head_mask, encoder_hidden_states, past_key_value, output_attentions, path
        )
        return self.output(context, hidden_states), probs, present


def _prune_linear(layer: nn.Linear, index: Tensor, dim: int) -> nn.Linear:
    index = index.to(layer.weight.device)
    weight = layer.weight.index_select(dim, index).detach().clone()
    bias = layer.bias.detach().clone() if dim == 1 else layer.bias.index_select(0, index).detach().clone()
    out_features, in_features = weight.shape
    new = nn.Linear(in_features, out_features, device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        new.weight.copy_(weight)
        new.bias.copy_(bias)
    return new


# ----- feed-forward ------------------------------------------------------------------------------
class Intermediate(nn.Module):
    """Feed-forward up: H -> I (intermediate_size, usually 4H), then the activation (hidden_act)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = ACT2FN[config.hidden_act]
        self.hidden_act = config.hidden_act

    def extra_repr(self) -> str:
        return f"act={self.hidden_act}"

    def forward(self, hidden_states: Tensor) -> Tensor:
        if kernels.packs(
            hidden_states, self.training
        ):  # the activation fused into the packed product where oneDNN has it
            return kernels.linear(hidden_states, self.dense, act=self.hidden_act)  # (B, S, I)
        return self.intermediate_act_fn(self.dense(hidden_states))  # (B, S, I)


class Output(ResidualOutput):
    """Feed-forward down: I -> H, dropout, residual + LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config, config.intermediate_size)


# ----- layer and encoder -------------------------------------------------------------------------
class Layer(nn.Module):
    """One transformer block: attention (+ cross-attention in decoders), then feed-forward."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.chunk_size_feed_forward = config.chunk_size_feed_forward
        self.attention = Attention(config)
        self.add_cross_attention = config.add_cross_attention
        if self.add_cross_attention:
            self.crossattention = Attention(config, position_embedding_type="absolute")
        self.intermediate = Intermediate(config)
        self.output = Output(config)

    def forward(
        self,
        hidden_states: Tensor,
        attention_mask: Tensor | None = None,
        head_mask: Tensor | None = None,
        encoder_hidden_states: Tensor | None = None,
        encoder_attention_mask: Tensor | None = None,
        past_key_value: tuple[Tensor, ...] | None = None,
        output_attentions: bool = False,
        path: attention.AttentionPath | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None, tuple[Tensor, ...] | None]:
        """hidden_states (B, S, H), or (N, H) unpadded tokens when path.tokens says where sequences are."""
        self_past = past_key_value[:2] if past_key_value is not None else None
        hidden_states, self_probs, present = self.attention(
            hidden_states,
            attention_mask,
            head_mask,
            past_key_value=self_past,
            output_attentions=output_attentions,
            path=path,
        )
        cross_probs = None
        if encoder_hidden_states is not None:
            cross_past = past_key_value[2:] if past_key_value is not None and len(past_key_value) == 4 else None
            hidden_states, cross_probs, cross_present = self.crossattention(
                hidden_states,
                encoder_attention_mask,
                head_mask,
                encoder_hidden_states,
                cross_past,
                output_attentions,
                path,
            )
            if present is not None:
                present = present + cross_present
        return self.feed_forward(hidden_states), self_probs, cross_probs, present

    def feed_forward(self, hidden_states: Tensor) -> Tensor:
        """Position-wise, so it can run on chunks of positions to save memory, with equal results."""
        if self.chunk_size_feed_forward > 0:
            dim = hidden_states.dim() - 2  # the positions: 1 in (B, S, H), 0 in unpadded (N, H)
            return torch.cat(
                [self.feed_forward_chunk(c) for c in hidden_states.split(self.chunk_size_feed_forward, dim=dim)],
                dim=dim,
            )
        return self.feed_forward_chunk(hidden_states)

    def feed_forward_chunk(self, hidden_states: Tensor) -> Tensor:
        return self.output(self.intermediate(hidden_states), hidden_states)


class BertEncoder(nn.Module):
    """num_hidden_layers Layers applied in sequence: layer i+1 reads layer i's output."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList([Layer(config) for _ in range(config.num_hidden_layers)])
        self.gradient_checkpointing = False

    def forward(
        self,
        hidden_states: Tensor,
        attention_mask: Tensor | None = None,
        head_mask: Tensor | None = None,
        encoder_hidden_states: Tensor | None = None,
        encoder_attention_mask: Tensor | None = None,
        past_key_values: KVCache | None = None,
        use_cache: bool = False,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        path: attention.AttentionPath | None = None,
    ) -> tuple[
        Tensor,
        tuple[tuple[Tensor, ...] | None, ...] | None,
        tuple[Tensor, ...] | None,
        tuple[Tensor | None, ...] | None,
        tuple[Tensor | None, ...] | None,
    ]:
        """-> (last hidden states, every layer's keys and values (use_cache), the hidden states
        (output_hidden_states), every layer's attention and cross-attention probabilities (output_attentions))."""
        all_hidden: tuple[Tensor, ...] | None = (hidden_states,) if output_hidden_states else None
        all_attn: tuple[Tensor | None, ...] | None = () if output_attentions else None
        all_cross: tuple[Tensor | None, ...] | None = (
            () if output_attentions and encoder_hidden_states is not None else None
        )
        presents: tuple[tuple[Tensor, ...] | None, ...] | None = () if use_cache else None
        for i, layer in enumerate(self.layer):
            args = (
                hidden_states,
                attention_mask,
                head_mask[i] if head_mask is not None else None,
                encoder_hidden_states,
                encoder_attention_mask,
                past_key_values[i] if past_key_values is not None else None,
                output_attentions,
                path,
            )
            if self.gradient_checkpointing and self.training:
                # keep only the layer's input; recompute its activations during backward
                hidden_states, probs, cross_probs, present = checkpoint(layer, *args, use_reentrant=False)
            else:
                hidden_states, probs, cross_probs, present = layer(*args)
            if presents is not None:  # use_cache
                presents = presents + (present,)
            if all_attn is not None:  # output_attentions
                all_attn = all_attn + (probs,)
                if all_cross is not None:
                    all_cross = all_cross + (cross_probs,)
            if all_hidden is not None:  # output_hidden_states
                all_hidden = all_hidden + (hidden_states,)
        return hidden_states, presents, all_hidden, all_attn, all_cross


class Pooler(nn.Module):
    """tanh(dense(h[CLS])): the sentence vector NSP and classification heads start from."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.activation(self.dense(hidden_states[:, 0]))  # (B, H)


# ----- the models --------------------------------------------------------------------------------
class InferenceModel(Protocol):
    """What inference needs of a model: a bertkit model (BertModel, a BertFor* head, a ModernBERT one) or a stand-in
    that runs in its place (engines.py: an exported ONNX graph, or the graph and the torch model batch by batch)."""

    training: bool
    config: Any  # the family's config: BertConfig (BERT, ELECTRA) or ModernBertConfig

    def eval(self) -> Any: ...

    def train(self, mode: bool = True) -> Any: ...

    def parameters(self) -> Iterator[Tensor]: ...  # where the inputs go: the first one's device

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


class BertPreTrainedModel(PreTrainedModel):
    """What BERT and ELECTRA models share (pretrained.py: what every family shares): init, pruning, gradient
    checkpointing, the attention implementation. ELECTRA's classes set model_type "electra" (electra.py)."""

    config: BertConfig
    config_class = BertConfig

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        if not isinstance(config, BertConfig):
            raise TypeError(f"config must be a bertkit.BertConfig, got {type(config).__name__}")
        self.config = config.validate()
        if config.model_type != self.model_type or (
            config.embedding_width != config.hidden_size and self.model_type == "bert"
        ):
            what = (
                f"model_type {config.model_type!r}"
                if config.model_type != self.model_type
                else f"embedding_size {config.embedding_size} != hidden_size {config.hidden_size} (ELECTRA's "
                "factorised embeddings, which transformers' BERT classes cannot load)"
            )
            raise ConfigError(
                f"{type(self).__name__} builds a {self.model_type.upper()} model, but the config has "
                f"{what}: use the {'Bert' if self.model_type != 'bert' else 'Electra'}* class "
                "(bertkit.electra.ELECTRA_CLASSES pairs them)"
            )

    def post_init(self) -> None:
        self.apply(self._init_weights)
        if self.config.pruned_heads:
            self.prune_heads(self.config.pruned_heads)
        self.tie_weights()
        kernels.track(self)  # packed inference weights then see every later edit of them (kernels.py)

    def _init_weights(self, module: nn.Module) -> None:
        """BERT's initialisation: normal(0, initializer_range) weights, zero biases, LayerNorm 1/0."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    @property
    def base_model(self) -> BertModel:
        # the encoder at self.bert (self.electra); a BertModel is its own
        return cast("BertModel", getattr(self, self.base_model_prefix, self))

    def prune_heads(self, heads_to_prune: Mapping[int, Iterable[int]]) -> None:
        """Remove attention heads, e.g. {0: [1, 2]}; recorded in config.pruned_heads for saving."""
        base = self.base_model
        for layer, heads in heads_to_prune.items():
            layer, heads = int(layer), {int(h) for h in heads}
            if not 0 <= layer < len(base.encoder.layer) or any(
                not 0 <= h < self.config.num_attention_heads for h in heads
            ):
                raise InputError(
                    f"prune_heads({{{layer}: {sorted(heads)}}}): the model has layers "
                    f"0..{len(base.encoder.layer) - 1} and heads 0..{self.config.num_attention_heads - 1}"
                )
            attn = cast(Layer, base.encoder.layer[layer]).attention  # the encoder's ModuleList holds Layers
            if len(attn.pruned_heads | heads) >= self.config.num_attention_heads:
                raise InputError(f"prune_heads: layer {layer} would lose all its heads; keep at least one")
            attn.prune_heads(heads)
            self.config.pruned_heads[layer] = sorted(attn.pruned_heads)

    def set_attn_implementation(self, name: str) -> None:
        """Switch attention implementation: auto | eager | sdpa | varlen (see BertConfig)."""
        from .config import ATTN_IMPLEMENTATIONS

        if name not in ATTN_IMPLEMENTATIONS:
            raise InputError(f"attn_implementation must be one of {', '.join(ATTN_IMPLEMENTATIONS)}, got {name!r}")
        implementation = cast(AttnImplementation, name)  # one of ATTN_IMPLEMENTATIONS, checked above
        self.config.attn_implementation = implementation
        for module in self.modules():
            if isinstance(module, SelfAttention):
                module.attn_implementation = implementation

    def gradient_checkpointing_enable(self) -> None:
        """Trade compute for memory: layers recompute their activations in backward."""
        self.base_model.encoder.gradient_checkpointing = True

    def gradient_checkpointing_disable(self) -> None:
        self.base_model.encoder.gradient_checkpointing = False

    def get_input_embeddings(self) -> nn.Embedding:
        return self.base_model.embeddings.word_embeddings


class BertModel(BertPreTrainedModel):
    """The bare encoder: embeddings, the layers, and (optionally) the pooler.

    ELECTRA's encoder is this one (bertkit.electra.ElectraModel): where its embeddings are narrower than the
    layers (embedding_size E != hidden_size H), embeddings_project (E -> H) runs between them; else it is None.
    """

    _missing_ok: tuple[str, ...] = ("pooler.",)

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config)
        self.embeddings = Embeddings(config)
        E, H = config.embedding_width, config.hidden_size
        self.embeddings_project = nn.Linear(E, H) if E != H else None
        self.encoder = BertEncoder(config)
        self.pooler = Pooler(config) if add_pooling_layer else None
        self.post_init()

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        head_mask: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        encoder_hidden_states: Tensor | None = None,
        encoder_attention_mask: Tensor | None = None,
        past_key_values: KVCache | LegacyCache | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BertModelOutput | tuple[Any, ...]:
        """-> BertModelOutput (return_dict=False: transformers' tuple of the fields that are set); plan.py checks."""
        attentions = self._attentions()
        p = make_plan(
            self.config,
            attentions,
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            head_mask=head_mask,
            inputs_embeds=inputs_embeds,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask,
            past_key_values=past_key_values,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            checkpointing=self.encoder.gradient_checkpointing and self.training,
        )
        hidden = self.embeddings(input_ids, p.token_type_ids, p.position_ids, inputs_embeds, p.past)  # (B, S, E)
        if self.embeddings_project is not None:
            hidden = self.embeddings_project(hidden)  # (B, S, H)
        route = p.route(hidden, self.encoder, attentions)
        if route.path.tokens is not None:
            hidden = route.path.tokens.remove(hidden)  # (N, H): only the real tokens go through the layers
        hidden, presents, all_hidden, all_attn, all_cross = self.encoder(
            hidden,
            route.mask,
            route.head_mask,
            encoder_hidden_states,
            route.cross_mask,
            p.past_key_values,
            p.use_cache,
            p.output_attentions,
            p.output_hidden_states,
            route.path,
        )
        hidden, all_hidden = route.restore(hidden, all_hidden)  # (B, S, H), zeros at the padding
        pooled = self.pooler(hidden) if self.pooler is not None else None
        if return_dict is False:  # transformers' tuple: (last_hidden_state, pooler_output or None, ...)
            rest = BertModelOutput(hidden, None, presents, all_hidden, all_attn, all_cross).to_tuple()[1:]
            return (hidden, pooled) + rest
        return BertModelOutput(hidden, pooled, presents, all_hidden, all_attn, all_cross)

    def _attentions(self) -> list[SelfAttention]:
        """Each layer's self-attention (the encoder's ModuleList holds Layers, typed as plain Modules)."""
        return [layer.attention.self for layer in cast("Iterable[Layer]", self.encoder.layer)]


if not TYPE_CHECKING:  # old names, for one release
    __getattr__ = moved(__name__, {"Encoder": "bertkit.model:BertEncoder"})
