"""The project's own error types: what a caller (and `electra`'s one-line error messages) can rely on.

    InputError(ValueError)      bad input; the message names the file and line (or the config key)
      CorruptFileError          a file does not match the checksum recorded when it was written
      RefusedError              refused unless the caller insists; names the argument that does (overwrite=True)
    DiskFullError(OSError)      a write ran out of space; the message says what is still intact
    FolderInUseError(OSError)   another live process is writing this folder; the message names it (pid, host)

ConfigError, CheckpointError and the corpus readers' errors are InputErrors. No imports from the rest of the
package: every module may raise these.
"""

from __future__ import annotations

import errno


class InputError(ValueError):
    """Bad input; the message names the file and line (or the key) that caused it."""


class CorruptFileError(InputError):
    """A file differs from what was written (its sha256 no longer matches the recorded one), or is missing."""


class RefusedError(InputError):
    """Input refused unless the caller insists: "{what}; `keyword=True` {effect}", the keyword argument between
    backticks as electra.utils.wording.argument writes it, so that `electra` prints its flag instead (--overwrite)."""

    def __init__(self, what: str, keyword: str, effect: str):
        super().__init__(what, keyword, effect)  # args: so that it pickles
        self.what, self.keyword, self.effect = what, keyword, effect

    def __str__(self) -> str:
        return f"{self.what}; `{self.keyword}=True` {self.effect}"


class DiskFullError(OSError):
    """A write ran out of space (ENOSPC, a quota, or the file size limit); nothing half-written was kept.
    DiskFullError(errno, message): the message alone is its text, for a one-line error."""

    def __str__(self) -> str:
        return self.strerror if self.strerror else super().__str__()


class RankFailedError(RuntimeError):
    """Another rank of a distributed run raised; this one stops at the same step, with this one line (the failing
    rank prints its own error)."""


class FolderInUseError(OSError):
    """Another live process holds the folder's lock (see electra.utils.files.folder_lock)."""


DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def is_disk_full(err: BaseException) -> bool:
    return isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS
