"""The command line: `bertkit info` and clear errors for user mistakes."""

import subprocess
import sys

from bertkit import BertModel
from bertkit.cli import main
from conftest import tiny


def test_info_preset_shows_heads_and_parameter_count(capsys):
    assert main(["info", "--preset", "tiny", "--seq-len", "5"]) == 0
    out = capsys.readouterr().out
    assert "heads=4, head_dim=8" in out
    assert "2 layers run one after another" in out and "4 heads x 8 dims" in out
    from bertkit import BertConfig

    assert f"parameters: {BertModel(BertConfig.from_preset('tiny')).num_parameters():,}" in out
    assert "input_ids (1, 5) -> last_hidden_state (1, 5, 32), pooler_output (1, 32)" in out


def test_info_loads_a_directory(tmp_path, capsys):
    BertModel(tiny(num_hidden_layers=3)).save_pretrained(tmp_path)
    assert main(["info", str(tmp_path)]) == 0
    assert "3 layers run one after another" in capsys.readouterr().out


def test_info_on_a_pretraining_output_says_what_is_not_there(tmp_path, capsys, recwarn):
    """An MLM checkpoint without a pooler (pretrained without NSP): notes, not warnings."""
    from bertkit import BertForMaskedLM

    BertForMaskedLM(tiny()).save_pretrained(tmp_path)
    assert main(["info", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "has no pooler weights" in out and "BertForMaskedLM" in out
    assert not [w for w in recwarn if "bertkit" in str(w.filename) or "not used" in str(w.message)]


def test_missing_directory_is_a_clear_error_not_a_traceback(tmp_path):
    missing = tmp_path / "bert-base-chinese"
    run = subprocess.run([sys.executable, "-m", "bertkit", "info", str(missing)], capture_output=True, text=True)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert f"{missing}: no such directory" in run.stderr and "local model directories only" in run.stderr


def test_unknown_command_lists_commands(capsys):
    assert main(["nonsense"]) == 2
    assert "info" in capsys.readouterr().out


def test_bad_seq_len_is_a_usage_error(capsys):
    import pytest

    with pytest.raises(SystemExit) as exit_info:
        main(["info", "--preset", "tiny", "--seq-len", "0"])
    assert exit_info.value.code == 2
    assert "must be a positive integer, got 0" in capsys.readouterr().err


def test_every_command_is_wired(capsys):
    assert main(["explain", "--preset", "tiny"]) == 0
    assert "SelfAttention  4 heads x 8 = 32" in capsys.readouterr().out
    for command in ("pretrain", "finetune", "evaluate", "predict", "fill-mask", "tokenize", "tokenizer", "attention"):
        try:
            main([command, "--help"])
        except SystemExit as e:  # argparse's --help exits 0
            assert e.code == 0
        assert "usage" in capsys.readouterr().out.lower()
