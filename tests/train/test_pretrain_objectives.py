"""Pretraining objectives as one seam (bertkit/train/objectives/): a throwaway objective defined here goes
through `bertkit pretrain` (train, resume, save) without a change to it, and ELECTRA's replaced-token detection
trains, resumes, splits over processes and saves directories transformers' ELECTRA classes load."""

import json
import os
import signal
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from bertkit import BertConfig, BertkitWarning
from bertkit.cli import main
from bertkit.heads import BertForTokenClassification
from bertkit.init import initialise
from bertkit.train.batches import LOSS_UNITS, LossWeights, loss_weights
from bertkit.train.objectives import OBJECTIVES, Objective
from bertkit.train.objectives.electra import Electra, ElectraPretraining, generator_config, sample
from bertkit.train.objectives.mlm import PretrainBatches
from bertkit.train.runlog import read_metrics

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models trained in this process


# ----- a throwaway objective: what a new module in bertkit/train/objectives/ would hold ----------------------
class DetectRandomTokens(Objective):
    """15% of the ordinary tokens swapped for random ones (the MLM collator's draws, all of them random); a token
    classifier learns, for every real token, whether it was swapped."""

    name = "detect"

    def build(self, config, token_counts):
        return initialise(BertForTokenClassification(config.replace(num_labels=2)), self.setup.init)

    def load(self, folder):
        return BertForTokenClassification.from_pretrained(folder)

    def batches(self, rows, sampler):
        from bertkit.data.masking import MaskingCollator

        tok = self.tokenizer
        collator = MaskingCollator(
            vocab_size=tok.vocab_size,
            mask_id=tok.mask_token_id,
            pad_id=tok.pad_token_id,
            special_ids=tuple(tok.all_special_ids),
            mlm_probability=0.15,
            seed=self.cfg.seed,
        )
        return SwappedBatches(rows, collator, sampler, tok.mask_token_id, tok.vocab_size)

    def loss(self, model, batch, weights):
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"]
        ).logits
        real = batch["attention_mask"] > 0
        return F.cross_entropy(logits[real].float(), batch["swapped"][real]) * weights.of("real")

    @torch.no_grad()
    def evaluate(self, model, rows):
        from bertkit.train.batches import StepSampler

        batches = self.batches(rows, StepSampler(len(rows), min(len(rows), 8), 1, 0))
        batch = batches.batch(10**9, 0)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        real = batch["attention_mask"] > 0
        return {"detect_accuracy": float((logits.argmax(-1)[real] == batch["swapped"][real]).float().mean())}


class SwappedBatches(PretrainBatches):
    def __init__(self, rows, collator, sampler, mask_id, vocab_size):
        super().__init__(rows, collator, sampler)
        self.mask_id, self.vocab_size = mask_id, vocab_size

    def batch(self, step, micro):
        out = super().batch(step, micro)
        labels = out.pop("labels")
        selected = labels != -100
        # the collator's [MASK]s become a random id too (a fixed function of the id and the step)
        random_ids = (out["input_ids"] * 7919 + step) % (self.vocab_size - 5) + 5
        out["input_ids"] = torch.where(out["input_ids"] == self.mask_id, random_ids, out["input_ids"])
        out["swapped"] = (selected & (out["input_ids"] != labels)).long()
        out[LOSS_UNITS] = {"real": int((out["attention_mask"] > 0).sum())}
        return out


@pytest.fixture
def detect_objective(monkeypatch):
    monkeypatch.setitem(OBJECTIVES, DetectRandomTokens.name, DetectRandomTokens)


@pytest.fixture(scope="module")
def tiny_config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    BertConfig.from_preset("tiny", vocab_size=1500, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0).to_json(
        path
    )
    return str(path)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, corpus_file, tokenizer_dir):
    from bertkit.data.prepare import prepare

    folder = tmp_path_factory.mktemp("prepared") / "data"
    prepare(corpus_file, tokenizer_dir, str(folder), heldout=0.05, seed=3, workers=1)
    return str(folder)


def flags(data, config, *more):
    return [
        "--data",
        data,
        "--model-config",
        config,
        "--seq-len",
        "32",
        "--batch-size",
        "8",
        "--steps",
        "12",
        "--lr",
        "2e-3",
        "--log-every",
        "1",
        "--eval-every",
        "6",
        "--save-every",
        "6",
        "--eval-rows",
        "32",
        "--no-progress",
        "--device",
        "cpu",
        "--seed",
        "3",
        *more,
    ]


def train_losses(out) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(os.path.join(out, "metrics.jsonl")) if r.get("split") != "eval"}


