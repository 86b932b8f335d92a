"""`electra report RUN_OR_STUDY...`: report.md with figures, from what pretraining runs, GLUE sweeps and studies
wrote to disk (read back by electra/report/results.py). Nothing is retrained or reloaded: any old run can be reported
again.

Writes into the report folder (by default STUDY/report or RUN/report): report.md with the study's four tables
(electra/report/tables.py), its figures as PNG with each figure's data beside it as JSON (electra/report/figures.py):
glue.png, crossover.png and electra-minus-mlm.png (several budgets or sizes), dynamics-NAME.png (the study's
Figure 3), collapse.png (its Figure 2), efficiency.png; and results.json
(the first model's GLUE results in `electra glue`'s schema, every model's under "settings", and every model's
learning-gate verdict under "gates": {"learned": true/false/null, "collapsed": ...}, and, for a study run with
`--pretrain-seeds`, each model's nested numbers under "pretrain_seeds" (electra/report/seeds.py), so that a committed
report can be compared with another without its run folders, scripts/compare_reports.py).

A study's runs of one setting under several pretraining seeds are one model (electra/report/seeds.py): the Summary,
the verdicts, Table 3, the crossover, ELECTRA − MLM and efficiency figures are per model, with the spread over
pretraining seeds beside the fine-tuning seeds'; Tables 1, 2 and 4 and the dynamics keep a row per run, and Table 5
nests each model's scores. Task means and differences are of means over seeds, the statistic the verdicts test;
Table 2 and the GLUE figure describe each task's seeds (median, range; Table 2 the mean ± std beside).

Every GLUE comparison carries the gate's verdict (electra/report/results.py) beside the scores, and every claim that one
model beats another follows the seeds' statistics (electra/report/verdicts.py), per task (electra/report/questions.py).
"""

from __future__ import annotations

import math
from pathlib import Path

from electra.glue.report import AGGREGATES
from electra.report import figures
from electra.report import tables as report_tables
from electra.report.questions import baseline_for, electra_mlm_pairs, verdict_section
from electra.report.results import (
    TASK_METRIC,
    Entry,
    ReportError,
    collect,
    common_tasks,
    order_tasks,
    task_scores,
)
from electra.report.seeds import Model, models, nest, seeds_summary, seeds_table, task_mean_spread
from electra.report.verdicts import CONFIDENCE, compare_models
from electra.training.health import GATE_AUC
from electra.utils import wording
from electra.utils.files import write_atomic, write_json

PAPER_TASKS = AGGREGATES["paper"]
PAPER_AVERAGE = "8-task GLUE dev score (the ELECTRA paper's: no WNLI, MNLI matched)"

# -- the report ------------------------------------------------------------------------------------------------


def write_report(paths: list[str | Path], out: str | Path | None = None) -> Path:
    """Draw the figures and write report.md (and results.json) for the given runs/sweeps/studies; returns the
    report folder."""
    entries, study = collect(paths)
    if not entries:
        raise ReportError("nothing to report")
    out = Path(out) if out is not None else Path(paths[0]) / "report"
    out.mkdir(parents=True, exist_ok=True)
    tasks, grouped = common_tasks(entries), models(entries)
    lines = _header(entries, grouped, study, tasks)
    lines += _glue_section(entries, grouped, out)
    lines += _seeds_section(grouped, tasks)
    lines += _electra_minus_mlm(grouped, tasks, out)
    lines += _dynamics_section(entries, out)
    lines += _compute_section(entries, grouped, tasks, out)
    lines += _config_section(entries)
    write_atomic(out / "report.md", "\n".join(lines) + "\n")
    results = [e for e in entries if e.glue]
    if results:
        first = results[0].glue
        judged = {e.name: e.judge() for e in results}
        gates = {name: {"learned": g.learned, "collapsed": g.collapsed} for name, g in judged.items()}
        seeded = {m.name: seeds_summary(m, tasks) for m in grouped if m.seeded and m.results}
        write_json(
            out / "results.json",
            {
                **first,
                "settings": {e.name: e.glue for e in results},
                "gates": gates,
                **({"pretrain_seeds": seeded} if seeded else {}),
            },
            indent=2,
        )
    return out


def _fmt(v: float | None, digits: int = 2) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


