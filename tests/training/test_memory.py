"""The memory estimate behind --max-memory-gb."""

import pytest
import torch

from electra.config import load_config
from electra.modeling.electra import ElectraForPretraining
from electra.modeling.flops import parameter_count
from electra.training.loop import micro_batch_size
from electra.training.memory import estimate_peak_bytes


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
