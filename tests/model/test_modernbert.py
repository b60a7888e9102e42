"""ModernBERT (bertkit/modernbert.py) against transformers 4.57's modeling_modernbert: folders saved by transformers
load in bertkit with the same outputs (eager and sdpa, right padding, local windows even and odd, biases off and on,
randomised norm weights), every head with labels, and bertkit's folders load in transformers 4.57 and 5.x."""

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import TOL, parity, tf5_path

from bertkit import BertForSequenceClassification, BertModel, InputError
from bertkit.modernbert import (
    ModernBertConfig,
    ModernBertForMaskedLM,
    ModernBertForMultipleChoice,
    ModernBertForQuestionAnswering,
    ModernBertForSequenceClassification,
    ModernBertForTokenClassification,
    ModernBertModel,
)

transformers = pytest.importorskip("transformers")

# 5 layers, global every 3rd (layers 0 and 3), window 8 or 7; a 3-row batch with 0, 2 and 20 padding tokens
SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=5,
    num_attention_heads=4,
    max_position_embeddings=64,
    global_attn_every_n_layers=3,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    cls_token_id=1,
    sep_token_id=2,
    global_rope_theta=160000.0,
    local_rope_theta=10000.0,
)
VARIANTS = {
    "window-8-no-bias": dict(local_attention=8),
    "window-7-all-bias": dict(
        local_attention=7, attention_bias=True, mlp_bias=True, norm_bias=True, classifier_bias=True
    ),
}
LENGTHS = (24, 22, 4)


def hf_config(**overrides):
    return transformers.ModernBertConfig(**{**SIZES, **overrides}, reference_compile=False)


def randomised(model):
    """Norm weights and biases away from 1 / 0, so that a mix-up of parameters shows."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


def batch(lengths=LENGTHS, vocab=97, seed=0):
    g = torch.Generator().manual_seed(seed)
    S = max(lengths)
    ids = torch.randint(3, vocab, (len(lengths), S), generator=g)
    mask = torch.zeros(len(lengths), S, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        ids[i, n:] = 0
    return ids, mask


def saved_by_transformers(tmp_path, hf_class, attn="sdpa", **overrides):
    torch.manual_seed(0)
    hf = randomised(hf_class(hf_config(**overrides, attn_implementation=attn)))
    hf.save_pretrained(tmp_path / "hf")
    return hf, str(tmp_path / "hf")


def real(t, mask):
    """The real tokens' rows of a (B, S, ...) tensor."""
    return t[mask.bool()]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("attn", ["eager", "sdpa", "varlen", "auto"])
