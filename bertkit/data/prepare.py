"""Preparing a corpus: a corpus -> a dataset folder of token ids and marks (bertkit/data/dataset.py), once.

    corpus (streamed: iter_documents) -> blocks of documents -> worker processes: tokenize and mark
    (encode.py) -> back in corpus order -> each document to train/ or heldout/ (one seeded draw per
    document; a corpus whose draws hold out none gives its last document) -> files -> manifest.json
    last -> the folder renamed into place

    bertkit prepare --corpus my_texts/ --tokenizer path/to/bert-base-chinese --out data/zh --wwm
    bertkit pretrain --data data/zh --model-config bert-base-chinese ...

Memory stays flat in the corpus size: the reader streams, at most 2 blocks per worker are in flight, and the
writer appends to files. The output is the same, byte for byte, for any --workers: blocks are cut by the
reader, each document is encoded on its own, and results are written in corpus order. The folder appears
only when complete: everything is written into a hidden sibling `.NAME.partial`, then renamed; a killed run
leaves no folder that looks complete, and running the command again starts that partial folder over
(`.NAME.lock` holds the pid of the run writing it).
"""

from __future__ import annotations

import concurrent.futures as futures
import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..deprecated import moved
from ..errors import BertkitError
from ..files import atomic_write_text, lock_file, read_json, release_lock, write_problem
from ..options import opt
from ..outfolder import check_out, move_aside
from ..tokenizer import Tokenizer, vocab_digest
from .builtin import BUILTIN_CORPORA
from .corpus import DOC_SEPS, CorpusSpec, Source, is_heldout, iter_documents, resolve, source
from .dataset import FORMAT, MANIFEST, SPLITS, TOKENIZER, VERSION, DataError, PretrainingData, SplitWriter, ids_dtype
from .encode import DocumentEncoder, Encoded, plain_backend
from .rows import pair_options, walk_documents

BLOCK_CHARS = 1 << 19  # characters of text per block sent to a worker (about 1.5 MB of Chinese)

Say = Callable[[str], None]  # where a one-line message goes
Walk = tuple[int, int, float]  # what a block's pair plan is walked with: (seed, max_tokens, short_seq_prob)
# a block encoded: its documents, and their pair plan (PAIR_PLAN rows, each row's document in the block) or None
EncodedBlock = tuple[Encoded, tuple[np.ndarray, np.ndarray] | None]


