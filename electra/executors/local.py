"""Runs on this machine: jobs in this process or in a pool of spawned processes (a study's pretraining runs), and
the worker processes of a GLUE sweep (`python -m electra.glue.sweep`), which divide the runs among themselves.

Every process started here stops when the process that started it dies (electra.utils.processes.stop_with_parent):
a study or sweep killed alone leaves no worker running on; a pretraining worker then saves a checkpoint and stops.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

from electra.executors.jobs import Job, JobFailure
from electra.utils.processes import PARENT_ENV, stop_with_parent

WORKER_STOP_SECONDS = 60.0
"""How long stopped workers (SIGINT) get to drop their runs before they are killed."""


class LocalExecutor:
    """Jobs on this machine: one at a time in this process (`workers` 1), or `workers` at a time in spawned
    processes. In this process a job that returns without being done (a run stopped by a signal) ends the
    sequence: the caller says what stopped. A job's error is raised here (for a pool: once the others ended)."""

    def __init__(self, workers: int = 1):
        self.workers = max(1, workers)

    def run(self, jobs: Sequence[Job], on_done: Callable[[Job], None] | None = None) -> list[JobFailure]:
        todo = [j for j in jobs if not j.done()]
        if self.workers == 1 or len(todo) == 1:
            for job in todo:
                if job.title:
                    print(f"== {job.title}", flush=True)
                job.fn(*job.args)
                if not job.done():
                    break
                if on_done is not None:
                    on_done(job)
            return []
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(
            min(self.workers, len(todo)), context, initializer=_watch_parent, initargs=(os.getpid(),)
        ) as pool:
            futures = {pool.submit(job.fn, *job.args): job for job in todo}
            for future in as_completed(futures):
                future.result()  # re-raises the job's error
                if on_done is not None and futures[future].done():
                    on_done(futures[future])
        return []


_parent_pid: int | None = None
"""In a pool's worker: the process that started the pool (`_watch_parent`)."""


def _watch_parent(parent_pid: int) -> None:
    """A pool worker's first act: stop (SIGTERM) when the process that started it dies."""
    global _parent_pid
    _parent_pid = parent_pid
    stop_with_parent(parent_pid)


def parent_gone() -> bool:
    """In a pool's worker: whether the process that started it died (no one is left to report to or wait for)."""
    return _parent_pid is not None and os.getppid() != _parent_pid


def start_workers(
    module: str, arguments: list[list[str]], threads: int, env: dict[str, str] | None = None
) -> list[subprocess.Popen]:
    """One `python -m MODULE ARGS` process per entry of `arguments`, each with `threads` CPU threads
    (OMP_NUM_THREADS), this process's pid to stop with (PARENT_ENV) and `env`. They run in a process group of
    their own, so that Ctrl-C at a terminal reaches this process alone, which then stops them (`stop_workers`)."""
    env = {**os.environ, **(env or {}), "OMP_NUM_THREADS": str(threads), PARENT_ENV: str(os.getpid())}
    command = [sys.executable, "-m", module]
    return [subprocess.Popen([*command, *args], env=env, process_group=0) for args in arguments]


def stop_workers(procs: list[subprocess.Popen], seconds: float = WORKER_STOP_SECONDS) -> None:
    """SIGINT to each worker (it drops its run and exits), then wait; a worker still there after `seconds`, or at
    a second Ctrl-C, is killed."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    try:
        deadline = time.monotonic() + seconds
        for p in procs:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        for p in procs:
            p.kill()
            p.wait()
