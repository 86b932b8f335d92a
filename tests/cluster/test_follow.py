"""The SLURM executor without a cluster: stand-in sbatch, squeue, sinfo and scancel on the PATH
(tests/cluster/fake_slurm.py) record what is submitted and answer what the test makes them say. Each run is
submitted once, by two commands at once or after a command killed between sbatch and recording the ids; pending
reasons that never resolve end the wait at once naming the flag; a failing squeue is retried; a result late on a
shared filesystem is waited for; a fine-tuning job at its time limit is not requeued; a stalled job is reported;
Ctrl-C leaves the jobs running and says how to cancel them; the options are fitted to the partition or refused."""

from __future__ import annotations

import functools
import json
import logging
import signal
import threading
import time
from pathlib import Path

import pytest

from electra.executors import follow, queue
from electra.executors.book import JobBook
from electra.executors.follow import SlurmExecutor
from electra.executors.jobs import Job, JobsCannotStart, JobsDetached
from electra.executors.partition import Partition, fit, parse_gpus, parse_minutes, parse_sinfo
from electra.executors.slurm import FineTuningJob, JobTimeLimitError, SlurmOptions
from tests.cluster import fake_slurm
from tests.helpers import die_at

NAME = "electra-out-glue"


@pytest.fixture
def fake(tmp_path, monkeypatch) -> Path:
    """The stand-in commands first on the PATH; returns the folder of their state."""
    folder = tmp_path / "fake"
    bin_dir = fake_slurm.install(folder)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    return folder


def nothing() -> None:
    """A job's function: no job runs here; the tests finish runs by writing their results."""


def jobs(out: Path, n: int = 3) -> list[Job]:
    return [
        Job(f"glue/rte/{i}", nothing, (), (out / f"result{i}").exists, progress=functools.partial(progress, out, i))
        for i in range(n)
    ]


def progress(out: Path, i: int) -> float | None:
    path = out / f"metrics{i}"
    return path.stat().st_mtime if path.exists() else None


def options(**change) -> SlurmOptions:
    base = dict(poll_seconds=0.05, pretrain_gpus=0, finetune_gpus=0, cpus_per_job=1, time_minutes=60)
    return SlurmOptions(**{**base, **change})


def finish(fake: Path, out: Path, i: int, job_id: str) -> None:
    """Run i's job ends: its result written, the job out of the queue."""
    (out / f"result{i}").write_text("done")
    with fake_slurm.state(fake) as s:
        s["jobs"].pop(job_id, None)


def queued(fake: Path) -> dict:
    with fake_slurm.state(fake) as s:
        return dict(s["jobs"])


def submitted_scripts(fake: Path) -> list[str]:
    with fake_slurm.state(fake) as s:
        return list(s["scripts"])


def test_two_commands_on_one_folder_submit_each_run_once_and_both_follow_to_the_end(fake, tmp_path):
    out, folder = tmp_path / "out", tmp_path / "out" / "slurm"
    out.mkdir()
    executors = [SlurmExecutor(folder, options()) for _ in range(2)]
    threads = [threading.Thread(target=e.submit, args=(jobs(out), "finetune", NAME)) for e in executors]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(submitted_scripts(fake)) == 1 and len(queued(fake)) == 3  # one array of three, once
    book = JobBook(folder)
    assert sorted(book.jobs) == ["glue/rte/0", "glue/rte/1", "glue/rte/2"] and book.intents == {}
    assert all(e.tracked.keys() == book.jobs.keys() for e in executors)  # both follow the same jobs
    results = []
    waiting = [threading.Thread(target=lambda e=e: results.append(e.wait())) for e in executors]
    for t in waiting:
        t.start()
    for i, job_id in enumerate(book.jobs[f"glue/rte/{i}"] for i in range(3)):
        finish(fake, out, i, job_id)
    for t in waiting:
        t.join(60)
    assert results == [[], []]


def test_a_command_killed_between_sbatch_and_recording_leaves_jobs_the_next_one_follows(fake, tmp_path, capsys):
    out, folder = tmp_path / "out", tmp_path / "out" / "slurm"
    out.mkdir()
    submit = SlurmExecutor(folder, options()).submit
    assert die_at("slurm.submitted@1", submit, jobs(out), "finetune", NAME) == -signal.SIGKILL
    book = JobBook(folder)
    assert book.jobs == {} and len(book.intents) == 1  # the intent, recorded before sbatch; no ids
    assert len(submitted_scripts(fake)) == 1
    executor = SlurmExecutor(folder, options())
    executor.submit(jobs(out), "finetune", NAME)
    assert len(submitted_scripts(fake)) == 1  # nothing submitted twice
    book = JobBook(folder)
    assert book.jobs == {f"glue/rte/{i}": f"100_{i}" for i in range(3)} and book.intents == {}
    assert "found 3 jobs a stopped command submitted: 100_0, 100_1, 100_2" in capsys.readouterr().out


