"""A ModernBERT folder through the commands a BERT folder goes through: `bertkit pretrain --model-config modern-tiny`
makes one, and finetune, predict, evaluate, fill-mask, embed and serve's engine take it (on the torch engine: auto
says why); export refuses it by name."""

import json

import numpy as np
import pytest

from bertkit.cli import main
from bertkit.modernbert import ModernBertForMaskedLM, ModernBertForSequenceClassification

pytestmark = pytest.mark.slow  # a pretraining and a fine-tuning run, in process


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, corpus_file, tokenizer_dir):
    out = tmp_path_factory.mktemp("modern") / "pre"
    argv = ["pretrain", "--corpus", corpus_file, "--tokenizer", tokenizer_dir, "--model-config", "modern-tiny"]
    argv += ["--steps", "4", "--batch-size", "4", "--seq-len", "32", "--eval-every", "0", "--save-every", "0"]
    assert main([*argv, "--out", str(out), "--no-progress", "--device", "cpu"]) == 0
    return out


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory, pretrained, clf_train_file, dev_file):
    out = tmp_path_factory.mktemp("modern") / "ft"
    argv = ["finetune", "--model", str(pretrained), "--train", clf_train_file, "--eval", dev_file, "--steps", "4"]
    argv += ["--batch-size", "8", "--seq-len", "32", "--out", str(out), "--no-progress", "--device", "cpu"]
    assert main(argv) == 0
    return out


def test_pretraining_writes_a_modernbert_folder(pretrained):
    config = json.loads((pretrained / "config.json").read_text())
    assert config["model_type"] == "modernbert" and config["architectures"] == ["ModernBertForMaskedLM"]
    assert isinstance(ModernBertForMaskedLM.from_pretrained(pretrained), ModernBertForMaskedLM)


def test_finetune_predict_and_evaluate_take_it(finetuned, dev_file, capsys):
    assert json.loads((finetuned / "config.json").read_text())["architectures"] == [
        ModernBertForSequenceClassification.__name__
    ]
    capsys.readouterr()
    with pytest.warns(UserWarning, match="ModernBERT folder, whose ONNX graph bertkit does not build yet"):
        assert main(["predict", "--model", str(finetuned), "这个手机很好用"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["label"] in ("neg", "pos") and abs(sum(row["probabilities"].values()) - 1) < 1e-5
    with pytest.warns(UserWarning, match="ModernBERT folder"):
        assert main(["evaluate", "--model", str(finetuned), "--data", dev_file]) == 0
    assert "accuracy" in capsys.readouterr().out


def test_fill_mask_and_embed_take_it(pretrained, tmp_path, capsys):
    with pytest.warns(UserWarning, match="ModernBERT folder"):
        assert main(["fill-mask", "--model", str(pretrained), "人民[MASK]报"]) == 0
    assert "p=" in capsys.readouterr().out
    with pytest.warns(UserWarning, match="ModernBERT folder"):
        assert main(["embed", "--model", str(pretrained), "人民日报", "今天", "--out", str(tmp_path / "v.npy")]) == 0
    vectors = np.load(tmp_path / "v.npy")
    assert vectors.shape == (2, 32) and np.isfinite(vectors).all()


def test_serves_engine_answers_predict_and_embed(finetuned):
    from bertkit.serve.engine import Engine

    with pytest.warns(UserWarning, match="ModernBERT folder"):
        engine = Engine(str(finetuned))
    engine.probe()  # one request of each kind it answers, run as requests run
    assert "/predict" in engine.routes and "/embed" in engine.routes


def test_export_refuses_it_by_name(pretrained, tmp_path, capsys):
    assert main(["export", str(pretrained), "--out", str(tmp_path / "onnx")]) != 0
    assert "a ModernBERT folder; bertkit's ONNX export writes BERT and ELECTRA graphs" in capsys.readouterr().err


@pytest.fixture(scope="module")
def hub_folder(tmp_path_factory):
    """A folder as the hub's ModernBERT ones: a random ModernBertForMaskedLM saved by transformers with a byte-level
    BPE tokenizer (no vocab.txt, no token_type_ids)."""
    import torch
    import transformers
    from helpers import bpe_tokenizer_folder

    folder = bpe_tokenizer_folder(tmp_path_factory.mktemp("hub") / "modernbert")
    config = transformers.ModernBertConfig(
        vocab_size=3000,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        local_attention=16,
        pad_token_id=3,
        cls_token_id=1,
        sep_token_id=2,
        bos_token_id=1,
        eos_token_id=2,
        reference_compile=False,
    )
    torch.manual_seed(0)
    transformers.ModernBertForMaskedLM(config).save_pretrained(folder)
    return folder


def test_a_hub_style_folder_finetunes_predicts_and_fills_masks(hub_folder, clf_train_file, dev_file, tmp_path, capsys):
    out = tmp_path / "ft"
    argv = ["finetune", "--model", str(hub_folder), "--train", clf_train_file, "--eval", dev_file, "--steps", "4"]
    assert main([*argv, "--batch-size", "8", "--seq-len", "32", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    with pytest.warns(UserWarning, match="ModernBERT folder"):
        assert main(["predict", "--model", str(out), "这个手机很好用"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["label"] in ("neg", "pos")
    with pytest.warns(UserWarning, match="ModernBERT folder"):
        assert main(["fill-mask", "--model", str(hub_folder), "--top-k", "3", "人民[MASK]报"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip()[:2] in ("1.", "2.", "3.")]
    assert len(rows) == 3
    for _, token, _, filled in rows:  # "1. 日  p=0.01  人民日报": the token as text, the same as in the filled text
        assert token in filled, rows
