"""--device and --precision reach every command that runs a model, the Python API and serve: on a CPU machine
`--device cpu` runs and says so first, `--device cuda` is one clear line before any work; on a GPU (the tests
marked cuda, skipped without one: bench/gpu_check.py runs them) every command answers as on the CPU (float32: 1e-4;
bf16: cosine >= 0.999)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import max_diff

import bertkit
from bertkit.cli import main
from bertkit.devices import DeviceError, inference_dtype, pick_device, placement

TEXTS = ["这本书很好看，推荐", "质量太差了", "一般", "物流很快，包装也很好，下次还会再来买的"]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (bench/gpu_check.py runs these)")


def commands(tmp_path, clf_dir, base_dir, dev_file, tag: str) -> dict[str, list[str]]:
    """Every command that runs a model, as argv, writing what it answers under tmp_path (tag names the run)."""
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"a": t, "p": t + "。"}, ensure_ascii=False) + "\n" for t in TEXTS))
    return {
        "predict": ["predict", "--model", clf_dir, *TEXTS, "--output", str(tmp_path / f"{tag}.predict.jsonl")],
        "evaluate": ["evaluate", "--model", clf_dir, "--data", dev_file, "--json", str(tmp_path / f"{tag}.eval")],
        "embed": ["embed", "--model", clf_dir, *TEXTS, "--output", str(tmp_path / f"{tag}.npy")],
        "fill-mask": ["fill-mask", "--model", base_dir, "今天天气很[MASK]。"],
        "mine-negatives": [
            "mine-negatives",
            *("--model", clf_dir, "--data", str(pairs), "--out", str(tmp_path / f"{tag}.mined.jsonl")),
        ],
        "explain": ["explain", base_dir, "--mlm", "今天天气很[MASK]。"],
        "attention": ["attention", base_dir, "今天天气很好", "--png", str(tmp_path / f"{tag}.png")],
    }


def test_every_command_takes_device_cpu_and_says_where_it_runs_first(tmp_path, clf_dir, base_dir, dev_file, capsys):
    for name, argv in commands(tmp_path, clf_dir, base_dir, dev_file, "cpu").items():
        assert main([*argv, "--device", "cpu"]) == 0, name
        out, err = capsys.readouterr()
        first = (out if name in ("explain", "attention") else err).splitlines()[0]
        assert first.startswith(f"bertkit {name}: ") and first.endswith("on cpu, float32"), first


def test_cuda_on_a_machine_without_one_is_one_line_before_any_work(
    tmp_path, clf_dir, base_dir, dev_file, capsys, monkeypatch
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    loads = []
    monkeypatch.setattr("bertkit.checkpoint.read_weights", lambda *a, **k: loads.append(a))
    for name, argv in commands(tmp_path, clf_dir, base_dir, dev_file, "cuda").items():
        assert main([*argv, "--device", "cuda"]) == 2, name
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"bertkit {name}: error: --device cuda: no CUDA device is available here (torch "), err
        assert err.endswith("; use --device cpu") and len(err.splitlines()) == 1, err
    assert main(["serve", "--model", clf_dir, "--device", "cuda:1"]) == 2
    assert "--device cuda:1: no CUDA device is available here" in capsys.readouterr().err
    assert not loads and not list(tmp_path.glob("cuda.*"))  # nothing read, nothing written
    # the Python API and the encoders: the same error
    for call in (
        lambda: bertkit.predict(model=clf_dir, texts=TEXTS, device="cuda"),
        lambda: bertkit.evaluate(model=clf_dir, data=dev_file, device="cuda"),
        lambda: bertkit.encode(clf_dir, TEXTS, device="cuda"),
        lambda: bertkit.Encoder.from_pretrained(clf_dir, device="cuda"),
    ):
        with pytest.raises(DeviceError, match="--device cuda: no CUDA device is available here"):
            call()


def test_the_python_api_and_serve_run_where_they_are_told(clf_dir, base_dir):
    from bertkit.serve.engine import Engine

    rows = bertkit.predict(model=clf_dir, texts=TEXTS, device="cpu", precision="float32")
    assert [r["label"] for r in rows] == [r["label"] for r in bertkit.predict(model=clf_dir, texts=TEXTS)]
    encoder = bertkit.Encoder.from_pretrained(clf_dir, device="cpu", precision="bf16")
    assert encoder.where.describe() == "cpu, bf16" and encoder.engine == "torch"  # bf16: the torch engine's
    assert next(encoder.model.parameters()).dtype == torch.bfloat16
    plain = bertkit.encode(clf_dir, TEXTS, device="cpu")
    assert cosines(encoder.encode(TEXTS), plain).min() >= 0.99  # bf16 on a CPU: close, not equal
    served = Engine(clf_dir, device="cpu", precision="bf16")
    assert served.where.describe() == "cpu, bf16"
    assert next(served.task_model.parameters()).dtype == torch.bfloat16
    assert cosines(served.encoder.embed_ids([served.encoder.token_ids(t) for t in TEXTS]).numpy(), plain).min() >= 0.99


def test_precision_and_quantize_are_checked_against_the_device(monkeypatch):
    cpu = torch.device("cpu")
    assert inference_dtype("auto", cpu) == torch.float32 and inference_dtype("bf16", cpu) == torch.bfloat16
    with pytest.raises(DeviceError, match="--precision fp16 is for GPUs; on the CPU use bf16"):
        inference_dtype("fp16", cpu)
    with pytest.raises(DeviceError, match="--device 'gpu': not a device; use auto, cpu, cuda or cuda:N"):
        pick_device("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine, as far as the checks can tell
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert pick_device("auto") == torch.device("cuda")
    assert placement("cuda", "auto").dtype == torch.bfloat16 and placement("cuda", "fp16").dtype == torch.float16
    with pytest.raises(DeviceError, match="this machine has 1 CUDA device"):
        pick_device("cuda:1")
    with pytest.raises(DeviceError, match="--quantize int8 is for CPU inference, and --device cuda runs on cuda"):
        placement("cuda", "auto", "int8")
    assert placement("auto", "auto", "int8").device == torch.device("cpu")  # auto with --quantize: the CPU's int8
    # the onnx engine on a GPU: ONNX Runtime's CUDA provider, or a line saying the installed onnxruntime lacks it
    pytest.importorskip("onnxruntime")
    from bertkit.engines import CUDA_PROVIDER, require_onnxruntime

    ort = require_onnxruntime()
    if CUDA_PROVIDER not in ort.get_available_providers():
        with pytest.raises(bertkit.BertkitError, match="has no CUDA provider .*install onnxruntime-gpu"):
            require_onnxruntime(device="cuda")
    with pytest.raises(bertkit.BertkitError, match="--precision bf16 / fp16 is the torch engine's"):
        require_onnxruntime(dtype=torch.bfloat16)


def cosines(a, b) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


# ----- on a GPU ---------------------------------------------------------------------------------------
def answers(tmp_path, clf_dir, base_dir, dev_file, capsys, tag: str, *flags: str) -> dict:
    """What every command answers with these flags: rows, report, vectors, fill-mask's lines, mined rows."""
    argvs = commands(tmp_path, clf_dir, base_dir, dev_file, tag)
    got = {}
    for name, argv in argvs.items():
        assert main([*argv, *flags]) == 0, name
        got[name] = capsys.readouterr().out
    got["predict"] = [json.loads(x) for x in (tmp_path / f"{tag}.predict.jsonl").read_text().splitlines()]
    got["evaluate"] = json.loads((tmp_path / f"{tag}.eval").read_text())
    got["embed"] = np.load(tmp_path / f"{tag}.npy")
    got["mine-negatives"] = (tmp_path / f"{tag}.mined.jsonl").read_text()
    return got


