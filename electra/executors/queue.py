"""What SLURM's queue says of this user's jobs (`squeue`): each job's state and pending reason, read again and
again while a study or sweep waits. A failing `squeue` (a busy controller, a network hiccup) is retried with
backoff rather than ending a wait of days; the reasons a job can pend for that do not resolve by waiting end the
wait at once, naming the flag that changes them."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from dataclasses import dataclass

log = logging.getLogger("electra.slurm")

SQUEUE_PATIENCE_SECONDS = 30 * 60.0
"""How long `squeue` may keep failing before the wait gives up (the jobs go on; the same command follows them)."""
BACKOFF_MAX_SECONDS = 300.0


@dataclass(frozen=True)
class QueuedJob:
    """One job (one array element) as squeue lists it."""

    id: str
    state: str
    """PENDING, RUNNING, CONFIGURING, COMPLETING, REQUEUED, SUSPENDED, ..."""
    reason: str
    """Why it waits (Priority, Resources, PartitionConfig, ...); "None" while running."""
    name: str
    comment: str


NEVER_STARTS = {
    "PartitionConfig": "it asks for more than the partition's nodes have (CPUs, memory, GPUs, nodes): lower "
    "--cpus-per-job / --mem-gb / --gpus-per-job (--finetune-cpus, --finetune-mem-gb, --finetune-gpus), or choose "
    "another --partition",
    "PartitionTimeLimit": "its time limit is above the partition's: lower --time-minutes",
    "PartitionNodeLimit": "it asks for more nodes or processes than the partition allows: lower --ranks-per-job",
    "BadConstraints": "its constraints match no node: change --sbatch=--constraint=...",
    "InvalidAccount": "the account is not valid here: change --account",
    "InvalidQOS": "the QOS is not valid here: change --qos",
    "QOSMaxWallDurationPerJobLimit": "its time limit is above the QOS's: lower --time-minutes, or change --qos",
    "AssocMaxWallDurationPerJobLimit": "its time limit is above the account's: lower --time-minutes",
    "QOSMaxCpuPerJobLimit": "it asks for more CPUs than the QOS allows: lower --cpus-per-job, or change --qos",
    "QOSMaxGRESPerJob": "it asks for more GPUs than the QOS allows: lower --gpus-per-job, or change --qos",
    "QOSMaxMemoryPerJob": "it asks for more memory than the QOS allows: lower --mem-gb, or change --qos",
    "DependencyNeverSatisfied": "it depends on a job that failed",
}
"""Pending reasons that never resolve by waiting (squeue's %r), with what changes them. The jobs are cancelled."""

HELD = {
    "JobHeldUser": "held by its user",
    "JobHeldAdmin": "held by an administrator",
    "launch_failed_requeued_held": "held after its launch failed on a node",
}
"""Pending reasons that wait for a person (`scontrol release JOBID`); the jobs are left in the queue."""


def stuck_reason(job: QueuedJob) -> str | None:
    """Why `job` will never start without someone changing something; None for a job that may still start."""
    if job.state != "PENDING":
        return None
    if job.reason in NEVER_STARTS:
        return NEVER_STARTS[job.reason]
    if job.reason in HELD or job.reason.startswith("launch_failed"):
        what = HELD.get(job.reason, "held after its launch failed")
        return f"{what}: release it with `scontrol release {job.id}` (or cancel it), then run the same command"
    return None


def user() -> str:
    return os.environ.get("USER") or os.environ.get("LOGNAME") or str(os.getuid())


def read_queue() -> dict[str, QueuedJob]:
    """This user's jobs that SLURM still holds (pending, running, being requeued...), one per array element
    ("123_4"). Raises RuntimeError when squeue fails."""
    out = subprocess.run(
        ["squeue", "-h", "-r", "-u", user(), "-o", "%i|%T|%r|%j|%k"], capture_output=True, text=True, timeout=120
    )
    if out.returncode != 0:
        raise RuntimeError(f"squeue failed ({out.returncode}): {' '.join((out.stderr or out.stdout).split())[:300]}")
    jobs = {}
    for line in out.stdout.splitlines():
        fields = line.split("|", 4)
        if len(fields) == 5:
            jobs[fields[0]] = QueuedJob(*fields)
    return jobs


class Queue:
    """`read_queue` retried with backoff: a failure is said once, retried after poll, 2 x poll, ... (at most
    BACKOFF_MAX_SECONDS apart), and raised only after SQUEUE_PATIENCE_SECONDS of failures in a row."""

    def __init__(self, poll_seconds: float, patience: float | None = None):
        self.poll = poll_seconds
        self.patience = SQUEUE_PATIENCE_SECONDS if patience is None else patience

    def read(self) -> dict[str, QueuedJob]:
        first_failure, delay = None, self.poll
        while True:
            try:
                jobs = read_queue()
            except (RuntimeError, OSError, subprocess.SubprocessError) as err:
                now = time.monotonic()
                if first_failure is None:
                    first_failure = now
                    log.warning("%s; retrying (the jobs are not affected)", err)
                if now - first_failure >= self.patience:
                    raise RuntimeError(
                        f"{err} for {(now - first_failure) / 60:.0f} min in a row: stopped waiting; the jobs go on, "
                        "and the same command follows them again"
                    ) from None
                time.sleep(min(delay, max(0.0, first_failure + self.patience - now)))
                delay = min(2 * delay, BACKOFF_MAX_SECONDS)
                continue
            if first_failure is not None:
                log.info("squeue answers again after %.0f s", time.monotonic() - first_failure)
            return jobs


def cancel(job_ids: list[str]) -> None:
    """scancel the jobs (array elements as 123_4); a failure is logged, not raised."""
    if not job_ids:
        return
    out = subprocess.run(["scancel", *job_ids], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        log.warning("scancel %s failed: %s", " ".join(job_ids), " ".join((out.stderr or out.stdout).split()))
