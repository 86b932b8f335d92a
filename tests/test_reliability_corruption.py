"""Corruption is detected, not trusted: a flipped byte in the middle of a checkpoint's weights or optimizer state, a
missing or edited state.json / config.yaml, a prepared corpus with a flipped byte, a wrong length or an edited
offsets file, a run folder whose config no longer parses. Each is refused with a message naming the file (sha256
recorded at write time, checked at load), and resuming uses the newest good checkpoint instead. Folders written
before the checksums existed still load, with one warning."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file

import electra.data.corpus as corpus_module
import electra.training.checkpoint as checkpoint_module
from electra.config import load_config
from electra.data.corpus import META_FILE, open_corpus
from electra.report.results import ReportError, read_pretrain_run
from electra.training.checkpoint import (
    COMPLETE_MARKER,
    CheckpointError,
    list_checkpoints,
    load_model_checkpoint,
    verify_checkpoint,
)
from electra.training.loop import pretrain
from electra.utils.errors import CorruptFileError, InputError
from electra.utils.files import CHECKSUMS_FILE
from tests.helpers import assert_same_state, cli_main, metric_rows, prepared_synthetic_corpus

RUN = [
    "train.batch_size=4",
    "train.max_steps=6",
    "train.save_every=2",
    "train.eval_every=3",
    "train.log_every=1",
    "train.eval_batches=1",
    "train.warmup_steps=2",
]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A run with checkpoints at steps 2, 4 and 6."""
    run = tmp_path_factory.mktemp("finished") / "run"
    pretrain(load_config("tiny", RUN), run)
    assert [p.name for p in list_checkpoints(run)] == ["step_00000002", "step_00000004", "step_00000006"]
    return run


@pytest.fixture
def run(finished_run, tmp_path) -> Path:
    """A copy of the finished run to damage."""
    return Path(shutil.copytree(finished_run, tmp_path / "run"))


def flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def newest(run: Path) -> Path:
    return list_checkpoints(run)[-1]


