"""A dress rehearsal of a GPU user's first hour, on a CPU: `small` at its real shape (batch 128, length 128, a
30,522-entry vocabulary as OFF's) for a few steps, in fp32 and in bf16 where the CPU has it natively, with
--max-memory-gb forcing accumulation, one held-out evaluation, one checkpoint, a SIGTERM and a resume that ends
bit-identical to the uninterrupted run; then `electra glue` from it with OFF's recipe on two tasks, capped. Every
path of that hour except CUDA itself, at full shape. Needs the Wikipedia sample and GLUE files beside the
repository (skips without them)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from electra.training.checkpoint import list_checkpoints
from electra.training.precision import cpu_native_bf16
from tests.helpers import assert_same_state, metric_rows, run_cli, start_cli

STEPS = 4


def _corpus(shared: Path, tmp: Path, megabytes: float = 4.0) -> Path:
    """The Wikipedia sample's first documents (about `megabytes`), cut at a document boundary."""
    text = (shared / "corpus" / "wikipedia_en_sample.txt").read_text(encoding="utf-8")
    cut = text.index("\n\n", int(megabytes * 2**20))
    path = tmp / "wiki.txt"
    path.write_text(text[:cut] + "\n", encoding="utf-8")
    return path


def _pretrain_args(data: Path, precision: str) -> list[str]:
    return [
        "pretrain",
        "--config",
        "small",
        "--data",
        str(data),
        "--batch-size",
        "128",
        "--max-memory-gb",
        "4.5",  # micro-batch 32 on a CPU (its estimate: 4.1 GiB in fp32, 3.7 in bf16): 4 micro-batches a step
        "--max-steps",
        str(STEPS),
        "--eval-every",
        "1000",  # one evaluation, at the last step
        "--set",
        "train.eval_batches=2",
        "--save-every",
        "2",
        "--log-every",
        "1",
        "--precision",
        precision,
        "--device",
        "cpu",
        "--quiet",
    ]


def _start_and_stop_after_first_step(args: list[str], out: Path) -> subprocess.Popen:
    """Start the run, SIGTERM it once its first step is logged; the process, to be waited on."""
    proc = start_cli(*args, "--out", str(out))
    deadline = time.monotonic() + 600
    while not ((out / "metrics.jsonl").exists() and (out / "metrics.jsonl").read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended or hung before its first step"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    return proc


@pytest.mark.slow
def test_the_full_shape_run_stops_resumes_bit_identically_and_fine_tunes(tmp_path, shared_data):
    text = _corpus(shared_data, tmp_path)
    tok, data = tmp_path / "tok", tmp_path / "data"
    train_tokenizer = ["tokenizer", "train", "--kind", "wordpiece", "--vocab-size", "30522"]
    run_cli(*train_tokenizer, "--out", str(tok), str(text), check=True)
    assert len(json.loads((tok / "tokenizer.json").read_text())["model"]["vocab"]) == 30522
    run_cli("data", "prepare", "--tokenizer", str(tok), "--out", str(data), str(text), check=True)

    for precision in ["fp32"] + (["bf16"] if cpu_native_bf16() else []):
        args = _pretrain_args(data, precision)
        straight, stopped = tmp_path / f"straight-{precision}", tmp_path / f"stopped-{precision}"
        uninterrupted = start_cli(*args, "--out", str(straight))  # beside the interrupted one: a core each
        assert _start_and_stop_after_first_step(args, stopped).wait(timeout=900) == 128 + signal.SIGTERM
        assert uninterrupted.wait(timeout=900) == 0
        meta = json.loads((straight / "run.json").read_text())
        assert meta["step"] == STEPS and meta["precision"] == precision
        assert meta["micro_batch"] == 32 and meta["peak_memory_gb"] <= meta["memory_estimate_gb"] <= 4.5
        cfg = (straight / "config.yaml").read_text()
        assert "vocab_size: 30522" in cfg and "seq_len: 128" in cfg
        assert [row["step"] for row in metric_rows(straight) if "eval_masked_loss" in row] == [STEPS]

        state = json.loads((stopped / "run.json").read_text())
        assert state["stopped_by_signal"] == signal.SIGTERM and state["step"] in (2, 3)  # the vote is read late
        assert list_checkpoints(stopped)[-1].name == f"step_{state['step']:08d}"
        run_cli(*args, "--out", str(stopped), "--resume", "auto", check=True, timeout=900)
        assert assert_same_state(straight, stopped) > 0
        assert metric_rows(straight) == metric_rows(stopped)

    glue = tmp_path / "glue"
    result = run_cli(
        "glue",
        "--model",
        str(tmp_path / "straight-fp32"),
        "--tasks",
        "sst2,mrpc",
        "--glue-dir",
        str(shared_data / "glue"),
        "--seeds",
        "1",
        "--recipe",
        "off",
        "--set",
        "finetune.max_steps=4",
        "--device",
        "cpu",
        "--out",
        str(glue),
        check=True,
        timeout=900,
    )
    assert "sst2" in result.stdout and "mrpc" in result.stdout
    results = json.loads((glue / "results.json").read_text())
    for task in ("sst2", "mrpc"):
        assert results["tasks"][task]["metrics"]["accuracy"]["n"] == 1
