"""bench/gpu_check.py --dry-run: every step of the GPU check (the CUDA tests, training and inference against
transformers, serve under load, the quickstart) on the CPU at tiny sizes, so that the script works the moment a GPU is
at hand."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_the_dry_run_goes_through_every_step_and_writes_the_report(tmp_path):
    md, js = tmp_path / "gpu.md", tmp_path / "gpu.json"
    run = subprocess.run(
        [sys.executable, "bench/gpu_check.py", "--dry-run", "--md", str(md), "--json", str(js)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(js.read_text(encoding="utf-8"))
    steps = report["steps"]
    assert {name: step["status"] for name, step in steps.items()} == {
        "tests": "ok",
        "speed": "ok",
        "serve": "ok",
        "quickstart": "ok",
    }, {name: step.get("stderr", "")[-800:] for name, step in steps.items()}
    rows = steps["speed"]["rows"]
    assert {(r["workload"], r["batch"]) for r in rows} == {
        (w, b) for w in ("train", "infer") for b in ("fixed", "real")
    }
    assert all(r["tokens_per_s"] > 0 for r in rows)
    (setting,) = steps["serve"]["settings"]
    assert setting["info"]["device"] == "cpu" and setting["info"]["precision"] == "float32"
    assert [r["clients"] for r in setting["runs"]] == [1, 4]
    assert all(r["requests"] > 0 and not r["errors"] for r in setting["runs"])
    assert "# bertkit quickstart" in steps["quickstart"]["report"]
    text = md.read_text(encoding="utf-8")
    assert "(dry run: CPU, tiny sizes)" in text and "| train | real | 4 x 32 | bertkit |" in text