@pytest.mark.cuda
@cuda
def test_every_command_answers_on_cuda_as_on_the_cpu(tmp_path, clf_dir, base_dir, dev_file, capsys):
    cpu = answers(tmp_path, clf_dir, base_dir, dev_file, capsys, "cpu", "--device", "cpu")
    exact = answers(tmp_path, clf_dir, base_dir, dev_file, capsys, "f32", "--device", "cuda", "--precision", "float32")
    half = answers(tmp_path, clf_dir, base_dir, dev_file, capsys, "bf16", "--device", "cuda", "--precision", "bf16")
    assert np.abs(exact["embed"] - cpu["embed"]).max() <= 1e-4
    assert cosines(half["embed"], cpu["embed"]).min() >= 0.999
    for got, tol in ((exact, 1e-4), (half, 2e-2)):
        for ours, theirs in zip(got["predict"], cpu["predict"]):
            assert ours["label"] == theirs["label"] or abs(ours["score"] - 0.5) < tol, (ours, theirs)
            assert abs(ours["score"] - theirs["score"]) <= tol, (ours, theirs)
        assert abs(got["evaluate"]["accuracy"] - cpu["evaluate"]["accuracy"]) <= (0 if tol < 1e-3 else 0.05)
    assert exact["fill-mask"].split()[:4] == cpu["fill-mask"].split()[:4]  # the top token and its place
    assert exact["mine-negatives"] == cpu["mine-negatives"]


@pytest.mark.cuda
@cuda
def test_the_api_encoder_and_serve_on_cuda(clf_dir):
    from bertkit.serve.engine import Engine

    plain = bertkit.encode(clf_dir, TEXTS, device="cpu")
    for precision, close in (("float32", lambda a: np.abs(a - plain).max() <= 1e-4), ("bf16", None)):
        encoder = bertkit.Encoder.from_pretrained(clf_dir, device="cuda", precision=precision)
        assert encoder.where.device.type == "cuda" and encoder.engine == "torch"
        vectors = encoder.encode(TEXTS)
        assert close(vectors) if close else cosines(vectors, plain).min() >= 0.999
        served = Engine(clf_dir, device="cuda", precision=precision)
        assert next(served.task_model.parameters()).device.type == "cuda"
        rows = served.encoder.embed_ids([served.encoder.token_ids(t) for t in TEXTS]).numpy()
        assert cosines(rows, plain).min() >= 0.999
    model = bertkit.BertModel.from_pretrained(clf_dir)
    ids = torch.tensor([[2, 50, 60, 70, 3]])
    assert max_diff(model(ids).last_hidden_state, model.cuda()(ids.cuda()).last_hidden_state.cpu()) <= 1e-4


@pytest.mark.cuda
@cuda
def test_inference_on_cuda_meets_new_lengths_without_building_a_plan_for_each():
    """cuDNN's attention builds a plan per new shape (44 ms on an H200, bench/results/gpu.md); inference runs the
    kernels that take any shape."""
    from helpers import random_model

    model = random_model().cuda().to(torch.bfloat16).eval()
    with torch.inference_mode(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for n in range(5, 12):
            model(input_ids=torch.randint(5, 99, (1, n), device="cuda"))
    names = {e.key for e in prof.key_averages()}
    assert not any("cudnn_attention" in name for name in names), sorted(names)
    assert any("flash" in name or "efficient" in name for name in names), sorted(names)
