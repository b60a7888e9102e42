"""BertModel against transformers 4.57 BertModel with the same weights (float32, CPU)."""

import helpers
import pytest
import torch
from helpers import TOL, hf_twin, max_diff, padded_batch, parity

from bertkit import BertModel, InputError


# These tests compare every position with transformers, padding included: the padded path (sdpa)
# computes the padding; the default, "auto", leaves zeros there (tests/model/test_varlen.py).
def tiny(**overrides):
    return helpers.tiny(**{"attn_implementation": "sdpa", **overrides})


def random_model(*args, **overrides):
    return helpers.random_model(*args, **{"attn_implementation": "sdpa", **overrides})


transformers = pytest.importorskip("transformers")


def assert_same(ours, theirs):
    """Every output transformers gave is equal in ours (and present there)."""
    parity(ours.last_hidden_state, theirs.last_hidden_state)
    if theirs.pooler_output is not None:
        parity(ours.pooler_output, theirs.pooler_output)
    for field in ("hidden_states", "attentions", "cross_attentions"):
        if getattr(theirs, field, None) is not None:
            assert len(getattr(ours, field)) == len(getattr(theirs, field)), field
            for a, b in zip(getattr(ours, field), getattr(theirs, field)):
                assert a.shape == b.shape
                parity(a, b)


@pytest.mark.parametrize("position", ["absolute", "relative_key", "relative_key_query"])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_parity_padded_batch_with_token_types(position, backend):
    model = random_model(position_embedding_type=position, attn_implementation=backend)
    hf = hf_twin(model)
    ids, mask, types = padded_batch()
    kw = dict(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    with torch.no_grad():
        assert_same(model(**kw), hf(**kw))
        assert_same(model(**kw, output_attentions=True), hf(**kw, output_attentions=True))


@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu", "silu", "tanh"])
def test_parity_activations(act):
    model = random_model(hidden_act=act)
    hf = hf_twin(model)
    ids, mask, types = padded_batch()
    with torch.no_grad():
        assert_same(model(ids, mask, types), hf(ids, mask, types))


def test_parity_inputs_embeds_position_ids_and_3d_mask():
    model = random_model()
    hf = hf_twin(model)
    ids, mask, _ = padded_batch()
    embeds = model.embeddings.word_embeddings(ids).detach()
    position_ids = torch.arange(ids.shape[1]).flip(0)[None].expand(ids.shape[0], -1)
    mask3 = mask[:, None, :].expand(-1, ids.shape[1], -1).tril()  # (B, S, T), a different mask per query
    with torch.no_grad():
        assert_same(model(inputs_embeds=embeds, attention_mask=mask), hf(inputs_embeds=embeds, attention_mask=mask))
        assert_same(model(ids, mask, position_ids=position_ids), hf(ids, mask, position_ids=position_ids))
        assert_same(model(ids, mask3, output_attentions=True), hf(ids, mask3, output_attentions=True))


@pytest.mark.parametrize("shape", ["heads", "layers_heads"])
def test_parity_head_mask(shape):
    model = random_model()
    hf = hf_twin(model)
    ids, mask, _ = padded_batch()
    head_mask = (
        torch.tensor([1.0, 0.0, 1.0, 0.5])
        if shape == "heads"
        else torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    )
    with torch.no_grad():
        ours = model(ids, mask, head_mask=head_mask, output_attentions=True)
        theirs = hf(ids, mask, head_mask=head_mask, output_attentions=True)
        assert_same(ours, theirs)
        plain = model(ids, mask)
    assert max_diff(ours.last_hidden_state, plain.last_hidden_state) > 1e-3  # masking a head changes output
    silenced = ours.attentions[0][:, 1] if shape == "heads" else ours.attentions[1][:, 0]
    assert silenced.abs().max().item() == 0.0


def test_parity_pruned_heads_and_config_record():
    model = random_model()
    model.prune_heads({0: [1, 2], 1: [0]})
    assert model.config.pruned_heads == {0: [1, 2], 1: [0]}
    assert model.encoder.layer[0].attention.self.num_attention_heads == 2
    assert model.encoder.layer[0].attention.self.query.weight.shape == (16, 32)
    assert model.encoder.layer[0].attention.output.dense.weight.shape == (32, 16)
    model.prune_heads({0: [3]})  # original numbering: head 3 is now at position 1
    assert model.config.pruned_heads == {0: [1, 2, 3], 1: [0]}
    hf = hf_twin(model)  # transformers prunes from config.pruned_heads at init, so shapes match
    ids, mask, _ = padded_batch()
    with torch.no_grad():
        ours = model(ids, mask, output_attentions=True)
        assert_same(ours, hf(ids, mask, output_attentions=True))
    assert [a.shape[1] for a in ours.attentions] == [1, 3]
    assert "heads=1, head_dim=8" in repr(model)


def test_pruning_removes_exactly_those_heads():
    """A pruned head contributes what a zero head_mask would remove: same output."""
    model = random_model()
    ids, mask, _ = padded_batch()
    with torch.no_grad():
        masked = model(ids, mask, head_mask=torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]))
        model.prune_heads({0: [1]})
        pruned = model(ids, mask)
    assert max_diff(masked.last_hidden_state, pruned.last_hidden_state) <= TOL


