"""`electra glue` as a library function: fine-tune one pretrained model on tasks x seeds, each run resumable,
then report. `run_sweep(SweepSpec(...))` does the work; electra/cli/glue.py only turns flags into a SweepSpec.

    OUT/sweep.json                       what this folder holds (model, recipe, hyperparameters, their fingerprint)
    OUT/runs/TASK/seedS/result.json      one finished run, written atomically when it finishes
    OUT/runs/TASK/seedS/metrics.jsonl    its training loss every LOG_EVERY steps and its final dev metrics
    OUT/runs/TASK/seedS/claim            the process working on it (several processes can share OUT)
    OUT/runs/TASK/seedS/failed.json      a run that failed (non-finite loss); retried next time
    OUT/results.{json,csv,md}            the report, rewritten after every finished run
    OUT/submission/, glue_submission.zip test predictions in the GLUE server format (finetune.predict_test)
    OUT/tensorboard/TASK/seedS/          with `loggers` tensorboard: the run's metrics.jsonl as event files
    OUT/wandb/                           with `loggers` wandb: one W&B run per (task, seed), grouped by OUT's name

Running the same spec again skips finished runs and takes over runs whose claiming process died, so a killed
sweep resumes where it stopped; Ctrl-C (SIGINT) raises SweepInterrupted, which says which runs finished, which were
interrupted (they start again from their first step) and which had not started. With several devices or workers,
one process per worker (`python -m electra.glue.sweep SPEC.json DEVICE`, given the SweepSpec as JSON) divides the
runs with the others through the claim files (so do separate sweeps, e.g. on several machines sharing OUT).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from electra.config import ConfigError, FinetuneConfig, merge, validate_finetune
from electra.executors.follow import SlurmExecutor
from electra.executors.jobs import EXECUTORS, Job, JobsDetached, JobsFailed
from electra.executors.local import start_workers, stop_workers
from electra.executors.partition import fit_to_cluster
from electra.executors.slurm import SlurmOptions, check_options, current_job_id, request_text
from electra.glue.finetune import Pretrained, finetune, load_pretrained, prepare
from electra.glue.loading import TaskData, load_task
from electra.glue.plan import make_plan, plan_lines
from electra.glue.report import chance_lines, pretraining_gate, run_folder, write_report
from electra.glue.submission import write_submission
from electra.glue.tasks import TASKS, TaskSpec, resolve_tasks
from electra.modeling.hub import model_identity
from electra.training.checkpoint import model_source
from electra.training.loop import keep_freed_memory_in_heap
from electra.training.precision import resolve_device as resolve_training_device
from electra.training.trackers import check_trackers, open_loggers
from electra.utils.files import write_json
from electra.utils.machine import choose_threads, threads_kept
from electra.utils.processes import (
    PARENT_ENV,
    THREADS_SHARE_ENV,
    interrupts_outside_finalizers,
    stop_with_parent,
    usable_cpus,
)
from electra.utils.wording import argument, plural, source_text

log = logging.getLogger("electra.glue")

# Fields that change what a run computes; the others (outputs, eval batch size) may differ between reruns.
_NOT_FINGERPRINTED = ("predict_test", "save_model", "eval_every_epoch", "eval_batch_size", "threads")


@dataclass
class SweepSpec:
    """One sweep: a pretrained model fine-tuned with one recipe on tasks x seeds, into one output folder."""

    out: str
    """The output folder; running the same spec again resumes it."""
    model: str | None = None
    """A pretraining run folder, a checkpoint, our HF export, a transformers ELECTRA folder, or a hub model id
    (ORG/NAME[@REVISION], from the local Hugging Face cache when offline)."""
    tasks: list[str] = field(default_factory=lambda: ["all"])
    """all, GLUE task names (cola sst2 mrpc stsb qqp mnli qnli rte wnli) and/or folders holding a task.json."""
    glue_dir: str | None = None
    """A GLUE folder: the original TSVs (CoLA/, SST-2/, ...), or per task nyu-mll/glue's config saved by `datasets`
    (rte/ from save_to_disk) or as the hub repo's Parquet files (rte/train-00000-of-00001.parquet, ...). None:
    nyu-mll/glue from the hub (offline: from the local datasets cache)."""
    seeds: list[int] = field(default_factory=lambda: list(range(3)))
    """Fine-tuning seeds: each (task, seed) is one run; the report gives each task's median and spread over them."""
    tokenizer: str | None = None
    """A tokenizer folder, when none comes with the model."""
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    """The hyperparameters of every run (a recipe's, with overrides): electra/config/finetune.py FinetuneConfig."""
    recipe: str | None = None
    """The recipe `finetune` started from; recorded in sweep.json, not fingerprinted (its values are)."""
    device: str = "auto"
    """auto (cuda if available), cpu, cuda, cuda:1, ..."""
    devices: list[str] = field(default_factory=list)
    """One worker process per entry (repeat a device for two workers on it); empty: `num_workers` on `device`."""
    num_workers: int = 1
    """Worker processes on `device`, dividing the runs (CPU workers split the cores)."""
    stop_after: int | None = None
    """End this session after this many runs (the next call continues)."""
    progress: bool = True
    """A progress bar per run."""
    loggers: list[str] = field(default_factory=list)
    """Trackers each run also logs to (tensorboard, wandb): one tracker run per (task, seed), grouped by sweep."""
    executor: str = "local"
    """local: this process (and its workers); slurm: each (task, seed) one element of a SLURM job array
    (electra/executors/), this process submitting, waiting and writing the report."""
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    """What each SLURM job asks for (electra/executors/slurm.py); fitted to the partition before submitting."""


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped the sweep. Its finished runs are kept, and in the report; running the same sweep
    again does the rest, the interrupted runs from their first step. `lines()`: what finished, what was interrupted,
    what had not started, and where the report is."""

    def __init__(
        self,
        interrupted: Sequence[tuple[str, int]],
        finished: Sequence[tuple[str, int]] = (),
        waiting: Sequence[tuple[str, int]] = (),
        out: str | None = None,
    ):
        super().__init__(interrupted, finished, waiting, out)  # args: so that it pickles
        self.interrupted, self.finished, self.waiting, self.out = list(interrupted), list(finished), list(waiting), out

    def lines(self) -> list[str]:
        total = len(self.finished) + len(self.interrupted) + len(self.waiting)
        lines = [
            f"stopped (Ctrl-C): {len(self.finished)} of {plural(total, 'run')} finished, {len(self.interrupted)} "
            f"interrupted, {len(self.waiting)} not started",
            f"  finished: {runs_text(self.finished)}",
            f"  interrupted: {self.interrupted_text()}",
            f"  not started: {runs_text(self.waiting)}",
        ]
        if self.out is not None and self.finished:
            lines.append(f"report of the finished runs: {Path(self.out) / 'results.md'}")
        return lines

    def interrupted_text(self) -> str:
        """ "rte seed 2 (it starts again from its first step)"; "none"."""
        return runs_text(self.interrupted) + _restart(len(self.interrupted))

    def __str__(self) -> str:
        return "\n".join([*self.lines(), "running the same sweep again continues it"])


def _restart(n: int) -> str:
    """What happens to `n` interrupted runs when the sweep runs again."""
    if n == 0:
        return ""
    return " (it starts again from its first step)" if n == 1 else " (they start again from their first step)"


def runs_text(runs: list[tuple[str, int]]) -> str:
    """(task, seed) pairs as people read them: "rte seeds 0, 1; mrpc seed 2" (tasks in the order given)."""
    by_task: dict[str, list[int]] = {}
    for task, seed in runs:
        by_task.setdefault(task, []).append(seed)
    parts = [f"{task} seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))}" for task, seeds in by_task.items()]
    return "; ".join(parts) or "none"


@dataclass
class SweepResult:
    """What a sweep left in its folder: the report, the failures, and how its worker processes ended."""

    results: dict
    """The results.json object; {} while no run has finished."""
    failed: list[dict]
    """Runs whose loss became non-finite; the next call retries them."""
    worker_exit_codes: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and not any(self.worker_exit_codes)


def run_sweep(spec: SweepSpec, on_runs: Callable[[int], None] | None = None) -> SweepResult:
    """Fine-tune `spec.model` on every (task, seed) not finished in `spec.out`, then write the report. `on_runs(n)`
    is told as runs end, in this process or its workers (e.g. a caller's progress bar: `bar.update`).

    Everything is checked before the first run: the spec, every task's files, and (when runs remain) the model.
    """
    check_spec(spec)
    if spec.executor == "slurm":  # what each job asks for, fitted to the partition (or refused) before anything
        fitted, notes = fit_to_cluster(spec.slurm, spec.device)
        spec = dataclasses.replace(spec, slurm=fitted)
        print(f"on SLURM: each (task, seed) one element of a job array ({request_text(fitted, 'finetune')}); "
              + "; ".join(notes))  # fmt: skip
    sweep = open_sweep(spec)
    out, header, runs, codes = Path(spec.out), sweep.header, sweep.runs, []
    devices = spec.devices or [spec.device] * spec.num_workers
    if sweep.pending:  # what it will do, and about how long, before the first run
        p = sweep.pretrained
        plan = make_plan(sweep.data, sweep.pending, p.cfg, p.tokenizer, spec.finetune, resolve_device(devices[0]),
                         len(devices))  # fmt: skip
        print("\n".join(plan_lines(plan, str(out), on_slurm=spec.executor == "slurm")), flush=True)
    try:
        if spec.executor == "slurm":
            try:
                on_slurm(spec, sweep.pending, on_runs)
            except JobsFailed:
                finish(out, header, codes)  # the report of the runs that finished, then what failed
                raise
        elif len(devices) > 1:
            codes = with_workers(spec, devices, len(sweep.pending), on_runs)
            if any(codes):
                log.error("worker processes exited with %s; run the same sweep again to resume", codes)
        else:
            with threads_kept(), interrupts_outside_finalizers():  # the caller's threads; a Ctrl-C never lost
                work(spec, header, sweep.data, resolve_device(devices[0]), sweep.pretrained, on_runs)
    except JobsDetached:  # Ctrl-C while following SLURM jobs: they go on (the caller says so)
        raise
    except KeyboardInterrupt as stop:  # Ctrl-C: what is done and what is not, from the folder
        finished = [r for r in runs if (run_dir(out, *r) / "result.json").exists()]
        interrupted = [r for r in getattr(stop, "interrupted", []) if r not in finished]
        waiting = [r for r in runs if r not in finished and r not in interrupted]
        raise SweepInterrupted(interrupted, finished, waiting, str(out)) from None
    return finish(out, header, codes)


@dataclass
class OpenSweep:
    """A sweep checked and ready to run: its header (sweep.json, written), its runs and those still to do, every
    task's data read, and the model loaded when runs remain."""

    header: dict
    runs: list[tuple[str, int]]
    pending: list[tuple[str, int]]
    data: dict[str, TaskData]
    pretrained: Pretrained | None


def open_sweep(spec: SweepSpec) -> OpenSweep:
    """Check everything before the first run: every task's files, the model the runs will come from (a run still
    training is refused before anything is written), the folder's earlier runs (same settings, same checkpoint)."""
    out = Path(spec.out)
    tasks, skipped = resolve_tasks(spec.tasks, spec.glue_dir)
    for name in skipped:
        log.warning("skipping %s: no %s data in %s", name, name, spec.glue_dir)
    runs = [(t.task.name, s) for t in tasks for s in spec.seeds]
    pending = [(t, s) for t, s in runs if not (run_dir(out, t, s) / "result.json").exists()]
    if len(pending) < len(runs):  # said here, once, not by each worker
        print(f"skipping {len(runs) - len(pending)} finished run(s) in {out}")
    data = load_data(tasks, spec.finetune)  # every file read (and validated) now: a malformed row fails now
    for name, d in data.items():
        print(f"{name}: {d.n_train} train / {d.n_eval} dev examples" + (f", test {list(d.test)}" if d.test else ""))
    source = model_source(spec.model) if pending else None  # a run still training is refused before anything is written
    header = check_sweep_header(out, spec, write=True, source=source)
    pretrained = load_source(spec, header) if pending else None  # a bad model fails now
    return OpenSweep(header, runs, pending, data, pretrained)


def write_report_only(out: str | Path) -> SweepResult:
    """Rewrite the report (and submission) of `out` from its finished runs; no training."""
    return finish(Path(out), read_header(Path(out)), [])


def check_spec(spec: SweepSpec) -> None:
    """Refuse a spec no sweep can run, before any work starts."""
    if not spec.model:
        raise ValueError(f"a sweep needs a model: a run folder, a checkpoint or an HF folder ({argument('model')})")
    seeds = spec.seeds
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ValueError(f"seeds {seeds}: need at least one seed, distinct and non-negative")
    if spec.num_workers < 1 or (spec.stop_after is not None and spec.stop_after < 1):
        raise ValueError("num_workers and stop_after must be at least 1")
    if spec.executor not in EXECUTORS:
        raise ValueError(f"executor {spec.executor!r}: expected one of {list(EXECUTORS)}")
    if spec.executor == "slurm":
        check_options(spec.slurm)
    check_trackers(spec.loggers)
    validate_finetune(spec.finetune)
    for device in [] if spec.executor == "slurm" else spec.devices or [spec.device]:  # the jobs' GPUs: not here
        resolve_device(device)  # before any data is read, in `electra pretrain`'s words


def load_data(tasks: list[TaskSpec], cfg: FinetuneConfig) -> dict[str, TaskData]:
    return {t.task.name: load_task(t, with_test=cfg.predict_test) for t in tasks}


def work(
    spec: SweepSpec,
    header: dict,
    data: dict[str, TaskData],
    device: torch.device,
    pretrained: Pretrained | None = None,
    on_runs: Callable[[int], None] | None = None,
    job: str | None = None,
) -> None:
    """This process's share of the sweep: every (task, seed) not finished and not claimed by a live process. `job`:
    the SLURM job this process is, which its submitter gave its run alone: a claim another job or process holds
    on it is an error, never skipped in silence (`claim`)."""
    keep_freed_memory_in_heap()  # process-wide: faster CPU steps (docs/benchmarks.md); host memory only on a GPU
    out, cfg = Path(spec.out), spec.finetune
    if device.type == "cpu":
        threads, why = choose_threads(cfg.threads)  # in a worker: what spawn_workers set, and why
        log.info("%s (%s)", plural(threads, "thread"), why)
    todo = [(t, s) for t in data for s in spec.seeds]
    prepared, finished = {}, 0
    for i, (task, seed) in enumerate(todo, 1):
        rdir = run_dir(out, task, seed)
        if (rdir / "result.json").exists() or not claim(rdir, job):
            continue
        try:
            if pretrained is None:
                pretrained = load_source(spec, header)
            if task not in prepared:
                prepared[task] = prepare(data[task], pretrained.tokenizer, cfg)
            writers = open_trackers(spec, task, seed)
            try:
                record = finetune(prepared[task], pretrained, cfg, seed, device, rdir, spec.progress, writers)
            finally:
                for w in writers:
                    w.close()
            record.update(
                fingerprint=header["fingerprint"],
                config=dataclasses.asdict(cfg),
                model=spec.model,
                checkpoint=pretrained.source,
                worker={"pid": os.getpid(), "host": socket.gethostname()},
            )
            write_json(rdir / "result.json", record)
            (rdir / "failed.json").unlink(missing_ok=True)
            print(f"[{i}/{len(todo)}] {summary_line(record)}", flush=True)
        except KeyboardInterrupt:  # Ctrl-C: the run is dropped (its claim too, below) and named
            raise SweepInterrupted([(task, seed)]) from None
        except FloatingPointError as err:  # this run diverged; the others may not
            write_json(rdir / "failed.json", {"task": task, "seed": seed, "error": str(err)}, indent=None)
            log.error("%s", err)
        finally:
            (rdir / "claim").unlink(missing_ok=True)
        finished += 1
        if on_runs is not None:
            on_runs(1)
        write_report(out, *collect(out), header)
        if spec.stop_after is not None and finished >= spec.stop_after:
            print(f"stopping after {finished} run(s) (stop_after); run the same sweep again to continue")
            break


def open_trackers(spec: SweepSpec, task: str, seed: int) -> list:
    """The trackers of one run: TensorBoard in OUT/tensorboard/TASK/seedS (emptied: a run restarts from step 0),
    W&B runs under OUT/wandb named TASK-seedS in the group OUT's name, with the run's resolved FinetuneConfig."""
    out = Path(spec.out)
    tensorboard_dir = out / "tensorboard" / task / f"seed{seed}"
    shutil.rmtree(tensorboard_dir, ignore_errors=True)
    config = {
        "finetune": dataclasses.asdict(spec.finetune),
        "task": task,
        "seed": seed,
        "model": spec.model,
        "recipe": spec.recipe,
    }
    return open_loggers(
        spec.loggers, out, config, name=f"{task}-seed{seed}", group=out.resolve().name, tensorboard_dir=tensorboard_dir
    )


def finish(out: Path, header: dict, worker_exit_codes: list[int]) -> SweepResult:
    """The report and, when runs predicted test sets, the submission; a short summary printed, the results
    returned."""
    records, failed = collect(out)
    if not records:
        print(f"no finished runs in {out} yet")
        return SweepResult({}, failed, worker_exit_codes)
    results = write_report(out, records, failed, header)
    if any(r.get("test_predictions") for r in records):
        zip_path, missing = write_submission(out, records, lambda t, s: run_dir(out, t, s))
        if zip_path is not None:
            also = f" (the server also needs: {', '.join(missing)})" if missing else ""
            print(f"GLUE submission: {zip_path}{also}")
    print(f"report: {out / 'results.md'} (also .json, .csv)")
    if header.get("source"):
        print(f"model: {source_text(header['source'])}")
    print("\n".join(summary_lines(results, records, failed)))  # last: what the sweep gave, from what model
    gate = pretraining_gate(header.get("model"), (header.get("source") or {}).get("step"))
    if gate.learned is not None:
        print(f"pretraining, by the learning gate: {gate.word.upper()} (results.md says why)")
    return SweepResult(results, failed, worker_exit_codes)


def summary_lines(results: dict, records: list[dict], failed: list[dict]) -> list[str]:
    """One line per task (its main metric: median ± std over seeds, beside what a model that ignores its input
    scores), the aggregate scores that are defined, and the warnings: seeds at chance level, failed runs. The rest
    is in results.md."""
    main = {r["task"]: r.get("main_metric") for r in records}  # records before main_metric: the registry's
    lines = []
    for task, entry in results["tasks"].items():
        metric = main.get(task) or (TASKS[task].main_metric if task in TASKS else next(iter(entry["metrics"])))
        s = entry["metrics"][metric]
        seeds = plural(s["n"], "seed")
        lines.append(
            f"{task:<12} {metric:<12} {s['median']:6.2f} ± {s['std']:.2f} (median ± std over {seeds}"
            f"{_chance(entry.get('chance'))})"
        )
    scores = [f"{style} {score:.2f}" for style, score in results["scores"].items() if score is not None]
    if scores:
        lines.append("GLUE scores: " + ", ".join(scores))
    by_task: dict[str, list[dict]] = {}
    for r in records:
        by_task.setdefault(r["task"], []).append(r)
    lines += [f"WARNING {line}" for line in chance_lines(by_task)]
    if failed:
        lines.append(f"{plural(len(failed), 'run')} failed (non-finite loss); run the same sweep again to retry them")
    return lines


def _chance(chance: dict | None) -> str:
    """ "; chance accuracy 50.00": the task's chance level (results.json's, electra/glue/report.py chance_summary)
    named by the metric it is a level of (STS-B's: Spearman, the line's; results written before that: Pearson);
    "" for results written before it was recorded."""
    if not chance:
        return ""
    return f"; chance {chance['metric']} {chance['baseline']:.2f}"


def summary_line(r: dict) -> str:
    scores = ", ".join(f"{k} {v:.2f}" for k, v in r["metrics"].items())
    loss = f"loss {r['loss_start']:.3f} -> {r['loss_end']:.3f}" if r["loss_start"] is not None else "no steps"
    line = f"{r['task']} seed {r['seed']}: {scores} | {plural(r['steps'], 'step')}, {loss}, {r['seconds']:.1f} s"
    if r["chance"]["at_chance"]:
        c = r["chance"]
        line += f" | AT CHANCE ({c['metric']} {c['value']:.1f} vs. baseline {c['baseline']:.1f} + {c['margin']:.1f})"
    return line


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


def fingerprint(spec: SweepSpec) -> tuple[str, dict]:
    fields = {k: v for k, v in dataclasses.asdict(spec.finetune).items() if k not in _NOT_FINGERPRINTED}
    # the model as a run folder (a checkpoint stands for its run) or a hub id with the commit of its snapshot; which
    # checkpoint the runs came from is sweep.json's "source", checked by its sha256 (check_sweep_header)
    fields["model"] = model_identity(run_folder(spec.model) or spec.model)
    fields["tokenizer"] = str(Path(spec.tokenizer).resolve()) if spec.tokenizer else None
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16], fields


