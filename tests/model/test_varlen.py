"""The unpadded (varlen) path and packed documents: same numbers as the padded path, no leaks."""

import pytest
import torch
from helpers import hf_twin, max_diff, padded_batch, parity, random_model

from bertkit import attention, grouping, padding
from bertkit.errors import InputError
from bertkit.heads import BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification


def with_impl(model, name):
    model.set_attn_implementation(name)
    return model


def test_unpad_finds_sequences_in_plain_and_packed_masks():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 2, 2], [1, 2, 2, 3]])
    u = padding.unpad(mask)
    assert u.indices.tolist() == [0, 1, 2, 4, 8, 9, 10, 11, 12, 13, 14, 15]
    assert u.cu_seqlens.tolist() == [0, 3, 4, 6, 8, 9, 11, 12]  # lengths 3 | 1 | 2 2 | 1 2 1
    assert u.cu_seqlens.dtype == torch.int32 and u.max_seqlen == 3
    x = torch.arange(16.0).view(4, 4, 1)
    assert torch.equal(u.restore(u.remove(x)), x * mask.bool().unsqueeze(-1))
    # a hole in a 0/1 mask (left and right padding mixed) is still one sequence
    assert padding.unpad(torch.tensor([[1, 0, 1, 1]])).cu_seqlens.tolist() == [0, 3]
    with pytest.raises(InputError, match="contiguous"):
        padding.unpad(torch.tensor([[1, 2, 1, 0]]))


def test_document_positions_restart_per_document():
    docs = torch.tensor([[1, 1, 1, 2, 2, 0], [1, 2, 3, 3, 3, 3]])
    assert padding.document_positions(docs).tolist() == [[0, 1, 2, 0, 1, 0], [0, 0, 0, 1, 2, 3]]
    keep = padding.document_keep(docs)
    assert keep[0, 0].tolist() == [1, 1, 1, 0, 0, 0] and keep[0, 3].tolist() == [0, 0, 0, 1, 1, 0]


def test_varlen_equals_padded_sdpa_eager_and_transformers():
    impl = "varlen"
    model = random_model()
    ids, mask, types = padded_batch()
    keep = mask.bool()
    hf = hf_twin(model, "sdpa")
    with torch.no_grad():
        eager = with_impl(model, "eager")(ids, mask, types)
        sdpa = with_impl(model, "sdpa")(ids, mask, types)
        fast = with_impl(model, impl)(ids, mask, types)
        ref = hf(ids, mask, types)
    assert max_diff(fast.last_hidden_state[keep], eager.last_hidden_state[keep]) < 1e-5
    assert max_diff(fast.last_hidden_state[keep], sdpa.last_hidden_state[keep]) < 1e-5
    parity(fast.last_hidden_state[keep], ref.last_hidden_state[keep])
    parity(fast.pooler_output, ref.pooler_output)
    assert fast.last_hidden_state[~keep].abs().max() == 0  # padding is not computed: zeros
    # the padded path still gives transformers' numbers at the padding too
    assert max_diff(sdpa.last_hidden_state, ref.last_hidden_state) < 1e-5


def test_varlen_gradients_equal_padded():
    ids, mask, types = padded_batch(lengths=(12, 5, 9, 1))
    grads = {}
    for impl in ("eager", "varlen"):
        model = with_impl(random_model(model_class=BertForSequenceClassification), impl).train()
        loss = model(ids, mask, types, labels=torch.tensor([0, 1, 1, 0])).loss
        loss.backward()
        grads[impl] = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert grads["eager"].keys() == grads["varlen"].keys()
    assert "bert.encoder.layer.0.attention.self.query.weight" in grads["varlen"]
    for name, g in grads["eager"].items():
        assert max_diff(g, grads["varlen"][name]) < 1e-5, name


def test_varlen_with_chunked_ffn_checkpointing_and_hidden_states():
    ids, mask, types = padded_batch()
    keep = mask.bool()
    ref = random_model(chunk_size_feed_forward=0)
    model = with_impl(random_model(chunk_size_feed_forward=2), "varlen")
    model.gradient_checkpointing_enable()
    model.train()  # dropout is 0 in the tiny config; training turns checkpointing on
    out = model(ids, mask, types, output_hidden_states=True)
    with torch.no_grad():
        want = ref(ids, mask, types, output_hidden_states=True)
    assert len(out.hidden_states) == len(want.hidden_states) == 3
    for got, exp in zip(out.hidden_states[1:], want.hidden_states[1:]):
        assert max_diff(got[keep], exp[keep]) < 1e-5
    out.last_hidden_state.sum().backward()
    assert model.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0