def _header(entries: list[Entry], grouped: list[Model], study: dict | None, tasks: list[str]) -> list[str]:
    lines = ["# Report", ""]
    if study is not None:
        if study.get("description"):
            lines += [study["description"], ""]
        steps = ", ".join(f"{s['name']}: {s['steps']:,}" for s in study.get("settings", []))
        seeds = study.get("spec", {}).get("pretrain_seeds") or 1
        over = f", each pretrained under {seeds} seeds" if seeds > 1 else ""
        lines += [
            f"Budget per setting: {wording.budget(str(study.get('budget')))} (optimizer steps: {steps}){over}. "
            f"Fine-tuned on {', '.join(study.get('tasks', []))} with seeds {study.get('seeds')}. Code revision: "
            f"`{study.get('code_revision', 'unknown')}`.",
            "",
        ]
    lines += [*_summary_heading(entries, grouped, tasks), ""]
    lines += [
        "| model | objective | did pretraining learn? (held out) | task mean | vs. no pretraining |",
        "|---|---|---|---|---|",
    ]
    for m in grouped:
        spread, baseline = task_mean_spread(m.results, tasks), baseline_for(m, grouped)
        base = task_mean_spread(baseline.results, tasks) if baseline else None
        delta = None if spread is None or base is None or m.baseline else spread.mean - base.mean
        mean = _fmt(None if spread is None else spread.mean)
        if spread is not None and spread.pretrain_std is not None:
            mean += f" ± {spread.pretrain_std:.2f} ({len(m.runs)} pretraining seeds)"
        lines.append(
            f"| {m.name} | {m.kind} | {m.judge().describe()} | {mean} | {'–' if delta is None else f'{delta:+.2f}'} |"
        )
    lines += verdict_section(grouped, tasks)
    never = [e.name for e in entries if e.judge().learned is False and not e.judge().collapsed]
    if never:
        lines += [
            "",
            f"**Never left the plateau: {', '.join(never)}.** Pretraining did not learn (see the gate column), so "
            "these GLUE scores say nothing about the objective, only that this setting did not train it.",
        ]
    collapsed = [e.name for e in entries if e.judge().collapsed]
    if collapsed:
        lines += [
            "",
            f"**Collapsed: {', '.join(collapsed)}.** The discriminator learned, then stopped telling replaced from "
            "original tokens (the study's finding with generators larger than recommended): fine-tuning starts "
            "from a discriminator that has unlearned its task.",
        ]
    return lines + [""]


def _summary_heading(entries: list[Entry], grouped: list[Model], tasks: list[str]) -> list[str]:
    """The Summary's heading, and a sentence where there is no task mean to show."""
    if tasks:
        over = (
            "; a model pretrained under several seeds: the mean of its pretraining seeds' means, ± their std"
            if any(m.seeded for m in grouped)
            else ""
        )
        return [
            f"## Summary: mean over {', '.join(tasks)} (each task's mean over seeds, the mean the verdicts test{over})"
        ]
    with_glue = [e for e in entries if e.glue]
    if not with_glue:
        why = "No model has GLUE results yet, so the task mean column is empty."
    elif len(with_glue) == 1:
        why = f"Only {with_glue[0].name} has GLUE results, and none of its tasks has a score, so there is no task mean."
    else:
        why = (
            "No task was fine-tuned for every model with GLUE results, so there is no task mean to compare them "
            "on (Table 2 has each model's tasks)."
        )
    return ["## Summary", "", why]


def _seeds_section(grouped: list[Model], tasks: list[str]) -> list[str]:
    """Models pretrained under several seeds: their scores nested (Table 5, electra/report/seeds.py)."""
    seeded = [m for m in grouped if m.seeded and m.results]
    return seeds_table(seeded, tasks) if seeded and tasks else []


