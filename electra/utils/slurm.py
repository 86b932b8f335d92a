"""Runs of a study or a GLUE sweep as SLURM jobs, through submitit (facebookincubator/submitit; `pip install
.[cluster]`). The output folder on the shared filesystem stays the one source of truth: a job writes its run's
files as a local run would, and the process that submitted it only submits, waits and reads those files.

    OUT/slurm/jobs.json           the job id of every run submitted, so that a restarted study or sweep follows the
                                  jobs still queued or running instead of submitting them again
    OUT/slurm/JOBID_0_log.out     each job's output (submitit's files; JOBID is 123 or, in an array, 123_4)
    OUT/slurm/JOBID_0_log.err     and its errors: the line a failed job is reported by

Whether a job still runs comes from `squeue` (accounting, `sacct`, need not be configured); a job gone from the
queue without its run's result failed, was cancelled or ran out of time: it is reported by the last error line of
its log, and the next submission (the same command) runs it again, resumed from its checkpoint where it has one.
A job stopped by SLURM before its time limit (preemption, the time limit's warning signal) is requeued by submitit
and resumes the same way.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from electra.utils.files import write_json
from electra.utils.wording import plural

log = logging.getLogger("electra.slurm")

EXECUTORS = ("local", "slurm")


@dataclass
class SlurmOptions:
    """What each job asks SLURM for (`sbatch`'s options); None leaves the cluster's default."""

    partition: str | None = None
    time_minutes: int = 24 * 60
    """The time limit of one job. A pretraining job stopped by it saves a checkpoint (SLURM's warning signal, 90 s
    before) and is requeued; a fine-tuning job starts its run again."""
    account: str | None = None
    qos: str | None = None
    sbatch: list[str] = field(default_factory=list)
    """More `#SBATCH` options, each as sbatch takes it: "--constraint=a100", "--exclusive"."""
    job_name: str = "electra"
    """The jobs' name prefix: NAME-pretrain-SETTING, NAME-glue-TASK (squeue's NAME column)."""
    pretrain_gpus: int = 1
    """GPUs of one pretraining job (ranks of one torchrun-style DDP run on one node); 0 on a CPU cluster."""
    pretrain_ranks: int = 0
    """Processes (DDP ranks, SLURM tasks) of one pretraining job; 0: one per GPU, or one without GPUs."""
    finetune_gpus: int = 1
    """GPUs of one fine-tuning job (0 or 1)."""
    cpus_per_job: int = 4
    """CPU cores of one job (per process); on a CPU-only job also its torch threads (OMP_NUM_THREADS), pinned alike
    in every job so that runs compute the same numbers wherever they land."""
    mem_gb: float | None = None
    finetune_cpus: int | None = None
    """CPU cores of one fine-tuning job; None: cpus_per_job."""
    finetune_mem_gb: float | None = None
    """Memory of one fine-tuning job; None: mem_gb."""
    poll_seconds: float = 15.0
    """How often the waiting process looks at the queue and the output folder."""


def check_options(o: SlurmOptions) -> None:
    """Refuse options no job can run with, before anything is submitted; the submitit package must be there."""
    if o.time_minutes < 1 or o.cpus_per_job < 1 or min(o.pretrain_gpus, o.pretrain_ranks) < 0:
        raise ValueError(
            f"SLURM options: time_minutes and cpus_per_job must be >= 1, pretrain_gpus and pretrain_ranks >= 0 (got "
            f"{o.time_minutes}, {o.cpus_per_job}, {o.pretrain_gpus}, {o.pretrain_ranks})"
        )
    if o.finetune_gpus not in (0, 1):
        raise ValueError(f"SLURM options: finetune_gpus must be 0 or 1, got {o.finetune_gpus}")
    for key in ("mem_gb", "finetune_mem_gb", "finetune_cpus"):
        if getattr(o, key) is not None and getattr(o, key) <= 0:
            raise ValueError(f"SLURM options: {key} must be > 0, got {getattr(o, key)}")
    for line in o.sbatch:
        if not re.fullmatch(r"--[a-z][a-z0-9-]*(=\S.*)?", line.strip()):
            raise ValueError(f"SLURM option {line!r}: expected an sbatch option such as --constraint=a100")
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise ImportError("the SLURM executor needs submitit: pip install 'electra[cluster]'") from None
    if shutil.which("sbatch") is None or shutil.which("squeue") is None:
        raise FileNotFoundError("the SLURM executor needs sbatch and squeue on this machine's PATH (a login node)")


def sbatch_options(o: SlurmOptions) -> dict[str, str | None]:
    """`SlurmOptions.sbatch` as submitit's additional_parameters: {"constraint": "a100", "exclusive": None}."""
    extra: dict[str, str | None] = {}
    for line in o.sbatch:
        key, sep, value = line.strip().removeprefix("--").partition("=")
        extra[key.replace("-", "_")] = value if sep else None
    return extra