def test_calls_varlen_cannot_do_take_the_padded_path():
    model = with_impl(random_model(), "varlen")
    ids, mask, types = padded_batch()
    with torch.no_grad():
        out = model(ids, mask, types, output_attentions=True)
        assert len(out.attentions) == 2 and out.attentions[0].shape == (3, 4, 9, 9)
        assert out.last_hidden_state[~mask.bool()].abs().max() > 0  # padded path: padding computed
        relative = with_impl(random_model(position_embedding_type="relative_key"), "varlen")
        eager = with_impl(random_model(position_embedding_type="relative_key"), "eager")
        assert max_diff(relative(ids, mask, types).last_hidden_state, eager(ids, mask, types).last_hidden_state) < 1e-6


def run_separately(model, docs):
    """Each document on its own, as a batch of one: what a packed row must reproduce."""
    return [model(torch.tensor([d])).last_hidden_state[0] for d in docs]


@pytest.mark.parametrize("impl", ["eager", "sdpa", "varlen"])
def test_packed_documents_do_not_attend_across(impl):
    model = with_impl(random_model(), impl)
    docs = [[2, 11, 12, 13, 3], [2, 21, 22, 3], [2, 31, 3]]
    row = torch.tensor([docs[0] + docs[1] + [0, 0], docs[2] + [0] * 8])
    numbers = torch.tensor([[1] * 5 + [2] * 4 + [0, 0], [1] * 3 + [0] * 8])
    with torch.no_grad():
        packed = model(row, numbers).last_hidden_state
        alone = run_separately(with_impl(random_model(), "eager"), docs)
        # change the second document: the first must not notice (it would if attention crossed)
        changed = row.clone()
        changed[0, 6:8] = torch.tensor([50, 51])
        packed2 = model(changed, numbers).last_hidden_state
    assert max_diff(packed[0, :5], alone[0]) < 1e-5
    assert max_diff(packed[0, 5:9], alone[1]) < 1e-5  # positions restart: the same as alone
    assert max_diff(packed[1, :3], alone[2]) < 1e-5
    assert max_diff(packed2[0, :5], packed[0, :5]) == 0
    assert max_diff(packed2[0, 5:9], packed[0, 5:9]) > 1e-3


def test_packed_mask_rejected_for_decoders():
    model = random_model(is_decoder=True)
    with pytest.raises(InputError, match="packed documents"):
        model(torch.tensor([[2, 5, 3, 2, 6, 3]]), torch.tensor([[1, 1, 1, 2, 2, 2]]))


def test_heads_on_the_varlen_path():
    ids, mask, types = padded_batch()
    keep = mask.bool()
    for cls in (BertForMaskedLM, BertForTokenClassification):
        a = with_impl(random_model(model_class=cls), "sdpa")
        b = with_impl(random_model(model_class=cls), "varlen")
        with torch.no_grad():
            assert max_diff(a(ids, mask, types).logits[keep], b(ids, mask, types).logits[keep]) < 1e-5
    labels = torch.where(keep, ids, torch.full_like(ids, -100))
    a = random_model(model_class=BertForMaskedLM)
    b = with_impl(random_model(model_class=BertForMaskedLM), "varlen")
    with torch.no_grad():
        assert (
            abs(
                a(ids, mask, types, labels=labels).loss
                - b(ids, mask, types, labels=labels, masked_positions_only=True).loss
            )
            < 1e-5
        )


