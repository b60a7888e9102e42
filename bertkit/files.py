"""File helpers every part of bertkit shares: atomic writes, reading UTF-8 text and JSON files, output paths.

    atomic_write(path, write)       write to a temp file beside `path`, then rename it over `path`
    atomic_write_text(path, text)   the same for a UTF-8 string
    write_problem(error, folder)    a one-line reason for a failed write (full disk, no permission)
    read_text(path, error, ...)     a UTF-8 file's text; a bad byte is an error naming file and line
    text_lines(text)                its lines, split at "\\n" only, line ends removed
    read_json(path, error, ...)     a UTF-8 JSON file's value; bad JSON is an error naming file, line and column
    check_output(path, flag, ...)   an output file refused before any work (a folder, no such folder, an input)
    to_json(value)                  JSON text that never holds NaN / Infinity
    digest(items)                   a short fingerprint of a sequence of strings
    folder_files(folder)            a folder's files and those one level down, as sorted relative paths
    file_stamp(path)                what changes when a file is written: device, inode, size, mtime, ctime
    lock_file(path, ...)            create a lock file holding our pid and host (a dead holder's is taken over)

Callers pass their own error class and wording to read_text (a vocabulary, a corpus and a
config.json each say what to do in their own terms); the file name and line number are added here.
Imports nothing from bertkit but errors.py, so any module can use it.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import gzip
import hashlib
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from .errors import BertkitError, CheckpointError


# ----- atomic writes -----------------------------------------------------------------------------
def atomic_write(path: str, write: Callable[[str], None]) -> None:
    """Call write(tmp_path) for a temp file beside `path`, then rename it over `path`.

    A failed write leaves `path` as it was and no temp file; a full disk or a folder that cannot be
    written is a CheckpointError naming the path (and the free space), not the writer's own error.
    """
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
        os.close(fd)
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a saved model should read like any written file
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
        problem = write_problem(e, directory)
        if problem:
            raise CheckpointError(f"{path}: {problem}; nothing was written over it") from e
        raise


def atomic_write_text(path: str, text: str) -> None:
    """Write `text` as UTF-8 to `path` atomically (see atomic_write)."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    atomic_write(path, write)


def write_problem(error: BaseException, directory: str) -> str | None:
    """A one-line reason for a failed write we can name (full disk, no permission), else None."""
    code = error.errno if isinstance(error, OSError) else _rust_errno(error)
    if code in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk is full ({_free_space(directory)})"
    if code in (errno.EACCES, errno.EPERM):
        return f"no permission to write there ({os.strerror(code)})"
    if code == errno.EROFS:
        return "the file system is read-only; write to another folder"
    if code == errno.EFBIG:
        return "the file is larger than this file system (or `ulimit -f`) allows; write it to another disk"
    # torch.save reports a full disk from its C++ writer: "unexpected pos", "file write failed"
    if isinstance(error, RuntimeError) and re.search(r"unexpected pos|file write failed", str(error)):
        return f"the write failed, most likely because the disk is full ({_free_space(directory)})"
    return None


def _rust_errno(error: BaseException) -> int | None:
    """The errno in a Rust I/O error's text: safetensors' SafetensorError says
    "Error while serializing: I/O error: No space left on device (os error 28)"."""
    found = re.search(r"\(os error (\d+)\)", str(error))
    return int(found.group(1)) if found else None


def _free_space(directory: str) -> str:
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return "free space unknown"
    return f"{free / 2**20:,.0f} MiB free"


# ----- reading text ------------------------------------------------------------------------------
def read_text(
    path: str,
    error: type[Exception],
    *,
    not_utf8: str,
    cannot_read: str,
    missing: str | None = None,
    folder: str | None = None,
    bad_gzip: str | None = None,
    strip_bom: bool = False,
) -> str:
    """The text of a UTF-8 file. Every failure raises `error("{path}: ...")` in the caller's words.

    The words are templates that follow "{path}: ":
      not_utf8     a byte that is not UTF-8; "line {line}: " goes before it; fields {byte}, {offset}
      cannot_read  any other OSError; fields {error} (its text) and {reason} (its strerror, else its text)
      missing      the file does not exist (None: cannot_read says it)
      folder       the path is a folder (None: cannot_read says it)
      bad_gzip     given: a path ending in .gz is gunzipped, and this names a file that is not gzip
    strip_bom removes a leading UTF-8 byte order mark (Windows editors write one).
    """
    raw = _read_bytes(path, error, cannot_read=cannot_read, missing=missing, folder=folder, bad_gzip=bad_gzip)
    skip = len(codecs.BOM_UTF8) if strip_bom and raw.startswith(codecs.BOM_UTF8) else 0
    try:
        return raw[skip:].decode("utf-8")
    except UnicodeDecodeError as e:
        offset = skip + e.start  # in the file, not in what follows the BOM
        line = raw[:offset].count(b"\n") + 1
        raise error(f"{path}: line {line}: " + not_utf8.format(byte=raw[offset], offset=offset)) from None


