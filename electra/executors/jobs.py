"""The interface every executor shares: a `Job` to do, and the `JobFailure`s of jobs that ended without a result."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from electra.utils.wording import plural

EXECUTORS = ("local", "slurm")


@dataclass(frozen=True)
class Job:
    """One run to do: `key` names it ("pretrain/NAME", "glue/rte/3"), `fn(*args)` does it (a module-level function:
    it is pickled by name for another process), `done()` tells from the output folder that it finished."""

    key: str
    fn: Callable
    args: tuple
    done: Callable[[], bool]
    title: str = ""
    """What a local executor prints before it runs the job in its own process ("pretraining electra: ...")."""
    progress: Callable[[], float | None] | None = None
    """The newest modification time of what the run writes (its metrics), None before it wrote any: a SLURM job
    whose run writes nothing for long is reported as stalled."""
    reset: Callable[[], None] | None = None
    """Called before the job is submitted again after its job left the queue without a result (e.g. to drop the
    claim that job left on its run)."""


@dataclass
class JobFailure:
    """A job that left the queue (or its process) without its run's result."""

    key: str
    job_id: str
    error: str
    log: Path | None = None

    def line(self) -> str:
        where = f" (log: {self.log})" if self.log is not None else ""
        return f"{self.key}: job {self.job_id} ended without a result: {self.error}{where}"


class JobsFailed(RuntimeError):
    """Some jobs ended without their runs' results; running the same command again submits them again."""

    def __init__(self, failures: Sequence[JobFailure]):
        super().__init__(*[f.line() for f in failures])
        self.failures = list(failures)

    def __str__(self) -> str:
        head = f"{plural(len(self.failures), 'SLURM job')} ended without a result:"
        return "\n".join(
            [head, *[f"  {line}" for line in self.args], "running the same command again submits them again"]
        )


class JobsDetached(KeyboardInterrupt):
    """Ctrl-C while following SLURM jobs: the jobs go on. `lines`: how many, that the same command follows them
    again, and how to cancel them."""

    def __init__(self, *lines: str):
        super().__init__(*lines)
        self.lines = list(lines)


class JobsCannotStart(JobsFailed):
    """Jobs pending for a reason that waiting does not resolve; each line names the reason and the flag."""

    def __str__(self) -> str:
        head = f"{plural(len(self.failures), 'SLURM job')} cannot start:"
        return "\n".join([head, *[f"  {f.error}" for f in self.failures]])


class Executor(Protocol):
    """Does every job of `jobs` not done yet; `on_done(job)` as each finishes. Returns the jobs that ended without
    their result (a local executor re-raises a run's error instead)."""

    def run(self, jobs: Sequence[Job], on_done: Callable[[Job], None] | None = None) -> list[JobFailure]: ...
