"""Sizes checked before anything is built: a config.json that does not describe its weights file is refused naming
the field, the value and the tensor's shape; a config too large for this machine's memory is refused before a module
is allocated. And the messages that point a user to the right folder: fill-mask on an ELECTRA discriminator names
its run's generator; a file passed where a folder is expected (--tokenizer, --data) is called a file."""

import json
import os
import shutil

import pytest
import torch
from helpers import tiny

from bertkit import BertConfig, BertForMaskedLM, BertForSequenceClassification, BertModel
from bertkit.cli import main
from bertkit.data.dataset import DataError, PretrainingData
from bertkit.electra import ElectraForMaskedLM, ElectraForPreTraining, ElectraModel
from bertkit.errors import CheckpointError, ConfigError
from bertkit.tokenizer import Tokenizer, TokenizerError

HUGE = 1_000_000  # a hidden_size whose model would hold about 10^13 parameters: no machine has that memory


def _folder(path, model, layout: str = "safetensors", **config_changes) -> str:
    """`model` saved in `path` as `layout` ("safetensors"; "bin": pytorch_model.bin; "sharded": two safetensors
    shards and their index), then config.json edited."""
    from safetensors.torch import load_file, save_file

    model.save_pretrained(path)
    if layout != "safetensors":
        state = load_file(path / "model.safetensors")
        os.remove(path / "model.safetensors")
    if layout == "bin":
        torch.save(state, path / "pytorch_model.bin")
    if layout == "sharded":
        names = sorted(state)
        shards = {"model-1.safetensors": names[::2], "model-2.safetensors": names[1::2]}
        for shard, keys in shards.items():
            save_file({k: state[k] for k in keys}, path / shard, metadata={"format": "pt"})
        index = {"weight_map": {k: shard for shard, keys in shards.items() for k in keys}}
        (path / "model.safetensors.index.json").write_text(json.dumps(index))
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, **config_changes}))
    return str(path)


# ----- case 9: config.json against the weights' shapes, and a memory bound ------------------------------------------
@pytest.mark.parametrize("layout", ["safetensors", "bin", "sharded"])
@pytest.mark.parametrize("cls", [BertModel, BertForMaskedLM, BertForSequenceClassification])
def test_a_hidden_size_the_weights_do_not_have_is_refused_naming_the_field_and_the_shape(tmp_path, layout, cls):
    folder = _folder(tmp_path, BertForMaskedLM(tiny()), layout, hidden_size=HUGE)
    with pytest.raises(CheckpointError) as e:
        cls.from_pretrained(folder)
    said = str(e.value)
    weights = {"safetensors": "model.safetensors", "bin": "pytorch_model.bin"}.get(
        layout, "model.safetensors.index.json"
    )
    assert "\n" not in said, said
    assert said.startswith(folder) and f"hidden_size is {HUGE} in config.json" in said
    assert f"{weights} has bert.embeddings.word_embeddings.weight (99, 32): hidden_size 32" in said


def test_layers_and_an_electra_embedding_size_are_checked_against_the_weights(tmp_path):
    folder = _folder(tmp_path / "bert", BertModel(tiny()), num_hidden_layers=1000)
    with pytest.raises(CheckpointError, match="num_hidden_layers is 1000 in config.json, but model.safetensors has 2 "):
        BertModel.from_pretrained(folder)
    electra = tiny(model_type="electra", embedding_size=16)
    folder = _folder(tmp_path / "electra", ElectraForPreTraining(electra), embedding_size=HUGE)
    with pytest.raises(CheckpointError, match=f"embedding_size is {HUGE} in config.json, but model.safetensors has "):
        BertForSequenceClassification.from_pretrained(folder)  # an ElectraForSequenceClassification of the folder
    # an override is named as such
    folder = _folder(tmp_path / "vocab", BertModel(tiny()))
    with pytest.raises(
        CheckpointError, match="vocab_size is 5000 in config.json with the arguments given, but model.safetensors has"
    ):
        BertModel.from_pretrained(folder, vocab_size=5000)


def test_ignore_mismatched_sizes_still_reinitialises_a_resized_vocabulary(tmp_path):
    folder = _folder(tmp_path, BertModel(tiny()))
    with pytest.warns(UserWarning, match="re-initialised"):
        model = BertModel.from_pretrained(folder, vocab_size=120, ignore_mismatched_sizes=True)
    assert tuple(model.embeddings.word_embeddings.weight.shape) == (120, 32)