def test_chunked_feed_forward_equals_unchunked_and_hf():
    model = random_model()
    ids, mask, types = padded_batch()
    with torch.no_grad():
        plain = model(ids, mask, types).last_hidden_state
        chunked_model = random_model(chunk_size_feed_forward=3)  # seq 9 = 3 chunks
        chunked_model.load_state_dict(model.state_dict())
        chunked = chunked_model(ids, mask, types)
        odd = random_model(chunk_size_feed_forward=4)  # 4 + 4 + 1: a remainder chunk
        odd.load_state_dict(model.state_dict())
        assert max_diff(odd(ids, mask, types).last_hidden_state, plain) <= TOL
        assert_same(chunked, hf_twin(chunked_model)(ids, mask, types))
    assert max_diff(chunked.last_hidden_state, plain) <= TOL


def decoder(position="absolute", **kw):
    return random_model(is_decoder=True, add_cross_attention=True, position_embedding_type=position, **kw)


def encoder_states(B=3, T=5, H=32, seed=1):
    g = torch.Generator().manual_seed(seed)
    states = torch.randn(B, T, H, generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[-1, 3:] = 0
    return states, mask


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_parity_decoder_with_cross_attention(backend):
    model = decoder(attn_implementation=backend)
    hf = hf_twin(model)
    ids, mask, _ = padded_batch()
    enc, enc_mask = encoder_states()
    kw = dict(
        input_ids=ids,
        attention_mask=mask,
        encoder_hidden_states=enc,
        encoder_attention_mask=enc_mask,
        use_cache=False,
        output_hidden_states=True,
    )
    with torch.no_grad():
        ours, theirs = model(**kw, output_attentions=True), hf(**kw, output_attentions=True)
        assert_same(ours, theirs)
        assert len(ours.cross_attentions) == 2
        assert_same(model(**kw), hf(**kw))
    # causal: position 2 attends to nothing after it
    assert ours.attentions[0][0, :, 2, 3:].abs().max().item() == 0.0


def incremental(model, ids, enc, enc_mask, steps):
    """Feed ids[:, :-steps] at once, then one token at a time, with the cache."""
    prefix = ids.shape[1] - steps
    out = model(ids[:, :prefix], encoder_hidden_states=enc, encoder_attention_mask=enc_mask, use_cache=True)
    states, past = [out.last_hidden_state], out.past_key_values
    for t in range(prefix, ids.shape[1]):
        out = model(
            ids[:, t : t + 1],
            encoder_hidden_states=enc,
            encoder_attention_mask=enc_mask,
            past_key_values=past,
            use_cache=True,
        )
        states.append(out.last_hidden_state)
        past = out.past_key_values
    return torch.cat(states, dim=1), past


@pytest.mark.parametrize("position", ["absolute", "relative_key", "relative_key_query"])
def test_cached_decoding_equals_full_pass(position):
    model = decoder(position)
    ids, _, _ = padded_batch(lengths=(8, 8, 8))
    enc, enc_mask = encoder_states()
    with torch.no_grad():
        full = model(ids, encoder_hidden_states=enc, encoder_attention_mask=enc_mask, use_cache=False)
        stepped, past = incremental(model, ids, enc, enc_mask, steps=4)
    assert max_diff(stepped, full.last_hidden_state) <= TOL
    assert len(past) == 2 and len(past[0]) == 4  # per layer: self k, v and cross k, v
    assert past[0][0].shape == (3, 4, 8, 8)  # (B, heads, T so far, head_dim)
    assert past[0][2].shape == (3, 4, 5, 8)  # cross cache: encoder length, reused


def test_cached_decoding_matches_transformers_absolute():
    model = decoder("absolute")
    hf = hf_twin(model)
    ids, _, _ = padded_batch(lengths=(8, 8, 8))
    enc, enc_mask = encoder_states()
    with torch.no_grad():
        ours, _ = incremental(model, ids, enc, enc_mask, steps=3)
        theirs, _ = incremental(hf, ids, enc, enc_mask, steps=3)
    parity(ours, theirs)


def test_transformers_relative_cache_inconsistency_is_not_copied():
    """transformers 4.57 puts every query of a cached call at the last key position.

    A relative-position decoder called with use_cache=True on several tokens therefore differs
    from the same call with use_cache=False there; bertkit follows the math and gives one answer.
    """
    model = decoder("relative_key_query")
    with torch.no_grad():  # distance vectors large enough for the position mix-up to show clearly
        for layer in model.encoder.layer:
            layer.attention.self.distance_embedding.weight.mul_(30)
    hf = hf_twin(model)
    ids, _, _ = padded_batch(lengths=(6, 6, 6))
    enc, enc_mask = encoder_states()
    kw = dict(encoder_hidden_states=enc, encoder_attention_mask=enc_mask)
    with torch.no_grad():
        hf_cached = hf(ids, **kw, use_cache=True).last_hidden_state
        hf_full = hf(ids, **kw, use_cache=False).last_hidden_state
        ours_cached = model(ids, **kw, use_cache=True).last_hidden_state
        ours_full = model(ids, **kw, use_cache=False).last_hidden_state
    assert max_diff(hf_cached, hf_full) > 1e-3  # transformers disagrees with itself
    assert max_diff(ours_cached, ours_full) <= TOL  # bertkit does not
    parity(ours_full, hf_full)  # and equals transformers' uncached pass
    # one token at a time with a cache is where transformers is right; we agree there too
    with torch.no_grad():
        a, _ = incremental(model, ids, enc, enc_mask, steps=5)
        b, _ = incremental(hf, ids, enc, enc_mask, steps=5)
    parity(a[:, 1:], b[:, 1:])


def test_accepts_transformers_cache_object():
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    model = decoder("absolute")
    ids, _, _ = padded_batch(lengths=(6, 6, 6))
    enc, enc_mask = encoder_states()
    with torch.no_grad():
        first = model(ids[:, :5], encoder_hidden_states=enc, encoder_attention_mask=enc_mask)
        cache = EncoderDecoderCache.from_legacy_cache(first.past_key_values)
        step = model(ids[:, 5:], encoder_hidden_states=enc, encoder_attention_mask=enc_mask, past_key_values=cache)
        full = model(ids, encoder_hidden_states=enc, encoder_attention_mask=enc_mask)
        empty = model(
            ids,
            encoder_hidden_states=enc,
            encoder_attention_mask=enc_mask,
            past_key_values=EncoderDecoderCache(DynamicCache(), DynamicCache()),
        )
    assert max_diff(step.last_hidden_state, full.last_hidden_state[:, 5:]) <= TOL
    assert max_diff(empty.last_hidden_state, full.last_hidden_state) <= TOL


def grads(model, ids, mask, types):
    model.zero_grad()
    out = model(ids, attention_mask=mask, token_type_ids=types)
    (out.last_hidden_state.pow(2).mean() + out.pooler_output.sum()).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("position", ["absolute", "relative_key_query"])
def test_gradients_equal_with_gradient_checkpointing(position):
    model = random_model(position_embedding_type=position).train()
    hf = hf_twin(model).train()
    ids, mask, types = padded_batch()
    reference = grads(hf, ids, mask, types)
    plain = grads(model, ids, mask, types)
    model.gradient_checkpointing_enable()
    checkpointed = grads(model, ids, mask, types)
    assert model.encoder.gradient_checkpointing
    assert set(plain) == set(checkpointed) and set(reference) >= set(plain)
    for name in plain:
        parity(plain[name], reference[name])
        assert max_diff(checkpointed[name], plain[name]) <= TOL, name


def test_gradient_checkpointing_replays_dropout():
    """With dropout on, the recomputed forward draws the same masks: same grads as without."""
    model = random_model(hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.2, attn_implementation="eager").train()
    ids, mask, types = padded_batch()
    torch.manual_seed(3)
    plain = grads(model, ids, mask, types)
    model.gradient_checkpointing_enable()
    torch.manual_seed(3)
    checkpointed = grads(model, ids, mask, types)
    for name in plain:
        assert max_diff(checkpointed[name], plain[name]) <= TOL, name


def test_eager_equals_sdpa_and_fallback_for_probabilities():
    eager = random_model(attn_implementation="eager")
    sdpa = random_model(attn_implementation="sdpa")
    ids, mask, types = padded_batch()
    with torch.no_grad():
        a, b = eager(ids, mask, types), sdpa(ids, mask, types)
        c = sdpa(ids, mask, types, output_attentions=True)  # falls back to eager for this call
    assert max_diff(a.last_hidden_state, b.last_hidden_state) <= TOL
    assert c.attentions is not None and len(c.attentions) == 2
    assert b.attentions is None


def test_dropout_only_in_training():
    model = random_model(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
    ids, mask, types = padded_batch()
    with torch.no_grad():
        e1, e2 = model(ids, mask, types).last_hidden_state, model(ids, mask, types).last_hidden_state
        model.train()
        t1, t2 = model(ids, mask, types).last_hidden_state, model(ids, mask, types).last_hidden_state
    assert max_diff(e1, e2) == 0.0
    assert max_diff(t1, t2) > 1e-3


def test_padding_does_not_change_real_tokens():
    """A padded row gives the same vectors for its real tokens as the unpadded sequence alone."""
    model = random_model()
    ids, mask, types = padded_batch(lengths=(9, 4))
    with torch.no_grad():
        batch = model(ids, mask, types).last_hidden_state
        alone = model(ids[1:, :4], mask[1:, :4], types[1:, :4]).last_hidden_state
    assert max_diff(batch[1:, :4], alone) <= TOL


def test_repr_shows_heads_and_no_pooler_option():
    model = BertModel(tiny(num_attention_heads=4), add_pooling_layer=False)
    text = repr(model)
    assert "heads=4, head_dim=8" in text and "Pooler" not in text
    ids, mask, _ = padded_batch()
    assert model(ids, mask).pooler_output is None
    assert model(ids, mask, return_dict=False)[0].shape == (3, 9, 32)


# ----- bad input: clear errors -------------------------------------------------------------------
def test_input_longer_than_max_positions():
    model = random_model()
    with pytest.raises(InputError, match="max_position_embeddings is 64"):
        model(torch.ones(1, 65, dtype=torch.long))


def test_cache_past_max_positions():
    model = decoder("absolute")
    enc, _ = encoder_states(B=1)
    out = model(torch.ones(1, 60, dtype=torch.long), encoder_hidden_states=enc)
    with pytest.raises(InputError, match="after 60 cached"):
        model(torch.ones(1, 5, dtype=torch.long), encoder_hidden_states=enc, past_key_values=out.past_key_values)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(input_ids=torch.tensor([[1, 99]])), r"input_ids holds values in \[1, 99\], but must be in \[0, 99\)"),
        (dict(input_ids=torch.tensor([[1, -1]])), "input_ids holds values"),
        (dict(input_ids=torch.tensor([1, 2])), r"input_ids must be \(batch, seq_len\)"),
        (dict(input_ids=torch.tensor([[1.0, 2.0]])), r"input_ids must be an int64 \(or int32\) tensor"),
        (dict(input_ids=torch.tensor([[1, 2]], dtype=torch.int16)), "got torch.int16"),
        (dict(input_ids=torch.zeros(2, 0, dtype=torch.long)), "no tokens"),
        (
            dict(input_ids=torch.tensor([[1, 2]]), position_ids=torch.tensor([[0, 1, 2]])),
            r"position_ids must be \(1, 2\)",
        ),
        (dict(input_ids=torch.tensor([[1, 2]]), token_type_ids=torch.tensor([[0, 2]])), "token_type_ids holds values"),
        (dict(input_ids=torch.tensor([[1, 2]]), attention_mask=torch.ones(1, 3)), r"attention_mask must be \(1, 2\)"),
        (dict(input_ids=torch.tensor([[1, 2]]), inputs_embeds=torch.zeros(1, 2, 32)), "exactly one of"),
        (dict(), "exactly one of"),
        (dict(inputs_embeds=torch.zeros(1, 2, 31)), "hidden_size=32"),
        (dict(input_ids=torch.tensor([[1, 2]]), head_mask=torch.ones(3)), r"head_mask must be \(4,\) or \(2, 4\)"),
        (dict(input_ids=torch.tensor([[1, 2]]), encoder_hidden_states=torch.zeros(1, 2, 32)), "no cross-attention"),
        (dict(input_ids=torch.tensor([[1, 2]]), position_ids=torch.tensor([[0, 64]])), "position_ids holds values"),
    ],
)
def test_bad_inputs_raise_clear_errors(kwargs, message):
    model = random_model()
    with pytest.raises(InputError, match=message):
        model(**kwargs)


