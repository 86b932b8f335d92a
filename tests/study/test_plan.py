"""The study's printed plan names a setting whose sampling schedule is longer than its steps (the budget decides the
steps, so a short budget can cut the `cpu` preset's 3000-step temperature schedule short)."""

from __future__ import annotations

import pytest

import electra.study.grid as grid_module
import electra.study.plan as plan_module
from electra.data.synthetic_tasks import write_synthetic_tasks
from electra.study.grid import StudySpec
from electra.study.run import start


@pytest.fixture
def timed_exactly(monkeypatch):
    """0.01 s a pretraining step, 0.002 s a fine-tuning step: no timing on this machine."""
    for module in (grid_module, plan_module):  # where it is defined, and the plan's name for it
        monkeypatch.setattr(module, "seconds_per_step", lambda cfg, device: 0.01)
    monkeypatch.setattr(plan_module, "finetune_step_seconds", lambda cfg, spec, length: 0.002)


def test_the_plan_warns_of_a_schedule_longer_than_the_settings_steps(tmp_path, timed_exactly):
    task = write_synthetic_tasks(tmp_path / "tasks")[0]
    spec = StudySpec(
        out=str(tmp_path / "s"),
        base="tiny",
        settings=[
            "annealed:objective.temperature_start=3;objective.temperature_steps=40",
            "plain:",
            "mlm:objective.kind=mlm;objective.temperature_start=3;objective.temperature_steps=40",
        ],
        budget="steps=20",
        tasks=str(task),
        seeds=[0],
        finetune_overrides=["finetune.max_steps=2"],
    )
    lines = plan_module.plan_lines(plan_module.make_plan(spec, start(spec)), spec.out)
    row = next(i for i, line in enumerate(lines) if line.startswith("   annealed "))
    assert lines[row + 1] == (
        "     warning: objective.temperature_steps 40 exceeds train.max_steps 20: the run's last step samples at "
        "temperature 2.05, its held-out evaluations at objective.temperature 1, so it ends on easier replacements "
        "than those it is scored on; objective.temperature_steps=20 ends the schedule with the run"
    )
    assert lines[row + 2].startswith("   plain ") and lines[row + 3].startswith("   mlm ")  # none for them
    assert sum("warning:" in line for line in lines) == 1
