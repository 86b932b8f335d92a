"""Writing files so that a crash never leaves half of one, checking that what is read back is what was written,
and keeping two processes from writing one folder at once.

- `write_atomic`: every write goes to a temporary sibling, is flushed to disk, and is renamed over the target in one
  step. Readers see the old file or the new one, never a mixture; a full disk leaves the old one and says so.
- `sha256_file`, `checksums_text`, `verify_digests`: sha256 recorded when files are written (a SHA256SUMS file in
  `sha256sum`'s format, or a dict in a metadata file) and checked when they are read, so a flipped byte, a
  truncation or an edit is an error naming the file instead of a silently different model or corpus.
- `folder_lock`: one writer per folder, by `fcntl.flock` on a lock file beside the folder; the OS releases it when
  the holder dies, so a crash never leaves a folder stuck.

No torch, no model: the reports, the GLUE sweep, the corpus and the checkpoints all write through here.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from electra.utils.errors import CorruptFileError, DiskFullError, FolderInUseError, is_disk_full
from electra.utils.faults import failpoint

CHECKSUMS_FILE = "SHA256SUMS"
"""Beside the files it covers, one `HASH  NAME` line each: `sha256sum -c SHA256SUMS` checks them by hand too."""
_HASH_CHUNK = 4 << 20


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


NEW_FILE_MODE = 0o666 & ~_umask()
"""What `open(path, "w")` would give a new file (mkstemp's temporary files are 0600: a report or run.json others on
a shared machine or filesystem could not read). Read once, at import, before any thread could race the umask."""


def write_atomic(path: str | Path, data: bytes | str) -> None:
    """Write a file through a temporary sibling and an atomic rename; a full disk raises DiskFullError and leaves
    the previous file (if any) as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    existed = path.exists()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, path.stat().st_mode & 0o7777 if existed else NEW_FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        failpoint(f"write_atomic:{path.name}")
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if is_disk_full(err):
            kept = f"the previous {path.name} is intact" if existed else "nothing was written"
            raise DiskFullError(err.errno, f"disk full while writing {path} ({err.strerror}); {kept}") from err
        raise


def write_json(path: str | Path, obj: Any, indent: int | None = 1) -> None:
    """`obj` as JSON (one trailing newline), written atomically."""
    write_atomic(path, json.dumps(obj, indent=indent) + "\n")


# -- checksums ---------------------------------------------------------------------------------------------------


def sha256_file(path: str | Path) -> str:
    """The file's sha256, read in 4 MiB pieces (memory stays bounded for a corpus of any size)."""
    h = hashlib.sha256()
    buf = bytearray(_HASH_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def checksums_text(digests: dict[str, str]) -> str:
    """A SHA256SUMS file: one `HASH  NAME` line per file, as `sha256sum` writes them."""
    return "".join(f"{digest}  {name}\n" for name, digest in sorted(digests.items()))


def read_checksums(folder: Path) -> dict[str, str] | None:
    """The digests recorded in `folder`/SHA256SUMS; None when the folder has none (written before checksums)."""
    path = Path(folder) / CHECKSUMS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise CorruptFileError(f"{path}: unreadable ({err})") from None
    digests = {}
    for line_no, line in enumerate(text.splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or not name:
            raise CorruptFileError(f"{path}:{line_no}: not a 'SHA256  NAME' line")
        digests[name] = digest
    return digests


def verify_digests(
    folder: Path, digests: dict[str, str], required: Iterable[str] = (), recorded_in: str = CHECKSUMS_FILE
) -> None:
    """Raise CorruptFileError naming the first file of `folder` that is missing or whose sha256 differs from
    `digests` (as recorded in `recorded_in`); `required` files must be among the recorded ones."""
    folder = Path(folder)
    for name in required:
        if name not in digests:
            raise CorruptFileError(f"{folder / name}: not listed in {folder / recorded_in}")
    for name, digest in sorted(digests.items()):
        path = folder / name
        if not path.is_file():
            raise CorruptFileError(f"{path}: missing (listed in {folder / recorded_in})")
        if sha256_file(path) != digest:
            raise CorruptFileError(
                f"{path}: sha256 differs from the one in {folder / recorded_in}: the file was "
                "changed or damaged after it was written"
            )


# -- one writer per folder ---------------------------------------------------------------------------------------


class FolderLock:
    """An exclusive lock on a folder, held through `fcntl.flock` on `.NAME.lock` beside it (beside, not inside: a
    folder that is replaced by a rename, such as a prepared corpus, keeps its lock). The lock file says who holds
    it (pid, host, since when); the OS drops the lock when the holder dies, so a crash never leaves it stuck.
    flock works across processes of one machine (and on NFS v4); a second holder on another machine sharing the
    folder over an older network filesystem is not excluded."""

    def __init__(self, folder: str | Path, what: str):
        self.folder, self.what = Path(folder), what
        self.path = self.folder.parent / f".{self.folder.name}.lock"
        self._fd: int | None = None

    def acquire(self, wait: float = 0.0) -> FolderLock:
        """Take the lock, or raise FolderInUseError naming the folder and its holder (after waiting up to `wait`
        seconds for the holder to let go)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + wait
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                if time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                raise FolderInUseError(
                    f"{self.folder}: in use by another {holder.get('what', self.what)} (pid {holder.get('pid', '?')} "
                    f"on {holder.get('host', '?')}, since {holder.get('since', '?')}); wait for it to end or use "
                    f"another folder (the lock, {self.path}, is released when that process ends)"
                ) from None
            try:  # a holder that just released it unlinked the file: lock the file that is at the path now
                current = os.stat(self.path)
                mine = os.fstat(fd)
                if (current.st_dev, current.st_ino) == (mine.st_dev, mine.st_ino):
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "what": self.what,
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(me) + "\n").encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            self.path.unlink(missing_ok=True)  # unlinked while still held: the next holder's file is a fresh one
        finally:
            os.close(fd)  # releases the flock

    def __enter__(self) -> FolderLock:
        return self if self._fd is not None else self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def folder_lock(folder: str | Path, what: str) -> FolderLock:
    """Hold `folder` for this process: `with folder_lock(out, "study"): ...` (or keep the returned lock and call
    `release()`). Raises FolderInUseError, naming the folder and the holder's pid and host, when a live process
    holds it; `what` says what this process is doing there ("pretraining run", "data prepare", "study")."""
    return FolderLock(folder, what).acquire()


def _holder(fd: int) -> dict:
    try:
        raw = os.pread(fd, 4096, 0).decode("utf-8", errors="replace")
        holder = json.loads(raw) if raw.strip() else {}
    except (OSError, ValueError):
        holder = {}
    return holder if isinstance(holder, dict) else {}