DAMAGE = {
    "model.safetensors flipped": (lambda c: flip_middle_byte(c / "model.safetensors"), "model.safetensors: sha256"),
    "optimizer.pt flipped": (lambda c: flip_middle_byte(c / "optimizer.pt"), "optimizer.pt: sha256"),
    "state.json missing": (lambda c: (c / "state.json").unlink(), "state.json: missing"),
    "state.json edited": (
        lambda c: (c / "state.json").write_text((c / "state.json").read_text().replace('"step": 6', '"step": 7')),
        "state.json: sha256",
    ),
    "config.yaml edited": (
        lambda c: (c / "config.yaml").write_text((c / "config.yaml").read_text().replace("lr: 0.001", "lr: 0.002")),
        "config.yaml: sha256",
    ),
    "config.yaml missing": (lambda c: (c / "config.yaml").unlink(), "config.yaml: missing"),
    "SHA256SUMS missing": (lambda c: (c / CHECKSUMS_FILE).unlink(), "SHA256SUMS: missing"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_newest_checkpoint_is_refused_and_resume_uses_the_previous(run, finished_run, damage, caplog):
    damage_fn, message = DAMAGE[damage]
    bad = newest(run)
    damage_fn(bad)
    with pytest.raises(CheckpointError, match=message):
        verify_checkpoint(bad, checkpoint_module.TRAINING_FILES)
    with pytest.raises(CheckpointError, match=message):  # what `electra glue --model` and export-hf read
        load_model_checkpoint(bad)
    caplog.set_level(logging.INFO)
    meta = pretrain(load_config("tiny", RUN), run, resume="auto")  # falls back to step 4 and redoes 5, 6
    assert meta.step == 6
    warning = next(r.getMessage() for r in caplog.records if "skipping unreadable checkpoint" in r.getMessage())
    assert str(bad) in warning and message.split(":")[0] in warning
    assert "resumed from" in caplog.text and "step_00000004 (step 4)" in caplog.text
    assert_same_state(run, finished_run)  # the redone steps equal the original ones, bit for bit
    assert metric_rows(run) == metric_rows(finished_run)


def test_a_flipped_byte_in_the_weights_loads_silently_without_the_checksum(run):
    """Why the checksum is needed: safetensors reads a tensor with a flipped bit without complaint."""
    ckpt = newest(run)
    before = {k: v.clone() for k, v in load_file(ckpt / "model.safetensors").items()}  # (not the mapped file)
    flip_middle_byte(ckpt / "model.safetensors")
    after = load_file(ckpt / "model.safetensors")
    assert before.keys() == after.keys() and any(not (before[k] == after[k]).all() for k in before)


def test_no_usable_checkpoint_is_an_error_naming_the_file_not_a_fresh_start(run):
    for ckpt in list_checkpoints(run):
        flip_middle_byte(ckpt / "optimizer.pt")
    before = (run / "metrics.jsonl").read_bytes()
    with pytest.raises(CheckpointError, match=r"no usable checkpoint among 3; the newest: .*step_00000006/optimizer"):
        pretrain(load_config("tiny", RUN), run, resume="auto")
    assert (run / "metrics.jsonl").read_bytes() == before  # nothing trimmed: the run did not start over


def test_cli_names_the_damaged_file_in_one_line(run, capsys):
    for ckpt in list_checkpoints(run):
        (ckpt / "state.json").unlink()
    args = ["pretrain", "--config", "tiny", "--out", str(run), "--resume", "auto"]
    args += [f"--set={item}" for item in RUN]
    assert cli_main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("electra pretrain: error: ") and "step_00000006/state.json: missing" in err


def test_a_run_config_that_no_longer_parses_is_named_and_rewritten_on_resume(run, caplog):
    (run / "config.yaml").write_text("model: [unclosed\n")
    with pytest.raises(ReportError, match=r"run/config.yaml: cannot read the run's config"):
        read_pretrain_run(run)  # the report refuses it, naming the file
    flip_middle_byte(newest(run) / "model.safetensors")
    caplog.set_level(logging.WARNING)
    pretrain(load_config("tiny", RUN), run, resume="auto")
    assert f"{run / 'config.yaml'}: cannot read the config" in caplog.text
    assert read_pretrain_run(run).cfg.train == load_config("tiny", RUN).train  # rewritten from the resumed config


def test_checkpoints_written_before_checksums_load_with_one_warning(run, finished_run, caplog, monkeypatch):
    monkeypatch.setattr(checkpoint_module, "_warned_unverified", False)
    for ckpt in list_checkpoints(run):  # as this code wrote them before checksums: no SHA256SUMS, COMPLETE empty
        (ckpt / CHECKSUMS_FILE).unlink()
        (ckpt / COMPLETE_MARKER).write_text("")
    shutil.rmtree(newest(run))
    caplog.set_level(logging.WARNING)
    assert pretrain(load_config("tiny", RUN), run, resume="auto").step == 6
    load_model_checkpoint(list_checkpoints(run)[0])
    assert caplog.text.count("written before checksums were recorded") == 1
    assert_same_state(run, finished_run)
    assert (newest(run) / CHECKSUMS_FILE).exists()  # new checkpoints have them


# -- prepared corpora ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    return prepared_synthetic_corpus(tmp_path_factory.mktemp("prepared"), num_documents=60, vocab_size=400)


@pytest.fixture
def data(prepared, tmp_path) -> Path:
    return Path(shutil.copytree(prepared, tmp_path / "data"))


def _edit_offsets(path: Path) -> None:
    offsets = np.load(path)
    offsets[1:-1] = offsets[1:-1] - 1  # still non-decreasing, same length and ends: only the hash can tell
    np.save(path, offsets)


CORPUS_DAMAGE = {
    "tokens.bin flipped": (lambda d: flip_middle_byte(d / "tokens.bin"), "tokens.bin: sha256"),
    "tokens.bin too long": (lambda d: open(d / "tokens.bin", "ab").write(b"\0\0"), "tokens.bin: sha256"),
    "tokens.bin truncated": (lambda d: open(d / "tokens.bin", "r+b").truncate(100), "tokens.bin: sha256"),
    "documents.npy edited": (lambda d: _edit_offsets(d / "documents.npy"), "documents.npy: sha256"),
    "lines.npy flipped": (lambda d: flip_middle_byte(d / "lines.npy"), "lines.npy: sha256"),
    "tokenizer edited": (lambda d: (d / "tokenizer" / "tokenizer.json").write_text("{}"), "tokenizer.json: does not"),
}


@pytest.mark.parametrize("damage", list(CORPUS_DAMAGE))
def test_a_damaged_prepared_corpus_is_refused_naming_the_file(data, damage, capsys):
    damage_fn, message = CORPUS_DAMAGE[damage]
    damage_fn(data)
    with pytest.raises(CorruptFileError, match=message):
        open_corpus(data)
    # pretraining on it stops before any work, in one line naming the file
    assert (
        cli_main(
            ["pretrain", "--config", "tiny", "--data", str(data), "--out", str(data.parent / "run"), "--max-steps", "1"]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert message.split(":")[0] in err and not (data.parent / "run" / "checkpoints").exists()


def test_without_hashes_size_and_offsets_are_still_checked(data, caplog, monkeypatch):
    """A folder prepared before the hashes existed opens with one warning; a wrong length is still refused."""
    monkeypatch.setattr(corpus_module, "_warned_unverified", False)
    meta = json.loads((data / META_FILE).read_text())
    del meta["sha256"]
    (data / META_FILE).write_text(json.dumps(meta))
    caplog.set_level(logging.WARNING)
    open_corpus(data)
    open_corpus(data)
    assert caplog.text.count("prepared before file hashes were recorded") == 1
    with open(data / "tokens.bin", "ab") as f:
        f.write(b"\0\0")
    with pytest.raises(InputError, match="tokens.bin: expected"):
        open_corpus(data)
