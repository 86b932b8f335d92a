"""Optimizers and learning-rate schedules of the two recipes, for pretraining and GLUE fine-tuning alike.

OFF: Adam without bias correction, decoupled weight decay, lr = base * linear decay from step 0 * linear warmup.
RC (the study): AdamW with bias correction, lr = linear warmup, then linear decay to 0.
Both: epsilon 1e-6, weight decay 0.01 on everything but LayerNorm parameters and biases. OFF uses the same
optimizer and schedule for fine-tuning (google-research/electra model/optimization.py create_optimizer), with
layer-wise learning rates (electra/glue/optim.py).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from electra.config import PretrainConfig

NO_DECAY = ("LayerNorm", "layer_norm", "bias")  # OFF optimization.py exclude_from_weight_decay


def param_groups(model: nn.Module, weight_decay: float, generator_lr_scale: float = 1.0) -> list[dict]:
    """Decayed weights, and LayerNorm parameters and biases without decay; with a generator lr scale other than
    1, the generator's parameters in two more groups whose `lr_scale` multiplies the learning rate."""
    groups: dict[tuple[bool, bool], list] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            scaled = generator_lr_scale != 1.0 and name.startswith("generator.")
            groups.setdefault((scaled, not any(key in name for key in NO_DECAY)), []).append(p)
    return [
        {
            "params": groups[key],
            "weight_decay": weight_decay if key[1] else 0.0,
            "lr_scale": generator_lr_scale if key[0] else 1.0,
        }
        for key in ((False, True), (False, False), (True, True), (True, False))
        if key in groups
    ]


