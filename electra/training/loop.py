"""Pretraining: one explicit loop for replaced-token detection or the MLM baseline (the ELECTRA paper, sections
2-3; OFF run_pretraining.py), in named phases: `setup` builds a `Run`, `train_step` (electra/training/step.py) makes one
optimizer step, and `pretrain` loops over steps with logging, held-out evaluation and checkpoints.

Single process:   electra pretrain --config small --data DATA --out RUN
Several GPUs:     torchrun --nproc_per_node 4 -m electra.cli pretrain --config small --data DATA --out RUN

Exactness by construction: step s trains on the global example ids [s * B, (s + 1) * B); each rank takes its
contiguous share and splits it into micro-batches; masking and sampling are keyed per example (masking.py); each
micro-batch's loss is divided by the target counts of the whole global batch, summed over ranks by one all-reduce
of two numbers before the forward passes. So accumulation and DDP give the big-batch gradient, and a resumed run
(model, optimizer, scaler, RNG and step restored) continues bit for bit.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import inspect
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn
from tqdm import tqdm

from electra.config import (
    ConfigError,
    PretrainConfig,
    sampling_at,
    schedule_warnings,
)
from electra.data.corpus import TOKENS_FILE, read_metadata
from electra.data.pretraining_data import PretrainingData, open_pretraining_data
from electra.data.tokenizer import TokenizerInfo
from electra.modeling.convert_hf import to_hf
from electra.modeling.electra import ElectraForPretraining, build_model
from electra.modeling.masking import MaskedBatch
from electra.training import checkpoint as ckpt_io
from electra.training import continued
from electra.training import resume as training_state
from electra.training.baseline import write_initialised_run
from electra.training.batches import host_batch, masked_batch, to_device
from electra.training.checkpoint import RunMeta
from electra.training.evaluation import watch_collapse
from electra.training.init_source import Source
from electra.training.memory import estimate_peak_bytes, process_peak_bytes
from electra.training.optim import build_optimizer, learning_rate, peak_lr, set_learning_rate
from electra.training.precision import (
    Precision,
    autocast_for,
    enable_tf32,
    resolve_compile,
    resolve_device,
    resolve_precision,
)
from electra.training.prefetch import Prefetcher
from electra.training.step import Window, train_step
from electra.training.stopping import FAILED, StopVote, agree_on_collapse, agree_on_failure
from electra.training.threads import ThreadWatch
from electra.training.trackers import open_loggers, write_metrics
from electra.utils.faults import failpoint
from electra.utils.files import FolderLock, folder_lock, write_atomic
from electra.utils.machine import choose_threads, describe_machine, threads_kept
from electra.utils.revision import code_revision
from electra.utils.wording import argument

log = logging.getLogger("electra.pretrain")


# -- setup ----------------------------------------------------------------------------------------------------


def init_distributed(device: str | None) -> tuple[int, int, torch.device]:
    """(rank, world size, device). Under torchrun: NCCL on CUDA, gloo on CPU; `device` as `resolve_device`."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local_rank, world)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
    return rank, world, dev


def micro_batch_size(cfg: PretrainConfig, per_rank: int, precision: str, device: torch.device) -> int:
    """The micro-batch: given, or the largest divisor of the per-rank batch whose estimated peak (in the resolved
    `precision`, electra/training/memory.py) fits --max-memory-gb."""
    t = cfg.train
    if t.micro_batch_size is not None:
        return t.micro_batch_size
    if t.max_memory_gb is None:
        return per_rank
    for m in sorted((d for d in range(1, per_rank + 1) if per_rank % d == 0), reverse=True):
        if estimate_peak_bytes(cfg, m, precision, device.type) <= t.max_memory_gb * 2**30:
            return m
    raise ValueError(f"even a micro-batch of 1 does not fit in {t.max_memory_gb} GB")


