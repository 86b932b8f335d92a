"""train.tf32 / finetune.tf32: honoured, and recorded beside the precision."""

import json

import torch

from electra.config import FinetuneConfig, from_dict, load_config, to_dict
from electra.training.loop import pretrain
from electra.training.precision import enable_tf32


def test_train_tf32_is_a_config_field_that_round_trips_and_takes_set():
    assert load_config("tiny").train.tf32 is True and FinetuneConfig().tf32 is True
    off = load_config("tiny", ["train.tf32=false"])
    assert off.train.tf32 is False and from_dict(to_dict(off)).train.tf32 is False


def test_tf32_is_never_on_on_a_cpu():
    assert enable_tf32(torch.device("cpu"), True) is False


def test_run_json_records_tf32_beside_the_precision(tmp_path):
    cfg = load_config(
        "tiny", ["train.batch_size=4", "train.max_steps=1", "train.eval_batches=1", "train.precision=fp32"]
    )
    pretrain(cfg, tmp_path / "run", device="cpu")
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["tf32"] is False and run["precision"] == "fp32" and run["precision_reason"] == "asked for"