class AdamNoBiasCorrection(torch.optim.AdamW):
    """OFF's AdamWeightDecayOptimizer: Adam whose moments are used without bias correction, and decoupled decay.

        m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2;   p -= lr * (m / (sqrt(v) + eps) + wd * p)

    Without bias correction the first steps are larger than bias-corrected Adam's, not smaller: m and v both start
    at 0, so the update m / sqrt(v) carries the factor (1 - b1**t) / sqrt(1 - b2**t): 6.5 at step 10, 3.2 at 100,
    2.35 at 200, 1.26 at 1000 and 1.0 only past ~5000 (b1 0.9, b2 0.999). OFF's 10,000-step warmup hides this; a
    warmup of a few hundred steps does not (with 200, the `cpu` preset's early peak is ~2.3x its lr).

    Built on PyTorch's AdamW with every parameter's step count held at 2**30: both bias corrections
    1 - beta**step are then exactly 1 (the powers underflow to 0), and the fp32 counter stays there because
    2**30 + 1 rounds back to 2**30. So OFF's update gets PyTorch's fused kernel (one kernel for all tensors on CPU
    and CUDA, several times faster than the multi-tensor version it replaces:
    docs/benchmarks.md) and the fused kernel's on-device skip of a non-finite step (`step_unless`).
    """

    STEP = float(2**30)

    def __init__(
        self,
        params,
        lr: float,
        betas=(0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        fused: bool | None = None,
    ):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused)
        self._hold_step_counts()

    def load_state_dict(self, state_dict: dict) -> None:
        # the earlier multi-tensor version of this optimizer saved the two moments only
        moments = {k: {"step": torch.tensor(self.STEP), **v} for k, v in state_dict["state"].items()}
        super().load_state_dict({**state_dict, "state": moments})
        for group in self.param_groups:  # how to compute is this process's choice
            group.update({k: self.defaults[k] for k in ("fused", "foreach", "capturable")})
        self._hold_step_counts()

    @torch.no_grad()
    def _hold_step_counts(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                on_device = group["fused"] or group["capturable"]  # where PyTorch's AdamW keeps the count
                state["step"] = torch.tensor(self.STEP, dtype=torch.float32, device=p.device if on_device else None)
                for moment in ("exp_avg", "exp_avg_sq"):
                    if moment not in state:
                        state[moment] = torch.zeros_like(p, memory_format=torch.preserve_format)


def build_optimizer(model: nn.Module, cfg: PretrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """The recipe's optimizer at the schedule's peak (the loop sets each step's rate: set_learning_rate)."""
    t, lr = cfg.train, peak_lr(cfg)
    groups = param_groups(model, t.weight_decay, t.generator_lr_scale)
    betas = (t.beta1, t.beta2)
    # Fused on CPU and CUDA: one kernel for all tensors, and an update that can be skipped without a host sync.
    fused = device.type in ("cpu", "cuda")
    if t.optimizer == "adam":
        return AdamNoBiasCorrection(groups, lr=lr, betas=betas, eps=t.eps, fused=fused)
    # PyTorch's AdamW is the study's optimizer exactly (decoupled decay, bias correction).
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=t.eps, fused=fused)


def step_unless(optimizer: torch.optim.Optimizer, skip: torch.Tensor) -> None:
    """`optimizer.step()`, except where the 0-dim bool tensor `skip` is true: then parameters, moments and step
    counts stay exactly as they were. A fused Adam decides on the device (no host sync); others read `skip`."""
    if all(group.get("fused") for group in optimizer.param_groups):
        # the attributes through which GradScaler hands PyTorch's fused Adam kernels their skip flag
        optimizer.grad_scale, optimizer.found_inf = None, skip.float()
        try:
            optimizer.step()
        finally:
            del optimizer.grad_scale, optimizer.found_inf
    elif not bool(skip):  # a host sync
        optimizer.step()


def clip_and_step(
    optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None, params: list[torch.Tensor], max_norm: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The end of a training step: unscale (fp16), clip the global gradient norm, update unless that norm is
    non-finite, then clear the gradients. Returns (gradient norm, skipped) as device tensors: no host sync."""
    if scaler is not None:
        scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm).detach()
    skipped = ~torch.isfinite(grad_norm)
    step_unless(optimizer, skipped)
    if scaler is not None:
        scaler.update()  # fp16: backs off the loss scale after an overflow (recorded by unscale_)
    optimizer.zero_grad(set_to_none=True)
    return grad_norm, skipped


def scheduled_lr(base: float, step: int, total: int, warmup: float, schedule: Literal["original", "study"]) -> float:
    """The learning rate for the update made at `step` (0-based) of `total`, peak `base`, for either schedule.

    Pretraining (`learning_rate`) and GLUE fine-tuning (per parameter group) both use it; `warmup` may be
    fractional, as OFF's fine-tuning warmup (num_train_steps * warmup_proportion) is.
    """
    if schedule == "original":
        # OFF optimization.py: polynomial_decay(power=1) from step 0 to 0 at the end, times min(1, step / warmup).
        decay = max(0.0, 1.0 - step / total)
        return base * decay * (min(1.0, step / warmup) if warmup > 0 else 1.0)
    # the study (transformers get_linear_schedule_with_warmup): up to base over warmup, then down to 0.
    if step < warmup:
        return base * step / warmup
    return base * max(0.0, (total - step) / max(1, total - warmup))


def peak_lr(cfg: PretrainConfig) -> float:
    """The schedule's peak: train.lr, divided above train.lr_width by how many times wider the model is.

    One over the width, as Adam's step for a hidden matrix should shrink when its fan-in grows (Yang et al. 2022,
    muP); it also gives OFF's ELECTRA-Small 5e-4 at 256 from the `cpu` preset's 1e-3 at 128. Measured on a CPU at
    4 x 256: at 1e-3 the masked LM stayed on the token-frequency plateau for 4842 steps, at 5e-4 it left it by step
    500 (docs/research-log.md)."""
    t, width = cfg.train, cfg.model.hidden_size
    if t.lr_width is None or width <= t.lr_width:
        return t.lr
    return t.lr * t.lr_width / width


def learning_rate(step: int, cfg: PretrainConfig) -> float:
    """The pretraining learning rate for the update made at `step` (0-based)."""
    t = cfg.train
    return scheduled_lr(peak_lr(cfg), step, t.decay_steps or t.max_steps, t.warmup_steps, t.schedule)


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)
