"""What pretraining runs, GLUE sweeps and studies left on disk, read back for the report and the study: the runs,
their GLUE results, the gate that says whether pretraining learned anything, and the published numbers we compare
with. Reads files only (config.yaml, run.json, metrics.jsonl, results.json, study.json); loads no model.

The gate: a pretrained model counts as having learned only when its masked LM (ELECTRA's generator, or the MLM
baseline) knows more than token frequencies at the held-out slots shown as [MASK] — its accuracy there clearly
above always guessing the most frequent token, or its loss clearly below the best token-frequency model's — and,
for ELECTRA, when the held-out discriminator AUC is above 0.6. A model that never left the plateau is not
evidence about its objective.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from electra.config import ConfigError, PretrainConfig, from_dict
from electra.flops import PFS_DAY, off_train_flops

GATE_MLM_MARGIN = 0.02
"""Held-out accuracy at the slots shown as [MASK] must exceed the most-frequent-token rate there by this much (2
points; the rate's standard error on the default held-out set of ~8k [MASK] slots is about 0.3 points). The
accuracy over all chosen slots would not do: the slots kept as the original token show the answer, so a model that
copies its input and otherwise guesses the commonest token already scores ~15% there."""
GATE_LOSS_MARGIN = 0.1
"""...or its held-out loss at those slots must be this many nats below the cross-entropy of the training text's token
frequencies there (`eval_mlm_unigram_loss`: the plateau a masked LM sits on before it uses context; runs logged
before that metric existed are held to the slots' own entropy, which is lower, so stricter). Either is evidence of
knowledge beyond frequencies; the accuracy alone misses it where the commonest token stays the best single guess at
most slots (the built-in language: a model 1.4 nats below the unigram loss still guesses "the" best), and the loss
alone would be fooled by nothing the accuracy is not."""
GATE_AUC = 0.6

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

# ELECTRA paper Table 1 and section 3.4 (GLUE dev score as the paper reports it; training FLOPs; parameters).
LITERATURE = (
    ("ELMo", 96e6, 3.3e18, 71.2),
    ("GPT", 117e6, 4.0e19, 78.8),
    ("BERT-Small", 14e6, 1.4e18, 75.1),
    ("BERT-Base", 110e6, 6.4e19, 82.2),
    ("ELECTRA-Small", 14e6, 1.4e18, 79.9),
    ("ELECTRA-Small 50%", 14e6, 7.1e17, 79.0),
    ("ELECTRA-Small 25%", 14e6, 3.6e17, 77.7),
    ("ELECTRA-Small 12.5%", 14e6, 1.8e17, 76.0),
    ("ELECTRA-Small 6.25%", 14e6, 8.9e16, 74.1),
    ("ELECTRA-Base", 110e6, 6.4e19, 85.1),
)

# Per-task dev scores of ELECTRA-Small as published: OFF's README (ELECTRA-Small-OWT, medians; Small++ released),
# the reproduction study (RC, MNLI matched + mismatched merged), and a 1:1-generator run (google-research/electra#73).
REFERENCE_TASKS = {
    "OFF ELECTRA-Small-OWT": {
        "cola": 56.8,
        "sst2": 88.3,
        "mrpc": 87.4,
        "stsb": 86.8,
        "qqp": 88.3,
        "mnli": 78.9,
        "qnli": 87.9,
        "rte": 68.5,
    },
    "OFF ELECTRA-Small++": {
        "cola": 57.0,
        "sst2": 91.2,
        "mrpc": 88.0,
        "stsb": 87.5,
        "qqp": 89.0,
        "mnli": 81.3,
        "qnli": 88.4,
        "rte": 66.7,
    },
    "the study (RC)": {
        "cola": 53.5,
        "sst2": 88.7,
        "mrpc": 87.6,
        "stsb": 85.2,
        "qqp": 86.1,
        "mnli": 80.2,
        "qnli": 87.5,
        "rte": 61.5,
    },
    "1:1 generator (#73)": {
        "cola": 51.04,
        "sst2": 85.21,
        "mrpc": 83.58,
        "stsb": 84.79,
        "qqp": 87.16,
        "mnli": 75.01,
        "qnli": 84.79,
        "rte": 66.06,
    },
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
    evals = [r for r in rows if any(k.startswith("eval_") for k in r)]
    return PretrainRun(path, cfg, meta, train, evals)


@dataclass
class Gate:
    learned: bool | None
    """None: nothing to judge (random initialisation, or a model whose pretraining run is not at hand)."""
    reasons: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if self.learned is None:
            return "; ".join(self.reasons) or "not pretrained"
        return ("learned: " if self.learned else "NEVER LEARNED: ") + "; ".join(self.reasons)


def gate(run: PretrainRun | None) -> Gate:
    """Did pretraining leave the plateau? Judged on the last held-out evaluation."""
    if run is None:
        return Gate(None)
    if not run.evals:
        return Gate(False, ["no held-out evaluation was logged"])
    last = run.evals[-1]
    acc, rate = last.get("eval_masked_accuracy"), last.get("eval_mlm_majority_rate")
    # the training text's token frequencies at those slots (runs before it was logged: the slots' own entropy,
    # a lower bound, so a stricter test)
    loss, unigram, baseline = last.get("eval_masked_loss"), last.get("eval_mlm_unigram_loss"), "token frequencies"
    if unigram is None:
        unigram, baseline = last.get("eval_mlm_unigram_entropy"), "the slots' own entropy"
    reasons, ok = [], True
    if acc is None or rate is None:
        ok = False
        reasons.append("held-out accuracy at [MASK] slots or most-frequent-token rate missing")
    else:
        by_accuracy = acc >= rate + GATE_MLM_MARGIN
        by_loss = loss is not None and unigram is not None and loss <= unigram - GATE_LOSS_MARGIN
        ok &= by_accuracy or by_loss
        said = f"MLM at [MASK]: accuracy {acc:.3f} vs most-frequent-token {rate:.3f}"
        if loss is not None and unigram is not None:
            said += f", loss {loss:.3f} vs {baseline} {unigram:.3f} nats"
        reasons.append(said + (" (beyond frequencies)" if by_accuracy or by_loss else " (token frequencies only)"))
    if run.kind == "electra":
        auc = last.get("eval_disc_auc")
        good = auc is not None and math.isfinite(auc) and auc > GATE_AUC
        ok &= good
        reasons.append(
            f"discriminator AUC {auc if auc is None else round(auc, 3)} {'>' if good else 'not >'} {GATE_AUC}"
        )
    return Gate(ok, reasons)


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

    @property
    def kind(self) -> str:
        if self.baseline:
            return "none (random initialisation)"
        return self.pretrain.kind if self.pretrain is not None else "unknown (no pretraining run at hand)"

    def judge(self) -> Gate:
        if self.pretrain is None and not self.baseline:
            return Gate(None, ["no pretraining run at hand to judge"])
        return gate(None if self.baseline else self.pretrain)


def _sweep_model(glue: Path) -> Path | None:
    """The run folder a GLUE sweep fine-tuned (sweep.json's model; a checkpoint means its run), if local."""
    try:
        model = Path(json.loads((glue / "sweep.json").read_text())["model"])
    except (OSError, KeyError, TypeError, json.JSONDecodeError):
        return None
    if model.parent.name == "checkpoints":
        model = model.parent.parent
    return model.resolve() if model.exists() else None


def read_glue(path: Path) -> dict | None:
    file = path / "results.json"
    return json.loads(file.read_text()) if file.exists() else None


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
                pretrain = read_pretrain_run(run) if not none and (run / "config.yaml").exists() else None
                entries.append(Entry(s["name"], pretrain, read_glue(glue), glue, s.get("setting", {}), none))
        elif (p / "config.yaml").exists():
            glue = p / "glue" if (p / "glue" / "results.json").exists() else None
            run = read_pretrain_run(p)
            entries.append(Entry(p.name, run, read_glue(glue) if glue else None, glue, baseline=run.steps == 0))
        elif (p / "results.json").exists():
            model = _sweep_model(p)
            owner = next((e for e in entries if e.pretrain and model and e.pretrain.path.resolve() == model), None)
            if owner is not None and owner.glue is None:
                owner.glue, owner.glue_path = read_glue(p), p
                continue
            run = read_pretrain_run(model) if model is not None and (model / "config.yaml").exists() else None
            entries.append(Entry(p.name, run, read_glue(p), p, baseline=run is not None and run.steps == 0))
        else:
            raise ReportError(
                f"{p}: not a study (study.json), a pretraining run (config.yaml) or a GLUE folder (results.json)"
            )
    if len(paths) > 1:
        study = None
    return entries, study


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


def task_mean(results: dict | None, tasks: list[str]) -> float | None:
    """Mean over `tasks` of each task's median (None unless every task has a result)."""
    if results is None:
        return None
    scores = task_scores(results)
    if not tasks or any(t not in scores for t in tasks):
        return None
    return float(np.mean([scores[t][0] for t in tasks]))


def common_tasks(entries: list[Entry]) -> list[str]:
    sets = [set(task_scores(e.glue)) for e in entries if e.glue]
    if not sets:
        return []
    shared = set.intersection(*sets)
    return [t for t in TASK_METRIC if t in shared] + sorted(shared - set(TASK_METRIC))


def compute_row(e: Entry) -> dict:
    run = e.pretrain
    if run is None:
        return {"name": e.name, "steps": 0, "tokens": 0, "flops": 0.0, "pfs_days": 0.0, "device": "-", "hours": 0.0}
    seconds = run.meta.get("train_seconds")
    return {
        "name": e.name,
        "steps": run.steps,
        "tokens": run.tokens,
        "flops": run.flops,
        "pfs_days": run.flops / PFS_DAY,
        "device": run.meta.get("device", "?"),
        "hours": None if seconds is None else seconds / 3600,
    }
