"""The sampling schedules say what they did: the temperature (and the uniform-replacement share) of every metrics
row and of run.json, a warning for a schedule longer than the run, the same schedule after a kill and a resume as
in an uninterrupted run (bit for bit), a refusal where a model has no schedule to set, and a collapse hint that
knows the run anneals already."""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import electra.training.evaluation as evaluation
from electra.config import ObjectiveConfig, load_config, temperature_at, uniform_replace_at
from electra.modeling.electra import ElectraForPretraining, attention_bias
from electra.training.checkpoint import RunMeta, list_checkpoints
from electra.training.evaluation import watch_collapse
from electra.training.health import COLLAPSE_HINT, learning_gate
from electra.training.loop import pretrain
from tests.helpers import KILLED, assert_same_state, die_at, masked, metric_rows, random_batch, tiny_model_config

STEPS = 8
SCHEDULED = [  # both schedules run through the whole run, so a resume at step 4 lands inside them
    "train.batch_size=4",
    f"train.max_steps={STEPS}",
    "train.save_every=2",
    "train.log_every=1",
    f"train.eval_every={STEPS}",
    "train.eval_batches=1",
    "train.warmup_steps=2",
    "objective.temperature_start=3.0",
    f"objective.temperature_steps={STEPS}",
    "objective.uniform_replace_start=0.5",
    f"objective.uniform_replace_steps={STEPS}",
]


def train_rows(run: Path) -> list[dict]:
    return [r for r in metric_rows(run) if "mlm_loss" in r]


def test_every_metrics_row_and_run_json_say_the_temperature_and_uniform_share_of_their_step(tmp_path):
    cfg = load_config("tiny", SCHEDULED)
    pretrain(cfg, tmp_path / "run")
    rows = train_rows(tmp_path / "run")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    # a row covers the updates up to its step: it says the values of its last one (step - 1, 0-based)
    assert [r["temperature"] for r in rows] == [3.0 - 2.0 * s / STEPS for s in range(STEPS)]
    assert [r["uniform_replace"] for r in rows] == [0.5 - 0.5 * s / STEPS for s in range(STEPS)]
    assert rows[0]["temperature"] == 3.0 and rows[-1]["temperature"] == 1.25
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (run["temperature"], run["uniform_replace"]) == (1.25, 0.0625)
    assert list(run).index("temperature") == list(run).index("peak_lr") + 1  # beside the lr

    # OFF's constant temperature is said too; the masked LM samples nothing and says nothing
    constant = load_config("tiny", SCHEDULED[:7])
    pretrain(constant, tmp_path / "constant")
    assert {r["temperature"] for r in train_rows(tmp_path / "constant")} == {1.0}
    assert all("uniform_replace" not in r for r in train_rows(tmp_path / "constant"))
    mlm = load_config("tiny", [*SCHEDULED[:7], "objective.kind=mlm", "train.max_steps=2"])
    pretrain(mlm, tmp_path / "mlm")
    assert all("temperature" not in r for r in train_rows(tmp_path / "mlm"))
    assert json.loads((tmp_path / "mlm" / "run.json").read_text())["temperature"] is None


def test_a_kill_and_resume_inside_the_schedule_continue_it_bit_for_bit(tmp_path):
    """Killed once step 4's checkpoint is in place (half way through both schedules), resumed: the same
    temperatures, uniform shares, metrics and weights as the run that was never stopped."""
    cfg = load_config("tiny", SCHEDULED)
    pretrain(cfg, tmp_path / "straight")
    run = tmp_path / "killed"
    assert die_at("checkpoint.commit@2", pretrain, cfg, run) == KILLED
    assert list_checkpoints(run)[-1].name == "step_00000004"
    pretrain(cfg, run, resume="auto")
    resumed = train_rows(run)
    assert [r["temperature"] for r in resumed] == [temperature_at(s, cfg.objective) for s in range(STEPS)]
    assert [r["uniform_replace"] for r in resumed] == [uniform_replace_at(s, cfg.objective) for s in range(STEPS)]
    assert metric_rows(run) == metric_rows(tmp_path / "straight")
    assert assert_same_state(run, tmp_path / "straight") > 0


