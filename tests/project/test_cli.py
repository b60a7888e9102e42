"""The command line: `bertkit info` and clear errors for user mistakes."""

import errno
import io
import os
import subprocess
import sys

import pytest
from helpers import tiny

from bertkit import BertModel
from bertkit.cli import main


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


def test_missing_directory_is_a_clear_error_not_a_traceback(tmp_path, capsys):
    missing = tmp_path / "bert-base-chinese"
    assert main(["info", str(missing)]) == 2  # as `python -m bertkit info` exits (its exceptions would fail here)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"{missing}: no such directory" in err and "local model directories only" in err


def test_unknown_command_lists_commands(capsys):
    assert main(["nonsense"]) == 2
    err = capsys.readouterr().err  # an error, so on stderr, as argparse writes its usage errors
    assert "info" in err and "bertkit: error: unknown command 'nonsense'" in err and "did you mean" not in err


@pytest.mark.parametrize("typed, meant", [("pretrian", "pretrain"), ("embedd", "embed"), ("fill_mask", "fill-mask")])
def test_a_misspelt_command_names_the_closest(typed, meant, capsys):
    assert main([typed, "--steps", "3"]) == 2
    captured = capsys.readouterr()
    assert f"bertkit: error: unknown command '{typed}'; did you mean '{meant}'?" in captured.err
    assert captured.out == ""


@pytest.mark.parametrize(
    "argv, said", [(["trian"], "unknown tool 'trian'; did you mean 'train'?"), ([], "name a tool")]
)
def test_a_misspelt_or_missing_tokenizer_tool_is_a_usage_error(argv, said, capsys):
    assert main(["tokenizer", *argv]) == 2
    captured = capsys.readouterr()
    assert (
        captured.err.startswith("usage: bertkit tokenizer train")
        and f"bertkit tokenizer: error: {said}" in captured.err
    )
    assert captured.out == ""