def default_workers() -> int:
    """The CPUs this process may run on (its affinity mask, which taskset / cgroups set), at least 1."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def usable_workers(asked: int, say: Say | None = None) -> int:
    """The worker processes a run uses: 0 means one per usable CPU; more than the usable CPUs are capped there,
    with a one-line warning through `say` (None: a BertkitWarning). More processes than CPUs would not go faster,
    and each holds a tokenizer and up to 2 blocks: --workers 100000 forked thousands and took all the memory."""
    cap = default_workers()
    if asked <= cap:
        return asked or cap
    message = f"--workers {asked}: more than the {cap} usable CPU(s) of this machine; using {cap} workers"
    if say is None:
        import warnings

        from ..errors import BertkitWarning

        warnings.warn(message, BertkitWarning, stacklevel=3)
    else:
        say(message)
    return cap


@dataclass
class PrepareConfig:
    """bertkit prepare: tokenize a corpus once into a dataset folder bertkit pretrain --data reads by memory map."""

    corpus: list[str] = opt(
        list,
        f"text files, folders, JSONL, Parquet (.parquet), .gz, or {' / '.join(BUILTIN_CORPORA)}",
        nargs="+",
        required=True,
    )
    tokenizer: str = opt("", "tokenizer (or model) directory: vocab.txt / tokenizer.json", required=True)
    out: str = opt("", "the dataset folder to write (it appears only once complete)", required=True)
    doc_sep: str = opt(
        "line", "plain text: one document per line, or documents separated by blank lines", choices=DOC_SEPS
    )
    text_field: str = opt("text", "JSONL field / Parquet column holding the text")
    wwm: bool = opt(False, "mark jieba words for whole-word masking of Chinese (pretrain --wwm); slower")
    heldout: float = opt(
        0.01,
        "share of documents held out for evaluation (chosen per document, seeded; when the "
        "draws hold out none, the last document)",
    )
    seed: int = opt(0, "seed of the held-out choice and of the next-sentence pairs")
    nsp_seq_len: int = opt(
        128,
        "plan next-sentence pairs for rows of this many tokens as the documents are "
        "tokenized (pretrain --objective mlm-nsp --seq-len N reads them; another N walks "
        "the sentences at its start); 0: plan none",
    )
    workers: int = opt(0, "worker processes (0: one per CPU core)")
    overwrite: bool = opt(False, "replace a dataset already in --out")
    progress: bool = opt(True, "show a progress bar")

    def problem(self) -> str | None:
        if not 0.0 <= self.heldout < 1.0:
            return f"argument --heldout: must be in [0, 1), got {self.heldout}"
        if self.workers < 0:
            return f"argument --workers: must be >= 0, got {self.workers}"
        if self.nsp_seq_len and self.nsp_seq_len < 8:
            return f"argument --nsp-seq-len: must be 0 (no pairs) or at least 8, got {self.nsp_seq_len}"
        return None


@dataclass
class PrepareSummary:
    """What prepare did: the manifest written, whether the folder was already there, the time it took."""

    manifest: dict[str, Any]
    reused: bool
    seconds: float
    text_bytes: int


def prepare(
    corpus: CorpusSpec,
    tokenizer: Tokenizer | str,
    out: str,
    *,
    doc_sep: str = "line",
    text_field: str = "text",
    wwm: bool = False,
    heldout: float = 0.01,
    seed: int = 0,
    nsp_seq_len: int = 128,
    workers: int = 0,
    overwrite: bool = False,
    progress: bool = False,
    say: Say | None = None,
) -> PrepareSummary:
    """Write the dataset folder `out` (module doc). A complete folder made from the same sources (by sha256),
    options and vocabulary is kept as it is (reused=True); another one needs overwrite=True."""
    workers = usable_workers(workers, say)  # before `say` becomes silent: the cap is always said
    say = say or (lambda *a: None)
    start = time.perf_counter()
    tokenizer_path = None
    if isinstance(tokenizer, (str, os.PathLike)):
        tokenizer_path = os.fspath(tokenizer)
        tokenizer = Tokenizer.from_pretrained(tokenizer)
    names = resolve(corpus, doc_sep)
    options: dict[str, Any] = {  # JSON, kept in the manifest
        "doc_sep": doc_sep,
        "text_field": text_field,
        "words": "jieba" if wwm else "wordpiece",
        "heldout": heldout,
        "seed": seed,
        "pairs": pair_options(nsp_seq_len) if nsp_seq_len else None,
    }
    identity = {"tokenizer": _tokenizer_info(tokenizer), "options": options}
    out = os.path.normpath(out)
    inputs = [("--corpus", n) for n in names] + [("--tokenizer", tokenizer_path)]
    with _locked(out):
        # outfolder.py's rules: not a file, not the working directory; --overwrite replaces only a dataset
        entries = check_out(
            out, DataError, overwrite=overwrite, inputs=inputs, ours=_dataset_entry, what="a dataset", renamed=True
        )
        kept = _same_dataset(out, identity, names)
        if kept is not None:
            say(f"{out}: already prepared from the same corpus, options and vocabulary; kept")
            return PrepareSummary(kept, True, round(time.perf_counter() - start, 2), kept.get("text_bytes", 0))
        if entries and not overwrite:
            foreign = [n for n in entries if not _dataset_entry(n)]
            raise DataError(
                f"--out {out}: already holds "
                + (
                    f"files that are not a dataset ({', '.join(foreign[:5])}); pass an empty or new --out"
                    if foreign
                    else "another dataset, or a damaged one; pass --overwrite to replace it (it is moved aside to "
                    f"{os.path.basename(out)}.replaced-<time>, not deleted), or another --out"
                )
            )
        partial = _sibling(out, "partial")
        if os.path.lexists(partial):
            shutil.rmtree(partial)  # a run that did not finish (its lock is gone, or we would not hold it)
        os.makedirs(partial)
        try:
            tokenizer.save_pretrained(os.path.join(partial, TOKENIZER))
            manifest = _write(names, tokenizer, partial, options, wwm, workers, progress, say)
            manifest = {"format": FORMAT, "version": VERSION, **identity, **manifest}
            atomic_write_text(os.path.join(partial, MANIFEST), json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        except BaseException as e:
            shutil.rmtree(partial, ignore_errors=True)  # an error (or Ctrl-C) leaves nothing behind; kill -9 does
            problem = write_problem(e, os.path.dirname(partial)) if isinstance(e, Exception) else None
            if problem:  # a full disk, a read-only folder, ...: one line naming the file (files.write_problem)
                raise DataError(
                    f"{getattr(e, 'filename', None) or partial}: {problem}; nothing was written to --out {out}"
                ) from None
            raise
        _replace(partial, out)
    seconds = round(time.perf_counter() - start, 2)
    return PrepareSummary(manifest, False, seconds, manifest["text_bytes"])


def _same_dataset(out: str, identity: dict[str, Any], names: list[str]) -> dict[str, Any] | None:
    """The manifest of a complete, undamaged dataset in `out` made from the same sources (sha256), options and
    vocabulary; None otherwise."""
    try:  # an earlier manifest that cannot be read is no dataset to reuse
        old = read_json(os.path.join(out, MANIFEST), DataError)
    except DataError:
        return None
    if not isinstance(old, dict) or any(old.get(k) != v for k, v in identity.items()):
        return None
    if old.get("sources") != [asdict(source(n)) for n in names]:
        return None
    try:
        PretrainingData.open(out)  # every file's size and sha256
    except DataError:
        return None
    return old


def _tokenizer_info(tokenizer: Tokenizer) -> dict[str, Any]:
    return {
        "vocab_size": tokenizer.vocab_size,
        "fingerprint": vocab_digest(tokenizer),
        "ids_dtype": ids_dtype(tokenizer.vocab_size).name,
    }


# ----- the work ----------------------------------------------------------------------------------
def _write(
    names: list[str],
    tokenizer: Tokenizer,
    folder: str,
    options: dict[str, Any],
    wwm: bool,
    workers: int,
    progress: bool,
    say: Say,
) -> dict[str, Any]:
    """The corpus `names` tokenized by `workers` processes into `folder`'s train/ and heldout/ (_Splits); the
    manifest's sources, splits and counts."""
    pairs = options["pairs"]
    splits = _Splits(folder, tokenizer.vocab_size, options)
    # each worker walks its documents' next-sentence pairs as it tokenizes them (rows.walk_documents)
    walk = (options["seed"], pairs["seq_len"] - 3, pairs["short_seq_prob"]) if pairs else None
    sources: list[Source] = []
    stats = {"documents_read": 0, "empty_documents": 0, "text_bytes": 0}
    bar = _bar(progress, names)
    blocks = _blocks(
        iter_documents(names, text_field=options["text_field"], doc_sep=options["doc_sep"], sources=sources, say=say),
        stats,
    )
    with _encoder(tokenizer, wwm, workers, walk) as encode:
        for first, size, encoded in encode(blocks):
            stats["empty_documents"] += splits.add(first, encoded)
            if bar is not None:
                bar.update(size)
    if bar is not None:
        bar.close()
    written = splits.close()
    if written["train"]["documents"] == 0:
        raise DataError(
            f"{', '.join(names[:3])}: no document left to train on ({stats['documents_read']} read, "
            f"{written['heldout']['documents']} held out, {stats['empty_documents']} without a token)"
        )
    return {"sources": [asdict(s) for s in sources], "splits": written, **stats}


