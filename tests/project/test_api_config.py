"""Settings from a file (--config) and from Python (bertkit.pretrain / finetune / evaluate / predict): the same
fields and checks as the flags; a run from Python, from flags and from its own settings.yaml are the same run."""

from __future__ import annotations

import json
import os

import pytest
import yaml

import bertkit
from bertkit.cli import COMMANDS, main
from bertkit.commands.explain import ExplainConfig
from bertkit.errors import ConfigError
from bertkit.options import parse, read_settings
from bertkit.train.finetune import FinetuneConfig
from bertkit.train.pretrain import PretrainConfig


def write(tmp_path, text: str, name: str = "run.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# ----- --config ----------------------------------------------------------------------------------
def test_the_file_gives_settings_and_flags_win(tmp_path):
    path = write(tmp_path, "# a recipe\nlr: 5e-5\nseq-len: 64\ntask: tag\nsteps: 7\nproblem_type: regression\n")
    cfg = parse(FinetuneConfig, ["--config", path, "--steps", "9", "--train", "x.jsonl"], prog="bertkit finetune")
    # YAML reads 5e-5 (no dot) as a text: it is the number --lr 5e-5 would be
    assert (cfg.lr, cfg.seq_len, cfg.task, cfg.steps, cfg.train) == (5e-5, 64, "tag", 9, "x.jsonl")
    assert cfg.problem_type == "regression"
    assert parse(FinetuneConfig, [f"--config={path}"], prog="p").steps == 7
    assert parse(FinetuneConfig, ["--conf", path], prog="p").steps == 7  # an abbreviation, as argparse takes it
    with pytest.raises(SystemExit):  # a bad flag is refused before the file is read
        parse(FinetuneConfig, ["--config", path, "--no-such-flag"], prog="p")
    assert parse(FinetuneConfig, [], prog="p").steps == FinetuneConfig().steps  # no file: the defaults
    as_json = write(tmp_path, json.dumps({"lr": 3e-5, "seq_len": 48, "log_every": 5}), "run.json")  # JSON is YAML
    assert parse(FinetuneConfig, ["--config", as_json], prog="p").seq_len == 48


def test_a_file_satisfies_required_flags_and_exclusive_flags_follow_the_command_line(tmp_path):
    from bertkit.evaluation import EvaluateConfig

    path = write(tmp_path, "model: m\ndata: d.jsonl\n")
    cfg = parse(EvaluateConfig, ["--config", path], prog="bertkit evaluate")
    assert (cfg.model, cfg.data) == ("m", "d.jsonl")
    both = write(tmp_path, "model: m\ntrace: 今天天气很好\n", "x.yaml")
    assert parse(ExplainConfig, ["--config", both], prog="e").trace == "今天天气很好"
    flag_wins = parse(ExplainConfig, ["--config", both, "--mlm", "今天[MASK]"], prog="e")  # --trace | --mlm
    assert (flag_wins.trace, flag_wins.mlm) == (None, "今天[MASK]")
    clash = write(tmp_path, "model: m\ntrace: x\nmlm: x\n", "y.yaml")
    with pytest.raises(ConfigError, match="trace and mlm cannot be given together"):
        parse(ExplainConfig, ["--config", clash], prog="e")


@pytest.mark.parametrize(
    "text, message",
    [
        ("lrr: 1e-4\n", r"unknown setting 'lrr'; did you mean 'lr'\?"),
        ("steps: ten\n", "steps: 'ten' is not an int"),
        ("steps: 1.5\n", "steps: 1.5 is not an int"),
        ("compile: 1\n", "compile: 1 is not a bool"),
        ("task: translate\n", "task: 'translate' is not one of 'classify', 'tag', 'qa', 'choice'"),
        ("schedule: step\n", "schedule: 'step' is not one of 'linear', 'cosine', 'constant'"),
        ("steps: null\n", "steps: null, but it needs a value"),
        ("- lr: 1\n", "holds a list; a settings file is a mapping"),
        ("lr: [1\n", r"line 2, column 1: not YAML"),
    ],
)
def test_a_bad_file_names_the_file_and_the_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=f"--config {path}.*{message}"):
        parse(FinetuneConfig, ["--config", path], prog="bertkit finetune")


