"""Measure a pretraining step's peak resident memory on CPU against `estimate_peak_bytes` (docs/benchmarks.md).

Each point runs in a fresh process: the `small` preset at length 128 on the prepared corpus `--data` (its tokenizer
sets the vocabulary: OFF's 30,522 for the real shape; without --data, the built-in corpus's few hundred), one step
of `micro` sequences (or of `--batch` sequences in micro-batches of `micro`), one held-out evaluation, the
checkpoint and the HF export. It prints, per point, the process's resident memory before the run (interpreter,
torch), its peak (VmHWM), the difference and the estimate.

    .venv/bin/electra tokenizer train --kind wordpiece --vocab-size 30522 --out runs/tok30k TEXT
    .venv/bin/electra data prepare --tokenizer runs/tok30k --out runs/data30k TEXT
    .venv/bin/python scripts/measure_cpu_memory.py --data runs/data30k --micro 4 8 16 32 --precision fp32 bf16
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, os, resource, sys, tempfile
import torch
torch.set_num_threads(1)
from pathlib import Path
from electra.config import load_config
from electra.training.checkpoint import read_config
from electra.training.loop import pretrain
from electra.training.memory import estimate_peak_bytes, process_peak_bytes
micro, precision, data, batch = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
cfg = load_config("small", [f"train.batch_size={batch or micro}", f"train.micro_batch_size={micro}",
                            "train.max_steps=1", "train.eval_every=1",
                            f"train.precision={precision}", "train.save_every=1000"]
                           + ([f"data.path={data}"] if data else []))
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
before = rss()
with tempfile.TemporaryDirectory() as out:
    pretrain(cfg, out, device="cpu", progress=False)
    cfg = read_config(Path(out) / "config.yaml")  # the vocabulary the tokenizer set
peak = process_peak_bytes()
print(json.dumps({"batch": batch or micro, "micro": micro, "precision": precision, "vocab": cfg.model.vocab_size,
                  "before_gib": before / 2**30, "peak_gib": peak / 2**30, "step_gib": (peak - before) / 2**30,
                  "estimate_gib": estimate_peak_bytes(cfg, micro, precision, "cpu") / 2**30}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--micro", type=int, nargs="+", default=[4, 8, 16, 32])
    p.add_argument("--precision", nargs="+", default=["fp32", "bf16"])
    p.add_argument("--data", default="", help="a prepared corpus (default: the built-in one)")
    p.add_argument("--batch", type=int, default=0, help="sequences a step, in micro-batches (default: one)")
    args = p.parse_args()
    for precision in args.precision:
        for micro in args.micro:
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(micro), precision, args.data, str(args.batch)],
                capture_output=True,
                text=True,
            )
            if out.returncode:
                sys.exit(out.stderr[-2000:])
            row = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)


if __name__ == "__main__":
    main()
