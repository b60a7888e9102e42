"""Damage to a prepared folder, found by PretrainingData.open and `bertkit pretrain --data` before training."""

import json
import os
import shutil

import numpy as np
import pytest
from prepare_helpers import HELDOUT, SEED, E, sha256_of

from bertkit.cli import main as cli_main
from bertkit.data.dataset import FILES, PAIRS, DataError, PretrainingData
from bertkit.data.prepare import prepare
from bertkit.tokenizer import vocab_digest
from bertkit.vocab import train_vocab


@pytest.fixture
def damaged(prepared, tmp_path):
    """A fresh copy of the prepared folder, to break."""
    out = tmp_path / "data"
    shutil.copytree(prepared, out)
    return str(out)


def flip_byte(path, where=None) -> None:
    data = bytearray(open(path, "rb").read())
    at = len(data) // 2 if where is None else where
    data[at] ^= 0xFF
    open(path, "wb").write(bytes(data))


def edit_manifest(folder, change) -> None:
    path = os.path.join(folder, "manifest.json")
    manifest = json.load(open(path, encoding="utf-8"))
    change(manifest)
    open(path, "w", encoding="utf-8").write(json.dumps(manifest))


@pytest.mark.parametrize("split", ["train", "heldout"])
@pytest.mark.parametrize("key", FILES + (PAIRS,))
def test_a_flipped_byte_in_any_file_is_found(damaged, split, key):
    path = os.path.join(damaged, split, f"{key}.bin")
    flip_byte(path)
    with pytest.raises(DataError) as caught:
        PretrainingData.open(damaged)
    assert str(caught.value).startswith(f"{path}: its content changed since it was written (sha256 ")
    assert f"--out {damaged} --overwrite" in str(caught.value)


def test_a_cut_or_grown_file_is_found_even_without_verify(damaged):
    ids = os.path.join(damaged, "train", "ids.bin")
    size = os.path.getsize(ids)
    os.truncate(ids, size - 2)
    for verify in (True, False):
        cut = f"{ids}: {size - 2:,} bytes where the manifest says {size:,} (cut short)"
        with pytest.raises(DataError, match="^" + E(cut)):
            PretrainingData.open(damaged, verify=verify)
    words = os.path.join(damaged, "heldout", "word_starts.bin")
    with open(words, "ab") as fh:
        fh.write(b"\0")
    os.truncate(ids, size)  # back to its size (zeros at the end: only the hash can tell)
    with pytest.raises(DataError, match="^" + E(words) + r": .* \(grown\)"):
        PretrainingData.open(damaged, verify=False)


@pytest.mark.parametrize("key", FILES + (PAIRS,))
def test_a_deleted_file_is_named(damaged, key):
    path = os.path.join(damaged, "heldout", f"{key}.bin")
    os.remove(path)
    with pytest.raises(DataError, match="^" + E(f"{path}: missing; ")):
        PretrainingData.open(damaged, verify=False)


def changed(keys: str, new):
    """A manifest edit: the value at "a/b/c" becomes new(old value); new=None deletes it."""
    *parents, last = keys.split("/")

    def change(manifest):
        for key in parents:
            manifest = manifest[key]
        if new is None:
            del manifest[last]
        else:
            manifest[last] = new(manifest[last])

    return change