@dataclass(frozen=True)
class StepPlan:
    """How this process will run each step: what `setup` resolves, and what a study's seconds= budget times."""

    precision: Precision
    compiled: bool
    micro_batch: int
    """Sequences per forward pass; the per-rank batch / micro_batch micro-batches per step."""


def plan_step(cfg: PretrainConfig, per_rank: int, dev: torch.device) -> StepPlan:
    """Resolve train.precision, train.compile and the micro-batch for `per_rank` sequences on `dev`."""
    precision = resolve_precision(cfg.train.precision, dev)
    return StepPlan(
        precision, resolve_compile(cfg.train.compile, dev), micro_batch_size(cfg, per_rank, precision.name, dev)
    )


@dataclass
class Run:
    """What a pretraining run holds while it trains; built by `setup`."""

    cfg: PretrainConfig
    """The resolved config (the vocabulary size is the tokenizer's); the caller's is never changed."""
    run_dir: Path
    rank: int
    world: int
    device: torch.device
    data: PretrainingData
    raw_model: ElectraForPretraining
    model: nn.Module
    """`raw_model`, wrapped by DistributedDataParallel and/or torch.compile when asked."""
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    meta: RunMeta
    per_rank: int
    """Sequences per step on this process."""
    accum: int
    """Micro-batches per step (gradient accumulation)."""
    autocast: contextlib.AbstractContextManager
    precision: Precision
    """The resolved precision and why (also in RUN/run.json)."""
    special: Tensor
    """(S,) the special token ids on the device, never masked: built once, not uploaded every step."""
    loop_state: dict | None = None
    """What the loop saved with the resumed checkpoint (the open log window's sums); None for a fresh run."""
    lock: FolderLock | None = None
    """Rank 0's hold on the run folder, released when `pretrain` ends."""

    @property
    def main_process(self) -> bool:
        return self.rank == 0

    @property
    def tokens(self) -> TokenizerInfo:
        return self.data.tokens


def setup(
    cfg: PretrainConfig,
    run_dir: str | Path,
    resume: str | None = None,
    device: str | None = None,
    data: PretrainingData | None = None,
    source: Source | None = None,
) -> Run:
    """Open the data, build model, optimizer and scaler, resume from a checkpoint if asked, write the run folder.

    `data` replaces the corpus of `cfg.data` (e.g. an in-memory source); `resume` is "auto" (the newest valid
    checkpoint of `run_dir`), a checkpoint folder, or None for a fresh run (refused if `run_dir` has checkpoints).
    `source`: the model a continued run starts from (`continued.open_init`), applied when the run is fresh.
    From here until the run ends, rank 0 holds the run folder's lock (`Run.lock`): a second process that would
    write the same folder is refused, naming this one.
    """
    run_dir = Path(run_dir)
    rank, world, dev = init_distributed(device)
    if cfg.train.batch_size % world:  # before any work
        raise ConfigError(f"train.batch_size {cfg.train.batch_size} does not divide over {world} processes")
    lock = folder_lock(run_dir, "pretraining run") if rank == 0 else None
    try:
        run = _build_run(cfg, run_dir, resume, rank, world, dev, data, source)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    run.lock = lock
    return run