def test_a_config_too_large_for_memory_is_refused_before_a_module_is_built(tmp_path):
    with pytest.raises(ConfigError, match=f"hidden_size={HUGE}.*more than this machine's"):
        BertModel(BertConfig(hidden_size=HUGE, num_attention_heads=4))
    with pytest.raises(ConfigError, match=f"vocab_size={10**12}"):
        BertConfig.from_preset("tiny", vocab_size=10**12)
    # a folder with config.json alone: no shapes to compare, the bound says it
    (tmp_path / "config.json").write_text(json.dumps({**tiny().to_dict(), "hidden_size": HUGE}))
    with pytest.raises(CheckpointError, match=f"hidden_size={HUGE}.*more than this machine's"):
        BertForMaskedLM.from_pretrained(tmp_path)
    assert BertConfig.from_preset("bert-large-uncased").parameter_count() == pytest.approx(336e6, rel=0.02)


def test_parameter_count_is_the_encoders():
    """What the memory bound counts: BertModel's parameters with its pooler (a task head adds a few more)."""
    for config in (tiny(), tiny(position_embedding_type="relative_key", is_decoder=True, add_cross_attention=True)):
        assert config.parameter_count() == BertModel(config).num_parameters()
    electra = tiny(model_type="electra", embedding_size=16)
    pooler = 32 * 32 + 32  # ElectraModel has none
    assert electra.parameter_count() == ElectraModel(electra).num_parameters() + pooler


# ----- case 13b: fill-mask on an ELECTRA discriminator ---------------------------------------------------------------
@pytest.fixture
def discriminator(tmp_path, tokenizer_dir):
    """An ELECTRA run's folder as `bertkit pretrain --objective electra` leaves it, the generator not yet there."""
    tok = Tokenizer.from_pretrained(tokenizer_dir)
    config = tiny(model_type="electra", embedding_size=16, vocab_size=tok.vocab_size, pad_token_id=tok.pad_token_id)
    run = tmp_path / "run"
    torch.manual_seed(0)
    ElectraForPreTraining(config).save_pretrained(run)
    tok.save_pretrained(run)
    return run, config, tok


def test_fill_mask_on_a_discriminator_names_its_runs_generator(discriminator, capsys):
    run, config, tok = discriminator
    assert main(["fill-mask", "--model", str(run), "今天[MASK]气很好"]) != 0
    said = capsys.readouterr().err
    assert "an ELECTRA discriminator (ElectraForPreTraining), which has no MLM head (generator_predictions.*" in said
    assert f"saves it in {run / 'generator'}, which is not there" in said
    ElectraForMaskedLM(config).save_pretrained(run / "generator")
    tok.save_pretrained(run / "generator")
    assert main(["fill-mask", "--model", str(run), "今天[MASK]气很好"]) != 0
    assert f"its run's generator has one: bertkit fill-mask --model {run / 'generator'}" in capsys.readouterr().err
    assert main(["fill-mask", "--model", str(run / "generator"), "今天[MASK]气很好"]) == 0


# ----- case 13c: a file where a folder is expected ---------------------------------------------------------------------
def test_a_file_passed_as_tokenizer_or_data_is_called_a_file(tmp_path, tokenizer_dir, capsys):
    vocab = os.path.join(tokenizer_dir, "vocab.txt")
    with pytest.raises(TokenizerError, match=f"{vocab}: a file, not a folder; pass the folder holding it, "):
        Tokenizer.from_pretrained(vocab)
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    with pytest.raises(DataError, match="notes.txt: a file, not a folder; --data takes a dataset folder"):
        PretrainingData.open(str(notes))
    assert main(["pretrain", "--data", str(notes), "--out", str(tmp_path / "o1")]) != 0
    said = capsys.readouterr().err
    assert "a file, not a folder" in said and f"--corpus {notes}" in said and "no such" not in said
    assert main(["pretrain", "--tokenizer", str(notes), "--out", str(tmp_path / "o2")]) != 0
    said = capsys.readouterr().err
    assert f"{notes}: a file, not a folder; pass a local folder holding vocab.txt" in said and "no such" not in said
    shutil.rmtree(tmp_path / "o1", ignore_errors=True)
