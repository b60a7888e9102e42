"""Issue #27: text with nothing in it once normalised, NaN / Infinity, and files to embed, everywhere alike.

One rule for "empty input" (text.is_empty_text: "", whitespace, zero-width, soft hyphen, BOM, control characters:
what BERT's normaliser leaves nothing of): predict's empty row, evaluate's refusal, serve's 422 / empty row,
embed's and encode's refusal. One mechanism for NaN / Infinity: the weights checked once at load, before
quantizing (inference.check_weights), the outputs of every forward pass (check_outputs), a probe at serve's
start-up. Tiny random models on short real texts, in this process (CPU)."""

import json
import logging
import math
import warnings

import numpy as np
import pytest
import torch
from helpers import tiny

from bertkit import BertForMaskedLM, BertForQuestionAnswering, BertForSequenceClassification, BertModel
from bertkit.cli import main
from bertkit.embed import Encoder, encode
from bertkit.errors import BertkitError, BertkitWarning, NonFiniteError
from bertkit.tokenizer import Tokenizer

REVIEWS = ["这本书很好看，推荐", "质量太差了", "一般", "物流很快，包装完好"]
LONG = "".join(REVIEWS) * 6  # about 140 characters: several windows of 16 or 48 tokens
# each of these is empty to BERT: the tokenizer gives [CLS] [SEP] and nothing else
NOTHING = ["\u200b\u200b", "\u00ad", "\ufeff", "\x01\x02", "\u200b \u2060\ufeff"]
CHARS = sorted({c for text in REVIEWS for c in text}) + [chr(c) for c in range(33, 127)]
VOCAB = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *CHARS])}
LABELS = {"num_labels": 2, "id2label": {0: "neg", 1: "pos"}, "label2id": {"neg": 0, "pos": 1}}


def make(folder, model_class, *, model_max_length=64, max_position_embeddings=128, fill=None, **config):
    """A model folder: a tiny random `model_class` and a character vocabulary; fill: {weight name: value}."""
    Tokenizer.from_vocab(VOCAB, model_max_length=model_max_length).save_pretrained(folder)
    torch.manual_seed(0)
    model = model_class(tiny(vocab_size=len(VOCAB), max_position_embeddings=max_position_embeddings, **config)).eval()
    with torch.no_grad():
        for name, value in (fill or {}).items():
            model.get_parameter(name).fill_(value)
    model.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    nan = {"embeddings.word_embeddings.weight": math.nan}
    overflow = {"encoder.layer.1.output.dense.weight": 3e38}  # finite weights; the hidden states overflow
    return {
        "clf": make(root / "clf", BertForSequenceClassification, **LABELS),
        "clf16": make(root / "clf16", BertForSequenceClassification, model_max_length=16, **LABELS),
        "clf-nan": make(
            root / "clf-nan", BertForSequenceClassification, fill={"bert." + k: v for k, v in nan.items()}, **LABELS
        ),
        # the pooler saturates (tanh -> 1), the classifier's huge weights make logits of inf
        "clf-inf": make(
            root / "clf-inf",
            BertForSequenceClassification,
            fill={"bert.pooler.dense.bias": 1e30, "classifier.weight": 3e38},
            **LABELS,
        ),
        "qa": make(root / "qa", BertForQuestionAnswering),
        "bert": make(root / "bert", BertModel),
        "bert-nan": make(root / "bert-nan", BertModel, fill=nan),
        "bert-inf": make(root / "bert-inf", BertModel, fill=overflow),
        "mlm-nan": make(root / "mlm-nan", BertForMaskedLM, fill={"bert." + k: v for k, v in nan.items()}),
    }


