"""The reproducibility study's four tables, as markdown lines, from what the runs wrote (electra/report/results.py) and,
in rows marked "quoted", the published numbers (electra/report/published.py):

    Table 1  compute per experiment: steps, tokens, FLOPs, pfs-days by FLOPs and by wall clock, GPUs, the device
             of every session, pretraining and fine-tuning time
    Table 2  GLUE dev per task: median and mean ± std over seeds, beside OFF's and the study's published numbers
    Table 3  efficiency: parameters, FLOPs, pfs-days and score per pfs-day, with the study's and the paper's rows
    Table 4  the generator-size sweep: held-out generator loss, discriminator AUC / recall, collapse, GLUE
    (Table 5, pretraining seeds, is electra/report/seeds.py's)

Scores are means over seeds, the statistic the verdicts test (Table 2 gives each task's median beside its mean).
"""

from __future__ import annotations

import math

from electra.modeling.flops import PFS_DAY, backbone_parameters
from electra.report.published import LITERATURE, REFERENCE_TASKS, STUDY_EFFICIENCY
from electra.report.results import (
    Entry,
    compute_row,
    finetune_cap,
    max_steps_changes,
    order_tasks,
    task_mean,
    task_stats,
)
from electra.report.seeds import Model, at_chance_pooled, models, task_mean_spread
from electra.utils.wording import plural

STUDY_SWEEP_STEPS = 250_000
"""The study ran its generator-size sweep at equal steps: 250k of its 1M (25%) for every size (RC report)."""


def fmt(v: float | None, digits: int = 2) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


def _hours(hours: float | None) -> str:
    return "–" if hours is None else f"{hours:.3g}"


# -- Table 1: compute ------------------------------------------------------------------------------------------


def _sessions_cell(row: dict, machines: dict[str, str]) -> str:
    parts = [
        f"{s['device']}"
        + (f" ×{s['world_size']}" if s["world_size"] > 1 else "")
        + _machine_mark(s["machine"], machines)
        + f" ({plural(s['steps'], 'step')})"
        for s in row["sessions"]
    ]
    return "; ".join(parts) or "–"


def _machine_mark(machine: str | None, machines: dict[str, str]) -> str:
    """ " [M1]": the machine's key in Table 1's legend, given the next key the first time it is seen; "" for a run
    that did not record its machine."""
    if not machine:
        return ""
    return f" [{machines.setdefault(machine, f'M{len(machines) + 1}')}]"


def _precision_cell(e: Entry) -> str:
    """The precision the run used and whether its fp32 matmuls ran in TF32 (run.json); ? where a run older than
    those keys does not say."""
    if e.pretrain is None:
        return "–"
    meta = e.pretrain.meta
    precision = meta.get("precision") or "?"
    tf32 = meta.get("tf32")
    return f"{precision}, TF32 {'?' if tf32 is None else ('on' if tf32 else 'off')}"


def compute_table(entries: list[Entry], tasks: list[str] = ()) -> list[str]:
    """Table 1, a row per pretraining run; with pretraining seeds, each model's row (in bold) after its seeds' and a
    last column with the task mean over `tasks` and both spreads."""
    grouped = models(entries)
    seeded = any(m.seeded for m in grouped)
    lines = [
        "### Table 1: compute per experiment",
        "",
        "| model | objective | steps | tokens | FLOPs | pfs-days (FLOPs) | GPUs | device per session | precision "
        "| pretraining h | fine-tuning h | pfs-days (wall clock) |" + (" task mean |" if seeded else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if seeded else ""),
    ]
    machines: dict[str, str] = {}  # machine -> its key in the legend, in order of first appearance
    for m in grouped:
        runs = [e for e in m.runs if e.pretrain is not None or e.baseline]  # from elsewhere: not ours to report
        for e in runs:
            score = task_mean_spread(None if e.glue is None else [e.glue], tasks) if seeded else None
            lines.append(_compute_line(e, machines, seeded, score))
        if m.seeded and runs:
            lines.append(_model_compute_line(m, runs, tasks))
    legend = [f"[{key}] {machine}" for machine, key in machines.items()]
    continued = any(compute_row(e)["continued"] for e in entries if e.pretrain is not None)
    return lines + [
        "",
        *(["Machines (the times beside each key were taken there): " + "; ".join(legend) + ".", ""] if legend else []),
        "FLOPs by the official ELECTRA accounting (google-research/electra flops_computation.py; what `electra "
        "flops` prints for these steps). pfs-days (FLOPs): those FLOPs / (10^15 × 86,400). pfs-days (wall clock): "
        'the study\'s convention (OpenAI "AI and Compute": days × GPUs × peak TFLOP/s × 0.33 / 1000, as `electra '
        "flops --days D --device X` computes it), summed over the run's sessions; – where a session's device has "
        "no peak in modeling/flops.py (a CPU). GPUs: the most any session ran on (0: CPUs only). Precision: what the "
        "run resolved train.precision to and whether its fp32 matmuls ran in TF32 (run.json; ? for runs older than "
        "those keys). Fine-tuning h: all seeds and tasks of the model's GLUE sweep.",
        "",
        *([CONTINUED_NOTE, ""] if continued else []),
        *(
            [
                "With pretraining seeds: each model's row (bold) sums the compute of its pretraining runs. Task mean "
                f"over {', '.join(tasks)}: a run's mean of its fine-tuning seeds' means, ± the fine-tuning seeds' "
                "std of that mean; a model's mean of its pretraining seeds' task means, ± their std over pretraining "
                "seeds, the fine-tuning seeds' std within a pretraining seed beside it (Table 5 per task).",
                "",
            ]
            if seeded
            else []
        ),
    ]