def evals(out) -> list[dict]:
    return [r for r in read_metrics(os.path.join(out, "metrics.jsonl")) if r.get("split") == "eval"]


def stop_after(monkeypatch, objective_class, calls_before_stop: int):
    """SIGTERM (in process) during the n-th loss: the loop saves and stops after that step."""
    real = objective_class.loss
    calls = {"n": 0}

    def loss_then_sigterm(self, model, batch, weights):
        calls["n"] += 1
        if calls["n"] == calls_before_stop:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, model, batch, weights)

    monkeypatch.setattr(objective_class, "loss", loss_then_sigterm)
    return lambda: monkeypatch.setattr(objective_class, "loss", real)


def stop_resume_and_compare(monkeypatch, objective_class, full: str, cut: str, run_flags: list[str]) -> None:
    """The run of `full` again in `cut`, stopped after step 5 and resumed: the same losses and weights."""
    name = ["--objective", objective_class.name]
    restore = stop_after(monkeypatch, objective_class, 5)
    assert main(["pretrain", *name, "--out", cut, *run_flags]) == 130
    restore()
    assert main(["pretrain", *name, "--out", cut, "--resume", *run_flags]) == 0
    a, b = train_losses(full), train_losses(cut)
    assert sorted(b) == list(range(1, 13)) and all(b[s] == pytest.approx(a[s], abs=1e-6) for s in a)
    assert_same_weights(full, cut)


def assert_same_weights(a_dir, b_dir):
    a, b = load_file(os.path.join(a_dir, "model.safetensors")), load_file(os.path.join(b_dir, "model.safetensors"))
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


# ----- the seam ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_new_objective_trains_resumes_and_saves_through_bertkit_pretrain(
    tmp_path, prepared, tiny_config_file, detect_objective, monkeypatch, capsys
):
    full, cut = str(tmp_path / "full"), str(tmp_path / "cut")
    assert main(["pretrain", "--objective", "detect", "--out", full, *flags(prepared, tiny_config_file)]) == 0
    rows = evals(full)
    assert [r["step"] for r in rows] == [6, 12] and all(0.5 < r["detect_accuracy"] <= 1 for r in rows)
    model = BertForTokenClassification.from_pretrained(full)  # what its save() wrote, and the tokenizer beside it
    assert model.config.num_labels == 2 and os.path.exists(os.path.join(full, "vocab.txt"))
    stop_resume_and_compare(monkeypatch, DetectRandomTokens, full, cut, flags(prepared, tiny_config_file))
    # another objective cannot continue it
    capsys.readouterr()
    assert main(["pretrain", "--out", cut, "--resume", *flags(prepared, tiny_config_file, "--steps", "14")]) != 0
    assert "pretrained with --objective detect, not mlm" in capsys.readouterr().err


def test_an_unknown_objective_and_nsp_with_another_objective_are_refused(tmp_path, prepared, tiny_config_file, capsys):
    assert (
        main(
            [
                "pretrain",
                "--objective",
                "electra",
                "--nsp",
                "--out",
                str(tmp_path / "a"),
                *flags(prepared, tiny_config_file),
            ]
        )
        != 0
    )
    assert "--nsp is --objective mlm-nsp" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["pretrain", "--objective", "span", "--out", str(tmp_path / "b"), *flags(prepared, tiny_config_file)])
    assert "span" in capsys.readouterr().err and not (tmp_path / "a").exists()


def test_loss_weights_of_several_units_make_one_mean_per_unit():
    """Two micro-batches counting masked and real tokens: each unit's weights are its share of the step."""
    first, second = loss_weights([{"tokens": 2, "real": 30}, {"tokens": 6, "real": 10}], grad_accum=2, world=1)
    assert (first.of("tokens"), second.of("tokens")) == (0.25, 0.75)
    assert (first.of("real"), second.of("real")) == (0.75, 0.25)
    assert first.tokens == 0.25 and first.of("rows") == 0.5  # an uncounted unit: the rows' weight
    assert LossWeights(rows=0.5, tokens=0.5).of("real") == 0.5


# ----- ELECTRA -----------------------------------------------------------------------------------------------
def test_sampling_inverts_the_softmax_cdf():
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0]]))
    picks = [sample(logits, torch.tensor([u, u])).tolist() for u in (0.05, 0.15, 0.31, 0.99)]
    assert picks == [[0, 0], [1, 0], [2, 0], [2, 1]]
    u = torch.rand(20000, generator=torch.Generator().manual_seed(0))
    counts = np.bincount(sample(logits[:1].expand(20000, 3), u).numpy(), minlength=3) / 20000
    assert np.allclose(counts, [0.1, 0.2, 0.7], atol=0.01)


