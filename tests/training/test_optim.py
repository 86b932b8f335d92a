"""The two optimizers and two schedules against values computed by hand."""

import copy
import json
import math

import pytest
import torch
from torch import nn

from electra.config import ModelConfig, PretrainConfig, TrainConfig, load_config
from electra.training.loop import pretrain
from electra.training.optim import (
    AdamNoBiasCorrection,
    build_optimizer,
    clip_and_step,
    learning_rate,
    param_groups,
    peak_lr,
    step_unless,
)


def train_config(hidden_size: int = 256, **train) -> PretrainConfig:
    return PretrainConfig(model=ModelConfig(hidden_size=hidden_size), train=TrainConfig(**train))


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
    cfg = train_config(optimizer="adamw", lr=0.1, weight_decay=0.01)
    opt = build_optimizer(model, cfg, torch.device("cpu"))
    assert isinstance(opt, torch.optim.AdamW) and opt.defaults["eps"] == 1e-6
    w0 = model.weight.detach().clone()
    model.weight.grad = torch.tensor([[0.5, -1.0]])
    model.bias.grad = torch.tensor([0.3])
    opt.step()
    # first bias-corrected step moves every weight by lr * sign(g) (+ decoupled decay on the weight only)
    torch.testing.assert_close(
        model.weight.detach(), w0 * (1 - 0.1 * 0.01) - 0.1 * torch.tensor([[1.0, -1.0]]), rtol=1e-5, atol=1e-6
    )


def test_weight_decay_excludes_layernorm_and_biases():
    model = nn.Sequential()
    model.add_module("dense", nn.Linear(3, 3))
    model.add_module("LayerNorm", nn.LayerNorm(3))
    decay, no_decay = param_groups(model, 0.01)
    assert decay["params"] == [model.dense.weight] and decay["weight_decay"] == 0.01
    assert len(no_decay["params"]) == 3 and no_decay["weight_decay"] == 0.0


def test_original_schedule_is_linear_decay_times_warmup():
    cfg = train_config(lr=5e-4, max_steps=1_000_000, warmup_steps=10_000, schedule="original")
    assert learning_rate(0, cfg) == 0.0
    assert learning_rate(5_000, cfg) == pytest.approx(5e-4 * 0.995 * 0.5)
    assert learning_rate(10_000, cfg) == pytest.approx(5e-4 * 0.99)
    assert learning_rate(500_000, cfg) == pytest.approx(2.5e-4)
    assert learning_rate(1_000_000, cfg) == 0.0


def test_study_schedule_is_warmup_then_linear_decay():
    cfg = train_config(lr=5e-4, max_steps=1_000_000, warmup_steps=10_000, schedule="study")
    assert learning_rate(5_000, cfg) == pytest.approx(2.5e-4)
    assert learning_rate(10_000, cfg) == pytest.approx(5e-4)
    assert learning_rate(505_000, cfg) == pytest.approx(2.5e-4)
    assert learning_rate(1_000_000, cfg) == 0.0


@pytest.mark.parametrize("schedule", ["original", "study"])
def test_decay_steps_past_max_steps_runs_the_first_steps_of_the_longer_schedule(schedule):
    short = train_config(lr=1e-3, max_steps=1000, decay_steps=4000, warmup_steps=200, schedule=schedule)
    full = train_config(lr=1e-3, max_steps=4000, warmup_steps=200, schedule=schedule)
    assert [learning_rate(s, short) for s in range(0, 1001, 50)] == [learning_rate(s, full) for s in range(0, 1001, 50)]
    assert learning_rate(999, short) > 0.7e-3  # not decayed to 0 at the run's own end


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_a_skipped_step_changes_nothing_and_a_resumed_one_matches(name):
    model = nn.Linear(4, 3)
    cfg = train_config(optimizer=name, lr=0.1, weight_decay=0.01)
    opt = build_optimizer(model, cfg, torch.device("cpu"))
    assert all(group["fused"] for group in opt.param_groups)  # the on-device skip needs the fused kernel
    model.weight.grad, model.bias.grad = torch.randn(3, 4), torch.randn(3)
    step_unless(opt, torch.tensor(False))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    saved = copy.deepcopy(opt.state_dict())
    model.weight.grad, model.bias.grad = torch.randn(3, 4), torch.randn(3)
    step_unless(opt, torch.tensor(True))
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    for a, b in zip(opt.state_dict()["state"].values(), saved["state"].values(), strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)
    # the same update from a fresh optimizer loaded with the saved state: bit-equal
    twin = nn.Linear(4, 3)
    twin.load_state_dict(before)
    twin_opt = build_optimizer(twin, cfg, torch.device("cpu"))
    twin_opt.load_state_dict(saved)
    for m in (model, twin):
        m.weight.grad, m.bias.grad = torch.full((3, 4), 0.5), torch.full((3,), -0.25)
    step_unless(opt, torch.tensor(False))
    step_unless(twin_opt, torch.tensor(False))
    assert torch.equal(model.weight, twin.weight) and not torch.equal(model.weight, before["weight"])


