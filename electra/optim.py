"""Optimizers and learning-rate schedules of the two recipes (SPEC §4).

OFF: Adam without bias correction, decoupled weight decay, lr = base * linear decay from step 0 * linear warmup.
RC (the study): AdamW with bias correction, lr = linear warmup, then linear decay to 0.
Both: epsilon 1e-6, weight decay 0.01 on everything but LayerNorm parameters and biases.
"""

from __future__ import annotations

import torch
from torch import nn

from electra.config import TrainConfig

NO_DECAY = ("LayerNorm", "layer_norm", "bias")  # OFF optimization.py exclude_from_weight_decay


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed weights, and LayerNorm parameters and biases without decay."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if any(key in name for key in NO_DECAY) else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


class AdamNoBiasCorrection(torch.optim.Optimizer):
    """OFF's AdamWeightDecayOptimizer: Adam whose moments are used without bias correction, and decoupled decay.

        m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2;   p -= lr * (m / (sqrt(v) + eps) + wd * p)

    Without bias correction the first steps are small (m starts at 0); the warmup hides this in OFF's recipe.
    Multi-tensor (`torch._foreach_*`) updates: one kernel per op for all parameters.
    """

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                if not self.state[p]:
                    self.state[p]["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    self.state[p]["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            grads = [p.grad for p in params]
            m = [self.state[p]["exp_avg"] for p in params]
            v = [self.state[p]["exp_avg_sq"] for p in params]
            b1, b2 = group["betas"]
            torch._foreach_lerp_(m, grads, 1 - b1)  # m = b1 m + (1 - b1) g
            torch._foreach_mul_(v, b2)
            torch._foreach_addcmul_(v, grads, grads, value=1 - b2)
            denom = torch._foreach_sqrt(v)
            torch._foreach_add_(denom, group["eps"])
            if group["weight_decay"]:
                torch._foreach_mul_(params, 1 - group["lr"] * group["weight_decay"])
            torch._foreach_addcdiv_(params, m, denom, value=-group["lr"])


def build_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    groups = param_groups(model, cfg.weight_decay)
    betas = (cfg.beta1, cfg.beta2)
    if cfg.optimizer == "adam":
        return AdamNoBiasCorrection(groups, lr=cfg.lr, betas=betas, eps=cfg.eps)
    # PyTorch's AdamW is the study's optimizer exactly (decoupled decay, bias correction). Fused on CPU and CUDA:
    # one kernel for all tensors (ELECTRA-Small on 2 CPU threads: 14 vs 50 ms per step, docs/benchmarks.md).
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=betas, eps=cfg.eps, fused=device.type in ("cpu", "cuda"))


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """The learning rate for the update made at `step` (0-based), for either schedule."""
    base, total, warmup = cfg.lr, cfg.max_steps, cfg.warmup_steps
    if cfg.schedule == "original":
        # OFF optimization.py: polynomial_decay(power=1) from step 0 to 0 at the end, times min(1, step / warmup).
        decay = max(0.0, 1.0 - step / total)
        return base * decay * (min(1.0, step / warmup) if warmup > 0 else 1.0)
    # the study (transformers get_linear_schedule_with_warmup): up to base over warmup, then down to 0.
    if step < warmup:
        return base * step / warmup
    return base * max(0.0, (total - step) / max(1, total - warmup))


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