def test_generator_config_is_a_quarter_of_the_discriminator():
    mini = BertConfig.from_preset("mini")
    g = generator_config(mini, 0.25)
    assert (g.hidden_size, g.num_attention_heads, g.intermediate_size, g.num_hidden_layers) == (64, 1, 256, 4)
    assert generator_config(mini, 1.0).hidden_size == 256


@pytest.mark.slow
def test_electra_trains_and_saves_what_transformers_electra_loads(tmp_path, prepared, tiny_config_file, capsys):
    out = str(tmp_path / "electra")
    assert (
        main(
            [
                "pretrain",
                "--objective",
                "electra",
                "--out",
                out,
                *flags(prepared, tiny_config_file, "--steps", "80", "--eval-every", "40"),
            ]
        )
        == 0
    )
    rows = evals(out)
    assert [r["step"] for r in rows] == [40, 80]
    last = rows[-1]
    assert {"mlm_accuracy", "replaced_auc", "replaced_accuracy", "replaced_share", "loss"} <= set(last)
    assert 0.0 < last["replaced_share"] < 0.3 and last["replaced_auc"] > 0.52  # replaced tokens score higher
    losses = list(train_losses(out).values())
    assert sum(losses[-10:]) / 10 < sum(losses[:10]) / 10 - 0.5  # it learns (the loss is mostly 50 x the BCE)
    with open(os.path.join(out, "config.json")) as fh:
        saved = json.load(fh)
    assert saved["model_type"] == "electra" and saved["architectures"] == ["ElectraForPreTraining"]
    from bertkit.electra import ElectraForMaskedLM, ElectraForPreTraining
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(out)
    texts = ["中共中央总书记、国家主席江泽民", "人民日报"]
    enc = {k: torch.tensor(v) for k, v in tok(texts, padding=True).items()}
    for folder, ours_class, theirs_class in (
        (out, ElectraForPreTraining, transformers.ElectraForPreTraining),
        (os.path.join(out, "generator"), ElectraForMaskedLM, transformers.ElectraForMaskedLM),
    ):
        theirs = theirs_class.from_pretrained(folder).eval()
        ours = ours_class.from_pretrained(folder)
        real = enc["attention_mask"] > 0  # bertkit's unpadded path leaves padded positions at zero (config.py)
        with torch.no_grad():
            assert (ours(**enc).logits[real] - theirs(**enc).logits[real]).abs().max().item() <= 1e-5
    # the shared embeddings were saved once per model, equal
    d, g = (
        load_file(os.path.join(out, "model.safetensors")),
        load_file(os.path.join(out, "generator", "model.safetensors")),
    )
    assert torch.equal(d["electra.embeddings.word_embeddings.weight"], g["electra.embeddings.word_embeddings.weight"])
    # --init-from continues from both
    assert (
        main(
            [
                "pretrain",
                "--objective",
                "electra",
                "--init-from",
                out,
                "--out",
                str(tmp_path / "more"),
                *flags(prepared, tiny_config_file, "--steps", "2", "--eval-every", "0"),
            ]
        )
        == 0
    )
    assert "generator ElectraForMaskedLM" in capsys.readouterr().err


@pytest.mark.slow
def test_electra_resume_after_a_stop_continues_exactly(tmp_path, prepared, tiny_config_file, monkeypatch):
    full, cut = str(tmp_path / "full"), str(tmp_path / "cut")
    assert main(["pretrain", "--objective", "electra", "--out", full, *flags(prepared, tiny_config_file)]) == 0
    stop_resume_and_compare(monkeypatch, Electra, full, cut, flags(prepared, tiny_config_file))
    assert all(x["replaced_auc"] == pytest.approx(y["replaced_auc"], abs=1e-6) for x, y in zip(evals(full), evals(cut)))
    assert_same_weights(os.path.join(full, "generator"), os.path.join(cut, "generator"))


