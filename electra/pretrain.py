"""`electra pretrain`: one explicit loop for replaced-token-detection pretraining (SPEC §2, §4).

Single process:   electra pretrain --config small --data DATA --out RUN
Several GPUs:     torchrun --nproc_per_node 4 -m electra.pretrain --config small --data DATA --out RUN

Exactness by construction: step s trains on the global example ids [s * B, (s + 1) * B); each rank takes its
contiguous share and splits it into micro-batches; masking and sampling are keyed per example (masking.py); each
micro-batch's loss is divided by the target counts of the whole global batch, summed over ranks by one all-reduce
of two numbers before the forward passes. So accumulation and DDP give the big-batch gradient, and a resumed run
(model, optimizer, scaler, RNG and step restored) continues bit for bit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from electra import checkpoint as ckpt_io
from electra.config import PretrainConfig, load_config
from electra.data import PretrainingData, TokenizerInfo
from electra.memory import estimate_peak_bytes, keep_freed_memory_in_heap
from electra.model import STAT_NAMES, ElectraForPretraining, metrics_from_stats
from electra.monitor import batch_to_device, masked_batch, open_loggers, watch_collapse, write_metrics
from electra.optim import build_optimizer, clip_and_step, learning_rate, set_learning_rate

log = logging.getLogger("electra.pretrain")


class NonFiniteError(RuntimeError):
    pass


# -- setup ----------------------------------------------------------------------------------------------------


def init_distributed(device: str | None) -> tuple[int, int, torch.device]:
    """(rank, world size, device). Under torchrun: NCCL on CUDA, gloo on CPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    if device is None:
        device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
    return rank, world, dev


def resolve_precision(precision: str, device: torch.device) -> str:
    if precision != "auto":
        if precision != "fp32" and device.type != "cuda":
            raise ValueError(f"precision {precision} needs a CUDA device; use fp32 on {device}")
        return precision
    return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"


def micro_batch_size(cfg: PretrainConfig, per_rank: int, device: torch.device) -> int:
    """The micro-batch: given, or the largest divisor of the per-rank batch that fits --max-memory-gb."""
    t = cfg.train
    if t.micro_batch_size is not None:
        return t.micro_batch_size
    if t.max_memory_gb is None:
        return per_rank
    for m in sorted((d for d in range(1, per_rank + 1) if per_rank % d == 0), reverse=True):
        if estimate_peak_bytes(cfg, m) <= t.max_memory_gb * 2**30:
            return m
    raise ValueError(f"even a micro-batch of 1 does not fit in {t.max_memory_gb} GB")


def open_data(cfg: PretrainConfig) -> PretrainingData:
    from electra.data import open_pretraining_data

    return open_pretraining_data(cfg.data, cfg.train.seed)


def code_revision() -> str:
    try:
        root = Path(__file__).resolve().parents[1]
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()  # fmt: skip
        return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# -- the loop -------------------------------------------------------------------------------------------------