def test_the_encoder_equals_transformers_on_real_tokens(tmp_path, variant, attn):
    hf, folder = saved_by_transformers(
        tmp_path, transformers.ModernBertModel, attn if attn == "eager" else "sdpa", **VARIANTS[variant]
    )
    ours = ModernBertModel.from_pretrained(folder, attn_implementation=attn)  # auto: padding-free, this batch has pads
    ids, mask = batch()
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        mine = ours(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    parity(real(mine.last_hidden_state, mask), real(theirs.last_hidden_state, mask))
    assert len(mine.hidden_states) == len(theirs.hidden_states) == 6
    for a, b in zip(mine.hidden_states, theirs.hidden_states):
        parity(real(a, mask), real(b, mask))
    assert torch.isfinite(mine.last_hidden_state).all()  # padded positions too: never NaN


@pytest.mark.parametrize("window", [8, 7, 64])
def test_the_padding_free_path_equals_the_padded_one_in_training_too(window):
    """Gradients through the padding-free path (grouped SDPA calls when training, the window as a mask) equal the
    padded path's; a row of padding only never gives NaN."""
    torch.manual_seed(0)
    config = ModernBertConfig(**SIZES, local_attention=window, attn_implementation="sdpa")
    padded = randomised(ModernBertForMaskedLM(config))
    free = ModernBertForMaskedLM(config.replace(attn_implementation="varlen"))
    free.load_state_dict(padded.state_dict())
    ids, mask = batch(lengths=(24, 22, 4, 0, 17))
    labels = torch.where(mask.bool(), ids, -100)
    grads = []
    for model in (padded, free):
        model.train()
        loss = model(ids, mask, labels=labels).loss
        loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
        model.eval()
        with torch.no_grad():
            out = model.model(ids, mask).last_hidden_state
        assert torch.isfinite(out).all()
    for name, grad in grads[0].items():
        assert torch.allclose(grad, grads[1][name], atol=1e-5), name


def test_local_layers_attend_only_within_the_window_and_equal_transformers_weights(tmp_path):
    hf, folder = saved_by_transformers(tmp_path, transformers.ModernBertModel, "eager", local_attention=8)
    ours = ModernBertModel.from_pretrained(folder)
    ids, mask = batch(lengths=(24, 24, 24))
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
        mine = ours(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    distance = (torch.arange(24)[None] - torch.arange(24)[:, None]).abs()
    for layer, (a, b) in enumerate(zip(mine, theirs)):
        parity(a, b)
        outside = a[..., distance > 4]
        assert (outside == 0).all() if layer % 3 else (outside > 0).all(), layer


@pytest.mark.parametrize(
    "hf_name, ours_class, labels, pooling",
    [
        ("ModernBertForMaskedLM", ModernBertForMaskedLM, "tokens", "cls"),
        ("ModernBertForSequenceClassification", ModernBertForSequenceClassification, "rows", "cls"),
        ("ModernBertForSequenceClassification", ModernBertForSequenceClassification, "rows", "mean"),
        ("ModernBertForTokenClassification", ModernBertForTokenClassification, "tokens", "cls"),
        ("ModernBertForQuestionAnswering", ModernBertForQuestionAnswering, "spans", "cls"),
    ],
)
def test_every_head_equals_transformers_logits_and_loss(tmp_path, hf_name, ours_class, labels, pooling):
    extra = dict(local_attention=8, classifier_pooling=pooling, num_labels=3 if labels != "spans" else 2)
    hf, folder = saved_by_transformers(tmp_path, getattr(transformers, hf_name), "sdpa", **extra)
    # sdpa computes the padded positions as transformers does (QA's loss reads them); auto leaves zeros there
    ours = ours_class.from_pretrained(folder, attn_implementation="sdpa")
    ids, mask = batch()
    g = torch.Generator().manual_seed(3)
    kw = {
        "tokens": lambda: {"labels": torch.where(mask.bool(), torch.randint(0, 3, ids.shape, generator=g), -100)},
        "rows": lambda: {"labels": torch.tensor([0, 2, 1])},
        "spans": lambda: {"start_positions": torch.tensor([1, 3, 0]), "end_positions": torch.tensor([4, 9, 2])},
    }[labels]()
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask, **kw)
        mine = ours(input_ids=ids, attention_mask=mask, **kw)
    parity(mine.loss, theirs.loss)
    for name in ("logits", "start_logits", "end_logits"):
        if hasattr(theirs, name) and getattr(theirs, name) is not None:
            a, b = getattr(mine, name), getattr(theirs, name)
            parity(
                real(a, mask) if a.dim() >= 2 and a.shape[:2] == mask.shape else a,
                real(b, mask) if b.dim() >= 2 and b.shape[:2] == mask.shape else b,
            )


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_multiple_choice_equals_transformers(tmp_path, pooling):
    hf, folder = saved_by_transformers(
        tmp_path, transformers.ModernBertForMultipleChoice, "sdpa", local_attention=8, classifier_pooling=pooling
    )
    ours = ModernBertForMultipleChoice.from_pretrained(folder)
    ids, mask = batch(lengths=(24, 22, 4, 9, 13, 24))
    ids, mask = ids.view(2, 3, -1), mask.view(2, 3, -1)
    labels = torch.tensor([2, 0])
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask, labels=labels)
        mine = ours(input_ids=ids, attention_mask=mask, labels=labels)
    parity(mine.logits, theirs.logits)
    parity(mine.loss, theirs.loss)


def test_sparse_prediction_gives_the_labelled_rows_only(tmp_path):
    hf, folder = saved_by_transformers(
        tmp_path, transformers.ModernBertForMaskedLM, "sdpa", local_attention=8, sparse_prediction=True
    )
    ours = ModernBertForMaskedLM.from_pretrained(folder)
    ids, mask = batch()
    labels = torch.full_like(ids, -100)
    labels[0, 3], labels[1, 5], labels[2, 1] = 7, 8, 9
    with torch.no_grad():
        theirs, mine = hf(input_ids=ids, attention_mask=mask, labels=labels), ours(ids, mask, labels=labels)
    assert mine.logits.shape == theirs.logits.shape == (3, 97)
    parity(mine.logits, theirs.logits)
    parity(mine.loss, theirs.loss)


