"""`electra study`: a grid of pretraining runs at an equal budget, each fine-tuned on GLUE over seeds, then one
report: the reproduction study's experiments (generator size, ELECTRA vs MLM vs none) as one command.

    electra study --base tiny --data runs/wiki --vary model.generator_fraction=0.125,0.25,0.5,0.75,1.0 \\
        --budget flops=1e14 --tasks sst2,mrpc,rte,wnli --glue-dir ../shared/data/glue --seeds 3 --out runs/gen
    electra study --base tiny --vary objective.kind=electra,mlm,none --budget seconds=1800 ... --out runs/obj

    STUDY/study.json            the spec, the settings with their steps, the code revision
    STUDY/runs/NAME/pretrain/   each setting's pretraining run (objective.kind=none: a step-0 checkpoint, i.e.
                                random initialisation, the no-pretraining baseline)
    STUDY/runs/NAME/glue/       its GLUE sweep (electra glue)
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
import hashlib
import itertools
import json
import logging
import os
import shutil
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from electra.config import ConfigError, PretrainConfig, load_config
from electra.utils.files import write_json
from electra.utils.wording import plural

log = logging.getLogger("electra.study")

BUDGET_KINDS = ("steps", "flops", "seconds")
CALIBRATION_STEPS = 5  # timed steps per setting for a seconds budget (after 2 untimed)


@dataclass
class StudySpec:
    """Everything that defines a study; study.json keeps it, and a rerun must ask for the same."""

    out: str
    base: str = "tiny"
    """Pretraining preset or YAML file every setting starts from."""
    overrides: list[str] = field(default_factory=list)
    """`section.key=value` for every setting."""
    vary: list[str] = field(default_factory=list)
    """`section.key=v1,v2,...`, repeatable: the settings are the product of the lists."""
    settings: list[str] = field(default_factory=list)
    """Named settings instead of (or after) a grid: `NAME:key=value;key=value`, e.g. `mlm:objective.kind=mlm` or
    `electra-T3:objective.temperature=3` (`NAME:` alone: the base config)."""
    budget: str = "steps"
    """`steps`, `flops=F`, `seconds=S` or `steps=N` (plain `steps`: the base config's max_steps)."""
    data: str | None = None
    """A prepared corpus (data.path); None: the built-in synthetic language."""
    tasks: str = "sst2,mrpc,rte,wnli"
    glue_dir: str | None = None
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    recipe: str = "off"
    """The fine-tuning recipe (electra glue --recipe)."""
    finetune_overrides: list[str] = field(default_factory=list)
    description: str = ""
    parallel: int = 1
    """Pretraining runs at once (CPU threads are split between them)."""
    device: str | None = None
    loggers: list[str] = field(default_factory=list)
    """Trackers every pretraining and fine-tuning run also logs to (tensorboard, wandb), as `electra pretrain` and
    `electra glue` do: RUN/tensorboard, and one W&B run per pretraining run and per fine-tuning (task, seed)."""
    progress: bool = True
    """Progress bars (pretraining, and the fine-tuning phase's)."""


# the fields that may change between a study's invocations without changing what it computes
_NOT_FINGERPRINTED = ("parallel", "device", "description", "out", "loggers", "progress")


@dataclass
class Setting:
    name: str
    values: dict[str, str]
    """What the grid set for this setting: key -> value as written."""
    kind: str
    """objective.kind: electra, mlm or none."""
    steps: int = 0
    seconds_per_step: float | None = None
    """Measured for a seconds budget."""

    def overrides(self, spec: StudySpec) -> list[str]:
        values = [f"{k}={v}" for k, v in self.values.items() if k != "objective.kind" or v != "none"]
        steps = [f"train.max_steps={self.steps}"] if self.steps else []
        data = [f"data.path={spec.data}"] if spec.data else []
        # the tokenizer's vocabulary, as the run will resolve it: so that the budget's FLOPs are the run's
        vocab = [f"model.vocab_size={vocabulary_size(spec.data)}"]
        return [*spec.overrides, *data, *vocab, *values, *steps]

    def config(self, spec: StudySpec) -> PretrainConfig:
        return load_config(spec.base, self.overrides(spec))


# -- the grid and its budget ---------------------------------------------------------------------------------------


@functools.cache
def vocabulary_size(data: str | None) -> int:
    """The vocabulary of the corpus's tokenizer (the built-in synthetic one without `data`)."""
    if data is None:
        from electra.data.synthetic import synthetic_tokenizer_info

        return synthetic_tokenizer_info().vocab_size
    from electra.data.corpus import TOKENIZER_FILE
    from electra.data.tokenizer import tokenizer_info

    return tokenizer_info(Path(data) / TOKENIZER_FILE).vocab_size


def grid(spec: StudySpec) -> list[Setting]:
    """The settings: the product of the --vary lists, in the order given, then the named --setting entries (one
    setting, the base config, when neither is given)."""
    axes = []
    for item in spec.vary:
        key, sep, values = item.partition("=")
        choices = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key.strip() or not choices:
            raise ConfigError(f"--vary {item!r}: expected section.key=value1,value2,...")
        axes.append((key.strip(), choices))
    settings = []
    if axes or not spec.settings:
        for combo in itertools.product(*(choices for _, choices in axes)):
            values = {key: value for (key, _), value in zip(axes, combo, strict=True)}
            name = ",".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in values.items()) or "base"
            settings.append(Setting(name, values, kind=values.get("objective.kind", "electra")))
    for item in spec.settings:
        name, sep, rest = item.partition(":")
        pairs = [p.strip() for p in rest.split(";") if p.strip()]
        if not sep or not name.strip() or any("=" not in p for p in pairs) or any(c in name for c in "/\\ "):
            raise ConfigError(f"--setting {item!r}: expected NAME:section.key=value;section.key=value")
        values = dict(p.split("=", 1) for p in pairs)
        values = {k.strip(): v.strip() for k, v in values.items()}
        settings.append(Setting(name.strip(), values, kind=values.get("objective.kind", "electra")))
    if len({s.name for s in settings}) != len(settings):
        raise ConfigError("two settings get the same name; vary keys with distinct last parts, or rename a --setting")
    return settings


