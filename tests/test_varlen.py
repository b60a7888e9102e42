"""The unpadded (varlen) path and packed documents: same numbers as the padded path, no leaks."""

import pytest
import torch

from bertkit import attention
from bertkit.errors import InputError
from bertkit.heads import BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification
from bertkit.model import BertModel

from conftest import hf_twin, max_diff, padded_batch, parity, random_model


def with_impl(model, name):
    model.set_attn_implementation(name)
    return model


def test_unpad_finds_sequences_in_plain_and_packed_masks():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 2, 2], [1, 2, 2, 3]])
    u = attention.unpad(mask)
    assert u.indices.tolist() == [0, 1, 2, 4, 8, 9, 10, 11, 12, 13, 14, 15]
    assert u.cu_seqlens.tolist() == [0, 3, 4, 6, 8, 9, 11, 12]  # lengths 3 | 1 | 2 2 | 1 2 1
    assert u.cu_seqlens.dtype == torch.int32 and u.max_seqlen == 3
    x = torch.arange(16.0).view(4, 4, 1)
    assert torch.equal(u.restore(u.remove(x)), x * mask.bool().unsqueeze(-1))
    # a hole in a 0/1 mask (left and right padding mixed) is still one sequence
    assert attention.unpad(torch.tensor([[1, 0, 1, 1]])).cu_seqlens.tolist() == [0, 3]
    with pytest.raises(InputError, match="contiguous"):
        attention.unpad(torch.tensor([[1, 2, 1, 0]]))


def test_document_positions_restart_per_document():
    docs = torch.tensor([[1, 1, 1, 2, 2, 0], [1, 2, 3, 3, 3, 3]])
    assert attention.document_positions(docs).tolist() == [[0, 1, 2, 0, 1, 0], [0, 0, 0, 1, 2, 3]]
    keep = attention.document_keep(docs)
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
        assert abs(a(ids, mask, types, labels=labels).loss - b(ids, mask, types, labels=labels,
                                                             masked_positions_only=True).loss) < 1e-5


def test_padded_sdpa_fallback_equals_per_sequence():
    """The CUDA fallback (sequences padded for one SDPA call), checked on CPU against the loop."""
    torch.manual_seed(0)
    lengths = torch.tensor([5, 1, 7, 3])
    cu = torch.zeros(5, dtype=torch.int32)
    cu[1:] = lengths.cumsum(0)
    q, k, v = (torch.randn(int(lengths.sum()), 2, 8) for _ in range(3))
    loop = attention.varlen_attention(q, k, v, cu, 7, dropout_p=0.0)
    padded = attention._varlen_padded_sdpa(q, k, v, cu, 7, 0.0)
    assert loop.shape == (16, 2, 8) and max_diff(loop, padded) < 1e-6
    first = torch.nn.functional.scaled_dot_product_attention(*(t[:5].transpose(0, 1) for t in (q, k, v)))
    assert max_diff(loop[:5], first.transpose(0, 1)) < 1e-6


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
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda q, *a, **k: calls.append(tuple(q.shape)) or real(q, *a, **k))
    with torch.no_grad():
        got = model(ids).last_hidden_state  # no mask
        got_ones = model(ids, torch.ones_like(ids)).last_hidden_state
    assert calls == [(3, 4, 7, 8)] * 4  # per layer one batched call, for both forwards
    want = with_impl(random_model(), "eager")(ids).last_hidden_state
    assert max_diff(got, want) < 1e-5 and max_diff(got_ones, want) < 1e-5


def test_equal_length_runs():
    assert attention._equal_length_runs([0, 4, 8, 12]) == [(0, 12, 3)]
    assert attention._equal_length_runs([0, 4, 8, 9, 10, 13]) == [(0, 8, 2), (8, 10, 2), (10, 13, 1)]
    assert attention._equal_length_runs([0, 2, 2, 4]) == [(0, 4, 2)]  # an empty sequence has no tokens: skipped
