"""`electra study`: a grid of pretraining runs at an equal budget, each fine-tuned on GLUE over seeds, then one
report: the reproduction study's experiments (generator size, ELECTRA vs MLM vs none) as one command.

    electra study --base tiny --data runs/wiki --vary model.generator_fraction=0.125,0.25,0.5,0.75,1.0 \\
        --budget flops=1e14 --tasks sst2,mrpc,rte,wnli --glue-dir ../shared/data/glue --seeds 3 --out runs/gen
    electra study --base tiny --vary objective.kind=electra,mlm,none --budget seconds=1800 ... --out runs/obj

    STUDY/study.json            the spec, the settings with their steps, the code revision
    STUDY/runs/NAME/pretrain/   each setting's pretraining run (objective.kind=none: a step-0 checkpoint, i.e.
                                random initialisation, the no-pretraining baseline)
    STUDY/runs/NAME/glue/       its GLUE sweep (electra glue)
    STUDY/runs/NAME-pK/...      with --pretrain-seeds N > 1: the same for each pretraining seed k = 0..N-1
    STUDY/report/               report.md and figures (electra report)

Budgets are made equal before anything runs, by giving each setting its number of optimizer steps: `steps=N`
directly; `flops=F` by the official ELECTRA accounting of one step of that setting (so a cheaper objective gets
more steps); `seconds=S` by timing a few real training steps of each setting on this device first (the rate is
recorded; on a shared machine it is only as good as the machine is quiet). A rerun with the same --out skips what
is finished and resumes the rest bit for bit (pretraining from its checkpoints, GLUE sweeps run by run).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import signal
from pathlib import Path

from tqdm import tqdm

from electra.config import ConfigError, from_dict, load_finetune_config
from electra.executors.follow import SlurmExecutor
from electra.executors.jobs import EXECUTORS, Job, JobsDetached, JobsFailed
from electra.executors.local import LocalExecutor, parent_gone
from electra.executors.partition import fit_to_cluster
from electra.executors.slurm import check_options, plan_line
from electra.glue.sweep import (
    SweepInterrupted,
    SweepSpec,
    finished_runs,
    glue_jobs,
    open_sweep,
    run_sweep,
    write_report_only,
)
from electra.report.write import write_report
from electra.study.grid import (
    Setting,
    StudySpec,
    assign_steps,
    changed_fields,
    check_pretrain_seeds,
    fingerprint,
    grid,
    pretrained,
    run_dir,
    spec_differences,
    warn_unequal_generator_sweep,
)
from electra.study.plan import make_plan, plan_lines
from electra.training.baseline import write_initialised_run
from electra.training.checkpoint import list_checkpoints
from electra.training.continued import Init
from electra.training.loop import code_revision, pretrain
from electra.training.trackers import check_trackers
from electra.utils.files import folder_lock, write_json
from electra.utils.processes import THREADS_SHARE_ENV, usable_cpus
from electra.utils.wording import argument, plural

log = logging.getLogger("electra.study")


# -- the grid and its budget ---------------------------------------------------------------------------------------


# -- running ----------------------------------------------------------------------------------------------------


EXTENDABLE = ("seeds", "tasks")
"""What a rerun may add to a finished study: its pretraining is unchanged, and the sweeps fine-tune only the new
(task, seed) runs (a sweep's folder is keyed by model and recipe, not by its seeds or tasks)."""


def extends(saved: dict, spec: StudySpec) -> bool:
    """Whether `spec` asks for the study `saved` (study.json's spec) with more seeds and/or tasks, nothing else."""
    changed = set(changed_fields(saved, spec))
    if not changed or not changed <= set(EXTENDABLE) or "seeds" not in saved or "tasks" not in saved:
        return False
    return set(saved["seeds"]) <= set(spec.seeds) and set(saved["tasks"].split(",")) <= set(spec.tasks.split(","))


def start(spec: StudySpec) -> list[Setting]:
    """The settings with their steps: from study.json when this study exists (refused if it asked for other
    things), else computed now and written."""

    check_pretrain_seeds(spec)
    path = Path(spec.out) / "study.json"
    if path.exists():
        saved = json.loads(path.read_text())
        if saved["fingerprint"] != fingerprint(spec):
            if not extends(saved.get("spec", {}), spec):
                changed = "; ".join(spec_differences(saved.get("spec", {}), spec)) or "the fingerprint's fields"
                raise ConfigError(
                    f"{path}:1: this folder holds a study with other settings ({changed}); use "
                    f"another {argument('out')}, the same options to continue it, or more {argument('seeds')} / "
                    f"{argument('tasks')} to extend it"
                )
            log.info(
                "%s: extending the study (%s); only the new fine-tuning runs are run",
                path,
                "; ".join(spec_differences(saved["spec"], spec)),
            )
            write_json(
                path,
                {
                    **saved,
                    "fingerprint": fingerprint(spec),
                    "spec": dataclasses.asdict(spec),
                    "tasks": spec.tasks.split(","),
                    "seeds": spec.seeds,
                },
                indent=1,
            )
        return [Setting(**s["setting_state"]) for s in saved["settings"]]
    settings = grid(spec)
    assign_steps(spec, settings)
    warn_unequal_generator_sweep(settings)
    for s in settings:
        s.config(spec)  # every setting's config is valid before anything runs
    write_json(
        path,
        {
            "description": spec.description,
            "fingerprint": fingerprint(spec),
            "spec": dataclasses.asdict(spec),
            "budget": spec.budget,
            "tasks": spec.tasks.split(","),
            "seeds": spec.seeds,
            "code_revision": code_revision(),
            "settings": [
                {
                    "name": s.name,
                    "setting": s.values,
                    "kind": s.kind,
                    "steps": s.steps,
                    "seconds_per_step": s.seconds_per_step,
                    "pretrain": f"runs/{s.name}/pretrain",
                    "glue": f"runs/{s.name}/glue",
                    "group": s.group,
                    "pretrain_seed": s.pretrain_seed,
                    "setting_state": dataclasses.asdict(s),
                }
                for s in settings
            ],
        },
        indent=1,
    )
    return settings


def _pretrain_worker(
    cfg_dict: dict,
    run: str,
    device: str | None,
    threads: int | None = None,
    loggers: tuple[str, ...] = (),
    progress: bool = True,
    init: Init | None = None,
) -> int:
    """One setting's pretraining (resumed from its checkpoints if it has any; `init`: the model a fresh one
    starts from); `threads`: in a worker process, its share of the CPU cores."""
    import torch

    if threads is not None:  # the study's split of the cores, which auto then keeps (as under OMP_NUM_THREADS)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        os.environ[THREADS_SHARE_ENV] = f"the study's share of {plural(usable_cpus(), 'core')}"
        torch.set_num_threads(threads)
    resume = "auto" if list_checkpoints(run) else None
    cfg = from_dict(cfg_dict)
    meta = pretrain(cfg, run, resume=resume, device=device, loggers=loggers, progress=progress, init=init)
    if parent_gone():  # a pool worker whose study died: no one to report to, or to wait for
        os._exit(128 + int(signal.SIGTERM))
    return meta.step


def pretrain_job(spec: StudySpec, s: Setting, threads: int | None = None) -> Job:
    """Setting `s`'s pretraining as a Job: done when its run finished its steps (its final checkpoint on disk)."""
    run = run_dir(spec, s) / "pretrain"
    cfg = dataclasses.asdict(s.config(spec))
    init = () if s.init is None else (s.init,)  # the model a setting starts from, if any
    if spec.executor == "slurm":
        fn, args = pretrain_in_job, (cfg, str(run), spec.device, tuple(spec.loggers), *init)
    else:
        fn, args = _pretrain_worker, (cfg, str(run), spec.device, threads, tuple(spec.loggers), spec.progress, *init)
    return Job(
        f"pretrain/{s.name}",
        fn,
        args,
        functools.partial(pretrained, run, s.steps),
        title=f"pretraining {s.name}: {plural(s.steps, 'step')} -> {run}",
        progress=functools.partial(modified, run / "metrics.jsonl"),
    )


def pretrain_all(spec: StudySpec, settings: list[Setting]) -> None:
    """Every setting's pretraining on this machine, `spec.parallel` at a time (the no-pretraining baseline: its
    step-0 run, written here); raises StudyStopped when a run stopped short of its steps (a signal)."""
    for s in settings:
        if s.kind == "none":  # the step-0 run of its initialised model (kept if it is there)
            write_initialised_run(s.config(spec), run_dir(spec, s) / "pretrain", resume="auto")
    todo = [s for s in settings if s.kind != "none" and not pretrained(run_dir(spec, s) / "pretrain", s.steps)]
    if not todo:
        return
    workers = max(1, min(spec.parallel, len(todo)))
    threads = None if workers == 1 else max(1, usable_cpus() // workers)
    if workers > 1:
        print(f"== pretraining {plural(len(todo), 'setting')}, {workers} at a time ({plural(threads, 'thread')} "
              "each)", flush=True)  # fmt: skip
    LocalExecutor(workers).run([pretrain_job(spec, s, threads) for s in todo])
    for s in todo:
        run = run_dir(spec, s) / "pretrain"
        if not pretrained(run, s.steps):
            step = json.loads((run / "run.json").read_text()).get("step", 0) if (run / "run.json").exists() else 0
            raise StudyStopped(f"{s.name} stopped at step {step:,} of {s.steps:,} (a checkpoint was saved)")


def pretrain_in_job(
    cfg_dict: dict, run: str, device: str | None, loggers: tuple[str, ...], init: Init | None = None
) -> int:
    """One setting's pretraining in a SLURM job; with several tasks (SlurmOptions.pretrain_gpus), one DDP rank
    each, given the rendezvous torchrun would give them (submitit's TorchDistributedEnvironment). Stopped by
    SLURM's warning signal (preemption, the time limit), it saves a checkpoint, then has submitit requeue the job,
    which resumes from it."""
    if int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        import submitit

        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    step = _pretrain_worker(cfg_dict, run, device, loggers=loggers, progress=False, init=init)
    stopped = json.loads((Path(run) / "run.json").read_text()).get("stopped_by_signal")
    if stopped == int(signal.SIGUSR2):  # SLURM's warning: the checkpoint is saved; now submitit requeues the job
        signal.raise_signal(signal.SIGUSR2)  # (its handler is back in place: PretrainingJob.checkpoint)
    return step


def modified(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


class StudyStopped(Exception):
    """A signal stopped the study: a pretraining run saved a checkpoint short of its budget (SIGTERM, Ctrl-C), or
    Ctrl-C interrupted fine-tuning. `lines`: what stopped, then where each setting stands (`progress_lines`);
    running the same study again continues from there."""

    def __init__(self, *lines: str):
        super().__init__(*lines)
        self.lines = list(lines)

    def __str__(self) -> str:
        return "\n".join([*self.lines, "running the same study again continues it"])


def progress_lines(spec: StudySpec, settings: list[Setting]) -> list[str]:
    """Where each setting stands, from its folders: pretrained, stopped at a step, or not started; and how many of
    its fine-tuning runs finished."""
    lines = []
    for s in settings:
        run, runs = run_dir(spec, s) / "pretrain", len(spec.tasks.split(",")) * len(spec.seeds)
        if pretrained(run, s.steps):
            state = "pretrained"
        elif list_checkpoints(run):
            step = json.loads((run / "run.json").read_text()).get("step", 0) if (run / "run.json").exists() else 0
            state = f"pretraining at step {step:,} of {s.steps:,}"
        else:
            state = "pretraining not started"
        lines.append(f"  {s.name}: {state}; {finished_runs(run.parent / 'glue')} of {runs} fine-tuning runs finished")
    return lines


def sweep_spec(spec: StudySpec, s: Setting, finetune) -> SweepSpec:
    """Setting `s`'s GLUE sweep: its pretrained model over the study's tasks and seeds."""
    rdir = run_dir(spec, s)
    return SweepSpec(
        out=str(rdir / "glue"),
        model=str(rdir / "pretrain"),
        tasks=spec.tasks.split(","),
        glue_dir=spec.glue_dir,
        seeds=list(spec.seeds),
        finetune=finetune,
        recipe=spec.recipe,
        device=spec.device or "auto",
        num_workers=spec.parallel if spec.executor == "local" else 1,
        progress=False,
        loggers=list(spec.loggers),
        executor=spec.executor,
        slurm=spec.slurm,
    )


def finetune_all(spec: StudySpec, settings: list[Setting]) -> None:
    """Each setting's GLUE sweep on this machine, one setting after the other, under one progress bar."""
    finetune = load_finetune_config(spec.recipe, spec.finetune_overrides)
    # one bar over the phase's runs, with tqdm's estimate of the time left, advanced as each run ends (runs a
    # resumed study finished before count from the start)
    done = sum(finished_runs(run_dir(spec, s) / "glue") for s in settings)
    total = len(settings) * len(spec.tasks.split(",")) * len(spec.seeds)
    bar = tqdm(total=total, initial=done, desc="fine-tuning", unit="run", disable=not spec.progress)
    for s in settings:
        print(f"== fine-tuning {s.name} on {spec.tasks} ({plural(len(spec.seeds), 'seed')})", flush=True)
        try:
            result = run_sweep(sweep_spec(spec, s, finetune), on_runs=bar.update)
        except SweepInterrupted as stop:
            bar.close()
            during = f": {stop.interrupted_text()}" if stop.interrupted else " between two runs"
            raise StudyStopped(f"Ctrl-C interrupted the fine-tuning of {s.name}{during}") from None
        if not result.ok:
            log.warning(
                "%s: some fine-tuning runs failed (%s); run the study again to retry them",
                s.name,
                [f"{f['task']} seed {f['seed']}" for f in result.failed],
            )
    bar.close()


def study_on_slurm(spec: StudySpec, settings: list[Setting], plan_seconds: float | None) -> None:
    """The study as SLURM jobs: each setting's pretraining one job, submitted at once; each setting's fine-tuning
    one job array, submitted as soon as its pretraining is done (at once for the no-pretraining baseline and for
    runs already pretrained), all followed together. Each sweep's report is written at the end; jobs that ended
    without a result are raised then (JobsFailed), and a setting whose pretraining failed is not fine-tuned."""
    o, study = spec.slurm, Path(spec.out).resolve().name
    executor = SlurmExecutor(Path(spec.out) / "slurm", o, plan_seconds)
    finetune = load_finetune_config(spec.recipe, spec.finetune_overrides)
    sweeps: list[Path] = []

    def submit_finetuning(s: Setting) -> None:
        sweep = sweep_spec(spec, s, finetune)
        print(f"== fine-tuning {s.name} on {spec.tasks} ({plural(len(spec.seeds), 'seed')}): SLURM", flush=True)
        opened = open_sweep(sweep)
        sweeps.append(Path(sweep.out))
        jobs = glue_jobs(sweep, opened.pending, prefix=f"{s.name}/")
        executor.submit(jobs, "finetune", f"{o.job_name}-{study}-{s.name}-glue")

    for s in settings:
        run = run_dir(spec, s) / "pretrain"
        if s.kind == "none":
            write_initialised_run(s.config(spec), run, resume="auto")
        if s.kind == "none" or pretrained(run, s.steps):
            submit_finetuning(s)
        else:
            name = f"{o.job_name}-{study}-{s.name}-pretrain"
            executor.submit([pretrain_job(spec, s)], "pretrain", name, on_done=lambda _, s=s: submit_finetuning(s))
    failures = executor.wait()
    for out in sweeps:
        write_report_only(out)
    if failures:
        raise JobsFailed(failures)


def run_study(spec: StudySpec) -> Path:
    """Pretrain every setting, fine-tune each, write the report; returns the report folder."""

    check_trackers(spec.loggers)  # a missing tracker package fails now, not after the pretraining
    if spec.executor not in EXECUTORS:
        raise ConfigError(f"executor {spec.executor!r}: expected one of {list(EXECUTORS)}")
    fitted: list[str] = []
    if spec.executor == "slurm":  # what each job asks for, fitted to the partition (or refused) before anything
        check_options(spec.slurm)
        options, fitted = fit_to_cluster(spec.slurm, spec.device)
        spec = dataclasses.replace(spec, slurm=options)
    with folder_lock(spec.out, "study"):  # a second `electra study` on this folder is refused while this one runs
        settings = start(spec)
        plan = make_plan(spec, settings)
        where = [plan_line(spec.slurm, fitted)] if spec.executor == "slurm" else []
        print("\n".join([*plan_lines(plan, spec.out), *where]), flush=True)
        try:
            if spec.executor == "slurm":
                study_on_slurm(spec, settings, plan.pretrain_seconds + (plan.finetune_seconds or 0.0))
            else:
                pretrain_all(spec, settings)
                finetune_all(spec, settings)
        except JobsDetached as stop:  # Ctrl-C while following SLURM jobs: they go on
            raise StudyStopped(*stop.lines) from None
        except (StudyStopped, KeyboardInterrupt) as stop:  # what stopped, and where each setting stands
            what = stop.lines if isinstance(stop, StudyStopped) else ["Ctrl-C interrupted the study"]
            raise StudyStopped(*what, *progress_lines(spec, settings)) from None
        return write_report([spec.out], Path(spec.out) / "report")
