"""The plan of one forward pass of the encoder: everything decided about its inputs before and around the layers.

    make_plan(config, attentions, inputs)                                        -> Plan
      shapes and dtypes checked (the host knows them: nothing read from the device)
      -> the ONE device -> host read (read_inputs): ids' ranges, masks' values, real tokens per row
      -> the values checked; defaults: token_type_ids zeros, a decoder's mask ones, packed documents' positions
    plan.route(hidden, ...)                                                      -> Route
      after the embeddings: the attention path (eager, sdpa or the unpadded varlen path; attention_path),
      decided ONCE and read by every layer, the padded path's masks, the head mask
    route.restore(hidden, all_hidden)
      after the layers: the padding put back (zeros), a row with no token all zeros on every path

Under torch.onnx export nothing is read (a graph for any input takes the padded path); under torch.compile the
value checks are left out. BertModel.forward reads: plan -> embeddings -> (unpad) -> encoder -> (restore) -> pool.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import torch
from torch import Tensor, nn

from . import attention, padding
from .config import BertConfig
from .errors import InputError

KVCache = tuple[tuple[Tensor, ...], ...]  # per layer: (self_k, self_v[, cross_k, cross_v]), each (B, heads, T, d)


class LegacyCache(Protocol):
    """transformers' Cache objects, as far as bertkit reads them: their tuple form (BertModel takes either)."""

    def to_legacy_cache(self) -> KVCache: ...


class LayerAttention(Protocol):
    """What the plan reads of each layer's self-attention (model.SelfAttention)."""

    num_attention_heads: int
    attention_head_size: int
    dropout: nn.Dropout
    training: bool


@dataclass(frozen=True)
class InputFacts:
    """What a forward pass knows about its inputs' values, from its one device -> host read
    (read_inputs); the attention path is decided from it and nothing reads again.

    ranges: (min, max) of input_ids, token_type_ids, position_ids and integer masks, by name
    odd: the float masks that hold a value other than 0 and 1
    lengths: real tokens per row of a 2-D attention_mask;  largest: its largest number (1 for 0/1,
    bool and float masks; above 1, the numbers of documents packed into rows)
    """

    ranges: dict[str, tuple[int, int]]
    odd: list[str]
    lengths: list[int] | None = None
    largest: int = 1

    @property
    def packed(self) -> bool:
        return self.largest > 1


@dataclass
class Route:
    """How the layers run: the attention path, the padded path's masks (None: every position visible, or the
    varlen path), the head mask as the layers take it; and how their output goes back to (B, S, H)."""

    path: attention.AttentionPath
    mask: Tensor | None  # (B, 1, S, T) additive, padded path
    cross_mask: Tensor | None  # (B, 1, 1, T_enc) additive
    head_mask: Tensor | None  # (layers, 1, heads, 1, 1)
    empty: Tensor | None  # (B, 1, 1) rows with no token to attend to (padded path), else None

    def restore(
        self, hidden: Tensor, all_hidden: tuple[Tensor, ...] | None
    ) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """The layers' output (N, H) or (B, S, H) -> (B, S, H), zeros at the padding and in rows with no token
        (as varlen leaves them; the padded path would average the padding's values there, as transformers does)."""
        if self.path.tokens is not None:
            tokens = self.path.tokens
            return tokens.restore(hidden), None if all_hidden is None else tuple(tokens.restore(h) for h in all_hidden)
        if self.empty is not None:
            empty = self.empty
            return hidden.masked_fill(empty, 0.0), (
                None if all_hidden is None else tuple(h.masked_fill(empty, 0.0) for h in all_hidden)
            )
        return hidden, all_hidden