CONTINUED_NOTE = (
    "A continued run (pretrain --init) counts the steps it made itself; beside its FLOPs, the FLOPs already spent in "
    "the model it started from (run.json init.flops: its source run's steps and theirs; unknown for a model trained "
    "elsewhere, e.g. a transformers pair)."
)


def _flops_cell(r: dict) -> str:
    """The FLOPs a run spent, and for a continued run those of its source beside them."""
    if not r["continued"]:
        return f"{r['flops']:.3g}"
    source = "unknown" if r["source_flops"] is None else f"{r['source_flops']:.3g}"
    return f"{r['flops']:.3g} (+ {source} in its source)"


def _compute_line(e: Entry, machines: dict[str, str], seeded: bool, score) -> str:
    r = compute_row(e)
    wall = "–" if r["pfs_days_wall"] is None else f"{r['pfs_days_wall']:.2e}"
    run_sessions = _sessions_cell(r, machines)  # the pretraining's machines take the first keys
    tuning = _hours(r["finetune_hours"]) + "".join(_machine_mark(m, machines) for m in r["finetune_machines"])
    line = (
        f"| {e.name} | {e.kind} | {r['steps']:,} | {r['tokens']:,} | {_flops_cell(r)} | {r['pfs_days']:.2e} | "
        f"{r['gpus']} | {run_sessions} | {_precision_cell(e)} | {_hours(r['hours'])} | {tuning} | {wall} |"
    )
    if seeded:
        spread = "" if score is None or score.finetune_std is None else f" ± {score.finetune_std:.2f}"
        line += f" {'–' if score is None else f'{score.mean:.2f}{spread}'} |"
    return line


def _model_compute_line(m: Model, runs: list[Entry], tasks: list[str]) -> str:
    """A model's row: its pretraining seeds' compute summed, its task mean with both spreads."""
    rows = [compute_row(e) for e in runs]

    def total(key: str) -> float | None:
        values = [r[key] for r in rows]
        return None if any(v is None for v in values) else sum(values)

    steps = {r["steps"] for r in rows}
    steps_cell = f"{len(rows)} × {rows[0]['steps']:,}" if len(steps) == 1 else f"{sum(r['steps'] for r in rows):,}"
    wall = total("pfs_days_wall")
    s = task_mean_spread(m.results, tasks)
    score = "–"
    if s is not None:
        score = f"{s.mean:.2f}" + ("" if s.pretrain_std is None else f" ± {s.pretrain_std:.2f}")
        score += "" if s.finetune_std is None else f" (fine-tuning ± {s.finetune_std:.2f})"
    return (
        f"| **{m.name}** ({plural(len(rows), 'pretraining seed')}) | {m.kind} | {steps_cell} | {total('tokens'):,} | "
        f"{total('flops'):.3g} | {total('pfs_days'):.2e} | {max(r['gpus'] for r in rows)} | – | – | "
        f"{_hours(total('hours'))} | {_hours(total('finetune_hours'))} | {'–' if wall is None else f'{wall:.2e}'} | "
        f"{score} |"
    )


