"""The rules every command that writes a folder follows (bertkit/outfolder.py), here through `bertkit tokenizer
train --out` (prepare's cases are in test_prepare.py, pretrain's and finetune's in test_runfolder.py)."""

import os
import re

import pytest

from bertkit.cli import main
from bertkit.errors import TrainingError
from bertkit.outfolder import check_out, is_inside, move_aside
from bertkit.tokenizer import Tokenizer


def snapshot(folder) -> dict:
    return {
        os.path.relpath(os.path.join(d, f), folder): open(os.path.join(d, f), "rb").read()
        for d, _, files in os.walk(folder)
        for f in files
    }


def train(corpus, out, *flags) -> int:
    return main(["tokenizer", "train", "--corpus", str(corpus), "--vocab-size", "200", "--out", str(out), *flags])


@pytest.fixture
def corpus(tmp_path, corpus_file):
    """200 People's Daily paragraphs: enough for a 200-entry vocabulary, quick to learn."""
    path = tmp_path / "corpus.txt"
    path.write_text("".join(open(corpus_file, encoding="utf-8").readlines()[:200]), encoding="utf-8")
    return path


def test_tokenizer_train_refuses_to_replace_a_vocabulary_unless_asked_and_keeps_it_aside(tmp_path, corpus, capsys):
    """`tokenizer train --out DIR` over an existing vocabulary used to replace it without a word."""
    out = tmp_path / "tok"
    assert train(corpus, out) == 0
    before = snapshot(out)
    capsys.readouterr()
    assert train(corpus, out, "--vocab-size", "150") == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(
            f"bertkit tokenizer: error: --out {out}: already holds a vocabulary (special_tokens_map.json,"
            " tokenizer.json, tokenizer_config.json, vocab.txt); a model trained with it would no longer "
            "match a new one: pass --overwrite"
        )
        and err.count("\n") == 1
    )
    assert snapshot(out) == before and sorted(os.listdir(tmp_path)) == ["corpus.txt", "tok"]
    assert train(corpus, out, "--vocab-size", "150", "--overwrite") == 0
    assert Tokenizer.from_pretrained(out).vocab_size <= 150
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("tok.replaced-")]
    assert len(aside) == 1 and snapshot(aside[0]) == before
    assert f"--overwrite: moved the earlier vocabulary in {out} (" in capsys.readouterr().err


def test_tokenizer_train_never_replaces_a_vocabulary_that_sits_with_other_files(tmp_path, corpus, capsys):
    """A model folder (its weights beside its vocabulary) or a user's files: --overwrite refuses, naming them."""
    out = tmp_path / "model"
    assert train(corpus, out) == 0
    (out / "model.safetensors").write_bytes(b"weights")
    (out / "notes.txt").write_text("keep me")
    before = snapshot(out)
    capsys.readouterr()
    assert train(corpus, out, "--overwrite") == 2
    err = capsys.readouterr().err
    assert f"--out {out}: holds files that are not a vocabulary (model.safetensors, notes.txt)" in err
    assert snapshot(out) == before and sorted(os.listdir(tmp_path)) == ["corpus.txt", "model"]


def test_tokenizer_train_overwrite_refuses_a_folder_holding_its_corpus_or_the_working_directory(
    tmp_path, corpus, monkeypatch, capsys
):
    out = tmp_path / "tok"
    assert train(corpus, out) == 0
    inside = out / "corpus.txt"
    inside.write_bytes(corpus.read_bytes())
    before = snapshot(out)
    capsys.readouterr()
    assert train(inside, out, "--overwrite") == 2
    assert f"--corpus {inside} is inside --out {out}, and --overwrite would move it aside" in capsys.readouterr().err
    (out / "corpus.txt").unlink()
    monkeypatch.chdir(out)
    assert train(corpus, ".", "--overwrite") == 2
    assert "--out .: is the current directory or holds it" in capsys.readouterr().err
    assert len(snapshot(out)) == len(before) - 1 and sorted(os.listdir(tmp_path)) == ["corpus.txt", "tok"]


def test_tokenizer_train_into_a_new_or_unrelated_folder_writes_without_moving_anything(tmp_path, corpus):
    """Nothing to replace: no --overwrite needed, the user's files stay where they are."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert train(corpus, out) == 0
    assert sorted(os.listdir(out)) == [
        "notes.txt",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert train(corpus, a_file) == 2 and a_file.read_text() == "x"


def test_check_out_and_move_aside(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    assert check_out(str(out), TrainingError, overwrite=True, inputs={}, ours=lambda n: True, what="a run") == []
    out.mkdir()
    (out / "a").write_text("1")
    (out / ".lock").write_text("me")
    assert check_out(
        str(out), TrainingError, overwrite=False, inputs={}, ours=lambda n: False, what="a run", keep=(".lock",)
    ) == ["a"]  # without --overwrite nothing is replaced: no refusal here
    with pytest.raises(TrainingError, match=re.escape(f"--out {out}: holds files that are not a run (a)")):
        check_out(
            str(out), TrainingError, overwrite=True, inputs={}, ours=lambda n: False, what="a run", keep=(".lock",)
        )
    with pytest.raises(TrainingError, match=re.escape(f"--x {out / 'a'} is inside --out {out}")):
        check_out(
            str(out), TrainingError, overwrite=True, inputs=[("--x", str(out / "a"))], ours=lambda n: True, what="a run"
        )
    monkeypatch.chdir(out)
    assert check_out(str(out), TrainingError, overwrite=False, inputs={}, ours=lambda n: True, what="a run") == [
        ".lock",
        "a",
    ]
    with pytest.raises(TrainingError, match="is the current directory or holds it"):
        check_out(
            str(tmp_path), TrainingError, overwrite=False, inputs={}, ours=lambda n: True, what="a run", renamed=True
        )
    monkeypatch.chdir(tmp_path)
    moved = move_aside(str(out), keep=(".lock",), what="the earlier run")
    assert os.listdir(out) == [".lock"] and os.listdir(moved) == ["a"] and os.path.dirname(moved) == str(tmp_path)
    assert re.fullmatch(r"out\.replaced-\d{8}-\d{6}", os.path.basename(moved))
    assert move_aside(str(out)) != moved and not out.exists()  # a second one gets a name of its own
    assert is_inside(str(tmp_path / "x" / "y"), str(tmp_path)) and not is_inside(str(tmp_path) + "2", str(tmp_path))
    assert "--overwrite: moved the earlier run in" in capsys.readouterr().err