@pytest.mark.parametrize(
    "key", ["input_ids", "attention_mask", "token_type_ids", "position_ids", "head_mask", "inputs_embeds"]
)
@pytest.mark.parametrize("kind", ["list", "NumPy array"])
def test_inputs_that_are_not_tensors_are_an_error_naming_them(key, kind):
    """`model(input_ids=[[...]])` used to be an AttributeError ('list' object has no attribute 'dim')."""
    given = dict(
        input_ids=torch.tensor([[2, 5, 3]]),
        attention_mask=torch.ones(1, 3, dtype=torch.long),
        token_type_ids=torch.zeros(1, 3, dtype=torch.long),
        position_ids=torch.tensor([[0, 1, 2]]),
        head_mask=torch.ones(4),
        inputs_embeds=torch.zeros(1, 3, 32),
    )
    if key == "inputs_embeds":
        del given["input_ids"]
    given[key] = given[key].tolist() if kind == "list" else given[key].numpy()
    convert = "torch.tensor" if kind == "list" else "torch.from_numpy"
    with pytest.raises(
        InputError,
        match=rf"^{key} must be a torch.Tensor, got a {kind}; pass {convert}\(x\) \(the "
        r'tokenizer gives tensors with return_tensors="pt"\)$',
    ):
        random_model()(**given)