def _electra_minus_mlm(grouped: list[Model], tasks: list[str], out: Path) -> list[str]:
    """With ELECTRA and MLM matched at more than one budget or model size: ELECTRA − MLM per study (the verdicts'
    difference of seed means over the tasks that moved, its interval and p), as a table and a figure against
    pretraining FLOPs with one line per model size: the small-scale counterpart of the paper's claim that ELECTRA's
    gain over masked-LM pretraining grows as models shrink, which these numbers may confirm or contradict. With
    pretraining seeds, the interval is the test's over pretraining seeds, and the fine-tuning seeds' alone is
    shown beside it."""
    pairs = [(a, b) for a, b in electra_mlm_pairs(grouped) if a.pretrain is not None]
    if len(pairs) < 2 or not tasks:
        return []

    def order(pair):
        d = pair[0].pretrain.cfg.model.discriminator
        return d.hidden_size, d.num_layers, pair[0].pretrain.flops

    rows, points = [], []
    for a, b in sorted(pairs, key=order):
        c = compare_models(a.name, a.results, b.name, b.results, tasks, a.judge(), b.judge())
        points.append(
            {
                "size": a.shape,
                "name": a.name,
                "flops": a.pretrain.flops,
                "delta": c.delta,
                "margin": c.margin,
                "finetune_margin": c.finetune_margin,
                "pretrain_seeds": c.pretrain_seeds,
                "p": c.p,
            }
        )
        rows.append(_electra_minus_mlm_row(a, b, c))
    drawn = [p for p in points if p["delta"] is not None]
    if drawn:
        figures.electra_minus_mlm(drawn, out / "electra-minus-mlm.png")
    return [
        "",
        "### ELECTRA − MLM at equal FLOPs, by budget and model size",
        "",
        f"Each row: one study's ELECTRA against its MLM (the same FLOPs); the difference of seed means over the tasks "
        "compared (those where the higher-scoring model is above chance), its "
        f"{CONFIDENCE:.0%} interval and Welch's p, as in the verdicts (with pretraining seeds: over pretraining-seed "
        "means, the fine-tuning seeds' interval alone beside it).",
        "",
        "| model (discriminator) | models | pretraining FLOPs | ELECTRA − MLM (points) | "
        f"{CONFIDENCE:.0%} interval | p | seeds a side | tasks compared | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        *(
            [
                "![ELECTRA − MLM against pretraining FLOPs, one line per model size](electra-minus-mlm.png)",
                "",
                f"Bars: the {CONFIDENCE:.0%} interval (electra-minus-mlm.json has each point's p); with pretraining "
                "seeds, thin bars with caps: over pretraining seeds (the test), thick bars: the fine-tuning seeds' "
                "alone; dashed: no difference. A bar of the test that clears zero is a difference at that confidence.",
                "",
            ]
            if drawn
            else []
        ),
    ]


def _electra_minus_mlm_row(a: Model, b: Model, c) -> str:
    verdict = f"{'ELECTRA' if c.delta > 0 else 'MLM'} better" if c.concluded else f"not resolved: {c.reason}"
    delta = "–" if c.delta is None else f"{c.delta:+.1f}"
    margin = "–" if c.margin is None else f"±{c.margin:.1f}"
    seeds = "–" if c.seeds is None else str(c.seeds)
    if c.pretrain_seeds is not None:
        seeds = f"{c.pretrain_seeds} pretraining × {seeds} fine-tuning"
        if c.finetune_margin is not None:
            margin += f" (fine-tuning seeds alone ±{c.finetune_margin:.1f})"
    return (
        f"| {a.shape} | {a.name} − {b.name} | {a.pretrain.flops:.3g} | {delta} | {margin} "
        f"| {'–' if c.p is None else _p(c.p)} | {seeds} | {', '.join(c.tasks) or '–'} | {verdict} |"
    )


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _rejected(entries: list[Entry]) -> dict[str, str]:
    """Models whose pretraining the gate rejects -> the gate's word, for the figures' legends."""
    return {e.name: e.judge().word for e in entries if e.judge().learned is False}


