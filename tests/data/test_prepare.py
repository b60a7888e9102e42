"""`bertkit prepare` (bertkit/data/prepare.py) and the dataset folder it writes (bertkit/data/dataset.py).

Real People's Daily text and a vocabulary learned on it (conftest's corpus_file / tokenizer_dir, prepared once as
conftest's `prepared`). The files are read with plain numpy (prepare_helpers.py) and compared with the tokenizer
run document by document: the test does not trust the reader it also checks.

Fast: the format round trip (uint16 and uint32 ids), reuse / overwrite / locks, the command in process. Slow: the
CLI in a subprocess. Damage to a folder is in test_dataset_damage.py; several workers, kill -9 and the peak memory
in test_prepare_workers.py.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter

import numpy as np
import pytest
from prepare_helpers import (
    HELDOUT,
    SEED,
    TIMEOUT,
    E,
    assert_same_folders,
    check_round_trip,
    lines_of,
    raw_split,
    sha256_of,
    siblings,
    split_docs,
)

from bertkit.cli import main as cli_main
from bertkit.data import prepare as prepare_module
from bertkit.data.corpus import is_heldout
from bertkit.data.dataset import FILES, PAIR_PLAN, PAIRS, DataError, PretrainingData, ids_dtype
from bertkit.data.prepare import prepare
from bertkit.text import CJK_IDEOGRAPHS, CLOSERS, SENTENCE_FINAL
from bertkit.tokenizer import Tokenizer, vocab_digest
from bertkit.vocab import train_vocab


def is_cjk(char: str) -> bool:
    return len(char) == 1 and any(lo <= ord(char) <= hi for lo, hi in CJK_IDEOGRAPHS)


def snapshot(folder) -> dict:
    """Every file and folder under `folder` (and itself): bytes (files) and mtime."""
    out = {".": (None, os.stat(folder).st_mtime_ns)}
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(root, name)
            out[os.path.relpath(path, folder)] = (
                open(path, "rb").read() if os.path.isfile(path) else None,
                os.stat(path).st_mtime_ns,
            )
    return out


# ----- the format ---------------------------------------------------------------------------------
def test_every_document_round_trips_through_the_files(prepared, docs, tok):
    raw = check_round_trip(prepared, docs, tok)
    splits = split_docs(docs)
    assert len(splits["heldout"]) > 30 and len(splits["train"]) > 500  # both splits hold real text
    # the marks, checked without encode_documents: in WordPiece mode a word starts at every token but a "##"
    # piece; a sentence starts at each document's first token, after a "。" and never right after a CJK
    # character (the corpus is one paragraph per line: no line breaks inside a document)
    for split, data in raw.items():
        tokens = np.array(tok.convert_ids_to_tokens(data["ids"].tolist()), dtype=object)
        first = np.zeros(len(tokens), dtype=bool)
        first[data["offsets"][:-1]] = True
        continues = np.array([t.startswith("##") and len(t) > 2 for t in tokens])
        assert continues.sum() > 10  # numbers and latin words give "##" pieces
        assert np.array_equal(data["words"], first | ~continues)
        assert data["sentences"][first].all()
        previous = np.concatenate([[""], tokens[:-1]])
        single_cjk = np.array([is_cjk(t) for t in tokens])
        after_stop = ~first & (previous == "。") & single_cjk
        assert after_stop.sum() > len(tokens) / 200 and data["sentences"][after_stop].all()
        after_cjk = ~first & np.concatenate([[False], single_cjk[:-1]]) & single_cjk
        assert after_cjk.sum() > len(tokens) / 2 and not data["sentences"][after_cjk].any()
        ends = np.isin(tokens, list(SENTENCE_FINAL | CLOSERS))
        assert data["sentences"].sum() > data["offsets"].size  # sentences within documents, too
        assert not data["sentences"][ends & ~first].any()  # a mark that ends a sentence never starts one


def test_the_manifest_describes_the_sources_the_splits_and_every_file(prepared, docs, tok, corpus_file):
    manifest = json.load(open(os.path.join(prepared, "manifest.json"), encoding="utf-8"))
    assert manifest["format"] == "bertkit-pretraining-data" and manifest["version"] == 1
    assert manifest["tokenizer"] == {"vocab_size": 1500, "fingerprint": vocab_digest(tok), "ids_dtype": "uint16"}
    assert tok.vocab_size == 1500
    assert manifest["sources"] == [
        {"name": corpus_file, "bytes": os.path.getsize(corpus_file), "sha256": sha256_of(corpus_file)}
    ]
    assert manifest["options"] == {
        "doc_sep": "line",
        "text_field": "text",
        "words": "wordpiece",
        "heldout": HELDOUT,
        "seed": SEED,
        "pairs": {"seq_len": 128, "short_seq_prob": 0.1},
    }  # --nsp-seq-len's default
    assert manifest["documents_read"] == len(docs) == 600 and manifest["empty_documents"] == 0
    assert manifest["text_bytes"] == sum(len(d.encode("utf-8")) for d in docs)
    for split, texts in split_docs(docs).items():
        info = manifest["splits"][split]
        assert info["documents"] == len(texts)
        assert info["tokens"] == sum(len(tok.encode(t, add_special_tokens=False)) for t in texts)
        assert sorted(info["files"]) == sorted(FILES + (PAIRS,))
        assert info["files"][PAIRS]["bytes"] == info["pairs"] * PAIR_PLAN.itemsize and info["pairs"] > 0.5 * len(texts)
        for key, entry in info["files"].items():
            path = os.path.join(prepared, split, entry["name"])
            assert entry["name"] == f"{key}.bin"
            assert entry["bytes"] == os.path.getsize(path) and entry["sha256"] == sha256_of(path), path
    assert sorted(os.listdir(prepared)) == ["heldout", "manifest.json", "tokenizer", "train"]
    # the tokenizer travels with the data: the same vocabulary, the same ids
    saved = Tokenizer.from_pretrained(os.path.join(prepared, "tokenizer"))
    assert saved.get_vocab() == tok.get_vocab() and vocab_digest(saved) == vocab_digest(tok)
    assert [saved.encode(d) for d in docs[:20]] == [tok.encode(d) for d in docs[:20]]


def test_disk_holds_two_and_a_quarter_bytes_per_token(prepared):
    manifest = json.load(open(os.path.join(prepared, "manifest.json"), encoding="utf-8"))
    for split in ("train", "heldout"):
        tokens = manifest["splits"][split]["tokens"]
        size = {key: os.path.getsize(os.path.join(prepared, split, f"{key}.bin")) for key in FILES}
        per_token = (size["ids"] + size["word_starts"] + size["sentence_starts"]) / tokens
        assert size["ids"] == 2 * tokens and size["word_starts"] == size["sentence_starts"] == (tokens + 7) // 8
        assert per_token <= 3 and per_token <= 2.25 + 2 / tokens, per_token  # 2 for the id, 2 bits of marks
        assert size["documents"] == 8 * (manifest["splits"][split]["documents"] + 1)
        assert size["token_counts"] == 8 * 1500


def test_pretraining_data_maps_what_the_files_hold(prepared, tok):
    data = PretrainingData.open(prepared)
    assert data.tokenizer_dir == os.path.join(prepared, "tokenizer")
    for name in ("train", "heldout"):
        raw, split = raw_split(prepared, name, np.uint16), data.splits[name]
        assert split.ids.dtype == np.uint16 and np.array_equal(split.ids, raw["ids"])
        assert np.array_equal(split.offsets, raw["offsets"]) and split.documents == len(raw["offsets"]) - 1
        assert np.array_equal(split.token_counts, raw["counts"])
        for start, end in ((0, split.tokens), (3, 20), (13, 14), (7, 8), (split.tokens - 11, split.tokens)):
            assert np.array_equal(split.word_starts(start, end), raw["words"][start:end])
            assert np.array_equal(split.sentence_starts(start, end), raw["sentences"][start:end])
    assert data.fingerprint == PretrainingData.open(prepared, verify=False).fingerprint


def test_whole_word_marks_follow_jieba_words(tmp_path, docs, tok, corpus_file):
    jieba = pytest.importorskip("jieba")
    few = tmp_path / "few.txt"
    few.write_text("\n".join(docs[:80]) + "\n", encoding="utf-8")
    out = tmp_path / "wwm"
    summary = prepare(str(few), tok, str(out), wwm=True, heldout=HELDOUT, seed=SEED, workers=1)
    assert summary.manifest["options"]["words"] == "jieba"
    check_round_trip(str(out), docs[:80], tok, wwm=True)
    # independently: a jieba word starts a word; each next Chinese character of it, after another, does not
    raw = raw_split(str(out), "train", np.uint16)
    texts = split_docs(docs[:80])["train"]
    inside = starts = 0
    for d, text in enumerate(texts):
        ids = raw["ids"][raw["offsets"][d] : raw["offsets"][d + 1]]
        words = raw["words"][raw["offsets"][d] : raw["offsets"][d + 1]]
        encoding = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        assert encoding["input_ids"] == ids.tolist()
        at = {start: i for i, (start, end) in enumerate(encoding["offset_mapping"]) if end - start == 1}
        position = 0
        for word in jieba.cut(text):
            if is_cjk(word[0]) and position in at:
                assert words[at[position]], (d, word)
                starts += 1
            for k in range(1, len(word)):
                if is_cjk(word[k]) and is_cjk(word[k - 1]) and position + k in at and position + k - 1 in at:
                    assert not words[at[position + k]], (d, word)
                    inside += 1
            position += len(word)
    assert starts > 1000 and inside > 1000
    # and nothing else changes: WordPiece marks (every token but a "##" piece) less those inside jieba words
    first = np.zeros(len(raw["ids"]), dtype=bool)
    first[raw["offsets"][:-1]] = True
    continues = np.array([t.startswith("##") and len(t) > 2 for t in tok.convert_ids_to_tokens(raw["ids"].tolist())])
    plain_words = first | ~continues
    assert not (raw["words"] & ~plain_words).any() and plain_words.sum() - raw["words"].sum() == inside


def test_block_size_does_not_change_a_byte(prepared, tmp_path, corpus_file, tokenizer_dir, monkeypatch):
    """The reader cuts blocks of BLOCK_CHARS characters; how it cuts them must not show in the files."""
    assert len(open(corpus_file, encoding="utf-8").read()) < prepare_module.BLOCK_CHARS  # `prepared`: one block
    monkeypatch.setattr(prepare_module, "BLOCK_CHARS", 777)  # about 80 blocks: splits end at every bit position
    out = tmp_path / "blocks"
    prepare(corpus_file, tokenizer_dir, str(out), heldout=HELDOUT, seed=SEED, workers=1)
    assert_same_folders(prepared, out)


# ----- uint16 / uint32 ids ------------------------------------------------------------------------
def big_vocab(chars: list[str], size: int) -> dict:
    """Specials at 0..4, [unusedN] fillers, and the characters on the top ids (the last id is size - 1)."""
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])}
    fillers = size - len(vocab) - len(chars)
    vocab.update({f"[unused{i}]": len(vocab) + i for i in range(fillers)})
    vocab.update({c: size - len(chars) + i for i, c in enumerate(chars)})
    assert len(vocab) == size and sorted(vocab.values()) == list(range(size))
    return vocab


@pytest.mark.parametrize("size, dtype", [(65536, np.uint16), (65536 + 700, np.uint32)])
def test_ids_above_65535_take_uint32(tmp_path, docs, size, dtype):
    assert ids_dtype(65535) == ids_dtype(65536) == np.uint16 and ids_dtype(65537) == np.uint32
    texts = docs[:60]
    frequency = Counter(c for t in texts for c in t if not c.isspace())
    common = [c for c, _ in frequency.most_common(700)]
    assert len(common) == 700
    tokenizer = Tokenizer.from_vocab(big_vocab(common, size))
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    out = tmp_path / "data"
    manifest = prepare(str(corpus), tokenizer, str(out), heldout=HELDOUT, seed=SEED, workers=1).manifest
    assert manifest["tokenizer"]["ids_dtype"] == np.dtype(dtype).name and manifest["tokenizer"]["vocab_size"] == size
    raw = check_round_trip(str(out), texts, tokenizer)
    ids = raw["train"]["ids"]
    assert ids.dtype == dtype and os.path.getsize(out / "train" / "ids.bin") == np.dtype(dtype).itemsize * len(ids)
    every = np.concatenate([raw["train"]["ids"], raw["heldout"]["ids"]])
    top = size - len(common)  # the first character's id
    assert (every >= top).mean() > 0.8  # most tokens are characters on the top ids
    assert (every == size - 1).any()  # the last id of the vocabulary is there, too
    if dtype == np.uint32:
        assert top > 65535  # every character's id needs more than 16 bits
    data = PretrainingData.open(str(out))
    assert data.splits["train"].ids.dtype == dtype and np.array_equal(data.splits["train"].ids, ids)
    assert len(data.splits["train"].token_counts) == size


# ----- reuse, overwrite, locks --------------------------------------------------------------------
def test_a_second_run_with_the_same_inputs_keeps_the_folder_untouched(tmp_path, corpus_file, tokenizer_dir, capsys):
    out = tmp_path / "data"
    first = prepare(corpus_file, tokenizer_dir, str(out), heldout=HELDOUT, seed=SEED, workers=1)
    before = snapshot(out)
    time.sleep(0.02)  # mtimes would move
    said = []
    again = prepare(corpus_file, tokenizer_dir, str(out), heldout=HELDOUT, seed=SEED, workers=1, say=said.append)
    assert again.reused and not first.reused and again.manifest == first.manifest
    assert said and "already prepared" in said[0]
    assert snapshot(out) == before and siblings(out) == []
    # overwrite=True with the same inputs: still nothing to do
    assert prepare(corpus_file, tokenizer_dir, str(out), heldout=HELDOUT, seed=SEED, overwrite=True).reused
    assert snapshot(out) == before and siblings(out) == []


def test_other_inputs_need_overwrite(tmp_path, docs, tok, corpus_file):
    corpus = tmp_path / "c.txt"
    shutil.copy(corpus_file, corpus)
    out = tmp_path / "data"
    before_manifest = prepare(str(corpus), tok, str(out), heldout=HELDOUT, seed=SEED, workers=1).manifest
    before = snapshot(out)
    other_tok = train_vocab(texts=docs[:300], vocab_size=1200)
    changes = [dict(heldout=0.2), dict(seed=6), dict(wwm=True), dict(doc_sep="blank"), dict(tokenizer=other_tok)]
    for change in changes:
        kw = {"heldout": HELDOUT, "seed": SEED, "workers": 1, "tokenizer": tok, **change}
        tokenizer = kw.pop("tokenizer")
        with pytest.raises(
            DataError, match=r"--out .*already holds another dataset, or a damaged one; pass --overwrite"
        ) as caught:
            prepare(str(corpus), tokenizer, str(out), **kw)
        assert str(out) in str(caught.value), change
        assert snapshot(out) == before and siblings(out) == [], change
    # the corpus file changes (one more line): refused, then replaced with overwrite=True
    with open(corpus, "a", encoding="utf-8") as fh:
        fh.write("新的一行。\n")
    with pytest.raises(DataError, match="--overwrite"):
        prepare(str(corpus), tok, str(out), heldout=HELDOUT, seed=SEED, workers=1)
    assert snapshot(out) == before
    summary = prepare(str(corpus), tok, str(out), heldout=HELDOUT, seed=SEED, workers=1, overwrite=True)
    assert not summary.reused and summary.manifest["documents_read"] == 601
    assert summary.manifest["sources"][0]["sha256"] == sha256_of(corpus)
    assert json.load(open(out / "manifest.json")) == summary.manifest
    assert siblings(out) == []
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("data.replaced-")]  # kept, never deleted
    assert len(aside) == 1 and snapshot(aside[0]) == before
    ids = np.fromfile(out / "train" / "ids.bin", dtype=np.uint16)
    last = lines_of(corpus)[-1]
    assert last == "新的一行。" and not is_heldout(600, HELDOUT, SEED)  # the new document went to train/, last
    assert ids[-len(tok.encode(last, add_special_tokens=False)) :].tolist() == tok.encode(
        last, add_special_tokens=False
    )
    assert summary.manifest["splits"]["train"]["documents"] == before_manifest["splits"]["train"]["documents"] + 1


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_folder_that_is_not_a_dataset_is_never_replaced(tmp_path, corpus_file, tokenizer_dir, overwrite):
    """--overwrite used to delete a user's files in --out (exit 0, no copy anywhere)."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    (out / "corpus.txt").write_text("我的语料。\n", encoding="utf-8")
    before = snapshot(out)
    with pytest.raises(
        DataError,
        match=rf"^--out {E(str(out))}: (already )?holds files that are not a dataset "
        r"\(corpus.txt, notes.txt\); .*(pass an empty or new --out)",
    ):
        prepare(corpus_file, tokenizer_dir, str(out), workers=1, overwrite=overwrite)
    assert snapshot(out) == before and siblings(out) == [] and sorted(os.listdir(tmp_path)) == ["mine"]


