"""A prepared pretraining dataset: token ids and marks in flat files, read by memory map.

    DATA/
      manifest.json            format and version, the tokenizer's fingerprint, each source file (size,
                               sha256), the options, and per split its counts and each file's size and sha256
      tokenizer/               the tokenizer the ids come from (vocab.txt, tokenizer.json, ...)
      train/ , heldout/        one folder per split (held-out documents are chosen by document):
        ids.bin                the token ids of every document, back to back, no [CLS] / [SEP]:
                               uint16 while the vocabulary fits (< 65,536 ids), else uint32
        documents.bin          int64, documents + 1 offsets into ids: document d is ids[o[d]:o[d + 1]]
        word_starts.bin        1 bit per token (numpy.packbits, little bit order): it starts a whole word
        sentence_starts.bin    1 bit per token: it starts a sentence
        token_counts.bin       int64, one count per vocabulary id (the output bias of `--recipe local`)
        pairs.bin              the next-sentence pair plan for the --nsp-seq-len in the manifest's options
                               (PAIR_PLAN records, 33 bytes a row); absent with --nsp-seq-len 0

Disk: 2.25 bytes per token with uint16 ids (2 for the id, 2 bits of marks), plus 8 bytes per document.
Nothing is read into memory whole: `PretrainingData.open` checks every file (size, sha256, ids below the
vocabulary size, ordered offsets) with plain reads, then maps them; rows are cut from the maps per batch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import BertkitError

FORMAT = "bertkit-pretraining-data"
VERSION = 1
MANIFEST = "manifest.json"
TOKENIZER = "tokenizer"
SPLITS = ("train", "heldout")
FILES = ("ids", "documents", "word_starts", "sentence_starts", "token_counts")
PAIRS = "pairs"  # the optional file: the pair plan
# One row of a pair plan (rows.PairRows): A's token range, B's (a real B) or, for a random B, b_start -1 and b_len
# the tokens B should reach; the label; and `draw`, the seed of everything left to chance when the row is read
# (the other document and its first sentence for a random B, which ends of the pair lose tokens to fit).
PAIR_PLAN = np.dtype(
    [("a_start", "<i8"), ("a_len", "<i4"), ("b_start", "<i8"), ("b_len", "<i4"), ("label", "i1"), ("draw", "<u8")]
)
_BLOCK = 1 << 24  # bytes per read while checking a file


class DataError(BertkitError, ValueError):
    """A dataset folder that cannot be used: missing, cut or changed files, another vocabulary."""


def ids_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


# ----- writing -----------------------------------------------------------------------------------
class _File:
    """An output file that hashes what it writes; a failed write (full disk, ...) is an OSError naming it."""

    def __init__(self, path: str) -> None:
        self.path, self.fh, self.sha256, self.bytes = path, open(path, "wb"), hashlib.sha256(), 0

    @contextlib.contextmanager
    def _named(self) -> Iterator[None]:
        try:
            yield
        except OSError as e:  # a buffered write's error names no file
            raise OSError(e.errno, e.strerror, self.path) from e

    def write(self, data: npt.ArrayLike) -> None:
        view = np.ascontiguousarray(data).data.cast("B")  # the array's bytes (ndarray.data: its memoryview)
        with self._named():
            self.fh.write(view)
        self.sha256.update(view)
        self.bytes += len(view)

    def close(self) -> dict[str, Any]:
        with self._named():
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
        return {"name": os.path.basename(self.path), "bytes": self.bytes, "sha256": self.sha256.hexdigest()}


class _Bits:
    """A bit file written a few tokens at a time: whole bytes go out, the last < 8 bits wait for the next call."""

    def __init__(self, path: str) -> None:
        self.file, self.pending = _File(path), np.zeros(0, dtype=bool)

    def write(self, flags: np.ndarray) -> None:
        flags = np.concatenate([self.pending, flags.astype(bool)])
        whole = len(flags) - len(flags) % 8
        self.file.write(np.packbits(flags[:whole], bitorder="little"))
        self.pending = flags[whole:]

    def close(self) -> dict[str, Any]:
        if len(self.pending):
            self.file.write(np.packbits(self.pending, bitorder="little"))
        return self.file.close()


class SplitWriter:
    """Appends documents to one split's files (in a folder being prepared)."""

    def __init__(self, folder: str, vocab_size: int, pairs: bool = False) -> None:
        os.makedirs(folder, exist_ok=True)
        self.pairs = _File(os.path.join(folder, "pairs.bin")) if pairs else None
        self.pair_rows = 0
        self.dtype, self.vocab_size = ids_dtype(vocab_size), vocab_size
        self.ids = _File(os.path.join(folder, "ids.bin"))
        self.documents = _File(os.path.join(folder, "documents.bin"))
        self.words = _Bits(os.path.join(folder, "word_starts.bin"))
        self.sentences = _Bits(os.path.join(folder, "sentence_starts.bin"))
        self.counts_path = os.path.join(folder, "token_counts.bin")
        self.counts = np.zeros(vocab_size, dtype=np.int64)
        self.tokens = self.docs = 0
        self.documents.write(np.zeros(1, dtype=np.int64))

    def append(
        self,
        ids: np.ndarray,
        word_starts: np.ndarray,
        sentence_starts: np.ndarray,
        lengths: np.ndarray,
        pairs: np.ndarray | None = None,
    ) -> None:
        """Documents given as flat arrays and their lengths (each length > 0); pairs: their pair plan rows, token
        positions counted from the first of these ids."""
        if len(ids) and int(ids.max()) >= self.vocab_size:
            raise DataError(f"token id {int(ids.max())} is outside the vocabulary of {self.vocab_size}")
        if self.pairs is not None:
            assert pairs is not None, "a split written with pairs=True is given each batch's pair plan"
            pairs = pairs.copy()
            pairs["a_start"] += self.tokens
            pairs["b_start"][pairs["b_start"] >= 0] += self.tokens  # a random B (-1) is found when read
            self.pairs.write(pairs)
            self.pair_rows += len(pairs)
        self.ids.write(ids.astype(self.dtype))
        self.words.write(word_starts)
        self.sentences.write(sentence_starts)
        self.documents.write(self.tokens + np.cumsum(lengths, dtype=np.int64))
        self.counts += np.bincount(ids, minlength=self.vocab_size)
        self.tokens += int(lengths.sum())
        self.docs += len(lengths)

    def close(self) -> dict[str, Any]:
        counts = _File(self.counts_path)
        counts.write(self.counts)
        files = {
            "ids": self.ids.close(),
            "documents": self.documents.close(),
            "word_starts": self.words.close(),
            "sentence_starts": self.sentences.close(),
            "token_counts": counts.close(),
        }
        if self.pairs is not None:
            files[PAIRS] = self.pairs.close()
            return {"documents": self.docs, "tokens": self.tokens, "pairs": self.pair_rows, "files": files}
        return {"documents": self.docs, "tokens": self.tokens, "files": files}


