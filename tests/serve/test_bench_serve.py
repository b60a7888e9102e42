"""bench/bench_serve.py: the load generator end to end against the baseline server, and its soak mix.

No timing is asserted: the numbers of a shared test machine mean nothing; that every request got a
well-formed 200 and the report has its shape do.
"""

import contextlib
import importlib.util
import io
import json
import os
import sys

import pytest

BENCH_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "bench", "bench_serve.py")


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_serve", BENCH_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = load_bench()


def test_soak_mix_is_five_percent_of_every_kind_in_turn():
    texts = ["好评", "差评"]
    make = bench.soak_request("embed", texts, oversize_bytes=2048)
    requests = [make(i) for i in range(1000)]
    bad = [r for r in requests if r.malformed]
    assert len(bad) == 50
    assert {r.malformed for r in bad} == set(bench.MALFORMED)
    assert [r.body for r in requests] == [make(i).body for i in range(1000)]  # deterministic
    assert len(next(r for r in bad if r.malformed == "oversized-body").body) > 2048
    assert next(r for r in bad if r.malformed == "unknown-route").path == "/no-such-route"
    good = json.loads(requests[0].body)
    assert good == {"inputs": "好评", "truncate": True} and requests[0].path == "/embed"


def test_percentile_and_reviews():
    assert bench.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert bench.percentile([5.0], 99) == 5.0
    texts = bench.load_reviews(seed=0)
    assert len(texts) > 30000 and all(t == t.strip() and t for t in texts[:100])
    assert texts[:5] == bench.load_reviews(seed=0)[:5] != bench.load_reviews(seed=1)[:5]


@pytest.mark.slow
def test_baseline_embed_end_to_end(tmp_path):
    json_path, md_path = tmp_path / "serve.json", tmp_path / "serve.md"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        returned = bench.main(
            [
                "--servers",
                "baseline",
                "--routes",
                "embed",
                "--clients",
                "1,2",
                "--seconds",
                "2",
                "--max-requests",
                "20",
                "--warmup-requests",
                "4",
                "--accuracy-examples",
                "-1",
                "--json",
                str(json_path),
                "--md",
                str(md_path),
            ]
        )
    report = json.loads(json_path.read_text(encoding="utf-8"))
    assert report == json.loads(json.dumps(returned, ensure_ascii=False))
    assert set(report) == {"meta", "servers", "results", "accuracy", "ratios", "targets", "soak", "notes"}
    assert report["meta"]["cpu_count"] >= 1 and report["meta"]["torch"]
    assert report["meta"]["reviews"]["count"] > 30000

    rows = report["results"]
    assert [(r["server"], r["route"], r["clients"]) for r in rows] == [
        ("baseline", "embed", 1),
        ("baseline", "embed", 2),
    ]
    for r in rows:
        assert 0 < r["requests"] <= 20
        assert r["ok"] == r["requests"] and r["errors"] == {} and r["statuses"] == {"200": r["requests"]}
        assert r["requests_per_s"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"]

    [server] = report["servers"]
    assert server["server"] == "baseline" and server["exit_code"] == 0 and server["load_seconds"] > 0
    # no bertkit server ran: every ratio / target is unmeasured, not a failure
    assert all(t["holds"] is None for t in report["targets"])
    table = md_path.read_text(encoding="utf-8")
    assert "| baseline | /embed | 1 |" in table and table in out.getvalue()
