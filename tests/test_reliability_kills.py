"""Killed at any moment, nothing is lost or silently wrong: pretraining, `data prepare` and a GLUE sweep are
SIGKILLed at named moments (utils/faults.py: inside a checkpoint write, inside an evaluation, between the renames
of a prepared folder, while a GLUE result is written) and resumed; what they leave equals an uninterrupted run's,
bit for bit (metrics.jsonl: every field but the wall-clock tokens_per_s).

The fast tests fork a child that dies at a failpoint; the slow ones (`make test-slow`) are storms of 20 kills of the
real CLI, at failpoints and at random times from a seeded schedule.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from electra.config import FinetuneConfig, load_config
from electra.data.corpus import open_corpus
from electra.data.prepare import prepare
from electra.data.tokenizer import train_tokenizer
from electra.glue.sweep import SweepSpec, run_sweep
from electra.training.checkpoint import list_checkpoints, verify_checkpoint
from electra.training.loop import pretrain
from electra.utils.faults import ENV
from tests.glue_fixtures import make_run, write_glue
from tests.helpers import (
    KILLED,
    assert_same_state,
    die_at,
    metric_rows,
    run_cli,
    start_cli,
    without_seconds,
    write_synthetic_text,
)

# log windows (2) straddle checkpoints (3): a resumed run must restore the open window to log the same lines
TINY = [
    "train.batch_size=4",
    "train.max_steps=12",
    "train.save_every=3",
    "train.eval_every=4",
    "train.log_every=2",
    "train.eval_batches=2",
    "train.warmup_steps=4",
]


def test_pretraining_killed_at_each_failpoint_resumes_bit_identical(tmp_path):
    cfg = load_config("tiny", TINY)
    pretrain(cfg, tmp_path / "straight")
    run = tmp_path / "killed"

    def kill_inside_evaluation() -> None:  # the child only: die between two held-out batches
        import electra.training.evaluation as evaluation

        calls, real = [], evaluation.batch_to_device
        evaluation.batch_to_device = lambda *a: (
            calls.append(1) or (os.kill(os.getpid(), 9) if len(calls) == 2 else real(*a))
        )

    schedule = [  # (failpoint, the child's own patch, the step the run can resume from afterwards)
        ("checkpoint.write:optimizer.pt@2", None, 3),  # the save of step 6, half written
        (None, kill_inside_evaluation, 3),  # the held-out evaluation of step 4
        ("evaluate@2", None, 6),  # after step 8's evaluation was logged, before its checkpoint
        ("checkpoint.commit@1", None, 9),  # step 9 renamed into place; older ones not yet pruned
        ("write_atomic:run.json@2", None, 9),  # step 12's evaluation, writing run.json
    ]
    for failpoint, patch, resumable in schedule:
        assert die_at(failpoint, pretrain, cfg, run, resume="auto", before=patch) == KILLED, failpoint
        assert int(list_checkpoints(run)[-1].name.split("_")[1]) == resumable, failpoint
        for ckpt in list_checkpoints(run):
            verify_checkpoint(ckpt)  # every complete checkpoint is whole
        if failpoint == "checkpoint.write:optimizer.pt@2":
            with open(run / "metrics.jsonl", "a") as f:
                f.write('{"step": 7, "lr": 0.00')  # and a torn last line, as a kill inside a write leaves
    meta = pretrain(cfg, run, resume="auto")
    assert meta.step == 12
    assert not list((run / "checkpoints").glob(".*"))  # no leftovers of the interrupted saves
    assert metric_rows(run) == metric_rows(tmp_path / "straight")  # no duplicate, no torn line, same windows
    assert assert_same_state(run, tmp_path / "straight") > 0


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    write_synthetic_text(folder / "train.txt", num_documents=40)
    return train_tokenizer("bpe", 400, [str(folder / "train.txt")], folder / "bpe", show_progress=False).parent


def _prepare(inputs, tokenizer, out, overwrite=False):
    return prepare([str(inputs)], tokenizer, out, workers=1, overwrite=overwrite, show_progress=False)


PREPARED_FILES = ("tokens.bin", "documents.npy", "lines.npy", "tokenizer/tokenizer.json")


def test_data_prepare_killed_leaves_the_old_folder_or_none_and_reruns_complete_it(tokenizer, tmp_path, monkeypatch):
    import electra.data.prepare as prepare_module

    monkeypatch.setattr(prepare_module, "BATCH_BYTES", 4096)  # many batches: kills land between appends
    old_text, new_text = (
        write_synthetic_text(tmp_path / "old.txt", 1, 30),
        write_synthetic_text(tmp_path / "new.txt", 2, 200),
    )
    reference = _prepare(new_text, tokenizer, tmp_path / "reference")
    out = tmp_path / "out"
    old = _prepare(old_text, tokenizer, out)

    assert die_at("prepare.write@3", _prepare, new_text, tokenizer, out, True) == KILLED
    assert open_corpus(out)[1] == old  # mid-tokenization: the old folder, untouched
    assert die_at("prepare.commit@1", _prepare, new_text, tokenizer, out, True) == KILLED
    assert not out.exists()  # between the two renames: no folder (never a partial one) ...
    assert die_at("prepare.write@2", _prepare, new_text, tokenizer, out, True) == KILLED
    assert open_corpus(out)[1] == old  # ... and the next run first puts the old one back
    assert len(list(tmp_path.glob(".out.*"))) >= 1  # the killed run's temporary folder

    meta = _prepare(new_text, tokenizer, out, overwrite=True)
    assert sorted(p.name for p in tmp_path.glob(".out*")) == []  # leftovers and the lock file are gone
    timing = ("elapsed_s", "tokens_per_s")
    assert {k: v for k, v in meta.items() if k not in timing} == {k: v for k, v in reference.items() if k not in timing}
    for name in PREPARED_FILES:
        assert (out / name).read_bytes() == (tmp_path / "reference" / name).read_bytes(), name
    assert open_corpus(out)[1] == meta


@pytest.fixture(scope="module")
def glue_world(tmp_path_factory):
    root = tmp_path_factory.mktemp("glue_world")
    return {"glue": write_glue(root / "glue", n_train=16, n_dev=8), "run": make_run(root / "run")}


def _sweep(world, out: Path, **changes) -> SweepSpec:
    spec = SweepSpec(
        out=str(out),
        model=str(world["run"]),
        tasks=["rte", "wnli"],
        glue_dir=str(world["glue"]),
        seeds=[0, 1],
        finetune=FinetuneConfig(max_steps=2, batch_size=4),
        progress=False,
    )
    return dataclasses.replace(spec, **changes)


def test_glue_sweep_killed_keeps_finished_runs_and_redoes_the_rest(glue_world, tmp_path):
    straight = run_sweep(_sweep(glue_world, tmp_path / "straight"))
    out = tmp_path / "killed"
    # writing the second run's result (its temporary file is there, not yet renamed), then writing the report
    assert die_at("write_atomic:result.json@2", run_sweep, _sweep(glue_world, out)) == KILLED
    finished = {p.parent.name: p.read_bytes() for p in out.glob("runs/*/*/result.json")}
    assert list(finished) == ["seed0"] and (out / "runs" / "rte" / "seed1" / "claim").exists()
    assert die_at("write_atomic:results.json@2", run_sweep, _sweep(glue_world, out)) == KILLED
    assert len(list(out.glob("runs/*/*/result.json"))) == 3
    assert run_sweep(_sweep(glue_world, out)).ok
    # the same results, to the last digit (only the wall-clock seconds differ)
    assert without_seconds(json.loads((out / "results.json").read_text())) == without_seconds(straight.results)
    assert all(p.read_bytes() == finished[p.parent.name] for p in out.glob("runs/rte/seed0/result.json"))  # kept
    assert not list(out.glob("runs/*/*/claim"))


# -- storms: the real CLI, 20 kills each (make test-slow) ------------------------------------------------------


def _storm(
    args: list[str], moments: list[tuple[str, object]], started, span: float, timeout: float = 300, progress=lambda: ""
) -> list[str]:
    """Run `electra ARGS` once per moment, killed there: ("failpoint", "NAME@COUNT") arms ELECTRA_FAILPOINT; ("timed",
    fraction) sends SIGKILL `fraction * span` seconds after `started(pid)` says the run is underway (`span`: how long
    an uninterrupted run works, see `_measure_span`). Returns what happened to each session (each must have been
    killed by SIGKILL), with `progress()` after it; printed with -s."""
    outcomes = []
    for kind, value in moments:
        proc = start_cli(*args, env={ENV: value} if kind == "failpoint" else None, stderr=subprocess.PIPE)
        if kind == "timed":
            _wait_until_started(proc, started, timeout)
            time.sleep(float(value) * span)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        assert proc.returncode == -signal.SIGKILL, f"{kind} {value}: exit {proc.returncode}: {err.decode()[-2000:]}"
        outcomes.append(f"killed at {kind} {value}: {progress()}")
        print(outcomes[-1])
    return outcomes


def _wait_until_started(proc: subprocess.Popen, started, timeout: float) -> None:
    """Poll until `started(pid)` says the process is working (or it ended, or `timeout` passed)."""
    deadline = time.time() + timeout
    while proc.poll() is None and not started(proc.pid) and time.time() < deadline:
        time.sleep(0.01)


def _measure_span(args: list[str], started, timeout: float = 300) -> float:
    """Run `electra ARGS` once, uninterrupted, and return the seconds from `started(pid)` to its clean exit."""
    proc = start_cli(*args, stderr=subprocess.PIPE)
    _wait_until_started(proc, started, timeout)
    begin = time.time()
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err.decode()[-2000:]
    return time.time() - begin


def _holds_lock(folder: Path):
    lock = folder.parent / f".{folder.name}.lock"

    def started(pid: int) -> bool:
        try:
            return json.loads(lock.read_text()).get("pid") == pid
        except (OSError, ValueError):
            return False

    return started


def _claimed_a_run(sweep: Path):
    def started(pid: int) -> bool:  # the process has claimed a GLUE run: it is fine-tuning
        for claim in sweep.glob("runs/*/*/claim"):
            try:
                if json.loads(claim.read_text()).get("pid") == pid:
                    return True
            except (OSError, ValueError):
                pass
        return False

    return started


PRETRAIN_ARGS = [
    "pretrain",
    "--config",
    "tiny",
    "--max-steps",
    "60",
    "--batch-size",
    "4",
    "--save-every",
    "3",
    "--eval-every",
    "4",
    "--log-every",
    "2",
    "--set",
    "train.eval_batches=2",
    "--set",
    "train.warmup_steps=8",
]
PRETRAIN_FAILPOINTS = [
    "checkpoint.write:model.safetensors@1",
    "checkpoint.write:optimizer.pt@2",
    "checkpoint.write:SHA256SUMS@1",
    "checkpoint.write:COMPLETE@2",
    "checkpoint.commit@1",
    "evaluate@1",
    "evaluate@2",
    "write_atomic:run.json@2",
]


def storm_schedule(
    seed: int, failpoints: list[str], n: int = 20, resumable: bool = True, reach: float = 0.7
) -> list[tuple[str, object]]:
    """`n` moments in a seeded random order: every failpoint once, the rest timed kills at random fractions of an
    uninterrupted run's span. A run that starts over (`resumable=False`) is killed at up to `reach` of its span; a
    resumed one keeps what it did before each kill, so its fractions together add up to `reach`: no session can
    finish before its kill, on a fast machine or a slow one."""
    rng = random.Random(seed)
    moments = [("failpoint", f) for f in failpoints]
    draws = [rng.random() for _ in range(n - len(moments))]
    scale = reach / sum(draws) if resumable else reach
    moments += [("timed", round(d * scale, 3)) for d in draws]
    rng.shuffle(moments)
    return moments


@pytest.mark.slow
def test_pretraining_kill_storm_20_kills_bit_identical(tmp_path):
    straight, run = tmp_path / "straight", tmp_path / "stormed"
    span = _measure_span([*PRETRAIN_ARGS, "--out", str(straight)], _holds_lock(straight))
    moments = storm_schedule(20240611, PRETRAIN_FAILPOINTS)
    args = [*PRETRAIN_ARGS, "--out", str(run), "--resume", "auto"]

    def progress() -> str:
        ckpts = list_checkpoints(run)
        return f"resumes from step {int(ckpts[-1].name.split('_')[1]) if ckpts else 0}"

    outcomes = _storm(args, moments, _holds_lock(run), span, progress=progress)
    assert len(outcomes) == 20
    run_cli(*args, check=True)
    assert metric_rows(run) == metric_rows(straight)
    assert assert_same_state(run, straight) > 0


@pytest.mark.slow
def test_data_prepare_kill_storm(tokenizer, tmp_path):
    text = write_synthetic_text(tmp_path / "corpus.txt", 3, 20000)  # 15 MB: eight batches of tokens, ~1 s
    args = ["data", "prepare", "--quiet", "--workers", "1", "--tokenizer", str(tokenizer)]
    span = _measure_span([*args, "--out", str(tmp_path / "straight"), str(text)], _holds_lock(tmp_path / "straight"))
    out = tmp_path / "out"
    old = write_synthetic_text(tmp_path / "old.txt", 4, 20)
    run_cli(*args, "--out", str(out), str(old), check=True)
    moments = storm_schedule(7, ["prepare.write@1", "prepare.write@3", "prepare.commit@1"], n=10, resumable=False)
    command = [*args, "--overwrite", "--out", str(out), str(text)]

    def state() -> str:  # after each kill: the old folder, or none (between the renames), never a partial one
        if not out.exists():
            assert list(tmp_path.glob(".out.old-*")), "the old folder is gone"
            return "no folder (the old one set aside: the next run puts it back)"
        sources = open_corpus(out)[1]["sources"]  # (open_corpus checks every file against its sha256)
        assert sources in ([str(old)], [str(text)]), sources
        return "the old folder, intact" if sources == [str(old)] else "the complete new folder"

    assert len(_storm(command, moments, _holds_lock(out), span, progress=state)) == 10
    run_cli(*command, check=True)
    for name in PREPARED_FILES:
        assert (out / name).read_bytes() == (tmp_path / "straight" / name).read_bytes(), name
    assert sorted(p.name for p in tmp_path.glob(".out*")) == []
    tokens = np.fromfile(out / "tokens.bin", dtype=np.uint16)
    assert len(tokens) == open_corpus(out)[1]["num_tokens"]


@pytest.mark.slow
def test_glue_sweep_kill_storm(glue_world, tmp_path):
    def args(out: Path) -> list[str]:
        return [
            "glue",
            "--model",
            str(glue_world["run"]),
            "--glue-dir",
            str(glue_world["glue"]),
            "--tasks",
            "rte,wnli",
            "--seeds",
            "6",
            "--max-steps",
            "8",
            "--batch-size",
            "4",
            "--out",
            str(out),
            "--no-progress",
        ]

    straight, out = tmp_path / "straight", tmp_path / "stormed"
    span = _measure_span(args(straight), _claimed_a_run(straight))
    failpoints = [
        "write_atomic:result.json@1",
        "write_atomic:result.json@2",
        "write_atomic:results.json@1",
        "write_atomic:sweep.json@1",
        "write_atomic:results.md@1",
    ]

    def progress() -> str:
        return f"{len(list(out.glob('runs/*/*/result.json')))} of 12 runs finished"

    # the failpoint sessions finish up to one run each (4 of the 12: a third of the work), and a session started
    # warm does about twice its fraction of the straight run's span (measured: a kill at 0.14 of it finished 3 runs
    # of 12), so the timed kills together reach a fifth of the span: the last session still has runs left
    moments = storm_schedule(99, failpoints, n=10, reach=0.2)
    assert len(_storm(args(out), moments, _claimed_a_run(out), span, progress=progress)) == 10
    run_cli(*args(out), check=True)
    stormed_results, straight_results = (json.loads((d / "results.json").read_text()) for d in (out, straight))
    assert without_seconds(stormed_results) == without_seconds(straight_results)