@dataclass(frozen=True)
class Resources:
    """What one job of a phase asks for: GPUs, processes (SLURM tasks), CPU cores per process, memory."""

    gpus: int
    tasks: int
    cpus: int
    mem_gb: float | None


def resources(o: SlurmOptions, phase: str) -> Resources:
    """A `pretrain` or `finetune` job's Resources under the options `o`."""
    if phase == "pretrain":
        return Resources(o.pretrain_gpus, o.pretrain_ranks or max(1, o.pretrain_gpus), o.cpus_per_job, o.mem_gb)
    mem = o.finetune_mem_gb if o.finetune_mem_gb is not None else o.mem_gb
    return Resources(o.finetune_gpus, 1, o.finetune_cpus or o.cpus_per_job, mem)


def request_text(o: SlurmOptions, phase: str) -> str:
    """What one job of `phase` asks SLURM for, in words: "1 GPU, 4 CPUs, 24 h, partition gpu"."""
    r = resources(o, phase)
    parts = [plural(r.gpus, "GPU")] if r.gpus else []
    if r.tasks > 1:
        parts.append(plural(r.tasks, "process", "processes"))
    parts.append(plural(r.cpus, "CPU") + (" each" if r.tasks > 1 else ""))
    if r.mem_gb is not None:
        parts.append(f"{r.mem_gb:g} GB")
    parts.append(f"{o.time_minutes // 60} h" if o.time_minutes % 60 == 0 else f"{o.time_minutes} min")
    parts += [f"{key} {getattr(o, key)}" for key in ("partition", "account", "qos") if getattr(o, key) is not None]
    return ", ".join([*parts, *o.sbatch])


def plan_line(o: SlurmOptions) -> str:
    """Where a study's phases run on SLURM, for its printed plan."""
    return (
        f"   on SLURM: each pretraining one job ({request_text(o, 'pretrain')}), each fine-tuning run one "
        f"element of a job array ({request_text(o, 'finetune')}); the times above are this machine's"
    )


@dataclass(frozen=True)
class Job:
    """One run to do as a job: `key` names it in jobs.json ("pretrain/NAME", "glue/rte/3"), `fn(*args)` does it
    (a module-level function: submitit pickles it by name), `done()` tells from the output folder that it finished."""

    key: str
    fn: Callable
    args: tuple
    done: Callable[[], bool]


@dataclass
class JobFailure:
    """A job that left the queue without its run's result."""

    key: str
    job_id: str
    error: str
    log: Path

    def line(self) -> str:
        return f"{self.key}: job {self.job_id} ended without a result: {self.error} (log: {self.log})"


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


def queued_jobs() -> set[str]:
    """The ids of this user's jobs that SLURM still holds (pending, running, being requeued...), one per array
    element ("123_4")."""
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or str(os.getuid())
    out = subprocess.run(["squeue", "-h", "-r", "-u", user, "-o", "%i"], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"squeue failed ({out.returncode}): {out.stderr.strip() or out.stdout.strip()}")
    return set(out.stdout.split())