# one or more documents as SplitWriter.append's arguments: ids, word starts, sentence starts, lengths, pair plan
Documents = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]


class _Splits:
    """The train/ and heldout/ writers of a folder being prepared: each document goes to the split its seeded
    draw picks (corpus.is_heldout), in corpus order. The last training document so far is held back, so that a
    small corpus whose draws held out nothing can give it to evaluation (close)."""

    def __init__(self, folder: str, vocab_size: int, options: dict[str, Any]) -> None:
        self.heldout_share, self.seed = options["heldout"], options["seed"]
        self.writers = {
            split: SplitWriter(os.path.join(folder, split), vocab_size, pairs=bool(options["pairs"]))
            for split in ("train", "heldout")
        }
        self.last: list[Documents] = []  # the training document held back (none, or one)

    def add(self, first: int, block: EncodedBlock) -> int:
        """An encoded block's documents (the first of them the corpus's document `first`) written to their splits;
        the number of them without a token (not written)."""
        encoded, plan = block
        held = is_heldout(np.arange(first, first + len(encoded.lengths)), self.heldout_share, self.seed)
        keep = encoded.lengths > 0
        token_held = np.repeat(held, encoded.lengths)
        train = np.flatnonzero(keep & ~held)
        if len(train):
            self.add_training(encoded, plan, train, ~token_held)
        self.writers["heldout"].append(
            encoded.ids[token_held],
            encoded.word_starts[token_held],
            encoded.sentence_starts[token_held],
            encoded.lengths[keep & held],
            _pairs_of(plan, encoded.lengths, np.flatnonzero(keep & held)),
        )
        return int((~keep).sum())

    def add_training(
        self, encoded: Encoded, plan: tuple[np.ndarray, np.ndarray] | None, train: np.ndarray, kept: np.ndarray
    ) -> None:
        """The block's training documents (`train`: their indices; `kept`: their tokens) written after the one held
        back before, all but the last: that one is held back in its place."""
        if self.last:
            self.writers["train"].append(*self.last.pop())
        cut = int(encoded.lengths[: train[-1]].sum())  # where the block's last training document starts
        kept[cut:] = False
        self.writers["train"].append(
            encoded.ids[kept],
            encoded.word_starts[kept],
            encoded.sentence_starts[kept],
            encoded.lengths[train[:-1]],
            _pairs_of(plan, encoded.lengths, train[:-1]),
        )
        end = cut + int(encoded.lengths[train[-1]])
        self.last.append(
            (
                encoded.ids[cut:end],
                encoded.word_starts[cut:end],
                encoded.sentence_starts[cut:end],
                encoded.lengths[train[-1:]],
                _pairs_of(plan, encoded.lengths, train[-1:]),
            )
        )

    def close(self) -> dict[str, Any]:
        """The held-back document written, then each split's files closed: {split: what SplitWriter.close says}."""
        if self.last:  # a small corpus whose draws held out nothing gives its last training document to evaluation
            moved = self.heldout_share > 0 and self.writers["heldout"].docs == 0 and self.writers["train"].docs > 0
            self.writers["heldout" if moved else "train"].append(*self.last.pop())
        return {split: writer.close() for split, writer in self.writers.items()}


def _pairs_of(plan: tuple[np.ndarray, np.ndarray] | None, lengths: np.ndarray, docs: np.ndarray) -> np.ndarray | None:
    """The plan rows of the block's documents `docs` (ascending), their token positions counted from the first of
    them as if only they were written, back to back; None when no pairs are planned."""
    if plan is None:
        return None
    rows, row_docs = plan
    mine = np.isin(row_docs, docs)
    picked = rows[mine]
    shift = np.zeros(len(lengths), dtype=np.int64)  # per document: its start in the block - its start among docs
    shift[docs] = (np.cumsum(lengths) - lengths)[docs] - (np.cumsum(lengths[docs]) - lengths[docs])
    moved = shift[row_docs[mine]]
    picked["a_start"] -= moved
    picked["b_start"][picked["b_start"] >= 0] -= moved[picked["b_start"] >= 0]
    return picked


def _blocks(documents: Iterable[str], stats: dict[str, int]) -> Iterator[tuple[int, list[str], int]]:
    """(index of the first document, its texts, their UTF-8 bytes) of about BLOCK_CHARS characters each."""
    texts, chars, first = [], 0, 0
    for doc in documents:
        texts.append(doc)
        chars += len(doc)
        if chars >= BLOCK_CHARS:
            yield first, texts, _utf8_size(texts, stats)
            first, texts, chars = first + len(texts), [], 0
    if texts:
        yield first, texts, _utf8_size(texts, stats)


def _utf8_size(texts: list[str], stats: dict[str, int]) -> int:
    size = sum(len(t.encode("utf-8")) for t in texts)
    stats["documents_read"] += len(texts)
    stats["text_bytes"] += size
    return size


_worker: dict[str, Any] = {}  # this worker's encoder (DocumentEncoder) and wwm (bool)
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
MANAGER_JOIN_SECONDS = 5.0  # how long a stop waits for the pool's thread to notice dead workers by itself
PARENT_CHECK_SECONDS = 0.5  # how often a worker without prctl (not Linux) looks whether its parent is there
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _start_worker(backend_json: str, wwm: bool) -> None:
    from tokenizers import Tokenizer as Backend

    backend = Backend.from_str(backend_json)
    _worker.update(encoder=DocumentEncoder(backend), wwm=wwm)


