"""Shared by the tests/test_reliability_*.py files: dying at a chosen moment, and comparing what two runs left."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file

from electra.checkpoint import list_checkpoints
from electra.faults import ENV

ROOT = Path(__file__).resolve().parents[1]
WALL_CLOCK_FIELDS = {"tokens_per_s"}
"""Measured time: differs between any two runs, so compared runs must agree on every other field."""


def die_at(failpoint: str | None, target: Callable, *args, before: Callable[[], None] | None = None,
           timeout: float = 300, **kwargs) -> int:  # fmt: skip
    """Run `target(*args, **kwargs)` in a forked child armed with ELECTRA_FAILPOINT=`failpoint` (after `before()`,
    e.g. a monkeypatch that only the child sees); returns its exit code: -9 when the failpoint killed it."""

    def child() -> None:
        if failpoint is not None:
            os.environ[ENV] = failpoint
        if before is not None:
            before()
        target(*args, **kwargs)

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()
        raise TimeoutError(f"{failpoint}: the child did not end within {timeout} s")
    return proc.exitcode


KILLED = -signal.SIGKILL


def metric_rows(run: Path) -> list[dict]:
    """metrics.jsonl without the wall-clock fields; every line must parse (no partial line)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in WALL_CLOCK_FIELDS} for row in rows]


def final_state(run: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """The newest checkpoint's weights and optimizer state."""
    ckpt = list_checkpoints(run)[-1]
    return load_file(ckpt / "model.safetensors"), torch.load(ckpt / "optimizer.pt", weights_only=True)


def assert_same_state(a: Path, b: Path) -> int:
    """Weights and optimizer state of the newest checkpoints of runs `a` and `b` are bit-identical; returns the
    number of tensors compared."""
    (wa, oa), (wb, ob) = final_state(a), final_state(b)
    assert wa.keys() == wb.keys()
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name
    assert oa["param_groups"] == ob["param_groups"]
    assert oa["state"].keys() == ob["state"].keys()
    compared = len(wa)
    for i, state in oa["state"].items():
        for key, value in state.items():
            other = ob["state"][i][key]
            assert torch.equal(value, other) if torch.is_tensor(value) else value == other, (i, key)
            compared += 1
    return compared
