"""What pretraining runs, GLUE sweeps and studies left on disk, read back for the report and the study: the runs,
their GLUE results, the gate that says whether pretraining learned anything (its rule: electra/training/health.py,
which the GLUE sweep's results.md reads too), and the published numbers we compare with. Reads files only
(config.yaml, run.json, metrics.jsonl, results.json, study.json); loads no model.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from electra.config import ConfigError, PretrainConfig, from_dict
from electra.glue.report import chance_summary, run_folder
from electra.modeling.flops import DEVICE_PEAK_TFLOPS, PFS_DAY, off_train_flops, pfs_days
from electra.report.published import LITERATURE, REFERENCE_TASKS, STUDY_EFFICIENCY  # noqa: F401 - re-exported
from electra.training.health import Gate, held_out, is_collapsed, learning_gate
from electra.utils import wording

# The paper's metric per task (ELECTRA paper / OFF README), and WNLI, which the study added.
TASK_METRIC = {
    "cola": "mcc",
    "sst2": "accuracy",
    "mrpc": "accuracy",
    "stsb": "spearman",
    "qqp": "accuracy",
    "mnli": "accuracy_m",
    "qnli": "accuracy",
    "rte": "accuracy",
    "wnli": "accuracy",
}


class ReportError(ValueError):
    pass


# -- reading what runs wrote -----------------------------------------------------------------------------------


@dataclass
class PretrainRun:
    path: Path
    cfg: PretrainConfig
    meta: dict
    train: list[dict]
    """metrics.jsonl training lines."""
    evals: list[dict]
    """metrics.jsonl held-out evaluation lines (eval_* keys)."""

    @property
    def kind(self) -> str:
        return getattr(self.cfg.objective, "kind", "electra")

    @property
    def steps(self) -> int:
        return int(self.meta.get("step", 0))

    @property
    def tokens(self) -> int:
        return self.steps * self.cfg.train.batch_size * self.cfg.data.seq_len

    @property
    def flops(self) -> float:
        """Training FLOPs of the steps done, by the official ELECTRA accounting (what `electra flops` prints)."""
        return off_train_flops(self.cfg, self.steps) if self.steps else 0.0

    @property
    def collapsed(self) -> bool:
        """The collapse watch's flag at the run's end, re-derived from its held-out curve with today's rule (so a
        report judges older runs alike): its last `collapse_patience` evaluations all at the collapse level."""
        if self.kind != "electra":
            return False
        last = [
            {k[5:]: r.get(k, math.nan) for k in ("eval_disc_recall", "eval_disc_auc")}
            for r in self.evals[-self.cfg.train.collapse_patience :]
        ]
        return len(last) == self.cfg.train.collapse_patience and all(map(is_collapsed, last))


def _json_lines(path: Path) -> list[dict]:
    rows = []
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ReportError(f"{path}:{i}: not valid JSON ({err.msg})") from None
    return rows


def read_pretrain_run(path: str | Path) -> PretrainRun:
    path = Path(path)
    try:
        raw = yaml.safe_load((path / "config.yaml").read_text())
        cfg = from_dict(raw, source=str(path / "config.yaml"))
    except (OSError, yaml.YAMLError, ConfigError) as err:
        raise ReportError(f"{path / 'config.yaml'}: cannot read the run's config: {err}") from err
    meta = json.loads((path / "run.json").read_text()) if (path / "run.json").exists() else {}
    rows = _json_lines(path / "metrics.jsonl") if (path / "metrics.jsonl").exists() else []
    train = [r for r in rows if "mlm_loss" in r]
    evals = held_out(rows)
    return PretrainRun(path, cfg, meta, train, evals)


def gate(run: PretrainRun | None) -> Gate:
    """Did pretraining leave the plateau? The learning gate (electra/training/health.py) on the run's last held-out
    evaluation; not judged without a run."""
    return Gate(None) if run is None else learning_gate(run.kind, run.evals, run.cfg.objective)


@dataclass
class Entry:
    """One model of the report: its pretraining run (None for random initialisation) and its GLUE sweep."""

    name: str
    pretrain: PretrainRun | None
    glue: dict | None
    """results.json of its sweep."""
    glue_path: Path | None = None
    setting: dict = field(default_factory=dict)
    """What the study varied for this entry (key -> value)."""
    baseline: bool = False
    """Random initialisation, the no-pretraining baseline (a study's objective.kind=none, or a step-0 run)."""
    study: str | None = None
    """The short name of the study it came from (none for a lone run or sweep)."""
    corpus: str | None = None
    """The prepared corpus it was pretrained on (a study's `--data`, a run's data.path; None: the built-in
    language, or unknown), so that a model is measured against random weights built for the same text."""
    shape: str | None = None
    """Its encoder's shape (`encoder_shape`; None where no config is at hand), so that a model is measured against
    random weights of its own shape, not a smaller model's."""
    group: str | None = None
    """The study's setting this run is a pretraining seed of (study.json "group"; None: a model of its own)."""
    pretrain_seed: int | None = None
    """Its pretraining seed (train.seed; study.json "pretrain_seed"), where the study recorded it."""
    objective: str | None = None
    """objective.kind as its study recorded it (study.json "kind"), for when its pretraining run is not at hand."""

    @property
    def kind(self) -> str:
        if self.baseline:
            return "none (random initialisation)"
        return self.pretrain.kind if self.pretrain is not None else "unknown (no pretraining run at hand)"

    def judge(self) -> Gate:
        if self.pretrain is None and not self.baseline:
            return Gate(None, ["no pretraining run at hand to judge"])
        return gate(None if self.baseline else self.pretrain)


def encoder_shape(cfg: PretrainConfig) -> str:
    """The discriminator's (for MLM: the masked LM's) shape, e.g. "2 layers, hidden 64"."""
    d = cfg.model.discriminator
    return f"{wording.plural(d.num_layers, 'layer')}, hidden {d.hidden_size}"


def _sweep_model(glue: Path) -> Path | None:
    """The run folder a GLUE sweep fine-tuned (sweep.json's model; a checkpoint means its run), if local."""
    try:
        model = json.loads((glue / "sweep.json").read_text())["model"]
    except (OSError, KeyError, TypeError, json.JSONDecodeError):
        return None
    run = run_folder(model)
    return None if run is None else run.resolve()


def read_glue(path: Path) -> dict | None:
    """A sweep's results.json; for sweeps written before it kept each task's chance level and seconds, those are
    filled in from the sweep's own run records (RUN/runs/TASK/seedS/result.json)."""
    file = path / "results.json"
    if not file.exists():
        return None
    results = json.loads(file.read_text())
    if any("chance" not in t for t in results.get("tasks", {}).values()):
        _fill_from_records(results, path)
    return results


def _fill_from_records(results: dict, path: Path) -> None:

    for task, entry in results["tasks"].items():
        records = [json.loads(f.read_text()) for f in sorted((path / "runs" / task).glob("seed*/result.json"))]
        if records and all("chance" in r for r in records):
            entry.setdefault("chance", chance_summary(records))
            if all("seconds" in r for r in records):
                entry.setdefault("seconds", float(sum(r["seconds"] for r in records)))


def collect(paths: list[str | Path]) -> tuple[list[Entry], dict | None]:
    """Entries from study folders (study.json), pretraining run folders (config.yaml) or GLUE folders
    (results.json); returns them and the study's description when one study was given. A GLUE folder joins the
    entry of the run it fine-tuned (its sweep.json names the model) when that run is given too, or brings the run
    along when the run folder is still where the sweep found it."""
    entries: list[Entry] = []
    study = None
    for p in map(Path, paths):
        if (p / "study.json").exists():
            study = json.loads((p / "study.json").read_text())
            for s in study["settings"]:
                run, glue, none = p / s["pretrain"], p / s["glue"], s.get("kind") == "none"
                record = read_pretrain_run(run) if (run / "config.yaml").exists() else None  # none: a step-0 run
                entries.append(
                    Entry(
                        s["name"],
                        record,
                        read_glue(glue),
                        glue,
                        s.get("setting", {}),
                        none,
                        study=_study_label(p),
                        corpus=study.get("spec", {}).get("data"),
                        shape=None if record is None else encoder_shape(record.cfg),
                        group=s.get("group"),
                        pretrain_seed=s.get("pretrain_seed"),
                        objective=s.get("kind"),
                    )
                )
        elif (p / "config.yaml").exists():
            glue = p / "glue" if (p / "glue" / "results.json").exists() else None
            run = read_pretrain_run(p)
            entries.append(
                Entry(
                    p.name,
                    run,
                    read_glue(glue) if glue else None,
                    glue,
                    baseline=run.steps == 0 or run.kind == "none",
                    corpus=run.cfg.data.path,
                    shape=encoder_shape(run.cfg),
                )
            )
        elif (p / "results.json").exists():
            model = _sweep_model(p)
            owner = next((e for e in entries if e.pretrain and model and e.pretrain.path.resolve() == model), None)
            if owner is not None and owner.glue is None:
                owner.glue, owner.glue_path = read_glue(p), p
                continue
            run = read_pretrain_run(model) if model is not None and (model / "config.yaml").exists() else None
            entries.append(
                Entry(
                    p.name,
                    run,
                    read_glue(p),
                    p,
                    baseline=run is not None and (run.steps == 0 or run.kind == "none"),
                    corpus=None if run is None else run.cfg.data.path,
                    shape=None if run is None else encoder_shape(run.cfg),
                )
            )
        else:
            raise ReportError(
                f"{p}: not a study (study.json), a pretraining run (config.yaml) or a GLUE folder (results.json)"
            )
    if len(paths) > 1:
        study = None
    _distinct_names(entries)
    return entries, study


def _study_label(folder: Path) -> str:
    """A study's short name in a report: its folder's name (the demo's DEMO/study: DEMO's)."""
    folder = folder.resolve()
    return folder.parent.name if folder.name == "study" else folder.name


def _distinct_names(entries: list[Entry]) -> None:
    """Several studies in one report (a budget curve) share setting names: those become STUDY/NAME. Lone runs or
    sweeps in folders of one name (two `cpu` runs) become PARENT/NAME, with as many parent folders as tell them
    apart, so that the tables, the figures' titles and their files name each one differently."""
    names = Counter(e.name for e in entries)
    for e in entries:
        if names[e.name] > 1 and e.study is not None:
            e.name = f"{e.study}/{e.name}"
    lone = [e for e in entries if e.study is None and names[e.name] > 1]
    folders = {id(e): (e.pretrain.path if e.pretrain is not None else e.glue_path) for e in lone}
    for depth in range(2, 1 + max((len(f.resolve().parts) for f in folders.values() if f), default=0)):
        named = {id(e): "/".join(folders[id(e)].resolve().parts[-depth:]) for e in lone if folders[id(e)]}
        if len(set(named.values())) == len(named):
            for e in lone:
                e.name = named.get(id(e), e.name)
            return


# -- numbers ---------------------------------------------------------------------------------------------------


def task_scores(results: dict) -> dict[str, tuple[float, float, float]]:
    """task -> (median, min, max) of the paper's metric for that task, over seeds."""
    out = {}
    for task, entry in results.get("tasks", {}).items():
        metric = TASK_METRIC.get(task) or next(iter(entry["metrics"]))
        s = entry["metrics"].get(metric)
        if s is not None:
            out[task] = (s["median"], s["min"], s["max"])
    return out


def task_stats(results: dict) -> dict[str, dict]:
    """task -> the paper's metric's statistics over seeds (median, mean, std, min, max, n), from results.json."""
    out = {}
    for task, entry in results.get("tasks", {}).items():
        s = entry["metrics"].get(TASK_METRIC.get(task) or next(iter(entry["metrics"])))
        if s is not None:
            out[task] = s
    return out


def at_chance(results: dict, task: str) -> bool:
    """Most of `task`'s seeds at chance level (results.json "chance", electra/glue/metrics.py)."""
    chance = results.get("tasks", {}).get(task, {}).get("chance")
    return chance is not None and chance["seeds_at_chance"] * 2 > chance["n"]


def finetune_cap(e: Entry) -> int | None:
    """`finetune.max_steps` of the model's GLUE sweep (its sweep.json), when fine-tuning was capped; else None."""
    try:
        return json.loads((e.glue_path / "sweep.json").read_text())["config"].get("max_steps")
    except (OSError, TypeError, KeyError, json.JSONDecodeError):
        return None


def max_steps_changes(meta: dict) -> list[tuple[int, int]]:
    """(step, max_steps) where a resumed session ran to another `train.max_steps` than the session before it
    (run.json's sessions; runs that did not record it in their sessions show none): the learning-rate schedule
    changed there."""
    out, last = [], None
    for s in meta.get("sessions") or []:
        steps = s.get("max_steps")
        if steps is not None and last is not None and steps != last:
            out.append((s["start_step"], steps))
        last = steps if steps is not None else last
    return out


def task_mean(results: dict | None, tasks: list[str], stat: str = "median") -> float | None:
    """Mean over `tasks` of each task's `stat` over seeds ("median", or "mean": what the verdicts test and the
    report shows); None unless every task has a result."""
    if results is None:
        return None
    stats = task_stats(results)
    if not tasks or any(t not in stats for t in tasks):
        return None
    return float(np.mean([stats[t][stat] for t in tasks]))


def order_tasks(tasks) -> list[str]:
    """GLUE tasks in the paper's order, then any others by name."""
    tasks = set(tasks)
    return [t for t in TASK_METRIC if t in tasks] + sorted(tasks - set(TASK_METRIC))


def common_tasks(entries: list[Entry]) -> list[str]:
    sets = [set(task_scores(e.glue)) for e in entries if e.glue]
    if not sets:
        return []
    shared = set.intersection(*sets)
    return [t for t in TASK_METRIC if t in shared] + sorted(shared - set(TASK_METRIC))


def device_peak(name: str) -> float | None:
    """Peak TFLOP/s of a device named as run.json names it ("NVIDIA H200", "Tesla V100-SXM2-16GB"); None for a
    CPU or a device not in electra/modeling/flops.py's table."""
    squashed = "".join(c for c in name.lower() if c.isalnum())
    return next((peak for key, peak in DEVICE_PEAK_TFLOPS.items() if key in squashed), None)


def sessions(meta: dict) -> list[dict]:
    """The training sessions of a run (a resumed run has several): device, machine, world size, steps and seconds
    of each; runs logged before run.json kept its sessions: one session on its last device."""
    raw = meta.get("sessions") or [
        {
            "device": meta.get("device", "unknown"),
            "world_size": meta.get("world_size", 1),
            "start_step": 0,
            "start_seconds": 0.0,
        }
    ]
    out = []
    for i, s in enumerate(raw):
        end = (
            raw[i + 1]
            if i + 1 < len(raw)
            else {"start_step": meta.get("step", 0), "start_seconds": meta.get("train_seconds", 0.0)}
        )
        out.append(
            {
                "device": s["device"],
                "machine": s.get("machine"),  # None for runs from before run.json recorded it
                "world_size": s["world_size"],
                "steps": end["start_step"] - s["start_step"],
                "seconds": max(0.0, end["start_seconds"] - s["start_seconds"]),
            }
        )
    return out


def wall_clock_pfs_days(meta: dict) -> float | None:
    """pfs-days by the study's convention (days x GPUs x peak TFLOP/s x 0.33 / 1000, modeling/flops.py pfs_days),
    summed over sessions; None when a session's device has no known peak (a CPU)."""
    total = 0.0
    for s in sessions(meta):
        peak = device_peak(s["device"])
        if peak is None:
            return None
        total += pfs_days(s["seconds"] / 86400, s["world_size"], peak)
    return total


def finetune_seconds(results: dict | None) -> float | None:
    """Seconds of all fine-tuning runs of a sweep (results.json; None for sweeps written before it kept them)."""
    if not results or any("seconds" not in t for t in results.get("tasks", {}).values()):
        return None
    return sum(t["seconds"] for t in results["tasks"].values())


def finetune_machines(results: dict | None) -> list[str]:
    """The machines a sweep's fine-tuning runs ran on (results.json; none for sweeps written before it kept them)."""
    tasks = (results or {}).get("tasks", {}).values()
    return sorted({m for t in tasks for m in t.get("machines", [])})


def compute_row(e: Entry) -> dict:
    """Table 1's row: steps, tokens, FLOPs, pfs-days by FLOPs and by wall clock, world size, GPUs (0 for a run on
    CPUs only, or on a device it did not record), the device and machine of every session, pretraining and
    fine-tuning hours and the machines of the fine-tuning."""
    tuning = finetune_seconds(e.glue)
    row = {
        "name": e.name,
        "steps": 0,
        "tokens": 0,
        "flops": 0.0,
        "pfs_days": 0.0,
        "pfs_days_wall": 0.0,
        "world_size": 1,
        "gpus": 0,
        "sessions": [],
        "hours": 0.0,
        "finetune_hours": None if tuning is None else tuning / 3600,
        "finetune_machines": finetune_machines(e.glue),
        "continued": False,
        "source_flops": None,
    }
    run = e.pretrain
    if run is None:
        return row
    seconds = run.meta.get("train_seconds")
    parts = sessions(run.meta)
    return {
        **row,
        "steps": run.steps,
        "tokens": run.tokens,
        "flops": run.flops,
        "pfs_days": run.flops / PFS_DAY,
        "pfs_days_wall": wall_clock_pfs_days(run.meta),
        "world_size": max(s["world_size"] for s in parts),
        "gpus": max((s["world_size"] for s in parts if s["device"] not in ("cpu", "unknown")), default=0),
        "sessions": parts,
        "hours": None if seconds is None else seconds / 3600,
        **source_compute(run.meta),
    }


def source_compute(meta: dict) -> dict:
    """A continued run's (run.json `init`: pretrain --init): `continued`, and the FLOPs already spent in the model
    it started from (`source_flops`; None where unknown: a model trained elsewhere). Its own `flops` count only
    the steps it made."""
    init = meta.get("init")
    if not isinstance(init, dict):
        return {"continued": False, "source_flops": None}
    return {"continued": True, "source_flops": init.get("flops")}