# ----- reading -----------------------------------------------------------------------------------
@dataclass
class Split:
    """One split of a dataset, memory-mapped: documents of token ids with their word and sentence marks."""

    name: str
    ids: np.ndarray  # (tokens,) uint16 / uint32
    offsets: np.ndarray  # (documents + 1,) int64
    word_bits: np.ndarray  # (ceil(tokens / 8),) uint8
    sentence_bits: np.ndarray
    token_counts: np.ndarray  # (vocab,) int64
    pairs: np.ndarray | None = None  # (rows,) PAIR_PLAN: the stored pair plan, if the dataset has one
    pair_options: dict[str, Any] | None = None  # what it was walked for (rows.pair_options)

    @property
    def documents(self) -> int:
        return len(self.offsets) - 1

    @property
    def tokens(self) -> int:
        return len(self.ids)

    def word_starts(self, start: int, end: int) -> np.ndarray:
        """(end - start,) bool: which of the tokens start[:end] start a whole word."""
        return _bits(self.word_bits, start, end)

    def sentence_starts(self, start: int, end: int) -> np.ndarray:
        return _bits(self.sentence_bits, start, end)


def _bits(packed: np.ndarray, start: int, end: int) -> np.ndarray:
    if end <= start:
        return np.zeros(0, dtype=bool)
    flags = np.unpackbits(packed[start >> 3 : (end + 7) >> 3], bitorder="little")
    return flags[start & 7 : (start & 7) + end - start].astype(bool)


