"""Tests that fail when the numerics break: DDP with gradient accumulation against one process over the same
global batch, fp32 sampling and fp32 rotary positions under bf16 autocast."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from electra.training.loop import wrap_ddp
from electra.training.step import train_step
from tests.helpers import masked, random_batch, tiny_model

MICRO, B, T = 4, 2, 24  # four micro-batches of two sequences in the global batch


def _micro_batches() -> list[tuple[dict, object]]:
    out = []
    for i in range(MICRO):
        ids, attention, types = random_batch(B=B, T=T, seed=i, pad_from=[T, T - 5])
        batch = {"input_ids": ids, "attention_mask": attention.bool(), "token_type_ids": types}
        out.append((batch, masked(ids, attention, seed=i)))
    return out


def _steps(model: torch.nn.Module, params: list, parts: list, world: int, steps: int = 2) -> None:
    """`steps` SGD steps of `train_step` over the micro-batches `parts` (SGD: the update is the gradient itself)."""
    optimizer = torch.optim.SGD(params, lr=0.5)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    batches, masks = [b for b, _ in parts], [m for _, m in parts]
    for _ in range(steps):
        train_step(model, optimizer, scaler, params, batches, masks, world, contextlib.nullcontext(), 1.0)


def _rank(rank: int, world: int, init_file: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        raw = tiny_model().train()
        model = wrap_ddp(raw, torch.device("cpu"))
        per_rank = MICRO // world
        _steps(model, list(raw.parameters()), _micro_batches()[rank * per_rank : (rank + 1) * per_rank], world)
        if rank == 0:
            torch.save(raw.state_dict(), out)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_accumulating_equal_one_process_over_the_same_global_batch(tmp_path):
    """Each rank accumulates two micro-batches, DDP all-reduces after the last: the parameters after two steps
    equal one process's over all four micro-batches. All-reducing after the first micro-batch instead (the
    no-sync condition wrong) leaves the second's gradient local to its rank: off by 2e-2 here (1e-7 right)."""
    mp.start_processes(_rank, args=(2, str(tmp_path / "init"), str(tmp_path / "ddp.pt")), nprocs=2,
                       start_method="spawn")  # fmt: skip
    torch.manual_seed(0)
    single = tiny_model().train()
    _steps(single, list(single.parameters()), _micro_batches(), world=1)
    ddp = torch.load(tmp_path / "ddp.pt", weights_only=True)
    start = tiny_model_state()
    worst = max((ddp[k] - v).abs().max().item() for k, v in single.state_dict().items())
    moved = max((start[k] - v).abs().max().item() for k, v in single.state_dict().items())
    assert moved > 1e-2  # the steps changed the weights
    assert worst < 1e-6


def tiny_model_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return tiny_model().state_dict()


def test_ddp_does_not_broadcast_buffers(tmp_path):
    """The model has no buffers that training changes (the rotary tables are fixed, the temperature is set from
    the step on every rank alike): DDP's per-forward broadcast of them is a collective for nothing."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        assert wrap_ddp(tiny_model(), torch.device("cpu")).broadcast_buffers is False
    finally:
        dist.destroy_process_group()
