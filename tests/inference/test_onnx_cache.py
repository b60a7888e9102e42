"""The onnx engine's cache (engines.onnx_folder): keyed by what the files hold, so changed weights are never answered
by an old graph; built at most once by replicas that start together; and a cache that cannot be written is one
line: --engine onnx says where it tried and how to set BERTKIT_CACHE, --engine auto runs torch."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from bertkit.cli import main

TEXTS = ["这本书很好看，推荐", "质量太差了", "一般"]


@pytest.fixture
def classifier(tmp_path, tokenizer_dir):
    """A tiny random sentence classifier folder of its own (its weights are changed in place here)."""
    from test_export import tiny_folder

    from bertkit.heads import BertForSequenceClassification

    return tiny_folder(tmp_path, tokenizer_dir, BertForSequenceClassification, num_labels=2)


def predict(folder, engine, capsys) -> tuple[list[dict], str]:
    """`bertkit predict` rows and its stderr."""
    assert main(["predict", "--model", str(folder), *TEXTS, "--engine", engine]) == 0
    captured = capsys.readouterr()
    return [json.loads(line) for line in captured.out.splitlines()], captured.err


def close(a: list[dict], b: list[dict]) -> bool:
    return [r["label"] for r in a] == [r["label"] for r in b] and all(
        abs(x["score"] - y["score"]) <= 1e-4 for x, y in zip(a, b)
    )


def exports(cache) -> list[str]:
    return sorted(p.name for p in (cache / "onnx").iterdir()) if (cache / "onnx").is_dir() else []


def test_weights_changed_with_size_and_mtime_restored_are_exported_again(classifier, tmp_path, capsys, monkeypatch):
    from safetensors.torch import load_file, save_file

    cache = tmp_path / "cache"
    monkeypatch.setenv("BERTKIT_CACHE", str(cache))
    torch_rows, _ = predict(classifier, "torch", capsys)
    rows, err = predict(classifier, "onnx", capsys)
    assert close(rows, torch_rows)
    built = [line for line in err.splitlines() if "exporting" in line]
    assert built == [
        f"--engine onnx: exporting {classifier} as classify to {cache / 'onnx' / exports(cache)[0]} (once per weights)"
    ], err
    assert "exporting" not in predict(classifier, "onnx", capsys)[1]  # the cache, used as it is: nothing said
    weights = classifier / "model.safetensors"
    os.utime(weights)  # a new mtime, the same bytes: the same graph
    assert "exporting" not in predict(classifier, "onnx", capsys)[1] and len(exports(cache)) == 1

    # new weights (the classifier's answers flipped), written with the old size and mtime
    before = os.stat(weights)
    state = load_file(weights)
    state["classifier.weight"], state["classifier.bias"] = -state["classifier.weight"], -state["classifier.bias"]
    save_file(state, str(weights), metadata={"format": "pt"})
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(weights).st_size == before.st_size and os.stat(weights).st_mtime_ns == before.st_mtime_ns
    new_rows, _ = predict(classifier, "torch", capsys)
    assert not close(new_rows, torch_rows)
    for engine in ("onnx", "auto"):
        rows, err = predict(classifier, engine, capsys)
        assert close(rows, new_rows), (engine, rows, new_rows)
    assert len(exports(cache)) == 2


@pytest.mark.slow
def test_two_processes_filling_an_empty_cache_at_once_both_run_the_one_graph(classifier, tmp_path):
    cache, ready = tmp_path / "cache", tmp_path / "ready"
    ready.mkdir()
    script = textwrap.dedent(
        """
        import os, sys, time
        from bertkit.engines import onnx_folder
        open(os.path.join(sys.argv[2], str(os.getpid())), "w").close()
        deadline = time.monotonic() + 120  # the other may never come (it failed to start): then export alone
        while len(os.listdir(sys.argv[2])) < 2 and time.monotonic() < deadline:  # both at the same moment
            time.sleep(0.01)
        print(onnx_folder(sys.argv[1], "classify"))
        """
    )
    env = {**os.environ, "BERTKIT_CACHE": str(cache)}
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(classifier), str(ready)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        done = [run.communicate(timeout=300) for run in runs]
    finally:
        for run in runs:  # none left behind when the wait above failed
            run.kill()
    assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _, err in done]
    assert done[0][0] == done[1][0]  # the same folder
    (folder,) = exports(cache)  # one graph, nothing unfinished beside it
    assert done[0][0].strip() == str(cache / "onnx" / folder) and (cache / "onnx" / folder / "model.onnx").is_file()


def test_a_cache_under_a_file_is_one_line_for_onnx_and_torch_for_auto(classifier, tmp_path, capsys, monkeypatch):
    from bertkit import BertkitWarning

    (tmp_path / "afile").write_text("not a folder")
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "afile" / "cache"))
    assert main(["predict", "--model", str(classifier), *TEXTS, "--engine", "onnx"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and "BERTKIT_CACHE" in errors[0] and str(tmp_path / "afile" / "cache") in errors[0], err
    torch_rows, _ = predict(classifier, "torch", capsys)
    with pytest.warns(BertkitWarning, match=r"--engine auto: .* every batch runs on the torch engine") as caught:
        rows, _ = predict(classifier, "auto", capsys)
    assert close(rows, torch_rows) and len([w for w in caught if "--engine auto" in str(w.message)]) == 1


@pytest.mark.parametrize(
    "code, words", [(errno.ENOSPC, "the disk is full"), (errno.EROFS, "the file system is read-only")]
)
def test_a_full_or_read_only_cache_leaves_nothing_and_auto_runs_torch(
    classifier, tmp_path, capsys, monkeypatch, code, words
):
    """A full disk cannot be made for real: the ONNX writer's one write fails as it would, halfway through."""
    from bertkit import BertkitWarning

    def cut_short(model, args, path, **kw):
        with open(path, "wb") as fh:
            fh.write(b"\x08\x07")
        raise OSError(code, os.strerror(code))

    cache = tmp_path / "cache"
    monkeypatch.setenv("BERTKIT_CACHE", str(cache))
    monkeypatch.setattr(torch.onnx, "export", cut_short)
    assert main(["predict", "--model", str(classifier), *TEXTS, "--engine", "onnx"]) == 2
    err = capsys.readouterr().err
    assert words in err and "BERTKIT_CACHE" in err and str(cache / "onnx") in err, err
    assert exports(cache) == []  # nothing half-written
    torch_rows, _ = predict(classifier, "torch", capsys)
    with pytest.warns(BertkitWarning, match=words):
        rows, _ = predict(classifier, "auto", capsys)
    assert close(rows, torch_rows) and exports(cache) == []
