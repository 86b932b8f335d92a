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


def test_an_explicit_number_and_omp_num_threads_win_over_auto(monkeypatch, keep_threads):
    assert choose_threads(1) == (1, "asked for") and torch.get_num_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    assert choose_threads("auto") == (1, "OMP_NUM_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(machine, "usable_cpus", lambda: 2)
    monkeypatch.setattr(machine, "cores_busy_elsewhere", lambda: 1.0)
    threads, why = choose_threads("auto")
    assert threads == 1 == torch.get_num_threads()
    assert why == "auto: 2 cores for this process, 1.0 of the machine's busy with other work"
    monkeypatch.setattr(machine, "cores_busy_elsewhere", lambda: 0.0)
    assert choose_threads("auto", share=2)[0] == 1  # one of two processes splitting the cores
    assert choose_threads("auto")[0] == 2 == torch.get_num_threads()


def test_a_resumed_run_keeps_the_threads_auto_chose_at_its_start(monkeypatch, tmp_path, keep_threads, caplog):
    """Sums split over another thread count round differently (6 steps of the tiny preset on 1 and 2 threads
    differ in 64 of 80 tensors), so auto, resuming, keeps the first session's choice though the machine is
    idle now. One thread first: a team of two in this process would hang the tests that fork after it."""
    from electra.config import load_config
    from electra.training.loop import pretrain

    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(machine, "usable_cpus", lambda: 2)
    run, steps = tmp_path / "run", ["train.save_every=2", "train.eval_every=1000", "train.threads=auto"]
    monkeypatch.setattr(machine, "cores_busy_elsewhere", lambda: 1.0)  # busy at the start: one thread
    pretrain(load_config("tiny", [*steps, "train.max_steps=2"]), run)
    monkeypatch.setattr(machine, "cores_busy_elsewhere", lambda: 0.0)  # idle now: auto alone would take two
    with caplog.at_level("INFO", logger="electra.pretrain"):
        pretrain(load_config("tiny", [*steps, "train.max_steps=4"]), run, resume="auto")
    sessions = json.loads((run / "run.json").read_text())["sessions"]
    assert [s["threads"] for s in sessions] == [1, 1] and sessions[1]["start_step"] == 2
    assert "threads 1 per process (auto: as the run's first session, so that it continues bit for bit)" in caplog.text