def test_bertkit_saves_folders_transformers_loads_with_every_key_and_the_same_logits(tmp_path):
    torch.manual_seed(0)
    ours = randomised(ModernBertForMaskedLM(ModernBertConfig(**SIZES, local_attention=8)))
    ours.save_pretrained(tmp_path / "ours")
    theirs, info = transformers.ModernBertForMaskedLM.from_pretrained(
        tmp_path / "ours", output_loading_info=True, attn_implementation="sdpa", reference_compile=False
    )
    assert info["missing_keys"] == [] and info["unexpected_keys"] == []
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["model_type"] == "modernbert"
    ids, mask = batch()
    with torch.no_grad():
        parity(real(ours(ids, mask).logits, mask), real(theirs.eval()(input_ids=ids, attention_mask=mask).logits, mask))


TF5_SCRIPT = (
    "import sys, torch, transformers\n"
    "assert transformers.__version__.startswith('5.'), transformers.__version__\n"
    "io = torch.load(sys.argv[2])\n"
    "m = transformers.ModernBertForMaskedLM.from_pretrained(sys.argv[1]).eval()\n"
    "with torch.no_grad():\n"
    "    out = m(io['ids'], attention_mask=io['mask']).logits\n"
    "print((out - io['logits'])[io['mask'].bool()].abs().max().item())\n"
    "m.save_pretrained(sys.argv[3])\n"
)


