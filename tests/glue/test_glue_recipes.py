"""The fine-tuning recipes: what each one sets, the strict loading of recipes and overrides, one schedule shared
with pretraining, and OFF's update (google-research/electra model/optimization.py) against a hand computation."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
import yaml

from electra.config import (
    RECIPE_DIR,
    ConfigError,
    FinetuneConfig,
    PretrainConfig,
    TrainConfig,
    load_finetune_config,
    recipe_names,
)
from electra.glue.finetune import train_step
from electra.glue.heads import GlueModel
from electra.glue.optim import build_optimizer, set_learning_rates
from electra.glue.tasks import TASKS
from electra.modeling.electra import ElectraModel
from electra.training.optim import learning_rate, scheduled_lr
from tests.helpers import glue_model_config

# Each recipe's values, written out (docs/glue.md has the table and the OFF lines behind each value).
RECIPES = {
    "off": dict(
        head="cls-linear",
        head_init="glorot_uniform",
        optimizer="adam",
        lr=3e-4,
        schedule="original",
        warmup_fraction=0.1,
        layer_decay=0.8,
        depth_convention="original",
        weight_decay=0.01,
        decay_norm_and_bias=False,
        batch_size=32,
        epochs=None,
        grad_clip=1.0,
        loss_reduction="sum",
        max_length=128,
        scale_targets=True,
        swap_pairs=True,
        precision="fp32",
    ),
    "paper": dict(
        head="cls-linear",
        head_init="normal",
        optimizer="adamw",
        lr=3e-4,
        schedule="study",
        warmup_fraction=0.1,
        layer_decay=0.8,
        depth_convention="paper",
        weight_decay=0.01,
        decay_norm_and_bias=False,
        batch_size=32,
        epochs=None,
        grad_clip=1.0,
        loss_reduction="mean",
        max_length=128,
        scale_targets=True,
        swap_pairs=False,
        precision="auto",
    ),
    "study": dict(
        head="mean-mlp",
        head_init="normal",
        optimizer="adamw",
        lr=3e-4,
        schedule="study",
        warmup_fraction=0.1,
        layer_decay=0.8,
        depth_convention="study",
        weight_decay=0.01,
        decay_norm_and_bias=False,
        batch_size=32,
        epochs=None,
        grad_clip=1.0,
        loss_reduction="mean",
        max_length=128,
        scale_targets=False,
        swap_pairs=False,
        precision="auto",
    ),
    # ours, for the `cpu` preset's 2-layer bodies: OFF's recipe at lr 1e-3 (docs/glue.md)
    "cpu": dict(
        head="cls-linear",
        head_init="glorot_uniform",
        optimizer="adam",
        lr=1e-3,
        schedule="original",
        warmup_fraction=0.1,
        layer_decay=0.8,
        depth_convention="original",
        weight_decay=0.01,
        decay_norm_and_bias=False,
        batch_size=32,
        epochs=None,
        grad_clip=1.0,
        loss_reduction="sum",
        max_length=128,
        scale_targets=True,
        swap_pairs=True,
        precision="fp32",
    ),
}


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_each_recipe_sets_what_it_claims_and_holds_only_differences(name):
    cfg = load_finetune_config(name)
    assert {k: getattr(cfg, k) for k in RECIPES[name]} == RECIPES[name]
    raw = yaml.safe_load((RECIPE_DIR / f"{name}.yaml").read_text()) or {}
    defaults = FinetuneConfig()
    assert all(getattr(defaults, k) != v for k, v in raw.items()), "a recipe repeats a default"
    assert (raw == {}) == (name == "off")  # OFF's recipe is the dataclass defaults
    assert recipe_names() == sorted(RECIPES)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["finetune.lrr=1"], "override 'finetune.lrr=1': unknown key 'finetune.lrr'"),
        (["finetune.lr=fast"], "finetune.lr must be float, got 'fast'"),
        (["finetune.optimizer=sgd"], "finetune.optimizer must be one of ['adam', 'adamw']"),
        (["finetune.batch_size=2.5"], "finetune.batch_size must be int, got 2.5"),
        (["finetune.swap_pairs=maybe"], "finetune.swap_pairs must be bool"),
        (["lr=1e-4"], "expected finetune.KEY=VALUE"),
        (["finetune.lr=-1e-4"], "finetune.lr must be > 0"),
        (["finetune.warmup_fraction=1.0"], "finetune.warmup_fraction must be in [0, 1)"),
        (["finetune.warmup_fraction=-0.1"], "finetune.warmup_fraction must be in [0, 1)"),
        (["finetune.layer_decay=0"], "finetune.layer_decay must be in (0, 1]"),
        (["finetune.layer_decay=1.5"], "finetune.layer_decay must be in (0, 1]"),
        (["finetune.batch_size=0"], "finetune.batch_size must be >= 1"),
        (["finetune.eval_batch_size=0"], "finetune.eval_batch_size must be >= 1"),
        (["finetune.epochs=0"], "finetune.epochs must be >= 1"),
        (["finetune.weight_decay=-0.01"], "finetune.weight_decay must be >= 0"),
        (["finetune.grad_clip=0"], "finetune.grad_clip must be > 0"),
        (["finetune.max_length=4"], "finetune.max_length must be >= 5"),
    ],
)
def test_overrides_are_strict_and_out_of_range_values_refused(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_finetune_config("off", overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_overrides_apply_after_the_recipe(tmp_path):
    cfg = load_finetune_config("study", ["finetune.lr=1e-4", "finetune.epochs=null", "finetune.swap_pairs=true"])
    assert (cfg.lr, cfg.epochs, cfg.swap_pairs, cfg.head) == (1e-4, None, True, "mean-mlp")
    own = tmp_path / "mine.yaml"
    own.write_text("optimizer: adamw\nhed: x\n")
    with pytest.raises(ConfigError, match="mine.yaml: unknown key 'finetune.hed'"):
        load_finetune_config(own)
    with pytest.raises(ConfigError, match=r"unknown recipe 'nope': not a file, and recipes are \['cpu', 'off'"):
        load_finetune_config("nope")


@pytest.mark.parametrize("schedule", ["original", "study"])
def test_pretraining_and_fine_tuning_share_one_schedule(schedule):
    """Pretraining's learning rate is the shared function, bit for bit."""
    cfg = PretrainConfig(train=TrainConfig(lr=5e-4, max_steps=1000, warmup_steps=100, schedule=schedule))
    for step in [0, 1, 50, 99, 100, 101, 500, 999, 1000]:
        assert learning_rate(step, cfg) == scheduled_lr(5e-4, step, 1000, 100, schedule)


