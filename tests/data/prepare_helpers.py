"""What the `bertkit prepare` tests share: a prepared folder's files read with plain numpy and checked.

The files are read here with np.fromfile as the format in bertkit/data/dataset.py's docstring describes them, and
compared with the tokenizer run document by document: the tests do not trust the reader they also check.
"""

import hashlib
import os
import re

import numpy as np

from bertkit.data.corpus import is_heldout
from bertkit.data.dataset import ids_dtype
from bertkit.data.encode import encode_documents, plain_backend

HELDOUT, SEED = 0.1, 5  # not the defaults, so that the options reach the split
TIMEOUT = 300  # seconds for any one subprocess (far more than it needs)


E = re.escape  # paths in `match=` patterns


def lines_of(path) -> list[str]:
    """The documents of a one-per-line text file, read here (not with bertkit's reader)."""
    with open(path, encoding="utf-8") as fh:
        return [line.strip() for line in fh.read().split("\n") if line.strip()]


def sha256_of(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def folder_bytes(folder) -> dict:
    """Every file under `folder` (relative path -> bytes)."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            out[os.path.relpath(path, folder)] = open(path, "rb").read()
    return out


def siblings(out) -> list[str]:
    """The hidden `.NAME.*` entries prepare keeps beside `out` (partial folder, lock, old folder)."""
    parent, name = os.path.split(os.path.abspath(out))
    return sorted(n for n in os.listdir(parent) if n.startswith(f".{name}."))


def assert_same_folders(a, b) -> None:
    fa, fb = folder_bytes(a), folder_bytes(b)
    assert sorted(fa) == sorted(fb)
    different = [name for name in fa if fa[name] != fb[name]]
    assert not different, f"files that differ between {a} and {b}: {different}"


def raw_split(folder, split, dtype) -> dict:
    """One split's files read with np.fromfile, as the format says (not with PretrainingData)."""
    path = os.path.join(folder, split)
    ids = np.fromfile(os.path.join(path, "ids.bin"), dtype=dtype)
    tokens = len(ids)
    words = np.fromfile(os.path.join(path, "word_starts.bin"), dtype=np.uint8)
    sentences = np.fromfile(os.path.join(path, "sentence_starts.bin"), dtype=np.uint8)
    assert len(words) == len(sentences) == (tokens + 7) // 8
    words, sentences = np.unpackbits(words, bitorder="little"), np.unpackbits(sentences, bitorder="little")
    assert not words[tokens:].any() and not sentences[tokens:].any()  # the padding bits of the last byte are 0
    return {
        "ids": ids,
        "offsets": np.fromfile(os.path.join(path, "documents.bin"), dtype=np.int64),
        "words": words[:tokens].astype(bool),
        "sentences": sentences[:tokens].astype(bool),
        "counts": np.fromfile(os.path.join(path, "token_counts.bin"), dtype=np.int64),
    }


def split_docs(docs, fraction=HELDOUT, seed=SEED) -> dict:
    held = is_heldout(np.arange(len(docs)), fraction, seed)
    return {"train": [d for d, h in zip(docs, held) if not h], "heldout": [d for d, h in zip(docs, held) if h]}


def check_round_trip(folder, docs, tokenizer, *, fraction=HELDOUT, seed=SEED, wwm=False) -> dict:
    """Every document of each split: ids == Tokenizer.encode, marks == encode_documents, counts == bincount.
    Returns the raw splits."""
    dtype = ids_dtype(tokenizer.vocab_size)
    backend = plain_backend(tokenizer)
    out = {}
    for split, texts in split_docs(docs, fraction, seed).items():
        texts = [t for t in texts if tokenizer.encode(t, add_special_tokens=False)]  # a document without a token
        raw = raw_split(folder, split, dtype)  # is not written
        ids, offsets = raw["ids"], raw["offsets"]
        assert len(offsets) == len(texts) + 1, split
        assert offsets[0] == 0 and offsets[-1] == len(ids) and np.all(np.diff(offsets) > 0)
        for d, text in enumerate(texts):
            assert ids[offsets[d] : offsets[d + 1]].tolist() == tokenizer.encode(text, add_special_tokens=False), (
                f"{split} document {d}"
            )
        # the reference path of encode_documents (the backend tokenizes each document whole; prepare's workers
        # take the table-driven fast path): the same marks, and the same lengths
        encoded = encode_documents(backend, texts, chinese_words=wwm, fast=False)
        assert np.array_equal(encoded.lengths, np.diff(offsets))
        assert np.array_equal(raw["words"], encoded.word_starts)
        assert np.array_equal(raw["sentences"], encoded.sentence_starts)
        assert np.array_equal(raw["counts"], np.bincount(ids, minlength=tokenizer.vocab_size))
        out[split] = raw
    return out