def _glue_section(entries: list[Entry], grouped: list[Model], out: Path) -> list[str]:
    with_glue = [e for e in entries if e.glue]
    if not with_glue:
        return ["## GLUE", "", "No GLUE results yet.", ""]
    scores = {e.name: task_scores(e.glue) for e in with_glue}
    metrics = {
        t: TASK_METRIC.get(t) or next(iter(e.glue["tasks"][t]["metrics"])) for e in with_glue for t in e.glue["tasks"]
    }
    order = order_tasks(metrics)
    chance = {
        t: e.glue["tasks"][t]["chance"]["baseline"]
        for e in with_glue
        for t in e.glue["tasks"]
        if "chance" in e.glue["tasks"][t]
    }
    figures.glue_scores(scores, {t: metrics[t] for t in order}, chance, _rejected(with_glue), out / "glue.png")
    return [
        "## GLUE (dev)",
        "",
        "![GLUE per task](glue.png)",
        "",
        "Bars: median over seeds; error bars: min–max; dashed: each task's chance level (the training set's "
        "majority class, or 0 for MCC and correlations); hatched: models whose pretraining the gate rejects.",
        "",
        *report_tables.glue_table(with_glue),
        *_sources(with_glue),
        *_crossover([m for m in grouped if m.results], {t: metrics[t] for t in order}, chance, out),
    ]


def _sources(entries: list[Entry]) -> list[str]:
    """The checkpoint each model's scores came from (its sweep's results.json "source": path, step, sha256)."""
    if not any(e.glue.get("source") for e in entries):
        return []
    lines = [
        "The checkpoint each model's scores came from:",
        "",
        "| model | checkpoint | step | sha256 |",
        "|---|---|---|---|",
    ]
    for e in entries:
        source = e.glue.get("source")
        if source is None:
            lines.append(f"| {e.name} | not recorded (a sweep from before it was) | | |")
            continue
        step = "" if source.get("step") is None else f"{source['step']:,}"
        lines.append(f"| {e.name} | {source['path']} | {step} | {source['sha256'][:12]} |")
    return [*lines, ""]


def _crossover(grouped: list[Model], metrics: dict[str, str], chance: dict[str, float], out: Path) -> list[str]:
    """With pretrained models at several budgets and a random-init baseline: each task's score against
    pretraining FLOPs per objective, beside the baseline's band (figures.crossover). With more than one model size
    in the report, one line per objective and size: a larger model at the same FLOPs is another curve, not the
    next point of the same one."""
    pretrained = [m for m in grouped if m.pretrain is not None and not m.baseline and m.pretrain.steps]
    baselines = [{"name": m.name, "scores": nested_scores(m)} for m in grouped if m.baseline]
    several_sizes = len({m.shape for m in pretrained}) > 1
    series: dict[str, list[dict]] = {}
    for m in pretrained:
        line = f"{m.pretrain.kind} ({m.shape})" if several_sizes else m.pretrain.kind
        series.setdefault(line, []).append({"name": m.name, "flops": m.pretrain.flops, "scores": nested_scores(m)})
    if not baselines or not any(len({p["flops"] for p in points}) > 1 for points in series.values()):
        return []  # no objective at two budgets: no curve
    figures.crossover(series, baselines, chance, metrics, out / "crossover.png")
    seeded = any(m.seeded for m in grouped)
    return [
        "",
        "### GLUE against pretraining FLOPs, per task (where pretraining starts to beat random weights)",
        "",
        "![each task's score against pretraining FLOPs, per objective, beside random initialisation](crossover.png)",
        "",
        "Lines: each objective's (and model size's) mean over seeds at each budget (min–max in crossover.json); "
        "thick bars: ± the fine-tuning seeds' std"
        + ("; thin bars with caps: ± the pretraining seeds' std (models with several)" if seeded else "")
        + "; dashed: random initialisation's mean, dotted: its min–max; dash-dotted: chance. Where an objective's "
        "line clears the baseline's band it beats random weights beyond the seeds' spread; a task at chance for "
        "every model says nothing.",
        "",
    ]


def nested_scores(m: Model) -> dict[str, dict]:
    """Task -> a model's mean over seeds, the lowest and highest score, and both spreads (electra/report/seeds.py),
    for the figures."""
    out = {}
    for task in task_scores(m.first.glue or {}):
        n = nest(m.results or [], task)
        if n is not None:
            out[task] = {
                "mean": n.mean,
                "low": n.low,
                "high": n.high,
                "pretrain_std": n.pretrain_std,
                "finetune_std": n.finetune_std,
            }
    return out