def check_sweep_header(out: Path, spec: SweepSpec, write: bool, source: dict | None = None) -> dict:
    """OUT may only hold runs of one model and one set of hyperparameters: mixing them would corrupt the medians.
    `source`: the checkpoint this call will fine-tune (electra.training.checkpoint.model_source), refused when the
    runs already in OUT came from another; the header keeps the one recorded (sweep.json "source")."""
    fp, fields = fingerprint(spec)
    path = out / "sweep.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    if old and old["fingerprint"] != fp:
        diff = [f"{k}: {old['fields'].get(k)!r} -> {v!r}" for k, v in fields.items() if old["fields"].get(k) != v]
        raise ValueError(
            f"{path}:1: this folder holds runs with other settings ({'; '.join(diff)}); use another output folder"
        )
    recorded = old.get("source")
    if source is not None and recorded is not None and source["sha256"] != recorded["sha256"]:
        raise ValueError(
            f"{path}:1: this folder's runs were fine-tuned from {source_text(recorded)}; {spec.model} is now "
            f"{source_text(source)}: use another output folder for it, or name the checkpoint the runs came from "
            "to add seeds to them"
        )
    if source is not None and recorded is None and old and finished_runs(out):
        log.warning("%s: written before sweep.json named its checkpoint; its runs are taken to be from %s", path,
                    source_text(source))  # fmt: skip
    header = {
        "model": spec.model,
        "recipe": spec.recipe,
        "fingerprint": fp,
        "fields": fields,
        "config": dataclasses.asdict(spec.finetune),
        "source": recorded or source,
    }
    if write:
        write_json(path, header)
    return header


