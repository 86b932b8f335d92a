"""FLOP counts against the official ELECTRA figures, against what PyTorch counts, and the reproduction study's
pfs-days."""

import json

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from electra.config import load_config, num_mask_slots
from electra.modeling import flops
from electra.modeling.electra import ElectraForPretraining
from electra.modeling.masking import mask_tokens
from tests.helpers import cli_main


def test_electra_small_matches_official_flops_computation():
    # google-research/electra flops_computation.py prints 1.2937e18 for electra_small (1M steps, batch 128).
    total = flops.off_train_flops(load_config("small"), steps=1_000_000)
    assert total == pytest.approx(1.2937e18, rel=5e-5)


@pytest.mark.parametrize(
    "preset, steps, paper",
    [("base", 766_000, 6.4e19), ("large", 400_000, 7.1e20), ("large", 1_750_000, 3.1e21)],
)
def test_larger_models_match_the_paper_table(preset, steps, paper):
    # ELECTRA paper, Table 8 "Train FLOPs" (two significant digits).
    assert flops.off_train_flops(load_config(preset), steps=steps) == pytest.approx(paper, rel=0.01)


def test_executed_flops_per_token_match_spec():
    # roughly 70 MFLOP per token with the masked-position gather, 90 without (docs/benchmarks.md)
    cfg = load_config("small")
    tokens = 128 * 128
    assert flops.pretrain_step_flops(cfg, 128, 128) / tokens == pytest.approx(70.19e6, rel=1e-3)
    assert flops.pretrain_step_flops(cfg, 128, 128, full_vocab_head=True) / tokens == pytest.approx(90.19e6, rel=1e-3)


def test_analytic_step_flops_equal_what_pytorch_counts():
    """The formula counts exactly the matmuls a forward + backward of our model runs (no dropout, tiny model).

    The math attention backend runs attention as countable matmuls (the counter skips CPU's fused kernel)."""
    cfg = load_config("tiny", ["model.dropout=0.0", "model.attention_dropout=0.0"])
    B, T = 4, cfg.data.seq_len
    model = ElectraForPretraining(cfg.model, cfg.objective)
    ids = torch.randint(5, cfg.model.vocab_size, (B, T))
    ids[:, 0], ids[:, -1] = 2, 3
    mask = torch.ones_like(ids)
    masked = mask_tokens(
        ids, mask, torch.arange(B), 0, cfg.objective, num_mask_slots(cfg.objective, T), 4, torch.tensor([0, 2, 3, 4])
    )
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        model(ids, mask, None, masked).loss.backward()
    assert counter.get_total_flops() == flops.pretrain_step_flops(cfg, B, T)


@pytest.mark.parametrize(
    "days, gpus, device, expected",
    [
        (4, 1, "v100", 0.02),  # ELECTRA-Small original, 4 days on 1 V100
        (90 / 24, 8, "v100", 0.16),  # DistilBERT, 90 h on 8 V100
        (30, 8, "p6000", 0.95),  # GPT, 30 days on 8 "P600" (the P6000's 12 TFLOP/s reproduce the figure)
    ],
)
def test_pfs_days_reproduce_spec_table(days, gpus, device, expected):
    value = flops.pfs_days(days, gpus, flops.DEVICE_PEAK_TFLOPS[device])
    assert round(value, 2) == expected


def test_pfs_days_convention():
    # days x GPUs x peak TFLOP/s x 0.33 / 1000; the V100's tensor-core 125 TFLOP/s would not give 0.02
    assert flops.pfs_days(4, 1, 15.7) == pytest.approx(4 * 15.7 * 0.33 / 1000)
    assert round(flops.pfs_days(4, 1, 125.0), 2) != 0.02


def test_cli_prints_a_readable_summary(capsys):
    assert cli_main(["flops", "--preset", "small", "--steps", "1000000", "--device", "v100", "--days", "4"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "small: 1,000,000 steps x 128 sequences x 128 tokens",
        "  training FLOPs 1.2937e+18 = 0.015 pfs-days, as google-research/electra flops_computation.py (backward = "
        "forward, dense lookups)",
        "  executed 1.15e+18, 1.15e+12 a step, 7.019e+07 a token: matmuls only, train = 3 x forward, generator head "
        "at the masked slots",
        '  wall clock 96 h on 1 x 15.7 TFLOP/s at 33% of peak: 0.0207 pfs-days (OpenAI\'s "AI and Compute" convention)',
    ]


def test_cli_prints_total_flops(capsys):
    assert (
        cli_main(["flops", "--preset", "small", "--steps", "1000000", "--device", "v100", "--days", "4", "--json"]) == 0
    )
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["total_flops"] == pytest.approx(1.2937e18, rel=5e-5)
    assert round(out["pfs_days"], 2) == 0.02
    assert out["pfs_days_of_flops"] == pytest.approx(1.2937e18 / (1e15 * 86400), rel=5e-5)


def test_cli_step_time_gives_wall_clock(capsys):
    # the GPU target: 10 ms per step is 1M steps in 2.78 hours
    cli_main(["flops", "--preset", "small", "--steps", "1000000", "--ms-per-step", "10", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["wall_hours"] == pytest.approx(10 * 1e6 / 3.6e6)