# -- Table 2: GLUE dev per task ----------------------------------------------------------------------------------


def _glue_tasks(entries: list[Entry]) -> list[str]:
    return order_tasks(t for e in entries if e.glue for t in task_stats(e.glue))


def glue_table(entries: list[Entry]) -> list[str]:
    with_glue = [e for e in entries if e.glue]
    tasks = _glue_tasks(with_glue)
    lines = [
        "### Table 2: GLUE dev per task",
        "",
        "Each cell: median over fine-tuning seeds, then mean ± sample std, and the number of seeds. Metric per "
        "task as the ELECTRA paper reports it (CoLA MCC, STS-B Spearman, MNLI matched accuracy, the others "
        "accuracy); `*`: most seeds at chance level.",
        "",
        "| model | " + " | ".join(tasks) + " | paper | glue | study |",
        "|---|" + "---|" * (len(tasks) + 3),
    ]
    notes = _Notes()
    for e in with_glue:
        stats = task_stats(e.glue)
        cells = [_glue_cell(e.glue, t, stats.get(t)) for t in tasks]
        agg = e.glue.get("scores", {})
        cells += [fmt(agg.get(k)) for k in ("paper", "glue", "study")]
        changes = max_steps_changes(e.pretrain.meta) if e.pretrain is not None else []
        name = e.name + _bound_marks(finetune_cap(e), changes, notes)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        *(x for line in notes.under() for x in (line, "")),
        "The aggregate columns are `electra glue`'s three scores (docs/glue.md); each is empty unless "
        "every task it needs was run.",
        "",
    ]
    return lines + _published_comparison(with_glue, tasks)


def _glue_cell(results: dict, task: str, s: dict | None) -> str:
    if s is None:
        return "–"
    chance = results["tasks"][task].get("chance")
    star = "*" if chance and chance["seeds_at_chance"] * 2 > chance["n"] else ""
    return f"{s['median']:.2f}{star} ({s['mean']:.2f} ± {s['std']:.2f}, n={s['n']})"


def _published_comparison(entries: list[Entry], tasks: list[str]) -> list[str]:
    published = [t for t in REFERENCE_TASKS["OFF ELECTRA-Small-OWT"] if t in tasks]
    if not published:
        return [
            "None of these tasks has published ELECTRA-Small numbers (they are not GLUE tasks): no comparison "
            "with OFF or the study.",
            "",
        ]
    heads = [f"{t}†" if t == "mnli" else t for t in published]
    lines = [
        "Beside the published ELECTRA-Small (dev; quoted rows from OFF's README, the study's report and "
        "google-research/electra#73):",
        "",
        "| model | " + " | ".join(heads) + " |",
        "|---|" + "---|" * len(published),
    ]
    for e in entries:
        stats = task_stats(e.glue)
        cells = [
            f"{stats[t]['median']:.2f} / {stats[t]['mean']:.2f} ± {stats[t]['std']:.2f}" if t in stats else "–"
            for t in published
        ]
        lines.append(f"| {e.name} (ours: median / mean ± std) | " + " | ".join(cells) + " |")
    for name, row in REFERENCE_TASKS.items():
        lines.append(f"| {name} (quoted) | " + " | ".join(f"{row[t]:.1f}" for t in published) + " |")
    if "mnli" in published:
        lines += [
            "",
            "† MNLI: ours and OFF's are matched accuracy; the study merged matched and mismatched into one "
            "accuracy, so its MNLI number is not comparable with the others in that column.",
        ]
    return lines + [""]


# -- Table 3: efficiency ---------------------------------------------------------------------------------------