def test_adam_state_without_step_counts_loads():
    """The earlier multi-tensor OFF Adam saved only the two moments; such a state resumes with the same update."""
    p = nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = AdamNoBiasCorrection([{"params": [p], "weight_decay": 0.01}], lr=0.1)
    p.grad = torch.tensor([0.5, -1.0])
    opt.step()
    state = copy.deepcopy(opt.state_dict())
    for s in state["state"].values():
        del s["step"]
    for group in state["param_groups"]:  # the earlier version's groups had only lr, betas, eps and weight_decay
        for key in set(group) - {"lr", "betas", "eps", "weight_decay", "params"}:
            del group[key]
    q = nn.Parameter(p.detach().clone())
    fresh = AdamNoBiasCorrection([{"params": [q], "weight_decay": 0.01}], lr=0.1)
    fresh.load_state_dict(state)
    assert fresh.state[q]["step"].item() == AdamNoBiasCorrection.STEP
    p.grad, q.grad = torch.tensor([0.2, 0.3]), torch.tensor([0.2, 0.3])
    opt.step()
    fresh.step()
    assert torch.equal(p, q)  # the same update, decoupled decay included


def test_clip_and_step_with_a_loss_scaler_skips_overflow_and_backs_off():
    """The fp16 path of `electra pretrain`, on CPU: an overflowed step leaves everything as it was and halves the
    scale; a finite one is unscaled, clipped and applied."""
    model = nn.Linear(3, 1, bias=False)
    opt = build_optimizer(model, train_config(optimizer="adam", lr=0.1, weight_decay=0.0), torch.device("cpu"))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    params = list(model.parameters())
    w0 = model.weight.detach().clone()
    scaler.scale(model(torch.full((1, 3), float("inf"))).sum()).backward()
    norm, skipped = clip_and_step(opt, scaler, params, max_norm=1.0)
    assert bool(skipped) and not torch.isfinite(norm) and model.weight.grad is None
    assert torch.equal(model.weight, w0) and scaler.get_scale() == 2.0**9
    scaler.scale(model(torch.tensor([[3.0, 0.0, -4.0]])).sum()).backward()  # gradient (3, 0, -4): norm 5
    norm, skipped = clip_and_step(opt, scaler, params, max_norm=1.0)
    assert not bool(skipped) and norm.item() == pytest.approx(5.0)
    # first OFF Adam step on the clipped gradient g = (0.6, 0, -0.8): -lr * 0.1 g / (sqrt(0.001) |g| + eps)
    g = torch.tensor([[0.6, 0.0, -0.8]])
    torch.testing.assert_close(model.weight - w0, -0.1 * 0.1 * g / ((0.001 * g * g).sqrt() + 1e-6))


def test_the_cpu_recipes_peak_falls_as_one_over_the_width_above_128():
    """1e-3 up to 128 wide, OFF's ELECTRA-Small 5e-4 at 256; OFF's presets keep their lr at any width."""
    shape = ["model.num_layers=4", "model.num_heads=2", "model.intermediate_size=512"]
    widths = {64: 1e-3, 128: 1e-3, 256: 5e-4, 512: 2.5e-4}
    for width, peak in widths.items():
        sized = shape + [f"model.hidden_size={width}", f"model.embedding_size={width}"]
        cfg = load_config("cpu", sized)
        assert peak_lr(cfg) == pytest.approx(peak)
        assert learning_rate(cfg.train.warmup_steps, cfg) == pytest.approx(peak * (1 - 200 / 9000))
        assert build_optimizer(nn.Linear(2, 2), cfg, torch.device("cpu")).param_groups[0]["lr"] == pytest.approx(peak)
        assert peak_lr(load_config("cpu", sized + ["train.lr_width=null"])) == 1e-3  # the rule switched off
    assert peak_lr(load_config("small")) == 5e-4 and load_config("small").train.lr_width is None
    assert peak_lr(load_config("small", ["model.hidden_size=512"])) == 5e-4


def test_a_run_trains_at_the_width_rules_peak_and_records_it(tmp_path):
    sets = ["train.batch_size=4", "train.max_steps=3", "train.log_every=1", "train.eval_batches=1"]
    cfg = load_config("tiny", sets + ["train.precision=fp32", "train.warmup_steps=0", "train.lr_width=16"])
    pretrain(cfg, tmp_path / "run", device="cpu")
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["peak_lr"] == pytest.approx(cfg.train.lr * 16 / cfg.model.hidden_size)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["lr"] for r in rows if "lr" in r]
    assert lrs and lrs == [learning_rate(r["step"] - 1, cfg) for r in rows if "lr" in r]
    assert lrs[0] == pytest.approx(run["peak_lr"])
