"""`electra glue`: fine-tune one pretrained model on tasks x seeds, each run resumable, then report.

    OUT/sweep.json                       what this folder holds (model, hyperparameters, their fingerprint)
    OUT/runs/TASK/seedS/result.json      one finished run, written atomically when it finishes
    OUT/runs/TASK/seedS/claim            the process working on it (several processes can share OUT)
    OUT/runs/TASK/seedS/failed.json      a run that failed (non-finite loss); retried next time
    OUT/results.{json,csv,md}            the report, rewritten after every finished run
    OUT/submission/, glue_submission.zip test predictions in the GLUE server format (--predict-test)

A rerun with the same --out skips finished runs and takes over runs whose claiming process died, so a killed
sweep resumes where it stopped. `--num-workers K` or `--devices cuda:0,cuda:1` start one process per worker;
they divide the runs among themselves through the claim files (so do separate `electra glue` commands, e.g. on
several machines sharing OUT).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch

from electra.files import write_atomic
from electra.glue.finetune import FinetuneConfig, Pretrained, finetune, load_pretrained, prepare
from electra.glue.heads import HEADS
from electra.glue.loading import load_task
from electra.glue.optim import CONVENTIONS
from electra.glue.report import write_report
from electra.glue.submission import write_submission
from electra.glue.tasks import GLUE_TASKS, resolve_tasks
from electra.memory import keep_freed_memory_in_heap

log = logging.getLogger("electra.glue")

# Fields that change what a run computes; the others (outputs, eval batch size) may differ between reruns.
_NOT_FINGERPRINTED = ("predict_test", "save_model", "eval_every_epoch", "eval_batch_size")


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = FinetuneConfig()
    p.add_argument("--model", help="a pretraining run folder, a checkpoint, our HF export, or a transformers ELECTRA "
                   "folder (required unless --report-only)")
    p.add_argument("--tasks", default="all",
                   help=f"all, or a comma list of {','.join(GLUE_TASKS)} and task folders holding a task.json")
    p.add_argument("--glue-dir", default=None,
                   help="GLUE data in the original TSV layout (CoLA/, SST-2/, ...); default: nyu-mll/glue from the hub")
    p.add_argument("--seeds", default="5", help="N for seeds 0..N-1, or a comma list of seeds (default 5)")
    p.add_argument("--out", required=True, help="output folder; rerunning with the same folder resumes")
    p.add_argument("--tokenizer", default=None, help="tokenizer folder, if none comes with the model")
    g = p.add_argument_group("fine-tuning (defaults: the ELECTRA paper's for Small)")
    g.add_argument("--head", choices=HEADS, default=d.head, help="cls-linear: OFF; mean-mlp: RC; hf: transformers")
    g.add_argument("--lr", type=float, default=d.lr)
    g.add_argument("--layer-decay", type=float, default=d.layer_decay, help="layer-wise lr decay (1 disables)")
    g.add_argument("--depth-convention", choices=CONVENTIONS, default=d.depth_convention,
                   help="paper: top layer lr*d; original: OFF's code, one step lower; study: RC, top layer lr")
    g.add_argument("--batch-size", type=int, default=d.batch_size)
    g.add_argument("--epochs", type=int, default=None, help="default: the task's (3; 10 for RTE and STS-B)")
    g.add_argument("--warmup-fraction", type=float, default=d.warmup_fraction)
    g.add_argument("--weight-decay", type=float, default=d.weight_decay)
    g.add_argument("--decay-norm-and-bias", action="store_true", help="also decay LayerNorm and bias (OFF does not)")
    g.add_argument("--grad-clip", type=float, default=d.grad_clip)
    g.add_argument("--max-length", type=int, default=d.max_length)
    g.add_argument("--no-stsb-scale", action="store_true", help="train STS-B on raw 0-5 scores (OFF divides by 5)")
    g.add_argument("--swap-pairs", action="store_true", help="MRPC/STS-B: also train on swapped pairs (OFF default)")
    g.add_argument("--max-steps", type=int, default=None, help="cap on optimizer steps per run (smoke runs)")
    g.add_argument("--eval-every-epoch", action="store_true")
    g.add_argument("--eval-batch-size", type=int, default=d.eval_batch_size)
    g.add_argument("--precision", choices=("auto", "fp32", "bf16"), default=d.precision)
    g.add_argument("--predict-test", action="store_true",
                   help="write test predictions and OUT/glue_submission.zip (GLUE server format)")
    g.add_argument("--save-models", action="store_true",
                   help="keep each fine-tuned model (hf head: as transformers ElectraForSequenceClassification)")
    x = p.add_argument_group("execution")
    x.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1, ...")
    x.add_argument("--devices", default=None,
                   help="comma list, one worker process per entry (repeat a device for two workers on it)")
    x.add_argument("--num-workers", type=int, default=1, help="worker processes sharing the runs")
    x.add_argument("--stop-after", type=int, default=None, help="stop after this many runs (resume later)")
    x.add_argument("--no-progress", action="store_true", help="no progress bars")
    x.add_argument("--report-only", action="store_true", help="rewrite the report from the finished runs")


def config_from_args(args: argparse.Namespace) -> FinetuneConfig:
    return FinetuneConfig(
        head=args.head, lr=args.lr, layer_decay=args.layer_decay, depth_convention=args.depth_convention,
        batch_size=args.batch_size, epochs=args.epochs, warmup_fraction=args.warmup_fraction,
        weight_decay=args.weight_decay, decay_norm_and_bias=args.decay_norm_and_bias, grad_clip=args.grad_clip,
        max_length=args.max_length, stsb_scale=not args.no_stsb_scale, swap_pairs=args.swap_pairs,
        max_steps=args.max_steps, eval_every_epoch=args.eval_every_epoch, eval_batch_size=args.eval_batch_size,
        precision=args.precision, predict_test=args.predict_test, save_model=args.save_models,
    )  # fmt: skip


def parse_seeds(text: str) -> list[int]:
    try:
        if "," in text:
            seeds = [int(s) for s in text.split(",") if s.strip()]
        else:
            seeds = list(range(int(text)))
    except ValueError:
        raise ValueError(f"--seeds {text!r}: expected a count or a comma list of integers") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ValueError(f"--seeds {text!r}: need at least one seed, distinct and non-negative")
    return seeds


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    cfg = config_from_args(args)
    if args.report_only:
        return finish(out, cfg, read_header(out))
    if not args.model:
        raise ValueError("--model is required (a run folder, a checkpoint or an HF folder)")
    seeds = parse_seeds(args.seeds)
    specs, skipped = resolve_tasks(args.tasks, args.glue_dir)
    for name in skipped:
        log.warning("skipping %s: no %s data in %s", name, name, args.glue_dir)
    header = check_sweep_header(out, args, cfg)
    # Read (and so validate) every file before any training: a malformed row fails now, not hours in.
    data = {s.task.name: load_task(s, with_test=cfg.predict_test) for s in specs}
    for name, d in data.items():
        print(f"{name}: {d.n_train} train / {d.n_eval} dev examples" + (f", test {list(d.test)}" if d.test else ""))
    pending = [(t, s) for t in data for s in seeds if not (run_dir(out, t, s) / "result.json").exists()]
    pretrained = load_pretrained(args.model, args.tokenizer) if pending else None  # a bad model fails now
    devices = args.devices.split(",") if args.devices else []
    workers = len(devices) if devices else args.num_workers
    if workers > 1 and not getattr(args, "worker", False):
        codes = spawn_workers(out, args, devices or [args.device] * workers)
        if any(codes):
            log.error("worker processes exited with %s; rerun the same command to resume", codes)
            finish(out, cfg, header)
            return 1
    else:
        work(out, args, cfg, header, data, seeds, resolve_device(args.device), pretrained)
    return finish(out, cfg, header)


def work(
    out: Path, args, cfg: FinetuneConfig, header: dict, data: dict, seeds: list[int], device,
    pretrained: Pretrained | None = None,
) -> None:  # fmt: skip
    """This process's share of the sweep: every (task, seed) not finished and not claimed by a live process."""
    keep_freed_memory_in_heap()  # process-wide: faster CPU steps (docs/benchmarks.md); host memory only on a GPU
    todo = [(t, s) for t in data for s in seeds]
    done = [(t, s) for t, s in todo if (run_dir(out, t, s) / "result.json").exists()]
    if done:
        print(f"skipping {len(done)} finished run(s) in {out}")
    prepared, finished = {}, 0
    for i, (task, seed) in enumerate(todo, 1):
        rdir = run_dir(out, task, seed)
        if (rdir / "result.json").exists() or not claim(rdir):
            continue
        try:
            if pretrained is None:
                pretrained = load_pretrained(args.model, args.tokenizer)
            if task not in prepared:
                prepared[task] = prepare(data[task], pretrained.tokenizer, cfg)
            record = finetune(prepared[task], pretrained, cfg, seed, device, rdir, progress=not args.no_progress)
            record.update(fingerprint=header["fingerprint"], config=dataclasses.asdict(cfg), model=args.model,
                          worker={"pid": os.getpid(), "host": socket.gethostname()})
            write_atomic(rdir / "result.json", json.dumps(record, indent=1) + "\n")
            (rdir / "failed.json").unlink(missing_ok=True)
            print(f"[{i}/{len(todo)}] {summary_line(record)}", flush=True)
        except FloatingPointError as err:  # this run diverged; the others may not
            write_atomic(rdir / "failed.json", json.dumps({"task": task, "seed": seed, "error": str(err)}) + "\n")
            log.error("%s", err)
        finally:
            (rdir / "claim").unlink(missing_ok=True)
        finished += 1
        write_report(out, *collect(out), header)
        if args.stop_after is not None and finished >= args.stop_after:
            print(f"stopping after {finished} run(s) (--stop-after); rerun the same command to continue")
            break