def _build_run(
    cfg: PretrainConfig,
    run_dir: Path,
    resume: str | None,
    rank: int,
    world: int,
    dev: torch.device,
    data: PretrainingData | None,
    source: Source | None = None,
) -> Run:
    """`setup`'s work once the run folder is held: the data, the step's plan, model, optimizer and scaler, their
    state restored when resuming, the run folder written, and the model wrapped for DDP and torch.compile."""
    if dev.type == "cpu":
        keep_freed_memory_in_heap()  # process-wide: faster CPU steps (docs/benchmarks.md)
    data = data if data is not None else open_pretraining_data(cfg.data, cfg.train.seed)
    if cfg.model.vocab_size != data.tokens.vocab_size:
        log.info("model.vocab_size set to the tokenizer's %d (was %d)", data.tokens.vocab_size, cfg.model.vocab_size)
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=data.tokens.vocab_size))
    t = cfg.train
    per_rank = t.batch_size // world
    plan, tf32 = _plan_this_process(cfg, per_rank, rank, world, dev)

    torch.manual_seed(t.seed + rank)  # dropout differs per rank; data and masks are keyed, not drawn
    raw_model = build_model(cfg).to(dev)
    optimizer = build_optimizer(raw_model, cfg, dev)
    scaler = torch.amp.GradScaler(dev.type, enabled=plan.precision.name == "fp16")
    digests = corpus_digests(cfg.data.path)
    meta, loop_state = _start_or_resume(cfg, run_dir, resume, raw_model, optimizer, scaler, rank, world, dev, digests)
    if source is not None:  # a fresh run takes the source's weights; a resumed one its own
        continued.start_from(source, cfg, raw_model, meta, rank)
    _record_session(meta, cfg, plan, tf32, rank, world, dev)
    if rank == 0:
        training_state.prepare_run_dir(run_dir, cfg, data.tokens, meta)
    if world > 1:
        dist.barrier()

    model: nn.Module = raw_model
    if world > 1:
        model = wrap_ddp(raw_model, dev)
    if plan.compiled:
        model = torch.compile(model, dynamic=False)
    special = torch.tensor(data.tokens.special_ids, device=dev)
    return Run(
        cfg,
        run_dir,
        rank,
        world,
        dev,
        data,
        raw_model,
        model,
        optimizer,
        scaler,
        meta,
        per_rank,
        per_rank // plan.micro_batch,
        autocast_for(plan.precision.name, dev),
        plan.precision,
        special,
        loop_state,
    )


def _plan_this_process(
    cfg: PretrainConfig, per_rank: int, rank: int, world: int, dev: torch.device
) -> tuple[StepPlan, bool]:
    """This process's step plan (refused if its micro-batch does not divide the per-process batch) and whether TF32
    is on, both said in rank 0's log."""
    t = cfg.train
    plan = plan_step(cfg, per_rank, dev)
    precision, compiled, micro = plan.precision, plan.compiled, plan.micro_batch
    if per_rank % micro:
        raise ConfigError(
            f"train.micro_batch_size {micro} does not divide the per-process batch {per_rank} "
            f"(train.batch_size {t.batch_size} over {world} processes)"
        )
    tf32 = enable_tf32(dev, t.tf32)
    if rank == 0:
        log.info(
            "precision %s (%s); torch.compile %s; TF32 matmuls %s",
            precision.name,
            precision.reason,
            "on" if compiled else "off",
            "on" if tf32 else "off",
        )
    return plan, tf32


def _start_or_resume(
    cfg: PretrainConfig,
    run_dir: Path,
    resume: str | None,
    raw_model: ElectraForPretraining,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    rank: int,
    world: int,
    dev: torch.device,
    digests: dict | None,
) -> tuple[RunMeta, dict | None]:
    """(meta, the loop's saved state): a fresh run's, where `run_dir` holds no other kind of folder and no
    checkpoints; or, with `resume`, what the checkpoint restored into model, optimizer and scaler (a fresh run's
    when "auto" finds none), checked to be the same step on every rank."""
    meta, loop_state = RunMeta(code_revision=code_revision(), world_size=world, data_digests=digests), None
    if resume is None:  # a GLUE sweep's or a study's folder is refused, as --resume auto refuses it
        training_state.refuse_other_kind_of_folder(run_dir)
    if resume is None and ckpt_io.list_checkpoints(run_dir):
        raise ValueError(
            f"{run_dir} already holds checkpoints: pass {argument('resume', 'auto')} to continue, or another "
            f"{argument('run_dir')}"
        )
    if resume is not None:
        where = run_dir if resume == "auto" else Path(resume)
        restored = training_state.restore_training_state(
            where, cfg, raw_model, optimizer, scaler, rank, world, dev, digests
        )
        if restored is not None:
            meta, loop_state = restored
            meta.data_digests = digests  # an older checkpoint's None: recorded from now on
        training_state.check_same_resume_step(meta.step, where, rank, world)
    return meta, loop_state