def test_prune_bad_heads():
    model = random_model()
    with pytest.raises(InputError, match="heads 0..3"):
        model.prune_heads({0: [4]})
    with pytest.raises(InputError, match="lose all its heads"):
        model.prune_heads({1: [0, 1, 2, 3]})
    assert model.config.pruned_heads == {}


def test_decoder_input_errors():
    model = decoder("absolute")
    enc, _ = encoder_states(B=1)
    with pytest.raises(InputError, match=r"encoder_hidden_states must be \(batch=1, T_enc, hidden=32\)"):
        model(torch.ones(1, 3, dtype=torch.long), encoder_hidden_states=torch.zeros(1, 5, 16))
    out = model(torch.ones(1, 3, dtype=torch.long), encoder_hidden_states=enc)
    bad = tuple((k[:, :2], v[:, :2], ck, cv) for k, v, ck, cv in out.past_key_values)  # 2 heads instead of 4
    with pytest.raises(InputError, match=r"past_key_values\[0\] holds keys of shape \(1, 2, 3, 8\)"):
        model(torch.ones(1, 1, dtype=torch.long), encoder_hidden_states=enc, past_key_values=bad)


def test_outputs_by_name_and_transformers_tuple_order():
    model = BertModel(tiny(), add_pooling_layer=False).eval()
    ids, mask, _ = padded_batch()
    out = model(ids, mask)
    assert out["last_hidden_state"] is out.last_hidden_state
    as_tuple = model(ids, mask, return_dict=False)
    assert len(as_tuple) == 2 and as_tuple[1] is None  # (last_hidden_state, pooler_output=None), as transformers
    hf_tuple = hf_twin(model)(ids, mask, return_dict=False)
    assert len(hf_tuple) == len(as_tuple) and max_diff(as_tuple[0], hf_tuple[0]) <= TOL


def test_no_mask_equals_all_ones_mask():
    """Without attention_mask no mask tensor is built at all (fastest SDPA path); same numbers."""
    model = random_model()
    ids, _, _ = padded_batch(lengths=(9, 9))
    with torch.no_grad():
        assert max_diff(model(ids).last_hidden_state, model(ids, torch.ones_like(ids)).last_hidden_state) <= TOL


def test_relative_key_query_half_precision_like_transformers():
    model = random_model(position_embedding_type="relative_key_query", attn_implementation="eager")
    hf = hf_twin(model)
    model.half(), hf.half()
    ids, mask, types = padded_batch()
    with torch.no_grad():
        ours, theirs = model(ids, mask, types).last_hidden_state, hf(ids, mask, types).last_hidden_state
    assert max_diff(ours.float(), theirs.float()) <= 1e-6  # same operations in the same order: equal in fp16
