"""SlurmExecutor: each run one SLURM job, submitted once, then followed until every job has left the queue.

Submitting happens under the lock of OUT/slurm (a second command on the same folder waits for it, then finds the
jobs in the book and follows them too): the book is read, the intents a killed command left are resolved from the
queue (book.py), the runs that have neither a result nor a live job are submitted as one job array, and the ids are
recorded. More jobs may be submitted while others are followed (a study submits a setting's fine-tuning as soon as
its pretraining is done).

Following, every `poll_seconds`: a finished run (its result on disk) is done; the jobs' states and pending reasons
are shown when they change, beside the time elapsed and the plan's; a job pending for a reason that waiting cannot
resolve ends the wait at once (queue.py NEVER_STARTS, HELD), cancelled unless held, one line each naming the flag;
a running job whose run writes nothing for `stall_minutes` is reported once; a job gone from the queue without its
result is a failure once its log says it failed, or after `result_wait_seconds` (a shared filesystem can show a
result late). Ctrl-C leaves the jobs running and says how to follow or cancel them (JobsDetached).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from electra.executors.book import JobBook
from electra.executors.jobs import Job, JobFailure, JobsCannotStart, JobsDetached
from electra.executors.queue import HELD, Queue, QueuedJob, cancel, stuck_reason
from electra.executors.slurm import FineTuningJob, PretrainingJob, SlurmOptions, make_executor, request_text, time_limit
from electra.utils.faults import failpoint
from electra.utils.files import FolderLock
from electra.utils.wording import duration, plural

log = logging.getLogger("electra.slurm")

LOCK_WAIT_SECONDS = 600.0
"""How long a command waits for another one's submission to the same folder (sbatch calls: seconds)."""
SUCCEEDED = "Job completed successfully"
"""What submitit logs when a job's function returned (its result may still be on its way to this machine)."""