def _record_session(
    meta: RunMeta, cfg: PretrainConfig, plan: StepPlan, tf32: bool, rank: int, world: int, dev: torch.device
) -> None:
    """Set this session's threads (CPU) and write what it runs with into `meta`: precision, TF32, the schedule's
    peak learning rate, the micro-batch and its memory estimate; its log says the threads, any scaled lr and any
    sampling schedule longer than the run (electra.config.schedule_warnings)."""
    t, precision, micro = cfg.train, plan.precision, plan.micro_batch
    if dev.type == "cpu":
        share = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        threads, why = choose_threads(t.threads, share)  # auto chooses again on resume: for today's load
        if rank == 0:
            log.info("threads %d per process (%s)", threads, why)
    meta.precision, meta.precision_reason, meta.compiled = precision.name, precision.reason, plan.compiled
    meta.tf32, meta.peak_lr = tf32, peak_lr(cfg)
    if rank == 0 and meta.peak_lr != t.lr:
        log.info(
            "peak learning rate %.3g: train.lr %.3g x %d / %d wide (train.lr_width)",
            meta.peak_lr,
            t.lr,
            t.lr_width,
            cfg.model.hidden_size,
        )
    for warning in schedule_warnings(cfg) if rank == 0 else []:
        log.warning("%s", warning)
    meta.micro_batch, meta.memory_budget_gb = micro, t.max_memory_gb
    meta.memory_estimate_gb = round(estimate_peak_bytes(cfg, micro, precision.name, dev.type) / 2**30, 3)
    meta.peak_memory_gb = None  # this session's, set at its first save
    meta.stopped_by_signal = None  # this session has not been stopped (the checkpoint records the last one's)
    meta.finished = False  # until this session's final checkpoint and export are on disk (`finish`)


def corpus_digests(path: str | None) -> dict | None:
    """RunMeta.data_digests of the prepared folder `path` (None: the built-in synthetic corpus), from its
    metadata.json, which open_corpus has checked against the files."""
    if path is None:
        return None
    meta = read_metadata(Path(path))
    return {"tokenizer_sha256": meta["tokenizer_sha256"], "tokens_sha256": (meta.get("sha256") or {}).get(TOKENS_FILE)}


DDP_BUCKETS = 8
"""Gradient buckets per step that DDP all-reduces. The backward hides every all-reduce but the last bucket's, sent
when the backward ends: it holds the word embeddings' gradient (ready last; 14.9 MiB in ELECTRA-Small) and what
shares its bucket. ELECTRA-Small's 54 MiB of fp32 gradients, bucketed by torch 2.13 (in the order reduced):
PyTorch's default (a 1 MiB first bucket, then 25 MiB) makes 1.3, 25.1 and 27.8 MiB; ~8 buckets (bucket_cap_mb
6.8) make 7.3, 7.0, 6.8, 7.3, 7.0 and 18.8 MiB, a third less after the backward. Passing bucket_cap_mb gives up
the small first bucket (the first all-reduce starts after 7 MiB of gradients, not 1), which costs nothing while
the all-reduces keep pace with the backward. Time unmeasured until a GPU is lent (tests/training/test_pretrain.py)."""


def ddp_bucket_mb(model: nn.Module, buckets: int = DDP_BUCKETS) -> float:
    """bucket_cap_mb (MiB) giving about `buckets` buckets of the model's fp32 gradients, between 1 and 25."""
    grad_mb = sum(p.numel() * 4 for p in model.parameters() if p.requires_grad) / 2**20
    return min(25.0, max(1.0, grad_mb / buckets))