def test_overwrite_refuses_a_folder_holding_an_input_naming_both(tmp_path, corpus_file, tokenizer_dir):
    """`--corpus mydir/corpus.txt --out mydir --overwrite` used to delete the corpus it was reading."""
    out = tmp_path / "mydir"
    prepare(corpus_file, tokenizer_dir, str(out), workers=1)
    shutil.copy(corpus_file, out / "corpus.txt")
    shutil.copytree(tokenizer_dir, out / "tok")
    before = snapshot(out)
    for corpus, tokenizer, flag, inside in (
        (out / "corpus.txt", tokenizer_dir, "--corpus", out / "corpus.txt"),
        (corpus_file, out / "tok", "--tokenizer", out / "tok"),
    ):
        with pytest.raises(
            DataError,
            match=rf"^{flag} {E(str(inside))} is inside --out {E(str(out))}, and "
            "--overwrite would move it aside",
        ):
            prepare(str(corpus), str(tokenizer), str(out), workers=1, heldout=0.5, overwrite=True)
        assert snapshot(out) == before and siblings(out) == [] and sorted(os.listdir(tmp_path)) == ["mydir"]


@pytest.mark.parametrize("where", [".", ".."])
def test_out_may_not_be_the_working_directory_or_above_it(tmp_path, monkeypatch, corpus_file, tokenizer_dir, where):
    """`--out . --overwrite` used to fail with OSError: Device or resource busy, leaving hidden .partial folders."""
    work = tmp_path / "parent" / "work"
    work.mkdir(parents=True)
    (work / "notes.txt").write_text("keep me")
    monkeypatch.chdir(work)
    for overwrite in (False, True):
        with pytest.raises(DataError, match=rf"^--out {E(where)}: is the current directory or holds it"):
            prepare(corpus_file, tokenizer_dir, where, workers=1, overwrite=overwrite)
    assert sorted(os.listdir(work)) == ["notes.txt"] and sorted(os.listdir(tmp_path / "parent")) == ["work"]
    assert sorted(os.listdir(tmp_path)) == ["parent"]  # no lock, no partial folder anywhere


