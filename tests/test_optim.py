"""The two optimizers and two schedules against values computed by hand."""

import math

import pytest
import torch
from torch import nn

from electra.config import TrainConfig
from electra.optim import AdamNoBiasCorrection, build_optimizer, learning_rate, param_groups


def test_adam_without_bias_correction_two_steps_by_hand():
    p = nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = AdamNoBiasCorrection([{"params": [p], "weight_decay": 0.01}], lr=0.1, betas=(0.9, 0.999), eps=1e-6)
    grads = [torch.tensor([0.5, -1.0]), torch.tensor([0.2, 0.3])]
    m = v = torch.zeros(2, dtype=torch.float64)
    expected = p.detach().double().clone()
    for g in grads:
        p.grad = g.clone()
        opt.step()
        g = g.double()
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        expected = expected - 0.1 * (m / (v.sqrt() + 1e-6) + 0.01 * expected)  # OFF: no bias correction
    torch.testing.assert_close(p.detach().double(), expected, rtol=1e-6, atol=1e-7)
    # first step without bias correction: m / sqrt(v) = 0.1 g / sqrt(0.001) |g| = 3.16 sign(g), not 1
    q = nn.Parameter(torch.tensor([0.0]))
    opt = AdamNoBiasCorrection([q], lr=1.0, eps=0.0)
    q.grad = torch.tensor([4.0])
    opt.step()
    assert q.item() == pytest.approx(-0.1 / math.sqrt(0.001))


def test_adamw_is_the_bias_corrected_study_optimizer():
    model = nn.Linear(2, 1)
    cfg = TrainConfig(optimizer="adamw", lr=0.1, weight_decay=0.01)
    opt = build_optimizer(model, cfg, torch.device("cpu"))
    assert isinstance(opt, torch.optim.AdamW) and opt.defaults["eps"] == 1e-6
    w0 = model.weight.detach().clone()
    model.weight.grad = torch.tensor([[0.5, -1.0]])
    model.bias.grad = torch.tensor([0.3])
    opt.step()
    # first bias-corrected step moves every weight by lr * sign(g) (+ decoupled decay on the weight only)
    torch.testing.assert_close(model.weight.detach(), w0 * (1 - 0.1 * 0.01) - 0.1 * torch.tensor([[1.0, -1.0]]),
                               rtol=1e-5, atol=1e-6)  # fmt: skip


def test_weight_decay_excludes_layernorm_and_biases():
    model = nn.Sequential()
    model.add_module("dense", nn.Linear(3, 3))
    model.add_module("LayerNorm", nn.LayerNorm(3))
    decay, no_decay = param_groups(model, 0.01)
    assert decay["params"] == [model.dense.weight] and decay["weight_decay"] == 0.01
    assert len(no_decay["params"]) == 3 and no_decay["weight_decay"] == 0.0


def test_original_schedule_is_linear_decay_times_warmup():
    cfg = TrainConfig(lr=5e-4, max_steps=1_000_000, warmup_steps=10_000, schedule="original")
    assert learning_rate(0, cfg) == 0.0
    assert learning_rate(5_000, cfg) == pytest.approx(5e-4 * 0.995 * 0.5)
    assert learning_rate(10_000, cfg) == pytest.approx(5e-4 * 0.99)
    assert learning_rate(500_000, cfg) == pytest.approx(2.5e-4)
    assert learning_rate(1_000_000, cfg) == 0.0


def test_study_schedule_is_warmup_then_linear_decay():
    cfg = TrainConfig(lr=5e-4, max_steps=1_000_000, warmup_steps=10_000, schedule="study")
    assert learning_rate(5_000, cfg) == pytest.approx(2.5e-4)
    assert learning_rate(10_000, cfg) == pytest.approx(5e-4)
    assert learning_rate(505_000, cfg) == pytest.approx(2.5e-4)
    assert learning_rate(1_000_000, cfg) == 0.0