def command_usage_error(argv, capsys) -> str:
    """stderr of `bertkit ARGV` that argparse refuses (exit status 2, as argparse exits)."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--lrr", "--lrr=3e-5"])
def test_a_misspelt_flag_names_the_closest(flag, capsys):
    err = command_usage_error(["finetune", flag, *(["3e-5"] if "=" not in flag else []), "--steps", "3"], capsys)
    assert err.startswith("usage: bertkit finetune [-h]")  # argparse's usage line stays
    assert f"bertkit finetune: error: unrecognized arguments: {flag}" in err
    assert "did you mean --lr?" in err


@pytest.mark.parametrize(
    "argv, meant",
    [(["finetune", "--task", "clasify"], "classify"), (["pretrain", "--objective", "mlm-bwo"], "mlm-bow")],
)
def test_a_misspelt_choice_names_the_closest(argv, meant, capsys):
    err = command_usage_error([*argv, "--steps", "3"], capsys)
    assert f"invalid choice: '{argv[2]}'" in err and err.rstrip().endswith(f"; did you mean {meant!r}?")
    assert "did you mean" not in command_usage_error(["finetune", "--task", "zzz"], capsys)


def test_a_misspelt_required_flag_is_named_not_reported_missing(capsys):
    err = command_usage_error(["predict", "--modle", "runs/x", "a text"], capsys)
    assert "unrecognized arguments: --modle; did you mean --model?" in err and "are required" not in err


def test_several_misspelt_flags_each_get_their_closest(capsys):
    err = command_usage_error(["pretrain", "--stesp", "3", "--lrr", "1e-3"], capsys)
    assert "unrecognized arguments: --stesp 3 --lrr 1e-3; did you mean --steps (for --stesp), --lr (for --lrr)?" in err


def test_every_command_names_the_closest_flag(capsys):
    """Every command's parser is built from its settings (options.py), so each suggests: here --config, which
    every command has; a misspelt flag is named before a required one that is missing (it may be that one)."""
    from bertkit.cli import COMMANDS

    for command in COMMANDS:
        argv = [command, "train"] if command == "tokenizer" else [command]
        err = command_usage_error([*argv, "--confg", "run.yaml"], capsys)
        assert "unrecognized arguments: --confg" in err and "; did you mean --config?" in err, (command, err)


def test_an_unknown_flag_with_nothing_close_is_argparses_error(capsys):
    err = command_usage_error(["predict", "--zzzzzz"], capsys)
    assert err.rstrip().endswith("bertkit predict: error: unrecognized arguments: --zzzzzz")


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


# ----- standard output that cannot be written (a full device, a reader that went away) ------------------
class Unwritable(io.StringIO):
    """A stdout whose write (or, with at="flush", only its flush: the last rows) fails with `code`."""

    def __init__(self, code: int, at: str = "write"):
        super().__init__()
        self.code, self.at = code, at

    def write(self, text):
        if self.at == "write":
            raise OSError(self.code, os.strerror(self.code))
        return super().write(text)

    def flush(self):
        if self.at == "flush":
            raise OSError(self.code, os.strerror(self.code))


@pytest.mark.parametrize("at", ["write", "flush"])
def test_a_full_stdout_is_one_line_and_a_failure(monkeypatch, capsys, at):
    monkeypatch.setattr(sys, "stdout", Unwritable(errno.ENOSPC, at))
    assert main(["info", "--preset", "tiny", "--seq-len", "5"]) == 1
    assert capsys.readouterr().err == (
        "bertkit info: error: cannot write to standard output: No space left on "
        "device; send it to a file or device with room for it\n"
    )
    assert isinstance(sys.stdout, Unwritable)  # main put the stream back


def test_a_closed_pipe_on_stdout_ends_quietly_as_unix_tools_do(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", Unwritable(errno.EPIPE))
    assert main(["info", "--preset", "tiny", "--seq-len", "5"]) == 141  # 128 + SIGPIPE, as `yes | head` reports
    assert capsys.readouterr().err == ""


def test_an_oserror_of_a_command_is_not_taken_for_stdout(monkeypatch):
    def fails(argv):
        print("a row")
        raise OSError(errno.ENOSPC, "No space left on device", "elsewhere.bin")

    monkeypatch.setattr("bertkit.commands.info.main", fails)
    with pytest.raises(OSError, match="elsewhere.bin"):
        main(["info"])


# what a command that runs a model says first: its engine, and the export its first use of a folder makes
ENGINE_LINES = (
    "bertkit fill-mask: engine ",
    "bertkit predict: engine ",
    "bertkit evaluate: engine ",
    "--engine auto: ",
)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_commands_writing_to_a_full_device_or_a_closed_pipe(base_dir, clf_dir, dev_file):
    """`bertkit CMD > /dev/full`: one line on stderr and exit 1; a closed pipe: nothing and 141; never a traceback
    nor Python's "Exception ignored ... BrokenPipeError" at exit."""
    commands = [
        ["tokenize", "--model", base_dir, "今天天气很好"],
        ["fill-mask", "--model", base_dir, "今天天气很[MASK]。"],
        ["predict", "--model", clf_dir, "这本书很好看", "质量太差了"],
        ["evaluate", "--model", clf_dir, "--data", dev_file],
    ]
    for command in commands:
        with open("/dev/full", "w") as full:
            done = subprocess.run(
                [sys.executable, "-m", "bertkit", *command], stdout=full, stderr=subprocess.PIPE, text=True, timeout=300
            )
        said = [line for line in done.stderr.splitlines() if not line.startswith(ENGINE_LINES)]
        assert (done.returncode, said) == (
            1,
            [
                f"bertkit {command[0]}: error: cannot write to standard "
                "output: No space left on device; send it to a file or device "
                "with room for it"
            ],
        ), command
    read, write = os.pipe()
    os.close(read)  # the reader went away before the first row
    done = subprocess.run(
        [sys.executable, "-m", "bertkit", *commands[2]], stdout=write, stderr=subprocess.PIPE, text=True, timeout=300
    )
    os.close(write)
    assert (done.returncode, [line for line in done.stderr.splitlines() if not line.startswith(ENGINE_LINES)]) == (
        141,
        [],
    )


# ----- flags from settings dataclasses (bertkit/options.py) -------------------------------------------
import dataclasses
import enum
import importlib
import pkgutil
import re
import typing
from pathlib import Path
from typing import Literal

import pytest

import bertkit
from bertkit.options import FlagKind, flag_kind, opt, parse, parser_for


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Flags:
    """Every kind of annotation a flag parses."""

    precision: Literal["auto", "fp32", "bf16"] = opt("auto", "a Literal")
    heads: Literal[1, 2, 4] = opt(2, "a Literal of ints")
    language: Literal["en", "zh"] | None = opt(None, "a Literal or None")
    color: Color = opt(Color.RED, "an Enum")
    normalize: bool | None = opt(None, "tri-state: None lets the model folder decide")
    progress: bool = opt(True, "a switch")
    seq_len: int | None = opt(None, "an int or None")
    name: str | None = opt(None, "a str or None")
    dropout: float | None = opt(None, "a float or None")