def wrap_ddp(model: nn.Module, dev: torch.device) -> nn.parallel.DistributedDataParallel:
    """DDP with the gradients living in the buckets (gradient_as_bucket_view: no copy into them, less memory), in
    about DDP_BUCKETS buckets, and no broadcast of buffers before each forward: the model's buffers (the rotary
    tables, the sampling temperature) are set alike on every rank and never changed by training. (DDP still sends
    them once at construction, with the parameters: the same values, so nothing changes.)"""
    return nn.parallel.DistributedDataParallel(
        model,
        device_ids=[dev.index] if dev.type == "cuda" else None,
        gradient_as_bucket_view=True,
        bucket_cap_mb=ddp_bucket_mb(model),
        **no_buffer_sync(),
    )


def no_buffer_sync() -> dict[str, bool]:
    """DDP's keyword for no buffer broadcast before each forward: forward_sync_buffers (torch 2.13 deprecates
    broadcast_buffers for it), or broadcast_buffers in the torch versions before it."""
    parameters = inspect.signature(nn.parallel.DistributedDataParallel.__init__).parameters
    return {"forward_sync_buffers" if "forward_sync_buffers" in parameters else "broadcast_buffers": False}


# -- one optimizer step ---------------------------------------------------------------------------------------


def host_step_batches(run: Run, step: int) -> list[dict]:
    """This process's micro-batches of global step `step` on the host (pinned for a GPU): the part that the
    prefetch thread computes ahead, touching no device."""
    failpoint("batches")
    first = step * run.cfg.train.batch_size + run.rank * run.per_rank
    ids = np.arange(first, first + run.per_rank, dtype=np.int64)
    pin = run.device.type == "cuda"
    return [host_batch(run.data.train.examples(i), i, pin) for i in np.split(ids, run.accum)]


def prefetch_batches(run: Run, start: int) -> Prefetcher:
    """`host_step_batches` of steps `start` (the resumed step), start + 1, ... read ahead in a thread."""
    return Prefetcher(lambda s: host_step_batches(run, s), range(start, run.cfg.train.max_steps))


def step_batches(run: Run, step: int, host: list[dict] | None = None) -> tuple[list[dict], list[MaskedBatch]]:
    """This process's micro-batches of global step `step` (`host`: as `host_step_batches` gave them), on the
    device with their masked slots."""
    batches = [to_device(b, run.device) for b in (host if host is not None else host_step_batches(run, step))]
    return batches, [masked_batch(run.cfg, run.tokens, b, run.special) for b in batches]


def export_for_transformers(run: Run) -> None:
    """RUN/hf for transformers, when it is installed; a bare GPU machine may lack it (then: `electra export-hf`
    elsewhere, from the final checkpoint)."""
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        log.warning("transformers is not installed: RUN/hf not written (electra export-hf RUN RUN/hf, where it is)")
        return

    tokenizer = run.run_dir / "tokenizer"
    to_hf(run.raw_model, run.run_dir / "hf", tokenizer if tokenizer.exists() else None, run.meta.init)


def record_memory(run: Run, meta: RunMeta) -> None:
    """The peak so far (no device sync), beside the estimate that `setup` recorded: on CUDA the peak allocated, on
    the CPU the process's peak resident memory (`process_peak_bytes`)."""
    if run.device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(run.device)
    else:
        peak = process_peak_bytes()
    meta.peak_memory_gb = round(peak / 2**30, 3)


# -- the loop -------------------------------------------------------------------------------------------------


