"""Writing files so that a crash never leaves half of one: every write goes to a temporary sibling, is flushed to
disk, and is renamed over the target in one step. Readers see the old file or the new one, never a mixture.

No torch, no model: the reports, the GLUE sweep and the checkpoints all write through here.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: str | Path, data: bytes | str) -> None:
    """Write a file through a temporary sibling and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | Path, obj: Any, indent: int | None = 1) -> None:
    """`obj` as JSON (one trailing newline), written atomically."""
    write_atomic(path, json.dumps(obj, indent=indent) + "\n")