def assert_split_runs_equal_one(
    tmp_path, objective: str, flags_: list[str], port: int, folders: tuple[str, ...] = ("",), accumulate: bool = False
) -> None:
    """6 steps of `objective` as 2 processes x 4 rows ("two") and as 1 process x 8 ("one") (and x 4 over 2
    micro-batches, "accumulated"): the same rows, masks and samples, so equal losses (1e-4) and weights (1e-5)."""
    common = flags_[:]
    i = common.index("--batch-size")
    del common[i : i + 2]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    two = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            str(port),
            "-m",
            "bertkit",
            "pretrain",
            "--objective",
            objective,
            "--out",
            str(tmp_path / "two"),
            "--batch-size",
            "4",
            *common,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    assert (
        main(["pretrain", "--objective", objective, "--out", str(tmp_path / "one"), "--batch-size", "8", *common]) == 0
    )
    names = ["two"]
    if accumulate:
        names.append("accumulated")
        assert (
            main(
                [
                    "pretrain",
                    "--objective",
                    objective,
                    "--out",
                    str(tmp_path / "accumulated"),
                    "--batch-size",
                    "4",
                    "--grad-accum",
                    "2",
                    *common,
                ]
            )
            == 0
        )
    la = train_losses(tmp_path / "one")
    for name in names:  # each loss a mean over the step's units
        lb = train_losses(tmp_path / name)
        assert len(la) == 6 and all(abs(la[s] - lb[s]) < 1e-4 for s in la), (name, la, lb)
        for folder in folders:
            a = load_file(tmp_path / "one" / folder / "model.safetensors")
            b = load_file(tmp_path / name / folder / "model.safetensors")
            assert set(a) == set(b), (name, folder)
            for k in a:
                assert torch.allclose(a[k], b[k], atol=1e-5, rtol=1e-4), (name, folder, k)


@pytest.mark.slow
def test_electra_two_processes_equal_one_and_accumulation(tmp_path, prepared, tiny_config_file):
    common = flags(prepared, tiny_config_file, "--steps", "6", "--eval-every", "0", "--save-every", "0")
    assert_split_runs_equal_one(tmp_path, "electra", common, 29531, folders=("", "generator"), accumulate=True)


@pytest.mark.slow
def test_electra_with_packed_documents_bf16_and_the_bert_recipe(tmp_path, prepared, tiny_config_file):
    out = str(tmp_path / "packed")
    assert (
        main(
            [
                "pretrain",
                "--objective",
                "electra",
                "--packing",
                "documents",
                "--precision",
                "bf16",
                "--recipe",
                "bert",
                "--out",
                out,
                *flags(prepared, tiny_config_file, "--steps", "4", "--eval-every", "4"),
            ]
        )
        == 0
    )
    last = evals(out)[-1]
    assert np.isfinite(last["loss"]) and 0 <= last["replaced_auc"] <= 1


def test_the_discriminator_head_learns_from_every_real_token(tokenizer_dir):
    """One forward: labels say replaced exactly where a sample differs from the original, every real token is
    scored, and the discriminator's gradient reaches the shared embeddings while the samples pass none."""
    from bertkit.electra import ElectraForMaskedLM, ElectraForPreTraining

    torch.manual_seed(0)
    config = BertConfig.from_preset("tiny", model_type="electra", embedding_size=32)
    pair = ElectraPretraining(ElectraForMaskedLM(generator_config(config, 0.5)), ElectraForPreTraining(config))
    assert pair.generator.electra.embeddings is pair.discriminator.electra.embeddings
    ids = torch.randint(5, 1000, (2, 10))
    labels = torch.full_like(ids, -100)
    labels[0, 3], labels[1, 5] = ids[0, 3], ids[1, 5]
    masked_ids = torch.where(labels != -100, torch.full_like(ids, 4), ids)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    out = pair(
        input_ids=masked_ids,
        attention_mask=mask,
        token_type_ids=torch.zeros_like(ids),
        labels=labels,
        sample_u=torch.rand(2, 10),
    )
    assert out.real.sum() == 18 and out.replaced[labels == -100].sum() == 0
    (out.generator_loss + 50 * out.discriminator_loss).backward()
    assert pair.discriminator.electra.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert all(p.grad is not None for p in pair.discriminator.discriminator_predictions.parameters())


# ----- MLM + bag of words ----------------------------------------------------------------------------------------
def test_the_bag_of_words_loss_is_the_cross_entropy_against_each_rows_token_distribution():
    """Per row: the original tokens (the label where a token was selected), specials and padding left out."""
    from bertkit.train.objectives.bow import bag_of_words_loss

    logits = torch.randn(2, 9, generator=torch.Generator().manual_seed(0))
    input_ids = torch.tensor([[2, 5, 4, 5, 3, 0], [2, 7, 8, 3, 0, 0]])  # 2 [CLS], 3 [SEP], 4 [MASK], 0 [PAD]
    labels = torch.full_like(input_ids, -100)
    labels[0, 2] = 6  # the [MASK] at (0, 2) was a 6
    mask = (input_ids != 0).long()
    got = bag_of_words_loss(logits, input_ids, labels, mask, torch.tensor([0, 1, 2, 3, 4]))
    logp = torch.log_softmax(logits, -1)
    want = (-(2 * logp[0, 5] + logp[0, 6]) / 3 - (logp[1, 7] + logp[1, 8]) / 2) / 2
    assert got.item() == pytest.approx(want.item(), abs=1e-6)


@pytest.mark.slow
def test_mlm_bow_trains_the_pooler_and_saves_what_transformers_loads(tmp_path, prepared, tiny_config_file, capsys):
    out = str(tmp_path / "bow")
    assert (
        main(
            [
                "pretrain",
                "--objective",
                "mlm-bow",
                "--out",
                out,
                *flags(prepared, tiny_config_file, "--steps", "60", "--eval-every", "30"),
            ]
        )
        == 0
    )
    rows = evals(out)
    assert [r["step"] for r in rows] == [30, 60] and rows[-1]["bow_loss"] < rows[0]["bow_loss"]
    assert {"mlm_accuracy", "loss", "bow_loss"} <= set(rows[-1])
    saved = load_file(os.path.join(out, "model.safetensors"))
    assert {"bert.pooler.dense.weight", "bert.pooler.dense.bias"} <= set(saved)
    from bertkit.heads import BertForMaskedLM, BertForSequenceClassification
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(out)
    enc = {k: torch.tensor(v) for k, v in tok(["中共中央总书记、国家主席江泽民", "人民日报"], padding=True).items()}
    real = enc["attention_mask"] > 0
    theirs = transformers.BertForMaskedLM.from_pretrained(out).eval()
    with warnings.catch_warnings():  # the pooler BertForMaskedLM does not build goes unused without a word
        warnings.simplefilter("error")
        ours = BertForMaskedLM.from_pretrained(out)
    report = BertForMaskedLM.from_pretrained(out, output_loading_info=True)[1]
    assert report["unexpected_keys"] == ["bert.pooler.dense.bias", "bert.pooler.dense.weight"]  # listed, as ever
    with torch.no_grad():
        assert (ours(**enc).logits[real] - theirs(**enc).logits[real]).abs().max().item() <= 1e-5
    # a classifier starts from the trained pooler, in transformers and in bertkit
    hf_cls = transformers.BertForSequenceClassification.from_pretrained(out, num_labels=2)
    with pytest.warns(BertkitWarning, match="newly initialised"):  # the classifier; the MLM head goes unused
        ours_cls = BertForSequenceClassification.from_pretrained(out, num_labels=2)
    for model in (hf_cls, ours_cls):
        assert torch.equal(model.bert.pooler.dense.weight.detach(), saved["bert.pooler.dense.weight"])
    # --init-from continues MLM and pooler; a folder without a trained pooler is refused
    assert (
        main(
            [
                "pretrain",
                "--objective",
                "mlm-bow",
                "--init-from",
                out,
                "--out",
                str(tmp_path / "more"),
                *flags(prepared, tiny_config_file, "--steps", "2", "--eval-every", "0"),
            ]
        )
        == 0
    )
    mlm_only = str(tmp_path / "mlm")
    assert (
        main(["pretrain", "--out", mlm_only, *flags(prepared, tiny_config_file, "--steps", "2", "--eval-every", "0")])
        == 0
    )
    capsys.readouterr()
    assert (
        main(
            [
                "pretrain",
                "--objective",
                "mlm-bow",
                "--init-from",
                mlm_only,
                "--out",
                str(tmp_path / "x"),
                *flags(prepared, tiny_config_file, "--steps", "2", "--eval-every", "0"),
            ]
        )
        == 2
    )
    assert "no trained pooler (bert.pooler.*)" in capsys.readouterr().err


@pytest.mark.slow
def test_mlm_bow_resumes_exactly_and_two_processes_equal_one(tmp_path, prepared, tiny_config_file, monkeypatch):
    from bertkit.train.objectives.bow import MaskedLMWithBagOfWords

    full, cut = str(tmp_path / "full"), str(tmp_path / "cut")
    assert main(["pretrain", "--objective", "mlm-bow", "--out", full, *flags(prepared, tiny_config_file)]) == 0
    stop_resume_and_compare(monkeypatch, MaskedLMWithBagOfWords, full, cut, flags(prepared, tiny_config_file))
    common = flags(prepared, tiny_config_file, "--steps", "6", "--eval-every", "0", "--save-every", "0")
    assert_split_runs_equal_one(tmp_path, "mlm-bow", common, 29533)
