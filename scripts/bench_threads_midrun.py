"""Busy work that starts and ends while a run trains: the `cpu` preset on the built-in corpus with 1 thread, 2
threads and `train.threads=auto`, while a busy process (a Python loop spinning on one core) starts after
`--quiet-seconds` and stops `--busy-seconds` later. Reads each run's metrics.jsonl (tokens/s and threads of every
logged window) and prints a table of steps per second before, during and after the busy spell; the table in
docs/benchmarks.md ("Threads", "auto follows the load") comes from this script.

    python scripts/bench_threads_midrun.py --steps 3000 --quiet-seconds 20 --busy-seconds 40

Run it on a machine with nothing else running (OMP_NUM_THREADS unset): the busy process is the only other work.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPIN = "while True: pass"


def run_once(threads: str, args, root: Path) -> list[tuple[float, dict]]:
    """One run under `threads`, the busy spell timed from its start; returns (seconds since start, row) per row."""
    out = root / f"threads-{threads}"
    shutil.rmtree(out, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    command = [sys.executable, "-m", "electra.cli", "pretrain", "--config", "cpu", "--out", str(out), "--quiet",
               "--max-steps", str(args.steps), "--set", f"train.threads={threads}", "--set", "train.log_every=50",
               "--set", "train.eval_every=100000", "--set", "train.save_every=100000"]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen: dict[int, float] = {}
    spinner = None
    while proc.poll() is None:
        now = time.monotonic() - start
        if spinner is None and now >= args.quiet_seconds:
            spinner = subprocess.Popen([sys.executable, "-c", SPIN])
        if spinner is not None and spinner.poll() is None and now >= args.quiet_seconds + args.busy_seconds:
            spinner.kill()
        for row in _rows(out):
            seen.setdefault(row["step"], now)
        time.sleep(0.2)
    if spinner is not None and spinner.poll() is None:
        spinner.kill()
    said = proc.stderr.read()
    if proc.returncode != 0:
        raise SystemExit(f"threads={threads}: exit {proc.returncode}\n{said[-2000:]}")
    changes = [line.split("electra.pretrain: ", 1)[-1] for line in said.splitlines() if " -> " in line]
    print(f"threads={threads}: {len(changes)} change(s): {'; '.join(changes) or 'none'}", file=sys.stderr)
    return [(seen.get(row["step"], float("nan")), row) for row in _rows(out)]


def _rows(run: Path) -> list[dict]:
    try:
        lines = (run / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return []
    return [r for r in (json.loads(line) for line in lines if line.strip()) if "tokens_per_s" in r]


def phase_rate(rows: list[tuple[float, dict]], start: float, end: float, per_step_tokens: int) -> str:
    """Steps per second of the windows logged between `start` and `end` seconds, and the threads they ran with."""
    inside = [r for t, r in rows if start <= t < end]
    if not inside:
        return "n/a"
    rate = sum(r["tokens_per_s"] for r in inside) / len(inside) / per_step_tokens
    threads = sorted({r.get("threads") for r in inside})
    return f"{rate:.1f} ({'/'.join(map(str, threads))})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--quiet-seconds", type=float, default=20.0)
    p.add_argument("--busy-seconds", type=float, default=40.0)
    p.add_argument("--settle-seconds", type=float, default=5.0, help="left out after each change of load")
    args = p.parse_args()
    from electra.config import load_config

    cfg = load_config("cpu")
    per_step = cfg.train.batch_size * cfg.data.seq_len
    root = Path(tempfile.mkdtemp(prefix="bench-midrun-"))
    q, b, s = args.quiet_seconds, args.busy_seconds, args.settle_seconds
    print("| threads | before (idle) | busy process running | after it ended |")
    print("|---|---|---|---|")
    for threads in ("1", "2", "auto"):
        rows = run_once(threads, args, root)
        cells = [phase_rate(rows, s, q, per_step), phase_rate(rows, q + s, q + b, per_step),
                 phase_rate(rows, q + b + s, float("inf"), per_step)]  # fmt: skip
        print(f"| {threads} | " + " | ".join(cells) + " |", flush=True)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
