"""scripts/slurm_localhost.sh's start, against stand-in daemons (no SLURM needed): slurmd and slurmctld fork away from
the command that starts them and write their pid file only once set up, which on a busy machine comes after the
script's first look. A daemon still starting must be waited for, and one that died before writing its pid file must
be reported at once, not after the whole start timeout, and the other daemon, still starting, stopped.

The stand-ins are bash scripts named as the daemons (so their processes carry the daemons' names): each forks a
child that writes its pid file after FAKE_PIDFILE_DELAY seconds and then waits, or exits at once where
FAKE_DIES_BEFORE_PIDFILE names it. `sinfo` answers "idle" once both pid files name live processes."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import SCRIPT

DAEMON = r"""#!/bin/bash
# stand-in for NAME -c -f CONF: daemonizes, writes its pid file late (or dies first)
conf=$3
key=$([[ $(basename "$0") == slurmd ]] && echo SlurmdPidFile || echo SlurmctldPidFile)
pidfile=$(sed -n "s/^$key=//p" "$conf")
(
    trap 'exit 0' TERM
    if [[ ,$FAKE_DIES_BEFORE_PIDFILE, == *,$(basename "$0"),* ]]; then
        sleep 0.3
        exit 1
    fi
    sleep "${FAKE_PIDFILE_DELAY:-0}"
    echo $BASHPID >"$pidfile"
    while true; do sleep 0.2; done
) </dev/null >/dev/null 2>&1 &
exit 0
"""

SINFO = r"""#!/bin/bash
conf=$SLURM_CONF
for key in SlurmctldPidFile SlurmdPidFile; do
    pidfile=$(sed -n "s/^$key=//p" "$conf")
    [[ -s $pidfile ]] && kill -0 "$(<"$pidfile")" 2>/dev/null || { echo unknown; exit 0; }
done
echo idle
"""


@pytest.fixture
def fakes(tmp_path) -> Path:
    """A folder of stand-ins for the programs the script needs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {"slurmd": DAEMON, "slurmctld": DAEMON, "sinfo": SINFO}
    scripts |= {name: "#!/bin/bash\nexit 0\n" for name in ("squeue", "scancel", "munged", "munge", "runuser")}
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _command_line(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def start(fakes: Path, folder: Path, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    environ = {
        **os.environ,
        "PATH": f"{fakes}{os.pathsep}{os.environ['PATH']}",
        "SLURM_LOCALHOST_PORT": "7957",  # ports no real cluster of the tests uses
        "SLURM_START_TIMEOUT": "20",
        **env,
    }
    began = time.monotonic()
    done = subprocess.run([str(SCRIPT), "start", str(folder)], capture_output=True, text=True, timeout=60, env=environ)
    return done, time.monotonic() - began


def stop(fakes: Path, folder: Path) -> None:
    environ = {**os.environ, "PATH": f"{fakes}{os.pathsep}{os.environ['PATH']}", "SLURM_LOCALHOST_PORT": "7957"}
    subprocess.run([str(SCRIPT), "stop", str(folder)], capture_output=True, text=True, timeout=60, env=environ)


@pytest.mark.skipif(os.geteuid() != 0, reason="the script runs its daemons as root")
def test_daemons_that_write_their_pid_file_late_are_waited_for(fakes, tmp_path):
    folder = tmp_path / "cluster"
    try:
        done, _ = start(fakes, folder, FAKE_PIDFILE_DELAY="2")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines()[-1] == f"export SLURM_CONF={folder.resolve() / 'slurm.conf'}"
    finally:
        stop(fakes, folder)


@pytest.mark.skipif(os.geteuid() != 0, reason="the script runs its daemons as root")
def test_a_daemon_that_dies_before_its_pid_file_is_reported_at_once(fakes, tmp_path):
    folder = tmp_path / "cluster"
    try:
        done, seconds = start(fakes, folder, FAKE_PIDFILE_DELAY="2", FAKE_DIES_BEFORE_PIDFILE="slurmd")
        assert done.returncode == 1 and "slurmd exited" in done.stderr, done.stderr
        assert seconds < 10, seconds  # not the 20 s start timeout
        conf = f" -f {folder.resolve() / 'slurm.conf'} "
        assert not [p for p in Path("/proc").glob("[0-9]*") if conf in _command_line(p)]  # slurmctld was stopped too
    finally:
        stop(fakes, folder)
