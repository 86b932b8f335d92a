"""What `electra glue` will do, printed before its first run (it asks nothing): per task, the runs left and the
optimizer steps of one run (the recipe's epochs over the training set, OFF's padded batches), and an estimated wall
time from fine-tuning steps timed on this device with the model's shape, at the length each task's batches will
have (batches are padded only to their longest example). With several CPU workers each gets its share of the cores,
so the steps are timed with that many threads and the runs are spread over the workers. `electra study` prints the
same estimate for its fine-tuning phase (electra/study/plan.py).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from electra.config import FinetuneConfig, ModelConfig
from electra.glue.features import encode
from electra.glue.finetune import run_length, schedule_steps
from electra.glue.heads import GlueModel
from electra.glue.loading import TaskData
from electra.glue.optim import build_optimizer
from electra.modeling.electra import ElectraModel
from electra.training.optim import clip_and_step
from electra.training.timing import sync, synthetic_batch
from electra.utils.processes import usable_cpus
from electra.utils.wording import duration, plural

TIMED_STEPS = 3  # timed fine-tuning steps (after one untimed)
LENGTH_SAMPLE = 4096  # training examples tokenized to estimate a task's padded batch length


@contextlib.contextmanager
def worker_threads(workers: int, device: str | None):
    """Time steps with the threads one of `workers` CPU worker processes will have (a study's pretraining pool
    and a sweep's workers give each its share of the cores)."""
    on_cpu = device == "cpu" or (device in (None, "auto") and not torch.cuda.is_available())
    if workers == 1 or not on_cpu:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, usable_cpus() // workers))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def padded_length(train: list, tokenizer: Tokenizer, ft: FinetuneConfig, max_positions: int) -> int:
    """The length a task's training batches are padded to, on average: the mean longest example of random batches
    of the recipe's size, from a sample of its training examples tokenized as fine-tuning will (features.encode),
    rounded up to a multiple of 8."""
    batch, max_length = ft.batch_size, min(ft.max_length, max_positions)
    rng = np.random.default_rng(0)
    sample = [train[i] for i in rng.permutation(len(train))[:LENGTH_SAMPLE]]
    n = np.array([len(x) for x in encode(sample, tokenizer, max_length).input_ids])
    longest = n[rng.integers(0, len(n), size=(256, min(batch, len(n))))].max(axis=1).mean()
    return min(max_length, 8 * math.ceil(longest / 8))


def step_seconds(model: ModelConfig, ft: FinetuneConfig, length: int, device: torch.device) -> float:
    """Median seconds of a fine-tuning step of a body of shape `model` (a two-class head) at the recipe's batch
    size and the given length on `device`."""
    glue = GlueModel(ElectraModel(model), model, ft.head, 2).to(device)
    opt = build_optimizer(glue, ft, model.num_layers)
    batch = synthetic_batch(model.vocab_size, ft.batch_size, length, device)
    labels = torch.zeros(ft.batch_size, dtype=torch.long, device=device)
    times = []
    for i in range(1 + TIMED_STEPS):
        sync(device)
        start = time.perf_counter()
        F.cross_entropy(glue(*batch).float(), labels).backward()
        clip_and_step(opt, None, list(glue.parameters()), ft.grad_clip)
        sync(device)
        if i:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


@dataclass
class TaskPlan:
    runs: int
    """Runs of this task left to do."""
    steps: int
    """Optimizer steps of one run."""
    epochs: int
    examples: int
    """Training examples a run sees per epoch (MRPC and STS-B: both orders of each pair, as OFF)."""
    length: int
    """The length its batches are padded to, on average."""
    seconds_per_step: float
    schedule_steps: int | None = None
    """The steps of the recipe's whole schedule, when `finetune.max_steps` cuts the run short of it."""


@dataclass
class SweepPlan:
    tasks: dict[str, TaskPlan]
    workers: int
    where: str
    """The device, and the threads of each worker on a CPU."""

    @property
    def seconds(self) -> float:
        """The wall time: each run goes to the worker that frees up first, longest first."""
        runs = [t.steps * t.seconds_per_step for t in self.tasks.values() for _ in range(t.runs)]
        busy = [0.0] * self.workers
        for seconds in sorted(runs, reverse=True):
            busy[busy.index(min(busy))] += seconds
        return max(busy)


def make_plan(
    data: dict[str, TaskData],
    pending: list[tuple[str, int]],
    model: ModelConfig,
    tokenizer: Tokenizer,
    ft: FinetuneConfig,
    device: torch.device,
    workers: int,
) -> SweepPlan:
    """Count the runs left and their steps, and time one step per distinct padded length."""
    tasks = {}
    lengths = {name: padded_length(d.train, tokenizer, ft, model.max_position_embeddings) for name, d in data.items()}
    with worker_threads(workers, device.type):
        timed = {n: step_seconds(model, ft, n, device) for n in sorted(set(lengths.values()))}
    for name, d in data.items():
        left = sum(1 for task, _ in pending if task == name)
        pairs = 2 if ft.swap_pairs and d.task.unordered else 1  # OFF's double_unordered (MRPC, STS-B)
        epochs, steps, _ = run_length(d.n_train * pairs, d.task, ft)
        schedule = schedule_steps(d.n_train * pairs, d.task, ft)
        tasks[name] = TaskPlan(left, steps, epochs, d.n_train * pairs, lengths[name], timed[lengths[name]],
                               schedule if steps < schedule else None)  # fmt: skip
    several = device.type == "cpu" and workers > 1
    threads = f", {plural(max(1, usable_cpus() // workers), 'thread')} each" if several else ""
    return SweepPlan(tasks, workers, f"{device.type}{threads}")


def plan_lines(plan: SweepPlan, out: str, on_slurm: bool = False) -> list[str]:
    """The plan as printed: a line per task, then the estimated wall time (on SLURM: each run's, on this device;
    the jobs run side by side as the cluster lets them)."""
    runs = sum(t.runs for t in plan.tasks.values())
    where = "SLURM jobs" if on_slurm else f"{plan.where} ({plural(plan.workers, 'worker')})"
    lines = [f"== the plan of sweep {out}: {plural(runs, 'run')} to do on {where}"]
    width = max(len(name) for name in plan.tasks)
    for name, t in plan.tasks.items():
        each = duration(t.steps * t.seconds_per_step)
        cut = f"capped: {t.steps:,} of the {t.schedule_steps:,} steps of " if t.schedule_steps else ""
        lines.append(
            f"   {name:<{width}}  {plural(t.runs, 'run'):>7} x {plural(t.steps, 'step'):>12} ({cut}{t.epochs} epochs "
            f"of {t.examples:,} examples, length ~{t.length})  about {each} a run"
        )
    if on_slurm:
        lines.append("   each job as long as a run here (times from timed steps on this device); they run side by side")
        return lines
    lines.append(
        f"   estimated wall time: about {duration(plan.seconds)} ({plural(min(plan.workers, max(runs, 1)), 'run')} "
        "at a time; from timed steps on this device)"
    )
    return lines