def _off_depth(name: str, L: int) -> int:
    """OFF's _get_layer_lrs: lr * d ** (L + 2 - depth), depth 0 for the embeddings (and embeddings_project), i + 1
    for layer i, L + 2 for the task head."""
    if name.startswith("classifier."):
        return 0
    if name.startswith(("electra.embeddings.", "electra.embeddings_project.")):
        return L + 2
    return L + 1 - int(name.split(".")[3])


def test_off_update_matches_the_hand_computed_formula():
    """Three steps of OFF's recipe on a tiny model, every parameter against OFF's update computed by hand:
    lr = base * d ** depth * (1 - step / total) * min(1, step / warmup), gradients of the batch's summed loss
    clipped to a global norm, m and v without bias correction, decoupled weight decay on the decayed group only.
    The clip is 10 rather than OFF's 1 so that it tells the sum from the mean: the summed loss's gradient (norm
    18-33 here) is clipped, the mean's (4x smaller) would not be; Adam is blind to the scale otherwise."""
    mcfg = dataclasses.replace(glue_model_config(layers=2), dropout=0.0, attention_dropout=0.0)  # deterministic
    cfg = load_finetune_config("off", ["finetune.lr=1e-2", "finetune.warmup_fraction=0.2", "finetune.grad_clip=10"])
    task, L, total = TASKS["rte"], mcfg.num_layers, 10
    warmup = cfg.warmup_fraction * total
    torch.manual_seed(0)
    model = GlueModel(ElectraModel(mcfg), mcfg, cfg.head, task.num_outputs, cfg.head_init)
    optimizer = build_optimizer(model, cfg, L)
    ids = torch.randint(5, mcfg.vocab_size, (4, 12))
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    batch = {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": (torch.arange(12) >= 6).long().expand(4, 12),
        "labels": torch.tensor([0, 1, 1, 0]),
    }
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    initial = {n: p.detach().clone() for n, p in zip(names, params, strict=True)}
    expected = {n: p.double() for n, p in initial.items()}
    m = {n: torch.zeros_like(p) for n, p in expected.items()}
    v = {n: torch.zeros_like(p) for n, p in expected.items()}
    for step in range(3):
        # the gradient this step sees: same model, same batch, no dropout, so the same float32 numbers
        logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        grads = torch.autograd.grad(F.cross_entropy(logits, batch["labels"], reduction="sum"), params)
        norm = sum(float(g.double().pow(2).sum()) for g in grads) ** 0.5
        clip = min(1.0, 10 / (norm + 1e-6))  # clip_by_global_norm (torch adds 1e-6 to the norm)
        schedule = max(0.0, 1 - step / total) * min(1.0, step / warmup)  # 0 at step 0: moments move, weights not
        set_learning_rates(optimizer, step, total, warmup, cfg.schedule)
        train_step(model, optimizer, batch, task, cfg)
        for name, g in zip(names, grads, strict=True):
            g = g.double() * clip
            lr = 1e-2 * 0.8 ** _off_depth(name, L) * schedule
            m[name] = 0.9 * m[name] + 0.1 * g
            v[name] = 0.999 * v[name] + 0.001 * g * g
            decay = 0.0 if ("LayerNorm" in name or name.endswith("bias")) else 0.01
            expected[name] = expected[name] - lr * (m[name] / (v[name].sqrt() + 1e-6) + decay * expected[name])
        for name, p in zip(names, params, strict=True):
            torch.testing.assert_close(p.detach().double(), expected[name], rtol=0, atol=1e-6, msg=f"{name} {step}")
    assert norm > 10 > norm / 4  # the summed loss's gradient was clipped, the mean's would not have been
    assert all(not torch.equal(p.detach(), initial[n]) for n, p in zip(names, params, strict=True))  # all moved