def pretrain(cfg: PretrainConfig, run_dir: str | Path, resume: str | None = None, device: str | None = None,
             loggers: tuple[str, ...] = ()) -> dict:  # fmt: skip
    """Train for cfg.train.max_steps optimizer steps into `run_dir`; returns the final run metadata."""
    run_dir = Path(run_dir)
    rank, world, dev = init_distributed(device)
    main_process = rank == 0
    t = cfg.train

    data = open_data(cfg)
    tokens = data.tokens
    if cfg.model.vocab_size != tokens.vocab_size:
        log.info("model.vocab_size set to the tokenizer's %d (was %d)", tokens.vocab_size, cfg.model.vocab_size)
        cfg.model.vocab_size = tokens.vocab_size
    if t.batch_size % world:
        raise ValueError(f"batch size {t.batch_size} does not divide over {world} processes")
    per_rank = t.batch_size // world
    micro = micro_batch_size(cfg, per_rank, dev)
    if per_rank % micro:
        raise ValueError(f"micro-batch {micro} does not divide the per-process batch {per_rank}")
    accum = per_rank // micro
    precision = resolve_precision(t.precision, dev)
    autocast = (torch.autocast(dev.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)
                if precision in ("bf16", "fp16") else contextlib.nullcontext())  # fmt: skip

    torch.manual_seed(t.seed + rank)  # dropout differs per rank; data and masks are keyed, not drawn
    raw_model = ElectraForPretraining(cfg.model, cfg.objective).to(dev)
    optimizer = build_optimizer(raw_model, t, dev)
    scaler = torch.amp.GradScaler(dev.type, enabled=precision == "fp16")
    meta = {"step": 0, "samples": 0, "nonfinite_skipped": 0, "collapsed": False, "collapse_streak": 0,
            "collapse_first_step": None, "code_revision": code_revision(), "world_size": world}  # fmt: skip

    start = 0
    checkpoints = ckpt_io.list_checkpoints(run_dir)
    if resume is None and checkpoints:
        raise ValueError(f"{run_dir} already holds checkpoints: pass --resume auto to continue, or another --out")
    if resume is not None:
        loaded = ckpt_io.restore_training_state(
            run_dir if resume == "auto" else Path(resume), cfg, raw_model, optimizer, scaler, rank, world
        )
        if loaded is not None:
            meta = loaded
            start = meta["step"]
    if main_process:
        prepare_run_dir(run_dir, cfg, tokens, meta)
    if world > 1:
        dist.barrier()

    model = raw_model
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            raw_model, device_ids=[dev.index] if dev.type == "cuda" else None
        )
    if t.compile:
        model = torch.compile(model, dynamic=False)

    stop = {"signal": None}
    handlers = {s: signal.signal(s, lambda num, _: stop.update(signal=num)) for s in (signal.SIGTERM, signal.SIGINT)}
    writers = open_loggers(loggers, run_dir, cfg) if main_process else []
    special = torch.tensor(tokens.special_ids, device=dev)
    window = torch.zeros(len(STAT_NAMES), device=dev)  # summed stats since the last log line, on device
    norm_sum = torch.zeros((), device=dev)  # gradient norms of the updates applied since the last log line
    updates = torch.zeros((), device=dev)  # and how many there were
    window_steps, window_start = 0, time.perf_counter()
    nonfinite = torch.tensor(meta["nonfinite_skipped"], device=dev)  # skipped updates, on device
    nonfinite_streak = torch.tensor(meta.get("consecutive_nonfinite", 0), device=dev)
    flops_per_step = training_flops_per_step(cfg)
    bar = tqdm(total=t.max_steps, initial=start, desc="pretrain", disable=not main_process, dynamic_ncols=True)
    raw_model.train()
    params = list(raw_model.parameters())
    step = start
    try:
        for step in range(start, t.max_steps):
            lr = learning_rate(step, t)
            set_learning_rate(optimizer, lr)
            first = step * t.batch_size + rank * per_rank
            ids = np.arange(first, first + per_rank, dtype=np.int64)
            micro_ids = np.split(ids, accum)
            batches = [batch_to_device(data.train.examples(i), i, dev) for i in micro_ids]
            masked = [masked_batch(cfg, tokens, b, special) for b in batches]
            # the global target counts of this optimizer step, so that every micro-batch's loss is a share
            counts = torch.stack([sum(m.weights.sum() for m in masked), sum(m.disc_mask.sum() for m in masked)])
            counts = counts.float()
            if world > 1:
                dist.all_reduce(counts)
            mlm_norm, disc_norm = counts[0].clamp(min=1), counts[1].clamp(min=1)
            step_stats = torch.zeros(len(STAT_NAMES), device=dev)
            for i, (b, m) in enumerate(zip(batches, masked, strict=True)):
                sync = world == 1 or i == accum - 1
                with contextlib.nullcontext() if sync else model.no_sync(), autocast:
                    out = model(b["input_ids"], b["attention_mask"], b["token_type_ids"], m, mlm_norm, disc_norm)
                # DDP averages gradients over ranks; our losses are already shares of the global batch
                scaler.scale(out.loss * world).backward()
                step_stats += torch.stack([out.stats[k] for k in STAT_NAMES])
            # A non-finite loss or gradient skips the update, decided on the device: no host sync in the step.
            # The counts are read, and the run stopped after too many in a row, at the next log line or save.
            grad_norm, bad = clip_and_step(optimizer, scaler, params, t.grad_clip)
            nonfinite += bad
            nonfinite_streak.add_(1).mul_(bad)
            window += torch.where(bad, 0.0, step_stats)
            norm_sum += torch.where(bad, 0.0, grad_norm)
            updates += ~bad
            meta["step"], meta["samples"] = step + 1, (step + 1) * t.batch_size
            window_steps += 1
            bar.update(1)
            done = step + 1

            signalled = stop["signal"]  # read once: a signal arriving later is handled after the next step
            log_now = done % t.log_every == 0 or done == t.max_steps
            save_now = done % t.save_every == 0 or done == t.max_steps or signalled is not None
            if log_now or save_now:
                settle_nonfinite(nonfinite, nonfinite_streak, meta, t.max_nonfinite, done, run_dir)
            if log_now:
                stats = window.clone()
                if world > 1:
                    dist.all_reduce(stats)
                metrics = metrics_from_stats(dict(zip(STAT_NAMES, stats.tolist(), strict=True)))
                elapsed = time.perf_counter() - window_start
                row = {"step": done, "lr": lr, "grad_norm": (norm_sum / updates.clamp(min=1)).item(), **metrics,
                       "tokens_per_s": window_steps * t.batch_size * cfg.data.seq_len / elapsed,
                       "samples": meta["samples"], "flops": flops_per_step * done,
                       "nonfinite_skipped": meta["nonfinite_skipped"]}  # fmt: skip
                if main_process:
                    write_metrics(run_dir, row, writers)
                    bar.set_postfix(mlm=f"{row['mlm_loss']:.3f}", disc=f"{row['disc_loss']:.3f}",
                                    recall=f"{row['disc_recall']:.2f}")  # fmt: skip
                window.zero_()
                norm_sum.zero_()
                updates.zero_()
                window_steps, window_start = 0, time.perf_counter()

            if done % t.eval_every == 0 or done == t.max_steps:
                watch_collapse(raw_model, data, cfg, tokens, dev, autocast, meta, run_dir, writers, main_process, done)
            if save_now:
                ckpt_io.save_training_state(run_dir, cfg, raw_model, optimizer, scaler, meta, rank, world)
            if signalled is not None:
                log.warning("signal %s: saved step %d and stopped; continue with --resume auto", signalled, done)
                meta["stopped_by_signal"] = int(signalled)
                break
            if meta["collapsed"] and t.stop_on_collapse:
                log.warning("stopping: the discriminator collapsed (train.stop_on_collapse)")
                break
    finally:
        bar.close()
        for s, h in handlers.items():
            signal.signal(s, h)
        for w in writers:
            w.close()
    if main_process and meta["step"] == t.max_steps:
        from electra.hf_compat import to_hf

        to_hf(raw_model, run_dir / "hf", run_dir / "tokenizer" if (run_dir / "tokenizer").exists() else None)
    if world > 1:
        dist.barrier()
    return meta


