"""scripts/heldout_at_temperature.py re-scores a run's checkpoints with the generator at another temperature: at
the run's own end temperature it must give exactly what the run's held-out evaluation logged, and at another
temperature another task (so a recipe ending above temperature 1 can be put beside the runs ending at 1)."""

from __future__ import annotations

import json

from electra.cli import main
from tests.helpers import metric_rows, run_python

SCRIPT = "scripts/heldout_at_temperature.py"


def test_it_reproduces_the_runs_own_evaluation_and_rescores_at_another_temperature(tmp_path):
    run = tmp_path / "hot"
    args = ["pretrain", "--config", "tiny", "--set", "train.batch_size=8", "--set", "train.eval_batches=2"]
    args += ["--set", "objective.temperature=3.0", "--max-steps", "30", "--eval-every", "30", "--save-every", "30"]
    assert main([*args, "--out", str(run), "--quiet"]) == 0
    logged = [r for r in metric_rows(run) if "eval_disc_auc" in r and r["step"] == 30][0]

    def rescored(temperature: str) -> dict:
        out = run_python(SCRIPT, str(run), "--temperature", temperature, check=True).stdout
        return json.loads(out.strip().split("\n")[-1])

    own = rescored("3.0")
    assert own["checkpoint"] == "step_00000030"
    assert abs(own["disc_auc"] - logged["eval_disc_auc"]) < 1e-4
    assert abs(own["disc_recall"] - logged["eval_disc_recall"]) < 1e-4
    assert abs(own["disc_effective_rank"] - logged["eval_disc_effective_rank"]) < 1e-2
    cold = rescored("1.0")
    assert abs(cold["disc_auc"] - own["disc_auc"]) > 1e-3  # other replacements, another score
    assert cold["generator_nats_under_frequencies"] == own["generator_nats_under_frequencies"]  # [MASK] slots alike