def test_a_manifest_that_does_not_match_its_files(damaged):
    ids = os.path.join(damaged, "train", "ids.bin")
    manifest = os.path.join(damaged, "manifest.json")
    original = open(manifest, "rb").read()
    cases = [
        # sizes the counts cannot make: the manifest is named, before any file is read
        ("splits/train/files/ids/bytes", lambda _: 10, f"{manifest}: train/ids.bin is 10 bytes where "),
        ("splits/train/tokens", lambda n: n - 1, f"{manifest}: train/ids.bin is "),
        ("splits/train/tokens", lambda n: n + 1, f"{manifest}: train/ids.bin is "),
        ("tokenizer/vocab_size", lambda _: 1000, f"{manifest}: heldout/token_counts.bin is "),
        ("splits/train/pairs", lambda n: n - 1, f"{manifest}: train/pairs.bin is "),
        ("splits/heldout/pairs", None, f"{manifest}: incomplete manifest (missing 'pairs')"),
        # counts and sizes that agree with each other, not with the files
        ("splits/train/files/ids/sha256", lambda _: "0" * 64, f"{ids}: its content changed"),
        ("splits/heldout/files/ids", None, f"{manifest}: incomplete manifest (missing 'ids')"),
        ("splits/train", None, f"{manifest}: no train split"),
        ("tokenizer", None, f"{manifest}: incomplete manifest (missing 'tokenizer')"),
    ]
    for keys, new, message in cases:
        edit_manifest(damaged, changed(keys, new))
        with pytest.raises(DataError) as caught:
            PretrainingData.open(damaged)
        assert str(caught.value).startswith(message), (keys, str(caught.value))
        open(manifest, "wb").write(original)
    assert PretrainingData.open(damaged).manifest == json.loads(original)  # the original is fine


@pytest.mark.parametrize("delta", [-1, 1])
def test_a_document_count_that_does_not_match_documents_bin(damaged, delta):
    edit_manifest(damaged, changed("splits/train/documents", lambda n: n + delta))
    with pytest.raises(DataError, match="documents"):
        PretrainingData.open(damaged)


def test_an_ids_dtype_that_does_not_match_the_vocabulary(damaged):
    edit_manifest(damaged, changed("tokenizer/ids_dtype", lambda _: "uint32"))
    with pytest.raises(DataError, match="manifest.json|ids"):
        PretrainingData.open(damaged)


def test_ids_outside_the_vocabulary_and_offsets_out_of_order_are_found_behind_a_matching_hash(damaged):
    """The checks beyond the hash: a folder rewritten with its manifest updated to match."""
    ids_path = os.path.join(damaged, "heldout", "ids.bin")
    ids = np.fromfile(ids_path, dtype=np.uint16)
    ids[5] = 1500  # the first id past the vocabulary
    ids.tofile(ids_path)
    edit_manifest(damaged, changed("splits/heldout/files/ids/sha256", lambda _: sha256_of(ids_path)))
    with pytest.raises(DataError, match="^" + E(f"{ids_path}: holds id 1500, outside the vocabulary of 1500")):
        PretrainingData.open(damaged)
    ids[5] = 1499
    ids.tofile(ids_path)
    edit_manifest(damaged, changed("splits/heldout/files/ids/sha256", lambda _: sha256_of(ids_path)))
    PretrainingData.open(damaged)  # the last id of the vocabulary is fine
    docs_path = os.path.join(damaged, "train", "documents.bin")
    offsets = np.fromfile(docs_path, dtype=np.int64)
    offsets[[3, 4]] = offsets[[4, 3]]
    offsets.tofile(docs_path)
    edit_manifest(damaged, changed("splits/train/files/documents/sha256", lambda _: sha256_of(docs_path)))
    with pytest.raises(DataError, match="^" + E(f"{docs_path}: document offsets out of order")):
        PretrainingData.open(damaged)