@pytest.mark.parametrize(
    "reason,flag,held",
    [
        ("PartitionConfig", "--cpus-per-job", False),
        ("PartitionTimeLimit", "--time-minutes", False),
        ("PartitionNodeLimit", "--ranks-per-job", False),
        ("BadConstraints", "--sbatch=--constraint", False),
        ("InvalidAccount", "--account", False),
        ("InvalidQOS", "--qos", False),
        ("JobHeldUser", "scontrol release 100", True),
        ("JobHeldAdmin", "scontrol release 100", True),
        ("launch_failed_requeued_held", "scontrol release 100", True),
    ],
)
def test_a_reason_that_never_resolves_ends_the_wait_at_once_naming_the_flag(fake, tmp_path, reason, flag, held):
    out = tmp_path / "out"
    out.mkdir()
    with fake_slurm.state(fake) as s:
        s["reason"] = reason
    executor = SlurmExecutor(out / "slurm", options())
    with pytest.raises(JobsCannotStart) as err:
        within(10, executor.run, jobs(out, 1), None, "finetune", NAME)
    said = str(err.value).splitlines()
    assert said[0] == "1 SLURM job cannot start:" and len(said) == 2
    assert said[1].startswith(f"  glue/rte/0: job 100 cannot start: pending for {reason}, ") and flag in said[1]
    assert "it asked for 1 CPU, 1 h" in said[1]
    assert (queued(fake) != {}) == held  # held jobs wait for a person; the others are cancelled
    assert said[1].endswith("(cancelled)") != held