def efficiency_points(entries: list[Entry], tasks: list[str]) -> list[dict]:
    """Our pretrained models with a score: parameters of the fine-tuned body, FLOPs (of one pretraining run), the
    task mean (means over seeds; over pretraining seeds where a model has several) and its spread (`err`: the std
    over pretraining seeds, else over fine-tuning seeds); and what bounds those numbers: the tasks above chance
    level (score per pfs-day averages those only), the learning gate's word when it rejects the pretraining (then
    no score per pfs-day), a fine-tuning cap (`finetune.max_steps`) and the steps where a resumed run changed
    `train.max_steps`."""
    points = []
    for m in models(entries):
        spread = task_mean_spread(m.results, tasks)
        if m.pretrain is None or m.baseline or spread is None:
            continue
        row, gate = compute_row(m.first), m.judge()
        above = [t for t in tasks if not at_chance_pooled(m.results, t)]
        points.append(
            {
                "name": m.name,
                "flops": row["flops"],
                "params": backbone_parameters(m.pretrain.cfg.model),
                "score": spread.mean,
                "err": spread.pretrain_std if m.seeded else spread.finetune_std,
                "source": "ours",
                "pfs_days": row["pfs_days"],
                "above_chance": above,
                "above_chance_score": task_mean_spread(m.results, above).mean if above else None,
                "rejected": gate.word if gate.learned is False else None,
                "finetune_cap": finetune_cap(m.first),
                "max_steps_changes": max_steps_changes(m.pretrain.meta),
            }
        )
    return points


def quoted_points() -> list[dict]:
    return [
        {"name": n, "params": p, "flops": f, "score": s, "source": "quoted", "pfs_days": f / PFS_DAY}
        for n, p, f, s in LITERATURE
    ]


def _per_pfs_day(score: float, pfs: float | None) -> str:
    return "–" if not pfs else f"{score / pfs:,.0f}"


class _Notes:
    """Footnotes under a table: each distinct line once, its mark [n] beside every number it bounds (rows that
    share a bound share its mark)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def mark(self, line: str) -> str:
        if line not in self.lines:
            self.lines.append(line)
        return f" [{self.lines.index(line) + 1}]"

    def under(self) -> list[str]:
        return [f"[{i}] {line}" for i, line in enumerate(self.lines, start=1)]


def _bound_marks(cap: int | None, changes: list[tuple[int, int]], notes: _Notes) -> str:
    """The marks of what bounds a model's scores: a fine-tuning cap, a `train.max_steps` changed on resume."""
    marks = ""
    if cap is not None:
        marks += notes.mark(
            f"fine-tuning capped at {plural(cap, 'step')} per task (`finetune.max_steps`), not the recipe's epochs."
        )
    for step, steps in changes:
        marks += notes.mark(
            f"`train.max_steps` changed to {steps:,} on resume at step {step:,}; the learning-rate schedule "
            "changed there."
        )
    return marks


def _our_efficiency_row(p: dict, tasks: list[str], average: str, notes: _Notes) -> str:
    """One row of ours: score per pfs-day over the tasks above chance only (the at-chance ones measure no
    pretraining), none for a model whose pretraining the gate rejects (a dash and a note: its score measures no
    pretraining either), and marks where fine-tuning was capped or the run's `train.max_steps` changed on resume."""
    score = f"{p['score']:.2f}" + _bound_marks(p.get("finetune_cap"), p.get("max_steps_changes", []), notes)
    above = p.get("above_chance", tasks)
    if p.get("rejected"):
        per_pfs = "–" + notes.mark(
            f"no score per pfs-day: the learning gate says {p['rejected'].upper()} (see the gate's verdicts), so "
            "the score measures fine-tuning from weights that did not learn what the objective teaches, not what "
            "its pretraining compute bought."
        )
    elif not above:
        per_pfs = "–, no task above chance"
    else:
        per_pfs = _per_pfs_day(p["above_chance_score"] if above != tasks else p["score"], p["pfs_days"])
        if above != tasks and per_pfs != "–":
            left_out = [t for t in tasks if t not in above]
            per_pfs += notes.mark(
                "score per pfs-day averages the tasks above chance only ("
                f"{', '.join(above)}; {', '.join(left_out)} at chance level, left out)."
            )
    return (
        f"| {p['name']} | ours | {p['params'] / 1e6:.2f}M | {p['flops']:.3g} | {p['pfs_days']:.2e} | {score} | "
        f"{per_pfs} | {average} |"
    )


