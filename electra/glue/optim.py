"""AdamW with layer-wise learning-rate decay, and the fine-tuning learning-rate schedule (SPEC §5).

Each parameter gets lr * decay ** k, with k its distance below the head. The three conventions differ only in k
(L layers, layer i counted from 0 at the bottom; `embeddings_project` sits with the embeddings, as in OFF):

    convention   head   layer i        embeddings
    paper        0      L - i          L + 1        (the paper's intent: top layer lr*d)
    original     0      L + 1 - i      L + 2        (OFF's code, google-research/electra#51: a removed pooler's step)
    study        0      L - 1 - i      L - 1        (RC: top layer lr, embeddings share layer 0's rate)
"""

from __future__ import annotations

import re

import torch
from torch import nn

CONVENTIONS = ("paper", "original", "study")
_LAYER = re.compile(r"^electra\.encoder\.layer\.(\d+)\.")


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
    convention: str = "paper",
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
        group = groups.setdefault((k, decayed), {
            "params": [], "names": [], "depth": k,
            "base_lr": lr * layer_decay**k, "lr": lr * layer_decay**k,
            "weight_decay": weight_decay if decayed else 0.0,
        })  # fmt: skip
        group["params"].append(p)
        group["names"].append(name)
    return [groups[key] for key in sorted(groups)]


def make_optimizer(groups: list[dict]) -> torch.optim.AdamW:
    # betas and eps of OFF's AdamWeightDecayOptimizer (0.9, 0.999, 1e-6); fused on CPU and CUDA: one kernel
    fused = groups[0]["params"][0].device.type in ("cpu", "cuda")
    return torch.optim.AdamW(groups, betas=(0.9, 0.999), eps=1e-6, fused=fused)


def lr_factor(step: int, total_steps: int, warmup_steps: int) -> float:
    """Multiplier of the peak lr for optimizer step `step` (0-based): linear warmup, then linear decay to 0."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