def error_line(stderr: Path) -> str:
    """What a failed job's log says went wrong: the last exception line of its traceback ("ValueError: ..."), or
    SLURM's note ("*** JOB 12 ON node CANCELLED AT ... ***"), or its last line."""
    try:
        lines = [line.strip() for line in stderr.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log written (the job may not have started)"
    for line in reversed(lines):
        if "*** JOB" in line or "*** STEP" in line:
            return line.split("error: ", 1)[-1]
        if re.match(r"^[A-Za-z_.]*(Error|Exception|Interrupt|Exit)\b.*?: ", line):
            return line
    return lines[-1] if lines else "an empty log"


class JobBook:
    """OUT/slurm/jobs.json: the job id given to each key when it was submitted."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.path = folder / "jobs.json"
        self.jobs: dict[str, str] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def record(self, ids: dict[str, str]) -> None:
        self.jobs.update(ids)
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(self.path, self.jobs)


def make_executor(folder: Path, o: SlurmOptions, phase: str, name: str):
    """A submitit SlurmExecutor for the `phase` jobs (pretrain, finetune) named `name`, on one node each, with the
    options in `o`."""
    import submitit

    r = resources(o, phase)
    ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=10)
    threads = [] if r.gpus else [f"export OMP_NUM_THREADS={r.cpus}"]
    params = dict(
        job_name=name,
        time=o.time_minutes,
        cpus_per_task=r.cpus,
        ntasks_per_node=r.tasks,
        nodes=1,
        setup=threads,
        additional_parameters=sbatch_options(o),
    )
    if r.gpus:
        params["gpus_per_node"] = r.gpus
    for key in ("partition", "account", "qos"):
        if getattr(o, key) is not None:
            params[key] = getattr(o, key)
    if r.mem_gb is not None:
        params["mem"] = f"{int(r.mem_gb * 1024)}M"
    ex.update_parameters(**params)
    return ex


class Resumable:
    """A job's function that submitit requeues when SLURM stops the job early (preemption; the time limit's
    warning signal): the run then resumes from what its folder holds (pretraining: its last checkpoint)."""

    def __init__(self, fn: Callable, *args):
        self.fn, self.args = fn, args

    def __call__(self):
        return self.fn(*self.args)

    def checkpoint(self, *args, **kwargs):
        import submitit

        return submitit.helpers.DelayedSubmission(self)


def run_jobs(
    jobs: Sequence[Job],
    folder: Path,
    o: SlurmOptions,
    phase: str,
    name: str,
    on_done: Callable[[Job], None] | None = None,
) -> list[JobFailure]:
    """Do every job in `jobs` (of `phase`: pretrain, finetune) not done yet on SLURM: follow the ones jobs.json
    says are still queued or running, submit the others (one job array named `name`), and wait until each has left
    the queue; `on_done(job)` as each finishes. Returns the jobs that left the queue without their results (their
    error lines are logged)."""
    from submitit.core.utils import JobPaths

    book = JobBook(folder)
    todo = [j for j in jobs if not j.done()]
    if not todo:
        return []
    queued = queued_jobs()
    following = {j.key: book.jobs[j.key] for j in todo if book.jobs.get(j.key) in queued}
    if following:
        print(f"following {plural(len(following), 'job')} already queued or running: {', '.join(following.values())}")
    submit = [j for j in todo if j.key not in following]
    if submit:
        ex = make_executor(folder, o, phase, name)
        with ex.batch():
            handles = [ex.submit(Resumable(j.fn, *j.args)) for j in submit]
        ids = {j.key: h.job_id for j, h in zip(submit, handles, strict=True)}
        book.record(ids)
        following.update(ids)
        print(f"submitted {plural(len(submit), 'job')} to SLURM: {', '.join(ids.values())} (logs in {folder})")
    by_key = {j.key: j for j in todo}
    failures: list[JobFailure] = []
    gone_once: set[str] = set()  # a job seen gone once: its result may still be on its way over the filesystem
    while following:
        time.sleep(o.poll_seconds)
        queued = queued_jobs()
        for key, job_id in list(following.items()):
            job = by_key[key]
            if job.done():
                del following[key]
                if on_done is not None:
                    on_done(job)
            elif job_id not in queued:
                if key not in gone_once:
                    gone_once.add(key)
                    continue
                del following[key]
                stderr = JobPaths(folder, job_id, task_id=0).stderr  # submitit's name for the job's log
                failure = JobFailure(key, job_id, error_line(stderr), stderr)
                log.error("%s", failure.line())
                failures.append(failure)
    return failures
