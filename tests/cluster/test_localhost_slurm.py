"""The `slurm` fixture gives a working cluster: a job submitted with sbatch runs, sees its own job id, and leaves the
queue."""

from __future__ import annotations

import subprocess
import time

import pytest


@pytest.mark.slow
def test_a_job_runs_and_leaves_the_queue(slurm, tmp_path):
    job = subprocess.run(
        ["sbatch", "--parsable", "--wrap", "echo $SLURM_JOB_ID > OUT"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert job.isdigit(), job
    deadline = time.monotonic() + 60
    while True:
        queue = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i %T"], capture_output=True, text=True, timeout=60)
        if (queue.returncode == 0 and not queue.stdout.strip()) or "Invalid job id" in queue.stderr:
            break  # forgotten: squeue answers nothing, or once MinJobAge has passed, that it knows no such job
        assert time.monotonic() < deadline, f"job {job} still queued after 60 s: {queue.stdout}{queue.stderr}"
        time.sleep(0.5)
    assert (tmp_path / "OUT").read_text().strip() == job
