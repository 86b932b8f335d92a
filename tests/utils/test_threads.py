"""train.threads / finetune.threads = auto: the cores other work leaves free, measured when the process starts;
an explicit number or OMP_NUM_THREADS wins. The table behind the rule: docs/benchmarks.md "Threads"."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch

from electra.utils import machine
from electra.utils.machine import auto_threads, choose_threads, cores_busy_elsewhere


@pytest.fixture
def keep_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_auto_takes_the_cores_other_work_leaves_free(monkeypatch):
    monkeypatch.setattr(machine, "usable_cpus", lambda: 2)
    assert [auto_threads(2, busy) for busy in (0.0, 0.3, 0.49, 0.5, 1.0, 1.6, 2.0, 3.5)] == [2, 2, 2, 1, 1, 1, 1, 1]
    assert auto_threads(1, 0.0) == 1  # a worker's share caps it
    assert auto_threads(2, None) == 2  # nothing known about the machine: all of the share
    monkeypatch.setattr(machine, "usable_cpus", lambda: 8)
    assert [auto_threads(4, busy) for busy in (0.0, 3.0, 5.2, 7.0)] == [4, 4, 3, 1]


def test_busy_cores_of_other_processes_are_measured_and_our_own_are_not():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        busy = cores_busy_elsewhere(1.0)
    finally:
        spinner.kill()
    assert busy is not None and busy >= 0.7  # the spinner's core (other work on the machine can only add)
    assert cores_busy_elsewhere(0.5, stat=machine.Path("/nonexistent/stat")) is None


STAT = """cpu  {total}
cpu0 {cpu0} 0 {cpu0} 1000 0 0 0 0 0 0
cpu1 {cpu1} 0 {cpu1} 1000 0 0 0 0 0 0
intr 0
"""


def test_busy_time_counts_only_the_cores_this_process_may_use(tmp_path, monkeypatch):
    """Under `srun -c 1` on a shared node (affinity: cpu0), work on cpu1 takes nothing from this process."""
    stat = tmp_path / "stat"
    ticks = machine.os.sysconf("SC_CLK_TCK")
    stat.write_text(STAT.format(total="0", cpu0=0, cpu1=0))
    monkeypatch.setattr(machine, "_affinity", lambda: {0})
    monkeypatch.setattr(machine.time, "process_time", lambda: 0.0)  # this process used nothing itself
    mark = machine.busy_mark(stat)
    clock = mark.wall
    monkeypatch.setattr(machine.time, "perf_counter", lambda: clock + 10.0)  # ten seconds later
    stat.write_text(STAT.format(total="0", cpu0=ticks * 1, cpu1=ticks * 5))  # cpu0: 2 s busy, cpu1: 10 s busy
    assert machine.busy_since(mark, stat) == pytest.approx(0.2)  # 2 s of cpu0 over 10 s; cpu1 not ours
    monkeypatch.setattr(machine, "_affinity", lambda: {0, 1})
    stat.write_text(STAT.format(total="0", cpu0=0, cpu1=0))
    monkeypatch.setattr(machine.time, "perf_counter", lambda: clock)
    mark = machine.busy_mark(stat)
    monkeypatch.setattr(machine.time, "perf_counter", lambda: clock + 10.0)
    stat.write_text(STAT.format(total="0", cpu0=ticks * 1, cpu1=ticks * 5))
    assert machine.busy_since(mark, stat) == pytest.approx(1.2)  # both cores count now


def test_an_explicit_number_and_omp_num_threads_win_over_auto(monkeypatch, keep_threads):
    assert choose_threads(1) == (1, "asked for") and torch.get_num_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    assert choose_threads("auto") == (1, "OMP_NUM_THREADS")
    monkeypatch.setenv("ELECTRA_THREADS_SHARE", "the sweep's share of 2 cores, 2 workers")  # set by who set OMP_...
    assert choose_threads("auto") == (1, "the sweep's share of 2 cores, 2 workers")
    monkeypatch.delenv("ELECTRA_THREADS_SHARE")
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(machine, "usable_cpus", lambda: 2)
    monkeypatch.setattr(machine, "cores_busy_elsewhere", lambda: 1.0)
    threads, why = choose_threads("auto")
    assert threads == 1 == torch.get_num_threads()
    assert why == "auto: 2 cores for this process, 1.0 of 2 usable cores busy with other work"
    monkeypatch.setattr(machine, "cores_busy_elsewhere", lambda: 0.0)
    assert choose_threads("auto", share=2)[0] == 1  # one of two processes splitting the cores
    assert choose_threads("auto")[0] == 2 == torch.get_num_threads()


def test_auto_chooses_again_on_resume_and_an_explicit_number_stays(tmp_path):
    """Under auto a resumed run chooses for the machine as it is now (busy at the start: one thread; idle at the
    resume: two); an explicit number is the same in every session (what a bit-for-bit resume needs); the caller's
    thread count is as it was after pretraining. In a child process: a team of two threads in the test process
    would hang the tests that fork after it."""
    script = f"""
import json, os
os.environ.pop("OMP_NUM_THREADS", None)
from electra.config import load_config
from electra.training.loop import pretrain
from electra.utils import machine
machine.usable_cpus = lambda: 2
steps = ["train.save_every=2", "train.eval_every=1000", "train.threads=auto"]
run = {str(tmp_path / "run")!r}
machine.cores_busy_elsewhere = lambda: 1.0
pretrain(load_config("tiny", [*steps, "train.max_steps=2"]), run, progress=False)
machine.cores_busy_elsewhere = lambda: 0.0
pretrain(load_config("tiny", [*steps, "train.max_steps=4"]), run, resume="auto", progress=False)
fixed = {str(tmp_path / "fixed")!r}
import torch
torch.set_num_threads(3)  # the caller's: pretraining leaves them as it found them
pretrain(load_config("tiny", [*steps[:2], "train.threads=1", "train.max_steps=2"]), fixed, progress=False)
assert torch.get_num_threads() == 3, torch.get_num_threads()
pretrain(load_config("tiny", [*steps[:2], "train.threads=1", "train.max_steps=4"]), fixed, resume="auto",
         progress=False)
print(json.dumps([[s["threads"] for s in json.load(open(r + "/run.json"))["sessions"]] for r in (run, fixed)]))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [[1, 2], [1, 1]]
