"""What a --config file may not do: name a setting twice, use YAML anchors and aliases (an alias bomb is a
billion values from a kilobyte), nest deeper than settings go, or be larger than a settings file is; and
what an error shows of a value is cut short, whatever the value."""

from __future__ import annotations

import pytest

from bertkit.errors import ConfigError
from bertkit.options import MAX_CONFIG_BYTES, check_settings, read_settings, write_settings
from bertkit.train.finetune import FinetuneConfig


def write(tmp_path, text: str, name: str = "run.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("steps: 3\nlr: 1.0e-4\nsteps: 9\n", "line 3: steps is given twice .line 1 and line 3.; keep one"),
        (
            "seq-len: 32\nseq_len: 64\n",
            "line 2: seq_len is given twice .line 1 as seq-len, line 2 as seq_len.; keep one",
        ),
        ("--steps: 3\nsteps: 4\n", "line 2: steps is given twice .line 1 as --steps, line 2 as steps."),
        ("log_to:\n  - {a: 1,\n     a: 2}\n", "line 3: a is given twice .line 2 and line 3."),
    ],
)
def test_a_setting_named_twice_is_refused_naming_both_lines(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=f"--config {path}: {message}"):
        read_settings(FinetuneConfig, path)


def bomb(levels: int = 9, width: int = 9) -> str:
    """The billion laughs under a known key: each level a list of `width` aliases of the one before (9 x 9:
    9**9 = 387 million strings from under 1 KB of YAML)."""
    lines = ["lr:", "  - &l0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"  - &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path):
    text = bomb()
    assert len(text.encode()) < 1024
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=f"--config {path}: line 2: a YAML anchor .&l0.") as e:
        read_settings(FinetuneConfig, path)
    assert len(str(e.value)) < 300


@pytest.mark.parametrize(
    "text, message",
    [
        ("lr: &x 1.0e-4\n", "line 1: a YAML anchor .&x."),
        ("steps: *x\n", "line 1: a YAML alias .[*]x."),
        ("<<: {steps: 3}\nsteps: 9\n", "line 1: a YAML merge key .<<."),
        ("log_to: " + "[" * 1000 + "]" * 1000 + "\n", "line 1: nested deeper than"),
    ],
)
def test_yaml_that_builds_more_than_it_says_is_refused(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=f"--config {path}: {message}"):
        read_settings(FinetuneConfig, path)


def test_a_file_larger_than_a_settings_file_is_refused_unread(tmp_path):
    path = write(tmp_path, "# padding\n" * (MAX_CONFIG_BYTES // 10 + 1) + "steps: 3\n")
    with pytest.raises(ConfigError, match=f"--config {path}: .* bytes; a settings file is at most 64 KB"):
        read_settings(FinetuneConfig, path)


def test_an_error_shows_a_value_cut_short_however_large():
    level: list = ["lol"] * 9
    for _ in range(8):  # shared lists: nothing large in memory, 9**9 strings when written out in full
        level = [level] * 9
    for value, key in ((level, "lr"), ("x" * 1_000_000, "steps"), ({"k" * 10_000: 1}, "task")):
        with pytest.raises(ConfigError) as e:
            check_settings(FinetuneConfig, {key: value}, "bertkit.finetune")
        assert len(str(e.value)) < 300 and str(e.value).startswith(f"bertkit.finetune: {key}: ")
    with pytest.raises(ConfigError, match="unknown setting 'xxx") as e:
        check_settings(FinetuneConfig, {"x" * 1_000_000: 1}, "bertkit.finetune")
    assert len(str(e.value)) < 600


def test_the_settings_a_run_writes_read_back_the_same(tmp_path):
    cfg = FinetuneConfig(train="t.jsonl", eval="d.jsonl", seq_len=64, lr=5e-5, task="tag", out="runs/x")
    path = write_settings(cfg, str(tmp_path / "settings.yaml"), command="finetune", leave_out=("resume", "overwrite"))
    read = read_settings(FinetuneConfig, path)
    assert "resume" not in read and "overwrite" not in read
    assert FinetuneConfig(**read, resume=cfg.resume, overwrite=cfg.overwrite) == cfg
