"""Several processes stop together: a signal to one rank, a collapse seen by rank 0, ranks that see different run
folders; a stop signal delivered twice (torchrun, SLURM and Ctrl-C signal a worker more than once) still saves.
Two gloo processes stand in for NCCL ranks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from electra.training import stopping
from electra.training.checkpoint import CheckpointError, list_checkpoints
from electra.training.resume import check_same_resume_step
from electra.training.stopping import StopVote, agree_on_collapse, agree_on_failure
from electra.utils import faults
from electra.utils.errors import RankFailedError
from tests.helpers import (
    ROOT,
    assert_same_state,
    child_env,
    child_pids,
    cli_command,
    cli_main,
    die_at,
    run_python,
    spawned_gloo_rank,
    torchrun,
)

CPU = torch.device("cpu")


def _ranks(rank: int, world: int, init_file: str, out: str) -> None:
    with spawned_gloo_rank(rank, world, init_file):
        # the stop vote: only rank 1 is signalled, after its first step
        vote = StopVote(CPU, world)
        agreed = []
        for step in range(4):
            if step == 1 and rank == 1:
                vote.handle(signal.SIGTERM, None)
            agreed.append(vote.cast())
        # the collapse verdict is rank 0's
        collapsed = agree_on_collapse(rank == 0, CPU, world)
        # different checkpoints seen: every rank refuses, none hangs
        try:
            check_same_resume_step(4 if rank == 0 else 0, Path("RUN"), rank, world)
            refused = ""
        except CheckpointError as err:
            refused = str(err)
        Path(out, f"rank{rank}.json").write_text(
            json.dumps({"agreed": agreed, "collapsed": collapsed, "refused": refused})
        )


def test_two_ranks_agree_on_a_signal_one_got_on_the_collapse_and_on_the_resume_step(tmp_path):
    mp.start_processes(_ranks, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, start_method="spawn")
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r in results:
        # cast at steps 0..3; rank 1's signal (before its cast at step 1) is read by both at step 2
        assert r["agreed"] == [0, 0, signal.SIGTERM, signal.SIGTERM]
        assert r["collapsed"] is True
        assert "rank 0 on" in r["refused"] and "step 4" in r["refused"] and "rank 1 on" in r["refused"]
        assert "a filesystem they all share" in r["refused"]


# -- the whole CLI under torchrun -----------------------------------------------------------------------------

COMMON = [
    "pretrain",
    "--config",
    "tiny",
    "--batch-size",
    "8",
    "--eval-every",
    "1000",
    "--save-every",
    "1000",
    "--log-every",
    "1",
    "--set",
    "data.seq_len=32",
    "--set",
    "model.dropout=0.0",
    "--set",
    "model.attention_dropout=0.0",
]


def _rank_pid(launcher: int, rank: int) -> int | None:
    """The pid of the worker of `rank` that torchrun started (its environment says RANK=...)."""
    todo = child_pids(launcher)
    while todo:
        pid = todo.pop()
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env and b"LOCAL_RANK" in b"\0".join(env):
            return pid
        todo += child_pids(pid)
    return None


def _start_torchrun(port: int, *args: str) -> subprocess.Popen:
    """`electra ARGS` under torchrun with 2 processes, in a session of its own (killed whole by `_kill_group`)."""
    launch = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port), "-m", "electra.cli"]
    return subprocess.Popen(
        [cli_command()[0], *launch, *args],
        env=child_env(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _kill_group(proc: subprocess.Popen) -> None:
    """A hung run (the failure these tests look for) must not outlive the test: kill torchrun and its workers."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _lines(run: Path) -> int:
    path = run / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.slow