def parse_budget(text: str) -> tuple[str, float | None]:
    kind, _, value = text.partition("=")
    if kind not in BUDGET_KINDS:
        raise ConfigError(f"--budget {text!r}: expected steps[=N], flops=F or seconds=S")
    if not value:
        if kind != "steps":
            raise ConfigError(f"--budget {text!r}: {kind} needs a value, e.g. {kind}=1e14")
        return kind, None
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"--budget {text!r}: {value!r} is not a number") from None
    if not number > 0:
        raise ConfigError(f"--budget {text!r}: must be positive")
    return kind, number


def assign_steps(spec: StudySpec, settings: list[Setting]) -> None:
    """Give every setting its number of optimizer steps under the budget (0 for objective.kind=none)."""
    from electra.modeling.flops import off_train_flops
    from electra.study.plan import worker_threads

    kind, value = parse_budget(spec.budget)
    pretraining = [s for s in settings if s.kind != "none"]
    for s in settings:
        if s.kind == "none":
            s.steps = 0
            continue
        cfg = s.config(spec)
        if kind == "steps":
            s.steps = int(value) if value is not None else cfg.train.max_steps
        elif kind == "flops":
            s.steps = int(value // off_train_flops(cfg, 1))
        else:  # timed with the threads each of the --parallel workers will have
            with worker_threads(max(1, min(spec.parallel, len(pretraining))), spec.device):
                s.seconds_per_step = seconds_per_step(cfg, spec.device)
            s.steps = int(value // s.seconds_per_step)
        if s.steps < 1:
            raise ConfigError(f"setting {s.name}: the budget {spec.budget} does not pay for one step")


def warn_unequal_generator_sweep(settings: list[Setting]) -> None:
    """The study compared generator sizes at equal steps (250k each); a FLOPs or seconds budget gives a larger
    generator fewer steps, which is another comparison: said before anything runs."""
    sizes = [s for s in settings if "model.generator_fraction" in s.values]
    if len({s.steps for s in sizes}) > 1:
        steps = ", ".join(f"{s.name}: {s.steps:,}" for s in sizes)
        log.warning("the generator sizes get unequal steps under this budget (%s); the study compared them at equal "
                    "steps: use --budget steps=N for its comparison", steps)  # fmt: skip


def seconds_per_step(cfg: PretrainConfig, device: str | None) -> float:
    """Median seconds of the step `electra pretrain` will run for `cfg` on `device`: the loop's `train_step` in
    the precision, compile mode and micro-batches the run resolves (electra.training.loop.plan_step)."""
    from electra.training.timing import sync

    step = calibration_step(cfg, device)
    warmup = 3 if step.settings["compile"] else 2  # type: ignore[attr-defined]
    times = []
    for i in range(warmup + CALIBRATION_STEPS):
        sync(step.device)  # type: ignore[attr-defined]
        start = time.perf_counter()
        step(i)
        sync(step.device)  # type: ignore[attr-defined]
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def calibration_step(cfg: PretrainConfig, device: str | None):
    """`electra.training.timing.make_pretrain_step` set up as the run will be (one process, the whole batch)."""
    from electra.training.loop import plan_step
    from electra.training.precision import resolve_device
    from electra.training.timing import make_pretrain_step

    dev = resolve_device(device)
    plan = plan_step(cfg, cfg.train.batch_size, dev)
    step = make_pretrain_step("ours", cfg, cfg.train.batch_size, dev, plan.precision.name, plan.compiled,
                              micro_batch=plan.micro_batch)  # fmt: skip
    step.device = dev  # type: ignore[attr-defined]
    return step


# -- running ----------------------------------------------------------------------------------------------------


def fingerprint(spec: StudySpec) -> str:
    fields = {k: v for k, v in dataclasses.asdict(spec).items() if k not in _NOT_FINGERPRINTED}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def spec_differences(saved: dict, spec: StudySpec) -> list[str]:
    """`key: saved -> asked` for each fingerprinted field a rerun changed."""
    asked = dataclasses.asdict(spec)
    return [f"{k}: {saved.get(k)!r} -> {asked[k]!r}" for k in asked
            if k not in _NOT_FINGERPRINTED and saved.get(k) != asked[k]]  # fmt: skip


EXTENDABLE = ("seeds", "tasks")
"""What a rerun may add to a finished study: its pretraining is unchanged, and the sweeps fine-tune only the new
(task, seed) runs (a sweep's folder is keyed by model and recipe, not by its seeds or tasks)."""


def extends(saved: dict, spec: StudySpec) -> bool:
    """Whether `spec` asks for the study `saved` (study.json's spec) with more seeds and/or tasks, nothing else."""
    asked = dataclasses.asdict(spec)
    changed = {k for k in asked if k not in _NOT_FINGERPRINTED and saved.get(k) != asked[k]}
    if not changed or not changed <= set(EXTENDABLE) or "seeds" not in saved or "tasks" not in saved:
        return False
    return set(saved["seeds"]) <= set(spec.seeds) and set(saved["tasks"].split(",")) <= set(spec.tasks.split(","))


def run_dir(spec: StudySpec, setting: Setting) -> Path:
    return Path(spec.out) / "runs" / setting.name


def start(spec: StudySpec) -> list[Setting]:
    """The settings with their steps: from study.json when this study exists (refused if it asked for other
    things), else computed now and written."""
    from electra.training.loop import code_revision

    path = Path(spec.out) / "study.json"
    if path.exists():
        saved = json.loads(path.read_text())
        if saved["fingerprint"] != fingerprint(spec):
            if not extends(saved.get("spec", {}), spec):
                changed = "; ".join(spec_differences(saved.get("spec", {}), spec)) or "the fingerprint's fields"
                raise ConfigError(f"{path}:1: this folder holds a study with other settings ({changed}); use "
                                  "another --out, the same options to continue it, or more --seeds / --tasks "
                                  "to extend it")  # fmt: skip
            log.info("%s: extending the study (%s); only the new fine-tuning runs are run", path,
                     "; ".join(spec_differences(saved["spec"], spec)))  # fmt: skip
            write_json(path, {**saved, "fingerprint": fingerprint(spec), "spec": dataclasses.asdict(spec),
                              "tasks": spec.tasks.split(","), "seeds": spec.seeds}, indent=1)  # fmt: skip
        return [Setting(**s["setting_state"]) for s in saved["settings"]]
    settings = grid(spec)
    assign_steps(spec, settings)
    warn_unequal_generator_sweep(settings)
    for s in settings:
        s.config(spec)  # every setting's config is valid before anything runs
    write_json(path, {
        "description": spec.description, "fingerprint": fingerprint(spec), "spec": dataclasses.asdict(spec),
        "budget": spec.budget, "tasks": spec.tasks.split(","), "seeds": spec.seeds,
        "code_revision": code_revision(),
        "settings": [{"name": s.name, "setting": s.values, "kind": s.kind, "steps": s.steps,
                      "seconds_per_step": s.seconds_per_step, "pretrain": f"runs/{s.name}/pretrain",
                      "glue": f"runs/{s.name}/glue", "setting_state": dataclasses.asdict(s)} for s in settings],
    }, indent=1)  # fmt: skip
    return settings


def pretrained(run: Path, steps: int) -> bool:
    meta = run / "run.json"
    return meta.exists() and json.loads(meta.read_text()).get("step") == steps


def _pretrain_worker(cfg_dict: dict, run: str, device: str | None, threads: int | None = None,
                     loggers: tuple[str, ...] = (), progress: bool = True) -> int:  # fmt: skip
    """One setting's pretraining (resumed from its checkpoints if it has any); `threads`: in a worker process,
    its share of the CPU cores."""
    import torch

    from electra.config import from_dict
    from electra.training.checkpoint import list_checkpoints
    from electra.training.loop import pretrain

    if threads is not None:
        torch.set_num_threads(threads)
    resume = "auto" if list_checkpoints(run) else None
    meta = pretrain(from_dict(cfg_dict), run, resume=resume, device=device, loggers=loggers, progress=progress)
    return meta.step


def initialise(cfg: PretrainConfig, run: Path) -> None:
    """The no-pretraining baseline: a step-0 checkpoint of freshly initialised weights, with the tokenizer of the
    data, in a folder that `electra glue --model` takes like any run."""
    from electra.data.pretraining_data import open_pretraining_data
    from electra.modeling.electra import build_model
    from electra.training.checkpoint import RunMeta, checkpoint_dir, save_config, save_model_checkpoint

    tokens = open_pretraining_data(cfg.data, cfg.train.seed).tokens
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=tokens.vocab_size))
    import torch

    torch.manual_seed(cfg.train.seed)
    save_config(cfg, run / "config.yaml")
    if tokens.path is not None and not (run / "tokenizer").exists():
        shutil.copytree(tokens.path, run / "tokenizer")
    save_model_checkpoint(build_model(cfg), cfg, checkpoint_dir(run, 0))
    (run / "run.json").write_text(RunMeta().to_json())


