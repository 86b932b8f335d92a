"""Worker processes that do not outlive the process that started them."""

from __future__ import annotations

import ctypes
import os
import signal

PARENT_ENV = "ELECTRA_PARENT_PID"
"""Set by a process for the workers it starts: its pid, which `stop_with_parent` checks."""
THREADS_SHARE_ENV = "ELECTRA_THREADS_SHARE"
"""Set beside OMP_NUM_THREADS by a process that gives its worker processes their threads (the GLUE sweep's
spawn_workers): why they have that many ("the sweep's share of 2 cores, 2 workers"), which a worker's threads line
says instead of naming a variable the user never set."""


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask, which `taskset`, a cgroup cpuset (SLURM's allocation,
    `docker --cpuset-cpus`) and a parent's pinning narrow, where `os.cpu_count()` counts the whole machine. Where
    the platform has no affinity call (macOS), the machine's count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:
        return os.cpu_count() or 1


def stop_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGTERM this process when its parent dies (PR_SET_PDEATHSIG), so that a study or a GLUE sweep
    killed alone (`kill PID`, a session's end that signals only it) leaves no orphan worker running on: a
    pretraining worker then saves a checkpoint and stops, a fine-tuning worker stops and its unfinished run is
    redone by the next sweep. If the parent is already gone, the signal comes now. Elsewhere (no glibc: macOS,
    musl) nothing is asked, and the workers outlive a killed parent there."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return
    PR_SET_PDEATHSIG = 1  # from <sys/prctl.h>
    libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != parent_pid:  # the parent died before the request was made
        os.kill(os.getpid(), signal.SIGTERM)