def _start_pool_worker(parent: int, backend_json: str, wwm: bool) -> None:
    """The initializer of each pool worker: it dies with `parent` (the pid of the process that started the pool),
    leaves stop signals to it, then loads the tokenizer."""
    _die_with_parent(parent)
    # Ctrl-C signals the terminal's whole process group: the parent stops, and ends us (no traceback from here);
    # SIGTERM kills a worker as it kills any process (a forked worker would otherwise have the CLI's handler)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # held by the parent while it forked us
    _start_worker(backend_json, wwm)


def _die_with_parent(parent: int) -> None:
    """End this worker with SIGKILL as soon as its parent ends, however that ends (kill -9 included): a worker
    whose parent is gone would wait for work forever. On Linux the kernel does it (PR_SET_PDEATHSIG); elsewhere a
    daemon thread looks at getppid() every PARENT_CHECK_SECONDS. A parent that died before this ran shows in
    getppid() too: it then names whoever adopted us, not `parent`. (Compared with `parent`, not with 1: a
    subreaper adopts orphans under another pid, and in a container the parent may itself be pid 1.)
    SIGKILL, so that the end is quiet and cannot run anything that waits on the parent; the parent, being gone,
    cannot take it for a worker that crashed (while the parent lives, nothing here fires)."""
    armed = _set_parent_death_signal()
    if os.getppid() != parent:
        _end_now()
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), name="bertkit-watch-parent", daemon=True).start()


