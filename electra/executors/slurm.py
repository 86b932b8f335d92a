"""Runs of a study or a GLUE sweep as SLURM jobs, through submitit (facebookincubator/submitit; `pip install
.[cluster]`): what one job asks for, the submitit executor that asks it, and the functions the jobs run, with
their requeue rules. Submitting and following the jobs: electra/executors/follow.py; fitting the options to the
partition: partition.py.

    OUT/slurm/jobs.json           the job id of every run submitted (book.py), so that a restarted study or sweep
                                  follows the jobs still queued or running instead of submitting them again
    OUT/slurm/JOBID_0_log.out     each job's output (submitit's files; JOBID is 123 or, in an array, 123_4)
    OUT/slurm/JOBID_0_log.err     and its errors: the line a failed job is reported by

Requeue: SLURM warns a job with SIGUSR2 `warn_seconds` before its time limit, and a preempting scheduler may send
the same signal. A pretraining job then saves a checkpoint and is requeued (submitit), resuming from it, at a
preemption or a time limit alike. A fine-tuning job keeps no checkpoint: it is requeued (starting its run again)
when preempted, never at its time limit, where it would only run out of time again: it ends with an error line
that names --time-minutes.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from electra.utils.wording import plural

DEFAULT_CPUS = 4
"""CPU cores of a job when none are asked for, or a node's CPUs where it has fewer (partition.py)."""
DEFAULT_MINUTES = 24 * 60
"""A job's time limit when none is asked for, or the partition's where it is shorter."""


@dataclass
class SlurmOptions:
    """What each job asks SLURM for (`sbatch`'s options). None: fitted to the partition before anything is submitted
    (electra/executors/partition.py: no GPUs where it has none or on `--device cpu`, no more CPUs than a node has,
    a time limit within the partition's)."""

    partition: str | None = None
    """The partition (None: the cluster's default one)."""
    time_minutes: int | None = None
    """The time limit of one job (None: 24 h, or the partition's limit where it is shorter). A pretraining job
    stopped by it saves a checkpoint and is requeued; a fine-tuning job that reaches it ends (see the module)."""
    account: str | None = None
    qos: str | None = None
    sbatch: list[str] = field(default_factory=list)
    """More `#SBATCH` options, each as sbatch takes it: "--constraint=a100", "--exclusive"."""
    job_name: str = "electra"
    """The jobs' name prefix: NAME-STUDY-SETTING-pretrain, NAME-STUDY-SETTING-glue, NAME-OUT-glue (squeue's NAME)."""
    pretrain_gpus: int | None = None
    """GPUs of one pretraining job (ranks of one torchrun-style DDP run on one node); None: 1 where the partition
    has GPUs and the device is not the CPU, else 0."""
    pretrain_ranks: int = 0
    """Processes (DDP ranks, SLURM tasks) of one pretraining job; 0: one per GPU, or one without GPUs."""
    finetune_gpus: int | None = None
    """GPUs of one fine-tuning job (0 or 1); None: as pretrain_gpus's default."""
    cpus_per_job: int | None = None
    """CPU cores of one job (per process); on a CPU-only job also its torch threads (OMP_NUM_THREADS), pinned alike
    in every job so that runs compute the same numbers wherever they land. None: 4, or a node's CPUs if fewer."""
    mem_gb: float | None = None
    finetune_cpus: int | None = None
    """CPU cores of one fine-tuning job; None: cpus_per_job."""
    finetune_mem_gb: float | None = None
    """Memory of one fine-tuning job; None: mem_gb."""
    poll_seconds: float = 15.0
    """How often the waiting process looks at the queue and the output folder."""
    warn_seconds: int = 90
    """How long before a job's time limit SLURM warns it (sbatch --signal=USR2@N): long enough to save a
    checkpoint (a large model over NFS may need minutes)."""
    wckey: str | None = None
    """sbatch --wckey (none unless asked: sites that enforce wckeys refuse unknown ones)."""
    stall_minutes: float = 60.0
    """A running job whose run writes nothing (metrics, log) for this long is reported (once; it is not stopped)."""
    result_wait_seconds: float = 120.0
    """How long a result may take to appear on a shared filesystem after its job left the queue (at least 60 s)."""


