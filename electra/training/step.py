"""One optimizer step of pretraining, and what the loop keeps between its log lines.

`train_step` is the step: forward and backward over a step's micro-batches, then clip and update. `electra
pretrain` (electra/training/loop.py) and `electra bench` both run exactly this function. `Window` sums the steps'
statistics on the device between two log lines, so that no step reads a value back to the host.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor, nn

from electra.config import PretrainConfig
from electra.modeling.electra import STAT_NAMES, metrics_from_stats
from electra.modeling.flops import pretrain_step_flops
from electra.modeling.masking import MaskedBatch
from electra.training.checkpoint import RunMeta
from electra.training.optim import clip_and_step

log = logging.getLogger("electra.pretrain")


class NonFiniteError(RuntimeError):
    """Too many optimizer steps in a row had a non-finite loss or gradient (train.max_nonfinite)."""


@dataclass
class StepOutput:
    loss: Tensor
    """The step's loss on this process (its micro-batches' shares summed), detached."""
    stats: Tensor
    """(len(STAT_NAMES),) summed counts of this process's micro-batches (see model.STAT_NAMES)."""
    grad_norm: Tensor
    skipped: Tensor
    """0-dim bool: the update was skipped (non-finite loss or gradients)."""
    backoff: Tensor | None = None
    """0-dim bool: of those, a skip where fp16's GradScaler backed off its loss scale (scaled gradients overflowed,
    as expected now and then): counted apart, not toward train.max_nonfinite. None: no scaler."""


MIN_LOSS_SCALE = 1.0
"""A skip in fp16 while the loss scale is at least this is the scaler finding its scale; below it (16 back-offs
in a row from the default 2**16) the loss itself is not finite, and skips count as non-finite steps."""


def loss_scale(scaler: torch.amp.GradScaler) -> Tensor | None:
    """The fp16 loss scale as a device tensor (a copy: `update` changes it in place), or None without a scaler.
    GradScaler's own `get_scale()` reads it to the host, a sync every step; its `_scale` tensor does not."""
    scale = getattr(scaler, "_scale", None) if scaler.is_enabled() else None
    return None if scale is None else scale.detach().clone()


def model_mask(batch: dict) -> Tensor | None:
    """The attention mask the model gets: None for a batch without padding (`no_padding`, a host bool set when the
    batch was built), so that SDPA may pick its flash kernel, which takes no explicit mask; the attention is the
    same either way (tests/training/test_gpu_paths.py)."""
    return None if batch.get("no_padding") else batch["attention_mask"]


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    params: list[Tensor],
    batches: list[dict[str, Tensor]],
    masked: list[MaskedBatch],
    world: int,
    autocast: contextlib.AbstractContextManager,
    grad_clip: float,
) -> StepOutput:
    """Forward and backward over the micro-batches of one step, then clip and update (`electra pretrain` and
    `electra bench` both run exactly this). No host-device sync: a non-finite step is skipped on the device."""
    # the global target counts of this optimizer step, so that every micro-batch's loss is a share of it
    counts = torch.stack([sum(m.weights.sum() for m in masked), sum(m.disc_mask.sum() for m in masked)]).float()
    if world > 1:
        dist.all_reduce(counts)
    mlm_norm, disc_norm = counts[0].clamp(min=1), counts[1].clamp(min=1)
    stats = torch.zeros(len(STAT_NAMES), device=counts.device)
    loss = torch.zeros((), device=counts.device)
    for i, (b, m) in enumerate(zip(batches, masked, strict=True)):
        sync = world == 1 or i == len(batches) - 1  # DDP all-reduces gradients after the last micro-batch only
        with contextlib.nullcontext() if sync else model.no_sync(), autocast:
            out = model(b["input_ids"], model_mask(b), b["token_type_ids"], m, mlm_norm, disc_norm)
        scaler.scale(out.loss * world).backward()  # DDP averages over ranks; our losses are global shares
        stats += torch.stack([out.stats[k] for k in STAT_NAMES])
        loss += out.loss.detach()
    scale = loss_scale(scaler)
    grad_norm, skipped = clip_and_step(optimizer, scaler, params, grad_clip)
    backoff = None if scale is None else skipped & (scale >= MIN_LOSS_SCALE)  # same on every rank: global grads
    return StepOutput(loss, stats, grad_norm, skipped, backoff)


