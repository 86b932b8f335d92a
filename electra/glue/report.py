"""The report of a sweep: per-task statistics over seeds and the three aggregate scores (docs/glue.md).

    results.json  the stable interface: {"tasks": {TASK: {"n_train", "n_eval", "metrics": {METRIC: {"median",
                  "mean", "std", "min", "max", "n"}}, "chance": {"metric", "baseline", "margin", "seeds_at_chance",
                  "n"}, "seconds", "machines"}}, "scores": {"paper", "glue", "study"}, "missing": [...]}
                  ("machines": where the seconds were taken, electra.utils.machine)
    results.csv   one row per (task, metric), then the aggregates
    results.md    the same for people, with what each aggregate includes, the chance-level warnings, and the
                  learning gate's verdict on the pretrained model (electra/training/health.py: the word `electra
                  report` gives it)

Aggregates use each task's median over seeds (OFF reports medians). A required task without results makes the
score null and is listed in "missing": never averaged over silently. Custom tasks are never part of them.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from electra.config import from_dict
from electra.glue.tasks import GLUE_TASKS
from electra.training.health import Gate, held_out, learning_gate
from electra.utils.files import write_atomic
from electra.utils.wording import plural, source_text

# style -> (task, metrics averaged into that task's number), in order
AGGREGATES: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    # ELECTRA paper / OFF README: 8 numbers, no WNLI, MNLI matched only
    "paper": (
        ("cola", ("mcc",)),
        ("sst2", ("accuracy",)),
        ("mrpc", ("accuracy",)),
        ("stsb", ("spearman",)),
        ("qqp", ("accuracy",)),
        ("mnli", ("accuracy_m",)),
        ("qnli", ("accuracy",)),
        ("rte", ("accuracy",)),
    ),
    # Wang et al. 2018: two-metric tasks averaged first, then the 9 tasks including WNLI
    "glue": (
        ("cola", ("mcc",)),
        ("sst2", ("accuracy",)),
        ("mrpc", ("f1", "accuracy")),
        ("stsb", ("pearson", "spearman")),
        ("qqp", ("f1", "accuracy")),
        ("mnli", ("accuracy_m", "accuracy_mm")),
        ("qnli", ("accuracy",)),
        ("rte", ("accuracy",)),
        ("wnli", ("accuracy",)),
    ),
    # RC's "GLUE score": 9 single metrics including WNLI, MNLI matched + mismatched merged into one accuracy
    "study": (
        ("cola", ("mcc",)),
        ("sst2", ("accuracy",)),
        ("mrpc", ("accuracy",)),
        ("stsb", ("spearman",)),
        ("qqp", ("accuracy",)),
        ("mnli", ("accuracy_merged",)),
        ("qnli", ("accuracy",)),
        ("rte", ("accuracy",)),
        ("wnli", ("accuracy",)),
    ),
}

AGGREGATE_HELP = {
    "paper": "mean of CoLA MCC, SST-2 acc, MRPC acc, STS-B Spearman, QQP acc, MNLI-m acc, QNLI acc, RTE acc (no WNLI)",
    "glue": "GLUE benchmark: MRPC/QQP (F1+acc)/2, STS-B (Pearson+Spearman)/2, MNLI (m+mm)/2, then the 9-task mean "
    "with WNLI",
    "study": "RC's score: the paper's 8 metrics with MNLI m+mm merged into one accuracy, plus WNLI acc (9 tasks)",
}


@dataclass
class Aggregate:
    score: float | None
    parts: dict[str, float]
    """Each present task's number (its metrics averaged)."""
    missing: list[str]


def aggregate(values: dict[str, dict[str, float]], style: str) -> Aggregate:
    """`values[task][metric]` (0-100) -> the aggregate score, or None when a required task or metric is absent."""
    parts, missing = {}, []
    for task, names in AGGREGATES[style]:
        got = values.get(task, {})
        if all(m in got and got[m] is not None for m in names):
            parts[task] = float(np.mean([got[m] for m in names]))
        else:
            missing.append(task)
    score = None if missing else float(np.mean(list(parts.values())))
    return Aggregate(score, parts, missing)


def stats(values: list[float]) -> dict[str, float | int]:
    v = np.asarray(values, dtype=np.float64)
    return {
        "median": float(np.median(v)),
        "mean": float(v.mean()),
        "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0,  # sample std over seeds; 0 for a single seed
        "min": float(v.min()),
        "max": float(v.max()),
        "n": len(v),
    }