def pretrain_all(spec: StudySpec, settings: list[Setting]) -> None:
    todo = []
    for s in settings:
        run = run_dir(spec, s) / "pretrain"
        if s.kind == "none":
            if not (run / "run.json").exists():
                initialise(s.config(spec), run)
        elif not pretrained(run, s.steps):
            todo.append((s, run))
    if not todo:
        return
    workers = max(1, min(spec.parallel, len(todo)))
    if workers == 1:  # in this process, with its threads
        for s, run in todo:
            print(f"== pretraining {s.name}: {plural(s.steps, 'step')} -> {run}", flush=True)
            step = _pretrain_worker(dataclasses.asdict(s.config(spec)), str(run), spec.device,
                                    loggers=tuple(spec.loggers), progress=spec.progress)  # fmt: skip
            _stop_if_short(s, step)
        return
    threads = max(1, (os.cpu_count() or 1) // workers)
    import multiprocessing

    print(f"== pretraining {plural(len(todo), 'setting')}, {workers} at a time ({plural(threads, 'thread')} each)",
          flush=True)  # fmt: skip
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_pretrain_worker, dataclasses.asdict(s.config(spec)), str(run), spec.device, threads,
                               tuple(spec.loggers), spec.progress) for s, run in todo]  # fmt: skip
        steps = [f.result() for f in futures]  # re-raises a worker's error
    for (s, _), step in zip(todo, steps, strict=True):
        _stop_if_short(s, step)


