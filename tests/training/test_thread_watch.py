"""train.threads=auto follows the load (electra/training/threads.py): steps that slow down make the run look at
the machine at once, and a regular look every RECHECK_STEPS steps gives back the cores that other work left; a
change is said in one line and each metrics row carries its threads; an explicit number or OMP_NUM_THREADS is
never watched, and a library call leaves torch's threads as it found them."""

from __future__ import annotations

import json

import pytest
import torch

from electra.training import threads as watch_module
from electra.training.threads import BASELINE_STEPS, RECENT_STEPS, RECHECK_STEPS, WARMUP_STEPS, ThreadWatch

SETTLED = WARMUP_STEPS + BASELINE_STEPS  # steps until a watch has its baseline


@pytest.fixture
def machine(monkeypatch):
    """A 2-core machine whose other work the test sets (`machine["busy"]`); torch's thread count recorded, not set
    (a team of two threads in the test process would hang the tests that fork after it)."""
    state = {"busy": 0.0, "set": []}
    monkeypatch.setattr(watch_module, "usable_cpus", lambda: 2)
    monkeypatch.setattr(watch_module, "busy_mark", lambda: "mark")
    monkeypatch.setattr(watch_module, "busy_since", lambda mark: state["busy"])
    monkeypatch.setattr(watch_module.torch, "set_num_threads", lambda n: state["set"].append(n))
    return state


def steps(watch: ThreadWatch, seconds: float, n: int) -> list[int]:
    return [t for t in (watch.after_step(seconds) for _ in range(n)) if t is not None]


def test_busy_work_that_starts_mid_run_takes_a_thread_at_once_and_gives_it_back_when_it_ends(machine, caplog):
    watch = ThreadWatch(threads=2)
    assert steps(watch, 0.046, SETTLED + 50) == []  # steady: no look before RECHECK_STEPS
    machine["busy"] = 1.3  # another process starts: steps slow to ~3x
    with caplog.at_level("INFO", logger="electra.pretrain"):
        changed = steps(watch, 0.131, RECENT_STEPS)
    assert changed == [1] and machine["set"] == [1]  # within RECENT_STEPS steps of the slowdown, not 500
    # looked at the 5th slow step, when the median of the last 10 (5 fast, 5 slow: 88 ms) passed 1.5 x 46 ms
    assert "threads 2 -> 1 (steps took 88 ms against 46, 1.3 of 2 usable cores busy with other work)" in caplog.text
    assert steps(watch, 0.070, RECHECK_STEPS) == []  # one thread, beside the other work: looked, kept
    machine["busy"] = 0.0  # the other work ends: the next regular look gives the core back
    assert steps(watch, 0.070, RECHECK_STEPS) == [2] and machine["set"] == [1, 2]


def test_a_slowdown_that_is_not_the_machines_becomes_the_new_normal(machine):
    watch = ThreadWatch(threads=2)
    steps(watch, 0.05, SETTLED)
    assert steps(watch, 0.2, RECENT_STEPS) == [] and machine["set"] == []  # nothing else runs: keep the threads
    assert watch.baseline == pytest.approx(0.2)
    assert steps(watch, 0.2, RECENT_STEPS * 3) == []  # and no look after every step from now on
    assert watch.since_look == RECENT_STEPS * 3


def test_one_slow_step_is_no_slowdown(machine):
    watch = ThreadWatch(threads=2)
    steps(watch, 0.05, SETTLED)
    machine["busy"] = 2.0
    assert steps(watch, 0.5, 1) + steps(watch, 0.05, RECENT_STEPS - 1) == []  # an evaluation, a save: not a trend


def test_a_run_still_warming_up_is_judged_against_its_best_pace(machine):
    """A fresh run's first steps are slow (~125 ms against a settled ~45 at the `cpu` preset): a baseline taken
    while it warms up would hide busy work that later slows it to 2x its settled pace."""
    watch = ThreadWatch(threads=2)
    steps(watch, 0.125, SETTLED + 10)  # still warming up when the baseline is taken
    assert steps(watch, 0.045, RECENT_STEPS * 2) == [] and watch.baseline == pytest.approx(0.045)
    machine["busy"] = 1.3
    assert steps(watch, 0.09, RECENT_STEPS) == [1]  # 2x the settled pace, still under 1.5x the warm-up's


def test_only_auto_on_a_cpu_is_watched_and_each_row_says_its_threads(tmp_path, monkeypatch):
    from electra.config import load_config
    from electra.training import loop

    seen = []
    real = loop.thread_watch
    monkeypatch.setattr(loop, "thread_watch", lambda run: seen.append(real(run)) or seen[-1])
    quick = ["train.max_steps=2", "train.save_every=2", "train.eval_every=1000", "train.log_every=1"]
    before = torch.get_num_threads()
    loop.pretrain(load_config("tiny", [*quick, "train.threads=1"]), tmp_path / "fixed", progress=False)
    loop.pretrain(load_config("tiny", quick), tmp_path / "omp", progress=False)  # auto under OMP_NUM_THREADS
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(loop, "choose_threads", lambda setting, share: (1, "auto: stubbed"))  # one thread still
    loop.pretrain(load_config("tiny", quick), tmp_path / "auto", progress=False)
    assert [w is None for w in seen] == [True, True, False]
    assert torch.get_num_threads() == before  # as the caller had it
    rows = [json.loads(line) for line in (tmp_path / "auto" / "metrics.jsonl").read_text().splitlines()]
    assert [r["threads"] for r in rows if "mlm_loss" in r] == [1, 1]  # each training row says its threads
