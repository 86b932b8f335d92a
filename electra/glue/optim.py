"""The fine-tuning optimizer: layer-wise learning rates over the pretraining optimizers of electra/training/optim.py.

OFF fine-tunes with its pretraining optimizer and schedule (google-research/electra model/optimization.py
create_optimizer: AdamWeightDecayOptimizer, polynomial decay times warmup, clip_by_global_norm 1.0), each variable
at lr * decay ** k, with k its distance below the head. The three conventions differ only in k (L layers, layer
i counted from 0 at the bottom; `embeddings_project` sits with the embeddings, as in OFF):

    convention   head   layer i        embeddings
    paper        0      L - i          L + 1        (the paper's intent: top layer lr*d)
    original     0      L + 1 - i      L + 2        (OFF's code, _get_layer_lrs: task_specific/ at depth L + 2,
                                                     layer i at i + 1, embeddings at 0; google-research/electra#51)
    study        0      L - 1 - i      L - 1        (the study: top layer lr, embeddings share layer 0's rate)
"""

from __future__ import annotations

import re
import typing

import torch
from torch import nn

from electra.config import DepthConvention, FinetuneConfig
from electra.training.optim import AdamNoBiasCorrection, scheduled_lr

CONVENTIONS = typing.get_args(DepthConvention)
_LAYER = re.compile(r"^electra\.encoder\.layer\.(\d+)\.")
BETAS, EPS = (0.9, 0.999), 1e-6  # OFF AdamWeightDecayOptimizer (create_optimizer passes these)


def depth_exponent(name: str, num_layers: int, convention: str) -> int:
    """k in lr * decay**k for the parameter `name` of a GlueModel."""
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown layer-decay convention {convention!r}: expected one of {CONVENTIONS}")
    L = num_layers
    if name.startswith(("electra.embeddings.", "electra.embeddings_project.")):
        return {"paper": L + 1, "original": L + 2, "study": L - 1}[convention]
    match = _LAYER.match(name)
    if match:
        return L - int(match.group(1)) + {"paper": 0, "original": 1, "study": -1}[convention]
    if name.startswith("electra."):
        raise ValueError(f"parameter {name!r}: no depth defined for it")
    return 0  # the task head


def no_weight_decay(name: str) -> bool:
    """LayerNorm parameters and biases (OFF's exclude_from_weight_decay = ["LayerNorm", "layer_norm", "bias"])."""
    return "LayerNorm" in name or "layer_norm" in name or name.endswith("bias")


def param_groups(
    model: nn.Module,
    lr: float,
    layer_decay: float,
    num_layers: int,
    convention: str = "original",
    weight_decay: float = 0.01,
    decay_norm_and_bias: bool = False,
) -> list[dict]:
    """One optimizer group per (depth, weight decay on/off); each keeps its peak lr as `base_lr`."""
    groups: dict[tuple[int, bool], dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        k = depth_exponent(name, num_layers, convention)
        decayed = decay_norm_and_bias or not no_weight_decay(name)
        group = groups.setdefault(
            (k, decayed),
            {
                "params": [],
                "names": [],
                "depth": k,
                "base_lr": lr * layer_decay**k,
                "lr": lr * layer_decay**k,
                "weight_decay": weight_decay if decayed else 0.0,
            },
        )
        group["params"].append(p)
        group["names"].append(name)
    return [groups[key] for key in sorted(groups)]


def build_optimizer(model: nn.Module, cfg: FinetuneConfig, num_layers: int) -> torch.optim.Optimizer:
    """The recipe's optimizer over layer-wise groups: Adam without bias correction (OFF) or AdamW (the study)."""
    groups = param_groups(
        model, cfg.lr, cfg.layer_decay, num_layers, cfg.depth_convention, cfg.weight_decay, cfg.decay_norm_and_bias
    )
    fused = groups[0]["params"][0].device.type in ("cpu", "cuda")  # one kernel for all tensors
    if cfg.optimizer == "adam":
        return AdamNoBiasCorrection(groups, lr=cfg.lr, betas=BETAS, eps=EPS, fused=fused)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=BETAS, eps=EPS, fused=fused)


def set_learning_rates(optimizer: torch.optim.Optimizer, step: int, total: int, warmup: float, schedule: str) -> None:
    """Each group's lr for the update at `step`: its layer-wise peak `base_lr` times the schedule."""
    for group in optimizer.param_groups:
        group["lr"] = scheduled_lr(group["base_lr"], step, total, warmup, schedule)