@dataclass
class Plan:
    """The checked inputs of a forward pass with their defaults, and what was read of their values."""

    config: BertConfig
    B: int
    S: int
    past: int  # tokens already in the cache
    facts: InputFacts
    token_type_ids: Tensor  # (B, S)
    position_ids: Tensor | None  # (B, S) or (1, S); None: the embeddings' own 0, 1, 2, ...
    attention_mask: Tensor | None  # (B, T) or (B, S, T)
    head_mask: Tensor | None  # as given: (heads,) or (layers, heads)
    encoder_hidden_states: Tensor | None
    encoder_attention_mask: Tensor | None
    past_key_values: KVCache | None
    use_cache: bool
    output_attentions: bool
    output_hidden_states: bool

    def route(self, hidden: Tensor, encoder: nn.Module, attentions: Sequence[LayerAttention]) -> Route:
        """The layers' way for `hidden` (B, S, H), the embeddings' output, through `encoder` (its self-attention
        modules `attentions`): decided once (see Route)."""
        path = attention_path(
            self.config,
            self.attention_mask,
            self.facts,
            hidden,
            encoder,
            attentions,
            need_probs=self.output_attentions,
            head_mask=self.head_mask is not None,
            cross=self.encoder_hidden_states is not None,
        )
        mask = empty = None
        if path.tokens is None and self.attention_mask is not None:  # None: every position visible (SDPA's fastest)
            mask = self._padded_mask(hidden.dtype)
            if self.facts.lengths is not None and 0 in self.facts.lengths:  # the read told whether a row is empty
                empty = ~self.attention_mask.bool().any(dim=1)[:, None, None]  # (B, 1, 1)
        cross_mask = None
        if self.encoder_hidden_states is not None:
            given = self.encoder_attention_mask
            if given is None:
                given = torch.ones((self.B, self.encoder_hidden_states.shape[1]), device=hidden.device)
            cross_mask = attention.cross_attention_mask(given, hidden.dtype)
        head_mask = expand_head_mask(self.config, self.head_mask, hidden.dtype)
        return Route(path, mask, cross_mask, head_mask, empty)

    def _padded_mask(self, dtype: torch.dtype) -> Tensor:
        """The additive (B, 1, S, T) mask of the padded path, packed documents kept apart."""
        mask, facts = self.attention_mask, self.facts
        assert mask is not None  # route() asks only when there is one
        if facts.packed and not torch.compiler.is_compiling():  # the rule unpad checks on the varlen path
            assert facts.lengths is not None  # read with the 2-D mask's numbers (read_inputs)
            padding.check_documents(mask, facts.lengths, facts.largest)
        keep = padding.document_keep(mask) if facts.packed else mask
        return attention.self_attention_mask(keep, self.S, self.config.is_decoder, dtype)


def make_plan(
    config: BertConfig,
    attentions: Sequence[LayerAttention],
    *,
    input_ids: Tensor | None,
    attention_mask: Tensor | None,
    token_type_ids: Tensor | None,
    position_ids: Tensor | None,
    head_mask: Tensor | None,
    inputs_embeds: Tensor | None,
    encoder_hidden_states: Tensor | None,
    encoder_attention_mask: Tensor | None,
    past_key_values: KVCache | LegacyCache | None,
    use_cache: bool | None,
    output_attentions: bool | None,
    output_hidden_states: bool | None,
    checkpointing: bool,
) -> Plan:
    """The plan of a forward pass (see the module's docstring); `checkpointing`: gradient checkpointing in training."""
    cache = legacy_cache(past_key_values)
    check_tensors(
        input_ids=input_ids,
        attention_mask=attention_mask,
        token_type_ids=token_type_ids,
        position_ids=position_ids,
        head_mask=head_mask,
        inputs_embeds=inputs_embeds,
        encoder_hidden_states=encoder_hidden_states,
        encoder_attention_mask=encoder_attention_mask,
    )
    # shapes and dtypes: the host knows them, nothing is read from the device
    B, S = check_inputs(config, attentions, input_ids, inputs_embeds, cache)
    past = cache[0][0].shape[2] if cache is not None else 0
    check_shapes(config, B, S, past, token_type_ids, position_ids, attention_mask)
    if encoder_hidden_states is not None:
        check_encoder(config, encoder_hidden_states, encoder_attention_mask, B, S)
    given = input_ids if input_ids is not None else inputs_embeds
    assert given is not None  # check_inputs: exactly one of the two
    # values: the one device -> host read of this forward pass, before any layer runs
    inputs = dict(
        input_ids=input_ids,
        token_type_ids=token_type_ids,
        attention_mask=attention_mask,
        position_ids=position_ids if config.position_embedding_type == "absolute" else None,
        encoder_attention_mask=encoder_attention_mask,
    )
    if torch.onnx.is_in_onnx_export():  # a graph for any input: no value read, the padded path (export.py)
        facts = InputFacts({}, [])
    else:
        facts = read_inputs(given.device, **inputs)
        check_values(config, facts, **inputs)
    token_type_ids, attention_mask, position_ids = defaults(
        config, facts, B, S, past, given.device, token_type_ids, attention_mask, position_ids
    )
    return Plan(
        config,
        B,
        S,
        past,
        facts,
        token_type_ids,
        position_ids,
        attention_mask,
        head_mask,
        encoder_hidden_states,
        encoder_attention_mask,
        cache,
        cache_wanted(config, use_cache, checkpointing),
        config.output_attentions if output_attentions is None else output_attentions,
        config.output_hidden_states if output_hidden_states is None else output_hidden_states,
    )