def check_options(o: SlurmOptions) -> None:
    """Refuse options no job can run with, before anything is submitted; the submitit package must be there."""
    counts = {"time_minutes": o.time_minutes, "cpus_per_job": o.cpus_per_job, "finetune_cpus": o.finetune_cpus}
    for key, value in counts.items():
        if value is not None and value < 1:
            raise ValueError(f"SLURM options: {key} must be >= 1, got {value}")
    for key in ("pretrain_gpus", "pretrain_ranks"):
        if (getattr(o, key) or 0) < 0:
            raise ValueError(f"SLURM options: {key} must be >= 0, got {getattr(o, key)}")
    if o.finetune_gpus not in (None, 0, 1):
        raise ValueError(f"SLURM options: finetune_gpus must be 0 or 1, got {o.finetune_gpus}")
    for key in ("mem_gb", "finetune_mem_gb", "poll_seconds", "stall_minutes"):
        if getattr(o, key) is not None and getattr(o, key) <= 0:
            raise ValueError(f"SLURM options: {key} must be > 0, got {getattr(o, key)}")
    if o.warn_seconds < 10 or o.result_wait_seconds < 60:
        raise ValueError(
            f"SLURM options: warn_seconds must be >= 10 and result_wait_seconds >= 60 (got {o.warn_seconds}, "
            f"{o.result_wait_seconds})"
        )
    for line in o.sbatch:
        if not re.fullmatch(r"--[a-z][a-z0-9-]*(=\S.*)?", line.strip()):
            raise ValueError(f"SLURM option {line!r}: expected an sbatch option such as --constraint=a100")
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise ImportError("the SLURM executor needs submitit: pip install 'electra[cluster]'") from None
    missing = [c for c in ("sbatch", "squeue", "scancel") if shutil.which(c) is None]
    if missing:
        raise FileNotFoundError(f"the SLURM executor needs {', '.join(missing)} on this machine's PATH (a login node)")


def sbatch_options(o: SlurmOptions) -> dict[str, str | bool]:
    """`SlurmOptions.sbatch` as submitit's additional_parameters: {"constraint": "a100", "exclusive": True}."""
    extra: dict[str, str | bool] = {}
    for line in o.sbatch:
        key, sep, value = line.strip().removeprefix("--").partition("=")
        extra[key.replace("-", "_")] = value if sep else True
    return extra


@dataclass(frozen=True)
class Resources:
    """What one job of a phase asks for: GPUs, processes (SLURM tasks), CPU cores per process, memory."""

    gpus: int
    tasks: int
    cpus: int
    mem_gb: float | None


def resources(o: SlurmOptions, phase: str) -> Resources:
    """A `pretrain` or `finetune` job's Resources under the options `o` (fitted: partition.fit; a field still None
    takes the default a cluster without sinfo gets: no GPU, DEFAULT_CPUS)."""
    cpus = o.cpus_per_job or DEFAULT_CPUS
    if phase == "pretrain":
        gpus = o.pretrain_gpus or 0
        return Resources(gpus, o.pretrain_ranks or max(1, gpus), cpus, o.mem_gb)
    mem = o.finetune_mem_gb if o.finetune_mem_gb is not None else o.mem_gb
    return Resources(o.finetune_gpus or 0, 1, o.finetune_cpus or cpus, mem)


def time_limit(o: SlurmOptions) -> int:
    return o.time_minutes or DEFAULT_MINUTES


def request_text(o: SlurmOptions, phase: str) -> str:
    """What one job of `phase` asks SLURM for, in words: "1 GPU, 4 CPUs, 24 h, partition gpu"."""
    r = resources(o, phase)
    parts = [plural(r.gpus, "GPU")] if r.gpus else []
    if r.tasks > 1:
        parts.append(plural(r.tasks, "process", "processes"))
    parts.append(plural(r.cpus, "CPU") + (" each" if r.tasks > 1 else ""))
    if r.mem_gb is not None:
        parts.append(f"{r.mem_gb:g} GB")
    minutes = time_limit(o)
    parts.append(f"{minutes // 60} h" if minutes % 60 == 0 else f"{minutes} min")
    parts += [f"{key} {getattr(o, key)}" for key in ("partition", "account", "qos") if getattr(o, key) is not None]
    return ", ".join([*parts, *o.sbatch])