def _set_parent_death_signal() -> bool:
    """prctl(PR_SET_PDEATHSIG, SIGKILL): the kernel kills us when the thread that forked us ends (the pool is
    started, and its processes forked, by the thread that runs prepare(), which outlives the pool). False where
    prctl is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):  # no libc to load, or no prctl in it
        return False


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_SECONDS)
    _end_now()


def _end_now() -> None:
    os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))  # no SIGKILL on Windows: TerminateProcess


@contextlib.contextmanager
def _stop_signals_held() -> Iterator[None]:
    """Hold SIGINT / SIGTERM in this thread while pool workers may be started (inside submit): a forked worker
    inherits the mask, so a Ctrl-C to the process group before its initializer has set its own handlers waits
    (and is then ignored) instead of raising in it; here they arrive on leaving the block. The pool's threads,
    started there too, keep the mask: stop signals go to this thread."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _stop_workers(pool: futures.ProcessPoolExecutor) -> None:
    """End the pool's workers now, and the pool with them: after an error or a stop signal the blocks in flight
    are not wanted, and leaving the pool's `with` would wait for every one of them (seconds each; more with
    --wwm). This process holds the other ends of the pipes to and from the workers too: a worker killed halfway
    through reading a block or sending a result would leave the pool's threads waiting forever for the rest
    (CPython gh-94777 for the first, fixed from 3.11 on; not the second), so our ends are closed where the
    pool's thread has not moved on by itself after MANAGER_JOIN_SECONDS. Uses private parts of the pool, the same
    from Python 3.9 to 3.13; any missing is skipped."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    ends = [
        getattr(getattr(pool, queue, None), end, None)
        for queue, end in (("_call_queue", "_reader"), ("_result_queue", "_writer"))
    ]
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)  # (drops the pool's references to all of the above)
    for process in processes:
        process.kill()
    if not processes or manager is None:
        return
    # The pool's own thread sees the workers die (a broken pool), closes the call queue's reader and reaps them;
    # our ends are closed only where it is stuck in a result cut short. Never both at once: two threads closing
    # one pipe end race (EBADF, or a reused descriptor closed).
    manager.join(timeout=MANAGER_JOIN_SECONDS)
    if manager.is_alive():
        for end in ends:
            if end is not None:
                with contextlib.suppress(OSError):
                    end.close()
        manager.join()


def _encode_block(first: int, texts: list[str], walk: Walk | None) -> EncodedBlock:
    """texts tokenized, and their pair plan when `walk` = (seed, max_tokens, short_seq_prob): (Encoded, (PAIR_PLAN
    rows with positions in the block, each row's document in the block) or None). Documents are keyed by their
    place in the corpus (first + i), so the plan is the same for every block size and worker count."""
    encoded: Encoded = _worker["encoder"].encode(texts, chinese_words=_worker["wwm"])
    if walk is None:
        return encoded, None
    seed, max_tokens, short_seq_prob = walk
    return encoded, walk_documents(
        encoded.sentence_starts, encoded.lengths, first + np.arange(len(texts)), seed, max_tokens, short_seq_prob
    )


@contextlib.contextmanager
def _encoder(
    tokenizer: Tokenizer, wwm: bool, workers: int, walk: Walk | None = None
) -> Iterator[Callable[[Iterable[tuple[int, list[str], int]]], Iterator[tuple[int, int, EncodedBlock]]]]:
    """encode(blocks) -> (first, size, Encoded) in order: in this process (1 worker) or in a pool, with at most
    2 blocks per worker in flight (the reader waits for the writer, so memory stays flat)."""
    backend_json = plain_backend(tokenizer).to_str()
    if workers == 1:
        _start_worker(backend_json, wwm)

        def encode_here(blocks: Iterable[tuple[int, list[str], int]]) -> Iterator[tuple[int, int, EncodedBlock]]:
            for first, texts, size in blocks:
                yield first, size, _encode_block(first, texts, walk)

        yield encode_here
        return
    # fork where there is one (no re-import of bertkit per worker); each worker tokenizes on one thread
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    saved = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        with futures.ProcessPoolExecutor(
            workers, mp_context=context, initializer=_start_pool_worker, initargs=(os.getpid(), backend_json, wwm)
        ) as pool:

            def encode_pool(
                blocks: Iterable[tuple[int, list[str], int]],
            ) -> Iterator[tuple[int, int, EncodedBlock]]:
                pending: deque[tuple[int, int, futures.Future[EncodedBlock]]] = deque()
                for first, texts, size in blocks:
                    with _stop_signals_held():  # workers start inside submit (the first one, with fork)
                        job = pool.submit(_encode_block, first, texts, walk)
                    pending.append((first, size, job))
                    if len(pending) >= 2 * workers:
                        first_, size_, job = pending.popleft()
                        yield first_, size_, job.result()
                while pending:
                    first_, size_, job = pending.popleft()
                    yield first_, size_, job.result()

            try:
                yield encode_pool
            except BaseException:
                _stop_workers(pool)
                raise
    except futures.process.BrokenProcessPool:
        raise BertkitError(
            "a worker process of bertkit prepare died (out of memory? killed?); run it again, "
            "with fewer --workers if memory is short"
        ) from None
    finally:
        if saved is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = saved


def _bar(progress: bool, names: list[str]) -> Any:  # a tqdm bar or None (tqdm is imported only when one is shown)
    if not progress:
        return None
    from tqdm.auto import tqdm

    total = sum(os.path.getsize(n) for n in names if not n.startswith("builtin:") and not n.endswith(".gz")) or None
    return tqdm(total=total, desc="prepare", unit="B", unit_scale=True, dynamic_ncols=True)


# ----- the folder --------------------------------------------------------------------------------
def _sibling(out: str, kind: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(out)), f".{os.path.basename(out)}.{kind}")


@contextlib.contextmanager
def _locked(out: str) -> Iterator[None]:
    """Hold `.NAME.lock` beside the folder (our pid and host) for the length of the block; a lock whose process
    has died on this host is taken over."""
    path = _sibling(out, "lock")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError as e:
        raise DataError(
            f"--out {out}: cannot create its folder {os.path.dirname(path)}: "
            f"{write_problem(e, os.path.dirname(path)) or e.strerror or e}"
        ) from None
    lock_file(path, DataError, f"--out {out}", "is preparing it", "or delete {path} if that run is gone")
    try:
        yield
    finally:
        release_lock(path)


def _replace(partial: str, out: str) -> None:
    """Rename the finished folder into place; an earlier dataset there is moved aside first (outfolder.py: to
    <out>.replaced-<time>, never deleted), an empty folder is simply replaced. A stop signal waits for both
    renames: a stop never finds --out moved aside and the new folder not yet in its place."""
    with _stop_signals_held():
        if os.path.isdir(out) and os.listdir(out):
            move_aside(out, what="the earlier dataset")
        elif os.path.isdir(out):
            os.rmdir(out)
        os.rename(partial, out)


def _dataset_entry(name: str) -> bool:
    """Whether `name` is an entry a dataset folder holds (what --overwrite may move aside with it)."""
    return name in (MANIFEST, TOKENIZER, *SPLITS)


if not TYPE_CHECKING:  # old names, for one release
    __getattr__ = moved(
        __name__,
        {
            "main": "bertkit.commands.prepare:main",
        },
    )
