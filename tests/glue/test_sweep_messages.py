"""What a GLUE sweep with worker processes says: "skipping N finished runs" once for the sweep (each worker said it
too), and each worker's threads as the sweep's share of the cores, not "OMP_NUM_THREADS", a variable the user never
set (the sweep sets it for its workers)."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

from electra.config import FinetuneConfig
from electra.glue.sweep import SweepSpec, run_sweep
from electra.utils.processes import usable_cpus
from tests.glue_fixtures import make_run, write_glue
from tests.helpers import start_cli


@pytest.mark.slow
def test_a_sweep_with_two_workers_says_what_it_skips_once_and_why_its_workers_have_their_threads(tmp_path):
    glue, model, out = write_glue(tmp_path / "glue"), make_run(tmp_path / "run"), tmp_path / "out"
    spec = SweepSpec(
        out=str(out),
        model=str(model),
        tasks=["wnli"],
        glue_dir=str(glue),
        seeds=[0, 1, 2],
        finetune=FinetuneConfig(max_steps=2),
        progress=False,
    )
    assert run_sweep(dataclasses.replace(spec, stop_after=1)).ok  # one run finished before
    args = ["glue", "--model", str(model), "--glue-dir", str(glue), "--tasks", "wnli", "--seeds", "3"]
    args += ["--max-steps", "2", "--out", str(out), "--no-progress", "--num-workers", "2"]
    proc = start_cli(*args, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    assert stdout.count("skipping 1 finished run(s)") == 1 and stdout.count("] wnli seed") == 2
    cores = usable_cpus()
    said = f"{max(1, cores // 2)} thread{'s' * (cores // 2 > 1)} (the sweep's share of {cores} cores, 2 workers)"
    threads = [line for line in stderr.splitlines() if line.startswith("INFO electra.glue: ") and "thread" in line]
    assert threads == [f"INFO electra.glue: {said}"] * 2, stderr[-2000:]
    assert "OMP_NUM_THREADS" not in stderr
