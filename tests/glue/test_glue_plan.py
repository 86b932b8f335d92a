"""`electra glue` prints its plan before its first run: per task the runs left, the optimizer steps of one run
(the recipe's epochs over the training set), and an estimated wall time from steps timed on this device."""

from __future__ import annotations

import math

import pytest

import electra.glue.plan as plan_module
from electra.config import FinetuneConfig
from electra.glue.sweep import SweepSpec, run_sweep
from tests.glue_fixtures import make_run, write_glue


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    return {"glue": write_glue(root / "glue"), "run": make_run(root / "run")}


def test_the_plan_comes_before_the_first_run_with_each_tasks_steps_and_the_time(world, tmp_path, monkeypatch, capsys):
    timed = []
    monkeypatch.setattr(plan_module, "step_seconds", lambda model, ft, length, device: timed.append(length) or 0.5)
    spec = SweepSpec(
        out=str(tmp_path / "out"),
        model=str(world["run"]),
        tasks=["rte", "mrpc"],
        glue_dir=str(world["glue"]),
        seeds=[0, 1],
        finetune=FinetuneConfig(epochs=2),
        progress=False,
    )
    run_sweep(spec)
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("== the plan of sweep"))
    first_run = next(i for i, line in enumerate(lines) if line.startswith("[1/"))
    assert head < first_run  # said before anything runs
    assert lines[head] == f"== the plan of sweep {tmp_path / 'out'}: 4 runs to do on cpu (1 worker)"
    # fixtures: 32 training rows a task, batch 32; MRPC trains on both orders of each pair (OFF's double_unordered)
    rte, mrpc = math.ceil(32 / 32) * 2, math.ceil(64 / 32) * 2
    assert lines[head + 1].split()[:5] == ["rte", "2", "runs", "x", f"{rte}"]
    assert lines[head + 2].split()[:5] == ["mrpc", "2", "runs", "x", f"{mrpc}"]
    assert "(2 epochs of 64 examples" in lines[head + 2]
    total = 2 * rte * 0.5 + 2 * mrpc * 0.5  # one worker: the runs one after the other
    assert (
        lines[head + 3]
        == f"   estimated wall time: about {total:.0f} s (1 run at a time; from timed steps on this device)"
    )
    assert 1 <= len(timed) <= 2  # one timed step per distinct padded length
    capsys.readouterr()
    run_sweep(spec)  # nothing left: no plan, no timing
    assert "== the plan" not in capsys.readouterr().out and len(timed) <= 2


def test_a_capped_run_says_how_much_of_its_schedule_it_keeps(world, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(plan_module, "step_seconds", lambda model, ft, length, device: 0.5)
    spec = SweepSpec(out=str(tmp_path / "out"), model=str(world["run"]), tasks=["rte", "mrpc"],
                     glue_dir=str(world["glue"]), seeds=[0], finetune=FinetuneConfig(epochs=2, max_steps=3),
                     progress=False)  # fmt: skip
    run_sweep(spec)
    lines = capsys.readouterr().out.splitlines()
    rte = next(line for line in lines if line.split()[:1] == ["rte"])
    mrpc = next(line for line in lines if line.split()[:1] == ["mrpc"])
    assert "(2 epochs of 32 examples" in rte  # 2 steps: under the cap, the whole schedule
    assert "(capped: 3 of the 4 steps of 2 epochs of 64 examples" in mrpc


def test_the_wall_time_spreads_the_runs_over_the_workers():
    plan = plan_module.SweepPlan(
        {"sst2": plan_module.TaskPlan(3, 100, 3, 1000, 64, 1.0), "rte": plan_module.TaskPlan(3, 10, 3, 100, 64, 1.0)},
        workers=2,
        where="cpu",
    )
    assert plan.seconds == 200.0  # longest first, each to the freer worker: 100 + 100 on one, 100 + 3 x 10 on the other
