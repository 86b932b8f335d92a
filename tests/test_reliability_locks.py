"""One writer per folder: a second `electra pretrain` on a run folder, or a second `data prepare` on an output, that
a live process is writing is refused with one line naming the folder and the holder (pid, host); a holder that
dies (SIGKILL) leaves nothing stuck. The lock is electra.utils.files.folder_lock (fcntl.flock on `.NAME.lock` beside the
folder), which `electra study` is to take on its folder too."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from electra.config import load_config
from electra.data.tokenizer import train_tokenizer
from electra.training.loop import pretrain
from electra.utils.errors import FolderInUseError
from electra.utils.files import FolderLock, folder_lock
from tests.helpers import cli_main, write_synthetic_text


def _lock_file(folder: Path) -> Path:
    return folder.parent / f".{folder.name}.lock"


def _hold(folder: Path, what: str, work=None):
    """A forked process that takes the folder's lock (or runs `work`, which takes it) and then waits."""

    def child() -> None:
        if work is not None:
            work()
        with folder_lock(folder, what):
            time.sleep(600)

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    deadline = time.time() + 120
    while not (_lock_file(folder).exists() and str(proc.pid) in _lock_file(folder).read_text()):
        assert proc.is_alive() and time.time() < deadline, "the holder did not take the lock"
        time.sleep(0.01)
    return proc


def _kill(proc) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()


def test_folder_lock_refuses_a_second_holder_names_it_and_frees_on_death(tmp_path):
    folder = tmp_path / "study"
    holder = _hold(folder, "study")
    with pytest.raises(FolderInUseError) as err:
        folder_lock(folder, "study")
    message = str(err.value)
    assert message.startswith(f"{folder}: in use by another study (pid {holder.pid} on {socket.gethostname()}")
    assert "\n" not in message
    _kill(holder)  # a crash: the OS drops the lock, the file stays behind
    with folder_lock(folder, "study") as lock:
        assert isinstance(lock, FolderLock) and f'"pid": {os.getpid()}' in _lock_file(folder).read_text()
    assert not _lock_file(folder).exists()  # released: the lock file is removed
    with folder_lock(folder, "study"):  # and taken again
        pass


def test_a_holder_releasing_while_another_opens_the_lock_file_never_gives_two_holders(tmp_path, monkeypatch):
    """The race the lock file's inode check closes: B opens the lock file; A releases (unlinking the file); C
    creates a new file and locks it; B's flock on the old, unlinked file now succeeds. B must notice that the file
    it locked is no longer the lock and try again, finding C."""
    import fcntl

    folder = tmp_path / "out"
    a, c = folder_lock(folder, "data prepare"), FolderLock(folder, "data prepare")
    real_flock, raced = fcntl.flock, []

    def flock_while_a_leaves_and_c_arrives(fd, operation):
        if not raced:
            raced.append(True)
            a.release()
            c.acquire()
        return real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock_while_a_leaves_and_c_arrives)
    with pytest.raises(FolderInUseError, match=f"pid {os.getpid()}"):  # B is refused: C holds the folder
        FolderLock(folder, "data prepare").acquire()
    assert raced and c._fd is not None
    c.release()


FAST = ["train.batch_size=4", "train.log_every=1", "train.eval_every=1000", "train.eval_batches=1"]


def test_a_second_pretrain_on_a_live_run_folder_is_refused(tmp_path, capsys):
    run = tmp_path / "run"

    def long_run() -> None:  # holds the folder as `electra pretrain` does, for as long as it trains
        pretrain(load_config("tiny", FAST + ["train.max_steps=100000", "train.save_every=100000"]), run)

    proc = multiprocessing.get_context("fork").Process(target=long_run)
    proc.start()
    deadline = time.time() + 120
    while not (_lock_file(run).exists() and str(proc.pid) in _lock_file(run).read_text()):  # setup has begun
        assert proc.is_alive() and time.time() < deadline
        time.sleep(0.01)
    args = ["pretrain", "--config", "tiny", "--out", str(run), "--resume", "auto", "--max-steps", "2"]
    assert cli_main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"electra pretrain: error: {run}: in use by another pretraining run (pid {proc.pid} on "
        f"{socket.gethostname()}, since {err[-1].split('since ')[1]}"
    )
    assert proc.is_alive()  # the holder goes on undisturbed
    _kill(proc)  # killed before its first checkpoint: the folder is free again
    assert pretrain(load_config("tiny", FAST + ["train.max_steps=2"]), run, resume="auto").step == 2


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    write_synthetic_text(folder / "train.txt", num_documents=20)
    return train_tokenizer("bpe", 300, [str(folder / "train.txt")], folder / "bpe", show_progress=False).parent


def test_a_second_data_prepare_on_a_live_output_is_refused(tokenizer, tmp_path, capsys):
    text = write_synthetic_text(tmp_path / "corpus.txt", num_documents=30)
    out = tmp_path / "out"
    args = ["data", "prepare", "--quiet", "--workers", "1", "--tokenizer", str(tokenizer), "--out", str(out), str(text)]

    def slow_prepare() -> None:  # the child: tokenizing takes a long time
        import electra.data.prepare as prepare_module

        prepare_module._encode_batch = lambda lines: time.sleep(600)
        cli_main(args)

    proc = multiprocessing.get_context("fork").Process(target=slow_prepare)
    proc.start()
    deadline = time.time() + 120
    while not list(tmp_path.glob(".out.tmp-*")):
        assert proc.is_alive() and time.time() < deadline
        time.sleep(0.01)
    assert cli_main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"electra data: error: {out}: in use by another data prepare (pid {proc.pid} on ")
    _kill(proc)  # dies mid-run: its temporary folder stays behind, its lock does not
    assert cli_main(args) == 0
    assert (out / "metadata.json").exists() and sorted(p.name for p in tmp_path.glob(".out*")) == []