def test_a_missing_garbled_or_foreign_manifest_is_named(damaged, tmp_path):
    manifest = os.path.join(damaged, "manifest.json")
    original = open(manifest, "rb").read()
    open(manifest, "wb").write(original[: len(original) // 2])
    with pytest.raises(DataError, match="^" + E(f"{manifest}: not a readable manifest")):
        PretrainingData.open(damaged)
    open(manifest, "wb").write(b"\xff\xfe not utf-8")
    with pytest.raises(DataError, match="^" + E(f"{manifest}: not a readable manifest")):
        PretrainingData.open(damaged)
    open(manifest, "w").write("[1, 2]")
    with pytest.raises(DataError, match="^" + E(f"{manifest}: not a JSON object")):
        PretrainingData.open(damaged)
    open(manifest, "w").write(json.dumps({**json.loads(original), "format": "something-else"}))
    with pytest.raises(DataError, match="^" + E(f"{manifest}: not a bertkit dataset manifest")):
        PretrainingData.open(damaged)
    open(manifest, "w").write(json.dumps({**json.loads(original), "version": 2}))
    with pytest.raises(DataError, match="^" + E(f"{manifest}: format version 2, this bertkit reads version 1")):
        PretrainingData.open(damaged)
    os.remove(manifest)
    with pytest.raises(DataError, match="^" + E(f"{damaged}: not a prepared dataset (no manifest.json); make one")):
        PretrainingData.open(damaged)
    # a half-written folder beside it: the message says the preparation did not finish
    os.makedirs(os.path.join(os.path.dirname(damaged), ".data.partial"))
    with pytest.raises(DataError, match="no manifest.json\\); a bertkit prepare into it did not finish"):
        PretrainingData.open(damaged)
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"\xff\xd8")
    with pytest.raises(DataError, match="^" + E(f"{other}: not a prepared dataset")):
        PretrainingData.open(str(other))
    with pytest.raises(DataError, match="^" + E(f"{tmp_path / 'nowhere'}: no such folder")):
        PretrainingData.open(str(tmp_path / "nowhere"))


def test_the_advice_of_a_damage_error_repairs_the_folder(damaged, corpus_file, tokenizer_dir):
    flip_byte(os.path.join(damaged, "train", "ids.bin"))
    with pytest.raises(DataError, match="--overwrite"):
        PretrainingData.open(damaged)
    prepare(corpus_file, tokenizer_dir, damaged, heldout=HELDOUT, seed=SEED, workers=1, overwrite=True)
    PretrainingData.open(damaged)


def pretrain(data, out, *extra) -> list[str]:
    return [
        "pretrain",
        "--data",
        data,
        "--out",
        str(out),
        "--model-config",
        "tiny",
        "--seq-len",
        "32",
        "--batch-size",
        "4",
        "--steps",
        "2",
        "--eval-every",
        "0",
        "--save-every",
        "0",
        "--log-every",
        "1",
        "--no-progress",
        "--device",
        "cpu",
        *extra,
    ]


def test_pretrain_refuses_another_vocabulary_and_wwm_without_jieba_words(prepared, tmp_path, docs, capsys):
    other = tmp_path / "other_tok"
    other_tok = train_vocab(texts=docs[:300], vocab_size=1200)
    other_tok.save_pretrained(other)
    theirs = json.load(open(os.path.join(prepared, "manifest.json")))["tokenizer"]["fingerprint"]
    assert theirs != vocab_digest(other_tok)
    run = tmp_path / "run"
    assert cli_main(pretrain(prepared, run, "--tokenizer", str(other))) == 2
    err = capsys.readouterr().err
    assert f"bertkit pretrain: error: --data {prepared}: its token ids come from another vocabulary" in err
    assert f"(fingerprint {theirs}) than --tokenizer's ({vocab_digest(other_tok)})" in err
    assert not (run / "metrics.jsonl").exists() and not (run / "checkpoint").exists()
    assert cli_main(pretrain(prepared, tmp_path / "run_wwm", "--wwm")) == 2
    err = capsys.readouterr().err
    assert f"--wwm: {prepared} was prepared without --wwm" in err
    assert not (tmp_path / "run_wwm" / "metrics.jsonl").exists()
    # a damaged folder stops pretrain the same way, naming the file
    broken = tmp_path / "broken"
    shutil.copytree(prepared, broken)
    os.truncate(broken / "heldout" / "ids.bin", 4)
    assert cli_main(pretrain(str(broken), tmp_path / "run_broken")) == 2
    assert f"{broken / 'heldout' / 'ids.bin'}: 4 bytes where the manifest says" in capsys.readouterr().err
    # the control: the data's own tokenizer (given or not) trains
    assert cli_main(pretrain(prepared, tmp_path / "run_ok", "--tokenizer", os.path.join(prepared, "tokenizer"))) == 0
    assert len([json.loads(line) for line in open(tmp_path / "run_ok" / "metrics.jsonl")]) >= 2