def efficiency_table(points: list[dict], baseline: float | None, average: str, tasks: list[str]) -> list[str]:
    """Table 3 over `tasks` (what `average` names; a point's above-chance tasks are a subset of them)."""
    lines = [
        "### Table 3: efficiency",
        "",
        "| model | source | parameters | FLOPs | pfs-days | score | score per pfs-day | what the score averages |",
        "|---|---|---|---|---|---|---|---|",
    ]
    notes = _Notes()
    for p in points:
        lines.append(_our_efficiency_row(p, tasks, average, notes))
    if baseline is not None:
        lines.append(f"| no pretraining | ours | – | 0 | 0 | {baseline:.2f} | – | {average} |")
    for name, params, hardware, pfs, score, what in STUDY_EFFICIENCY:
        lines.append(
            f"| {name} | quoted (the study) | {params / 1e6:.0f}M | – ({hardware}) | {pfs:.2f} | "
            f"{score:.1f} | {_per_pfs_day(score, pfs)} | {what} |"
        )
    for p in quoted_points():
        lines.append(
            f"| {p['name']} | quoted (ELECTRA paper Table 1) | {p['params'] / 1e6:.0f}M | {p['flops']:.2g} | "
            f"{p['pfs_days']:.3f} | {p['score']:.1f} | {_per_pfs_day(p['score'], p['pfs_days'])} | "
            "GLUE dev score as the paper reports it |"
        )
    return lines + [
        "",
        *(x for line in notes.under() for x in (line, "")),
        "pfs-days: ours and the paper's rows from FLOPs (FLOPs / (10^15 × 86,400)); the study's rows by its wall-clock "
        "convention (days × GPUs × peak TFLOP/s × 0.33 / 1000), as it printed them. Score per pfs-day divides the "
        "score by those pfs-days (for the quoted rows, from their quoted numbers); for ours, the score over the "
        "tasks above chance level only (a task at chance measures no pretraining), and none for a model whose "
        "pretraining the learning gate rejects (its score measures no pretraining either). Scores that average "
        "different tasks are not comparable with each other.",
        "",
    ]


# -- Table 4: the generator-size sweep --------------------------------------------------------------------------


def sweep_entries(entries: list[Entry]) -> list[Entry]:
    """The ELECTRA runs of a generator-size sweep: two or more generator fractions among them (else none)."""
    runs = [e for e in entries if e.pretrain is not None and e.pretrain.kind == "electra"]
    fractions = {e.pretrain.cfg.model.generator_fraction for e in runs}
    return sorted(runs, key=lambda e: e.pretrain.cfg.model.generator_fraction) if len(fractions) > 1 else []


def _last(e: Entry, key: str) -> float | None:
    values = [r[key] for r in e.pretrain.evals if key in r]
    return values[-1] if values else None


def sweep_table(runs: list[Entry], tasks: list[str]) -> list[str]:
    lines = [
        "### Table 4: generator size",
        "",
        "| generator fraction | generator hidden | steps | held-out generator loss (nats) | disc AUC | disc recall | "
        "collapsed | gate | GLUE task mean |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in runs:
        m, gate = e.pretrain.cfg.model, e.judge()
        collapsed = e.pretrain.collapsed or gate.collapsed
        lines.append(
            f"| {m.generator_fraction:g} | {m.generator.hidden_size} | {e.pretrain.steps:,} | "
            f"{fmt(_last(e, 'eval_mlm_loss'), 3)} | {fmt(_last(e, 'eval_disc_auc'), 3)} | "
            f"{fmt(_last(e, 'eval_disc_recall'), 3)} | {'yes' if collapsed else 'no'} | {gate.word} | "
            f"{fmt(task_mean(e.glue, tasks, 'mean'))} |"
        )
    steps = {e.pretrain.steps for e in runs}
    lines += [
        "",
        f"Values at the last held-out evaluation. The study compared generator sizes at equal steps "
        f"({STUDY_SWEEP_STEPS:,} each, 25% of its 1M); 'collapsed': the collapse watch's flag (held-out AUC "
        "< 0.55, or recall < 0.05 with an AUC not above the gate's 0.6, for `collapse_patience` evaluations in a "
        "row), or a held-out AUC that passed the gate and ended under it, 0.05 or more below its peak.",
    ]
    if len(steps) > 1:
        lines += [
            "",
            f"**Warning: the sizes ran unequal steps ({', '.join(f'{s:,}' for s in sorted(steps))}), as a "
            "FLOPs or seconds budget gives them: larger generators got fewer steps, so this is not the study's "
            "comparison. Use `--budget steps=N` for it.**",
        ]
    return lines + [""]
