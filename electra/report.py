"""`electra report RUN_OR_STUDY...`: report.md with figures, from what pretraining runs, GLUE sweeps and studies
wrote to disk (read back by electra/results.py). Nothing is retrained or reloaded: any old run can be reported
again.

Writes into the report folder (by default STUDY/report or RUN/report): report.md, dynamics-NAME.png,
collapse.png, glue.png, efficiency-flops.png, efficiency-params.png, and results.json (the first model's GLUE
results in `electra glue`'s schema, every model's under "settings").

Every GLUE comparison carries the gate's verdict (electra/results.py) beside the scores.
"""

from __future__ import annotations

import math
from pathlib import Path

from electra import figures, wording
from electra.files import write_atomic, write_json
from electra.memory import backbone_parameters
from electra.results import (
    LITERATURE,
    REFERENCE_TASKS,
    TASK_METRIC,
    Entry,
    ReportError,
    collect,
    common_tasks,
    compute_row,
    task_mean,
    task_scores,
)
from electra.verdicts import compare

# -- the report ------------------------------------------------------------------------------------------------


def write_report(paths: list[str | Path], out: str | Path | None = None) -> Path:
    """Draw the figures and write report.md (and results.json) for the given runs/sweeps/studies; returns the
    report folder."""
    entries, study = collect(paths)
    if not entries:
        raise ReportError("nothing to report")
    out = Path(out) if out is not None else Path(paths[0]) / "report"
    out.mkdir(parents=True, exist_ok=True)
    tasks = common_tasks(entries)
    lines = _header(entries, study, tasks)
    lines += _glue_section(entries, tasks, out)
    lines += _dynamics_section(entries, out)
    lines += _compute_section(entries, tasks, out)
    lines += _reference_section(entries)
    lines += _config_section(entries)
    write_atomic(out / "report.md", "\n".join(lines) + "\n")
    results = [e for e in entries if e.glue]
    if results:
        first = results[0].glue
        write_json(out / "results.json", {**first, "settings": {e.name: e.glue for e in results}}, indent=2)
    return out


def _fmt(v: float | None, digits: int = 2) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


def _header(entries: list[Entry], study: dict | None, tasks: list[str]) -> list[str]:
    lines = ["# Report", ""]
    if study is not None:
        if study.get("description"):
            lines += [study["description"], ""]
        steps = ", ".join(f"{s['name']}: {s['steps']:,}" for s in study.get("settings", []))
        lines += [
            f"Budget per setting: {wording.budget(str(study.get('budget')))} (optimizer steps: {steps}). Fine-tuned on "
            f"{', '.join(study.get('tasks', []))} with seeds {study.get('seeds')}. Code revision: "
            f"`{study.get('code_revision', 'unknown')}`.",
            "",
        ]
    baseline = next((e for e in entries if e.baseline and e.glue), None)
    base_mean = task_mean(baseline.glue, tasks) if baseline else None
    lines += [
        f"## Summary: mean over {', '.join(tasks) or 'no common tasks'} (each task's median over seeds)",
        "",
        "| model | objective | did pretraining learn? (held out) | task mean | vs. no pretraining |",
        "|---|---|---|---|---|",
    ]
    for e in entries:
        mean = task_mean(e.glue, tasks)
        delta = None if mean is None or base_mean is None or e is baseline else mean - base_mean
        kind = e.kind
        lines.append(
            f"| {e.name} | {kind} | {e.judge().describe()} | {_fmt(mean)} | "
            f"{'–' if delta is None else f'{delta:+.2f}'} |"
        )
    lines += _verdicts(entries, baseline, tasks)
    never = [e.name for e in entries if e.judge().learned is False]
    if never:
        lines += [
            "",
            f"**Never left the plateau: {', '.join(never)}.** Pretraining did not learn (see the gate column), so "
            "these GLUE scores say nothing about the objective, only that this setting did not train it.",
        ]
    return lines + [""]


