"""Determinism on CPU: the same seed gives the same metrics (every field but the wall-clock tokens_per_s) and the
same parameters and optimizer state, bit for bit, in one process and with two gloo processes; another seed gives
other ones. Dropout stays on, so the RNG streams are part of what is compared."""

from __future__ import annotations

import pytest
import torch

from electra.config import load_config
from electra.training.loop import pretrain
from tests.helpers import assert_same_state, final_state, metric_rows, torchrun

RUN = [
    "train.batch_size=4",
    "train.max_steps=6",
    "train.save_every=3",
    "train.eval_every=3",
    "train.log_every=1",
    "train.eval_batches=1",
    "train.warmup_steps=2",
]


def _differ(a, b) -> bool:
    (wa, _), (wb, _) = final_state(a), final_state(b)
    return any(not torch.equal(wa[k], wb[k]) for k in wa)


def test_the_same_seed_twice_gives_the_same_run_another_seed_another(tmp_path):
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        pretrain(load_config("tiny", RUN + [f"train.seed={seed}"]), tmp_path / name)
    assert metric_rows(tmp_path / "a") == metric_rows(tmp_path / "b")
    assert assert_same_state(tmp_path / "a", tmp_path / "b") > 0
    assert _differ(tmp_path / "a", tmp_path / "c")
    rows_a, rows_c = metric_rows(tmp_path / "a"), metric_rows(tmp_path / "c")
    assert [r["step"] for r in rows_a] == [r["step"] for r in rows_c] and rows_a != rows_c


def _torchrun(out, seed: int, port: int) -> None:
    args = ["pretrain", "--config", "tiny", "--out", str(out), "--seed", str(seed), *[f"--set={item}" for item in RUN]]
    result = torchrun(2, port, *args, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.slow
def test_two_gloo_processes_twice_give_the_same_run_another_seed_another(tmp_path):
    for name, seed, port in (("a", 0, 29641), ("b", 0, 29642), ("c", 1, 29643)):
        _torchrun(tmp_path / name, seed, port)
    assert metric_rows(tmp_path / "a") == metric_rows(tmp_path / "b")
    assert assert_same_state(tmp_path / "a", tmp_path / "b") > 0
    assert _differ(tmp_path / "a", tmp_path / "c") and metric_rows(tmp_path / "a") != metric_rows(tmp_path / "c")
