"""A study's grid: its spec, the settings it expands to, and the steps each gets under the budget.

With `pretrain_seeds` N > 1 every setting NAME becomes N settings NAME-p0 ... NAME-p{N-1}, pretrained under
train.seed = the setting's own seed + k (for objective.kind=none: N initialisations), each in its own folders
(STUDY/runs/NAME-pK/pretrain, STUDY/runs/NAME-pK/glue) and fine-tuned over the study's seeds; each records its
group (NAME) and its seed, which study.json keeps and the report nests by. Pretraining, fine-tuning, the plan,
the progress lines and resuming go through the per-setting code unchanged. N = 1 (the default) gives the settings
and folders a study always had (NAME, STUDY/runs/NAME/...)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import logging
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from electra.config import ConfigError, PretrainConfig, keys_set, load_config
from electra.data.corpus import TOKENIZER_FILE
from electra.data.synthetic import synthetic_tokenizer_info
from electra.data.tokenizer import tokenizer_info
from electra.executors.slurm import SlurmOptions
from electra.glue.plan import worker_threads
from electra.modeling.flops import off_train_flops
from electra.training.checkpoint import run_finished
from electra.training.continued import Init, continued_config
from electra.training.init_source import Source, open_source
from electra.training.loop import plan_step
from electra.training.precision import resolve_device
from electra.training.timing import make_pretrain_step, sync
from electra.utils.wording import argument

log = logging.getLogger("electra.study")


BUDGET_KINDS = ("steps", "flops", "seconds")


CALIBRATION_STEPS = 5  # timed steps per setting for a seconds budget (after 2 untimed)


@dataclass
class StudySpec:
    """Everything that defines a study; study.json keeps it, and a rerun must ask for the same."""

    out: str
    """The study's folder: study.json, runs/NAME/{pretrain,glue}, report/; running the same spec again resumes it."""
    base: str = "tiny"
    """Pretraining preset or YAML file every setting starts from."""
    overrides: list[str] = field(default_factory=list)
    """`section.key=value` for every setting."""
    vary: list[str] = field(default_factory=list)
    """`section.key=v1,v2,...`, repeatable: the settings are the product of the lists."""
    settings: list[str] = field(default_factory=list)
    """Named settings instead of (or after) a grid: `NAME:key=value;key=value`, e.g. `mlm:objective.kind=mlm` or
    `electra-T3:objective.temperature=3` (`NAME:` alone: the base config). The key `init` starts the setting's
    pretraining from a model (continued pretraining, `pretrain(init=...)`; `init_generator`: the generator beside a
    transformers discriminator), e.g. `tapt:init=runs/base;data.path=runs/tapt`: the budget pays for its
    continued steps only."""
    budget: str = "steps"
    """`steps`, `flops=F`, `seconds=S` or `steps=N` (plain `steps`: the base config's max_steps)."""
    data: str | None = None
    """A prepared corpus (data.path); None: the built-in synthetic language."""
    tasks: str = "sst2,mrpc,rte,wnli"
    """GLUE tasks (comma-separated names, `all`, or folders holding a task.json), each with its full schedule."""
    glue_dir: str | None = None
    """Where the GLUE data is (as `electra glue --glue-dir`); None: nyu-mll/glue from the hub or its cache."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    """Fine-tuning seeds of every pretrained model (each pretraining seed's, with pretrain_seeds)."""
    """Fine-tuning seeds of every pretrained model."""
    pretrain_seeds: int = 1
    """Pretraining seeds per setting: N > 1 pretrains each setting N times (train.seed = its seed + k, k = 0..N-1;
    objective.kind=none: N initialisations) as settings NAME-p0 ... NAME-p{N-1}, each fine-tuned over `seeds`, and
    the report's verdicts test over the pretraining seeds. 1: one pretraining run per setting, named NAME."""
    recipe: str = "off"
    """The fine-tuning recipe (electra glue --recipe)."""
    finetune_overrides: list[str] = field(default_factory=list)
    """`finetune.key=value` over the recipe, for every fine-tuning run."""
    description: str = ""
    """A sentence for the report's head."""
    parallel: int = 1
    """Pretraining runs at once (CPU threads are split between them)."""
    device: str | None = None
    """auto (None), cpu, cuda, cuda:1, ...: where pretraining and fine-tuning run (on SLURM: in the jobs)."""
    loggers: list[str] = field(default_factory=list)
    """Trackers every pretraining and fine-tuning run also logs to (tensorboard, wandb), as `electra pretrain` and
    `electra glue` do: RUN/tensorboard, and one W&B run per pretraining run and per fine-tuning (task, seed)."""
    progress: bool = True
    """Progress bars (pretraining, and the fine-tuning phase's)."""
    executor: str = "local"
    """local: this machine (`parallel` pretraining processes, then each sweep); slurm: each pretraining one SLURM
    job, each fine-tuning (task, seed) one element of a job array (electra/executors/)."""
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    """What each SLURM job asks for (electra/executors/slurm.py); fitted to the partition before submitting."""


# the fields that may change between a study's invocations without changing what it computes
_NOT_FINGERPRINTED = ("parallel", "device", "description", "out", "loggers", "progress", "executor", "slurm")
# fields added since studies were first written, and what a study.json without them asked for
_ABSENT_MEANS = {"pretrain_seeds": 1}


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
    group: str | None = None
    """The setting this is a pretraining seed of (its NAME without -pK); None in studies written before."""
    pretrain_seed: int | None = None
    """Its train.seed; None: the base config's (studies written before pretraining seeds)."""

    def overrides(self, spec: StudySpec) -> list[str]:
        values = [f"{k}={v}" for k, v in self.values.items() if k not in INIT_KEYS]
        seed = [] if self.pretrain_seed is None else [f"train.seed={self.pretrain_seed}"]
        steps = [f"train.max_steps={self.steps}"] if self.steps else []
        data = [f"data.path={spec.data}"] if spec.data else []
        # the tokenizer's vocabulary, as the run will resolve it: so that the budget's FLOPs are the run's
        vocab = [f"model.vocab_size={vocabulary_size(self.values.get('data.path', spec.data))}"]
        return [*spec.overrides, *data, *vocab, *values, *seed, *steps]

    @property
    def init(self) -> Init | None:
        """The model this setting's pretraining starts from (its `init` key), if any."""
        if "init" not in self.values:
            return None
        return Init(self.values["init"], self.values.get("init_generator"))

    def config(self, spec: StudySpec) -> PretrainConfig:
        """The setting's pretraining config; one that starts from a model has the model's shape (refused in one
        line where --base, --set or the setting contradicts it)."""
        cfg = load_config(spec.base, self.overrides(spec))
        if self.init is None:
            return cfg
        in_base, overridden = keys_set(spec.base, spec.overrides)
        set_by = {k: f"--base {spec.base}" for k in in_base} | {k: "--set" for k in overridden}
        set_by |= {k: f"--setting {self.name}" for k in self.values}
        return continued_config(cfg, opened_source(self.init.source, self.init.generator), set_by)


INIT_KEYS = ("init", "init_generator")
"""Setting keys that name a model to start from, not config keys."""


@functools.cache
def opened_source(source: str, generator: str | None) -> Source:
    """`open_source`, once per study process (it hashes the weights)."""
    return open_source(source, generator)


@functools.cache
def vocabulary_size(data: str | None) -> int:
    """The vocabulary of the corpus's tokenizer (the built-in synthetic one without `data`)."""
    if data is None:
        return synthetic_tokenizer_info().vocab_size

    return tokenizer_info(Path(data) / TOKENIZER_FILE).vocab_size


def grid(spec: StudySpec) -> list[Setting]:
    """The settings: the product of the --vary lists, in the order given, then the named --setting entries (one
    setting, the base config, when neither is given); each under every pretraining seed (`with_pretrain_seeds`)."""
    check_pretrain_seeds(spec)
    settings = with_pretrain_seeds(spec, _named_settings(spec))
    if len({s.name for s in settings}) != len(settings):
        raise ConfigError(
            "two settings get the same name; vary keys with distinct last parts, or rename one of "
            f"{argument('settings')}"
        )
    return settings


def _named_settings(spec: StudySpec) -> list[Setting]:
    """The settings the --vary lists and --setting entries name, before pretraining seeds."""
    axes = []
    for item in spec.vary:
        key, sep, values = item.partition("=")
        choices = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key.strip() or not choices:
            raise ConfigError(f"{argument('vary', item)}: expected section.key=value1,value2,...")
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
            raise ConfigError(f"{argument('settings', item)}: expected NAME:section.key=value;section.key=value")
        values = dict(p.split("=", 1) for p in pairs)
        values = {k.strip(): v.strip() for k, v in values.items()}
        settings.append(Setting(name.strip(), values, kind=values.get("objective.kind", "electra")))
    return settings


def check_pretrain_seeds(spec: StudySpec) -> None:
    n = spec.pretrain_seeds
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"{argument('pretrain_seeds', n)}: expected a whole number of pretraining seeds, 1 or more")


