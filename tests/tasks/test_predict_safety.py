"""`bertkit predict / evaluate / fill-mask` lose nothing and say nothing wrong (issue #18): one row per
input line, safe output paths, one-line errors for unreadable files, broken weights, a missing MLM head
and a label map with gaps. Tiny models on real text (CPU)."""

import contextlib
import io
import json
import logging
import math
import os
import shutil
import subprocess
import warnings

import pytest
import torch

from bertkit import BertConfig, BertForMaskedLM
from bertkit.cli import main
from bertkit.heads import BertForSequenceClassification
from bertkit.model import BertModel
from bertkit.tokenizer import Tokenizer

pytestmark = pytest.mark.slow  # every test here runs the CLI on a fine-tuned model

REVIEWS = ["这本书很好看，推荐", "质量太差了", "一般", "物流很快，包装完好"]


def cli(*args) -> subprocess.CompletedProcess:
    """The CLI as `python -m bertkit ARGS` runs it (`raise SystemExit(main())`), in this process (a fresh interpreter
    per command costs seconds of `import torch`): its exit code, stdout, and stderr with what that process would
    also print there, warnings and logged warnings. An exception that escapes main() fails the test here, as its
    traceback on stderr fails one_line_error in a process."""
    out, err = io.StringIO(), io.StringIO()
    logged = logging.StreamHandler(err)  # where Python's last-resort handler prints a logged warning
    logged.setLevel(logging.WARNING)
    logging.getLogger().addHandler(logged)
    try:
        with (
            warnings.catch_warnings(record=True) as caught,
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            warnings.simplefilter("default")  # as a fresh interpreter's filters: each shown once, but not
            for hidden in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", hidden)  # the kinds Python hides by default
            try:
                code = main(list(args))
            except SystemExit as stop:  # a usage error (argparse): its code, as the process would exit with
                code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    finally:
        logging.getLogger().removeHandler(logged)
    for w in caught:
        err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno))
    return subprocess.CompletedProcess(["bertkit", *args], code, out.getvalue(), err.getvalue())


def one_line_error(result, *words):
    """A failed command that printed one error line holding each of `words`, and no traceback."""
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], result.stderr


def nan_copy(src: str, dst, cls) -> str:
    """A copy of a model folder whose word embeddings are NaN (broken weights)."""
    shutil.copytree(src, dst)
    model = cls.from_pretrained(src)
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))
    model.save_pretrained(dst)
    return str(dst)