def run(argv, capsys):
    """(exit code, stdout, stderr) of `bertkit ...` in this process."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line_error(code, err, *words):
    assert code == 2 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], err


# ----- one rule for empty text -----------------------------------------------------------------------
@pytest.mark.parametrize("strip_accents", [False, True])
def test_is_empty_text_is_the_tokenizers_answer_for_every_character(strip_accents):
    from bertkit.text import is_empty_text

    tok = Tokenizer.from_vocab(VOCAB, strip_accents=strip_accents)
    chars = [chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF] + ["\U000e0001", "\U000f0000", "\U0001f600"]
    wrong = [c for c in chars if is_empty_text(c, tok) != (not tok.tokenize(c))]
    assert not wrong, [hex(ord(c)) for c in wrong[:10]]
    for text in NOTHING + ["", " \t\n"]:
        assert is_empty_text(text) and is_empty_text(text, tok) and not tok.tokenize(text)
    assert not is_empty_text("a\u200b") and not is_empty_text("\u200b。") and not is_empty_text("\u200b好")
    # combining accents alone: nothing for a tokenizer that strips accents, a token ([UNK]) for one that does not
    assert is_empty_text("\u0301\u0308", tok) == strip_accents and not is_empty_text("\u0301")


def test_predict_gives_the_empty_row_for_text_with_nothing_in_it(dirs, tmp_path, capsys):
    code, out, err = run(["predict", "--model", dirs["clf"], *NOTHING, REVIEWS[0], ""], capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows[: len(NOTHING)] == [{"text": t, "label": None, "error": "empty input"} for t in NOTHING]
    assert rows[-2]["label"] in ("neg", "pos") and rows[-1]["error"] == "empty input"
    source = tmp_path / "in.csv"  # a CSV cell of zero-width spaces keeps its place as an empty row
    source.write_text(f"text\n{REVIEWS[1]}\n\u200b\u200b\n", encoding="utf-8")
    code, out, err = run(["predict", "--model", dirs["clf"], "--file", str(source)], capsys)
    assert [json.loads(line).get("error") for line in out.splitlines()] == [None, "empty input"], err
    # every required field counts: a question without context is empty
    code, out, err = run(["predict", "--model", dirs["qa"], "一般\t\u200b", "一般\t质量太差了"], capsys)
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows[0] == {"id": "0", "answer": None, "error": "empty input"} and "error" not in rows[1], err


def test_evaluate_refuses_an_example_with_nothing_in_it(dirs, tmp_path, capsys):
    data = tmp_path / "dev.jsonl"
    data.write_text(
        "".join(
            json.dumps({"text": t, "label": label}, ensure_ascii=False) + "\n"
            for t, label in [(REVIEWS[0], "pos"), ("\u200b\ufeff", "neg"), (REVIEWS[1], "neg")]
        ),
        encoding="utf-8",
    )
    code, _, err = run(["evaluate", "--model", dirs["clf"], "--data", str(data)], capsys)
    one_line_error(code, err, f"{data}: line 2: field 'text' is empty")  # the reader: is_empty_text


def test_serve_answers_text_with_nothing_in_it_as_empty(dirs):
    from bertkit.serve.engine import Engine, InputProblem

    engine = Engine(dirs["clf"])
    with pytest.raises(InputProblem) as refused:
        engine.rows_for_embed([REVIEWS[0], "\u200b"], truncate=True)
    assert (refused.value.status, refused.value.kind) == (422, "empty_input") and "inputs[1]" in str(refused.value)
    prepared = engine.rows_for_predict([REVIEWS[0], "\u00ad", {"text": "\ufeff"}], truncate=True)
    assert prepared.empty == [1, 2]
    rows = engine.predictions(prepared, engine.run(prepared.key, prepared.rows))
    assert rows[1:] == [
        {"text": "\u00ad", "label": None, "error": "empty input"},
        {"text": "\ufeff", "label": None, "error": "empty input"},
    ]
    assert rows[0]["label"] in ("neg", "pos")


def test_encode_refuses_text_with_nothing_in_it_and_embed_keeps_its_row(dirs, tmp_path, capsys):
    """The Python API refuses an empty text; `bertkit embed` keeps its row without a vector (NaN), as `bertkit
    predict` keeps an "empty input" row: the same rows for the same file."""
    encoder = Encoder.from_pretrained(dirs["bert"])
    for texts, index in (([""], 0), ([REVIEWS[0], "\u200b"], 1), ([REVIEWS[0], " \x01 "], 1)):
        with pytest.raises(BertkitError, match=rf"texts\[{index}\] is empty"):
            encoder.encode(texts)
    with pytest.raises(BertkitError, match=r"texts\[0\] is empty"):
        encode(dirs["bert"], "\ufeff")
    out = tmp_path / "v.npy"
    code, _, err = run(["embed", "--model", dirs["bert"], REVIEWS[0], "\u200b", "--output", str(out)], capsys)
    assert code == 0 and "1 empty input(s) (text 2) kept as NaN rows" in err, err
    assert np.isnan(np.load(out)).all(1).tolist() == [False, True]
    source = tmp_path / "in.txt"
    source.write_text(f"{REVIEWS[0]}\n\u00ad\n", encoding="utf-8")
    code, _, err = run(["embed", "--model", dirs["bert"], "--file", str(source), "--output", str(out)], capsys)
    assert code == 0 and "1 empty input(s) (--file line 2) kept as NaN rows" in err, err
    assert np.isnan(np.load(out)).all(1).tolist() == [False, True]


# ----- NaN / Infinity: weights at load, outputs of every forward pass -------------------------------------
def test_check_weights_names_the_first_tensor_that_is_not_finite(tmp_path):
    from bertkit.inference import check_weights

    torch.manual_seed(0)
    model = BertModel(tiny())
    check_weights(model, "ok")  # finite: nothing to say
    with torch.no_grad():
        model.encoder.layer[1].attention.self.key.bias[3] = math.inf
        model.encoder.layer[1].output.dense.weight[0, 0] = math.nan
    with pytest.raises(
        NonFiniteError,
        match=r"^runs/x: the weight tensor encoder\.layer\.1\.attention\.self\.key"
        r"\.bias is not finite",
    ):
        check_weights(model, "runs/x")


@pytest.mark.parametrize(
    "argv",
    [
        ["embed", "--model", "bert-nan", "好", "--output", "OUT"],
        ["embed", "--model", "bert-nan", "好", "--output", "OUT", "--quantize", "int8"],
        ["embed", "--model", "bert-nan", "好", "--output", "OUT", "--quantize", "bf16"],
        ["predict", "--model", "clf-nan", "好", "--output", "OUT", "--quantize", "int8"],
        ["evaluate", "--model", "clf-nan", "--data", "DATA", "--json", "OUT", "--quantize", "int8"],
        ["explain", "mlm-nan", "--mlm", "很[MASK]"],
    ],
    ids=["embed", "embed-int8", "embed-bf16", "predict-int8", "evaluate-int8", "explain"],
)
def test_every_command_refuses_nan_weights_in_one_line(argv, dirs, tmp_path, capsys):
    data = tmp_path / "dev.jsonl"
    data.write_text(json.dumps({"text": REVIEWS[0], "label": "pos"}, ensure_ascii=False) + "\n", encoding="utf-8")
    out = tmp_path / ("out.npy" if argv[0] == "embed" else "out.json")
    argv = [{"OUT": str(out), "DATA": str(data)}.get(a, dirs.get(a, a)) for a in argv]
    code, stdout, err = run(argv, capsys)
    folder = next(a for a in argv if a in dirs.values())
    one_line_error(code, err, folder, "word_embeddings.weight is not finite")
    assert not out.exists() and not stdout


def test_vectors_that_are_not_finite_are_refused(dirs, tmp_path, capsys):
    """Finite weights whose hidden states overflow: the vectors are checked (embed, encode, serve's /embed)."""
    out = tmp_path / "v.jsonl"
    code, _, err = run(["embed", "--model", dirs["bert-inf"], REVIEWS[0], "--output", str(out)], capsys)
    one_line_error(code, err, dirs["bert-inf"], "vectors are not finite")
    assert not out.exists()
    with pytest.warns(BertkitWarning, match="is not finite"):  # from_pretrained warns, and returns the model
        model = BertModel.from_pretrained(dirs["bert-nan"])  # a model object: no folder, no weight check
    with pytest.raises(NonFiniteError, match="^the model: the model's vectors are not finite"):
        encode(model, REVIEWS, tokenizer=dirs["bert-nan"])


@pytest.mark.parametrize(
    "name, quantize, message",
    [
        ("clf-nan", None, "word_embeddings.weight is not finite"),
        ("clf-nan", "int8", "word_embeddings.weight is not finite"),
        ("clf-nan", "bf16", "word_embeddings.weight is not finite"),
        ("mlm-nan", None, "word_embeddings.weight is not finite"),
        ("bert-nan", None, "word_embeddings.weight is not finite"),
        ("bert-inf", None, "vectors are not finite"),  # finite weights: the start-up probe finds it
        ("clf-inf", None, "outputs are not finite"),
    ],
)
def test_serve_does_not_start_on_a_model_that_is_not_finite(name, quantize, message, dirs):
    from bertkit.serve.engine import Engine

    with pytest.raises(NonFiniteError, match=message) as refused:
        Engine(dirs[name], quantize=quantize)
    assert str(refused.value).startswith(dirs[name]) and "\n" not in str(refused.value)


@pytest.mark.parametrize("name", ["clf-nan", "mlm-nan", "bert-nan"])
def test_serve_refuses_nan_weights_in_one_line_and_no_warning(name, dirs, capsys):
    """The command's refusal is the only word about it: the loaders take the LoadReport (output_loading_info)
    and run check_weights themselves, so from_pretrained's NaN warning is not said too."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        code, stdout, err = run(["serve", "--model", dirs[name], "--port", "0"], capsys)
    one_line_error(code, err, dirs[name], "word_embeddings.weight is not finite")
    assert err.count("is not finite") == 1 and not stdout, err
    assert not [w for w in seen if "not finite" in str(w.message)], [str(w.message) for w in seen]


def test_from_pretrained_warns_once_of_weights_that_are_not_finite(dirs):
    """The Python API loads such a model (to look into it) with one BertkitWarning naming the tensor, at the
    caller's line: the check every command refuses it by (finite.check_weights)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        model = BertForMaskedLM.from_pretrained(dirs["mlm-nan"])
    said = [w for w in seen if issubclass(w.category, BertkitWarning)]
    assert len(said) == 1 and said[0].filename == __file__, [str(w.message) for w in seen]
    assert str(said[0].message).startswith(
        f"{dirs['mlm-nan']}: the weight tensor bert.embeddings.word_embeddings.weight is not finite"
    )
    assert math.isnan(model.bert.embeddings.word_embeddings.weight.sum().item())  # loaded as it is
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BertModel.from_pretrained(dirs["bert"])  # finite: nothing to say
        BertForMaskedLM.from_pretrained(dirs["mlm-nan"], output_loading_info=True)  # the caller decides (commands)


# ----- embed --file reads rows as predict --file does --------------------------------------------------
@pytest.mark.parametrize(
    "name, content",
    [
        ("in.csv", 'id,text,label\n1,"这本书很好看，推荐",pos\n2,质量太差了,neg\n'),
        ("in.tsv", "text\tlabel\n这本书很好看，推荐\tpos\n质量太差了\tneg\n"),
        ("in.jsonl", '{"text": "这本书很好看，推荐", "label": "pos"}\n{"text": "质量太差了", "label": "neg"}\n'),
    ],
)
def test_embed_file_reads_the_text_column_of_csv_tsv_and_jsonl(name, content, dirs, tmp_path, capsys):
    source, out = tmp_path / name, tmp_path / "v.npy"
    source.write_text(content, encoding="utf-8")
    code, _, err = run(["embed", "--model", dirs["bert"], "--file", str(source), "--output", str(out)], capsys)
    assert code == 0, err
    np.testing.assert_allclose(np.load(out), encode(dirs["bert"], REVIEWS[:2]), atol=1e-6)
    renamed = tmp_path / ("renamed" + source.suffix)
    renamed.write_text(content.replace("text", "review"), encoding="utf-8")
    code, _, err = run(
        ["embed", "--model", dirs["bert"], "--file", str(renamed), "--output", str(out), "--text-field", "review"],
        capsys,
    )
    assert code == 0, err
    np.testing.assert_allclose(np.load(out), encode(dirs["bert"], REVIEWS[:2]), atol=1e-6)
    code, _, err = run(
        ["embed", "--model", dirs["bert"], "--file", str(renamed), "--output", str(tmp_path / "x.npy")], capsys
    )
    one_line_error(code, err, str(renamed), "'text'", "--text-field")


# ----- model_max_length and --seq-len ----------------------------------------------------------------
def test_seq_len_wins_over_model_max_length_and_says_so(dirs):
    from bertkit.inference import load_task_model, with_windows
    from bertkit.tasks import TaskOptions

    loaded = load_task_model(dirs["clf16"])  # fine-tuned with 16-token windows; 128 positions
    task, tok, model = loaded.task, loaded.tokenizer, loaded.model
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default and an equal --seq-len say nothing
        assert with_windows(TaskOptions(), tok, model).seq_len == 16
        assert with_windows(TaskOptions(seq_len=16), tok, model).seq_len == 16
    with pytest.warns(BertkitWarning, match="windows of 48 tokens .* model_max_length 16"):
        opts = with_windows(TaskOptions(seq_len=48), tok, model)
    assert (opts.seq_len, opts.stride) == (48, 12)
    features = task.encode(tok, task.from_texts([LONG]), opts.seq_len, opts.stride, None, None)
    assert max(len(f.input_ids) for f in features) == 48 and len(features) > 1


def test_model_max_length_past_the_positions_or_too_short(dirs, tmp_path, capsys):
    from bertkit.inference import load_task_model, with_windows
    from bertkit.tasks import TaskOptions

    long_config = make(tmp_path / "long", BertForSequenceClassification, model_max_length=512, **LABELS)
    loaded = load_task_model(long_config)
    with pytest.warns(BertkitWarning, match="windows of 128 tokens .* model_max_length 512"):
        assert with_windows(TaskOptions(), loaded.tokenizer, loaded.model).seq_len == 128
    short = make(tmp_path / "short", BertForSequenceClassification, model_max_length=2, **LABELS)
    code, out, err = run(["predict", "--model", short, REVIEWS[0]], capsys)
    one_line_error(code, err, "model_max_length", "is 2", "--seq-len")
    assert not out
    code, out, err = run(["predict", "--model", short, REVIEWS[0], "--seq-len", "8"], capsys)
    assert code == 0 and json.loads(out)["label"] in ("neg", "pos"), err


def test_embed_cuts_long_texts_without_the_tokenizers_length_warning(dirs, caplog):
    """A fine-tuned folder (model_max_length 16) embedded: texts are cut at the encoder's limit (128 positions),
    without the tokenizer's "longer than the specified maximum ... indexing errors" warning."""
    encoder = Encoder.from_pretrained(dirs["clf16"])
    with caplog.at_level(logging.WARNING):
        vectors = encoder.encode([LONG, REVIEWS[0]])
    assert not [r for r in caplog.records if "indexing errors" in r.getMessage()]
    ids = encoder.tokenizer.encode(LONG)
    assert encoder.max_tokens == 128 and len(ids) > 128
    want = encoder.embed_ids([ids[:127] + ids[-1:]])[0]
    np.testing.assert_allclose(vectors[0], want.numpy(), atol=1e-5)