def with_pretrain_seeds(spec: StudySpec, settings: list[Setting]) -> list[Setting]:
    """Each setting under `spec.pretrain_seeds` seeds: train.seed = the setting's own (its config's) + k, named
    NAME-pK (NAME alone for one seed), its group NAME."""
    out = []
    for s in settings:
        cfg = s.config(spec)
        first = cfg.train.seed
        for k in range(spec.pretrain_seeds):
            name = s.name if spec.pretrain_seeds == 1 else f"{s.name}-p{k}"
            kind = s.kind if s.init is None else cfg.objective.kind  # a masked LM continues as the MLM baseline
            out.append(dataclasses.replace(s, name=name, group=s.name, pretrain_seed=first + k, kind=kind))
    return out


def parse_budget(text: str) -> tuple[str, float | None]:
    kind, _, value = text.partition("=")
    if kind not in BUDGET_KINDS:
        raise ConfigError(f"{argument('budget', text)}: expected steps[=N], flops=F or seconds=S")
    if not value:
        if kind != "steps":
            raise ConfigError(f"{argument('budget', text)}: {kind} needs a value, e.g. {kind}=1e14")
        return kind, None
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{argument('budget', text)}: {value!r} is not a number") from None
    if not number > 0:
        raise ConfigError(f"{argument('budget', text)}: must be positive")
    return kind, number