# 1 ------------------------------------------------------------------------------------------------
def test_predict_keeps_one_row_per_input_line(tmp_path, clf_dir, capsys):
    lines = [REVIEWS[0], "", REVIEWS[1], "   ", REVIEWS[2], "", REVIEWS[3]]
    txt = tmp_path / "in.txt"
    txt.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert main(["predict", "--model", clf_dir, "--file", str(txt), "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 7
    for line, row in zip(lines, rows):
        if line.strip():
            assert row["text"] == line and row["label"] in ("neg", "pos") and "error" not in row
        else:
            assert row["label"] is None and row["error"] == "empty input"
    # a CSV: a blank line and empty text cells keep their place too
    csv_file = tmp_path / "in.csv"
    csv_file.write_text(f'id,text\n1,{REVIEWS[0]}\n2,\n\n3,"  "\n4,{REVIEWS[1]}\n', encoding="utf-8")
    assert main(["predict", "--model", clf_dir, "--file", str(csv_file)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["label"] is None for row in rows] == [False, True, True, True, False]
    assert rows[0]["text"] == REVIEWS[0] and rows[4]["text"] == REVIEWS[1]
    # empty TEXT arguments
    assert main(["predict", "--model", clf_dir, "", REVIEWS[0], " "]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row.get("error") for row in rows] == ["empty input", None, "empty input"]
    assert rows[1]["label"] in ("neg", "pos") and rows[0]["label"] is None


# 2 ------------------------------------------------------------------------------------------------
def test_output_is_checked_before_any_work(tmp_path, clf_dir, dev_file, monkeypatch):
    import bertkit.evaluation as predict

    txt = tmp_path / "in.txt"
    txt.write_text("\n".join(REVIEWS) + "\n", encoding="utf-8")
    before = txt.read_bytes()
    # the input file itself, spelled another way: refused, the input untouched
    same = os.path.join(str(tmp_path), ".", "in.txt")
    one_line_error(cli("predict", "--model", clf_dir, "--file", str(txt), "--output", same), "input file")
    assert txt.read_bytes() == before

    def no_work(*args, **kwargs):
        raise AssertionError("predictions were computed before the output was checked")

    monkeypatch.setattr(predict, "predict", no_work)
    monkeypatch.setattr(predict, "evaluate", no_work)
    missing = tmp_path / "no-such-folder" / "out.jsonl"
    with pytest.raises(predict.BertkitError, match="does not exist"):
        main_raising(["predict", "--model", clf_dir, "--file", str(txt), "--output", str(missing)])
    with pytest.raises(predict.BertkitError, match="is a folder"):
        main_raising(["predict", "--model", clf_dir, "--file", str(txt), "--output", str(tmp_path)])
    with pytest.raises(predict.BertkitError, match="is a folder"):
        main_raising(["evaluate", "--model", clf_dir, "--data", dev_file, "--json", str(tmp_path)])
    assert not missing.parent.exists()
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]  # no temp or 0-byte files left behind


def main_raising(argv):
    """A command of bertkit/commands/ called directly, so its BertkitError reaches the test."""
    from bertkit.commands import evaluate, predict

    return {"predict": predict.main, "evaluate": evaluate.main}[argv[0]](argv[1:])


# 3 ------------------------------------------------------------------------------------------------
def test_unreadable_file_is_a_one_line_error(tmp_path, clf_dir):
    gbk = tmp_path / "gbk.txt"
    gbk.write_bytes("\n".join(REVIEWS).encode("gbk"))
    one_line_error(cli("predict", "--model", clf_dir, "--file", str(gbk)), str(gbk), "iconv")
    folder = tmp_path / "inputs"
    folder.mkdir()
    one_line_error(cli("predict", "--model", clf_dir, "--file", str(folder)), str(folder), "folder")


# 4 ------------------------------------------------------------------------------------------------
def test_non_finite_outputs_stop_with_an_error(tmp_path, clf_dir, base_dir, dev_file):
    broken = nan_copy(clf_dir, tmp_path / "broken", BertForSequenceClassification)
    out = tmp_path / "out.jsonl"
    one_line_error(cli("predict", "--model", broken, "--output", str(out), *REVIEWS), broken, "not finite")
    assert not out.exists()
    report = tmp_path / "report.json"
    one_line_error(cli("evaluate", "--model", broken, "--data", dev_file, "--json", str(report)), broken, "not finite")
    assert not report.exists()
    broken_mlm = nan_copy(base_dir, tmp_path / "broken-mlm", BertForMaskedLM)
    one_line_error(cli("fill-mask", "--model", broken_mlm, "今天天气很[MASK]。"), broken_mlm, "not finite")
    # the backstop: a NaN never becomes JSON
    from bertkit.errors import BertkitError
    from bertkit.files import to_json

    with pytest.raises(BertkitError):
        to_json({"score": math.nan})


# 5 ------------------------------------------------------------------------------------------------
def test_fill_mask_refuses_a_model_without_mlm_head(tmp_path, clf_dir, base_dir):
    one_line_error(cli("fill-mask", "--model", clf_dir, "今天天气很[MASK]。"), clf_dir, "MLM head")
    bare = tmp_path / "bare"
    Tokenizer.from_pretrained(base_dir).save_pretrained(bare)
    BertModel(BertConfig.from_json(base_dir)).save_pretrained(bare)
    one_line_error(cli("fill-mask", "--model", str(bare), "今天天气很[MASK]。"), str(bare), "MLM head")
    ok = cli("fill-mask", "--model", base_dir, "今天天气很[MASK]。")
    assert ok.returncode == 0 and "[MASK] at position" in ok.stdout, ok.stderr


# 6 ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("num_labels", [2, 3])
def test_label_ids_with_a_gap_are_an_error(tmp_path, clf_dir, dev_file, num_labels):
    gap = tmp_path / "gap"
    shutil.copytree(clf_dir, gap)
    config = json.loads((gap / "config.json").read_text(encoding="utf-8"))
    config.update(id2label={"0": "neg", "2": "pos"}, label2id={"neg": 0, "pos": 2}, num_labels=num_labels)
    (gap / "config.json").write_text(json.dumps(config), encoding="utf-8")
    one_line_error(cli("predict", "--model", str(gap), REVIEWS[0]), "config.json", "[0, 2]")
    one_line_error(cli("evaluate", "--model", str(gap), "--data", dev_file), "config.json", "[0, 2]")


# 7 ------------------------------------------------------------------------------------------------
def test_a_pretrained_model_without_task_head_is_pointed_to_commands_that_work(tmp_path, base_dir, dev_file):
    """predict / evaluate on a pretraining run's folder (BertForMaskedLM, no task head): no `--task` (a random
    head, refused too) but the commands that do work, each of which runs as written."""
    import re
    import shlex

    from bertkit.options import parse
    from bertkit.train.finetune import FinetuneConfig

    for command in (["predict", REVIEWS[0]], ["evaluate", "--data", dev_file]):
        result = cli(command[0], "--model", base_dir, *command[1:])
        one_line_error(
            result,
            base_dir,
            "without a task head",
            "BertForMaskedLM",
            "bertkit fill-mask",
            "bertkit embed",
            "bertkit finetune",
        )
        assert "--task" not in result.stderr
    suggested = {tokens[1]: tokens for tokens in map(shlex.split, re.findall(r"`([^`]+)`", result.stderr))}
    filled = cli(*suggested["fill-mask"][1:])
    assert filled.returncode == 0 and "[MASK] at position" in filled.stdout, filled.stderr
    vectors = tmp_path / "vectors.npy"
    embedded = cli(
        *[
            str(vectors) if t == "vectors.npy" else "今天天气很好" if t == "TEXT..." else t
            for t in suggested["embed"][1:]
        ]
    )
    assert embedded.returncode == 0 and vectors.exists(), embedded.stderr
    tuned = parse(
        FinetuneConfig,
        [{"DATA": dev_file, "DIR": str(tmp_path / "clf")}.get(t, t) for t in suggested["finetune"][2:]],
        prog="bertkit finetune",
    )  # its own flags
    assert tuned.model == base_dir
    # an encoder alone (BertModel) has no MLM head either: fill-mask is not offered, the others are
    bare = tmp_path / "bare"
    Tokenizer.from_pretrained(base_dir).save_pretrained(bare)
    BertModel(BertConfig.from_json(base_dir)).save_pretrained(bare)
    result = cli("predict", "--model", str(bare), REVIEWS[0])
    one_line_error(result, "BertModel", "bertkit finetune", "bertkit embed")
    assert "fill-mask" not in result.stderr and "--task" not in result.stderr