def test_out_that_is_a_file_is_refused_and_kept(tmp_path, corpus_file, tokenizer_dir, capsys):
    """`--out victim.csv --overwrite` used to end in NotADirectoryError, the CSV only left as .victim.csv.old."""
    victim = tmp_path / "victim.csv"
    victim.write_text("a,b\n1,2\n")
    for overwrite in ([], ["--overwrite"]):
        assert (
            cli_main(
                [
                    "prepare",
                    "--corpus",
                    corpus_file,
                    "--tokenizer",
                    tokenizer_dir,
                    "--out",
                    str(victim),
                    "--workers",
                    "1",
                    "--no-progress",
                    *overwrite,
                ]
            )
            == 2
        )
        err = capsys.readouterr().err
        assert (
            err == f"bertkit prepare: error: --out {victim}: is a file, not a folder; pass a folder for a "
            "dataset (it is created if missing)\n"
        )
    assert victim.read_text() == "a,b\n1,2\n" and sorted(os.listdir(tmp_path)) == ["victim.csv"]


@pytest.fixture
def mounted(tmp_path):
    """mount(options) -> a fresh tmpfs folder under tmp_path (a real small or read-only disk), unmounted after the
    test; skips where this process may not mount (not root, no mount namespace rights)."""
    points = []

    def mount(options: str):
        point = tmp_path / f"disk{len(points)}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
        points.append(point)
        return point

    yield mount
    for point in points:
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_a_full_disk_is_one_line_naming_the_file_and_leaves_nothing(mounted, corpus_file, tokenizer_dir, capsys):
    """A full disk while writing the ids used to end in a raw OSError: [Errno 28] from the writer."""
    disk = mounted("size=192k")
    out = disk / "data"
    assert (
        cli_main(
            [
                "prepare",
                "--corpus",
                corpus_file,
                "--tokenizer",
                tokenizer_dir,
                "--out",
                str(out),
                "--workers",
                "1",
                "--no-progress",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert re.fullmatch(
        rf"bertkit prepare: error: {E(str(disk))}/\.data\.partial/\S+: the disk is full \([\d,]+ MiB "
        rf"free\); nothing was written to --out {E(str(out))}\n",
        err,
    ), err
    assert os.listdir(disk) == []  # no partial folder, no lock


def test_a_read_only_out_is_one_line(mounted, corpus_file, tokenizer_dir, capsys):
    """A read-only --out used to end in a raw OSError: [Errno 30] from the lock file."""
    disk = mounted("ro,size=64k")
    for out in (disk / "data", disk / "deeper" / "data"):
        assert (
            cli_main(
                [
                    "prepare",
                    "--corpus",
                    corpus_file,
                    "--tokenizer",
                    tokenizer_dir,
                    "--out",
                    str(out),
                    "--workers",
                    "1",
                    "--no-progress",
                ]
            )
            == 2
        )
        err = capsys.readouterr().err
        assert err.startswith(f"bertkit prepare: error: --out {out}: cannot create") and err.count("\n") == 1, err
        assert "the file system is read-only" in err


def test_a_live_lock_refuses_and_a_stale_one_is_taken_over(prepared, tmp_path, corpus_file, tokenizer_dir, capsys):
    out = tmp_path / "data"
    lock = tmp_path / ".data.lock"
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        lock.write_text(f"{writer.pid} {socket.gethostname()}\n")
        with pytest.raises(
            DataError, match=E(f"--out {out}: process {writer.pid} on {socket.gethostname()} is preparing it ({lock})")
        ):
            prepare(corpus_file, tokenizer_dir, str(out), workers=1)
        assert lock.read_text().split()[0] == str(writer.pid)  # the other run's lock stays
        assert not out.exists() and siblings(out) == [".data.lock"]  # nothing written
    finally:
        writer.kill()
        writer.wait()
    # the same lock, now of a process that has ended, and the half-written folder it left
    (tmp_path / ".data.partial" / "train").mkdir(parents=True)
    (tmp_path / ".data.partial" / "train" / "ids.bin").write_bytes(b"\1\2\3")
    capsys.readouterr()
    prepare(corpus_file, tokenizer_dir, str(out), heldout=HELDOUT, seed=SEED, workers=1)
    assert f"process {writer.pid} that held it has ended" in capsys.readouterr().err
    assert siblings(out) == []  # the lock and the partial folder are gone
    assert_same_folders(out, prepared)


def test_a_failed_run_leaves_no_folder_and_no_lock(tmp_path, docs, tokenizer_dir):
    corpus = tmp_path / "blank.txt"
    corpus.write_text("\n  \n\n", encoding="utf-8")
    out = tmp_path / "data"
    with pytest.raises(Exception, match="the corpus is empty"):
        prepare(str(corpus), tokenizer_dir, str(out), workers=1)
    assert not out.exists() and ".data.lock" not in siblings(out)
    few = tmp_path / "few.txt"  # three documents, all of them held out (is_heldout says so for seed 0)
    few.write_text("\n".join(docs[:3]) + "\n", encoding="utf-8")
    assert is_heldout(np.arange(3), 0.99, 0).all()
    with pytest.raises(DataError, match=E(f"{few}: no document left to train on (3 read, 3 held out, 0 without")):
        prepare(str(few), tokenizer_dir, str(out), heldout=0.99, seed=0, workers=1)
    assert not out.exists() and ".data.lock" not in siblings(out)


def test_a_small_corpus_whose_draws_hold_out_none_gives_its_last_document(tmp_path, docs, tok):
    """Five documents at 1%: no draw holds one out, so the last (non-empty) one is evaluated on, the
    others are trained on in order; with --heldout 0 all five are trained on."""
    few = tmp_path / "few.txt"
    few.write_text("\n".join(docs[:5] + ["\x01\x02"]) + "\n", encoding="utf-8")  # the last one has no token
    assert not is_heldout(np.arange(6), HELDOUT, SEED).any()
    out = tmp_path / "data"
    manifest = prepare(str(few), tok, str(out), heldout=HELDOUT, seed=SEED, workers=1).manifest
    assert (manifest["splits"]["train"]["documents"], manifest["splits"]["heldout"]["documents"]) == (4, 1)
    dtype = ids_dtype(tok.vocab_size)
    for split, texts in (("train", docs[:4]), ("heldout", docs[4:5])):
        raw = raw_split(str(out), split, dtype)
        encoded = [tok.encode(t, add_special_tokens=False) for t in texts]
        assert raw["offsets"].tolist() == np.cumsum([0] + [len(e) for e in encoded]).tolist(), split
        assert raw["ids"].tolist() == [i for e in encoded for i in e], split
    PretrainingData.open(str(out))  # and the folder passes its checks
    manifest = prepare(str(few), tok, str(tmp_path / "all"), heldout=0, seed=SEED, workers=1).manifest
    assert (manifest["splits"]["train"]["documents"], manifest["splits"]["heldout"]["documents"]) == (5, 0)


def test_documents_without_a_token_are_left_out_but_keep_their_place(tmp_path, docs, tok):
    """A line of control characters gives no token: it is counted, not written, and the documents after it
    keep their index (so the same documents are held out as without it)."""
    texts = list(docs[:200])
    for at in (0, 7, 8, 50, 199):
        texts.insert(at, "\x01\x02\u200b")
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    out = tmp_path / "data"
    manifest = prepare(str(corpus), tok, str(out), heldout=HELDOUT, seed=SEED, workers=1).manifest
    assert manifest["documents_read"] == 205 and manifest["empty_documents"] == 5
    assert manifest["splits"]["train"]["documents"] + manifest["splits"]["heldout"]["documents"] == 200
    check_round_trip(str(out), texts, tok)
    PretrainingData.open(str(out))


def test_documents_of_several_lines_mark_a_sentence_at_each_line(tmp_path, docs, tok):
    """doc_sep="blank": documents of several lines (joined with "\\n"); a line break starts a sentence."""
    groups = [docs[i : i + 3] for i in range(0, 240, 3)]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join("\n".join(g) for g in groups) + "\n", encoding="utf-8")
    out = tmp_path / "data"
    manifest = prepare(str(corpus), tok, str(out), doc_sep="blank", heldout=HELDOUT, seed=SEED, workers=1).manifest
    assert manifest["documents_read"] == 80 and manifest["options"]["doc_sep"] == "blank"
    texts = ["\n".join(g) for g in groups]
    raw = check_round_trip(str(out), texts, tok)["train"]
    for d, text in enumerate(split_docs(texts)["train"]):
        sentences = raw["sentences"][raw["offsets"][d] : raw["offsets"][d + 1]]
        lines = text.split("\n")
        line_starts = np.cumsum([0] + [len(tok.encode(line, add_special_tokens=False)) for line in lines[:-1]])
        assert sentences[line_starts].all(), d


# ----- the command line ---------------------------------------------------------------------------
def test_the_command_in_process(prepared, tmp_path, corpus_file, tokenizer_dir, capsys):
    out = tmp_path / "data"
    out.mkdir()  # an empty folder is as good as none

    def args(heldout=HELDOUT, *more):
        return [
            "prepare",
            "--corpus",
            corpus_file,
            "--tokenizer",
            tokenizer_dir,
            "--out",
            str(out),
            "--heldout",
            str(heldout),
            "--seed",
            str(SEED),
            "--workers",
            "1",
            "--no-progress",
            *more,
        ]

    assert cli_main(args()) == 0
    manifest = json.load(open(out / "manifest.json"))
    train, held = manifest["splits"]["train"], manifest["splits"]["heldout"]
    stdout = capsys.readouterr().out
    assert stdout.startswith(
        f"{out}: {train['documents']:,} documents ({train['tokens']:,} tokens) to train on, "
        f"{held['documents']:,} ({held['tokens']:,} tokens) held out; "
        f"{manifest['text_bytes'] / 1e6:,.1f} MB of text in "
    )
    assert stdout.rstrip().endswith("1 workers)") and len(stdout.strip().splitlines()) == 1
    assert cli_main(args()) == 0  # again: kept, nothing printed but a note on stderr
    captured = capsys.readouterr()
    assert captured.out == "" and "already prepared from the same corpus, options and vocabulary; kept" in captured.err
    assert_same_folders(out, prepared)  # the command writes what prepare() writes
    assert cli_main(args(0.3)) == 2
    assert f"bertkit prepare: error: --out {out}: already holds another dataset" in capsys.readouterr().err
    assert (
        cli_main(
            [
                "prepare",
                "--corpus",
                str(tmp_path / "none.txt"),
                "--tokenizer",
                tokenizer_dir,
                "--out",
                str(tmp_path / "x"),
            ]
        )
        == 2
    )
    assert "none.txt: no such file or folder" in capsys.readouterr().err
    for bad, message in (
        (["--heldout", "1.5"], "argument --heldout: must be in [0, 1), got 1.5"),
        (["--workers", "-1"], "argument --workers: must be >= 0, got -1"),
        (["--nsp-seq-len", "5"], "argument --nsp-seq-len: must be 0 (no pairs) or at least 8, got 5"),
    ):
        with pytest.raises(SystemExit) as exited:
            cli_main(args(HELDOUT, *bad))
        assert exited.value.code == 2 and message in capsys.readouterr().err


def run_cli(*args, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "bertkit", "prepare", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        **kw,
    )


@pytest.mark.slow
def test_the_command_in_a_subprocess(tmp_path, corpus_file, tokenizer_dir, prepared):
    out = tmp_path / "data"
    done = run_cli(
        "--corpus",
        corpus_file,
        "--tokenizer",
        tokenizer_dir,
        "--out",
        str(out),
        "--heldout",
        str(HELDOUT),
        "--seed",
        str(SEED),
        "--workers",
        "1",
        "--no-progress",
    )
    assert done.returncode == 0, done.stderr
    manifest = json.load(open(out / "manifest.json"))
    train, held = manifest["splits"]["train"], manifest["splits"]["heldout"]
    assert done.stdout.startswith(
        f"{out}: {train['documents']:,} documents ({train['tokens']:,} tokens) to train "
        f"on, {held['documents']:,} ({held['tokens']:,} tokens) held out; "
        f"{manifest['text_bytes'] / 1e6:,.1f} MB of text in "
    )
    assert_same_folders(out, prepared)
    for bad, message in (
        (["--heldout", "1.5"], "argument --heldout: must be in [0, 1)"),
        ([], "the following arguments are required: --tokenizer"),
    ):
        args = ["--corpus", corpus_file, "--out", str(tmp_path / "bad"), *bad]
        if bad:
            args += ["--tokenizer", tokenizer_dir]
        done = run_cli(*args)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert not (tmp_path / "bad").exists()