def pretrain(
    cfg: PretrainConfig,
    run_dir: str | Path,
    resume: str | None = None,
    device: str | None = None,
    loggers: tuple[str, ...] = (),
    data: PretrainingData | None = None,
    progress: bool = True,
    init: str | Path | continued.Init | None = None,
) -> RunMeta:
    """Train for cfg.train.max_steps optimizer steps into `run_dir`; returns where the run stands at the end.

    `init` starts the run from a model you already have (continued pretraining, electra/training/continued.py): a
    run folder or checkpoint of ours, our transformers export, a transformers discriminator folder or hub id
    (`continued.Init(source, generator=...)` names its generator; alone, a generator is made afresh). Weights only:
    the optimizer, schedule and step counter start afresh; the model's shape comes from the source.

    SIGTERM / SIGINT (to any one rank, or all) save a checkpoint and stop all ranks at the same step, one or two
    steps after the signal (`meta.stopped_by_signal`, electra/training/stopping.py); the run continues with
    `resume="auto"`. At the last step the model is also exported for transformers (RUN/hf).
    objective.kind=none trains nothing: it writes the initialised model as a step-0 run (electra/training/baseline.py).
    """
    source = None
    if init is not None:
        cfg, source = continued.open_init(cfg, init, data)
    if cfg.objective.kind == "none":
        return write_initialised_run(cfg, run_dir, resume, data)
    with threads_kept():  # the caller's torch threads, as they were, however the run ends
        run = setup(cfg, run_dir, resume, device, data, source)
        try:
            return train(run, loggers, progress)
        finally:
            if run.lock is not None:
                run.lock.release()  # however the run ended: the folder is free for the next process


def progress_fields(cfg: PretrainConfig, row: dict) -> dict[str, str]:
    """The progress bar's numbers: the masked-LM loss, and the discriminator's only when there is one."""
    fields = {"mlm": f"{row['mlm_loss']:.3f}"}
    if cfg.objective.kind == "electra":
        fields.update(disc=f"{row['disc_loss']:.3f}", recall=f"{row['disc_recall']:.2f}")
    return fields


def train(run: Run, loggers: tuple[str, ...] = (), progress: bool = True) -> RunMeta:
    """The loop of `pretrain` over a `Run` that `setup` built: steps, log lines, evaluations and checkpoints. The
    stop vote's signal handlers are this function's only: the previous ones are back however it ends."""
    vote = StopVote(run.device, run.world)
    vote.listen()
    try:
        return _train(run, vote, loggers, progress)
    finally:
        vote.restore()


def _train(run: Run, vote: StopVote, loggers: tuple[str, ...], progress: bool) -> RunMeta:
    """`train` under the stop vote: one optimizer step per iteration, from the resumed step to train.max_steps
    (or a signal, a failure, a collapse), then the run's end on rank 0."""
    cfg, t, meta = run.cfg, run.cfg.train, run.meta
    writers, window, bar = _open_loop_outputs(run, loggers, progress)
    params = list(run.raw_model.parameters())
    run.raw_model.train()
    start_session(run)
    seconds_before, session_start = meta.train_seconds, time.perf_counter()
    prefetch = prefetch_batches(run, meta.step)
    data_error, last = None, None  # this rank's failure to read its batches; the last batches it read
    watch = thread_watch(run)  # threads=auto on a CPU: follows the load
    try:
        for step in range(meta.step, t.max_steps):
            started = time.perf_counter()
            lr = learning_rate(step, cfg)
            set_learning_rate(run.optimizer, lr)
            set_sampling_schedules(run, step)
            if data_error is None:
                try:
                    batches, masked = step_batches(run, step, prefetch.get(step))
                except Exception as err:
                    if run.world == 1 or last is None:
                        raise
                    # This rank alone cannot read its batches (the others are about to wait for it in the step's
                    # all-reduce): it steps on its last batches so that the collectives still line up, votes
                    # FAILED, and every rank leaves at an agreement before anything of these steps is saved.
                    data_error, vote.failed = err, True
            if data_error is not None:
                batches, masked = last
            last = batches, masked
            out = train_step(
                run.model, run.optimizer, run.scaler, params, batches, masked, run.world, run.autocast, t.grad_clip
            )
            window.add(out)
            if watch is not None:
                watch.after_step(time.perf_counter() - started)
            done = step + 1
            meta.step, meta.samples = done, done * t.batch_size
            meta.train_seconds = seconds_before + time.perf_counter() - session_start
            bar.update(1)

            signalled = vote.cast() or None  # the same on every rank: a signal any rank got by the previous step
            _log_evaluate_save(run, window, writers, bar, done, lr, signalled, data_error)
            if signalled is not None:
                log.warning(
                    "signal %s: saved step %d and stopped; the run continues from there when resumed", signalled, done
                )
                break
            if meta.collapsed and t.stop_on_collapse:
                log.warning("stopping: the discriminator collapsed (train.stop_on_collapse)")
                break
    finally:
        prefetch.close()
        bar.close()
        for w in writers:
            w.close()
    error = None
    if run.main_process and meta.step == t.max_steps:
        try:
            finish(run)
        except Exception as err:  # the other ranks leave too, with one line, instead of waiting at a barrier
            error = err
    agree_on_failure(error, run.rank, run.world)
    return meta