def help_of(cls) -> str:
    """--help of `cls`'s parser, its lines joined (wrapping depends on the terminal's width)."""
    return " ".join(parser_for(cls, prog="test").format_help().split())


def parse_flags(argv, cls=Flags):
    return parse(cls, argv, prog="test")


def usage_error(argv, capsys, cls=Flags) -> str:
    with pytest.raises(SystemExit) as exit_info:
        parse_flags(argv, cls)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_flag_defaults_are_the_fields_defaults():
    assert parse_flags([]) == Flags()


def test_literal_choices_come_from_the_annotation(capsys):
    assert parse_flags(["--precision", "bf16", "--heads", "4"]).precision == "bf16"
    assert parse_flags(["--heads", "4"]).heads == 4  # an int Literal parses ints
    err = usage_error(["--precision", "fp64"], capsys)
    assert "argument --precision: invalid choice: 'fp64' (choose from" in err and "'bf16'" in err
    assert "invalid choice: 3" in usage_error(["--heads", "3"], capsys)
    text = help_of(Flags)
    assert "--precision {auto,fp32,bf16}" in text and "a Literal (default: auto)" in text
    assert "--heads {1,2,4}" in text


def test_optional_literal_is_none_unless_given(capsys):
    assert parse_flags([]).language is None
    assert parse_flags(["--language", "zh"]).language == "zh"
    assert "invalid choice: 'fr'" in usage_error(["--language", "fr"], capsys)
    assert "--language {en,zh}" in help_of(Flags)


def test_enum_flag_takes_values_and_gives_members(capsys):
    assert parse_flags(["--color", "blue"]).color is Color.BLUE
    assert parse_flags([]).color is Color.RED
    assert "invalid choice: 'green'" in usage_error(["--color", "green"], capsys)
    text = help_of(Flags)
    assert "--color {red,blue}" in text and "an Enum (default: red)" in text


@pytest.mark.parametrize("argv, value", [([], None), (["--normalize"], True), (["--no-normalize"], False)])
def test_bool_or_none_is_tri_state(argv, value):
    assert parse_flags(argv).normalize is value


@pytest.mark.parametrize("word", ["false", "true", "False", "no", "yes"])
def test_a_switch_refuses_a_value_instead_of_reading_it_as_true(word, capsys):
    """`--normalize false` must not mean --normalize (True): argparse alone would set True, and a command with
    positional texts would take "false" as one of them."""
    err = usage_error(["--normalize", word], capsys)
    assert f"argument --normalize: takes no value ('{word}'): write --normalize or --no-normalize" in err
    assert "takes no value" in usage_error(["--no-progress", word], capsys)
    assert "takes no value" in usage_error(["--normal", word], capsys)  # an abbreviation argparse accepts
    assert "ignored explicit argument 'false'" in usage_error(["--normalize=false"], capsys)


@dataclasses.dataclass
class WithTexts:
    texts: list[str] = opt(list, "texts", positional=True, nargs="*")
    normalize: bool | None = opt(None, "tri-state")


def test_a_text_false_still_goes_after_the_flags_or_after_double_dash(capsys):
    assert "takes no value" in usage_error(["--normalize", "false"], capsys, WithTexts)
    assert parse_flags(["false", "--normalize"], WithTexts) == WithTexts(["false"], True)
    assert parse_flags(["--normalize", "--", "false"], WithTexts) == WithTexts(["false"], True)
    assert parse_flags(["--normalize", "a text"], WithTexts) == WithTexts(["a text"], True)


def test_switch_help_shows_both_spellings_and_the_default():
    text = help_of(Flags)
    assert "--normalize, --no-normalize" in text and "(default: None)" in text
    assert "--progress, --no-progress" in text and "a switch (default: True)" in text


def test_optional_numbers_and_strings(capsys):
    settings = parse_flags(["--seq-len", "64", "--name", "x", "--dropout", "0.1"])
    assert (settings.seq_len, settings.name, settings.dropout) == (64, "x", 0.1)
    assert (Flags.seq_len, Flags.name, Flags.dropout) == (None, None, None)
    assert "invalid int value: 'many'" in usage_error(["--seq-len", "many"], capsys)