def test_a_missing_file_or_a_folder_is_an_error_and_the_command_line_says_so(tmp_path, capsys):
    with pytest.raises(ConfigError, match="no such file"):
        parse(FinetuneConfig, ["--config", str(tmp_path / "nope.yaml")], prog="p")
    with pytest.raises(ConfigError, match="is a folder; pass the settings file"):
        parse(FinetuneConfig, ["--config", str(tmp_path)], prog="p")
    assert main(["finetune", "--config", write(tmp_path, "stepz: 3\n")]) == 2
    assert "bertkit finetune: error: --config" in capsys.readouterr().err


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "tokenizer"] + ["tokenizer train"])
def test_every_command_with_settings_takes_config(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([*command.split(), "--help"])
    assert e.value.code == 0
    assert "--config FILE" in capsys.readouterr().out


# ----- from Python -------------------------------------------------------------------------------
def test_python_calls_check_their_settings_and_raise_bertkit_errors():
    with pytest.raises(ConfigError, match=r"bertkit.finetune: unknown setting 'stepz'; did you mean 'steps'\?"):
        bertkit.finetune(stepz=3)
    with pytest.raises(ConfigError, match="bertkit.evaluate: model=, data= required"):
        bertkit.evaluate()
    with pytest.raises(ConfigError, match="bertkit.predict: takes a PredictConfig or keyword arguments, not a str"):
        bertkit.predict("runs/x")
    with pytest.raises(ConfigError, match="bertkit.pretrain: steps: 'many' is not an int"):
        bertkit.pretrain(steps="many")
    with pytest.raises(bertkit.BertkitError, match="--train is required"):  # the run's own checks, not SystemExit
        bertkit.finetune(model="x")


def test_the_functions_are_not_shadowed_by_submodules():
    """Importing a submodule sets it as an attribute of its package: no bertkit/<name>.py may share a function's
    name, or `import bertkit.predict` somewhere would turn bertkit.predict into a module."""
    import importlib
    import importlib.util

    for name in ("pretrain", "finetune", "evaluate", "predict"):
        assert importlib.util.find_spec(f"bertkit.{name}") is None, name
    for module in ("bertkit.evaluation", "bertkit.train.finetune", "bertkit.train.pretrain", "bertkit.cli"):
        importlib.import_module(module)
    assert all(callable(getattr(bertkit, name)) for name in ("pretrain", "finetune", "evaluate", "predict"))


def test_evaluate_and_predict_from_python_return_what_the_commands_print(clf_dir, dev_file, tmp_path, capsys):
    report = bertkit.evaluate(model=clf_dir, data=dev_file)
    assert main(["evaluate", "--model", clf_dir, "--data", dev_file, "--json", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text(encoding="utf-8")) == json.loads(json.dumps(report))
    rows = bertkit.predict(model=clf_dir, texts=["这本书很好看", "质量太差了"])
    capsys.readouterr()
    assert main(["predict", "--model", clf_dir, "这本书很好看", "质量太差了"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == json.loads(json.dumps(rows))
    from bertkit.evaluation import PredictConfig

    settings = PredictConfig(model=clf_dir, texts=["质量太差了"])
    assert bertkit.predict(settings, texts=["这本书很好看"]) == rows[:1]  # the keyword replaces the field


# ----- the same run three ways -------------------------------------------------------------------
TIMING = ("elapsed_s", "tokens_per_s")


def folder(path) -> dict[str, object]:
    """A run folder's files by name: bytes, metrics.jsonl without its timings, settings.yaml without out."""
    files = {}
    for root, _, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            key = os.path.relpath(full, path)
            if name == "metrics.jsonl":
                rows = [json.loads(line) for line in open(full, encoding="utf-8")]
                files[key] = [{k: v for k, v in r.items() if k not in TIMING} for r in rows]
            elif name == "settings.yaml":
                files[key] = {k: v for k, v in yaml.safe_load(open(full, encoding="utf-8")).items() if k != "out"}
            elif name == "loss.png" or key.startswith("checkpoint"):
                files[key] = "present"  # the picture embeds nothing of the run's timing, but a font cache may differ
            else:
                files[key] = open(full, "rb").read()
    return files


def test_python_flags_and_saved_settings_make_the_same_run(
    base_dir, dev_file, clf_train_file, tmp_path, one_torch_thread
):
    settings = dict(
        model=base_dir,
        train=clf_train_file,
        eval=dev_file,
        steps=6,
        batch_size=8,
        lr=1e-3,
        seq_len=32,
        eval_every=3,
        save_every=0,
        log_every=2,
        progress=False,
        device="cpu",
    )
    summary = bertkit.finetune(out=str(tmp_path / "python"), **settings)
    assert summary.step == 6 and summary.best is not None
    assert summary.settings["stride"] == 8  # resolved: the default stride of --seq-len 32
    saved = tmp_path / "python" / "settings.yaml"
    assert read_settings(FinetuneConfig, str(saved))["stride"] == 8
    assert "resume" not in saved.read_text(encoding="utf-8")  # how --out was claimed is not the run

    flags = []
    for key, value in settings.items():
        flag = "--" + key.replace("_", "-")
        flags += [flag if value else "--no-" + flag[2:]] if isinstance(value, bool) else [flag, str(value)]
    assert main(["finetune", *flags, "--out", str(tmp_path / "flags")]) == 0
    assert main(["finetune", "--config", str(saved), "--out", str(tmp_path / "again")]) == 0

    python, cli, again = (folder(tmp_path / name) for name in ("python", "flags", "again"))
    assert python.keys() == cli.keys() == again.keys()
    assert {"model.safetensors", "settings.yaml", "metrics.jsonl", "eval_report.json", "vocab.txt"} <= python.keys()
    assert python == cli == again


def test_pretraining_keeps_its_settings_and_says_why_its_vocabulary_is_small(
    corpus_file, tmp_path, capsys, one_torch_thread
):
    summary = bertkit.pretrain(
        corpus=corpus_file,
        model_config="tiny",
        steps=2,
        batch_size=4,
        seq_len=32,
        eval_every=0,
        save_every=0,
        progress=False,
        device="cpu",
        out=str(tmp_path / "pt"),
    )
    assert summary.step == 2 and summary.vocab_size < 21128
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: the vocabulary has")]
    assert len(notes) == 1 and notes[0].startswith(
        f"note: the vocabulary has {summary.vocab_size:,} entries, not the 21,128 asked: the corpus gives no more"
    ), notes
    kept = read_settings(PretrainConfig, str(tmp_path / "pt" / "settings.yaml"))
    assert kept["corpus"] == corpus_file and kept["model_config"] == "tiny" and kept["steps"] == 2
    assert kept["objective"] == "mlm" and "resume" not in kept


# ----- the choices of bertkit.encode and Encoder, checked as the other functions check theirs ---------------
@pytest.mark.parametrize(
    "call, kwargs, message",
    [
        ("encode", dict(engine="tensorrt"), "bertkit.encode: engine: 'tensorrt' is not one of 'torch', 'onnx', 'auto'"),
        ("encode", dict(poolling="cls"), r"bertkit.encode: unknown setting 'poolling'; did you mean 'pooling'\?"),
        ("encode", dict(pooling="clss"), r"bertkit.encode: pooling: 'clss' is not one of .*; did you mean 'cls'\?"),
        ("encode", dict(normalize="yes"), "bertkit.encode: normalize: 'yes' is not a bool"),
        ("encode", dict(batch_size=0), "bertkit.encode: batch_size must be a positive integer, got 0"),
        ("Encoder", dict(engine="tensorrt"), "Encoder.from_pretrained: engine: 'tensorrt' is not one of"),
        (
            "Encoder",
            dict(quantise="int8"),
            r"Encoder.from_pretrained: unknown setting 'quantise'; did you mean 'quantize'",
        ),
        ("Encoder", dict(quantize="int4"), "Encoder.from_pretrained: quantize: 'int4' is not one of 'int8', 'bf16'"),
        ("Encoder", dict(device="gpu"), "Encoder.from_pretrained: device: 'gpu' is not a device"),
    ],
)
def test_encode_and_encoder_refuse_unknown_names_and_choices_as_config_errors(base_dir, call, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        if call == "encode":
            bertkit.encode(base_dir, ["今天天气很好"], **kwargs)
        else:
            bertkit.Encoder.from_pretrained(base_dir, **kwargs)


def test_encode_refuses_an_engine_for_a_model_it_does_not_load(base_dir):
    encoder = bertkit.Encoder.from_pretrained(base_dir, engine="torch")
    assert bertkit.encode(encoder, ["今天天气很好"], engine="torch").shape == (1, encoder.model.config.hidden_size)
    with pytest.raises(ConfigError, match="bertkit.encode: engine='onnx' is for a model folder"):
        bertkit.encode(encoder, ["今天天气很好"], engine="onnx")


def test_a_bad_choice_names_the_closest_one():
    with pytest.raises(ConfigError, match=r"bertkit.finetune: task: 'tagg' is not one of .*; did you mean 'tag'\?"):
        bertkit.finetune(task="tagg")
