"""`--executor slurm` on a real SLURM cluster on localhost (the `slurm` fixture; skipped where SLURM cannot be
started): a sweep's runs as a job array give the local executor's numbers bit for bit; a job cancelled midway is
reported in one line and the same command finishes it; a submitting process killed while its jobs run is
restarted and follows them without submitting any again; a job that fails on a bad input is reported by its error
line, job id and log. Each job pins one CPU thread, as the tests' local runs do (tests/conftest.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from electra.data.synthetic_tasks import write_synthetic_tasks
from electra.training.checkpoint import list_checkpoints
from tests.glue_fixtures import make_run, write_glue
from tests.helpers import WALL_CLOCK_FIELDS, child_env, cli_command, cli_main, start_cli, without_seconds

pytestmark = pytest.mark.slow

SLURM = ["--executor", "slurm", "--gpus-per-job", "0", "--finetune-gpus", "0", "--cpus-per-job", "1"]
FAST_POLL = ["--poll-seconds", "0.5"]
DISK_FULL = "electra.utils.errors.DiskFullError: disk full while writing "
"""The start of the last exception line of the traceback in the job's log."""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    return {"glue": write_glue(root / "glue"), "run": make_run(root / "run")}


def glue(world, out: Path, *extra: str) -> list[str]:
    return ["glue", "--model", str(world["run"]), "--glue-dir", str(world["glue"]), "--out", str(out), "--no-progress",
            "--tasks", "rte", "--seeds", "3", *extra]  # fmt: skip


def runs(out: Path) -> dict:
    """Every run's result and metrics lines, without wall-clock times and the process that did it."""
    found = {}
    for path in sorted(out.glob("runs/*/*/result.json")):
        record = json.loads(path.read_text())
        record = {k: v for k, v in record.items() if k not in ("worker", "train_seconds", "seconds", "machine")}
        lines = [json.loads(line) for line in (path.parent / "metrics.jsonl").read_text().splitlines()]
        found[path.parent.relative_to(out).as_posix()] = (
            record,
            [{k: v for k, v in row.items() if k not in WALL_CLOCK_FIELDS} for row in lines],
        )
    return found


def job_ids(out: Path) -> dict:
    return json.loads((out / "slurm" / "jobs.json").read_text())["jobs"]


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {seconds} s")
        time.sleep(0.1)


def running_jobs() -> list[str]:
    out = subprocess.run(["squeue", "-h", "-r", "-t", "RUNNING", "-o", "%i"], capture_output=True, text=True)
    return out.stdout.split()


def test_a_sweep_as_a_job_array_equals_the_local_sweep_bit_for_bit(slurm, world, tmp_path, capsys):
    local, cluster = tmp_path / "local", tmp_path / "cluster"
    assert cli_main(glue(world, local, "--max-steps", "20")) == 0
    assert cli_main(glue(world, cluster, "--max-steps", "20", *SLURM, *FAST_POLL)) == 0
    said = capsys.readouterr().out
    assert "submitted 3 jobs to SLURM" in said
    assert sorted(job_ids(cluster)) == ["glue/rte/0", "glue/rte/1", "glue/rte/2"]
    expected = runs(local)
    assert len(expected) == 3 and runs(cluster) == expected
    pids = {json.loads(p.read_text())["worker"]["pid"] for p in cluster.glob("runs/*/*/result.json")}
    assert len(pids) == 3  # each run in a job of its own
    summary = [without_seconds(json.loads((o / "results.json").read_text())["tasks"]) for o in (local, cluster)]
    assert summary[0] == summary[1]


def test_a_cancelled_job_is_reported_and_the_same_command_finishes_its_run(slurm, world, tmp_path):
    out = tmp_path / "out"
    args = glue(world, out, "--max-steps", "3000", *SLURM, *FAST_POLL)
    proc = start_cli(*args, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: (out / "slurm" / "jobs.json").exists() and running_jobs(), 120, "a running job")
    victim = running_jobs()[0]
    subprocess.run(["scancel", victim], check=True)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 1, stderr[-2000:]
    key = next(k for k, v in job_ids(out).items() if v == victim)
    lines = [line.strip() for line in stderr.splitlines() if f"job {victim} ended without a result" in line]
    assert len(lines) == 2, stderr[-2000:]  # logged as it happened, then in the command's error
    assert lines[-1].startswith(f"{key}: job {victim} ended without a result: ") and "CANCELLED" in lines[-1]
    assert "electra glue: 1 SLURM job ended without a result:" in stderr
    assert "running the same command again submits them again" in stderr
    task, seed = key.split("/")[1:]
    assert not (out / "runs" / task / f"seed{seed}" / "result.json").exists()
    assert cli_main(args) == 0
    assert job_ids(out)[key] != victim and len(runs(out)) == 3  # only the cancelled run was submitted again


