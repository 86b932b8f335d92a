"""A testing hook: named moments at which a test can make this process fail, to prove that a crash at that exact
moment loses nothing (tests/test_reliability_*.py). Without the environment variable it does nothing.

    ELECTRA_FAILPOINT="checkpoint.write:optimizer.pt@1"    SIGKILL this process at the first hit of that point
    ELECTRA_FAILPOINT="evaluate@2,prepare.commit@1"        several points, comma-separated
    ELECTRA_FAILPOINT="write_atomic:result.json@1=enospc"  raise OSError(ENOSPC) there instead of dying

    ELECTRA_FAILPOINT_RANK=1                               only in the process whose RANK (torchrun's) is 1

NAME@COUNT[=ACTION]: fire at the COUNT-th time (default 1) this process reaches NAME; ACTION is kill (SIGKILL,
default) or enospc. The points (grep `failpoint(`): checkpoint.write:FILE (before each file of a checkpoint is
written), checkpoint.commit (the checkpoint folder renamed into place, older ones not yet pruned), evaluate (after a
held-out evaluation was logged, before the checkpoint of that step), finish (a run's final checkpoint and
export written, before run.json says it finished), batches (each step's batches read on the host,
in the prefetch thread), prepare.write (before each batch of tokens is
appended), prepare.commit (between moving the old prepared folder away and the new one into place),
write_atomic:FILE (before the temporary file is renamed over FILE).
"""

from __future__ import annotations

import errno
import os
import signal

ENV = "ELECTRA_FAILPOINT"
RANK_ENV = "ELECTRA_FAILPOINT_RANK"
_hits: dict[str, int] = {}


def failpoint(name: str) -> None:
    """Fail here if ELECTRA_FAILPOINT names this point and its count is reached; otherwise return at once."""
    spec = os.environ.get(ENV)
    if not spec or os.environ.get(RANK_ENV, os.environ.get("RANK", "0")) != os.environ.get("RANK", "0"):
        return
    for item in spec.split(","):
        point, _, rest = item.strip().partition("@")
        if point != name:
            continue
        count, _, action = rest.partition("=")
        _hits[name] = _hits.get(name, 0) + 1
        if _hits[name] == int(count or 1):
            _fire(name, action or "kill")
        return


def _fire(name: str, action: str) -> None:
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "enospc":
        raise OSError(errno.ENOSPC, f"No space left on device (failpoint {name})")
    raise ValueError(f"{ENV}: unknown action {action!r} at {name} (expected kill or enospc)")
