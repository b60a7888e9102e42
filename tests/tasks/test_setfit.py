"""SetFit (bertkit/setfit.py): the pairs as setfit's sampler makes them, CosineSimilarityLoss as sentence-transformers
computes it, the logistic head as scikit-learn fits it, and `bertkit setfit` end to end."""

import json

import numpy as np
import pytest
import torch

from bertkit.errors import InputError
from bertkit.setfit import (
    MAX_TEXTS,
    CosinePairLoss,
    LogisticHead,
    SetFitClassifier,
    contrastive_pairs,
    cosine_similarity_loss,
)

# ----- the pairs ---------------------------------------------------------------------------------
LABELS = ["a", "b", "a", "c", "a", "b", "b", "a"]


def test_every_pair_once_with_samples_zero_and_the_rarer_kind_repeated():
    pairs = contrastive_pairs(LABELS, 0)
    n = len(LABELS)
    same = {(i, j) for i in range(n) for j in range(i, n) if LABELS[i] == LABELS[j]}  # self-pairs included
    other = {(i, j) for i in range(n) for j in range(i, n) if LABELS[i] != LABELS[j]}
    positives = [(i, j) for i, j, y in pairs[0::2]]
    negatives = [(i, j) for i, j, y in pairs[1::2]]
    assert all(y == 1.0 for *_, y in pairs[0::2]) and all(y == 0.0 for *_, y in pairs[1::2])  # in turn
    assert set(positives) == same and set(negatives) == other
    # oversampling: as many of each kind as the commoner has (here 17 positives, 19 negatives)
    assert len(same) == 17 and len(other) == 19
    assert len(positives) == len(negatives) == 19 and len(set(negatives)) == 19
    assert positives[17:] == positives[:2]  # the rarer list walked round again


def test_samples_give_that_many_pairs_of_each_kind_per_text():
    pairs = contrastive_pairs(LABELS, 3, seed=7)
    assert len(pairs) == 2 * 3 * len(LABELS)
    for i, j, y in pairs:
        assert i <= j and y == float(LABELS[i] == LABELS[j])
    assert pairs == contrastive_pairs(LABELS, 3, seed=7)
    assert pairs != contrastive_pairs(LABELS, 3, seed=8)  # the seed orders the pairs


def test_pairs_need_two_labels_and_few_texts():
    with pytest.raises(InputError, match="one label"):
        contrastive_pairs(["x", "x", "x"], 2)
    with pytest.raises(InputError, match=f"at most {MAX_TEXTS:,}"):
        contrastive_pairs(["x", "y"] * (MAX_TEXTS // 2 + 1), 2)


# ----- the loss ----------------------------------------------------------------------------------
def test_cosine_similarity_loss_is_sentence_transformers_loss_and_gradient():
    from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss

    g = torch.Generator().manual_seed(0)
    u, v = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
    labels = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    ours_u, ours_v = u.clone().requires_grad_(), v.clone().requires_grad_()
    theirs_u, theirs_v = u.clone().requires_grad_(), v.clone().requires_grad_()
    ours = cosine_similarity_loss(ours_u, ours_v, labels)
    theirs = CosineSimilarityLoss(model=None).compute_loss_from_embeddings([theirs_u, theirs_v], labels)
    ours.backward()
    theirs.backward()
    assert abs(ours.item() - theirs.item()) <= 1e-6
    assert (ours_u.grad - theirs_u.grad).abs().max() <= 1e-6
    assert (ours_v.grad - theirs_v.grad).abs().max() <= 1e-6


def test_the_pair_loss_pairs_each_text_with_its_partner(base_dir):
    """The loop's loss on an embed batch (both columns in one padded batch) is the loss on each pair's vectors."""
    from bertkit import BertModel
    from bertkit.embed import Encoder, Pooling
    from bertkit.tasks.embed import EMBED, EmbedExample
    from bertkit.tokenizer import Tokenizer
    from bertkit.train.batches import LossWeights

    tok = Tokenizer.from_pretrained(base_dir)
    model = BertModel.from_pretrained(base_dir).eval()
    rows = [(["质量很好", "非常满意，下次还来"], 1.0), (["太差了", "物流很快，包装完好，推荐"], 0.0)]
    features = EMBED.encode(tok, [EmbedExample(t, y) for t, y in rows], 32, 0, None, None)
    batch = EMBED.collate(features, tok.pad_token_id)
    loss = CosinePairLoss("mean")(model, batch, LossWeights(rows=0.5, tokens=0.5))
    encoder = Encoder(model, tok, Pooling("mean", False, 32, "test"))
    a = torch.from_numpy(encoder.encode([t[0] for t, _ in rows]))
    b = torch.from_numpy(encoder.encode([t[1] for t, _ in rows]))
    expected = 0.5 * cosine_similarity_loss(a, b, torch.tensor([y for _, y in rows]))
    assert abs(loss.item() - expected.item()) <= 1e-6


# ----- the head ----------------------------------------------------------------------------------
def clusters(classes: int, n: int = 90, dim: int = 24, seed: int = 0):
    """Overlapping Gaussian clusters, one per class: labels as strings, vectors unit-normed (as a body gives)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim))
    y = rng.integers(0, classes, size=n)
    x = centres[y] * 0.6 + rng.normal(size=(n, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), [f"label{k}" for k in y]


@pytest.mark.parametrize("classes", [2, 3])
def test_the_head_agrees_with_scikit_learn_logistic_regression(classes):
    from sklearn.linear_model import LogisticRegression

    x, y = clusters(classes)
    test_x, test_y = clusters(classes, n=200, seed=1)
    labels = sorted(set(y))
    ours = LogisticHead.fit(x, y, labels)
    theirs = LogisticRegression().fit(x, y)  # scikit-learn's defaults: C=1.0, lbfgs, max_iter=100
    assert list(theirs.classes_) == ours.labels
    ours_accuracy = np.mean(np.array(ours.predict(test_x)) == np.array(test_y))
    assert ours_accuracy == theirs.score(test_x, test_y)
    # its lbfgs stops at a gradient of 1e-4 (tol), the head at 1e-10: close, not equal
    assert np.abs(ours.probabilities(test_x) - theirs.predict_proba(test_x)).max() <= 5e-3
    # the same optimum: scikit-learn's Newton solver, converged hard, lands where the head does
    tight = LogisticRegression(solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(x, y)
    assert np.abs(ours.probabilities(test_x) - tight.predict_proba(test_x)).max() <= 1e-6


def test_the_head_saves_and_loads(tmp_path):
    x, y = clusters(3)
    head = LogisticHead.fit(x, y, sorted(set(y)), c=0.5)
    head.save(str(tmp_path))
    again = LogisticHead.load(str(tmp_path))
    assert again.labels == head.labels and torch.equal(again.weight, head.weight) and torch.equal(again.bias, head.bias)
    (tmp_path / "setfit_head" / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(InputError, match="setfit_head/model.safetensors: not a readable safetensors file"):
        LogisticHead.load(str(tmp_path))


# ----- bertkit setfit ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def setfit_run(base_dir, dev_file, tmp_path_factory):
    """`bertkit setfit` on 16 labelled reviews (a tiny random body): its folder and the texts."""
    from helpers import torch_threads

    from bertkit.cli import main

    folder = tmp_path_factory.mktemp("setfit")
    rows = [json.loads(line) for line in open(dev_file, encoding="utf-8")]
    rows = [r for r in rows if r["label"] == "pos"][:8] + [r for r in rows if r["label"] == "neg"][:8]
    train = folder / "train.jsonl"
    train.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out = folder / "out"
    argv = ["setfit", "--model", base_dir, "--train", str(train), "--eval", str(train), "--out", str(out)]
    argv += ["--samples", "2", "--seq-len", "32", "--lr", "1e-3", "--device", "cpu", "--no-progress"]
    with torch_threads(1):
        assert main(argv) == 0
    return out, rows


def test_setfit_writes_a_sentence_transformers_body_and_a_head(setfit_run):
    from sentence_transformers import SentenceTransformer

    out, rows = setfit_run
    texts = [r["text"] for r in rows]
    clf = SetFitClassifier.from_pretrained(str(out))
    theirs = SentenceTransformer(str(out), device="cpu").encode(texts, convert_to_numpy=True)
    assert np.abs(clf.encoder.encode(texts) - theirs).max() <= 1e-5
    assert clf.head.labels == ["neg", "pos"]
    report = json.loads((out / "eval_report.json").read_text())
    predicted = clf.predict(texts)
    assert report == {"accuracy": np.mean([p == r["label"] for p, r in zip(predicted, rows)]), "examples": 16}
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1]["step"] == 4  # 16 texts x 2 samples x 2 kinds = 64 pairs, batches of 16: one epoch


def test_setfit_head_is_scikit_learns_on_the_body_vectors(setfit_run):
    from sentence_transformers import SentenceTransformer
    from sklearn.linear_model import LogisticRegression

    out, rows = setfit_run
    texts, y = [r["text"] for r in rows], [r["label"] for r in rows]
    vectors = SentenceTransformer(str(out), device="cpu").encode(texts, convert_to_numpy=True)
    theirs = LogisticRegression(solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(vectors, y)
    clf = SetFitClassifier.from_pretrained(str(out))
    assert clf.predict(texts) == list(theirs.predict(vectors))
    assert np.abs(clf.predict_proba(texts) - theirs.predict_proba(vectors)).max() <= 1e-5


def test_setfit_refuses_data_it_cannot_use(tmp_path, base_dir, capsys):
    from bertkit.cli import main

    one = tmp_path / "one.jsonl"
    one.write_text('{"text": "很好", "label": "pos"}\n{"text": "不错", "label": "pos"}\n', encoding="utf-8")
    argv = ["setfit", "--model", base_dir, "--train", str(one), "--out", str(tmp_path / "o"), "--device", "cpu"]
    assert main(argv) == 2
    assert "has no built-in dev split: pass --eval FILE" in capsys.readouterr().err
    assert main([*argv, "--eval", str(one)]) == 2
    assert "one label ('pos'): SetFit needs two or more" in capsys.readouterr().err