def summary_line(r: dict) -> str:
    scores = ", ".join(f"{k} {v:.2f}" for k, v in r["metrics"].items())
    loss = f"loss {r['loss_start']:.3f} -> {r['loss_end']:.3f}" if r["loss_start"] is not None else "no steps"
    line = f"{r['task']} seed {r['seed']}: {scores} | {r['steps']} steps, {loss}, {r['seconds']:.1f} s"
    if r["chance"]["at_chance"]:
        c = r["chance"]
        line += f" | AT CHANCE ({c['metric']} {c['value']:.1f} vs. baseline {c['baseline']:.1f} + {c['margin']:.1f})"
    return line


def finish(out: Path, cfg: FinetuneConfig, header: dict) -> int:
    records, failed = collect(out)
    if not records:
        print(f"no finished runs in {out} yet")
        return 1 if failed else 0
    write_report(out, records, failed, header)
    if cfg.predict_test or any(r.get("test_predictions") for r in records):
        zip_path, missing = write_submission(out, records, lambda t, s: run_dir(out, t, s))
        if zip_path is not None:
            also = f" (the server also needs: {', '.join(missing)})" if missing else ""
            print(f"GLUE submission: {zip_path}{also}")
    md = (out / "results.md").read_text()
    print(md.split("## Configuration")[0].rstrip())
    print(f"\nreport: {out / 'results.md'}, {out / 'results.json'}, {out / 'results.csv'}")
    return 1 if failed else 0


