"""The attention path is decided once per forward pass, and the host reads the device as few times as it can.

A host read (device -> host sync: .item(), int(t), bool(t), .tolist(), .cpu(), nonzero, unique,
boolean indexing) stalls the host until the GPU has finished everything queued. On a CPU nothing
stalls, so the reads are counted where they would stall: aten ops that need the values on the
host (seen by a TorchDispatchMode) plus .tolist() / .cpu() / .numpy() (patched). On CUDA,
torch.cuda.set_sync_debug_mode counts them for real.
"""

import traceback
import warnings

import pytest
import torch
from helpers import max_diff, padded_batch, random_model
from torch.utils._python_dispatch import TorchDispatchMode

from bertkit import InputError, attention, padding, plan
from bertkit.heads import BertForSequenceClassification
from bertkit.model import SelfAttention

aten = torch.ops.aten
READS = {
    aten._local_scalar_dense.default,
    aten.nonzero.default,
    aten.masked_select.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
    aten.equal.default,
    aten.repeat_interleave.Tensor,
    aten.is_nonzero.default,
}


def _where() -> str:
    """The innermost bertkit function on the stack: where the read is."""
    for frame in reversed(traceback.extract_stack()):
        if "/bertkit/" in frame.filename:
            return frame.name
    return "?"


class HostReads(TorchDispatchMode):
    """Records each host read in its block as the bertkit function that made it."""

    def __enter__(self):
        self.reads, self._real = [], {}
        for name in ("tolist", "cpu", "numpy"):
            self._real[name] = real = getattr(torch.Tensor, name)

            def counted(t, *args, _real=real, **kwargs):
                self.reads.append(_where())
                return _real(t, *args, **kwargs)

            setattr(torch.Tensor, name, counted)
        return super().__enter__()

    def __exit__(self, *exc):
        for name, real in self._real.items():
            setattr(torch.Tensor, name, real)
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        boolean_index = func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default) and any(
            isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1]
        )
        if func in READS or boolean_index:
            self.reads.append(_where())
        return func(*args, **(kwargs or {}))


def decoder(**kw):
    return random_model(is_decoder=True, add_cross_attention=True, **kw)


def encoder_states(B=3, T=5):
    g = torch.Generator().manual_seed(3)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[0, 3:] = 0
    return torch.randn(B, T, 32, generator=g), mask


def scenario(name: str, device="cpu"):
    """(model, call kwargs, grad) for each path whose host reads are counted."""
    ids, mask, types = (t.to(device) for t in padded_batch())
    plain = dict(input_ids=ids, attention_mask=mask, token_type_ids=types)
    if name == "padded sdpa":
        return random_model(attn_implementation="sdpa"), plain, False
    if name == "unpadded (varlen)":
        return random_model(), plain, False
    if name == "unpadded, training":
        model = random_model(model_class=BertForSequenceClassification).train().bert
        ids, mask, types = (t.to(device) for t in padded_batch(lengths=(12, 5, 9, 1)))
        return model, dict(input_ids=ids, attention_mask=mask, token_type_ids=types), True
    if name == "packed documents":
        docs = torch.tensor([[1, 1, 1, 2, 2, 2, 2, 0, 0], [1] * 9, [1, 2, 3, 3, 0, 0, 4, 4, 0]], device=device)
        return random_model(), dict(input_ids=ids, attention_mask=docs), False
    if name == "eager with attentions":
        return random_model(), dict(plain, output_attentions=True), False
    if name == "head_mask":
        return random_model(), dict(plain, head_mask=torch.tensor([1.0, 0.0, 1.0, 1.0], device=device)), False
    if name == "relative positions":
        return random_model(position_embedding_type="relative_key_query"), plain, False
    if name == "decoder with cross-attention":
        enc, enc_mask = (t.to(device) for t in encoder_states())
        return (
            decoder(),
            dict(input_ids=ids, attention_mask=mask, encoder_hidden_states=enc, encoder_attention_mask=enc_mask),
            False,
        )
    if name == "decoder with cache":
        model = decoder().to(device)
        enc, enc_mask = (t.to(device) for t in encoder_states())
        with torch.no_grad():
            past = model(
                ids[:, :6], encoder_hidden_states=enc, encoder_attention_mask=enc_mask, use_cache=True
            ).past_key_values
        return (
            model,
            dict(
                input_ids=ids[:, 6:7],
                encoder_hidden_states=enc,
                encoder_attention_mask=enc_mask,
                past_key_values=past,
                use_cache=True,
            ),
            False,
        )
    if name == "inputs_embeds alone":
        embeds = torch.randn(2, 5, 32, device=device)
        return random_model(attn_implementation="eager"), dict(inputs_embeds=embeds), False
    raise KeyError(name)


# Every read that remains, by the function that makes it (and the comment there says why):
#   _read_once  plan.read_inputs: the values of the inputs for the input checks (ids inside
#               their tables, masks of 0 and 1) and, for a 2-D mask, the real tokens per row and its
#               largest number: the attention path and where the real tokens are follow from these
#   unpad       packed documents only: how many there are and where they start (cu_seqlens), which
#               depend on the whole mask, not on its rows' lengths
# Before the attention path was decided once, the same passes read 7 (padded sdpa, eager, head_mask,
# relative), 12 (unpadded), 11 (packed), 7 (decoder), 5 (decoder with cache) and 0 times.
EXPECTED = {
    "padded sdpa": (["_read_once"], "sdpa", None, None),
    "unpadded (varlen)": (["_read_once"], "varlen", None, "runs"),
    "unpadded, training": (["_read_once"], "varlen", None, "groups"),
    "packed documents": (["_read_once", "unpad"], "varlen", None, "runs"),
    "eager with attentions": (["_read_once"], "eager", None, None),
    "head_mask": (["_read_once"], "eager", None, None),
    "relative positions": (["_read_once"], "eager", None, None),
    "decoder with cross-attention": (["_read_once"], "sdpa", "sdpa", None),
    "decoder with cache": (["_read_once"], "sdpa", "sdpa", None),
    "inputs_embeds alone": ([], "eager", None, None),
}