def error_line(stderr: Path) -> str | None:
    """What a failed job's log says went wrong: the last exception line of its traceback ("ValueError: ..."), or
    SLURM's note ("*** JOB 12 ON node CANCELLED AT ... ***"); None when the log says neither (yet)."""
    try:
        lines = [line.strip() for line in stderr.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return None
    for line in reversed(lines):
        if "*** JOB" in line or "*** STEP" in line:
            return line.split("error: ", 1)[-1]
        if re.match(r"^[A-Za-z_.]*(Error|Exception|Interrupt|Exit)\b.*?: ", line):
            return line
    return None


@dataclass
class Tracked:
    """A job followed: its run, its SLURM id, its phase and array name, what to call when its run is done."""

    job: Job
    job_id: str
    phase: str
    name: str
    on_done: Callable[[Job], None] | None
    gone_since: float | None = None
    running_since: float | None = None
    stall_said: bool = False


@dataclass
class SlurmExecutor:
    """Runs `Job`s as SLURM jobs (see the module). `folder`: OUT/slurm, on a filesystem the nodes share;
    `options`: fitted to the partition (partition.fit); `plan_seconds`: what the plan expects the wait to take."""

    folder: Path
    options: SlurmOptions
    plan_seconds: float | None = None
    tracked: dict[str, Tracked] = field(default_factory=dict)
    failures: list[JobFailure] = field(default_factory=list)

    def __post_init__(self):
        self.folder = Path(self.folder)
        self.queue = Queue(self.options.poll_seconds)
        self.started = time.monotonic()
        self.last_status = ""
        self.names: set[str] = set()

    def run(self, jobs: Sequence[Job], on_done=None, phase: str = "finetune", name: str = "electra") -> list:
        """Submit `jobs` (those neither done nor already queued) and follow them to the end."""
        self.submit(jobs, phase, name, on_done)
        return self.wait()

    # -- submitting ----------------------------------------------------------------------------------------------

    def submit(self, jobs: Sequence[Job], phase: str, name: str, on_done=None) -> None:
        """Follow the live jobs the book names for `jobs`; submit one array for the others not done (under the lock)."""
        todo = [j for j in jobs if not j.done()]
        if not todo:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        with FolderLock(self.folder, "SLURM submission").acquire(wait=LOCK_WAIT_SECONDS):
            queue = self.queue.read()
            book = JobBook(self.folder)
            found = book.reconcile(queue)
            if found:
                print(f"found {plural(len(found), 'job')} a stopped command submitted: {', '.join(found.values())}")
            following = {j.key: book.jobs[j.key] for j in todo if book.jobs.get(j.key) in queue}
            fresh = [j for j in todo if j.key not in following and not j.done()]
            ids = self._sbatch(book, fresh, phase, name) if fresh else {}
        if following:
            ids_text = ", ".join(following.values())
            print(f"following {plural(len(following), 'job')} already queued or running: {ids_text}")
        if ids:
            print(f"submitted {plural(len(ids), 'job')} to SLURM as {name}: {_id_span(list(ids.values()))} "
                  f"(logs in {self.folder})", flush=True)  # fmt: skip
        by_key = {j.key: j for j in todo}
        for key, job_id in {**following, **ids}.items():
            self.tracked[key] = Tracked(by_key[key], job_id, phase, name, on_done)
        self.names.add(name)

    def _sbatch(self, book: JobBook, jobs: list[Job], phase: str, name: str) -> dict[str, str]:
        """One array of `jobs` (the intent recorded first, the ids after); returns key -> job id."""
        for job in jobs:
            if job.reset is not None:
                job.reset()
        token = f"electra-{uuid.uuid4().hex[:16]}"
        book.intend(token, [j.key for j in jobs], name)
        ex = make_executor(self.folder, self.options, phase, name, comment=token)
        with ex.batch():
            handles = [ex.submit(self._wrap(job, phase)) for job in jobs]
        failpoint("slurm.submitted")
        ids = {job.key: h.job_id for job, h in zip(jobs, handles, strict=True)}
        book.record(token, ids)
        return ids

    def _wrap(self, job: Job, phase: str):
        if phase == "pretrain":
            return PretrainingJob(job.fn, *job.args)
        return FineTuningJob(job.fn, time_limit(self.options), self.options.warn_seconds, *job.args)

    # -- following -----------------------------------------------------------------------------------------------

    def wait(self) -> list[JobFailure]:
        """Follow every submitted job until it has left the queue; returns the failures. Ctrl-C: JobsDetached."""
        try:
            while self.tracked:
                time.sleep(self.options.poll_seconds)
                self.poll(self.queue.read())
        except KeyboardInterrupt:
            raise JobsDetached(*self.detached_lines()) from None
        return self.failures

    def poll(self, queue: dict[str, QueuedJob]) -> None:
        """One look at the folder and the queue: runs done, jobs gone, jobs that cannot start, jobs stalled."""
        now, stuck = time.monotonic(), []
        for key, t in list(self.tracked.items()):
            if t.job.done():
                del self.tracked[key]
                if t.on_done is not None:
                    t.on_done(t.job)  # may submit more jobs (a setting's fine-tuning)
                continue
            q = queue.get(t.job_id)
            if q is None:
                self._gone(key, t, now)
                continue
            t.gone_since = None
            if stuck_reason(q) is not None:
                stuck.append((t, q))
            self._watch_stall(key, t, q)
        if stuck:
            self._give_up(stuck)
        self._status(queue)

    def _gone(self, key: str, t: Tracked, now: float) -> None:
        """A job no longer in the queue whose result is not (yet) on disk: a failure once its log says so, or once
        `result_wait_seconds` have passed without the result."""
        from submitit.core.utils import JobPaths  # submitit's names for a job's files

        paths = JobPaths(self.folder, t.job_id, task_id=0)
        error = error_line(paths.stderr)
        t.gone_since = t.gone_since or now
        if error is None and now - t.gone_since < self.options.result_wait_seconds:
            return  # it succeeded, or its log has not arrived: its result may still be on its way
        if error is None:
            ended = "its function returned, but" if _said(paths, SUCCEEDED) else "its log says nothing of why, and"
            error = f"{ended} no result appeared within {duration(self.options.result_wait_seconds)}"
        del self.tracked[key]
        failure = JobFailure(key, t.job_id, error, paths.stderr)
        log.error("%s", failure.line())
        self.failures.append(failure)

    def _watch_stall(self, key: str, t: Tracked, q: QueuedJob) -> None:
        """Report, once, a running job whose run and log have not changed for `stall_minutes` (wall-clock times:
        file modification times are)."""
        if q.state != "RUNNING":
            t.running_since = None
            return
        from submitit.core.utils import JobPaths

        now = time.time()
        t.running_since = t.running_since or now
        paths = JobPaths(self.folder, t.job_id, task_id=0)
        written = [t.job.progress() if t.job.progress else None, _mtime(paths.stderr), _mtime(paths.stdout)]
        quiet_since = max([t.running_since, *(w for w in written if w is not None)])
        if not t.stall_said and now - quiet_since > self.options.stall_minutes * 60:
            t.stall_said = True
            log.warning(
                "%s: job %s is running but its run and log have not changed for %s: it may hang (scancel %s ends "
                "it; the same command then submits it again; log: %s)",
                key, t.job_id, duration(now - quiet_since), t.job_id, paths.stderr,
            )  # fmt: skip

    def _give_up(self, stuck: list[tuple[Tracked, QueuedJob]]) -> None:
        """End the wait: the jobs that cannot start, one line per reason and array, cancelled unless held."""
        groups: dict[tuple[str, str], list[tuple[Tracked, QueuedJob]]] = {}
        for t, q in stuck:
            groups.setdefault((q.reason, t.name), []).append((t, q))
        failures = []
        for (reason, name), members in groups.items():
            t, q = members[0]
            ids = [m[1].id for m in members]
            which = f"{t.job.key}: job {q.id}" if len(members) == 1 else f"{name}: {len(ids)} jobs ({_id_span(ids)})"
            held = reason in HELD or reason.startswith("launch_failed")
            line = (
                f"{which} cannot start: pending for {reason}, {stuck_reason(q)}; it asked for "
                f"{request_text(self.options, t.phase)}" + ("" if held else " (cancelled)")
            )
            failures.append(JobFailure(t.job.key, q.id, line))
            if not held:
                cancel(ids)
        raise JobsCannotStart(failures)

    def _status(self, queue: dict[str, QueuedJob]) -> None:
        """A line when the jobs' states or pending reasons change: counts per state (and reason), elapsed time."""
        counts = Counter()
        for t in self.tracked.values():
            q = queue.get(t.job_id)
            state = q.state.lower() if q else "ended, result awaited" if t.gone_since else "just submitted"
            reason = f" ({q.reason})" if q and q.state == "PENDING" and q.reason not in ("None", "") else ""
            counts[f"{state}{reason}"] += 1
        text = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
        if text and text != self.last_status:
            self.last_status = text
            elapsed = duration(time.monotonic() - self.started)
            planned = f" (the plan: {duration(self.plan_seconds)})" if self.plan_seconds else ""
            done = f"; {plural(len(self.failures), 'failed')}" if self.failures else ""
            print(f"SLURM, {elapsed} in{planned}: {text}{done}", flush=True)

    def detached_lines(self) -> list[str]:
        """What Ctrl-C leaves: the jobs go on; the same command follows them; how to cancel them."""
        names = sorted(self.names)
        ids = [t.job_id for t in self.tracked.values()]
        return [
            f"stopped following (Ctrl-C): {plural(len(ids), 'SLURM job')} go on without this command ({_id_span(ids)})",
            "the same command follows them again (and submits none twice); to cancel them instead: "
            + "; ".join(f"scancel --me --name={n}" for n in names),
        ]


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _said(paths, text: str) -> bool:
    for path in (paths.stdout, paths.stderr):
        try:
            if text in path.read_text(errors="replace"):
                return True
        except OSError:
            continue
    return False


def _id_span(ids: list[str]) -> str:
    """Job ids in few words: "812", "812_[0-9]" for a whole array's elements, else the ids."""
    arrays = {i.partition("_")[0] for i in ids}
    if len(ids) > 3 and len(arrays) == 1 and all("_" in i for i in ids):
        indices = sorted(int(i.partition("_")[2]) for i in ids)
        return f"{next(iter(arrays))}_[{indices[0]}-{indices[-1]}]"
    return ", ".join(ids)