class StudyStopped(Exception):
    """A pretraining run stopped before its budget (SIGTERM / Ctrl-C saved a checkpoint): the study stops too."""


def _stop_if_short(s: Setting, step: int) -> None:
    if step < s.steps:
        raise StudyStopped(f"{s.name} stopped at step {step} of {s.steps} (a checkpoint was saved); run the same "
                           "command again to continue the study")  # fmt: skip


def finetune_all(spec: StudySpec, settings: list[Setting]) -> None:
    from electra.config import load_finetune_config
    from electra.glue.sweep import SweepSpec, finished_runs, run_sweep

    finetune = load_finetune_config(spec.recipe, spec.finetune_overrides)
    tasks = spec.tasks.split(",")
    # one bar over the phase's runs, with tqdm's estimate of the time left, advanced as each run ends (runs a
    # resumed study finished before count from the start)
    done = sum(finished_runs(run_dir(spec, s) / "glue") for s in settings)
    bar = tqdm(total=len(settings) * len(tasks) * len(spec.seeds), initial=done, desc="fine-tuning", unit="run",
               disable=not spec.progress)  # fmt: skip
    for s in settings:
        rdir = run_dir(spec, s)
        print(f"== fine-tuning {s.name} on {spec.tasks} ({plural(len(spec.seeds), 'seed')})", flush=True)
        result = run_sweep(SweepSpec(out=str(rdir / "glue"), model=str(rdir / "pretrain"), tasks=tasks,
                                     glue_dir=spec.glue_dir, seeds=list(spec.seeds), finetune=finetune,
                                     recipe=spec.recipe, device=spec.device or "auto", num_workers=spec.parallel,
                                     progress=False, loggers=list(spec.loggers)), on_runs=bar.update)  # fmt: skip
        if not result.ok:
            log.warning("%s: some fine-tuning runs failed (%s); run the study again to retry them", s.name,
                        [f"{f['task']} seed {f['seed']}" for f in result.failed])  # fmt: skip
    bar.close()


def run_study(spec: StudySpec) -> Path:
    """Pretrain every setting, fine-tune each, write the report; returns the report folder."""
    from electra.report.write import write_report
    from electra.study.plan import make_plan, plan_lines
    from electra.training.trackers import check_trackers
    from electra.utils.files import folder_lock

    check_trackers(spec.loggers)  # a missing tracker package fails now, not after the pretraining
    with folder_lock(spec.out, "study"):  # a second `electra study` on this folder is refused while this one runs
        settings = start(spec)
        print("\n".join(plan_lines(make_plan(spec, settings), spec.out)), flush=True)
        pretrain_all(spec, settings)
        finetune_all(spec, settings)
        return write_report([spec.out], Path(spec.out) / "report")