def _verdicts(entries: list[Entry], baseline: Entry | None, tasks: list[str]) -> list[str]:
    """What the numbers allow one to say (electra/verdicts.py), and a word on a baseline that beats pretraining."""
    pretrained = [e for e in entries if e.glue and not e.baseline]
    if not tasks or (baseline is None and len(pretrained) < 2):
        return []
    lines = ["", "**Verdicts** (a difference counts when it exceeds twice the seeds' standard error, on tasks above "
             "chance level; electra/verdicts.py):", ""]  # fmt: skip
    beaten = []
    for e in pretrained if baseline is not None else []:
        c = compare(e.name, e.glue, baseline.name, baseline.glue, tasks)
        lines.append(f"- {c.sentence('pretraining helped', 'pretraining did NOT help')}.")
        if c.b_better:
            beaten.append(e.name)
    electra = [e for e in pretrained if e.pretrain is not None and e.pretrain.kind == "electra"]
    mlm = [e for e in pretrained if e.pretrain is not None and e.pretrain.kind == "mlm"]
    for a in electra:
        for b in mlm:
            c = compare(a.name, a.glue, b.name, b.glue, tasks)
            lines.append(f"- {c.sentence('ELECTRA beats MLM', 'ELECTRA does NOT beat MLM')}.")
    if beaten:
        lines += ["", f"**The no-pretraining baseline beats {', '.join(beaten)}.** Random weights fine-tune better "
                  "than these pretrained ones: at this budget pretraining has not yet learned what the tasks need, "
                  "or has moved the weights somewhere fine-tuning finds harder to leave (see the gate column and "
                  "the training dynamics). These numbers are evidence against this budget, not against the "
                  "objective."]  # fmt: skip
    return lines


def _glue_section(entries: list[Entry], tasks: list[str], out: Path) -> list[str]:
    with_glue = [e for e in entries if e.glue]
    if not with_glue:
        return ["## GLUE", "", "No GLUE results yet.", ""]
    scores = {e.name: task_scores(e.glue) for e in with_glue}
    figures.glue_scores(scores, out / "glue.png")
    all_tasks = sorted(
        {t for s in scores.values() for t in s}, key=lambda t: list(TASK_METRIC).index(t) if t in TASK_METRIC else 99
    )
    lines = [
        "## GLUE (dev)",
        "",
        "![GLUE per task](glue.png)",
        "",
        "Median over fine-tuning seeds, then min–max over seeds. Metric per task as the ELECTRA paper reports "
        "it (CoLA MCC, STS-B Spearman, MNLI matched accuracy, the others accuracy).",
        "",
        "| model | " + " | ".join(all_tasks) + " | paper | glue | study |",
        "|---|" + "---|" * (len(all_tasks) + 3),
    ]
    for e in with_glue:
        cells = []
        for t in all_tasks:
            m = scores[e.name].get(t)
            cells.append("–" if m is None else f"{m[0]:.2f} ({m[1]:.1f}–{m[2]:.1f})")
        agg = e.glue.get("scores", {})
        cells += [_fmt(agg.get(k)) for k in ("paper", "glue", "study")]
        lines.append(f"| {e.name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "The aggregate columns are `electra glue`'s three scores (see docs/glue.md); each is empty unless "
        "every task it needs was run.",
        "",
    ]
    return lines


def _dynamics_section(entries: list[Entry], out: Path) -> list[str]:
    runs = [e for e in entries if e.pretrain is not None and not e.baseline and (e.pretrain.train or e.pretrain.evals)]
    if not runs:
        return []
    lines = ["## Pretraining dynamics", ""]
    for e in runs:
        name = _slug(e.name)
        figures.training_dynamics(e.pretrain.train, e.pretrain.evals, e.name, out / f"dynamics-{name}.png")
        lines += [f"### {e.name}", "", f"![training dynamics of {e.name}](dynamics-{name}.png)", ""]
        if e.pretrain.evals:
            last = e.pretrain.evals[-1]
            keys = (
                "mlm_accuracy",
                "masked_accuracy",
                "mlm_majority_rate",
                "sampled_accuracy",
                "disc_auc",
                "disc_recall",
                "disc_precision",
            )
            lines += [
                f"Held out at step {last['step']}: "
                + ", ".join(f"{k} {_fmt(last.get(f'eval_{k}'), 3)}" for k in keys if f"eval_{k}" in last)
                + ".",
                "",
            ]
    electra = {e.name: e.pretrain.evals for e in runs if e.pretrain.kind == "electra" and e.pretrain.evals}
    if len(electra) > 1:
        collapsed = {e.name: bool(e.pretrain.meta.get("collapsed")) for e in runs}
        figures.collapse(electra, collapsed, out / "collapse.png")
        lines += [
            "### Collapse",
            "",
            "![held-out AUC and recall per setting](collapse.png)",
            "",
            "Dashed: runs flagged as collapsed (held-out recall < 0.05 or AUC < 0.55 for `collapse_patience` "
            "evaluations in a row).",
            "",
        ]
    return lines