def test_a_whole_array_that_cannot_start_is_one_line(fake, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with fake_slurm.state(fake) as s:
        s["reason"] = "PartitionConfig"
    with pytest.raises(JobsCannotStart) as err:
        within(10, SlurmExecutor(out / "slurm", options()).run, jobs(out, 5), None, "finetune", NAME)
    said = str(err.value).splitlines()
    assert len(said) == 2 and said[1].startswith(f"  {NAME}: 5 jobs (100_[0-4]) cannot start: pending for ")


def test_a_failing_squeue_is_retried_and_gives_up_only_after_its_patience(fake, tmp_path, monkeypatch, caplog):
    out = tmp_path / "out"
    out.mkdir()
    executor = SlurmExecutor(out / "slurm", options())
    executor.submit(jobs(out, 1), "finetune", NAME)
    with fake_slurm.state(fake) as s:
        s["squeue_failures"] = 3
    finish(fake, out, 0, "100")
    with caplog.at_level(logging.WARNING, logger="electra.slurm"):
        assert within(30, executor.wait) == []
    said = [r.getMessage() for r in caplog.records if "squeue failed" in r.getMessage()]
    assert len(said) == 1 and "Unable to contact slurm controller" in said[0] and "retrying" in said[0]

    monkeypatch.setattr(queue, "SQUEUE_PATIENCE_SECONDS", 0.5)
    executor = SlurmExecutor(out / "slurm", options())
    executor.submit(jobs(out, 2)[1:], "finetune", NAME)
    with fake_slurm.state(fake) as s:
        s["squeue_failures"] = 10_000
    with pytest.raises(RuntimeError, match="in a row: stopped waiting; the jobs go on, and the same command follows"):
        within(30, executor.wait)


def within(seconds: float, fn, *args):
    """fn(*args) in a thread that must end within `seconds` (a wait whose guard is broken would never end)."""
    outcome: dict = {}

    def target():
        try:
            outcome["value"] = fn(*args)
        except BaseException as err:  # noqa: BLE001 - re-raised below, in the test's thread
            outcome["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{getattr(fn, '__name__', fn)} did not return within {seconds} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def log_file(folder: Path, job_id: str, which: str = "out") -> Path:
    return folder / f"{job_id}_0_log.{which}"  # submitit's name for a job's log


def test_a_result_late_on_a_shared_filesystem_is_waited_for(fake, tmp_path):
    """The job left the queue and its log says its function returned; the result shows up a second later (NFS):
    no failure. With no result at all, the failure says what the log said, after `result_wait_seconds`."""
    out, folder = tmp_path / "out", tmp_path / "out" / "slurm"
    out.mkdir()
    executor = SlurmExecutor(folder, options(result_wait_seconds=3.0))
    executor.submit(jobs(out, 2), "finetune", NAME)
    for job_id in ("100_0", "100_1"):
        log_file(folder, job_id).write_text(f"submitit INFO: {follow.SUCCEEDED}\n")
        with fake_slurm.state(fake) as s:
            s["jobs"].pop(job_id)
    late = threading.Timer(1.0, lambda: (out / "result0").write_text("done"))
    late.start()
    start = time.monotonic()
    failures = within(20, executor.wait)
    assert [f.key for f in failures] == ["glue/rte/1"] and time.monotonic() - start >= 3.0
    assert failures[0].error == "its function returned, but no result appeared within 3 s"


def test_a_job_whose_log_says_it_failed_is_reported_at_once(fake, tmp_path):
    out, folder = tmp_path / "out", tmp_path / "out" / "slurm"
    out.mkdir()
    executor = SlurmExecutor(folder, options(result_wait_seconds=60.0))
    executor.submit(jobs(out, 2)[:1] + jobs(out, 2)[1:], "finetune", NAME)
    finish(fake, out, 1, "100_1")
    log_file(folder, "100_0", "err").write_text("Traceback (most recent call last):\nValueError: bad row 12\n")
    with fake_slurm.state(fake) as s:
        s["jobs"].pop("100_0")
    failures = within(10, executor.wait)
    log = log_file(folder, "100_0", "err")
    assert [f.line() for f in failures] == [
        f"glue/rte/0: job 100_0 ended without a result: ValueError: bad row 12 (log: {log})"
    ]


def test_a_fine_tuning_job_is_requeued_when_preempted_never_at_its_time_limit(fake, tmp_path):
    job = FineTuningJob(nothing, 60, 90)
    job()
    assert job.checkpoint() is not None  # the warning an hour early: a preemption; requeued
    job.started = time.time() - (60 * 60 - 90)  # the warning at its time: the time limit
    with pytest.raises(JobTimeLimitError, match="reached the job's time limit \\(60 min\\).*--time-minutes"):
        job.checkpoint()
    out = tmp_path / "out"
    out.mkdir()
    SlurmExecutor(out / "slurm", options(warn_seconds=300)).submit(jobs(out, 1), "finetune", NAME)
    script = submitted_scripts(fake)[0]
    assert "#SBATCH --requeue\n" in script and "#SBATCH --signal=USR2@300\n" in script
    assert "--wckey" not in script and "#SBATCH --comment=electra-" in script
    assert "#SBATCH --job-name=electra-out-glue\n" in script


def test_a_running_job_that_writes_nothing_is_reported_once(fake, tmp_path, caplog):
    out = tmp_path / "out"
    out.mkdir()
    executor = SlurmExecutor(out / "slurm", options(stall_minutes=0.005))  # 0.3 s
    executor.submit(jobs(out, 1), "finetune", NAME)
    with fake_slurm.state(fake) as s:
        s["jobs"]["100"].update(state="RUNNING", reason="None")
    threading.Timer(1.5, finish, (fake, out, 0, "100")).start()
    with caplog.at_level(logging.WARNING, logger="electra.slurm"):
        assert executor.wait() == []
    said = [r.getMessage() for r in caplog.records if "have not changed" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("glue/rte/0: job 100 is running but its run and log have not")


def test_the_wait_says_each_change_of_states_and_reasons(fake, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    executor = SlurmExecutor(out / "slurm", options(), plan_seconds=600)
    executor.submit(jobs(out, 2), "finetune", NAME)

    def later():
        time.sleep(0.5)
        with fake_slurm.state(fake) as s:
            s["jobs"]["100_0"].update(state="RUNNING", reason="None")
        time.sleep(0.5)
        for i in (0, 1):  # both end at once: one poll sees them both gone
            (out / f"result{i}").write_text("done")
        with fake_slurm.state(fake) as s:
            s["jobs"].clear()

    threading.Thread(target=later).start()
    executor.wait()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("SLURM, ")]
    assert lines[0].endswith("in (the plan: 10.0 min): 2 pending (Priority)")
    assert lines[1].endswith(": 1 pending (Priority), 1 running")
    assert len(lines) <= 3 and all(line.endswith(": 1 pending (Priority)") for line in lines[2:])  # a poll between


def test_ctrl_c_leaves_the_jobs_running_and_says_how_to_follow_or_cancel_them(fake, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    executor = SlurmExecutor(out / "slurm", options())
    executor.submit(jobs(out), "finetune", NAME)

    def interrupted(_):
        raise KeyboardInterrupt

    monkeypatch.setattr(follow.time, "sleep", interrupted)
    with pytest.raises(JobsDetached) as stop:
        executor.wait()
    assert stop.value.lines == [
        "stopped following (Ctrl-C): 3 SLURM jobs go on without this command (100_0, 100_1, 100_2)",
        f"the same command follows them again (and submits none twice); to cancel them instead: scancel --me "
        f"--name={NAME}",
    ]
    assert len(queued(fake)) == 3  # nothing cancelled


def test_sinfo_is_read_as_the_largest_node_and_the_time_limit():
    limits = ("infinite", "1-00:00:00", "2:00:00", "30:00", "45", "1:30", "2-12", "2-12:30")
    assert [parse_minutes(t) for t in limits] == [None, 1440, 120, 30, 45, 1, 3600, 3630]
    assert [parse_gpus(g) for g in ("(null)", "gpu:4", "gpu:a100:4(S:0-1),shard:8")] == [0, 4, 4]
    text = (
        "debug*|2|21694|(null)|infinite\ngpu|32|257000|gpu:a100:4(S:0-1)|2-00:00:00\ngpu|64+|514000|gpu:8|2-00:00:00\n"
    )
    assert parse_sinfo(text, None) == Partition("debug", 2, 21694 / 1024, 0, None)
    assert parse_sinfo(text, "gpu") == Partition("gpu", 64, 514000 / 1024, 8, 2880)
    assert parse_sinfo(text, "nope") is None


DEBUG = Partition("debug", 2, 21.2, 0, None)
GPU = Partition("gpu", 32, 250.0, 4, 120)


def test_the_options_left_open_are_fitted_to_the_partition():
    o, notes = fit(SlurmOptions(), DEBUG, None)
    assert (o.pretrain_gpus, o.finetune_gpus, o.cpus_per_job, o.time_minutes) == (0, 0, 2, 24 * 60)
    assert notes == [
        "fitted to partition debug: nodes of up to 2 CPUs, 21 GB, no GPUs, no time limit: 0 GPUs a job (partition "
        "debug has none); 2 CPUs a job (a node has 2)"
    ]
    o, notes = fit(SlurmOptions(), GPU, None)
    assert (o.pretrain_gpus, o.finetune_gpus, o.cpus_per_job, o.time_minutes) == (1, 1, 4, 120)
    assert notes[0].endswith(": 1 GPU a job; time limit 2 h: the partition's")
    o, _ = fit(SlurmOptions(), GPU, "cpu")
    assert (o.pretrain_gpus, o.finetune_gpus) == (0, 0)


@pytest.mark.parametrize(
    "asked,partition,device,said",
    [
        (dict(cpus_per_job=64), DEBUG, None, "`cpus_per_job=64`: no node of partition debug can run such a job (its "
         "nodes have 2 CPUs; ask at most 2; sinfo)"),
        (dict(pretrain_gpus=1), DEBUG, None, "`gpus_per_job=1`: no node of partition debug can run such a job (it "
         "has no GPUs"),
        (dict(time_minutes=600), GPU, None, "`time_minutes=600`: no node of partition gpu can run such a job (its "
         "time limit is 2 h"),
        (dict(mem_gb=64.0), DEBUG, None, "`mem_gb=64.0`: no node of partition debug"),
        (dict(cpus_per_job=2, pretrain_ranks=2), DEBUG, None, "ask at most 1 for each of 2 processes"),
        (dict(), DEBUG, "cuda", '`device="cuda"`: partition debug has no GPUs (sinfo)'),
    ],
)  # fmt: skip
def test_what_no_node_can_give_is_refused_before_anything_is_submitted(asked, partition, device, said):
    with pytest.raises(ValueError) as err:
        fit(SlurmOptions(**asked), partition, device)
    assert said in str(err.value) and str(err.value).endswith("nothing was submitted") != (device == "cuda")


def test_a_job_claim_yields_to_its_own_requeue_only_and_its_submitter_clears_a_dead_jobs_claim(tmp_path):
    from electra.glue.sweep import RunClaimedError, claim, drop_job_claim

    run = tmp_path / "runs" / "rte" / "seed0"
    assert claim(run, job="812_0")
    holder = json.loads((run / "claim").read_text())
    assert holder["slurm_job"] == "812_0"
    assert claim(run, job="812_0")  # the same job, requeued (another pid, maybe another node): takes it over
    with pytest.raises(RunClaimedError, match=r"claimed by SLURM job 812_0, process \d+ on .*: this job \(813_0\)"):
        claim(run, job="813_0")
    drop_job_claim(run)  # its job left the queue: the submitter clears the claim before submitting the run again
    assert claim(run, job="813_0")
    (run / "claim").write_text(json.dumps({"pid": 1, "host": "elsewhere", "slurm_job": None}))
    drop_job_claim(run)  # a claim of a process outside SLURM is kept
    assert (run / "claim").exists() and not claim(run)
