"""Steps per second of the pretraining step at 1 and 2 threads and under `train.threads=auto`, on an idle machine
and beside 1 and 2 busy processes (each a Python loop spinning on one core, as a compile or a browser tab would
keep one busy), for the shapes a CPU user runs: the `cpu` preset, its 4 x 128 size, and `small` (12 x 256) at a
reduced batch. The table in docs/benchmarks.md ("Threads") comes from this script.

    OMP_NUM_THREADS= python scripts/bench_threads.py --seconds 4

Each cell: a fresh process times the loop's step (electra.training.timing.make_pretrain_step) for `--seconds`
after two untimed steps. `auto` is what a run would choose in that situation (electra.utils.machine
choose_threads), measured the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SHAPES = {
    "cpu (2 x 64, batch 64 x 32)": ("cpu", []),
    "4 x 128 (batch 64 x 32)": (
        "cpu",
        [
            "model.num_layers=4",
            "model.hidden_size=128",
            "model.num_heads=2",
            "model.intermediate_size=512",
            "model.embedding_size=128",
        ],
    ),
    "small (12 x 256, batch 8 x 128)": ("small", ["train.batch_size=8"]),
}

CELL = """
import json, sys, time, torch
from electra.config import load_config
from electra.training.timing import make_pretrain_step
from electra.utils.machine import choose_threads
preset, overrides, threads, seconds = json.loads(sys.argv[1])
chosen, why = choose_threads(threads)
cfg = load_config(preset, overrides + ["train.precision=fp32"])
step = make_pretrain_step("ours", cfg, cfg.train.batch_size, torch.device("cpu"), "fp32", False)
step(0); step(1)
n, start = 0, time.perf_counter()
while time.perf_counter() - start < seconds:
    step(2 + n); n += 1
print(json.dumps({"steps_per_s": n / (time.perf_counter() - start), "threads": chosen, "why": why}))
"""


def cell(preset: str, overrides: list[str], threads: int | str, seconds: float) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", CELL, json.dumps([preset, overrides, threads, seconds])],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--busy", default="0,1,2", help="numbers of busy processes beside the measured one")
    args = p.parse_args()
    from electra.utils.machine import cpu_model
    from electra.utils.processes import usable_cpus

    print(f"# {cpu_model()}, {usable_cpus()} usable cores; steps/s (auto: the threads it chose)")
    print("| shape | busy processes | 1 thread | 2 threads | auto |")
    print("|---|---|---|---|---|")
    for busy in map(int, args.busy.split(",")):
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        try:
            time.sleep(1.0 if busy else 0.0)
            for name, (preset, overrides) in SHAPES.items():
                one, two, auto = (cell(preset, overrides, t, args.seconds) for t in (1, 2, "auto"))
                print(
                    f"| {name} | {busy} | {one['steps_per_s']:.2f} | {two['steps_per_s']:.2f} | "
                    f"{auto['steps_per_s']:.2f} ({auto['threads']}) |",
                    flush=True,
                )
        finally:
            for s in spinners:
                s.kill()


if __name__ == "__main__":
    main()