def load_source(spec: SweepSpec, header: dict) -> Pretrained:
    """The model this sweep's runs fine-tune: the checkpoint sweep.json recorded (its sha256 checked), or, for a
    sweep.json written before it did, the model the spec names."""
    source = header.get("source")
    if source is None:
        return load_pretrained(spec.model, spec.tokenizer)
    return load_pretrained(source["path"], spec.tokenizer, expected=source)


def read_header(out: Path) -> dict:
    path = out / "sweep.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no sweep in this folder")
    return json.loads(path.read_text())


class RunClaimedError(RuntimeError):
    """A SLURM job found its run claimed by another live job or process: it does not run it a second time."""


def claim(rdir: Path, job: str | None = None) -> bool:
    """Take the run for this process; False when a live process holds it. A dead holder's claim on this host is
    taken over. In a SLURM job (`job`: its id), the claim carries the id and yields only to the same job, i.e.
    its own requeue; another holder raises RunClaimedError (its submitter clears the claims of jobs that left the
    queue before it submits their runs again: `drop_job_claim`)."""
    rdir.mkdir(parents=True, exist_ok=True)
    path = rdir / "claim"
    me = {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time(), "slurm_job": job}
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                holder = json.loads(path.read_text() or "{}")
            except (OSError, json.JSONDecodeError):
                return False  # being written by its holder right now
            own_requeue = job is not None and holder.get("slurm_job") == job
            dead = holder.get("host") == me["host"] and not pid_alive(holder.get("pid", -1))
            if own_requeue or dead:
                log.warning("%s: taking over from process %s, which is gone", rdir, holder.get("pid"))
                path.unlink(missing_ok=True)
                continue
            if job is not None:
                raise RunClaimedError(
                    f"{rdir}: claimed by {holder_text(holder)}: this job ({job}) does not run it a second time"
                ) from None
            return False
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        return True
    return False


