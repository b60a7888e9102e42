"""bench/bench_vs_hf.py: a tiny end-to-end run, its batches, its interleaved rounds, and that both sides train the
same model.

No timing is asserted: the numbers of a shared test machine mean nothing; the shape of the
report, the order and number of the steps each contender runs, and the sameness of what every contender is
given do.
"""

import contextlib
import importlib.util
import io
import json
import os
import statistics
import sys
import tempfile

import pytest
import torch

pytest.importorskip("transformers")

import bertkit  # noqa: E402

BENCH_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "bench", "bench_vs_hf.py")
B, S = 4, 16
ROUNDS = 3


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_vs_hf", BENCH_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = load_bench()


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny ops on a busy 2-core machine run far faster on one thread; restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "out.json"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            returned = bench.main(
                [
                    "--device",
                    "cpu",
                    "--preset",
                    "tiny",
                    "--batch-size",
                    str(B),
                    "--seq-len",
                    str(S),
                    "--warmup",
                    "1",
                    "--steps",
                    "1",
                    "--rounds",
                    str(ROUNDS),
                    "--min-seconds",
                    "0",
                    "--quick",
                    "--json",
                    str(path),
                ]
            )
    finally:
        torch.set_num_threads(threads)
    return {"returned": returned, "table": out.getvalue(), "json": json.loads(path.read_text(encoding="utf-8"))}


def test_every_row_is_there(report):
    rows = report["json"]["results"]
    keys = [(r["contender"], r["workload"], r["batch"]) for r in rows]
    want = {
        (c, w, k)
        for c in bench.CONTENDERS
        for w in bench.WORKLOADS
        for k in bench.DEFAULT_KINDS
        if w == "train" or c not in bench.TRAIN_ONLY
    }
    assert len(keys) == len(want) == 18 and set(keys) == want
    assert {"bertkit-defaults", "bertkit-varlen-dense"} <= {c for c, _, _ in keys}
    table_rows = [line.split() for line in report["table"].splitlines() if line.startswith(f"{B}x{S}")]
    assert {(t[3], t[1], t[2]) for t in table_rows} == want  # shape workload batch contender ...
    assert report["returned"]["results"] == rows


def test_ratios_and_rates(report):
    """A rate is the median of the rounds' rates, its spread (max - min) / median; a ratio is the median of the
    rounds' ratios (each round's contenders ran next to each other in time)."""
    for r in report["json"]["results"]:
        rates = r["tokens_per_s_rounds"]
        assert len(rates) == ROUNDS and isinstance(r["seconds"], float)  # measured: no bound on any machine
        assert r["tokens_per_s"] == pytest.approx(statistics.median(rates))
        assert r["spread"] == pytest.approx((max(rates) - min(rates)) / statistics.median(rates))
        base = next(
            o
            for o in report["json"]["results"]
            if o["contender"] == bench.BASELINE
            and (o["workload"], o["batch"], o["batch_size"], o["seq_len"])
            == (r["workload"], r["batch"], r["batch_size"], r["seq_len"])
        )
        if r["contender"] == bench.BASELINE:
            assert r["ratio_vs_sdpa"] == 1.0
        assert r["ratio_vs_sdpa"] == pytest.approx(
            statistics.median(a / b for a, b in zip(rates, base["tokens_per_s_rounds"]))
        )
        assert r["peak_mem_bytes"] is None and r["mfu"] is None  # CPU: "-" in the table
    assert "attention dropout 0.0" in report["table"]


def test_the_rounds_interleave_the_contenders(report):
    """In the real run too: every contender runs once per round, the order reversed every other round."""
    rows = report["json"]["results"]
    for w in bench.WORKLOADS:
        for k in bench.DEFAULT_KINDS:
            group = [r for r in rows if (r["workload"], r["batch"]) == (w, k)]
            order = [sorted(group, key=lambda r: r["positions"][i]) for i in range(ROUNDS)]
            names = [[r["contender"] for r in o] for o in order]
            assert names[0] == [c for c in bench.CONTENDERS if w == "train" or c not in bench.TRAIN_ONLY]
            assert names[1] == names[0][::-1] and names[2] == names[0]
            assert {r["steps"] for r in group} == {ROUNDS * 1}  # --steps 1 per turn, each of the rounds