def assign_steps(spec: StudySpec, settings: list[Setting]) -> None:
    """Give every setting its number of optimizer steps under the budget (0 for objective.kind=none)."""

    kind, value = parse_budget(spec.budget)
    pretraining = [s for s in settings if s.kind != "none"]
    assigned: dict[str, Setting] = {}  # a setting's pretraining seeds get the steps of its first
    for s in settings:
        if s.kind == "none":
            s.steps = 0
            continue
        first = assigned.setdefault(s.group or s.name, s)
        if first is not s:
            s.steps, s.seconds_per_step = first.steps, first.seconds_per_step
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
        log.warning(
            "the generator sizes get unequal steps under this budget (%s); the study compared them at equal "
            "steps: use a steps=N budget for its comparison",
            steps,
        )


def seconds_per_step(cfg: PretrainConfig, device: str | None) -> float:
    """Median seconds of the step `electra pretrain` will run for `cfg` on `device`: the loop's `train_step` in
    the precision, compile mode and micro-batches the run resolves (electra.training.loop.plan_step)."""

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

    dev = resolve_device(device)
    plan = plan_step(cfg, cfg.train.batch_size, dev)
    step = make_pretrain_step(
        "ours", cfg, cfg.train.batch_size, dev, plan.precision.name, plan.compiled, micro_batch=plan.micro_batch
    )
    step.device = dev  # type: ignore[attr-defined]
    return step


def fingerprint(spec: StudySpec) -> str:
    """What the study computes, hashed; a field added since keeps the fingerprint of studies written before it
    while it asks what they did (one pretraining seed), so that the same command continues them."""
    fields = {
        k: v
        for k, v in dataclasses.asdict(spec).items()
        if k not in _NOT_FINGERPRINTED and (k not in _ABSENT_MEANS or v != _ABSENT_MEANS[k])
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def changed_fields(saved: dict, spec: StudySpec) -> list[str]:
    """The fingerprinted fields `spec` asks otherwise than `saved` (study.json's spec) did."""
    asked = dataclasses.asdict(spec)
    return [k for k in asked if k not in _NOT_FINGERPRINTED and saved.get(k, _ABSENT_MEANS.get(k)) != asked[k]]


def spec_differences(saved: dict, spec: StudySpec) -> list[str]:
    """`key: saved -> asked` for each fingerprinted field a rerun changed."""
    asked = dataclasses.asdict(spec)
    return [f"{k}: {saved.get(k, _ABSENT_MEANS.get(k))!r} -> {asked[k]!r}" for k in changed_fields(saved, spec)]


def run_dir(spec: StudySpec, setting: Setting) -> Path:
    return Path(spec.out) / "runs" / setting.name


def pretrained(run: Path, steps: int) -> bool:
    """Whether the setting's run finished its `steps`: its final checkpoint and export on disk, not merely its
    final evaluation logged (electra.training.checkpoint.run_finished)."""
    meta = run / "run.json"
    return bool(run_finished(run)) and json.loads(meta.read_text()).get("step") == steps