def plan_line(o: SlurmOptions, fitted: list[str] | None = None) -> str:
    """Where a study's phases run on SLURM, for its printed plan; `fitted`: what was fitted to the partition."""
    line = (
        f"   on SLURM: each pretraining one job ({request_text(o, 'pretrain')}), each fine-tuning run one "
        f"element of a job array ({request_text(o, 'finetune')}); the times above are this machine's"
    )
    return "\n".join([line, *[f"   {note}" for note in fitted or []]])


def make_executor(folder, o: SlurmOptions, phase: str, name: str, comment: str):
    """A submitit SlurmExecutor for the `phase` jobs (pretrain, finetune) named `name`, on one node each, with the
    options in `o`; `comment` (sbatch --comment) lets a restarted command find these jobs in the queue."""
    import submitit

    r = resources(o, phase)
    ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=PRETRAIN_REQUEUES)
    threads = [] if r.gpus else [f"export OMP_NUM_THREADS={r.cpus}"]
    params = dict(
        job_name=name,
        time=time_limit(o),
        cpus_per_task=r.cpus,
        ntasks_per_node=r.tasks,
        nodes=1,
        setup=threads,
        signal_delay_s=o.warn_seconds,
        wckey=o.wckey,  # submitit writes --wckey=submitit unless told None
        comment=comment,
        additional_parameters={"requeue": True, **sbatch_options(o)},
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


PRETRAIN_REQUEUES = 10
"""How many times submitit requeues a pretraining job that reached its time limit (each resumes from its last
checkpoint, so each makes progress); preemptions are not counted."""


class PretrainingJob:
    """A pretraining job's function: SLURM's warning (preemption, the time limit) makes the run save a checkpoint;
    submitit then requeues the job, which resumes from it."""

    def __init__(self, fn: Callable, *args):
        self.fn, self.args = fn, args

    def __call__(self):
        return self.fn(*self.args)

    def checkpoint(self, *args, **kwargs):
        import submitit

        return submitit.helpers.DelayedSubmission(self)


class JobTimeLimitError(RuntimeError):
    """A fine-tuning job reached its time limit: not requeued (it would start its run from the first step again)."""


class FineTuningJob:
    """A fine-tuning job's function: requeued (starting its run again) when SLURM's warning comes early, i.e. a
    preemption; at its time limit it ends with JobTimeLimitError, whose line names --time-minutes."""

    def __init__(self, fn: Callable, minutes: int, warn_seconds: int, *args):
        self.fn, self.minutes, self.warn_seconds, self.args = fn, minutes, warn_seconds, args
        self.started: float | None = None

    def __call__(self):
        self.started = time.time()
        return self.fn(*self.args)

    def at_time_limit(self, now: float | None = None) -> bool:
        """Whether SLURM's warning now is the time limit's: the job ran to within the warning's delay (and a minute
        of slack) of its limit."""
        ran = (now or time.time()) - (self.started or time.time())
        return ran >= self.minutes * 60 - self.warn_seconds - 60

    def checkpoint(self, *args, **kwargs):
        if self.at_time_limit():
            print(f"electra: fine-tuning job at its time limit ({self.minutes} min): not requeued", file=sys.stderr)
            raise JobTimeLimitError(
                f"the fine-tuning run reached the job's time limit ({self.minutes} min) and is not requeued (it keeps "
                "no checkpoint): give its jobs more time with --time-minutes"
            )
        import submitit

        self.started = None
        return submitit.helpers.DelayedSubmission(self)


def current_job_id() -> str | None:
    """This process's SLURM job id as squeue lists it ("812", or "812_3" for an array element); None outside a
    job."""
    array, index = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and index:
        return f"{array}_{index}"
    return os.environ.get("SLURM_JOB_ID")