def test_the_table_says_what_it_measured(report):
    table = report["table"]
    assert table.startswith(
        f"quick measurement (--quick): {ROUNDS} rounds, the contenders interleaved (the order reversed every other "
        "round); each turn >= 1 steps and >= 0 s after 1 warm-up step(s) over every batch; median of the rounds"
    ), table
    assert "spread" in table.splitlines()[2]  # the column header, under the label and a blank line
    assert report["json"]["meta"]["mode"] == "quick"


def test_interleave_runs_each_contender_the_same_batches_in_alternating_order():
    log = []
    steps = {name: (lambda batch, name=name: log.append((name, batch["i"]))) for name in ("a", "b", "c")}
    batches = [{"i": i} for i in range(3)]
    turns = bench.interleave(steps, batches, rounds=3, per_turn=2)
    want = []
    for r, order in enumerate(["abc", "cba", "abc"]):
        for name in order:
            want += [(name, (2 * r) % 3), (name, (2 * r + 1) % 3)]  # the rounds go on through the batches
    assert log == want
    assert [t["position"] for t in turns["a"]] == [0, 2, 0] and [t["batches"] for t in turns["a"]] == [
        [0, 1],
        [2, 0],
        [1, 2],
    ]
    assert all(set(t) == {"round", "position", "batches", "seconds"} for ts in turns.values() for t in ts)


def test_a_turn_takes_the_minimum_steps_and_the_minimum_time():
    # arithmetic on given per-step times (nothing is timed here): the fastest contender's turn fills 0.25 s
    assert bench.turn_steps(0.01, min_steps=3, min_seconds=0.25) == 25
    assert bench.turn_steps(0.5, min_steps=3, min_seconds=0.25) == 3
    assert bench.turn_steps(0.0, min_steps=3, min_seconds=0.0) == 3


def test_the_warm_up_runs_every_batch():
    seen = []
    seconds = bench.warm_up(lambda batch: seen.append(batch["i"]), [{"i": i} for i in range(4)], warmup=2)
    assert seen == [0, 1, 2, 3] and isinstance(seconds, float)  # at least one pass: every batch's shape has run
    seen.clear()
    bench.warm_up(lambda batch: seen.append(batch["i"]), [{"i": i} for i in range(2)], warmup=5)
    assert seen == [0, 1, 0, 1, 0]


def test_json_schema(report):
    meta = report["json"]["meta"]
    for key in (
        "torch",
        "transformers",
        "device_name",
        "cpu_count",
        "python",
        "config",
        "shapes",
        "dtype",
        "steps",
        "warmup",
        "rounds",
        "min_seconds",
        "distinct_batches",
        "mode",
    ):
        assert key in meta, key
    assert meta["config"] == "tiny" and meta["shapes"] == [[B, S]] and meta["steps"] == 1
    assert meta["rounds"] == ROUNDS and meta["min_seconds"] == 0
    assert meta["dtype"] == "float32" and meta["attention_dropout"] == 0.0
    row_keys = {
        "contender",
        "workload",
        "batch",
        "batch_size",
        "seq_len",
        "real_tokens",
        "masked_tokens",
        "steps",
        "seconds",
        "tokens_per_s",
        "ratio_vs_sdpa",
        "peak_mem_bytes",
        "mfu",
        "useful_flops",
        "rounds",
        "turn_steps",
        "tokens_per_s_rounds",
        "spread",
        "positions",
    }
    for r in report["json"]["results"]:
        assert row_keys <= set(r), row_keys - set(r)


def test_batches_variable_and_identical_for_every_contender(report):
    rows = report["json"]["results"]
    for r in rows:
        full = r["batch_size"] * r["seq_len"] * r["steps"]
        assert 0 < r["masked_tokens"] < r["real_tokens"]
        assert (r["real_tokens"] < full) if r["batch"] == "variable" else (r["real_tokens"] == full)
    for w in bench.WORKLOADS:
        for k in bench.DEFAULT_KINDS:
            group = {
                (r["real_tokens"], r["masked_tokens"], r["useful_flops"])
                for r in rows
                if (r["workload"], r["batch"]) == (w, k)
            }
            assert len(group) == 1  # the same tokens and labels, so the same useful work
    # the batches are a pure function of the arguments: the run's fingerprints can be recomputed
    meta = report["json"]["meta"]
    for kind in bench.DEFAULT_KINDS:
        again = bench.make_batches(meta["distinct_batches"], B, S, 1000, kind == "variable", meta["seed"])
        assert bench.fingerprint(again) == meta["batch_fingerprints"][f"{B}x{S} {kind}"]


