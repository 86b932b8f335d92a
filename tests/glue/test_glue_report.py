"""The sweep's results.md says what `electra report` says of the pretrained model: the learning gate's verdict,
judged by the same rule (electra/training/health.py) on the run the sweep fine-tuned."""

from __future__ import annotations

import pytest

from electra.glue.report import pretraining_gate, write_report
from electra.glue.sweep import finish, run_dir
from electra.report.results import gate, read_pretrain_run
from electra.utils.files import write_json
from tests.helpers import fake_pretrain_run

PLATEAU = {"eval_masked_accuracy": 0.05, "eval_mlm_majority_rate": 0.05, "eval_masked_loss": 5.0}
LEARNED = {"eval_masked_accuracy": 0.31, "eval_mlm_majority_rate": 0.05, "eval_masked_loss": 3.2}


def record(seed: int) -> dict:
    chance = {"at_chance": False, "metric": "accuracy", "value": 60.0, "baseline": 50.0, "margin": 5.0}
    return {
        "task": "rte",
        "seed": seed,
        "metrics": {"accuracy": 60.0 + seed},
        "extra_metrics": {},
        "n_train": 10,
        "n_eval": 5,
        "chance": {**chance, "constant": False},
    }


@pytest.mark.parametrize(
    ("held_out", "verdict"),
    [
        ({**PLATEAU, "eval_mlm_unigram_loss": 5.0, "eval_disc_auc": 0.52}, "NEVER LEARNED: "),
        ({**LEARNED, "eval_mlm_unigram_loss": 5.0, "eval_disc_auc": 0.83}, "learned: "),
    ],
)
def test_results_md_carries_the_gates_verdict_on_the_pretrained_run(tmp_path, capsys, held_out, verdict):
    run = fake_pretrain_run(tmp_path / "run", 200, [{"step": 100, **held_out}, {"step": 200, **held_out}])
    said = gate(read_pretrain_run(run)).describe()  # what `electra report` says of the run
    assert said.startswith(verdict)
    for model in (run, run / "checkpoints" / "step_00000200"):  # a checkpoint stands for its run
        write_report(tmp_path, [record(0), record(1)], [], {"model": str(model)})
        md = (tmp_path / "results.md").read_text()
        assert f"Pretraining, by the learning gate (`electra report`'s verdict): {said}." in md
        rejected = "**The gate rejects this pretraining" in md
        assert rejected == (verdict == "NEVER LEARNED: ")
    for r in (record(0), record(1)):  # and the sweep's last line says the gate's word
        write_json(run_dir(tmp_path, "rte", r["seed"]) / "result.json", r)
    capsys.readouterr()
    finish(tmp_path, {"model": str(run)}, [])
    word = verdict.removesuffix(": ").upper()
    assert (
        capsys.readouterr().out.splitlines()[-1] == f"pretraining, by the learning gate: {word} (results.md says why)"
    )


def test_a_model_without_a_run_of_ours_or_random_weights_is_not_judged(tmp_path):
    assert pretraining_gate("google/electra-small-discriminator").learned is None
    baseline = fake_pretrain_run(tmp_path / "none", 0, [], overrides=["objective.kind=none"])
    assert pretraining_gate(str(baseline)).describe() == "random initialisation, not pretrained"
    write_report(tmp_path, [record(0)], [], {"model": "google/electra-small-discriminator"})
    assert (
        "learning gate (`electra report`'s verdict): not judged: no pretraining run"
        in (tmp_path / "results.md").read_text()
    )
