"""What `electra study` will do, printed before it starts (it asks nothing): each setting with its steps, its
training FLOPs (the official ELECTRA accounting, as `electra flops` counts them) and its estimated pretraining
time, the fine-tuning runs, and an estimated wall time. The estimates come from timed steps on this device, as a
`seconds=` budget's steps do: a pretraining step of each setting (electra/study/run.py seconds_per_step), and a
fine-tuning step of the base model at the recipe's batch for each task, at the length its batches will have
(batches are padded only to their longest example). With `--parallel N` on a CPU each worker process gets its
share of the cores, so the steps are timed with that many threads and the runs are spread over the N workers (the
wall time is the busiest worker's share, not the sum).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from electra.config import load_finetune_config, schedule_warnings
from electra.data.corpus import TOKENIZER_FILE
from electra.data.synthetic import synthetic_tokenizer_dir
from electra.data.tokenizer import load_tokenizer
from electra.glue.finetune import run_length
from electra.glue.loading import load_task
from electra.glue.plan import padded_length, step_seconds, worker_threads
from electra.glue.tasks import resolve_tasks
from electra.modeling.flops import off_train_flops
from electra.study.grid import pretrained, run_dir, seconds_per_step
from electra.training.precision import resolve_device, resolve_precision, tf32_on
from electra.utils.wording import budget, duration, plural


@dataclass
class SettingPlan:
    name: str
    kind: str
    steps: int
    flops: float
    seconds: float | None
    """Estimated pretraining seconds (None: nothing left to do)."""
    precision: str = ""
    """The precision the run will use, as `electra pretrain` resolves train.precision on this device, and TF32."""
    warnings: list[str] = field(default_factory=list)
    """Sampling schedules longer than the setting's steps (electra.config.schedule_warnings)."""


@dataclass
class Plan:
    settings: list[SettingPlan]
    budget: str
    tasks: dict[str, int]
    """Task -> optimizer steps of one fine-tuning run."""
    seeds: int
    finetune_step_seconds: dict[str, float] | None
    """Task -> seconds of one of its fine-tuning steps."""
    pretrain_workers: int = 1
    """Pretraining runs at a time (`--parallel`, at most the runs to do)."""
    finetune_workers: int = 1
    pretrain_seeds: int = 1
    """Pretraining seeds per setting of the grid (`settings` holds each setting under each)."""

    @property
    def finetune_runs(self) -> int:
        return len(self.settings) * len(self.tasks) * self.seeds

    @property
    def finetune_seconds(self) -> float | None:
        """Wall time of the fine-tuning phase: its many runs shared evenly by the workers."""
        if self.finetune_step_seconds is None:
            return None
        per_run = sum(n * self.finetune_step_seconds[t] for t, n in self.tasks.items())
        total = len(self.settings) * self.seeds * per_run
        return total / self.finetune_workers

    @property
    def pretrain_seconds(self) -> float:
        """Wall time of the pretraining phase: each run goes to the worker that frees up first, longest first."""
        busy = [0.0] * self.pretrain_workers
        for seconds in sorted((s.seconds for s in self.settings if s.seconds is not None), reverse=True):
            busy[busy.index(min(busy))] += seconds
        return max(busy)


def make_plan(spec, settings) -> Plan:
    """Time what needs timing and count the rest; `spec` and `settings` as electra/study/run.py builds them."""

    todo = [s for s in settings if s.kind != "none" and not pretrained(run_dir(spec, s) / "pretrain", s.steps)]
    pretrain_workers, finetune_workers = max(1, min(spec.parallel, len(todo))), max(1, spec.parallel)
    rows, timed = [], {}  # timed: a setting's pretraining seeds run the same step, timed once
    with worker_threads(pretrain_workers, spec.device):
        for s in settings:
            cfg = s.config(spec)
            flops = off_train_flops(cfg, s.steps) if s.steps else 0.0
            precision, warnings = run_precision(cfg, spec.device), schedule_warnings(cfg)
            if s not in todo:
                rows.append(SettingPlan(s.name, s.kind, s.steps, flops, None, precision, warnings))
                continue
            group = s.group or s.name
            per_step = s.seconds_per_step or timed.get(group) or seconds_per_step(cfg, spec.device)
            timed[group] = per_step
            rows.append(SettingPlan(s.name, s.kind, s.steps, flops, per_step * s.steps, precision, warnings))
    tasks, step = finetune_lengths(spec), None
    if tasks:
        cfg = settings[0].config(spec)
        lengths = padded_lengths(spec, cfg.model.max_position_embeddings)
        with worker_threads(finetune_workers, spec.device):
            timed = {n: finetune_step_seconds(cfg, spec, n) for n in sorted(set(lengths.values()))}
        step = {t: timed[n] for t, n in lengths.items()}
    return Plan(
        rows, spec.budget, tasks, len(spec.seeds), step, pretrain_workers, finetune_workers, spec.pretrain_seeds
    )