def test_make_batches():
    a = bench.make_batches(3, 8, 64, 1000, variable=True, seed=0)
    b = bench.make_batches(3, 8, 64, 1000, variable=True, seed=0)
    assert bench.fingerprint(a) == bench.fingerprint(b)
    assert bench.fingerprint(a) != bench.fingerprint(bench.make_batches(3, 8, 64, 1000, variable=True, seed=1))
    for batch in a:
        lengths = batch["lengths"]
        assert int(lengths.min()) >= 64 // 8 and int(lengths.max()) <= 64
        assert torch.equal(batch["attention_mask"].sum(1), lengths)
        assert bool((batch["input_ids"][batch["attention_mask"] == 0] == 0).all())  # right padding with [PAD]
        labelled = batch["labels"] != -100
        assert bool((batch["attention_mask"][labelled] == 1).all())  # only real tokens are labelled
        assert bool((batch["input_ids"][labelled] == 103).all())  # ... and replaced by [MASK]
    assert len({tuple(batch["lengths"].tolist()) for batch in a}) > 1
    fixed = bench.make_batches(2, 8, 64, 1000, variable=False)
    assert all(bool(batch["attention_mask"].all()) for batch in fixed)


def each_contender(config, workload: str, batches: list[dict]) -> dict[str, list]:
    """Every contender loaded from the same saved weights, its step applied to each batch in turn."""
    device = torch.device("cpu")
    results = {}
    with tempfile.TemporaryDirectory() as directory:
        torch.manual_seed(0)
        bertkit.BertForMaskedLM(config).save_pretrained(directory)
        for name in bench.CONTENDERS:
            model = bench.load_model(name, workload, directory, device)
            step = bench.make_step(name, workload, model, device)
            results[name] = [step(batch) for batch in batches]
    return results


def test_same_weights_same_loss():
    """First (and, after one AdamW step, second) training loss agree: the comparison is apples to apples."""
    config = bertkit.BertConfig.from_preset("tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    batches = [
        {k: v for k, v in b.items() if k != "lengths"}
        for b in bench.make_batches(2, B, S, config.vocab_size, variable=True)
    ]
    losses = {name: [float(x) for x in out] for name, out in each_contender(config, "train", batches).items()}
    ours = losses["bertkit"]
    for name in ("transformers-eager", "transformers-sdpa"):
        assert ours == pytest.approx(losses[name], abs=1e-4), (name, ours, losses[name])


def test_same_encoder_output():
    """The inference contenders load the same encoder weights: equal outputs on the real tokens."""
    config = bertkit.BertConfig.from_preset("tiny", attention_probs_dropout_prob=0.0)
    batch = {
        k: v for k, v in bench.make_batches(1, B, S, config.vocab_size, variable=True)[0].items() if k != "lengths"
    }
    real = batch["attention_mask"].bool()
    outputs = {name: out[0][real] for name, out in each_contender(config, "infer", [batch]).items()}  # (N, H)
    for name in ("transformers-eager", "transformers-sdpa"):
        assert (outputs["bertkit"] - outputs[name]).abs().max().item() < 1e-4


def test_missing_transformers_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import raises ImportError
    with pytest.raises(SystemExit, match=r"pip install 'transformers>=4.57'"):
        bench.import_transformers()


def test_real_batches_draw_their_lengths_from_the_corpus_cut_at_seq_len():
    lengths = [3, 7, 40]
    a = bench.make_batches(3, 8, 16, 1000, True, 0, lengths)
    assert bench.fingerprint(a) == bench.fingerprint(bench.make_batches(3, 8, 16, 1000, True, 0, lengths))
    drawn = {int(n) for b in a for n in b["lengths"]}
    assert drawn <= {3, 7, 16} and 16 in drawn  # 40 cut at seq_len
    assert all((b["attention_mask"].sum(-1) == b["lengths"]).all() for b in a)
    assert all(n > 2 for n in bench.corpus_lengths()[:100])  # a review's characters + [CLS] and [SEP]