def holder_text(holder: dict) -> str:
    job = f"SLURM job {holder['slurm_job']}, " if holder.get("slurm_job") else ""
    return f"{job}process {holder.get('pid', '?')} on {holder.get('host', '?')}"


def drop_job_claim(rdir: Path) -> None:
    """Remove the claim a SLURM job left on its run (it was cancelled or died and left the queue), so that the
    job submitted for the run next can take it; a claim of a process outside SLURM is kept."""
    path = rdir / "claim"
    try:
        holder = json.loads(path.read_text() or "{}")
    except (OSError, json.JSONDecodeError):
        return
    if holder.get("slurm_job"):
        path.unlink(missing_ok=True)


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
    """`auto`: CUDA when there is one, else the CPU; a device asked for that is not there is refused as `electra
    pretrain` refuses it (electra/training/precision.py resolve_device, DeviceError)."""
    return resolve_training_device(None if name == "auto" else name)


WORKER_POLL_SECONDS = 1.0
"""How often a sweep waiting on its workers counts their finished runs (result.json files) for `on_runs`."""


def with_workers(spec: SweepSpec, devices: list[str], runs: int, on_runs: Callable[[int], None] | None) -> list[int]:
    """`spawn_workers` under one progress bar over the sweep's runs, drawn here: the workers draw none (two
    processes' bars would write over each other, and a Ctrl-C that lands in a bar's clean-up prints a traceback)."""
    bar = tqdm(total=runs, desc="fine-tuning", unit="run", disable=not spec.progress)

    def told(n: int) -> None:
        bar.update(n)
        if on_runs is not None:
            on_runs(n)

    try:
        return spawn_workers(dataclasses.replace(spec, progress=False), devices, told)
    finally:
        bar.close()