def _open_loop_outputs(run: Run, loggers: tuple[str, ...], progress: bool) -> tuple[list, Window, tqdm]:
    """What the loop reports through: rank 0's trackers, the training window of running sums (carried over from
    the resumed checkpoint: a log line spans the stop) and the progress bar, starting at the resumed step."""
    meta = run.meta
    writers = open_loggers(loggers, run.run_dir, run.cfg, resumed_at=meta.step) if run.main_process else []
    window = Window(run.device, meta.nonfinite_skipped, meta.consecutive_nonfinite, meta.scaler_backoffs)
    if run.loop_state is not None:
        window.restore(run.loop_state["window"])
    bar = tqdm(
        total=run.cfg.train.max_steps,
        initial=meta.step,
        desc="pretrain",
        disable=not (run.main_process and progress),
        dynamic_ncols=True,
    )
    return writers, window, bar


def _log_evaluate_save(
    run: Run,
    window: Window,
    writers: list,
    bar: tqdm,
    done: int,
    lr: float,
    signalled: int | None,
    data_error: Exception | None,
) -> None:
    """After step `done`, on their cadences: the metrics line, rank 0's held-out evaluation and the checkpoint (also
    when `signalled`). Before a save every rank agrees on any failure (a rank's unreadable batches, `data_error`,
    or rank 0's own work) and on a collapse, so all ranks save the same step or all leave at the same one."""
    cfg, t, meta = run.cfg, run.cfg.train, run.meta
    if signalled == FAILED:  # a rank could not read its batches: all leave here (it raises, they say so)
        agree_on_failure(data_error, run.rank, run.world)
    log_now = done % t.log_every == 0 or done == t.max_steps
    save_now = done % t.save_every == 0 or done == t.max_steps or signalled is not None
    if log_now or save_now:  # the non-finite counts are read here, not in the step
        window.settle_nonfinite(meta, t.max_nonfinite, done, run.run_dir)
    eval_now = done % t.eval_every == 0 or done == t.max_steps
    error = data_error  # or of the work rank 0 does alone: every rank learns of it below and leaves here
    if error is None:
        try:
            if log_now:
                log_window(run, window, writers, bar, done, lr)
            if eval_now and run.main_process:
                watch_collapse(
                    run.raw_model, run.data, cfg, run.tokens, run.device, run.autocast, meta, run.run_dir,
                    writers, done, run.per_rank // run.accum,
                )  # fmt: skip
                failpoint("evaluate")
        except Exception as err:
            error = err
    if log_now or eval_now or save_now:  # before a save: no step run on stand-in batches is ever saved
        agree_on_failure(error, run.rank, run.world)
    if eval_now:
        meta.collapsed = agree_on_collapse(meta.collapsed, run.device, run.world)  # all break, or none
    if signalled is not None:
        meta.stopped_by_signal = int(signalled)  # before the save: RUN/run.json says why the run stopped
    if save_now:
        save(run, window)