@pytest.mark.parametrize("lengths", [(5, 1, 7, 3), (9, 0, 9, 2, 40, 41, 3), (6, 6, 6), (128,) * 3 + (17, 100, 64)])
@pytest.mark.parametrize("single", [False, True])  # CPU grouping; CUDA's one padded call
def test_grouped_padded_sdpa_equals_attention_per_sequence(lengths, single, monkeypatch):
    torch.manual_seed(0)
    lengths = torch.tensor(lengths)
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = lengths.cumsum(0)
    q, k, v = (torch.randn(int(lengths.sum()), 2, 8, requires_grad=True) for _ in range(3))
    if single:
        monkeypatch.setattr(grouping, "cached_group_plan", lambda b, d, _: grouping.group_plan(b, d, True))
    got = attention.varlen_attention(q, k, v, cu, int(lengths.max()), dropout_p=0.0)
    want = torch.cat(
        [
            torch.nn.functional.scaled_dot_product_attention(*(t[a:b].transpose(0, 1) for t in (q, k, v))).transpose(
                0, 1
            )
            for a, b in zip(cu[:-1], cu[1:])
            if b > a
        ]
    )
    assert got.shape == want.shape and max_diff(got, want) < 1e-6
    with torch.no_grad():  # inference on a CPU: one call per run of equal lengths instead
        assert max_diff(attention.varlen_attention(q, k, v, cu, int(lengths.max()), dropout_p=0.0), want) < 1e-6
    grads = torch.autograd.grad(got.square().sum(), (q, k, v))
    wants = torch.autograd.grad(want.square().sum(), (q, k, v))
    assert all(max_diff(g, w) < 1e-5 for g, w in zip(grads, wants))


def test_group_plan_pads_little_and_calls_few_times():
    def shape(bounds, **kw):
        return [tuple(keep.shape) for _, _, keep, _ in grouping.group_plan(tuple(bounds), "cpu", **kw)]

    assert shape([0, 4, 8, 12]) == [(3, 4)]  # equal lengths: one call, no padding
    assert shape([0, 2, 2, 4]) == [(2, 2)]  # an empty sequence has no tokens: skipped
    lengths = [3, 120, 4, 128, 5, 125]
    bounds = [0] + [sum(lengths[: i + 1]) for i in range(len(lengths))]
    assert shape(bounds) == [(3, 5), (3, 128)]  # short with short, long with long
    assert shape(bounds, single=True) == [(6, 128)]
    assert len(shape(list(range(0, 33 * 4, 4)) + [33 * 4 + 1])) <= 2  # 32 of 4 and one of 1


@pytest.mark.slow
def test_compiled_varlen_model_equals_eager():
    model = with_impl(random_model(model_class=BertForSequenceClassification), "varlen")
    ids, mask, types = padded_batch()
    with torch.no_grad():
        want = with_impl(random_model(model_class=BertForSequenceClassification), "eager")(ids, mask, types).logits
        compiled = torch.compile(model)
        got = compiled(ids, mask, types).logits
        ids2, mask2, types2 = padded_batch(lengths=(4, 11, 2, 7), seed=1)  # other lengths: no failure
        got2 = compiled(ids2, mask2, types2).logits
        want2 = model(ids2, mask2, types2).logits
    assert max_diff(got, want) < 1e-5 and max_diff(got2, want2) < 1e-5


def test_set_attn_implementation_reaches_every_layer_and_checks_the_name():
    model = random_model(model_class=BertForMaskedLM)
    model.set_attn_implementation("eager")
    assert {m.attn_implementation for m in model.modules() if hasattr(m, "attn_implementation")} == {"eager"}
    assert "backend=eager" in repr(model)
    with pytest.raises(InputError, match="attn_implementation must be one of"):
        model.set_attn_implementation("flash")


def test_batch_without_padding_runs_unpadded_as_one_attention_call(monkeypatch):
    model = with_impl(random_model(), "varlen")
    ids = torch.randint(1, 99, (3, 7))
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(
        torch.nn.functional,
        "scaled_dot_product_attention",
        lambda q, *a, **k: calls.append(tuple(q.shape)) or real(q, *a, **k),
    )
    with torch.no_grad():
        got = model(ids).last_hidden_state  # no mask
        got_ones = model(ids, torch.ones_like(ids)).last_hidden_state
    assert calls == [(3, 4, 7, 8)] * 4  # per layer one batched call, for both forwards
    want = with_impl(random_model(), "eager")(ids).last_hidden_state
    assert max_diff(got, want) < 1e-5 and max_diff(got_ones, want) < 1e-5