def summarize(records: list[dict]) -> dict:
    """Finished run records -> the results.json object (plus private keys starting with _ for the other files)."""
    by_task: dict[str, list[dict]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r["task"], r["seed"])):
        by_task[r["task"]].append(r)
    order = [t for t in GLUE_TASKS if t in by_task] + sorted(t for t in by_task if t not in GLUE_TASKS)
    tasks, medians = {}, {}
    for name in order:
        runs = by_task[name]
        metric_names = list(runs[0]["metrics"])
        tasks[name] = {
            "n_train": runs[0]["n_train"],
            "n_eval": runs[0]["n_eval"],
            "metrics": {m: stats([r["metrics"][m] for r in runs]) for m in metric_names},
            "chance": chance_summary(runs),
            "seconds": float(sum(r.get("seconds") or 0.0 for r in runs)),
            "machines": sorted({r["machine"] for r in runs if r.get("machine")}),
        }
        medians[name] = {m: s["median"] for m, s in tasks[name]["metrics"].items()}
        for extra in runs[0].get("extra_metrics", {}):  # MNLI's merged accuracy, for the study score
            medians[name][extra] = float(np.median([r["extra_metrics"][extra] for r in runs]))
    glue_values = {t: v for t, v in medians.items() if t in GLUE_TASKS}
    aggregates = {style: aggregate(glue_values, style) for style in AGGREGATES}
    return {
        "tasks": tasks,
        "scores": {style: a.score for style, a in aggregates.items()},
        "missing": [t for t in GLUE_TASKS if t not in tasks],
        "_aggregates": aggregates,
        "_runs": by_task,
    }


def chance_summary(runs: list[dict]) -> dict:
    """What a model that ignores its input scores on this task (the training set's majority class, or 0 for MCC
    and correlations; electra/glue/metrics.py chance_check), its noise band, and how many seeds fell inside it."""
    checks = [r["chance"] for r in runs]
    return {
        "metric": checks[0]["metric"],
        "baseline": float(np.median([c["baseline"] for c in checks])),
        "margin": float(np.median([c["margin"] for c in checks])),
        "seeds_at_chance": sum(bool(c["at_chance"]) for c in checks),
        "n": len(checks),
    }


def chance_lines(by_task: dict[str, list[dict]]) -> list[str]:
    lines = []
    for task, runs in by_task.items():
        flagged = [r for r in runs if r["chance"]["at_chance"]]
        if flagged:
            c = flagged[0]["chance"]
            value = np.median([r["chance"]["value"] for r in flagged])
            constant = "; some predict one class only" if any(r["chance"]["constant"] for r in flagged) else ""
            lines.append(
                f"{task}: {len(flagged)} of {plural(len(runs), 'seed')} at chance level ({c['metric']} {value:.1f} "
                f"vs. baseline {c['baseline']:.1f} + noise {c['margin']:.1f}{constant})"
            )
    return lines


def run_folder(model: str | None) -> Path | None:
    """The pretraining run folder `model` names (a checkpoint stands for its run), if it is one here (config.yaml);
    None for an HF folder or a hub id."""
    if not model:
        return None
    path = Path(model)
    if path.parent.name == "checkpoints":
        path = path.parent.parent
    return path if (path / "config.yaml").is_file() else None


def pretraining_gate(model: str | None, step: int | None = None) -> Gate:
    """The learning gate's verdict on the run a sweep fine-tuned, judged as `electra report` judges it on the
    held-out evaluation of the checkpoint fine-tuned (`step`: the last evaluation at or before it; None: the run's
    last); not judged for random initialisation (objective.kind none, or a step-0 run) or a model that is no run
    folder of ours."""
    run = run_folder(model)
    if run is None:
        return Gate(None, ["not judged: no pretraining run of ours at hand (an HF folder or a hub model)"])
    try:  # files only, as `electra report` reads them (no torch)
        objective = from_dict(yaml.safe_load((run / "config.yaml").read_text()), str(run / "config.yaml")).objective
        run_step = json.loads((run / "run.json").read_text()).get("step", 0) if (run / "run.json").exists() else 0
        lines = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").exists() else []
        evals = held_out([json.loads(line) for line in lines if line.strip()])
    except (OSError, ValueError, yaml.YAMLError) as err:  # a file that does not parse: said, not fatal
        return Gate(None, [f"not judged: cannot read the pretraining run {run} ({' '.join(str(err).split())})"])
    if step is not None:  # the checkpoint's own evaluation, not one the run logged after it
        run_step, evals = step, [e for e in evals if e.get("step", 0) <= step]
    if objective.kind == "none" or run_step == 0:
        return Gate(None, ["random initialisation, not pretrained"])
    return learning_gate(objective.kind, evals, objective)