def test_transformers_5_loads_bertkit_folders_and_its_own_config_form_reads_back(tmp_path):
    tf5 = tf5_path()
    torch.manual_seed(0)
    ours = randomised(ModernBertForMaskedLM(ModernBertConfig(**SIZES, local_attention=8)))
    ours.save_pretrained(tmp_path / "ours")
    ids, mask = batch()
    with torch.no_grad():
        torch.save({"ids": ids, "mask": mask, "logits": ours(ids, mask).logits}, tmp_path / "io.pt")
    done = subprocess.run(
        [sys.executable, "-c", TF5_SCRIPT, str(tmp_path / "ours"), str(tmp_path / "io.pt"), str(tmp_path / "tf5")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": tf5},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.strip().splitlines()[-1]) <= TOL
    written = json.loads((tmp_path / "tf5" / "config.json").read_text())
    back = ModernBertForMaskedLM.from_pretrained(tmp_path / "tf5")  # 5.x's layer_types / rope_parameters if written
    assert back.config.global_attn_every_n_layers == 3 and back.config.local_rope_theta == 10000.0, written
    with torch.no_grad():
        parity(real(back(ids, mask).logits, mask), real(ours(ids, mask).logits, mask))


def test_the_five_form_of_the_config_reads_as_the_four_form():
    five = ModernBertConfig.from_dict(
        {
            **SIZES,
            "layer_types": ["full_attention", "sliding_attention", "sliding_attention"] * 2,
            "rope_parameters": {
                "full_attention": {"rope_type": "default", "rope_theta": 80000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 5000.0},
            },
            "num_hidden_layers": 6,
        }
    )
    assert (five.global_attn_every_n_layers, five.global_rope_theta, five.local_rope_theta) == (3, 80000.0, 5000.0)
    assert "layer_types" not in five.to_dict() and five.to_dict()["global_attn_every_n_layers"] == 3
    with pytest.raises(Exception, match="global every n-th layer"):
        ModernBertConfig.from_dict({**SIZES, "layer_types": ["sliding_attention", "full_attention"]})


def test_a_bert_class_loads_a_modernbert_folder_as_its_modernbert_counterpart(tmp_path):
    _, folder = saved_by_transformers(tmp_path, transformers.ModernBertForSequenceClassification, local_attention=8)
    assert type(BertForSequenceClassification.from_pretrained(folder)) is ModernBertForSequenceClassification
    assert type(BertModel.from_pretrained(folder)) is ModernBertModel


def test_bad_inputs_are_named():
    model = ModernBertModel(ModernBertConfig(**SIZES, local_attention=8)).eval()
    with pytest.raises(InputError, match=r"input_ids hold 97, outside the vocabulary \[0, 97\)"):
        model(torch.tensor([[3, 97]]))
    with pytest.raises(InputError, match="attention_mask must be"):
        model(torch.tensor([[3, 4]]), torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(InputError, match="must be a torch.Tensor"):
        model([[3, 4]])


def test_explain_names_each_layers_kind_window_and_rotary_base_and_counts_every_parameter():
    from bertkit.explain import architecture
    from bertkit.explain.attention_view import attention_maps_ids

    model = ModernBertForMaskedLM(ModernBertConfig(**SIZES, local_attention=8))
    arch = architecture(model)
    assert arch.total == sum(p.numel() for p in model.parameters()) and arch.heads == [4] * 5
    rows = {row.name: row.label for row in arch.rows}
    for i in range(5):
        kind = "GLOBAL: every token sees every token" if i % 3 == 0 else "LOCAL: token i sees |i - j| <= 4"
        assert kind in rows[f"layer {i}"] and f"rotary base {160000 if i % 3 == 0 else 10000}" in rows[f"layer {i}"]
    maps = attention_maps_ids(model, torch.randint(3, 97, (1, 12)), None)
    far = (torch.arange(12)[None] - torch.arange(12)[:, None]).abs() > 4
    assert [bool((m[:, far] == 0).all()) for m in maps.maps] == [False, True, True, False, True]


def test_explain_trace_shows_modernberts_steps_with_each_layers_rotary_theta_and_window(
    tokenizer_dir, tmp_path, capsys
):
    from bertkit.cli import main
    from bertkit.explain.trace import trace_ids
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(tokenizer_dir)
    model = ModernBertForMaskedLM(ModernBertConfig(**{**SIZES, "vocab_size": tok.vocab_size}, local_attention=8))
    tok.save_pretrained(tmp_path)
    model.save_pretrained(tmp_path)
    ids = torch.tensor([tok.encode("人民日报今天出版")])
    S, heads, H = ids.shape[1], 4, SIZES["hidden_size"]
    traced = trace_ids(model, ids)
    assert traced.shape("Wqkv", 0) == (1, S, 3 * H) and traced.shape("q", 2) == (1, heads, S, H // heads)
    assert traced.shape("Wi", 4) == (1, S, 2 * SIZES["intermediate_size"]) and traced.shape("logits") == (
        1,
        S,
        tok.vocab_size,
    )
    notes = {(s.name, s.layer): s.note for s in traced.steps}
    for i in range(5):
        assert notes["weights", i] == ("global: every token" if i % 3 == 0 else "local: |i - j| <= 4")
        assert notes["q", i].startswith(f"rotary theta {160000 if i % 3 == 0 else 10000} ")
    assert main(["explain", str(tmp_path), "--trace", "人民日报今天出版", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "ModernBertForMaskedLM" in out and "one Linear: every head's query, key and value" in out
    assert "layers 1-2: the same steps;" in out and "(local: |i - j| <= 4)" in out and "layer 3: the same steps;" in out


def test_without_the_host_read_torch_compile_makes_the_padding_still_counts(monkeypatch):
    """Under torch.compile nothing is read to the host: the padded path runs with the mask as given."""
    model = randomised(ModernBertModel(ModernBertConfig(**SIZES, local_attention=8)))
    ids, mask = batch()
    with torch.no_grad():
        expected = model(ids, mask).last_hidden_state
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
        got = model(ids, mask).last_hidden_state
    parity(real(got, mask), real(expected, mask))


def test_explain_mlm_takes_a_modernbert(tokenizer_dir):
    from bertkit.explain.mlm import explain_mlm
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(tokenizer_dir)
    model = ModernBertForMaskedLM(ModernBertConfig(**{**SIZES, "vocab_size": tok.vocab_size}, local_attention=8))
    explained = explain_mlm(model.eval(), tok, "人民[MASK]报")
    assert explained.logits_shape[-1] == tok.vocab_size and len(explained.predictions) == 1
    assert explained.loss == pytest.approx(explained.masked_loss, abs=1e-5)