# ----- attn_implementation "auto", the default ----------------------------------------------------
def count_sdpa_calls(monkeypatch) -> list:
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(
        torch.nn.functional,
        "scaled_dot_product_attention",
        lambda q, *a, **k: calls.append(tuple(q.shape)) or real(q, *a, **k),
    )
    return calls


def test_auto_is_the_default_and_equals_eager_at_real_tokens(monkeypatch):
    model = random_model(model_class=BertForMaskedLM)
    assert model.config.attn_implementation == "auto" and "backend=auto" in repr(model)
    eager = with_impl(random_model(model_class=BertForMaskedLM), "eager")
    calls = count_sdpa_calls(monkeypatch)
    with torch.no_grad():
        # padded: the varlen path, zeros in the hidden states at the padding
        ids, mask, types = padded_batch(lengths=(9, 6, 3, 9))
        keep = mask.bool()
        got = model(ids, mask, types, output_hidden_states=True)
        want = eager(ids, mask, types, output_hidden_states=True)
        assert max_diff(got.logits[keep], want.logits[keep]) < 1e-5
        assert got.hidden_states[-1][~keep].abs().max() == 0
        layers = model.config.num_hidden_layers
        assert calls and all(c[0] < 4 for c in calls)  # per run of equal lengths, never the padded batch of 4
        # no padding: sdpa on the batch as it is, every position as transformers computes it
        calls.clear()
        full = torch.randint(1, 99, (2, 7))
        assert max_diff(model(full).logits, eager(full).logits) < 1e-5
        assert max_diff(model(full, torch.ones_like(full)).logits, eager(full).logits) < 1e-5
        assert calls == [(2, 4, 7, 8)] * 2 * layers  # two forwards
        # packed documents: attention and positions stay inside each document
        docs = torch.tensor([[1, 1, 1, 2, 2, 2, 2, 0], [1, 1, 1, 1, 1, 1, 1, 1]])
        packed_ids = torch.randint(1, 99, docs.shape)
        alone = model(packed_ids[:1, 3:7]).logits
        assert max_diff(model(packed_ids, docs).logits[0, 3:7], alone[0]) < 1e-5
        assert max_diff(model(packed_ids, docs).logits[docs > 0], eager(packed_ids, docs).logits[docs > 0]) < 1e-5


def test_auto_gives_way_to_eager_and_padded_paths_where_it_must():
    ids, mask, types = padded_batch()
    keep = mask.bool()
    with torch.no_grad():
        model, eager = random_model(), with_impl(random_model(), "eager")
        out = model(ids, mask, types, output_attentions=True)  # probabilities: eager, padded
        assert len(out.attentions) == 2 and out.attentions[0].shape == (3, 4, 9, 9)
        assert max_diff(out.last_hidden_state, eager(ids, mask, types).last_hidden_state) < 1e-5
        head_mask = torch.tensor([1.0, 0.0, 1.0, 1.0])
        assert (
            max_diff(
                model(ids, mask, types, head_mask=head_mask).last_hidden_state,
                eager(ids, mask, types, head_mask=head_mask).last_hidden_state,
            )
            < 1e-5
        )
        for kw in (dict(position_embedding_type="relative_key_query"), dict(is_decoder=True)):
            model, eager = random_model(**kw), with_impl(random_model(**kw), "eager")
            got, want = model(ids, mask, types).last_hidden_state, eager(ids, mask, types).last_hidden_state
            assert max_diff(got[keep], want[keep]) < 1e-5, kw


def test_mlm_training_mode_with_labels_projects_only_the_masked_positions():
    ids, mask, types = padded_batch()
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 0], labels[2, 1] = ids[0, 2], ids[1, 0], ids[2, 1]
    model = random_model(model_class=BertForMaskedLM)
    dense = model(ids, mask, types, labels=labels)  # eval mode: transformers' (B, S, V)
    model.train()  # dropout is 0 in the tiny config
    sparse = model(ids, mask, types, labels=labels)
    assert dense.logits.shape == (3, 9, model.config.vocab_size) and dense.masked_positions is None
    assert sparse.logits.shape == (3, model.config.vocab_size)
    assert torch.equal(sparse.masked_positions, labels != -100)
    assert max_diff(sparse.logits, dense.logits[labels != -100]) < 1e-5
    assert abs(sparse.loss.item() - dense.loss.item()) < 1e-5
    asked = model(ids, mask, types, labels=labels, masked_positions_only=False)  # the transformers shape on request
    assert asked.logits.shape == dense.logits.shape and asked.masked_positions is None
    assert model(ids, mask, types).logits.shape == dense.logits.shape  # no labels: nothing to select


