"""A ModernBERT folder through the commands a BERT folder goes through: `bertkit pretrain --model-config modern-tiny`
makes one, and finetune, predict, evaluate, fill-mask, embed and serve's engine take it, on the default engine (auto:
its ONNX graph, exported on first use, beside the torch model) with the torch engine's answers; export writes its
graph, which ONNX Runtime runs to 1e-4 of bertkit on padded batches longer than the local window."""

import json

import numpy as np
import pytest
from helpers import close_rows, hub_modernbert_folder

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


def test_finetune_predict_and_evaluate_take_it_on_auto_as_on_torch(finetuned, dev_file, capsys):
    assert json.loads((finetuned / "config.json").read_text())["architectures"] == [
        ModernBertForSequenceClassification.__name__
    ]
    capsys.readouterr()
    answers = {}
    for engine in ("auto", "torch"):
        assert main(["predict", "--model", str(finetuned), "这个手机很好用", "一般", "--engine", engine]) == 0
        out, err = capsys.readouterr()
        assert err.splitlines()[0].startswith(f"bertkit predict: engine {engine} ("), err
        answers[engine] = [json.loads(line) for line in out.strip().splitlines()]
        assert main(["evaluate", "--model", str(finetuned), "--data", dev_file, "--engine", engine]) == 0
        answers[engine, "evaluate"] = capsys.readouterr().out
    assert close_rows(answers["auto"], answers["torch"]) and answers["auto"][0]["label"] in ("neg", "pos")
    assert answers["auto", "evaluate"] == answers["torch", "evaluate"]


def test_fill_mask_and_embed_take_it(pretrained, tmp_path, capsys):
    assert main(["fill-mask", "--model", str(pretrained), "人民[MASK]报"]) == 0
    assert "p=" in capsys.readouterr().out
    vectors = {}
    for engine in ("auto", "torch"):
        out = tmp_path / f"{engine}.npy"
        assert (
            main(["embed", "--model", str(pretrained), "人民日报", "今天", "--out", str(out), "--engine", engine]) == 0
        )
        vectors[engine] = np.load(out)
    assert vectors["auto"].shape == (2, 32) and np.abs(vectors["auto"] - vectors["torch"]).max() <= 1e-4


def test_serves_engine_answers_predict_and_embed(finetuned):
    from bertkit.serve.engine import Engine

    engine = Engine(str(finetuned))
    engine.probe()  # one request of each kind it answers, run as requests run
    assert "/predict" in engine.routes and "/embed" in engine.routes and engine.engine_name == "auto"


def test_export_writes_a_graph_onnx_runtime_runs_as_bertkit_past_the_window(pretrained, tmp_path, capsys):
    import torch

    from bertkit.engines import OnnxModel
    from bertkit.modernbert import ModernBertModel

    for kind in ("mlm", "encoder"):
        out = tmp_path / kind
        assert main(["export", str(pretrained), "--out", str(out), "--kind", kind]) == 0
        assert "ONNX Runtime's outputs equal bertkit's" in capsys.readouterr().err
    graph, model = OnnxModel(str(tmp_path / "encoder")), ModernBertModel.from_pretrained(pretrained).eval()
    assert graph.inputs == ["input_ids", "attention_mask"]  # ModernBERT reads no token types
    assert model.config.local_attention < 40  # the rows below reach past the window
    ids = torch.randint(5, model.config.vocab_size, (3, 40))
    mask = (torch.arange(40)[None] < torch.tensor([[40], [25], [3]])).long()
    with torch.no_grad():
        ours = model(ids, mask).last_hidden_state
    theirs = graph(ids, mask).last_hidden_state
    assert ((ours - theirs).abs() * mask[..., None]).max() <= 1e-4


@pytest.fixture(scope="module")
def hub_folder(tmp_path_factory):
    """A folder as the hub's ModernBERT ones (helpers.hub_modernbert_folder: no vocab.txt, no token_type_ids)."""
    return hub_modernbert_folder(tmp_path_factory.mktemp("hub") / "modernbert")


def test_a_hub_style_folder_finetunes_predicts_and_fills_masks(hub_folder, clf_train_file, dev_file, tmp_path, capsys):
    out = tmp_path / "ft"
    argv = ["finetune", "--model", str(hub_folder), "--train", clf_train_file, "--eval", dev_file, "--steps", "4"]
    assert main([*argv, "--batch-size", "8", "--seq-len", "32", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["predict", "--model", str(out), "这个手机很好用"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["label"] in ("neg", "pos")
    assert main(["fill-mask", "--model", str(hub_folder), "--top-k", "3", "人民[MASK]报"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip()[:2] in ("1.", "2.", "3.")]
    assert len(rows) == 3
    for _, token, _, filled in rows:  # "1. 日  p=0.01  人民日报": the token as text, the same as in the filled text
        assert token in filled, rows