def _read_bytes(
    path: str,
    error: type[Exception],
    *,
    cannot_read: str,
    missing: str | None,
    folder: str | None,
    bad_gzip: str | None,
) -> bytes:
    try:
        if bad_gzip is not None and path.endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                return fh.read()
        with open(path, "rb") as fh:
            return fh.read()
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        assert bad_gzip is not None, "only the gunzipping read (bad_gzip given) raises these"
        raise error(f"{path}: " + bad_gzip.format(error=e)) from None
    except OSError as e:
        words = missing if isinstance(e, FileNotFoundError) else folder if isinstance(e, IsADirectoryError) else None
        if words is not None:
            raise error(f"{path}: {words}") from None
        raise error(f"{path}: " + cannot_read.format(error=e, reason=e.strerror or e)) from e


def read_json(path: str, error: type[BertkitError] = BertkitError, *, should_hold: str | None = None) -> Any:
    """The JSON value in file `path` (UTF-8). A file that cannot be read, is not UTF-8 or is not valid JSON raises
    `error` naming the path (and the line and column of bad JSON; `should_hold` says what the file is for)."""
    hint = f"; it should hold {should_hold}" if should_hold else ""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as e:
        raise error(f"{path}: line {e.lineno}, column {e.colno}: not valid JSON ({e.msg}){hint}") from None
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text (byte {e.start}){hint}") from None
    except OSError as e:
        raise error(f"{path}: cannot read ({e.strerror or e})") from None


def text_lines(text: str) -> list[str]:
    """The lines of `text`, split at "\\n" only, without the newline that ends the last line and
    without a "\\r" before each "\\n" (not str.splitlines(): it also splits at \\x1c, \\u2028, ...
    and so miscounts the line numbers errors name)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def digest(items: Iterable[str]) -> str:
    """A short fingerprint of a sequence of strings (a vocabulary in id order, training texts)."""
    h = hashlib.sha256()
    for item in items:
        h.update(str(item).encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


# ----- lock files --------------------------------------------------------------------------------
def folder_files(folder: str) -> list[str]:
    """The files of `folder` and of its folders one level down (1_Pooling/config.json), as sorted paths relative to
    it: what a model folder's load reads is among them."""
    found = []
    for entry in os.scandir(folder):
        if entry.is_dir():
            found += [f"{entry.name}/{e.name}" for e in os.scandir(entry.path) if e.is_file()]
        elif entry.is_file():
            found.append(entry.name)
    return sorted(found)


def file_stamp(path: str) -> tuple[int, ...]:
    """What changes when a file is written: (device, inode, size, mtime_ns, ctime_ns) of what `path` names. A file
    replaced has another inode; one written in place a new ctime, even with its mtime put back (os.utime)."""
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def lock_file(
    path: str, error: type[Exception], owner: str, doing: str, advice: str, takeover: str = "taking over"
) -> None:
    """Create `path` (O_EXCL) holding "pid host". A lock whose process is gone from this host is taken over
    (with a note); a live one raises error("{owner}: process P on H {doing} ({path}); wait for it, {advice}")."""
    for _ in range(2):  # a second try after removing a stale lock
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except OSError as e:
            if not isinstance(e, FileExistsError):
                raise error(
                    f"{owner}: cannot create the lock file {path}: "
                    f"{write_problem(e, os.path.dirname(path)) or e.strerror or e}"
                ) from None
            pid, host = read_lock(path)
            if pid is None or host != socket.gethostname() or alive(pid):
                holder = f"process {pid} on {host}" if pid is not None else "a process that wrote no pid"
                raise error(f"{owner}: {holder} {doing} ({path}); wait for it, " + advice.format(path=path)) from None
            print(f"{path}: process {pid} that held it has ended; {takeover}", file=sys.stderr)
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {socket.gethostname()}\n")
        return
    raise error(f"{owner}: another process took {path} while a stale one was being replaced; try again")


def read_lock(path: str) -> tuple[int | None, str | None]:
    """(pid, host) written in a lock file; (None, None) when it is empty or not ours to read."""
    try:
        with open(path, encoding="utf-8") as fh:
            parts = fh.read().split()
        return int(parts[0]), (parts[1] if len(parts) > 1 else socket.gethostname())
    except (OSError, ValueError, IndexError):
        return None, None


def alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (one we may not signal still exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def release_lock(path: str) -> None:
    """Remove the lock if it is still ours (a user may have deleted it and another process taken it)."""
    if read_lock(path)[0] == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


# ----- output paths and JSON out -----------------------------------------------------------------
def check_output(path: str | None, flag: str, inputs: list[str | None]) -> None:
    """Refuse an output path that cannot be written (or would overwrite an input) before any work."""
    if path is None:
        return
    for source in inputs:
        if source and os.path.exists(source) and os.path.realpath(source) == os.path.realpath(path):
            raise BertkitError(
                f"{flag} {path} is the input file {source}: it would be overwritten; choose another output path"
            )
    if os.path.isdir(path):
        example = os.path.join(path, "report.json" if flag == "--json" else "predictions.jsonl")
        raise BertkitError(f"{flag} {path}: is a folder; name a file in it, e.g. {example}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise BertkitError(f"{flag} {path}: the folder {folder} does not exist; create it first")
    if not os.access(folder, os.W_OK):
        raise BertkitError(f"{flag} {path}: cannot write in the folder {folder}; choose another output path")


def to_json(value: Any, **kw: Any) -> str:
    """JSON text that never holds NaN / Infinity (a non-finite float is a bug: say so in one line)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, **kw)
    except ValueError as e:
        raise BertkitError(f"output holds a value JSON cannot carry ({e}); nothing was written") from None