def sampled_with(meta: RunMeta) -> dict[str, float]:
    """What the generator sampled with at the last update (the loop's set_sampling_schedules records it in `meta`):
    `temperature` and `uniform_replace`, each where it applies."""
    said = {"temperature": meta.temperature, "uniform_replace": meta.uniform_replace}
    return {k: v for k, v in said.items() if v is not None}


class Window:
    """What happened since the last log line, summed on the device (read only when a line is written)."""

    def __init__(self, device: torch.device, nonfinite: int, streak: int, backoffs: int = 0):
        self.stats = torch.zeros(len(STAT_NAMES), device=device)
        self.norm_sum = torch.zeros((), device=device)  # gradient norms of the applied updates
        self.updates = torch.zeros((), device=device)
        self.nonfinite = torch.tensor(nonfinite, device=device)  # skipped updates in the whole run
        self.streak = torch.tensor(streak, device=device)  # ... and in a row, up to now
        self.backoffs = torch.tensor(backoffs, device=device)  # fp16 loss-scale back-offs (skipped, not counted)
        self.steps, self.start = 0, time.perf_counter()

    def state(self) -> dict[str, Tensor]:
        """The open window's sums, saved with a checkpoint: a run resumed there logs the lines it would have."""
        stats = dict(zip(STAT_NAMES, self.stats.detach().cpu().clone(), strict=True))
        return {
            **stats,
            "norm_sum": self.norm_sum.detach().cpu().clone(),
            "updates": self.updates.detach().cpu().clone(),
        }

    def restore(self, state: dict[str, Tensor]) -> None:
        """By name: a sum this code keeps and the checkpoint lacks (written by an older version) starts at 0."""
        for i, name in enumerate(STAT_NAMES):
            if name in state:
                self.stats[i] = state[name]
        for name in ("norm_sum", "updates"):
            getattr(self, name).copy_(state[name])

    def add(self, out: StepOutput) -> None:
        bad = out.skipped  # a skipped update adds nothing but its count: no NaN in the logged metrics
        nonfinite = bad if out.backoff is None else bad & ~out.backoff
        self.nonfinite += nonfinite
        self.streak.add_(1).mul_(nonfinite)
        if out.backoff is not None:
            self.backoffs += out.backoff
        self.stats += torch.where(bad, 0.0, out.stats)
        self.norm_sum += torch.where(bad, 0.0, out.grad_norm)
        self.updates += ~bad
        self.steps += 1

    def settle_nonfinite(self, meta: RunMeta, limit: int, done: int, run_dir: Path) -> None:
        """Read the skip counts into `meta` (a host sync); stop the run when `limit` came in a row."""
        total, in_a_row, backoffs = torch.stack([self.nonfinite, self.streak, self.backoffs]).tolist()
        meta.scaler_backoffs = int(backoffs)
        if total > meta.nonfinite_skipped:
            log.warning(
                "%d updates skipped up to step %d: non-finite loss or gradients (%d in a row now)",
                total - meta.nonfinite_skipped,
                done,
                in_a_row,
            )
        meta.nonfinite_skipped, meta.consecutive_nonfinite = int(total), int(in_a_row)
        if in_a_row >= limit:
            raise NonFiniteError(
                f"stopped at step {done}: the last {in_a_row} steps had non-finite loss or gradients (limit "
                f"{limit}); the last checkpoint in {run_dir / 'checkpoints'} is intact (lower the learning rate, or "
                "use bf16/fp32)"
            )

    def row(self, cfg: PretrainConfig, world: int, meta: RunMeta, done: int, lr: float) -> dict:
        """The metrics line for steps up to `done` (global sums over ranks), then start a new window."""
        stats = self.stats.clone()
        if world > 1:
            dist.all_reduce(stats)
        metrics = metrics_from_stats(dict(zip(STAT_NAMES, stats.tolist(), strict=True)))
        t, elapsed = cfg.train, time.perf_counter() - self.start
        row = {
            "step": done,
            "lr": lr,
            **sampled_with(meta),
            "grad_norm": (self.norm_sum / self.updates.clamp(min=1)).item(),
            **metrics,
            "tokens_per_s": self.steps * t.batch_size * cfg.data.seq_len / elapsed,
            "samples": meta.samples,
            "flops": pretrain_step_flops(cfg, t.batch_size, cfg.data.seq_len) * done,
            "nonfinite_skipped": meta.nonfinite_skipped,
            "scaler_backoffs": meta.scaler_backoffs,
        }
        self.stats.zero_(), self.norm_sum.zero_(), self.updates.zero_()
        self.steps, self.start = 0, time.perf_counter()
        return row