def settle_nonfinite(nonfinite: torch.Tensor, streak: torch.Tensor, meta: dict, limit: int, done: int,
                     run_dir: Path) -> None:  # fmt: skip
    """Read the on-device counts of skipped updates into `meta` (a host sync); stop when `limit` came in a row."""
    total, in_a_row = torch.stack([nonfinite, streak]).tolist()
    if total > meta["nonfinite_skipped"]:
        log.warning("%d updates skipped up to step %d: non-finite loss or gradients (%d in a row now)",
                    total - meta["nonfinite_skipped"], done, in_a_row)  # fmt: skip
    meta["nonfinite_skipped"], meta["consecutive_nonfinite"] = total, in_a_row
    if in_a_row >= limit:
        raise NonFiniteError(
            f"stopped at step {done}: the last {in_a_row} steps had non-finite loss or gradients (limit {limit}); "
            f"the last checkpoint in {run_dir / 'checkpoints'} is intact (lower the learning rate, or use bf16/fp32)"
        )


# -- run folder, checkpoints, logging -------------------------------------------------------------------------


def prepare_run_dir(run_dir: Path, cfg: PretrainConfig, tokens: TokenizerInfo, meta: dict) -> None:
    """Make the run folder self-contained: resolved config, a copy of the tokenizer, run metadata."""
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt_io.save_config(cfg, run_dir / "config.yaml")
    if tokens.path is not None and not (run_dir / "tokenizer").exists():
        shutil.copytree(tokens.path, run_dir / "tokenizer")
    ckpt_io.write_atomic(run_dir / "run.json", json.dumps(meta, indent=2))


