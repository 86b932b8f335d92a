"""The memory estimate behind --max-memory-gb."""

import json
import resource

import pytest
import torch

from electra.config import load_config
from electra.modeling.electra import ElectraForPretraining
from electra.modeling.flops import parameter_count
from electra.training.checkpoint import read_config
from electra.training.loop import micro_batch_size, pretrain
from electra.training.memory import estimate_peak_bytes
from tests.helpers import run_python


@pytest.mark.parametrize("preset", ["tiny", "cpu", "small", "small++"])  # cpu: rotary positions, no table
def test_parameter_count_matches_the_model(preset):
    cfg = load_config(preset)
    with torch.device("meta"):
        model = ElectraForPretraining(cfg.model)
    assert parameter_count(cfg) == sum(p.numel() for p in model.parameters())


def test_budget_picks_the_largest_fitting_divisor():
    def pick(gb, precision="fp32"):
        cfg = load_config("small", [f"train.max_memory_gb={gb}", f"train.precision={precision}"])
        return micro_batch_size(cfg, 128, precision, torch.device("cuda"))

    cfg = load_config("small", ["train.precision=fp32"])
    per_sequence = (estimate_peak_bytes(cfg, 128) - estimate_peak_bytes(cfg, 64)) / 64
    assert per_sequence > 0 and estimate_peak_bytes(cfg, 1) < estimate_peak_bytes(cfg, 2)
    for gb in (32, 16, 11, 6, 3):
        m = pick(gb)
        assert 128 % m == 0 and estimate_peak_bytes(cfg, m) <= gb * 2**30
        assert m == 128 or estimate_peak_bytes(cfg, 2 * m) > gb * 2**30
    assert pick(6) < pick(16) and pick(6, "fp16") >= pick(6)
    with pytest.raises(ValueError, match="does not fit"):
        pick(0.1)


def test_run_json_records_the_budget_the_estimate_the_micro_batch_and_the_peak_on_cpu(tmp_path):
    cfg = load_config(
        "tiny",
        [
            "train.batch_size=8",
            "train.max_steps=2",
            "train.eval_every=1000",
            "train.eval_batches=1",
            "train.precision=fp32",
            "train.max_memory_gb=0.76",  # 0.75 GiB for the process on a CPU; micro-batch 8 needs ~0.764
        ],
    )
    pretrain(cfg, tmp_path / "run", device="cpu")
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    cfg = read_config(tmp_path / "run" / "config.yaml")  # the vocabulary size the tokenizer set
    micro = micro_batch_size(cfg, 8, "fp32", torch.device("cpu"))
    assert micro < 8  # the budget forces accumulation
    assert run["micro_batch"] == micro and run["memory_budget_gb"] == 0.76
    assert run["memory_estimate_gb"] == round(estimate_peak_bytes(cfg, micro, "fp32", "cpu") / 2**30, 3) > 0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # this process ran the run
    assert 0.1 < run["peak_memory_gb"] <= rss + 1e-3


@pytest.mark.slow
def test_a_run_records_its_own_peak_not_the_one_its_parent_handed_down():
    """On Linux a child's ru_maxrss starts at its parent's size (it survives fork and exec): a run started by a
    large process (a study's workers, the test runner late in the suite) would record that size as its peak.
    `process_peak_bytes` is the process's own high-water mark."""
    big = bytearray(768 * 2**20)
    big[::4096] = b"\x01" * len(big[::4096])  # touched: resident
    code = (
        "import resource; from electra.training.memory import process_peak_bytes; "
        "print(process_peak_bytes() / 2**30, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)"
    )
    own, carried = (float(x) for x in run_python("-c", code, check=True).stdout.split())
    assert carried > 0.75 and own < 0.5
    del big
