"""`bertkit info` on a folder that is not a model: it says so, and how to get a model folder."""

import json
import shlex

import pytest
from helpers import tiny

from bertkit import BertForMaskedLM
from bertkit.cli import main
from bertkit.commands.info import main as info_main
from bertkit.errors import BertkitError

HOW_TO_GET_ONE = (
    'hf download google-bert/bert-base-chinese --include "*.json" vocab.txt model.safetensors '
    "--local-dir models/bert-base-chinese",
    "pip install huggingface_hub",
    "huggingface-cli download",
    "offline",
    "bertkit quickstart",
    "bertkit pretrain",
)


def error_line(capsys) -> str:
    """The one line `bertkit info` printed on stderr (no traceback)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("bertkit info: error: "), err
    return err


@pytest.mark.parametrize(
    "config, what",
    [
        (None, "no config.json here, so not a model directory"),
        (
            {"model_type": "gpt2", "n_embd": 768},
            "config.json says model_type 'gpt2': not a BERT, ELECTRA or ModernBERT model",
        ),
    ],
)
def test_a_folder_that_is_not_a_model_says_how_to_get_one(tmp_path, capsys, config, what):
    folder = tmp_path / "downloads"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a model")
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    assert main(["info", str(folder)]) == 2
    err = error_line(capsys)
    assert f"{folder}: {what}" in err
    for words in HOW_TO_GET_ONE:
        assert words in err, words
    with pytest.raises(BertkitError) as raised:
        info_main([str(folder)])
    assert type(raised.value).__name__ == "NotAModelError"  # the command's own error class


def test_a_missing_folder_says_how_to_get_one(tmp_path, capsys):
    missing = tmp_path / "bert-base-chinese"
    assert main(["info", str(missing)]) == 2
    err = error_line(capsys)
    assert f"{missing}: no such directory" in err and "local model directories only" in err
    for words in HOW_TO_GET_ONE:
        assert words in err, words


def test_a_folder_holding_models_names_them(tmp_path, capsys):
    """runs/quickstart rather than runs/quickstart/pretrain: the models are one level down, and the command the
    error gives works."""
    BertForMaskedLM(tiny()).save_pretrained(tmp_path / "pretrain")
    (tmp_path / "data").mkdir()
    assert main(["info", str(tmp_path)]) == 2
    err = error_line(capsys)
    assert "no config.json here" in err and "the folders in it that are: pretrain (" in err
    assert "hf download" not in err  # the model is right there: no download advice
    command = shlex.split(err.split("`")[1])
    assert command[:2] == ["bertkit", "info"]
    assert main(command[1:]) == 0
    assert "2 layers run one after another" in capsys.readouterr().out


def test_a_bert_config_with_a_problem_keeps_its_own_message(tmp_path, capsys):
    """What is wrong inside a BERT config.json is the config loader's to say (line and column), not 'not a model'."""
    (tmp_path / "config.json").write_text('{"model_type": "bert", "hidden_size": 32,')
    assert main(["info", str(tmp_path)]) == 2
    err = error_line(capsys)
    assert "not valid JSON" in err and "hf download" not in err