def _dynamics_section(entries: list[Entry], out: Path) -> list[str]:
    runs = [e for e in entries if e.pretrain is not None and not e.baseline and (e.pretrain.train or e.pretrain.evals)]
    if not runs:
        return []
    lines = ["## Pretraining dynamics (the study's Figure 3)", ""]
    for e in runs:
        name = _slug(e.name)
        figures.training_dynamics(
            e.pretrain.train,
            e.pretrain.evals,
            f"{e.name} ({e.pretrain.kind})",
            out / f"dynamics-{name}.png",
            e.pretrain.kind,
            GATE_AUC,
        )
        lines += [f"### {e.name}", "", f"![training dynamics of {e.name}](dynamics-{name}.png)", ""]
        if e.pretrain.evals:
            lines += [_held_out_line(e.pretrain.evals[-1]), ""]
    return lines + _collapse_section(runs, out)


def _held_out_line(last: dict) -> str:
    keys = (
        "mlm_accuracy",
        "masked_accuracy",
        "mlm_majority_rate",
        "sampled_accuracy",
        "disc_auc",
        "disc_recall",
        "disc_precision",
    )
    values = ", ".join(f"{k} {_fmt(last.get(f'eval_{k}'), 3)}" for k in keys if f"eval_{k}" in last)
    return f"Held out at step {last['step']:,}: {values}."


def _collapse_section(runs: list[Entry], out: Path) -> list[str]:
    electra = [e for e in runs if e.pretrain.kind == "electra" and e.pretrain.evals]
    if len(electra) < 2:
        return []
    collapsed = {e.name: e.pretrain.collapsed or e.judge().collapsed for e in electra}
    figures.collapse({e.name: e.pretrain.evals for e in electra}, collapsed, out / "collapse.png", GATE_AUC)
    lines = [
        "## Collapse (the study's Figure 2)",
        "",
        "![held-out discriminator metrics and generator loss per setting](collapse.png)",
        "",
        "Held out, per setting. Dashed and labelled: runs flagged as collapsed (held-out AUC < 0.55, or recall < 0.05 "
        "with an AUC not above the gate's 0.6, for `collapse_patience` evaluations in a row; or an AUC that passed the "
        "gate and ended under it, 0.05 or more below its peak).",
        "",
    ]
    sweep = report_tables.sweep_entries(electra)
    tasks = common_tasks(sweep) if sweep else []
    return lines + (report_tables.sweep_table(sweep, tasks) if sweep else [])


def _compute_section(entries: list[Entry], grouped: list[Model], tasks: list[str], out: Path) -> list[str]:
    lines = ["## Compute and efficiency", "", *report_tables.compute_table(entries, tasks)]
    # the paper's scores average its 8 tasks: with all of them at hand (a 9-task study adds WNLI), ours average
    # exactly those and share its panel; otherwise ours average the tasks run, in a panel of their own
    paper = [t for t, _ in PAPER_TASKS]
    averaged = paper if set(paper) <= set(tasks) else tasks
    points = report_tables.efficiency_points(entries, averaged)
    if not points:
        return lines
    baseline = next((m for m in grouped if m.baseline and m.results), None)
    base = task_mean_spread(baseline.results, averaged) if baseline else None
    base_score = None if base is None else base.mean
    ours_average = PAPER_AVERAGE if averaged == paper else f"mean over {', '.join(tasks)} (dev, means over seeds)"
    figures.efficiency(
        points,
        report_tables.quoted_points(),
        ours_average,
        PAPER_AVERAGE,
        base_score,
        averaged,
        paper,
        out / "efficiency.png",
    )
    same = "in separate panels, since they average other tasks"
    if averaged == paper:
        left_out = [t for t in tasks if t not in paper]
        same = "in one panel, both averaging the paper's 8 tasks" + (
            f" ({', '.join(left_out)} left out of ours)" if left_out else ""
        )
    return lines + [
        "![score against pretraining FLOPs](efficiency.png)",
        "",
        f"Ours (measured) and the ELECTRA paper's Table 1 points (quoted) {same}; dashed: no pretraining. Error "
        "bars on ours: ± the seeds' std of the score (over pretraining seeds where a model has several, else over "
        "fine-tuning seeds); the score axis spans at least "
        f"{figures.MIN_SCORE_RANGE:g} points, so that seed noise does not read as a slope.",
        "",
        *report_tables.efficiency_table(points, base_score, ours_average, averaged),
    ]


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