def test_a_killed_submitter_restarted_follows_its_jobs_and_submits_none_again(slurm, world, tmp_path, capsys):
    out = tmp_path / "out"
    args = glue(world, out, "--max-steps", "3000", *SLURM, *FAST_POLL)
    proc = start_cli(*args, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: (out / "slurm" / "jobs.json").exists() and running_jobs(), 120, "a running job")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    submitted = job_ids(out)
    assert cli_main(args) == 0
    said = capsys.readouterr().out
    assert "following 3 jobs already queued or running" in said and "submitted" not in said
    assert job_ids(out) == submitted and len(runs(out)) == 3


def test_a_job_failing_on_its_node_is_reported_by_its_error_line(slurm, world, tmp_path):
    """A full disk where the jobs write their results (the failpoint, which the jobs inherit with the environment,
    makes writing result.json fail with ENOSPC): the submitting process cannot know; every job fails, and each is
    reported at once (its log says why: no wait for a late result) in one line with its job id and log."""
    out = tmp_path / "out"
    env = {**child_env(), "ELECTRA_FAILPOINT": "write_atomic:result.json@1=enospc"}
    start = time.monotonic()
    proc = subprocess.run(
        cli_command(*glue(world, out, "--max-steps", "2", *SLURM, *FAST_POLL)),
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert time.monotonic() - start < 120  # not a result wait of 120 s per job
    ids = job_ids(out)
    for key, job_id in ids.items():
        line = next(line.strip() for line in proc.stderr.splitlines() if line.startswith(f"  {key}: job {job_id} "))
        log = out / "slurm" / f"{job_id}_0_log.err"
        assert line.startswith(f"{key}: job {job_id} ended without a result: {DISK_FULL}") and log.exists()
        assert line.endswith(f"(log: {log})") and line.count("\n") == 0


def test_a_study_on_slurm_ends_with_the_local_studys_weights_and_results(slurm, tmp_path, capsys):
    """The toy study of tests/study (ELECTRA, MLM and no pretraining at equal FLOPs, two tasks, one seed): its two
    pretraining jobs and its fine-tuning arrays give the weights and GLUE results the local executor gives."""
    from electra.executors.slurm import SlurmOptions
    from electra.study.run import run_study
    from tests.study.test_study import spec

    tasks = ",".join(str(p) for p in write_synthetic_tasks(tmp_path / "tasks")[:2])
    local, cluster = tmp_path / "local", tmp_path / "cluster"
    run_study(spec(local, tasks))
    options = SlurmOptions(pretrain_gpus=0, finetune_gpus=0, cpus_per_job=1, poll_seconds=0.5)
    run_study(spec(cluster, tasks, executor="slurm", slurm=options))
    assert "submitted 2 jobs to SLURM" in capsys.readouterr().out  # electra and mlm; none needs no training
    ids = job_ids(cluster)  # one book for the study: each setting's runs under its own name
    assert sorted(k for k in ids if k.startswith("pretrain/")) == ["pretrain/kind=electra", "pretrain/kind=mlm"]
    names = ("kind=electra", "kind=mlm", "kind=none")
    expected = sorted(f"{n}/glue/{t}/0" for n in names for t in ("syn-agree", "syn-topic"))
    assert sorted(k for k in ids if not k.startswith("pretrain/")) == expected
    for name in ("kind=electra", "kind=mlm", "kind=none"):
        a = load_file(list_checkpoints(local / "runs" / name / "pretrain")[-1] / "model.safetensors")
        b = load_file(list_checkpoints(cluster / "runs" / name / "pretrain")[-1] / "model.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
        glue_a = json.loads((local / "runs" / name / "glue" / "results.json").read_text())
        glue_b = json.loads((cluster / "runs" / name / "glue" / "results.json").read_text())
        source_a, source_b = glue_a.pop("source"), glue_b.pop("source")  # the same checkpoint, in another folder
        assert (source_a["step"], source_a["sha256"]) == (source_b["step"], source_b["sha256"]), name
        assert without_seconds(glue_a) == without_seconds(glue_b), name
    assert (cluster / "report" / "report.md").exists()


def test_a_pretraining_job_warned_by_slurm_saves_is_requeued_and_ends_as_if_never_stopped(slurm, tmp_path):
    """SLURM's warning before a time limit or a preemption (SIGUSR2, what `scancel --signal=USR2` sends): the run
    saves a checkpoint and stops, submitit requeues the job, and the requeued job resumes from the checkpoint; the
    weights equal an uninterrupted local run's."""
    from electra.executors.slurm import SlurmOptions
    from electra.study.run import run_study
    from tests.study.test_study import spec

    tasks = str(write_synthetic_tasks(tmp_path / "tasks")[0])
    options = SlurmOptions(pretrain_gpus=0, finetune_gpus=0, cpus_per_job=1, poll_seconds=0.5)
    one = dict(vary=[], settings=["electra:"], budget="steps=300", tasks=tasks)
    cluster = tmp_path / "cluster"
    study = threading.Thread(target=run_study, args=(spec(cluster, **one, executor="slurm", slurm=options),))
    study.start()
    run = cluster / "runs" / "electra" / "pretrain"

    def saved_and_running() -> bool:
        meta = json.loads((run / "run.json").read_text()) if (run / "run.json").exists() else {}
        return meta.get("step", 0) >= 8 and (cluster / "slurm" / "jobs.json").exists()

    wait_for(saved_and_running, 180, "a pretraining job past its first checkpoints")
    job = job_ids(cluster)["pretrain/electra"]
    subprocess.run(["scancel", "--signal=USR2", job], check=True)

    def state() -> str:
        return subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout.strip()

    wait_for(lambda: state() == "PENDING", 120, "the job requeued")
    # SLURM holds a requeued batch job for about two minutes before it may start again: release it now
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)
    study.join(timeout=600)
    assert not study.is_alive()
    meta = json.loads((run / "run.json").read_text())
    assert meta["step"] == 300 and len(meta["sessions"]) == 2, meta["sessions"]  # stopped once, then resumed
    assert json.loads((run / "run.json").read_text())["sessions"][1]["start_step"] > 0
    assert job_ids(cluster)["pretrain/electra"] == job  # requeued under its id, not submitted again
    local = tmp_path / "local"
    run_study(spec(local, **one))
    a = load_file(list_checkpoints(local / "runs" / "electra" / "pretrain")[-1] / "model.safetensors")
    b = load_file(list_checkpoints(run)[-1] / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_pretraining_job_of_two_ranks_runs_as_two_slurm_tasks(slurm, tmp_path):
    """`--ranks-per-job 2` on CPU: one job, two SLURM tasks, one gloo DDP rank each (submitit gives them torchrun's
    rendezvous variables); the run trains with world size 2 to its last step."""
    from electra.executors.slurm import SlurmOptions
    from electra.study.run import run_study
    from tests.study.test_study import spec

    tasks = str(write_synthetic_tasks(tmp_path / "tasks")[0])
    options = SlurmOptions(pretrain_gpus=0, pretrain_ranks=2, finetune_gpus=0, cpus_per_job=1, poll_seconds=0.5)
    out = tmp_path / "study"
    run_study(
        spec(out, vary=[], settings=["electra:"], budget="steps=24", tasks=tasks, executor="slurm", slurm=options)
    )
    meta = json.loads((out / "runs" / "electra" / "pretrain" / "run.json").read_text())
    assert meta["step"] == 24 and [s["world_size"] for s in meta["sessions"]] == [2]
    assert json.loads((out / "runs" / "electra" / "glue" / "results.json").read_text())["tasks"]


def test_with_no_resource_flags_a_cpu_only_partition_is_fitted(slurm, world, tmp_path, capsys):
    """The default (a GPU a job, 4 CPUs) on a node of 2 CPUs and no GPUs: fitted before anything is submitted, said
    in the plan, and the sweep runs."""
    out = tmp_path / "out"
    assert cli_main(glue(world, out, "--max-steps", "5", "--executor", "slurm", *FAST_POLL)) == 0
    said = capsys.readouterr().out
    assert "on SLURM: each (task, seed) one element of a job array (2 CPUs, 24 h); fitted to partition debug: " in said
    assert "0 GPUs a job (partition debug has none); 2 CPUs a job (a node has 2)" in said
    assert len(runs(out)) == 3


def test_a_request_no_node_can_give_is_refused_within_seconds_in_one_line(slurm, world, tmp_path):
    out = tmp_path / "out"
    start = time.monotonic()
    proc = subprocess.run(
        cli_command(*glue(world, out, "--max-steps", "5", *SLURM, "--cpus-per-job", "64", *FAST_POLL)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and time.monotonic() - start < 60, proc.stderr[-2000:]
    assert lines[-1].startswith("electra glue: error: --cpus-per-job 64: no node of partition debug can run such a job")
    assert "nothing was submitted" in lines[-1] and not (out / "slurm" / "jobs.json").exists()


def test_two_submitters_started_at_once_on_one_folder_run_each_run_once(slurm, world, tmp_path):
    out = tmp_path / "out"
    args = glue(world, out, "--max-steps", "20", *SLURM, *FAST_POLL)
    procs = [start_cli(*args, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    said = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _, e in said]
    assert sorted(job_ids(out)) == ["glue/rte/0", "glue/rte/1", "glue/rte/2"] and len(runs(out)) == 3
    logs = sorted(p.name for p in (out / "slurm").glob("*_0_log.out"))
    assert len(logs) == 3, logs  # three jobs ran in all, not six
    assert sum("submitted 3 jobs to SLURM" in o for o, _ in said) == 1
    assert sum("following 3 jobs already queued or running" in o for o, _ in said) == 1


def test_a_held_job_ends_the_wait_at_once_naming_the_command_that_releases_it(slurm, world, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        cli_command(*glue(world, out, "--max-steps", "5", "--seeds", "1", *SLURM, "--sbatch=--hold", *FAST_POLL)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    job = job_ids(out)["glue/rte/0"]
    assert f"glue/rte/0: job {job} cannot start: pending for JobHeldUser, held by its user: release it with " \
        f"`scontrol release {job}`" in proc.stderr  # fmt: skip
    subprocess.run(["scancel", job], check=True)
