"""The `slurm` fixture: a real single-node SLURM cluster on this machine (scripts/slurm_localhost.sh), started once
per test session in a temporary folder and stopped after the last test. It skips where SLURM cannot run (binaries
missing, not root, ELECTRA_SKIP_SLURM=1) and fails where SLURM is installed but the cluster does not start, so that
a broken setup is not mistaken for a missing one."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT

SCRIPT = ROOT / "scripts" / "slurm_localhost.sh"
NEEDED = ("slurmctld", "slurmd", "sbatch", "munged")
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])  # the daemons live in sbin


def why_not() -> str | None:
    """Why SLURM cannot run here, or None where it can."""
    if os.environ.get("ELECTRA_SKIP_SLURM") == "1":
        return "ELECTRA_SKIP_SLURM is set"
    missing = [name for name in NEEDED if shutil.which(name, path=SEARCH_PATH) is None]
    problems = ([f"not found: {', '.join(missing)}"] if missing else []) + (["not root"] if os.geteuid() != 0 else [])
    if not problems:
        return None
    return (
        "SLURM tests need slurmctld, slurmd, sbatch and munged (Debian: apt-get install slurmctld slurmd slurm-client "
        f"munge) and root; {'; '.join(problems)}"
    )


def worker_port() -> int:
    """slurmctld's port for this test process: one cluster per pytest-xdist worker (gw0: 6917, gw1: 6927, ...), so
    that workers running SLURM tests at once never meet on one port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return 6917 + 10 * int(worker.removeprefix("gw") or 0)


def run_script(action: str, folder: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLURM_LOCALHOST_PORT": str(worker_port())}
    with open(Path(tempfile.gettempdir()) / "electra-slurm-localhost.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one start or stop at a time: they share munged
        return subprocess.run(
            [str(SCRIPT), action, str(folder)], capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
            env=env,
        )  # fmt: skip


@pytest.fixture(scope="session")
def slurm(tmp_path_factory) -> Iterator[Path]:
    """The cluster's slurm.conf, with SLURM_CONF pointing at it for the session (sbatch, squeue and the jobs)."""
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("slurm")
    try:
        started = run_script("start", folder)
    except subprocess.TimeoutExpired as e:
        run_script("stop", folder)
        pytest.fail(f"{SCRIPT.name} start {folder} did not return in {e.timeout:.0f} s", pytrace=False)
    if started.returncode != 0:
        run_script("stop", folder)
        pytest.fail(
            f"{SCRIPT.name} start {folder} failed ({started.returncode}):\n{started.stdout}{started.stderr}",
            pytrace=False,
        )
    conf = folder / "slurm.conf"
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    try:
        yield conf
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        stopped = run_script("stop", folder)
        if stopped.returncode != 0:
            print(f"{SCRIPT.name} stop {folder} failed ({stopped.returncode}):\n{stopped.stdout}{stopped.stderr}")