def test_sigterm_to_one_rank_saves_one_checkpoint_and_resumes_bit_identically(tmp_path):
    steps = ["--max-steps", "40"]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    result = torchrun(2, 29631, *COMMON, *steps, "--out", str(straight), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]

    proc = _start_torchrun(29632, *COMMON, *steps, "--out", str(stopped))
    try:
        deadline = time.time() + 300
        while time.time() < deadline and _lines(stopped) < 3:  # three steps logged: well inside the run
            time.sleep(0.05)
        rank1 = _rank_pid(proc.pid, 1)
        assert rank1 is not None, "no rank-1 worker found"
        os.kill(rank1, signal.SIGTERM)  # one node preempted: rank 0 gets no signal
        output, _ = proc.communicate(timeout=120)  # no hang
    finally:
        _kill_group(proc)
    state = json.loads((stopped / "run.json").read_text())
    assert state["stopped_by_signal"] == signal.SIGTERM and 3 <= state["step"] < 40, output[-3000:]
    assert [c.name for c in list_checkpoints(stopped)] == [f"step_{state['step']:08d}"]  # one checkpoint
    # each rank exits 128 + SIGTERM; torchrun SIGTERMs a rank still exiting when the other is out first (-15)
    codes = re.findall(r"^\s*exitcode  : (-?\d+)", output, re.M)  # the failure table, one row a rank
    assert len(codes) == 2 and "143" in codes and set(codes) <= {"143", "-15"}, output[-3000:]
    assert output.count(f"stopped at step {state['step']} by signal 15") == 2, output[-3000:]  # both ranks

    result = torchrun(2, 29633, *COMMON, *steps, "--out", str(stopped), "--resume", "auto", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert assert_same_state(straight, stopped) > 0


@pytest.mark.slow
def test_stop_on_collapse_stops_every_rank(tmp_path):
    # tiny at step 2 still predicts "original" everywhere: recall 0 reads as a collapse at the first evaluation
    args = [
        *COMMON,
        "--max-steps",
        "6",
        "--eval-every",
        "2",
        "--set",
        "train.collapse_patience=1",
        "--set",
        "train.stop_on_collapse=true",
        "--out",
        str(tmp_path),
    ]
    proc = _start_torchrun(29634, *args)
    try:
        output, _ = proc.communicate(timeout=120)  # before the fix: rank 1 waited in step 3's all-reduce
    finally:
        _kill_group(proc)
    assert proc.returncode == 0, output[-3000:]
    state = json.loads((tmp_path / "run.json").read_text())
    assert state["collapsed"] and state["step"] == 2


# -- a signal delivered twice -----------------------------------------------------------------------------------


def _signalled_twice(num: int, gap: float) -> None:
    """This process gets `num`, then `num` again `gap` seconds later (the clock is moved, not waited on)."""
    clock = [1000.0]
    stopping.time.monotonic = lambda: clock[0]  # in the forked child only
    vote = StopVote(CPU, 1)
    vote.listen()
    os.kill(os.getpid(), num)
    clock[0] += gap
    os.kill(os.getpid(), num)
    assert vote.local == num


@pytest.mark.parametrize("num", [signal.SIGTERM, signal.SIGINT])
def test_a_repeat_within_the_grace_period_is_the_same_stop_and_a_later_one_kills(num):
    assert die_at(None, _signalled_twice, num, 0.01) == 0  # ignored: the stop goes on
    assert die_at(None, _signalled_twice, num, stopping.REPEAT_GRACE_S + 1) == -num  # killed at once, as before


@pytest.mark.parametrize("num", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_twice_in_quick_succession_still_saves_one_checkpoint_and_exits_128_plus_it(tmp_path, num):
    """What torchrun's forwarded SIGTERM on top of a scheduler's SIGTERM to the process group (or Ctrl-C in a
    terminal) does to a worker: both are sent from inside the loop at step 2, so the test is deterministic
    (os.kill runs the handler before it returns)."""
    import electra.training.loop as loop

    real = loop.step_batches

    def signalled_twice(run, step, host=None):
        if step == 2:
            os.kill(os.getpid(), num)
            os.kill(os.getpid(), num)
        return real(run, step, host)

    def before() -> None:
        loop.step_batches = signalled_twice  # in the forked child only

    def cli() -> None:
        sys.exit(cli_main([*COMMON, "--max-steps", "10", "--quiet", "--out", str(tmp_path)]))

    assert die_at(None, cli, before=before) == 128 + num  # before: killed by the second signal (-num), no checkpoint
    state = json.loads((tmp_path / "run.json").read_text())
    assert state["stopped_by_signal"] == num and state["step"] in (3, 4)  # the vote is read a step late
    assert [c.name for c in list_checkpoints(tmp_path)] == [f"step_{state['step']:08d}"]


@pytest.mark.slow
def test_an_error_on_rank_0_alone_stops_every_rank_at_once_with_one_line_and_the_last_checkpoint_resumes(tmp_path):
    """ENOSPC in rank 0's evaluation at step 3 (a failpoint; rank 1 does not evaluate): both ranks exit non-zero
    at that step instead of rank 1 waiting in the next collective; rank 0 prints its error, rank 1 the one line
    "rank 0 failed: ..." and no traceback; the checkpoint of step 2 resumes to the end."""
    run, logs = tmp_path / "run", tmp_path / "logs"
    args = [*COMMON, "--save-every", "1", "--eval-every", "3", "--max-steps", "4", "--out", str(run)]
    launch = [
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        "29635",
        "--redirects",
        "3",
        "--log-dir",
        str(logs),
        "-m",
        "electra.cli",
    ]
    start = time.monotonic()
    result = run_python(*launch, *args, env={faults.ENV: "evaluate@1=enospc"}, timeout=300)
    assert result.returncode != 0 and time.monotonic() - start < 120
    (err0,), (err1,) = (list(logs.rglob(f"attempt_0/{r}/stderr.log")) for r in (0, 1))
    rank0, rank1 = err0.read_text(), err1.read_text()
    assert "error: [Errno 28] No space left on device (failpoint evaluate)" in rank0 and "failed" not in rank0
    lines = [line for line in rank1.splitlines() if "failed" in line]
    assert (
        lines
        == ["electra pretrain: error: rank 0 failed: OSError: [Errno 28] No space left on device (failpoint evaluate)"]
        and "Traceback" not in rank1
    )
    assert [int(c.name.split("_")[-1]) for c in list_checkpoints(run)][-1] == 2
    resumed = torchrun(2, 29636, *args, "--resume", "auto", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((run / "run.json").read_text())["step"] == 4


@pytest.mark.slow
def test_a_rank_that_cannot_read_its_batches_stops_every_rank_before_a_save_and_the_last_checkpoint_resumes(tmp_path):
    """Rank 1's read of step 3's batches fails (ENOSPC at a failpoint, rank 1 only): rank 0 is then waiting for
    it in the step's all-reduce. Rank 1 steps on its last batches and votes FAILED; both leave at step 4, before
    its checkpoint (nothing of a stand-in step is saved): rank 1 with its error, rank 0 with one line and no
    traceback. The checkpoint of step 2 resumes to the end."""
    run, logs = tmp_path / "run", tmp_path / "logs"
    args = [*COMMON, "--save-every", "2", "--eval-every", "100", "--log-every", "100", "--max-steps", "6"]
    launch = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29637"]
    launch += ["--redirects", "3", "--log-dir", str(logs), "-m", "electra.cli"]
    env = {faults.ENV: "batches@4=enospc", faults.RANK_ENV: "1"}  # steps 0, 1, 2 read; step 3's fails
    start = time.monotonic()
    result = run_python(*launch, *args, "--out", str(run), env=env, timeout=300)
    assert result.returncode != 0 and time.monotonic() - start < 120
    (err0,), (err1,) = (list(logs.rglob(f"attempt_0/{r}/stderr.log")) for r in (0, 1))
    rank0, rank1 = err0.read_text(), err1.read_text()
    assert "error: [Errno 28] No space left on device (failpoint batches)" in rank1 and "failed" not in rank1
    lines = [line for line in rank0.splitlines() if "failed" in line]
    assert lines == [
        "electra pretrain: error: rank 1 failed: OSError: [Errno 28] No space left on device (failpoint batches)"
    ]
    assert "Traceback" not in rank0
    assert [int(c.name.split("_")[-1]) for c in list_checkpoints(run)] == [2]
    resumed = torchrun(2, 29638, *args, "--out", str(run), "--resume", "auto", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((run / "run.json").read_text())["step"] == 6


def _fail_alone(rank: int, world: int, init_file: str, out: str) -> None:
    with spawned_gloo_rank(rank, world, init_file):
        agree_on_failure(None, rank, world)  # nobody failed: every rank goes on
        try:
            agree_on_failure(OSError(28, "disk full") if rank == 0 else None, rank, world)
            raised = ""
        except (OSError, RankFailedError) as err:
            raised = f"{type(err).__name__}: {err}"
        Path(out, f"rank{rank}.txt").write_text(raised)


def test_an_error_one_rank_passes_to_the_agreement_is_raised_on_every_rank(tmp_path):
    """The failing rank re-raises its own error, the other raises one line naming the rank and the error."""
    mp.start_processes(_fail_alone, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, start_method="spawn")
    raised = [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)]
    assert raised == ["OSError: [Errno 28] disk full", "RankFailedError: rank 0 failed: OSError: [Errno 28] disk full"]