def training_flops_per_step(cfg: PretrainConfig) -> float:
    from electra.flops import pretrain_step_flops

    return float(pretrain_step_flops(cfg, cfg.train.batch_size, cfg.data.seq_len))


# -- command line ---------------------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="small", help="a preset (tiny, small, small++, base, large) or a YAML file")
    p.add_argument("--data", help="a folder from `electra data prepare` (default: the built-in synthetic corpus)")
    p.add_argument("--out", required=True, help="the run folder")
    p.add_argument("--max-steps", type=int, help="optimizer steps (train.max_steps)")
    p.add_argument("--seed", type=int)
    p.add_argument("--batch-size", type=int, help="global batch in sequences (train.batch_size)")
    p.add_argument("--micro-batch-size", type=int, help="sequences per forward pass on one device")
    p.add_argument("--max-memory-gb", type=float, help="choose the micro-batch to fit this GPU memory budget")
    p.add_argument("--save-every", type=int)
    p.add_argument("--eval-every", type=int)
    p.add_argument("--log-every", type=int)
    p.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"])
    p.add_argument("--compile", action="store_true", default=None, help="torch.compile the model")
    p.add_argument("--resume", help="'auto' (newest valid checkpoint of --out) or a checkpoint folder")
    p.add_argument("--device", help="e.g. cpu, cuda, cuda:1 (default: cuda if available)")
    p.add_argument("--tensorboard", action="store_true", help="also log to RUN/tensorboard")
    p.add_argument("--wandb", action="store_true", help="also log to Weights & Biases (offline unless WANDB_MODE)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any config value, e.g. --set model.generator_fraction=1.0 (repeatable)")  # fmt: skip


FLAG_KEYS = {
    "data": "data.path", "max_steps": "train.max_steps", "seed": "train.seed", "batch_size": "train.batch_size",
    "micro_batch_size": "train.micro_batch_size", "max_memory_gb": "train.max_memory_gb",
    "save_every": "train.save_every", "eval_every": "train.eval_every", "log_every": "train.log_every",
    "precision": "train.precision", "compile": "train.compile",
}  # fmt: skip


def run(args: argparse.Namespace) -> int:
    overrides = [f"{key}={getattr(args, flag)}" for flag, key in FLAG_KEYS.items() if getattr(args, flag) is not None]
    cfg = load_config(args.config, overrides + args.set)
    loggers = tuple(n for n in ("tensorboard", "wandb") if getattr(args, n))
    keep_freed_memory_in_heap()  # process-wide: faster CPU steps (docs/benchmarks.md); host memory only on a GPU
    try:
        meta = pretrain(cfg, args.out, resume=args.resume, device=args.device, loggers=loggers)
    except NonFiniteError as err:
        print(f"electra pretrain: {err}", file=sys.stderr)
        return 3
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if meta.get("stopped_by_signal"):
        print(f"stopped at step {meta['step']} by signal {meta['stopped_by_signal']}; continue with --resume auto")
        return 128 + meta["stopped_by_signal"]
    status = "the discriminator collapsed: see run.json" if meta["collapsed"] else "ok"
    print(f"finished step {meta['step']} ({status}); run folder {args.out}")
    return 0


if __name__ == "__main__":  # torchrun -m electra.pretrain ...
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="electra pretrain")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