@dataclass
class PretrainingData:
    """A dataset folder, checked and mapped (PretrainingData.open)."""

    folder: str
    manifest: dict[str, Any]  # manifest.json as read
    splits: dict[str, Split]  # name -> Split

    @property
    def tokenizer_dir(self) -> str:
        return os.path.join(self.folder, TOKENIZER)

    @property
    def fingerprint(self) -> str:
        """Of what the data holds (sources, options, tokenizer, every file's hash): equal data, equal fingerprint."""
        return hashlib.sha256(json.dumps(self.manifest, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def parts(self) -> dict[str, str]:
        """What the fingerprint is made of, part by part in words (sources, options, tokenizer, splits), so that
        two datasets can be told apart by name (pretrain --resume on another --data)."""
        m = self.manifest
        sources = ", ".join(
            f"{s.get('name')} ({s.get('bytes', 0):,} bytes, sha256 {str(s.get('sha256'))[:12]})"
            for s in m.get("sources", [])
        )
        return {
            "sources": sources or "none",
            **{f"option {key}": repr(value) for key, value in sorted(m.get("options", {}).items())},
            "tokenizer": f"fingerprint {m['tokenizer'].get('fingerprint')} ({m['tokenizer']['vocab_size']} tokens)",
            **{
                f"{name} split": f"{info['documents']:,} documents, {info['tokens']:,} tokens (ids sha256 "
                f"{str(info['files']['ids']['sha256'])[:12]})"
                for name, info in m["splits"].items()
            },
        }

    @classmethod
    def open(cls, folder: str, *, verify: bool = True) -> PretrainingData:
        """Read the manifest and map every split. verify: also read each file once to check its sha256 (and
        that no id lies outside the vocabulary, and that document offsets are in order)."""
        manifest = read_manifest(folder)
        vocab_size = int(manifest["tokenizer"]["vocab_size"])
        dtype = np.dtype(manifest["tokenizer"]["ids_dtype"])
        splits: dict[str, Split] = {}
        pair_options = manifest.get("options", {}).get("pairs")
        for name, info in manifest["splits"].items():
            paths = {key: os.path.join(folder, name, info["files"][key]["name"]) for key in FILES}
            for key, path in paths.items():
                _check_size(path, info["files"][key]["bytes"], folder)
            if verify:
                _check_ids(paths["ids"], info["files"]["ids"], dtype, vocab_size, folder)
                _check_offsets(paths["documents"], info["files"]["documents"], info["tokens"], folder)
                for key in ("word_starts", "sentence_starts", "token_counts"):
                    _check_hash(paths[key], info["files"][key], folder)
            splits[name] = Split(
                name=name,
                ids=_map(paths["ids"], dtype, info["tokens"]),
                offsets=_map(paths["documents"], np.int64, info["documents"] + 1),
                word_bits=_map(paths["word_starts"], np.uint8, (info["tokens"] + 7) // 8),
                sentence_bits=_map(paths["sentence_starts"], np.uint8, (info["tokens"] + 7) // 8),
                token_counts=np.fromfile(paths["token_counts"], dtype=np.int64),
            )
            if pair_options:
                path = os.path.join(folder, name, info["files"][PAIRS]["name"])
                _check_size(path, info["files"][PAIRS]["bytes"], folder)
                if verify:
                    _check_hash(path, info["files"][PAIRS], folder)
                splits[name].pairs, splits[name].pair_options = _map(path, PAIR_PLAN, info["pairs"]), pair_options
            if len(splits[name].token_counts) != vocab_size:
                raise DataError(
                    f"{paths['token_counts']}: {len(splits[name].token_counts)} counts for a vocabulary "
                    f"of {vocab_size}; {_REPREPARE.format(folder=folder)}"
                )
        return cls(folder=folder, manifest=manifest, splits=splits)


_REPREPARE = "the folder is damaged or was changed: prepare it again (bertkit prepare ... --out {folder} --overwrite)"


def read_manifest(folder: str) -> dict[str, Any]:
    path = os.path.join(folder, MANIFEST)
    if os.path.exists(folder) and not os.path.isdir(folder):  # a corpus file given as --data, most likely
        raise DataError(
            f"{folder}: a file, not a folder; --data takes a dataset folder made by bertkit prepare: pretrain on "
            f"the text with --corpus {folder}, or prepare it once: bertkit prepare --corpus {folder} --tokenizer "
            "DIR --out FOLDER"
        )
    if not os.path.isdir(folder):
        raise DataError(
            f"{folder}: no such folder; make a dataset with bertkit prepare --corpus ... --tokenizer ... --out {folder}"
        )
    if not os.path.exists(path):
        partial = os.path.exists(
            os.path.join(
                os.path.dirname(os.path.abspath(folder)), f".{os.path.basename(os.path.normpath(folder))}.partial"
            )
        )
        raise DataError(
            f"{folder}: not a prepared dataset (no {MANIFEST})"
            + (
                "; a bertkit prepare into it did not finish: run it again"
                if partial
                else "; make one with bertkit prepare --corpus ... --tokenizer ... --out " + folder
            )
        )
    try:
        with open(path, encoding="utf-8") as fh:
            manifest = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: not a readable manifest ({e}); {_REPREPARE.format(folder=folder)}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DataError(
            f"{path}: not a bertkit dataset manifest (format {manifest.get('format')!r} expected {FORMAT!r})"
            if isinstance(manifest, dict)
            else f"{path}: not a JSON object"
        )
    if manifest.get("version") != VERSION:
        raise DataError(
            f"{path}: format version {manifest.get('version')}, this bertkit reads version {VERSION}; "
            "prepare the corpus again with this bertkit"
        )
    try:
        for info in manifest["splits"].values():
            for key in FILES + ((PAIRS,) if manifest.get("options", {}).get("pairs") else ()):
                info["files"][key]["name"], info["files"][key]["bytes"], info["files"][key]["sha256"]
            int(info["tokens"]), int(info["documents"])
            if manifest.get("options", {}).get("pairs"):
                int(info["pairs"])
        int(manifest["tokenizer"]["vocab_size"]), np.dtype(manifest["tokenizer"]["ids_dtype"])
    except (KeyError, TypeError, ValueError) as e:
        raise DataError(f"{path}: incomplete manifest (missing {e}); {_REPREPARE.format(folder=folder)}") from None
    missing = [name for name in SPLITS if name not in manifest["splits"]]
    if missing:
        raise DataError(f"{path}: no {' or '.join(missing)} split; {_REPREPARE.format(folder=folder)}")
    _check_counts(manifest, path, folder)
    return manifest


def _check_counts(manifest: dict[str, Any], path: str, folder: str) -> None:
    """Every file's size in the manifest must be what its counts say (tokens, documents, vocabulary, id type)."""
    vocab_size = int(manifest["tokenizer"]["vocab_size"])
    dtype = np.dtype(manifest["tokenizer"]["ids_dtype"])
    if dtype != ids_dtype(vocab_size):
        raise DataError(
            f"{path}: ids of type {dtype} for a vocabulary of {vocab_size} (bertkit writes "
            f"{ids_dtype(vocab_size)}); {_REPREPARE.format(folder=folder)}"
        )
    for name, info in manifest["splits"].items():
        tokens, documents = int(info["tokens"]), int(info["documents"])
        expected = {
            "ids": tokens * dtype.itemsize,
            "documents": (documents + 1) * 8,
            "word_starts": (tokens + 7) // 8,
            "sentence_starts": (tokens + 7) // 8,
            "token_counts": vocab_size * 8,
        }
        if manifest.get("options", {}).get("pairs"):
            expected[PAIRS] = int(info["pairs"]) * PAIR_PLAN.itemsize
        for key, size in expected.items():
            if int(info["files"][key]["bytes"]) != size:
                counts = (
                    f"{int(info['pairs']):,} pairs of {PAIR_PLAN.itemsize} bytes"
                    if key == PAIRS
                    else f"{tokens:,} tokens, {documents:,} documents and a vocabulary of {vocab_size:,}"
                )
                raise DataError(
                    f"{path}: {name}/{info['files'][key]['name']} is {info['files'][key]['bytes']:,} bytes "
                    f"where {counts} make {size:,}; {_REPREPARE.format(folder=folder)}"
                )


def _map(path: str, dtype: npt.DTypeLike, count: int) -> np.ndarray:
    if count == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


def _check_size(path: str, expected: int, folder: str) -> None:
    if not os.path.isfile(path):
        raise DataError(f"{path}: missing; {_REPREPARE.format(folder=folder)}")
    size = os.path.getsize(path)
    if size != expected:
        change = "cut short" if size < expected else "grown"
        raise DataError(
            f"{path}: {size:,} bytes where the manifest says {expected:,} ({change}); "
            + _REPREPARE.format(folder=folder)
        )


def _blocks(path: str, itemsize: int = 1) -> Iterator[bytes]:
    with open(path, "rb") as fh:  # plain reads: the page cache, not this process's memory
        while block := fh.read(_BLOCK - _BLOCK % itemsize):
            yield block


def _check_hash(path: str, info: dict[str, Any], folder: str, each: Callable[[bytes], None] | None = None) -> None:
    h = hashlib.sha256()
    for block in _blocks(path, 8):
        h.update(block)
        if each is not None:
            each(block)
    if h.hexdigest() != info["sha256"]:
        raise DataError(
            f"{path}: its content changed since it was written (sha256 {h.hexdigest()[:16]}..., the "
            f"manifest says {info['sha256'][:16]}...); " + _REPREPARE.format(folder=folder)
        )


def _check_ids(path: str, info: dict[str, Any], dtype: np.dtype, vocab_size: int, folder: str) -> None:
    top = [-1]

    def each(block: bytes) -> None:
        if block:
            top[0] = max(top[0], int(np.frombuffer(block, dtype=dtype).max()))

    _check_hash(path, info, folder, each)
    if top[0] >= vocab_size:
        raise DataError(
            f"{path}: holds id {top[0]}, outside the vocabulary of {vocab_size}; " + _REPREPARE.format(folder=folder)
        )


def _check_offsets(path: str, info: dict[str, Any], tokens: int, folder: str) -> None:
    first: int | None = None
    last: int | None = None
    ok = True

    def each(block: bytes) -> None:
        nonlocal first, last, ok
        offsets = np.frombuffer(block, dtype=np.int64)
        if first is None and len(offsets):
            first = int(offsets[0])
        joined = offsets if last is None else np.concatenate([[last], offsets])
        ok &= bool(np.all(np.diff(joined) > 0))  # documents are never empty
        last = int(offsets[-1]) if len(offsets) else last

    _check_hash(path, info, folder, each)
    if first != 0 or last != tokens or not ok:
        raise DataError(
            f"{path}: document offsets out of order or not ending at {tokens} tokens; "
            + _REPREPARE.format(folder=folder)
        )