def finish(run: Run) -> None:
    """The run's end, once its final checkpoint is saved: the transformers export, then run.json marked finished
    (last: a run counts as done only when its final model is on disk, electra.training.checkpoint.run_finished)."""
    export_for_transformers(run)
    failpoint("finish")
    run.meta.finished = True
    write_atomic(run.run_dir / "run.json", run.meta.to_json())


def start_session(run: Run) -> None:
    """Record this training session (a resumed run has several) in run.json: its device, machine and start."""
    meta = run.meta
    meta.device = torch.cuda.get_device_name(run.device) if run.device.type == "cuda" else run.device.type
    meta.stopped_by_signal = None  # this session's, if any, is set when a signal stops it
    meta.sessions.append(
        {
            "device": meta.device,
            "machine": describe_machine(run.device),
            "threads": torch.get_num_threads() if run.device.type == "cpu" else None,
            "world_size": run.world,
            "start_step": meta.step,
            "start_seconds": meta.train_seconds,
            "max_steps": run.cfg.train.max_steps,
        }
    )


def set_sampling_schedules(run: Run, step: int) -> None:
    """The generator's sampling temperature and uniform fraction for `step` (ELECTRA; the masked LM samples
    nothing), set on the model and recorded in `run.meta`: what the metrics row of the step says, and run.json."""
    o = run.cfg.objective
    sampled = sampling_at(step, o)  # {} for the masked LM
    run.meta.temperature, run.meta.uniform_replace = sampled.get("temperature"), sampled.get("uniform_replace")
    if o.kind == "electra" and o.temperature_start is not None:
        run.raw_model.set_temperature(sampled["temperature"])
    if o.kind == "electra" and o.uniform_replace_start is not None:
        run.raw_model.set_uniform_replace(sampled["uniform_replace"])


def thread_watch(run: Run) -> ThreadWatch | None:
    """Under train.threads=auto on a CPU (OMP_NUM_THREADS not set): the watch that chooses the threads again as the
    load changes (electra/training/threads.py)."""
    if run.device.type != "cpu" or run.cfg.train.threads != "auto" or os.environ.get("OMP_NUM_THREADS"):
        return None
    return ThreadWatch(torch.get_num_threads(), int(os.environ.get("LOCAL_WORLD_SIZE", run.world)))


def log_window(run: Run, window: Window, writers: list, bar: tqdm, done: int, lr: float) -> None:
    """The training window's metrics line (every rank computes it: it all-reduces), written by rank 0; on a CPU
    with the threads the window ended with."""
    row = window.row(run.cfg, run.world, run.meta, done, lr)
    if run.device.type == "cpu":
        row["threads"] = torch.get_num_threads()
    if run.main_process:
        write_metrics(run.run_dir, row, writers)
        bar.set_postfix(progress_fields(run.cfg, row))


def save(run: Run, window: Window) -> None:
    """A checkpoint of this step (every rank writes its own part), with the training window's running sums."""
    record_memory(run, run.meta)
    training_state.save_training_state(
        run.run_dir,
        run.cfg,
        run.raw_model,
        run.optimizer,
        run.scaler,
        run.meta,
        run.rank,
        run.world,
        {"window": window.state()},
    )


def keep_freed_memory_in_heap() -> bool:
    """Stop glibc from handing large freed blocks back to the OS (CPU only; a process-wide setting).

    By default every tensor over 32 MB (the (B·N, V) generator logits and their softmax, gradient and CDF) is
    a fresh mmap, so each step page-faults and zeroes it again. Raising the mmap and trim thresholds keeps those
    pages in the heap for reuse (the gain on a CPU step: docs/benchmarks.md). Returns whether applied.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (macOS, musl): nothing to tune
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # from <malloc.h>
    return bool(libc.mallopt(M_MMAP_THRESHOLD, 1 << 30) and libc.mallopt(M_TRIM_THRESHOLD, 1 << 30))
