"""Runs and checkpoints written before a config key existed still load and resume, and read back as what they
computed.

Keys added since: `objective.position_sampling` and `model.init`. A run written before them drew its masked
positions without replacement, so its config reads back as `without_replacement` (not today's default, OFF's
draw), and resuming it with today's defaults is refused, naming the key. `model.init` only matters when weights
are created, never on a load: a missing key takes its default.
"""

import pytest
import yaml

from electra.config import from_dict, load_config, to_dict
from electra.training.checkpoint import CheckpointError, list_checkpoints, load_pretraining_model
from electra.training.loop import pretrain

NEW_KEYS = {"objective": ("position_sampling",), "model": ("init",)}
FAST = ["train.batch_size=8", "train.log_every=2", "train.eval_every=1000", "train.eval_batches=1"]


def without_new_keys(raw: dict) -> dict:
    for section, keys in NEW_KEYS.items():
        for key in keys:
            del raw[section][key]
    return raw


def test_a_config_without_the_new_keys_reads_as_what_it_computed():
    cfg = from_dict(without_new_keys(to_dict(load_config("small"))))
    assert cfg.objective.position_sampling == "without_replacement" and cfg.model.init == "original"
    assert cfg == load_config("small", ["objective.position_sampling=without_replacement"])


def test_a_run_saved_without_the_new_keys_loads_and_resumes(tmp_path):
    run = tmp_path / "run"
    pretrain(load_config("tiny", FAST + ["train.max_steps=2", "train.save_every=2"]), run)
    saved = sorted(run.rglob("config.yaml"))
    assert len(saved) >= 2  # the run's and its checkpoint's
    for path in saved:  # as an older version wrote them
        path.write_text(yaml.safe_dump(without_new_keys(yaml.safe_load(path.read_text())), sort_keys=False))
    for ckpt in list_checkpoints(run):  # ... before checkpoints recorded checksums, too
        (ckpt / "SHA256SUMS").unlink()
        (ckpt / "COMPLETE").write_text("")

    model, cfg = load_pretraining_model(run)
    assert cfg.objective.position_sampling == "without_replacement"
    resumed = FAST + ["train.max_steps=4", "train.save_every=2"]
    with pytest.raises(CheckpointError, match="position_sampling: 'without_replacement' -> 'with_replacement'"):
        pretrain(load_config("tiny", resumed), run, resume="auto")
    pretrain(load_config("tiny", resumed + ["objective.position_sampling=without_replacement"]), run, resume="auto")
    assert [p.name for p in list_checkpoints(run)] == ["step_00000002", "step_00000004"]