def _compute_section(entries: list[Entry], tasks: list[str], out: Path) -> list[str]:
    lines = [
        "## Compute",
        "",
        "FLOPs by the official ELECTRA accounting (google-research/electra flops_computation.py: the same "
        "number `electra flops` prints for these steps); pfs-days of those FLOPs.",
        "",
        "| model | steps | tokens | FLOPs | pfs-days | device | hours |",
        "|---|---|---|---|---|---|---|",
    ]
    points = []
    for e in entries:
        if e.pretrain is None and not e.baseline:
            continue  # a model from elsewhere: its compute is not ours to report
        row = compute_row(e)
        lines.append(
            f"| {e.name} | {row['steps']:,} | {row['tokens']:,} | {row['flops']:.3g} | "
            f"{row['pfs_days']:.2e} | {row['device']} | {_fmt(row['hours'], 3)} |"
        )
        mean = task_mean(e.glue, tasks)
        if e.pretrain is not None and not e.baseline and mean is not None:
            params = backbone_parameters(e.pretrain.cfg.model)
            points.append({"name": e.name, "flops": row["flops"], "params": params, "score": mean, "source": "ours"})
    quoted = [{"name": n, "params": p, "flops": f, "score": s, "source": "quoted"} for n, p, f, s in LITERATURE]
    if points:
        figures.efficiency(points + quoted, "flops", "pretraining FLOPs (log)", out / "efficiency-flops.png")
        figures.efficiency(
            points + quoted, "params", "parameters of the fine-tuned body (log)", out / "efficiency-params.png"
        )
        lines += [
            "",
            "### Efficiency",
            "",
            "![score against FLOPs](efficiency-flops.png) ![score against parameters](efficiency-params.png)",
            "",
            f"Ours: the mean over {', '.join(tasks)} (dev, medians over seeds), measured here. Quoted: the "
            "ELECTRA paper's Table 1 (8-task GLUE dev score, its FLOPs). The two scores average different "
            "tasks, so the vertical positions of ours and theirs are not comparable; the figure places "
            "our compute on the paper's scale.",
            "",
            "| model | source | parameters | FLOPs | score | what the score averages |",
            "|---|---|---|---|---|---|",
        ]
        for p in points:
            lines.append(
                f"| {p['name']} | ours | {p['params'] / 1e6:.2f}M | {p['flops']:.3g} | {p['score']:.2f} | "
                f"{', '.join(tasks)} |"
            )
        for p in quoted:
            lines.append(
                f"| {p['name']} | quoted | {p['params'] / 1e6:.0f}M | {p['flops']:.2g} | {p['score']:.1f} | "
                "8-task GLUE dev (ELECTRA paper Table 1) |"
            )
    return lines + [""]


def _reference_section(entries: list[Entry]) -> list[str]:
    tasks = list(REFERENCE_TASKS["OFF ELECTRA-Small-OWT"])
    ours = [e for e in entries if e.glue and any(t in task_scores(e.glue) for t in tasks)]
    if not ours:
        return []
    lines = [
        "## Against published ELECTRA-Small (dev)",
        "",
        "| | " + " | ".join(tasks) + " |",
        "|---|" + "---|" * len(tasks),
    ]
    for name, row in REFERENCE_TASKS.items():
        lines.append(f"| {name} (quoted) | " + " | ".join(f"{row[t]:.1f}" for t in tasks) + " |")
    for e in ours:
        s = task_scores(e.glue)
        lines.append(f"| {e.name} (ours) | " + " | ".join(_fmt(s[t][0]) if t in s else "–" for t in tasks) + " |")
    return lines + [""]


def _config_section(entries: list[Entry]) -> list[str]:
    lines = ["## Configurations", ""]
    for e in entries:
        if e.pretrain is None:
            continue
        revision = e.pretrain.meta.get("code_revision", "unknown")
        text = (e.pretrain.path / "config.yaml").read_text()
        lines += [
            f"<details><summary>{e.name}: resolved config (code revision <code>{revision}</code>)</summary>",
            "",
            "```yaml",
            text.rstrip(),
            "```",
            "",
            "</details>",
            "",
        ]
    return lines


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
