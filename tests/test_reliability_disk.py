"""A full disk: a checkpoint, a prepared corpus and a GLUE result that do not fit fail with one clear line ("disk
full while writing FILE; the previous ... is intact"), leave the previous files as they were, and the run
continues once there is room. On a real small filesystem (a tmpfs the test mounts; skipped where mounting is not
allowed) and with an injected ENOSPC (electra/utils/faults.py), which runs everywhere."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import electra.utils.faults as faults
from electra.config import FinetuneConfig, load_config
from electra.data.corpus import open_corpus
from electra.data.prepare import prepare
from electra.data.tokenizer import train_tokenizer
from electra.glue.sweep import SweepSpec, run_sweep
from electra.training.checkpoint import list_checkpoints, verify_checkpoint
from electra.training.loop import pretrain
from electra.utils.errors import DiskFullError
from tests.glue_fixtures import make_run, write_glue
from tests.helpers import assert_same_state, cli_main, metric_rows, without_seconds, write_synthetic_text

RUN = [
    "train.batch_size=4",
    "train.max_steps=6",
    "train.save_every=2",
    "train.eval_every=3",
    "train.log_every=1",
    "train.eval_batches=1",
    "train.warmup_steps=2",
]
CHECKPOINT_BYTES = 1_840_000  # one tiny-preset checkpoint (optimizer.pt 1.23 MB, model.safetensors 0.59 MB)


@contextmanager
def small_filesystem(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` (root with CAP_SYS_ADMIN only: skipped elsewhere)."""
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode:
        reason = mounted.stderr.decode().strip()
        pytest.skip(f"cannot mount a tmpfs here ({reason}); the injected-ENOSPC tests cover the same paths")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def grow(path: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("straight") / "run"
    pretrain(load_config("tiny", RUN), run)
    return run


def _after_a_full_disk(run: Path, err: str, straight: Path, resume: str = '`resume="auto"`') -> None:
    """The message names the file and the intact checkpoint, and how to continue in the caller's words (`resume`:
    the Python argument, or the CLI's flag); that checkpoint verifies; nothing partial is left."""
    assert err.startswith(f"disk full while writing {run / 'checkpoints' / 'step_00000006' / 'optimizer.pt'} (")
    assert f"the previous checkpoint {run / 'checkpoints' / 'step_00000004'} is intact" in err
    assert err.endswith(f"free some space, then continue with {resume}") and "\n" not in err
    assert [p.name for p in list_checkpoints(run)] == ["step_00000002", "step_00000004"]
    for ckpt in list_checkpoints(run):
        verify_checkpoint(ckpt)
    assert not list((run / "checkpoints").glob(".*"))


def test_a_checkpoint_on_a_full_tmpfs_fails_clearly_and_resumes_once_there_is_room(tmp_path, straight, capsys):
    # room for the run folder and two checkpoints, not three: the save of step 6 runs out of space
    with small_filesystem(tmp_path / "fs", f"{int(2.45 * CHECKPOINT_BYTES) // 1024}k") as fs:
        run = fs / "run"
        args = ["pretrain", "--config", "tiny", "--out", str(run), *[f"--set={item}" for item in RUN]]
        assert cli_main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith("electra pretrain: error: ")
        _after_a_full_disk(run, err.removeprefix("electra pretrain: error: "), straight, "--resume auto")
        grow(fs, "64m")
        assert cli_main([*args, "--resume", "auto"]) == 0
        assert_same_state(run, straight)
        assert metric_rows(run) == metric_rows(straight)


def test_a_checkpoint_hit_by_an_injected_enospc_fails_clearly_and_resumes(tmp_path, straight, monkeypatch):
    run = tmp_path / "run"
    monkeypatch.setattr(faults, "_hits", {})
    monkeypatch.setenv(faults.ENV, "checkpoint.write:optimizer.pt@3=enospc")
    with pytest.raises(DiskFullError) as caught:
        pretrain(load_config("tiny", RUN), run)
    _after_a_full_disk(run, str(caught.value), straight)
    monkeypatch.delenv(faults.ENV)
    pretrain(load_config("tiny", RUN), run, resume="auto")
    assert_same_state(run, straight)
    assert metric_rows(run) == metric_rows(straight)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    write_synthetic_text(folder / "train.txt", num_documents=20)
    return train_tokenizer("bpe", 300, [str(folder / "train.txt")], folder / "bpe", show_progress=False).parent


def _check_prepare_failed_cleanly(out: Path, err: str, old: dict) -> None:
    assert err.startswith(f"disk full while writing {out / 'tokens.bin'} (") and "\n" not in err
    assert err.endswith(f"the previous {out} is intact")
    assert open_corpus(out)[1] == old
    assert sorted(p.name for p in out.parent.iterdir() if p.name.startswith(".")) == []


def test_a_prepared_corpus_on_a_full_tmpfs_keeps_the_old_one(tokenizer, tmp_path):
    small = write_synthetic_text(tmp_path / "small.txt", 1, 10)
    big = write_synthetic_text(tmp_path / "big.txt", 2, 3000)  # ~0.45M tokens: 0.9 MB of uint16
    with small_filesystem(tmp_path / "fs", "600k") as fs:
        out = fs / "data"
        old = prepare([str(small)], tokenizer, out, workers=1, show_progress=False)
        with pytest.raises(DiskFullError) as caught:
            prepare([str(big)], tokenizer, out, workers=1, overwrite=True, show_progress=False)
        _check_prepare_failed_cleanly(out, str(caught.value), old)
        grow(fs, "64m")
        meta = prepare([str(big)], tokenizer, out, workers=1, overwrite=True, show_progress=False)
        assert open_corpus(out)[1] == meta and meta["num_tokens"] > 400_000


def test_a_prepared_corpus_hit_by_an_injected_enospc_keeps_the_old_one(tokenizer, tmp_path, monkeypatch):
    small, big = write_synthetic_text(tmp_path / "small.txt", 1, 10), write_synthetic_text(tmp_path / "b.txt", 2, 50)
    out = tmp_path / "data"
    old = prepare([str(small)], tokenizer, out, workers=1, show_progress=False)
    monkeypatch.setattr(faults, "_hits", {})
    monkeypatch.setenv(faults.ENV, "prepare.write@1=enospc")
    with pytest.raises(DiskFullError) as caught:
        prepare([str(big)], tokenizer, out, workers=1, overwrite=True, show_progress=False)
    _check_prepare_failed_cleanly(out, str(caught.value), old)
    monkeypatch.delenv(faults.ENV)
    assert prepare([str(big)], tokenizer, out, workers=1, overwrite=True, show_progress=False)["num_documents"] == 50


def test_a_glue_result_hit_by_a_full_disk_keeps_the_finished_runs(tmp_path, monkeypatch, capsys):
    root = tmp_path / "world"
    spec = SweepSpec(
        out=str(tmp_path / "out"),
        model=str(make_run(root / "run")),
        tasks=["rte"],
        glue_dir=str(write_glue(root / "glue", n_train=16, n_dev=8)),
        seeds=[0, 1, 2],
        finetune=FinetuneConfig(max_steps=2, batch_size=4),
        progress=False,
    )
    straight = run_sweep(dataclasses.replace(spec, out=str(tmp_path / "straight")))
    out = Path(spec.out)
    monkeypatch.setattr(faults, "_hits", {})
    monkeypatch.setenv(faults.ENV, "write_atomic:result.json@2=enospc")  # the second run's result
    with pytest.raises(DiskFullError) as caught:
        run_sweep(spec)
    target = out / "runs" / "rte" / "seed1" / "result.json"
    assert str(caught.value).startswith(f"disk full while writing {target} (")
    assert str(caught.value).endswith("nothing was written")
    assert [p.parent.name for p in out.glob("runs/rte/*/result.json")] == ["seed0"]  # the finished run is kept
    assert not list(out.glob("runs/rte/*/.result.json.*")) and not list(out.glob("runs/rte/*/claim"))
    # the report of the finished runs is rewritten after each run: a full disk there keeps the previous one
    monkeypatch.setattr(faults, "_hits", {})
    monkeypatch.setenv(faults.ENV, "write_atomic:results.json@1=enospc")
    before = (out / "results.json").read_bytes()
    with pytest.raises(DiskFullError, match=r"results.json \(.*\); the previous results.json is intact$"):
        run_sweep(spec)
    assert (out / "results.json").read_bytes() == before
    monkeypatch.delenv(faults.ENV)
    assert run_sweep(spec).ok  # room again: the sweep completes, as if nothing had happened
    # the same results, to the last digit (only the wall-clock seconds differ)
    assert without_seconds(json.loads((out / "results.json").read_text())) == without_seconds(straight.results)


def test_an_atomically_written_file_gets_the_mode_a_plain_write_would_and_keeps_a_changed_one(tmp_path):
    """mkstemp's temporary files are 0600; renamed over the target they made every run.json, report and config
    unreadable to the other users of a shared machine or filesystem."""
    import os
    import stat

    from electra.utils.files import write_atomic

    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    write_atomic(tmp_path / "report.md", "x")
    assert stat.S_IMODE(os.stat(tmp_path / "report.md").st_mode) == stat.S_IMODE(os.stat(plain).st_mode)
    os.chmod(tmp_path / "report.md", 0o640)
    write_atomic(tmp_path / "report.md", "y")
    assert stat.S_IMODE(os.stat(tmp_path / "report.md").st_mode) == 0o640