def cache_wanted(config: BertConfig, use_cache: bool | None, checkpointing: bool) -> bool:
    """use_cache, else the config's: a decoder's keys and values returned for the next call."""
    use_cache = (config.use_cache if use_cache is None else use_cache) and config.is_decoder
    if use_cache and checkpointing:
        warnings.warn(
            "use_cache=True does not combine with gradient checkpointing in training; no cache is returned",
            stacklevel=4,  # past make_plan and forward: the frame that called forward
        )
        return False
    return use_cache


def defaults(
    config: BertConfig,
    facts: InputFacts,
    B: int,
    S: int,
    past: int,
    device: torch.device,
    token_type_ids: Tensor | None,
    attention_mask: Tensor | None,
    position_ids: Tensor | None,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """token_type_ids zeros; a decoder's mask ones (the causal part still applies); packed documents (mask numbers
    1, 2, ...) each start at position 0."""
    if token_type_ids is None:
        token_type_ids = torch.zeros((B, S), dtype=torch.long, device=device)
    if attention_mask is None and config.is_decoder:
        attention_mask = torch.ones((B, past + S), device=device)
    if facts.packed:
        assert attention_mask is not None  # the numbers were read from it
        if config.is_decoder or attention_mask.shape[1] != S:
            raise InputError(
                "attention_mask numbers above 1 mean packed documents, which only an encoder "
                "without a cache takes; a decoder's mask holds 0 and 1"
            )
        if position_ids is None:
            position_ids = padding.document_positions(attention_mask)
    return token_type_ids, attention_mask, position_ids


def attention_path(
    config: BertConfig,
    attention_mask: Tensor | None,
    facts: InputFacts,
    hidden: Tensor,
    encoder: nn.Module,
    attentions: Sequence[LayerAttention],
    *,
    need_probs: bool,
    head_mask: bool,
    cross: bool,
) -> attention.AttentionPath:
    """Which attention this forward pass runs: decided here, once; the layers only read it.

        eager   padded (B, heads, S, T), the probabilities written out: attn_implementation "eager",
                and every call with output_attentions, head_mask or relative positions
        sdpa    padded, torch's fused kernels: "sdpa"; "auto" on a batch with nothing padded; "auto"
                and "varlen" where only the padded path goes (decoders, cross-attention, 3-D masks)
        varlen  (N, H) real tokens, no batch axis: "varlen", and "auto" when something is padded or
                packed; tokens.layout says how attention runs over them (attention.varlen_layout)
    Cross-attention (decoders) is padded: eager or sdpa by the same rules.
    """
    impl = config.attn_implementation
    relative = config.position_embedding_type != "absolute"
    backend = attention.padded_backend(impl, need_probs=need_probs, head_mask=head_mask, relative=relative)
    if cross:
        cross_backend = attention.padded_backend(impl, need_probs=need_probs, head_mask=head_mask, relative=False)
        return attention.AttentionPath(backend, cross=cross_backend)
    if (
        backend == "eager"
        or impl not in ("varlen", "auto")
        or config.is_decoder
        or (attention_mask is not None and attention_mask.dim() != 2)
        or torch.onnx.is_in_onnx_export()
    ):
        return attention.AttentionPath(backend)
    B, S = hidden.shape[:2]
    # nothing to remove (a 2-D mask's lengths are always read, read_inputs; without them unpad reads them)
    if attention_mask is None or (
        not facts.packed and facts.lengths is not None and all(n == S for n in facts.lengths)
    ):
        if impl == "auto":
            return attention.AttentionPath("sdpa")
        tokens = padding.Unpadded.full(B, S, hidden.device)
    else:
        tokens = padding.unpad(attention_mask, facts.lengths, facts.largest)
    where = hidden.device.type
    trains = hidden.requires_grad or any(p.requires_grad for p in encoder.parameters())
    layout = attention.varlen_layout(
        tokens.bounds,
        device=hidden.device,
        dtype=torch.get_autocast_dtype(where) if torch.is_autocast_enabled(where) else hidden.dtype,  # q's
        dropout_p=max((m.dropout.p for m in attentions if m.training), default=0.0),
        # a model in training mode takes the training layout without gradients too: GradCache's first pass
        # (bertkit/gradcache.py) must draw the numbers and dropout masks its replay with gradients draws
        grad=(torch.is_grad_enabled() or encoder.training) and trains,
    )
    return attention.AttentionPath("varlen", tokens=replace(tokens, layout=layout))


# ----- the one read ------------------------------------------------------------------------------
def read_inputs(device: torch.device, **tensors: Tensor | None) -> InputFacts:
    """The ONE device -> host read of a forward pass: every question the host has about the
    inputs' values, answered by one `.tolist()` of one small vector.

        input_ids, token_type_ids, position_ids, integer masks  ->  (min, max)    the input checks
        float masks                                             ->  a value not 0 / 1?
        attention_mask (B, T)  ->  real tokens per row, and the largest number (packed documents?):
                                   the attention path and padding.unpad need nothing more
                                   (packed documents aside: unpad reads where they start)
    Nothing to ask (inputs_embeds alone), nothing read. Under torch.compile the checks are left out.
    """
    checks = not torch.compiler.is_compiling()
    mask = tensors["attention_mask"]
    questions: dict[tuple[str, str], Tensor] = {}
    for name, t in tensors.items():
        if t is None:
            continue
        if t.device != device:
            raise InputError(
                f"{name} is on {t.device}, the input on {device}: pass every input on the model's device (model.device)"
            )
        if t.numel() == 0 or t.dtype == torch.bool:
            continue
        if t.dtype.is_floating_point or t.dtype.is_complex:
            if checks:
                questions["odd", name] = ((t != 0) & (t != 1)).any()
        elif checks or (t is mask and t.dim() == 2):  # the mask's maximum tells packed documents apart
            questions["range", name] = torch.stack(torch.aminmax(t))
    if mask is not None and mask.dim() == 2:
        questions["lengths", ""] = (mask != 0).sum(-1)  # (B,)
    answers = _read_once(questions)
    ranges = {name: (v[0], v[1]) for (kind, name), v in answers.items() if kind == "range"}  # (min, max)
    two_d = "attention_mask" in ranges and mask is not None and mask.dim() == 2  # in ranges: the mask is given
    largest = ranges["attention_mask"][1] if two_d else 1
    return InputFacts(
        ranges,
        odd=[name for (kind, name), v in answers.items() if kind == "odd" and v[0]],
        lengths=answers.get(("lengths", "")),
        largest=max(largest, 1),
    )


def _read_once(questions: dict[tuple[str, str], Tensor]) -> dict[tuple[str, str], list[int]]:
    """{key: integer tensor on the device} -> {key: its values as a list of ints}, in ONE read."""
    if not questions:
        return {}
    # THE host read of a forward pass: the host waits here until the device has computed the answers
    values = torch.cat([q.reshape(-1).long() for q in questions.values()]).tolist()
    answers: dict[tuple[str, str], list[int]] = {}
    at = 0
    for key, q in questions.items():
        answers[key], at = values[at : at + q.numel()], at + q.numel()
    return answers


# ----- input checks: clear errors instead of index errors deep inside ---------------------------
def check_values(config: BertConfig, facts: InputFacts, **tensors: Tensor | None) -> None:
    """Ids inside their tables, masks of 0 and 1 (or document numbers): from what was read."""
    limits = {
        "input_ids": config.vocab_size,
        "token_type_ids": config.type_vocab_size,
        "position_ids": config.max_position_embeddings,
    }
    for name, (lo, hi) in facts.ranges.items():
        if name in limits and (lo < 0 or hi >= limits[name]):
            raise InputError(
                f"{name} holds values in [{lo}, {hi}], but must be in [0, {limits[name]}): "
                f"check the tokenizer / vocabulary matches the model"
            )
        given = tensors[name]
        assert given is not None  # a range is read only from a tensor that was given
        two_d = given.dim() == 2
        if name not in limits and (lo < 0 or (hi > 1 and not two_d)) and not torch.compiler.is_compiling():
            raise InputError(
                f"{name} holds values in [{lo}, {hi}]: 1 attends, 0 ignores"
                + (", and a 2-D mask may number packed documents 1, 2, ..." if two_d else "")
            )
    for name in facts.odd:
        mask = tensors[name]
        assert mask is not None  # odd values are read only from a tensor that was given
        value = mask[(mask != 0) & (mask != 1)][0].item()  # a second read, on the way to an error only
        raise InputError(
            f"{name} holds {value:g} where only 0 (ignore) and 1 (attend) are allowed; "
            "an additive mask (0 / -inf) converts with (mask == 0).long()"
        )


def check_inputs(
    config: BertConfig,
    attentions: Sequence[LayerAttention],
    input_ids: Tensor | None,
    inputs_embeds: Tensor | None,
    past_key_values: KVCache | None,
) -> tuple[int, int]:
    """Exactly one of input_ids / inputs_embeds, its shape, and the cache's: -> (B, S)."""
    if (input_ids is None) == (inputs_embeds is None):
        raise InputError("pass exactly one of input_ids (B, S) or inputs_embeds (B, S, hidden)")
    if input_ids is not None:
        if input_ids.dim() != 2:
            raise InputError(f"input_ids must be (batch, seq_len), got shape {tuple(input_ids.shape)}")
        _check_ids("input_ids", input_ids, tuple(input_ids.shape))
        B, S = input_ids.shape
    else:
        assert inputs_embeds is not None  # exactly one of the two, checked above
        if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != config.embedding_width:
            width = "hidden_size" if config.embedding_size is None else "embedding_size"
            raise InputError(
                f"inputs_embeds must be (batch, seq_len, {width}={config.embedding_width}), "
                f"got shape {tuple(inputs_embeds.shape)}"
            )
        B, S = inputs_embeds.shape[:2]
    if S == 0:
        raise InputError("the input has no tokens (seq_len 0); every row needs at least one, e.g. [CLS]")
    if past_key_values is not None:
        check_cache(config, attentions, past_key_values, B)
    return B, S


def check_cache(config: BertConfig, attentions: Sequence[LayerAttention], cache: KVCache, B: int) -> None:
    """A decoder's cache: one entry per layer, keys (B, heads, past_len, head_dim)."""
    if not config.is_decoder:
        raise InputError("past_key_values is for decoders (BertConfig(is_decoder=True))")
    if len(cache) != len(attentions):
        raise InputError(f"past_key_values has {len(cache)} layers, the model {len(attentions)}")
    for i, (sa, layer) in enumerate(zip(attentions, cache)):
        want = (B, sa.num_attention_heads, sa.attention_head_size)
        got = (layer[0].shape[0], layer[0].shape[1], layer[0].shape[3]) if layer[0].dim() == 4 else None
        if got != want:
            raise InputError(
                f"past_key_values[{i}] holds keys of shape {tuple(layer[0].shape)}; this "
                f"model needs (batch={B}, heads={want[1]}, past_len, head_dim={want[2]})"
            )


def check_shapes(
    config: BertConfig,
    B: int,
    S: int,
    past: int,
    token_type_ids: Tensor | None,
    position_ids: Tensor | None,
    attention_mask: Tensor | None,
) -> None:
    """The positions fit the model; token_type_ids, position_ids and attention_mask fit the input."""
    limit = config.max_position_embeddings
    if position_ids is not None and tuple(position_ids.shape) not in ((B, S), (1, S)):
        raise InputError(f"position_ids must be ({B}, {S}) or (1, {S}), got {tuple(position_ids.shape)}")
    if position_ids is not None and config.position_embedding_type == "absolute":
        _check_ids("position_ids", position_ids, None)  # its values: with the other inputs' (read_inputs)
    elif past + S > limit:
        raise InputError(
            f"input is {S} tokens"
            + (f" after {past} cached ones" if past else "")
            + f", but max_position_embeddings is {limit}: truncate the input "
            "(tokenizer max_length) or use a model with more positions"
        )
    if token_type_ids is not None:
        _check_ids("token_type_ids", token_type_ids, (B, S))
    if attention_mask is not None:
        _check_mask("attention_mask", attention_mask, B, S, past + S)


def check_encoder(
    config: BertConfig, encoder_hidden_states: Tensor, encoder_attention_mask: Tensor | None, B: int, S: int
) -> None:
    """Cross-attention's inputs: a model that has it, (B, T_enc, H) states, a (B, T_enc) or (B, S, T_enc) mask."""
    if not config.add_cross_attention:
        raise InputError(
            "encoder_hidden_states was given, but this model has no cross-attention; "
            "build it with BertConfig(is_decoder=True, add_cross_attention=True)"
        )
    if (
        encoder_hidden_states.dim() != 3
        or encoder_hidden_states.shape[0] != B
        or encoder_hidden_states.shape[2] != config.hidden_size
    ):
        raise InputError(
            f"encoder_hidden_states must be (batch={B}, T_enc, hidden={config.hidden_size}), "
            f"got {tuple(encoder_hidden_states.shape)}"
        )
    if encoder_attention_mask is not None:
        _check_mask("encoder_attention_mask", encoder_attention_mask, B, S, encoder_hidden_states.shape[1])


def expand_head_mask(config: BertConfig, head_mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """[heads] or [layers, heads] (1 keep, 0 drop) -> [layers, 1, heads, 1, 1]."""
    if head_mask is None:
        return None
    L, heads = config.num_hidden_layers, config.num_attention_heads
    if head_mask.dim() == 1 and head_mask.shape[0] == heads:
        head_mask = head_mask[None].expand(L, -1)
    if head_mask.dim() != 2 or tuple(head_mask.shape) != (L, heads):
        raise InputError(f"head_mask must be ({heads},) or ({L}, {heads}), got {tuple(head_mask.shape)}")
    if config.pruned_heads:
        raise InputError(
            "head_mask on a model with pruned heads is ambiguous: the layers have "
            "different head counts; prune or mask, not both"
        )
    return head_mask.to(dtype)[:, None, :, None, None]


def legacy_cache(past_key_values: KVCache | LegacyCache | None) -> KVCache | None:
    """Accept transformers' Cache objects too; bertkit's cache is a tuple of per-layer tuples."""
    if past_key_values is None:
        return None
    if hasattr(past_key_values, "to_legacy_cache"):
        past_key_values = past_key_values.to_legacy_cache()
        if not past_key_values:
            return None
    return tuple(tuple(t for t in layer) for layer in past_key_values)


def check_tensors(**inputs: object) -> None:
    """Every input given is a torch.Tensor, as in transformers: a list or a NumPy array is an error naming it
    (not an AttributeError deep inside); the tokenizer gives tensors with return_tensors="pt"."""
    for name, value in inputs.items():
        if value is not None and not isinstance(value, Tensor):
            numpy = type(value).__module__.startswith("numpy")
            raise InputError(
                f"{name} must be a torch.Tensor, got a {'NumPy array' if numpy else type(value).__name__}"
                f"; pass {'torch.from_numpy(x)' if numpy else 'torch.tensor(x)'} (the tokenizer gives "
                'tensors with return_tensors="pt")'
            )


def _check_ids(name: str, ids: Tensor, shape: tuple[int, ...] | None) -> None:
    """Shape and dtype; the values are checked with the other inputs' after the one read (read_inputs)."""
    if shape is not None and tuple(ids.shape) != tuple(shape):
        raise InputError(f"{name} must have shape {tuple(shape)} like the input, got {tuple(ids.shape)}")
    if ids.dtype not in (torch.long, torch.int):
        raise InputError(f"{name} must be an int64 (or int32) tensor, got {ids.dtype}")


def _check_mask(name: str, mask: Tensor, B: int, S: int, T: int) -> None:
    """The shape. The values (read_inputs) must read the same in every backend: 1 (or True) attend,
    0 ignore; a 2-D integer mask may number packed documents 1, 2, ... instead. Additive masks
    (0 / -10000 / -inf) and fractions are refused, since a backend would read them differently."""
    if tuple(mask.shape) not in ((B, T), (B, S, T)):
        raise InputError(
            f"{name} must be ({B}, {T}) or ({B}, {S}, {T}) (batch, [query,] key positions), got {tuple(mask.shape)}"
        )
