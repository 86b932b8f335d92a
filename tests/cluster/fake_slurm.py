"""Stand-ins for sbatch, squeue, sinfo, scancel and srun, for the SLURM executor's tests without a cluster
(tests/cluster/test_follow.py): `install(folder)` writes the five commands into FOLDER/bin (to be put first on the
PATH) and their shared state into FOLDER/state.json, which the tests read and change: the jobs in the queue (state,
pending reason, name, comment), each sbatch script submitted, how many squeue calls fail next, sinfo's lines. No job
ever runs: a test finishes one by writing its result and taking it out of the queue."""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
import sys
from contextlib import contextmanager
from pathlib import Path

COMMANDS = ("sbatch", "squeue", "sinfo", "scancel", "srun")
"""srun only has to exist (submitit looks for it on the PATH to tell that it is on a cluster); it runs nothing."""
SINFO = "debug*|2|21694|(null)|infinite\n"
"""One partition: 2 CPUs and 21 GB a node, no GPUs, no time limit (what scripts/slurm_localhost.sh configures)."""


def install(folder: Path) -> Path:
    """The fake commands in FOLDER/bin and an empty queue; returns the bin folder."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in COMMANDS:
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} {folder} {name} "$@"\n')
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    (folder / "state.json").write_text(json.dumps(
        {"next": 100, "jobs": {}, "scripts": [], "squeue_failures": 0, "sinfo": SINFO, "cancelled": [],
         "reason": "Priority"}))  # fmt: skip
    return bin_dir


@contextmanager
def state(folder: Path):
    """The shared state, read and written back under a lock (the commands and the test may race)."""
    with open(folder / "state.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = folder / "state.json"
        data = json.loads(path.read_text())
        yield data
        path.write_text(json.dumps(data))


def sbatch(folder: Path, args: list[str]) -> int:
    script = Path(args[-1]).read_text()
    options = dict(re.findall(r"^#SBATCH --([\w-]+)(?:=(.*))?$", script, re.M))
    with state(folder) as s:
        job_id = str(s["next"])
        s["next"] += 1
        s["scripts"].append(script)
        array = re.match(r"0-(\d+)", options.get("array", ""))
        ids = [f"{job_id}_{i}" for i in range(int(array.group(1)) + 1)] if array else [job_id]
        for i in ids:
            s["jobs"][i] = {"state": "PENDING", "reason": s["reason"], "name": options.get("job-name", ""),
                            "comment": options.get("comment", "")}  # fmt: skip
    print(f"Submitted batch job {job_id}")
    return 0


def squeue(folder: Path, args: list[str]) -> int:
    with state(folder) as s:
        if s["squeue_failures"] > 0:
            s["squeue_failures"] -= 1
            print("squeue: error: Unable to contact slurm controller (connect failure)", file=sys.stderr)
            return 1
        jobs = dict(s["jobs"])
    fields = {"%i": "id", "%T": "state", "%r": "reason", "%j": "name", "%k": "comment"}
    form = args[args.index("-o") + 1]
    for job_id, job in jobs.items():
        values = {**job, "id": job_id}
        print(re.sub(r"%[iTrjk]", lambda m, v=values: v[fields[m.group()]], form))
    return 0


def sinfo(folder: Path, args: list[str]) -> int:
    with state(folder) as s:
        print(s["sinfo"], end="")
    return 0


def scancel(folder: Path, args: list[str]) -> int:
    with state(folder) as s:
        for job_id in [a for a in args if not a.startswith("-")]:
            s["cancelled"].append(job_id)
            s["jobs"].pop(job_id, None)
    return 0


def srun(folder: Path, args: list[str]) -> int:
    print("fake srun: no job runs here", file=sys.stderr)
    return 1


if __name__ == "__main__":
    root, command = Path(sys.argv[1]), sys.argv[2]
    os.environ.pop("SLURM_CONF", None)
    commands = {"sbatch": sbatch, "squeue": squeue, "sinfo": sinfo, "scancel": scancel, "srun": srun}
    sys.exit(commands[command](root, sys.argv[3:]))