def finetune_lengths(spec) -> dict[str, int]:
    """Task -> optimizer steps of one run of the study's recipe (electra/glue/finetune.py run_length)."""

    cfg = load_finetune_config(spec.recipe, spec.finetune_overrides)
    lengths = {}
    for t, train in _train_sets(spec.tasks, spec.glue_dir):
        n = len(train)
        pairs = 2 if cfg.swap_pairs and t.task.unordered else 1  # OFF's double_unordered (MRPC, STS-B)
        lengths[t.task.name] = run_length(n * pairs, t.task, cfg)[1]
    return lengths


@functools.lru_cache(maxsize=1)
def _train_sets(tasks: str, glue_dir: str | None) -> list:
    """(task spec, training examples) of each task of the study, read once for the plan's two uses."""

    found, _ = resolve_tasks(tasks.split(","), glue_dir)
    return [(t, load_task(t).train) for t in found]


def padded_lengths(spec, max_positions: int) -> dict[str, int]:
    """Task -> the length its training batches are padded to, on average (electra/glue/plan.py padded_length), with
    the study's tokenizer."""
    tokenizer = load_tokenizer(synthetic_tokenizer_dir() if spec.data is None else Path(spec.data) / TOKENIZER_FILE)
    ft = load_finetune_config(spec.recipe, spec.finetune_overrides)
    return {t.task.name: padded_length(train, tokenizer, ft, max_positions) for t, train in _train_sets(spec.tasks,
            spec.glue_dir)}  # fmt: skip


def finetune_step_seconds(cfg, spec, length: int) -> float:
    """Median seconds of a fine-tuning step of the base model (the discriminator body, a two-class head) at the
    recipe's batch size and the given length on the study's device (electra/glue/plan.py step_seconds)."""
    import torch

    ft = load_finetune_config(spec.recipe, spec.finetune_overrides)
    return step_seconds(
        cfg.model, ft, length, torch.device(spec.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    )


def run_precision(cfg, device: str | None) -> str:
    """ "bf16, TF32 off" etc.: what `electra pretrain` will resolve for `cfg` on the study's device."""
    dev = resolve_device(device)
    precision = resolve_precision(cfg.train.precision, dev).name
    return f"{precision}, TF32 {'on' if tf32_on(dev, cfg.train.tf32) else 'off'}"


def plan_lines(plan: Plan, out: str) -> list[str]:
    """The plan as printed: one line per setting, the fine-tuning runs, the estimated wall time."""
    width = max(len(s.name) for s in plan.settings)
    grid = plural(len(plan.settings), "setting")
    if plan.pretrain_seeds > 1:
        grid += f" ({len(plan.settings) // plan.pretrain_seeds} x {plan.pretrain_seeds} pretraining seeds)"
    lines = [f"== the plan of study {out}: {grid}, budget {budget(plan.budget)} each"]
    for s in plan.settings:
        if s.kind == "none":
            when = "no pretraining (random initialisation)"
        elif s.seconds is None:
            when = "pretrained already"
        else:
            when = f"about {duration(s.seconds)}"
        how = f"  {s.precision}" if s.precision and s.kind != "none" else ""
        lines.append(
            f"   {s.name:<{width}}  {s.kind:<7} {plural(s.steps, 'step'):>14}  {s.flops:9.3g} FLOPs{how}  {when}"
        )
        lines += [f"     warning: {warning}" for warning in s.warnings]
    runs = plural(plan.finetune_runs, "fine-tuning run")
    per_task = ", ".join(f"{t} {plural(n, 'step')}" for t, n in plan.tasks.items())
    lines.append(
        f"   then {runs}: {plural(len(plan.settings), 'setting')} x {plural(len(plan.tasks), 'task')} x "
        f"{plural(plan.seeds, 'seed')} ({per_task})"
    )
    total = plan.pretrain_seconds + (plan.finetune_seconds or 0.0)
    finetune = "" if plan.finetune_seconds is None else f" + fine-tuning about {duration(plan.finetune_seconds)}"
    at_once = "" if plan.finetune_workers == 1 else f", {plan.finetune_workers} processes at a time"
    lines.append(
        f"   estimated wall time: about {duration(total)} (pretraining about {duration(plan.pretrain_seconds)}"
        f"{finetune}{at_once}; from timed steps on this device)"
    )
    return lines