def gate_lines(gate: Gate) -> list[str]:
    """results.md's paragraph on the pretrained model: the gate's verdict and what it means for the scores."""
    lines = [f"Pretraining, by the learning gate (`electra report`'s verdict): {gate.describe()}."]
    if gate.learned is False:
        lines += [
            "",
            "**The gate rejects this pretraining: the scores below measure fine-tuning from weights that did not",
            "learn what the objective teaches, not the objective.**",
        ]
    return lines


def write_report(out: Path, records: list[dict], failed: list[dict], header: dict) -> dict:
    """Write results.json / .csv / .md into `out` (each atomically); returns the results.json object."""
    summary = summarize(records)
    public = {k: v for k, v in summary.items() if not k.startswith("_")}
    public["source"] = header.get("source")  # the checkpoint every score came from (path, step, sha256)
    write_atomic(out / "results.json", json.dumps(public, indent=2) + "\n")
    write_atomic(out / "results.csv", _csv(summary))
    write_atomic(out / "results.md", _markdown(summary, failed, header))
    return public


def _csv(summary: dict) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["task", "metric", "n", "median", "mean", "std", "min", "max", "n_train", "n_eval", "seeds_at_chance"])
    for task, entry in summary["tasks"].items():
        at_chance = sum(r["chance"]["at_chance"] for r in summary["_runs"][task])
        for metric, s in entry["metrics"].items():
            row = [s["n"]] + [f"{s[k]:.4f}" for k in ("median", "mean", "std", "min", "max")]
            w.writerow([task, metric, *row, entry["n_train"], entry["n_eval"], at_chance])
    for style, agg in summary["_aggregates"].items():
        score = "" if agg.score is None else f"{agg.score:.4f}"
        w.writerow(["aggregate", style, "", score, "", "", "", "", "", "", ""])
    return buf.getvalue()


def _markdown(summary: dict, failed: list[dict], header: dict) -> str:
    source = header.get("source") or {}
    lines = [f"# GLUE dev results: {header.get('model', '')}", ""]
    if source:
        lines += [f"Every run fine-tuned {source_text(source)}.", ""]
    lines += [*gate_lines(pretraining_gate(header.get("model"), source.get("step"))), ""]
    lines += [
        "Scores on a 0-100 scale. Per task and metric: the median over fine-tuning seeds from one pretrained model,",
        "then mean ± sample std, min-max and the number of seeds.",
        "",
        "| task | metric | median | mean ± std | min–max | seeds | train rows | dev rows | seeds at chance |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for task, entry in summary["tasks"].items():
        at_chance = sum(r["chance"]["at_chance"] for r in summary["_runs"][task])
        for metric, s in entry["metrics"].items():
            lines.append(
                f"| {task} | {metric} | {s['median']:.2f} | {s['mean']:.2f} ± {s['std']:.2f} | "
                f"{s['min']:.2f}–{s['max']:.2f} | {s['n']} | {entry['n_train']} | {entry['n_eval']} | {at_chance} |"
            )
    lines += ["", "## Aggregate scores (from the per-task medians)", ""]
    for style, agg in summary["_aggregates"].items():
        value = f"**{agg.score:.2f}**" if agg.score is not None else f"n/a (missing: {', '.join(agg.missing)})"
        lines.append(f"- `{style}`: {value}. {AGGREGATE_HELP[style]}.")
    if summary["missing"]:
        lines += ["", f"Tasks without results: {', '.join(summary['missing'])}."]
    warnings = chance_lines(summary["_runs"])
    lines += ["", "## Sanity checks", ""]
    if warnings:
        lines += [
            "A run is *at chance* when its dev score is within two standard errors of what a model that ignores",
            "its input gets (the training set's majority class; 0 for MCC and correlations). Such a number says",
            "nothing about the pretrained model except that fine-tuning did not get off the ground.",
            "",
        ]
        lines += [f"- WARNING {w}" for w in warnings]
    else:
        lines.append("- No run is at chance level.")
    if failed:
        lines += ["", "## Failed runs (retried on the next invocation)", ""]
        lines += [f"- {f['task']} seed {f['seed']}: {f['error']}" for f in failed]
    lines += ["", "## Configuration", "", "```json", json.dumps(header, indent=1), "```", ""]
    return "\n".join(lines)