def spawn_workers(spec: SweepSpec, devices: list[str], on_runs: Callable[[int], None] | None = None) -> list[int]:
    """One `python -m electra.glue.sweep` process per device (electra.executors.local.start_workers), given the
    spec as JSON; they share the runs through claim files. Returns their exit codes.

    Ctrl-C reaches this process alone: it notes the runs the workers hold, then stops them (SIGINT: each drops its
    run and exits quietly) and raises SweepInterrupted naming those runs, one summary instead of a traceback per
    worker."""
    out = Path(spec.out)
    path = out / "worker_spec.json"
    write_json(path, dataclasses.asdict(spec))
    threads = max(1, usable_cpus() // len(devices))  # CPU workers split the cores
    share = f"the sweep's share of {plural(usable_cpus(), 'core')}, {plural(len(devices), 'worker')}"
    procs = start_workers(
        "electra.glue.sweep", [[str(path), dev] for dev in devices], threads, {THREADS_SHARE_ENV: share}
    )
    try:
        if on_runs is not None:  # the workers' runs end in other processes: count the result.json files they write
            done = finished_runs(out)
            while any(p.poll() is None for p in procs):
                time.sleep(WORKER_POLL_SECONDS)
                now = finished_runs(out)
                if now > done:
                    on_runs(now - done)
                    done = now
        return [p.wait() for p in procs]
    except KeyboardInterrupt:
        held = claimed_by(out, {p.pid for p in procs})
        stop_workers(procs)  # a worker killed after WORKER_STOP_SECONDS leaves its claim to the next sweep
        raise SweepInterrupted(held) from None


def claimed_by(out: Path, pids: set[int]) -> list[tuple[str, int]]:
    """The (task, seed) runs of the sweep in `out` that processes `pids` of this host hold (their claim files)."""
    held = []
    for path in sorted(out.glob("runs/*/seed*/claim")):
        try:
            holder = json.loads(path.read_text() or "{}")
        except (OSError, json.JSONDecodeError):
            continue
        if holder.get("pid") in pids and holder.get("host") == socket.gethostname():
            held.append((path.parent.parent.name, int(path.parent.name.removeprefix("seed"))))
    return held


def finished_runs(out: Path) -> int:
    """How many runs of the sweep in `out` have finished (their result.json written)."""
    return sum(1 for _ in out.glob("runs/*/seed*/result.json"))


def glue_jobs(spec: SweepSpec, pending: list[tuple[str, int]], prefix: str = "") -> list[Job]:
    """A SLURM job (`run_in_job`) for each pending (task, seed) of the sweep, whose result.json says it is done;
    keyed PREFIXglue/TASK/SEED (a study's sweeps share one book: the prefix is the setting's name)."""
    out, raw = Path(spec.out), dataclasses.asdict(spec)
    jobs = []
    for task, seed in pending:
        rdir = run_dir(out, task, seed)
        jobs.append(
            Job(
                f"{prefix}glue/{task}/{seed}",
                run_in_job,
                (raw, task, seed),
                (rdir / "result.json").exists,
                progress=functools.partial(modified, rdir / "metrics.jsonl"),
                reset=functools.partial(drop_job_claim, rdir),
            )
        )
    return jobs


def modified(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def on_slurm(spec: SweepSpec, pending: list[tuple[str, int]], on_runs: Callable[[int], None] | None) -> None:
    """Each pending (task, seed) one element of a SLURM job array (`run_in_job`), named after the sweep's folder;
    returns when all have left the queue, raising JobsFailed for those that did so without a result."""
    out = Path(spec.out)
    executor = SlurmExecutor(out / "slurm", spec.slurm)
    name = f"{spec.slurm.job_name}-{out.resolve().name}-glue"
    failures = executor.run(glue_jobs(spec, pending), lambda _: on_runs(1) if on_runs else None, "finetune", name)
    if failures:
        raise JobsFailed(failures)


def run_in_job(raw: dict, task: str, seed: int) -> None:
    """One (task, seed) of the sweep `raw` (its SweepSpec as a dict), in a SLURM job: as a local run does it, from
    the checkpoint sweep.json names, under a claim that carries this job's id."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    spec = spec_from_dict(raw, source=f"{raw.get('out')} (the sweep's spec)")
    spec = dataclasses.replace(spec, seeds=[seed], executor="local", devices=[], num_workers=1, progress=False)
    tasks, _ = resolve_tasks(spec.tasks, spec.glue_dir)
    tasks = [t for t in tasks if t.task.name == task]
    header = check_sweep_header(Path(spec.out), spec, write=False)
    work(spec, header, load_data(tasks, spec.finetune), resolve_device(spec.device), job=current_job_id())


def spec_from_dict(raw: dict, source: str) -> SweepSpec:
    """A SweepSpec from its JSON form (dataclasses.asdict), rebuilt typed through the strict config merge:
    an unknown key or a wrong type fails naming it."""
    if not isinstance(raw, dict) or not isinstance(raw.get("out"), str):
        raise ConfigError(f"{source}: expected a sweep spec with an 'out' folder")
    spec = merge(SweepSpec(out=raw["out"]), raw, source)
    check_spec(spec)
    return spec


def _worker_main(path: str, device: str) -> int:
    if PARENT_ENV in os.environ:  # started by `spawn_workers`: stop with the sweep (and its study)
        stop_with_parent(int(os.environ[PARENT_ENV]))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    spec = spec_from_dict(json.loads(Path(path).read_text()), source=path)
    spec = dataclasses.replace(spec, device=device, devices=[], num_workers=1)
    tasks, _ = resolve_tasks(spec.tasks, spec.glue_dir)
    header = check_sweep_header(Path(spec.out), spec, write=False)
    try:
        with interrupts_outside_finalizers():
            work(spec, header, load_data(tasks, spec.finetune), resolve_device(device))
    except KeyboardInterrupt:  # stopped by the sweep (spawn_workers), which says what was interrupted
        return 128 + int(signal.SIGINT)
    finally:  # a stop that arrives while the interpreter shuts down (the last run just ended) has nothing to stop:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # without this, atexit hooks print its traceback
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1], sys.argv[2]))
