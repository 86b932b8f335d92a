"""Tests that fail when the numerics break: DDP with gradient accumulation against one process over the same
global batch, fp32 sampling and fp32 rotary positions under bf16 autocast."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from electra.modeling import electra as electra_model
from electra.modeling.electra import RotaryPositions, rotate
from electra.training.loop import wrap_ddp
from electra.training.step import train_step
from tests.helpers import masked, random_batch, spawned_gloo_rank, tiny_model

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
    with spawned_gloo_rank(rank, world, init_file):
        torch.manual_seed(0)
        raw = tiny_model().train()
        model = wrap_ddp(raw, torch.device("cpu"))
        per_rank = MICRO // world
        _steps(model, list(raw.parameters()), _micro_batches()[rank * per_rank : (rank + 1) * per_rank], world)
        if rank == 0:
            torch.save(raw.state_dict(), out)


@pytest.mark.slow
def test_two_ranks_accumulating_equal_one_process_over_the_same_global_batch(tmp_path):
    """Each rank accumulates two micro-batches, DDP all-reduces after the last: the parameters after two steps
    equal one process's over all four micro-batches. All-reducing after the first micro-batch instead (the
    no-sync condition wrong) leaves the second's gradient local to its rank: off by 2e-2 here (1e-7 right)."""
    mp.start_processes(
        _rank, args=(2, str(tmp_path / "init"), str(tmp_path / "ddp.pt")), nprocs=2, start_method="spawn"
    )
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
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)  # torch deprecated broadcast_buffers for this
            ddp = wrap_ddp(tiny_model(), torch.device("cpu"))
        assert ddp.will_sync_module_buffers() is False
    finally:
        dist.destroy_process_group()


# -- fp32 where bf16 autocast would round ----------------------------------------------------------------------


def test_sampling_under_bf16_autocast_draws_what_fp32_draws_from_the_same_hidden_states(monkeypatch):
    """The generator's head and the sampler run in fp32 inside `forward` under bf16 autocast: the replacements
    equal those drawn, with the same keys, from fp32 logits of the generator's (bf16-autocast) hidden states.
    Logits rounded to bf16 (0.5 apart near 100) move some of the draws."""
    torch.manual_seed(0)
    model = tiny_model().train()
    with torch.no_grad():
        model.generator.lm_head_bias.copy_(100 + torch.randn(97))  # logits near 100: bf16 rounds them by up to 0.25
    hidden, drawn = [], []
    model.generator.electra.register_forward_hook(lambda mod, args, out: hidden.append(out))
    real = electra_model.sample_replacements
    monkeypatch.setattr(electra_model, "sample_replacements", lambda *a, **k: drawn.append(real(*a, **k)) or drawn[-1])
    ids, attention, types = random_batch(B=16, T=32, seed=3)
    m = masked(ids, attention, seed=3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(ids, attention.bool(), types, m)
    (h,), (sampled,) = hidden, drawn
    with torch.no_grad():
        h = h.gather(1, m.positions[..., None].expand(-1, -1, h.shape[-1])).float()
        logits = model.generator.logits(h, model.embeddings.word_embeddings.weight)
    obj = model.objective
    expected = real(logits, m.targets, m.keys, obj.temperature, obj.disallow_correct, obj.sampler)
    assert sampled.numel() == 64 and torch.equal(sampled, expected)


def test_rotary_positions_rotate_in_fp32_under_bf16_autocast():
    """bf16 queries rotated with the model's tables under autocast equal the fp32 rotation of the same values,
    rounded once to bf16 at the end (RoFormer's order); bf16 tables and products miss at many positions."""
    tables = RotaryPositions(64, 512)(512)
    q = torch.randn(2, 4, 512, 64, generator=torch.Generator().manual_seed(0)).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = rotate(q, tables)
    cos, sin = tables
    qf = q.float()
    expected = (qf * cos + torch.stack((-qf[..., 1::2], qf[..., 0::2]), -1).flatten(-2) * sin).bfloat16()
    assert got.dtype == torch.bfloat16 and torch.equal(got, expected)
