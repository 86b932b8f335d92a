"""Runs and checkpoints written before a config key existed still load and resume: a missing key takes its default.

Keys added since: `objective.position_sampling` and `model.init`. A run written before them drew its masked
positions without replacement; read back, its config says `with_replacement` (OFF's draw, the default now), so a
resumed old run continues with OFF's draw. `model.init` only matters when weights are created, never on a load.
"""

import yaml

from electra.checkpoint import list_checkpoints, load_pretraining_model
from electra.config import from_dict, load_config, to_dict
from electra.pretrain import pretrain

NEW_KEYS = {"objective": ("position_sampling",), "model": ("init",)}
FAST = ["train.batch_size=8", "train.log_every=2", "train.eval_every=1000", "train.eval_batches=1"]


def without_new_keys(raw: dict) -> dict:
    for section, keys in NEW_KEYS.items():
        for key in keys:
            del raw[section][key]
    return raw


def test_a_config_without_the_new_keys_reads_with_their_defaults():
    cfg = from_dict(without_new_keys(to_dict(load_config("small"))))
    assert cfg.objective.position_sampling == "with_replacement" and cfg.model.init == "original"
    assert cfg == load_config("small")


def test_a_run_saved_without_the_new_keys_loads_and_resumes(tmp_path):
    run = tmp_path / "run"
    pretrain(load_config("tiny", FAST + ["train.max_steps=2", "train.save_every=2"]), run)
    saved = sorted(run.rglob("config.yaml"))
    assert len(saved) >= 2  # the run's and its checkpoint's
    for path in saved:  # as an older version wrote them
        path.write_text(yaml.safe_dump(without_new_keys(yaml.safe_load(path.read_text())), sort_keys=False))

    model, cfg = load_pretraining_model(run)
    assert cfg.objective.position_sampling == "with_replacement"
    pretrain(load_config("tiny", FAST + ["train.max_steps=4", "train.save_every=2"]), run, resume="auto")
    assert [p.name for p in list_checkpoints(run)] == ["step_00000002", "step_00000004"]