def test_a_schedule_longer_than_the_run_is_warned_of(tmp_path, caplog):
    """3 -> 1 over 8 steps in a 2-step run: its last update samples at 3 - 2 / 8 = 2.75, its evaluation at 1."""
    plain = SCHEDULED[:7]  # no schedule
    cfg = load_config("tiny", [*plain, "objective.temperature_start=3.0", "objective.temperature_steps=8"])
    short = load_config(
        "tiny", [*plain, "objective.temperature_start=3.0", "objective.temperature_steps=8"] + ["train.max_steps=2"]
    )
    with caplog.at_level(logging.WARNING, logger="electra"):
        pretrain(short, tmp_path / "short")
    said = [r.getMessage() for r in caplog.records if "exceeds train.max_steps" in r.getMessage()]
    assert said == [
        "objective.temperature_steps 8 exceeds train.max_steps 2: the run's last step samples at temperature 2.75, "
        "its held-out evaluations at objective.temperature 1, so it ends on easier replacements than those it is "
        "scored on; objective.temperature_steps=2 ends the schedule with the run"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="electra"):
        pretrain(cfg, tmp_path / "whole")  # the schedule ends with the run
    assert "exceeds train.max_steps" not in caplog.text


def sample(model, ids, attention, types, m) -> torch.Tensor:
    """(B, N) the generator's samples at the chosen slots."""
    return model.corrupt(ids, attention_bias(attention), types, m)[2]


def test_set_temperature_changes_the_samples_of_a_scheduled_model_and_is_refused_without_a_schedule():
    cfg = tiny_model_config()
    ids, attention, types = random_batch(B=64, T=32)
    m = masked(ids, attention)
    hot = ElectraForPretraining(cfg, ObjectiveConfig(temperature=3.0)).eval()
    scheduled = ElectraForPretraining(cfg, ObjectiveConfig(temperature_start=5.0, temperature_steps=10)).eval()
    scheduled.load_state_dict(hot.state_dict())
    scheduled.set_temperature(3.0)
    with torch.no_grad():
        sampled = sample(hot, ids, attention, types, m)
        assert torch.equal(sampled, sample(scheduled, ids, attention, types, m))
        scheduled.set_temperature(1.0)
        assert not torch.equal(sampled, sample(scheduled, ids, attention, types, m))  # it does something
    constant = ElectraForPretraining(cfg)
    constant.set_temperature(1.0)  # its own temperature: what the held-out evaluation sets, allowed
    with pytest.raises(ValueError, match=r"set_temperature\(3\): this model samples at its constant "):
        constant.set_temperature(3.0)
    assert float(constant.temperature) == 1.0
    constant.set_uniform_replace(0.0)
    with pytest.raises(ValueError, match=r"set_uniform_replace\(0.2\): this model mixes no uniform replacements"):
        constant.set_uniform_replace(0.2)
    ElectraForPretraining(cfg, ObjectiveConfig(uniform_replace_prob=0.1)).set_uniform_replace(0.2)  # constant > 0


COLLAPSED_EVALS = [
    {
        "step": 250 * (i + 1),
        "eval_masked_accuracy": 0.1,
        "eval_mlm_majority_rate": 0.04,
        "eval_disc_auc": 0.55,
        "eval_disc_recall": 0.0,
        "eval_disc_effective_rank": rank,
    }
    for i, rank in enumerate([40.0, 3.6, 2.2])
]
NEXT = (
    "it anneals its sampling temperature already (3 to 1 over 3,000 steps); what to try next: a smaller generator "
    "(--set model.generator_fraction=0.125), or a longer warmup with the schedule (--set train.warmup_steps=1000)"
)


def test_the_collapse_hint_names_what_comes_after_the_schedule_to_a_run_that_has_it():
    with_schedule = learning_gate("electra", COLLAPSED_EVALS, load_config("cpu").objective).describe()
    assert NEXT in with_schedule and COLLAPSE_HINT not in with_schedule
    without = learning_gate("electra", COLLAPSED_EVALS, load_config("tiny").objective).describe()
    assert f"the flag most likely to help: {COLLAPSE_HINT}" in without and "what to try next" not in without


def test_the_training_loops_collapse_warning_words_its_hint_the_same_way(tmp_path, monkeypatch, caplog):
    """watch_collapse, with held-out numbers at the collapse level and states collapsed by step 500."""
    collapsed = {"disc_recall": 0.0, "disc_auc": 0.5, "disc_effective_rank": 2.0}
    monkeypatch.setattr(evaluation, "evaluate", lambda *a, **k: collapsed)
    monkeypatch.setattr(evaluation, "states_collapsed", lambda evals: (500, 2.0))
    data = SimpleNamespace(train=None, eval=None)
    for preset, said in (("cpu", NEXT), ("tiny", f"the flag most likely to help: {COLLAPSE_HINT}")):
        cfg = load_config(preset, ["train.collapse_patience=1"])
        folder = tmp_path / preset
        folder.mkdir()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="electra"):
            watch_collapse(None, data, cfg, None, "cpu", contextlib.nullcontext(), RunMeta(), folder, [], 1000)
        assert f"collapsed to effective rank 2.0 by step 500 (one answer for every token); {said}" in caplog.text
