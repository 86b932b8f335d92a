"""Worker processes that do not outlive the process that started them."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading

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


RESEND_SECONDS = 0.05
"""How long a Ctrl-C that arrived inside a finaliser waits before it is sent again (`interrupts_outside_finalizers`)."""


@contextlib.contextmanager
def interrupts_outside_finalizers():
    """Ctrl-C (SIGINT) as KeyboardInterrupt, but never inside an object's `__del__`: Python cannot raise out of a
    finaliser, so it prints "Exception ignored in ..." with a traceback and the interrupt is lost (a progress bar
    or a tensor freed at that moment swallowed a sweep's Ctrl-C). A signal that lands in one is sent again
    RESEND_SECONDS later, when the finaliser has returned. The previous handler is back when the block ends."""

    def handler(signum, frame):
        f = frame
        while f is not None:
            if f.f_code.co_name == "__del__":
                threading.Timer(RESEND_SECONDS, os.kill, (os.getpid(), signum)).start()
                return
            f = f.f_back
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set signal handlers
        return
    before = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