def test_flag_kinds():
    assert flag_kind(Literal["a", "b"] | None) == FlagKind(str, ("a", "b"), optional=True)
    assert flag_kind(list[Literal["a", "b"]]).many and flag_kind(list[Literal["a", "b"]]).choices == ("a", "b")
    assert flag_kind(bool | None).type is bool and flag_kind(bool | None).optional
    assert flag_kind(Color).enum is Color and flag_kind(Color).choices == ("red", "blue")


@pytest.mark.parametrize(
    "annotation, default, extra, words",
    [
        (Literal["a", "b"], "a", {"choices": ["a", "b"]}, "choices come from the annotation"),
        (Literal["a", "b"], "c", {}, "the default 'c' is not one of its choices"),
        (str, "c", {"choices": ["a", "b"]}, "the default 'c' is not one of its choices"),
        (int | str, 1, {}, "not a union of several"),
        (Literal["a", 1], "a", {}, "values of one type"),
    ],
)
def test_settings_a_flag_cannot_parse_are_refused_when_the_parser_is_built(annotation, default, extra, words):
    cls = dataclasses.make_dataclass("Bad", [("x", annotation, opt(default, "x", **extra))])
    with pytest.raises(TypeError, match=words):
        parser_for(cls, prog="test")


# ----- every command's settings ---------------------------------------------------------------------------
def settings_classes() -> dict[str, type]:
    """Every settings dataclass in bertkit (a dataclass with opt() fields), by module.qualname."""
    found = {}
    for info in pkgutil.walk_packages(bertkit.__path__, "bertkit."):
        if info.name.endswith("__main__"):
            continue
        for value in vars(importlib.import_module(info.name)).values():
            if (
                dataclasses.is_dataclass(value)
                and isinstance(value, type)
                and any("help" in f.metadata for f in dataclasses.fields(value))
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def choices_of(cls) -> dict[str, tuple]:
    parser = parser_for(cls, prog="test")
    return {a.dest: tuple(a.choices) for a in parser._actions if a.choices is not None}


def test_every_settings_class_builds_its_parser_and_shows_its_choices():
    classes = settings_classes()
    assert {
        "bertkit.train.pretrain.PretrainConfig",
        "bertkit.serve.settings.ServeConfig",
        "bertkit.commands.embed.EmbedConfig",
    } <= set(classes)
    for name, cls in classes.items():
        text = help_of(cls)
        for dest, choices in choices_of(cls).items():
            assert "{" + ",".join(map(str, choices)) + "}" in text, (name, dest)


def test_choice_lists_are_their_registries():
    """Each flag's choices are the registry or the Literal the code uses, not a copy that could drift."""
    from uvicorn.config import LOG_LEVELS

    from bertkit.config import ATTN_IMPLEMENTATIONS
    from bertkit.data.corpus import DOC_SEPS
    from bertkit.data.rows import PACKINGS
    from bertkit.serve.settings import ServeConfig
    from bertkit.train.pretrain import RECIPES, PretrainConfig
    from bertkit.train.settings import TrainConfig

    pretrain = choices_of(PretrainConfig)
    assert pretrain["recipe"] == tuple(RECIPES)
    assert pretrain["doc_sep"] == DOC_SEPS and pretrain["packing"] == PACKINGS
    assert choices_of(TrainConfig)["attention"] == pretrain["attention"] == ATTN_IMPLEMENTATIONS
    assert choices_of(ServeConfig)["log_level"] == tuple(LOG_LEVELS)
    assert parse(ServeConfig, ["--model", "m"], prog="test").normalize is None


# Files whose settings still spell a list of choices by hand / a tri-state as `bool` (their owners are
# moving them to a Literal or their registry); the tests below keep any other file from starting to.
def test_no_choice_list_is_written_out_by_hand():
    root = Path(bertkit.__file__).parent
    hand_written = {
        f"bertkit/{path.relative_to(root).as_posix()}"
        for path in root.rglob("*.py")
        if re.search(r"choices=\s*[\[(]\s*['\"]", path.read_text(encoding="utf-8"))
    }
    assert not hand_written, f"{hand_written}: write Literal[...] as the field's type (or choices=list(REGISTRY))"


def test_a_tri_state_is_annotated_bool_or_none():
    """A field defaulting to None must say `| None`: `bool` with a None default parses only by accident."""
    wrong = set()
    for name, cls in settings_classes().items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            kind = flag_kind(hints[f.name])
            if f.default is None and not kind.optional and not f.metadata.get("positional"):
                wrong.add(f"{name}.{f.name}")
    assert not wrong, wrong