def paths_taken(monkeypatch) -> list:
    """The AttentionPath each SelfAttention call was given."""
    seen, real = [], SelfAttention.forward

    def forward(self, *args, **kwargs):
        seen.append(kwargs.get("path", args[6] if len(args) > 6 else None))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SelfAttention, "forward", forward)
    return seen


@pytest.mark.parametrize("name", list(EXPECTED))
def test_host_reads_per_forward_pass_and_the_path_every_layer_reads(name, monkeypatch):
    reads, backend, cross, how = EXPECTED[name]
    model, kwargs, grad = scenario(name)
    with torch.set_grad_enabled(grad):
        want = model(**kwargs).last_hidden_state
        seen = paths_taken(monkeypatch)
        with HostReads() as counted:
            got = model(**kwargs).last_hidden_state
    assert counted.reads == reads, name
    assert torch.equal(got, want)  # counting changed nothing
    layers = model.config.num_hidden_layers * (2 if "cross" in name or "cache" in name else 1)
    assert len(seen) == layers and all(p is seen[0] for p in seen), "every layer reads the one path"
    path = seen[0]
    assert (path.backend, path.cross) == (backend, cross)
    assert (path.tokens.layout.how if path.tokens is not None else None) == how


def test_the_path_is_decided_once_however_many_layers(monkeypatch):
    calls = {}
    for owner, name in ((plan, "attention_path"), (attention, "padded_backend"), (attention, "varlen_layout")):

        def counted(*args, _real=getattr(owner, name), _name=name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)
    ids, mask, types = padded_batch()
    for layers in (2, 6):
        calls.clear()
        with torch.no_grad():
            random_model(num_hidden_layers=layers)(ids, mask, types)
        assert calls == {"attention_path": 1, "padded_backend": 1, "varlen_layout": 1}, layers


def test_no_layer_decides_again_and_standalone_modules_still_work():
    model = random_model()
    ids, mask, types = padded_batch()
    x = model.embeddings(ids, types)
    sa = model.encoder.layer[0].attention.self
    with torch.no_grad():
        context, probs, _ = sa(x)  # called on its own: the padded backend attn_implementation names
        assert probs is None and context.shape == x.shape
        eager = attention.AttentionPath("eager")
        context2, probs2, _ = sa(x, path=eager)  # the path given wins, whatever the module says
    assert probs2.shape == (3, 4, 9, 9) and max_diff(context, context2) < 1e-5


def test_unpad_without_the_models_read_reads_once_itself():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    with HostReads() as counted:
        u = padding.unpad(mask)
    assert counted.reads == ["unpad"]
    assert u.bounds == u.cu_seqlens.tolist() == [0, 3, 4, 8] and u.max_seqlen == 4
    assert u.indices.tolist() == mask.reshape(-1).nonzero().view(-1).tolist()
    with HostReads() as counted:  # with what BertModel read: nothing more for a 0/1 mask
        same = padding.unpad(mask, [3, 1, 0, 4], 1)
    assert counted.reads == [] and same.bounds == u.bounds and torch.equal(same.indices, u.indices)


def test_unpad_equals_a_token_by_token_reading_of_the_mask():
    def by_hand(docs):  # a sequence starts at a real token whose row's previous real token has another number
        indices, bounds = [], [0]
        for b, row in enumerate(docs.tolist()):
            previous = 0
            for s, number in enumerate(row):
                if number:
                    if number != previous:
                        bounds.append(bounds[-1])
                    bounds[-1] += 1
                    indices.append(b * len(row) + s)
                    previous = number
        return indices, bounds

    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        docs = torch.randint(0, 4, (5, 11), generator=g).sort(dim=1).values  # contiguous numbers, 0s first
        docs = torch.where(torch.rand(5, 11, generator=g) < 0.2, 0, docs)  # and padding between their tokens
        for mask in (docs, (docs > 0).long()):
            u = padding.unpad(mask)
            assert (u.indices.tolist(), u.bounds) == by_hand(mask)
            assert u.bounds == u.cu_seqlens.tolist() and u.cu_seqlens.dtype == torch.int32


def test_inputs_on_another_device_are_a_clear_error():
    ids, mask, types = padded_batch()
    with pytest.raises(InputError, match="attention_mask is on meta, the input on cpu"):
        random_model()(ids, mask.to("meta"), types)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(EXPECTED))
def test_cuda_syncs_per_forward_pass(name, dtype):
    """On CUDA every host read is a sync; set_sync_debug_mode warns once per sync."""
    reads, *_ = EXPECTED[name]
    model, kwargs, grad = scenario(name, "cuda")
    model = model.to("cuda", dtype)
    kwargs = {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in kwargs.items()}
    if "past_key_values" in kwargs:
        kwargs["past_key_values"] = tuple(tuple(t.to(dtype) for t in layer) for layer in kwargs["past_key_values"])
    with torch.set_grad_enabled(grad):
        model(**kwargs)  # warm: lazy initialisation, cached plans
        torch.cuda.synchronize()
        before = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model(**kwargs)
        finally:
            torch.cuda.set_sync_debug_mode(before)
    syncs = [str(w.message) for w in caught if "synchroniz" in str(w.message)]
    assert len(syncs) == len(reads), syncs