def test_equal_length_runs():
    assert grouping.equal_length_runs([0, 4, 8, 12]) == [(0, 12, 3)]
    assert grouping.equal_length_runs([0, 4, 8, 9, 10, 13]) == [(0, 8, 2), (8, 10, 2), (10, 13, 1)]
    assert grouping.equal_length_runs([0, 2, 2, 4]) == [(0, 4, 2)]  # an empty sequence has no tokens: skipped


# ----- attention_mask values: one meaning in every backend ------------------------------------------
@pytest.mark.parametrize("impl", ["auto", "eager", "sdpa", "varlen"])
def test_attention_mask_values_mean_the_same_in_every_backend(impl):
    model = with_impl(random_model(), impl)
    ids, mask, types = padded_batch(lengths=(9, 6, 3))
    with torch.no_grad():
        want = model(ids, mask, types)
        as_bool = model(ids, mask.bool(), types)
        as_float = model(ids, mask.float(), types)
        for other in (as_bool, as_float):
            assert max_diff(other.last_hidden_state, want.last_hidden_state) == 0
        additive = (1.0 - mask.float()) * -10000.0
        for bad, found in (
            (mask * -1, "-1"),
            (mask * 0.5, "0.5"),
            (additive, "-10000"),
            (additive.masked_fill(additive < 0, float("-inf")), "-inf"),
        ):
            with pytest.raises(InputError, match=f"attention_mask holds .*{found}"):
                model(ids, bad, types)
        with pytest.raises(InputError, match="holds values in"):
            model(ids, mask[:, None, :].expand(-1, 9, -1) * 2, types)  # 3-D: 0 and 1 only


def test_a_row_with_no_token_to_attend_is_zeros_in_every_backend():
    ids, mask, types = padded_batch(lengths=(9, 6, 3))
    mask[1] = 0
    outs = {}
    with torch.no_grad():
        for impl in ("auto", "eager", "sdpa", "varlen"):
            outs[impl] = with_impl(random_model(), impl)(ids, mask, types, output_hidden_states=True)
    for impl, out in outs.items():
        assert out.last_hidden_state[1].abs().max() == 0 and out.hidden_states[-1][1].abs().max() == 0, impl
        assert max_diff(out.pooler_output, outs["eager"].pooler_output) < 1e-5, impl
        keep = mask.bool()
        assert max_diff(out.last_hidden_state[keep], outs["eager"].last_hidden_state[keep]) < 1e-5, impl


@pytest.mark.parametrize("impl", ["auto", "varlen", "sdpa", "eager"])
def test_a_document_in_two_runs_is_refused_by_every_backend(impl):
    """A packed document's tokens are one run in their row (padding.unpad's rule): 1 1 2 2 1 1 used to be refused
    by auto / varlen only, and computed by sdpa / eager as a document of four tokens around another."""
    model = with_impl(random_model(), impl)
    ids = torch.randint(1, 99, (2, 6), generator=torch.Generator().manual_seed(0))
    split = torch.tensor([[1, 1, 2, 2, 3, 0], [1, 1, 2, 2, 1, 1]])
    with pytest.raises(
        InputError,
        match=r"^attention_mask: row 1, position 4: packed document 1 starts again after "
        r"another document; a document's tokens must be contiguous in their row",
    ):
        model(ids, split)
    with torch.no_grad():  # padding inside a document is allowed, in every backend alike
        holed = model(ids, torch.tensor([[1, 1, 0, 1, 2, 2], [1, 1, 2, 2, 0, 0]])).last_hidden_state
        eager = with_impl(model, "eager")(ids, torch.tensor([[1, 1, 0, 1, 2, 2], [1, 1, 2, 2, 0, 0]]))
    real = torch.tensor([[1, 1, 0, 1, 1, 1], [1, 1, 1, 1, 0, 0]]).bool()
    assert max_diff(holed[real], eager.last_hidden_state[real]) < 1e-5