# -- the output folder -------------------------------------------------------------------------------------------


def run_dir(out: Path, task: str, seed: int) -> Path:
    return out / "runs" / task / f"seed{seed}"


def collect(out: Path) -> tuple[list[dict], list[dict]]:
    """Every finished run record and every failure still standing in OUT."""
    records, failed = [], []
    for task_dir in sorted((out / "runs").glob("*")):
        for rdir in sorted(task_dir.glob("seed*")):
            if (rdir / "result.json").exists():
                records.append(json.loads((rdir / "result.json").read_text()))
            elif (rdir / "failed.json").exists():
                failed.append(json.loads((rdir / "failed.json").read_text()))
    return records, failed


def fingerprint(args, cfg: FinetuneConfig) -> tuple[str, dict]:
    fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in _NOT_FINGERPRINTED}
    fields["model"] = str(Path(args.model).resolve())
    fields["tokenizer"] = str(Path(args.tokenizer).resolve()) if args.tokenizer else None
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16], fields


def check_sweep_header(out: Path, args, cfg: FinetuneConfig) -> dict:
    """OUT may only hold runs of one model and one set of hyperparameters: mixing them would corrupt the medians."""
    fp, fields = fingerprint(args, cfg)
    path = out / "sweep.json"
    if path.exists():
        old = json.loads(path.read_text())
        if old["fingerprint"] != fp:
            diff = [f"{k}: {old['fields'].get(k)!r} -> {v!r}" for k, v in fields.items() if old["fields"].get(k) != v]
            raise ValueError(f"{path}:1: this folder holds runs with other settings ({'; '.join(diff)}); "
                             "use another --out")  # fmt: skip
    header = {"model": args.model, "fingerprint": fp, "fields": fields, "config": dataclasses.asdict(cfg)}
    if not getattr(args, "worker", False):
        write_atomic(path, json.dumps(header, indent=1) + "\n")
    return header


def read_header(out: Path) -> dict:
    path = out / "sweep.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no sweep in this folder")
    return json.loads(path.read_text())


def claim(rdir: Path) -> bool:
    """Take the run for this process; False when a live process holds it. A dead holder's claim is taken over."""
    rdir.mkdir(parents=True, exist_ok=True)
    path = rdir / "claim"
    me = {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                holder = json.loads(path.read_text() or "{}")
            except (OSError, json.JSONDecodeError):
                return False  # being written by its holder right now
            if holder.get("host") == me["host"] and not pid_alive(holder.get("pid", -1)):
                log.warning("%s: taking over from process %s, which is gone", rdir, holder.get("pid"))
                path.unlink(missing_ok=True)
                continue
            return False
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        return True
    return False


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- devices and worker processes ---------------------------------------------------------------------------------


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: CUDA is not available")
    return device


def spawn_workers(out: Path, args: argparse.Namespace, devices: list[str]) -> list[int]:
    """One `python -m electra.glue.sweep` process per device; they share the runs through claim files."""
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "worker_args.json"
    write_atomic(spec, json.dumps(vars(args), indent=1))
    threads = max(1, (os.cpu_count() or 1) // len(devices))  # CPU workers split the cores
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    procs = [subprocess.Popen([sys.executable, "-m", "electra.glue.sweep", str(spec), dev], env=env) for dev in devices]
    return [p.wait() for p in procs]


def _worker_main(spec: str, device: str) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = argparse.Namespace(**json.loads(Path(spec).read_text()))
    args.device, args.devices, args.num_workers, args.worker = device, None, 1, True
    out, cfg = Path(args.out), config_from_args(args)
    specs, _ = resolve_tasks(args.tasks, args.glue_dir)
    header = check_sweep_header(out, args, cfg)
    data = {s.task.name: load_task(s, with_test=cfg.predict_test) for s in specs}
    work(out, args, cfg, header, data, parse_seeds(args.seeds), resolve_device(device))
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1], sys.argv[2]))
