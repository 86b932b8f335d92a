"""The report's figures, drawn with matplotlib from what runs wrote to disk (electra/report/write.py reads it). Each
figure is first described as plain data (panels of lines, bars, reference lines and labelled points), then drawn
by `draw`, which writes the PNG and, beside it, the same description as JSON (NAME.json): what each figure shows
can be checked, and redrawn, without reading pixels. Nothing here trains or loads a model.

Conventions every figure keeps: a split has one colour in every panel (training, held out); axes say what a value
is (nats, accuracy in %, AUC); undefined values (NaN, a metric an objective does not have) are gaps, not lines
joined across them; reference lines are drawn where a value has one (chance, the gate's threshold, the rate of
always predicting "original").
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display needed (CI, servers)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import LogFormatterSciNotation, LogLocator  # noqa: E402

DPI = 110
PANEL_SIZE = (4.2, 3.0)  # inches: readable without zooming at DPI
SPLIT_COLOURS = {"training": "C0", "held out": "C1"}
REFERENCE_COLOUR = "0.3"
GATE_COLOUR = "C3"
MIN_SCORE_RANGE = 5.0
"""Points of score the efficiency figure's score axis spans at least: seed noise on these tasks is ~0.5 points
(SST-2, std over fine-tuning seeds), and an axis a point wide would draw it as a slope."""

# -- drawing a described figure --------------------------------------------------------------------------------


def _values(ys: list) -> list[float]:
    """None and non-finite values become NaN: matplotlib leaves a gap there."""
    return [v if isinstance(v, (int, float)) and math.isfinite(v) else math.nan for v in ys]


def _draw_panel(ax, panel: dict) -> list:
    for s in panel.get("lines", []):
        ax.errorbar(
            s["x"],
            _values(s["y"]),
            yerr=None if "err" not in s else [0.0 if e is None else e for e in s["err"]],  # None: no interval
            capsize=3,
            color=s["color"],
            linestyle=s.get("style", "-"),
            marker=s.get("marker"),
            markersize=3,
            linewidth=1.2,
            label=s["label"],
        )
        if any(e is not None for e in s.get("err_inner") or []):  # the other spread, thick and without caps
            ax.errorbar(
                s["x"],
                _values(s["y"]),
                yerr=[0.0 if e is None else e for e in s["err_inner"]],
                fmt="none",
                ecolor=s["color"],
                elinewidth=4,
                alpha=0.45,
            )
    for b in panel.get("bars", []):
        ax.bar(
            b["x"],
            _values(b["height"]),
            b["width"],
            yerr=[b["low"], b["high"]],
            capsize=3,
            color=b["color"],
            hatch=b.get("hatch"),
            edgecolor="k" if b.get("hatch") else None,
            label=b["label"],
        )
    for h in panel.get("hlines", []):
        kw = {"color": h["color"], "linestyle": h.get("style", ":"), "linewidth": 1.0, "label": h.get("label")}
        if "x0" in h:
            ax.hlines(h["y"], h["x0"], h["x1"], **kw)
        else:
            ax.axhline(h["y"], **kw)
    labels = []
    for p in panel.get("points", []):
        ax.scatter(p["x"], p["y"], marker=p["marker"], s=36, facecolors=p["fill"], edgecolors=p["color"])
        if p.get("err"):
            ax.errorbar(p["x"], p["y"], yerr=p["err"], fmt="none", ecolor=p["color"], capsize=3, linewidth=1.0)
        labels.append(ax.annotate(p["label"], (p["x"], p["y"]), fontsize=7, xytext=(4, 2), textcoords="offset points"))
    if labels:
        ax.margins(x=0.15, y=0.1)  # room for the labels of the outermost points
    if panel.get("ylim"):
        ax.set_ylim(*panel["ylim"])
    for p in panel.get("legend_points", []):
        ax.scatter([], [], marker=p["marker"], facecolors=p["fill"], edgecolors=p["color"], label=p["label"])
    if panel.get("xscale"):
        ax.set_xscale(panel["xscale"])
    if panel.get("xscale") == "log":  # minor labels at 2x and 5x only: all of them overlap within a decade
        ax.xaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        ax.xaxis.set_minor_formatter(LogFormatterSciNotation(labelOnlyBase=False, minor_thresholds=(2, 2)))
    if panel.get("xticks"):
        ax.set_xticks(range(len(panel["xticks"])), panel["xticks"], fontsize=8)
    ax.set_title(panel["title"], fontsize=9)
    ax.set_xlabel(panel.get("xlabel", ""))
    ax.set_ylabel(panel.get("ylabel", ""))
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return labels


def _separate_labels(fig, labels: list) -> list[list[float]]:
    """Move point labels up until no two overlap; returns their boxes in display pixels (x0, y0, x1, y1)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    placed = []
    for text in sorted(labels, key=lambda t: (t.xy[1], t.xy[0])):
        dy = 2.0
        for _ in range(60):
            box = text.get_window_extent(renderer)
            if not any(box.overlaps(other) for other in placed):
                break
            dy += 4.0
            text.set_position((4, dy))
        placed.append(text.get_window_extent(renderer))
    return [[b.x0, b.y0, b.x1, b.y1] for b in placed]


def draw(figure: dict, path: Path) -> Path:
    """Draw `figure` ({"title", "columns", "panels": [...]}) into `path` (PNG) and write its data to
    path.with_suffix(".json")."""
    panels = figure["panels"]
    cols = max(1, min(figure.get("columns", 4), len(panels)))
    rows = max(1, math.ceil(len(panels) / cols))
    width, height = figure.get("panel_size", PANEL_SIZE)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    labels = []
    for ax, panel in zip(axes.flat, panels, strict=False):
        labels += _draw_panel(ax, panel)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    if figure.get("title"):
        fig.suptitle(figure["title"])
    fig.tight_layout()
    if labels:
        figure = {**figure, "label_boxes": _separate_labels(fig, labels)}
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    path.with_suffix(".json").write_text(json.dumps(figure, indent=1, allow_nan=False, default=_no_nan) + "\n")
    return path


def _no_nan(value):
    raise TypeError(f"not JSON: {value!r}")


def _clean(ys: list) -> list[float | None]:
    """For the JSON side file: None where a value is undefined."""
    return [v if isinstance(v, (int, float)) and math.isfinite(v) else None for v in ys]


# -- training dynamics (the study's Figure 3) ------------------------------------------------------------------

PERCENT, NATS, AUC, FRACTION, RANK = "accuracy (%)", "nats", "AUC", "fraction", "effective rank"

# (metrics.jsonl key without eval_, title for ELECTRA, title for MLM, unit, scale)
DYNAMICS = (
    ("mlm_loss", "generator loss (masked LM)", "masked LM loss", NATS, 1.0),
    ("masked_loss", "generator loss at [MASK] slots", "masked LM loss at [MASK] slots", NATS, 1.0),
    ("mlm_accuracy", "generator accuracy (all chosen slots)", "masked LM accuracy (all chosen slots)", PERCENT, 100.0),
    ("masked_accuracy", "generator accuracy at [MASK] slots", "masked LM accuracy at [MASK] slots", PERCENT, 100.0),
    ("sampled_accuracy", "generator samples equal to the original", None, PERCENT, 100.0),
    ("disc_loss", "discriminator loss", None, NATS, 1.0),
    ("disc_accuracy", "discriminator accuracy", None, PERCENT, 100.0),
    ("disc_precision", "discriminator precision (replaced)", None, FRACTION, 1.0),
    ("disc_recall", "discriminator recall (replaced)", None, FRACTION, 1.0),
    ("disc_auc", "discriminator AUC", None, AUC, 1.0),
    ("disc_effective_rank", "discriminator last-layer effective rank", None, RANK, 1.0),
)


def _series(rows: list[dict], key: str, scale: float) -> tuple[list, list]:
    rows = [r for r in rows if key in r]
    return [r["step"] for r in rows], [
        v * scale if isinstance(v, (int, float)) else None for v in (r[key] for r in rows)
    ]


def _has_values(ys: list) -> bool:
    return any(v is not None and math.isfinite(v) for v in ys)


def _references(key: str, gate_auc: float) -> list[dict]:
    """Horizontal reference lines of a panel: the AUC's chance level and the gate's threshold."""
    if key == "disc_auc":
        return [
            {"y": 0.5, "color": REFERENCE_COLOUR, "style": ":", "label": "chance (0.5)"},
            {"y": gate_auc, "color": GATE_COLOUR, "style": "--", "label": f"gate threshold ({gate_auc})"},
        ]
    return []


def _reference_series(key: str, evals: list[dict], train: list[dict]) -> list[dict]:
    """Curves to compare a panel's values with: the rate of always predicting "original" (disc accuracy), the
    most frequent token and the token-frequency loss at [MASK] slots (the masked LM's plateau)."""
    out = []
    if key == "disc_accuracy":
        for split, rows, prefix in (("training", train, ""), ("held out", evals, "eval_")):
            x, y = _series(rows, f"{prefix}replaced_fraction", 1.0)
            if _has_values(y):
                out.append(
                    {
                        "label": f"always 'original' ({split})",
                        "x": x,
                        "y": [None if v is None else 100.0 * (1.0 - v) for v in y],
                        "color": SPLIT_COLOURS[split],
                        "style": ":",
                    }
                )
    if key == "masked_accuracy":
        x, y = _series(evals, "eval_mlm_majority_rate", 100.0)
        if _has_values(y):
            out.append(
                {
                    "label": "most frequent token (held out)",
                    "x": x,
                    "y": _clean(y),
                    "color": SPLIT_COLOURS["held out"],
                    "style": ":",
                }
            )
    if key == "masked_loss":
        x, y = _series(evals, "eval_mlm_unigram_loss", 1.0)
        if _has_values(y):
            out.append(
                {
                    "label": "token frequencies (held out)",
                    "x": x,
                    "y": _clean(y),
                    "color": SPLIT_COLOURS["held out"],
                    "style": ":",
                }
            )
    return out


def dynamics_data(train: list[dict], evals: list[dict], title: str, kind: str, gate_auc: float) -> dict:
    """One panel per metric the run has: the logged training windows and the held-out evaluations, each split in
    its own colour; titles name the objective's parts (an MLM run has no generator nor discriminator)."""
    panels = []
    for key, electra_title, mlm_title, unit, scale in DYNAMICS:
        name = electra_title if kind == "electra" else mlm_title
        if name is None:
            continue
        lines = []
        for split, rows, prefix in (("training", train, ""), ("held out", evals, "eval_")):
            x, y = _series(rows, f"{prefix}{key}", scale)
            if _has_values(y):
                lines.append(
                    {
                        "label": split,
                        "x": x,
                        "y": _clean(y),
                        "color": SPLIT_COLOURS[split],
                        "marker": "o" if split == "held out" else None,
                    }
                )
        if not lines:
            continue
        lines += _reference_series(key, evals, train)
        panels.append(
            {
                "key": key,
                "title": name,
                "xlabel": "step",
                "ylabel": unit,
                "lines": lines,
                "hlines": _references(key, gate_auc),
            }
        )
    return {"title": title, "columns": 4, "panels": panels}


def training_dynamics(
    train: list[dict], evals: list[dict], title: str, path: Path, kind: str = "electra", gate_auc: float = 0.6
) -> Path:
    return draw(dynamics_data(train, evals, title, kind, gate_auc), path)


# -- collapse per generator size (the study's Figure 2) --------------------------------------------------------

COLLAPSE = (
    ("eval_disc_loss", "discriminator loss (held out)", NATS, 1.0),
    ("eval_disc_accuracy", "discriminator accuracy (held out)", PERCENT, 100.0),
    ("eval_disc_precision", "discriminator precision (held out)", FRACTION, 1.0),
    ("eval_disc_recall", "discriminator recall (held out)", FRACTION, 1.0),
    ("eval_disc_auc", "discriminator AUC (held out)", AUC, 1.0),
    ("eval_mlm_loss", "generator loss (held out)", NATS, 1.0),
    ("eval_disc_effective_rank", "discriminator last-layer effective rank (held out)", RANK, 1.0),
)


def collapse_data(curves: dict[str, list[dict]], collapsed: dict[str, bool], gate_auc: float) -> dict:
    """Held-out discriminator loss, accuracy, precision, recall and AUC, and the generator's loss, one colour per
    setting (generator size); collapsed runs dashed and labelled."""
    panels = []
    for key, title, unit, scale in COLLAPSE:
        lines = []
        for i, (name, evals) in enumerate(curves.items()):
            x, y = _series(evals, key, scale)
            down = bool(collapsed.get(name))
            lines.append(
                {
                    "label": f"{name} (collapsed)" if down else name,
                    "x": x,
                    "y": _clean(y),
                    "color": f"C{i % 10}",
                    "marker": "o",
                    "style": "--" if down else "-",
                    "collapsed": down,
                }
            )
        if not any(v is not None for line in lines for v in line["y"]):
            continue  # runs logged before the metric existed (the effective rank)
        hlines = _references(key.removeprefix("eval_"), gate_auc)
        if key == "eval_disc_accuracy":
            rates = [
                1.0 - r["eval_replaced_fraction"]
                for ev in curves.values()
                for r in ev
                if isinstance(r.get("eval_replaced_fraction"), (int, float))
            ]
            if rates:
                rate = 100.0 * sum(rates) / len(rates)
                hlines.append(
                    {"y": rate, "color": REFERENCE_COLOUR, "style": ":", "label": f"always 'original' ({rate:.1f}%)"}
                )
        panels.append({"key": key, "title": title, "xlabel": "step", "ylabel": unit, "lines": lines, "hlines": hlines})
    return {"title": "collapse per setting", "columns": 3, "panels": panels}


def collapse(curves: dict[str, list[dict]], collapsed: dict[str, bool], path: Path, gate_auc: float = 0.6) -> Path:
    return draw(collapse_data(curves, collapsed, gate_auc), path)


# -- GLUE per task ---------------------------------------------------------------------------------------------


def glue_data(
    scores: dict[str, dict[str, tuple[float, float, float]]],
    metrics: dict[str, str],
    chance: dict[str, float],
    rejected: dict[str, str],
) -> dict:
    """Grouped bars: per task, one bar per model (median over seeds, error bar min..max); each task's chance
    level (the training set's majority class, or 0 for MCC and correlations) as a line over its group; models
    whose pretraining the gate rejects hatched and labelled with the gate's word (`rejected`: name -> word)."""
    tasks = sorted({t for per in scores.values() for t in per}, key=list(metrics).index)
    names = list(scores)
    width = 0.8 / max(1, len(names))
    bars = []
    for i, name in enumerate(names):
        xs, med, lo, hi = [], [], [], []
        for j, task in enumerate(tasks):
            if task in scores[name]:
                m, a, b = scores[name][task]
                xs.append(j + (i - (len(names) - 1) / 2) * width)
                med.append(m)
                lo.append(m - a)
                hi.append(b - m)
        word = rejected.get(name)
        bars.append(
            {
                "label": f"{name} ({word})" if word else name,
                "model": name,
                "x": xs,
                "height": med,
                "low": lo,
                "high": hi,
                "width": width,
                "color": f"C{i % 10}",
                "hatch": "//" if word else None,
                "rejected": bool(word),
            }
        )
    hlines = [
        {
            "task": t,
            "y": chance[t],
            "x0": j - 0.45,
            "x1": j + 0.45,
            "color": "k",
            "style": "--",
            "label": "chance (majority class / 0)" if j == 0 else None,
        }
        for j, t in enumerate(tasks)
        if t in chance
    ]
    panel = {
        "title": "GLUE dev per task",
        "xticks": [f"{t}\n({metrics[t]})" for t in tasks],
        "tasks": tasks,
        "ylabel": "dev score (%; MCC and correlations × 100)",
        "bars": bars,
        "hlines": hlines,
    }
    return {
        "columns": 1,
        "panel_size": (max(PANEL_SIZE[0] * 1.5, 0.6 * len(tasks) * max(1, len(names))), 4.0),
        "panels": [panel],
    }


def glue_scores(scores, metrics, chance, rejected, path: Path) -> Path:
    return draw(glue_data(scores, metrics, chance, rejected), path)


# -- efficiency ------------------------------------------------------------------------------------------------


def _point(p: dict, x_key: str) -> dict:
    ours = p["source"] == "ours"
    return {
        "label": p["name"],
        "x": p[x_key],
        "y": p["score"],
        "err": p.get("err"),
        "source": p["source"],
        "marker": "o" if ours else "s",
        "fill": "C0" if ours else "none",
        "color": "C0" if ours else "C1",
    }


def score_range(points: list[dict], baseline: float | None, minimum: float = MIN_SCORE_RANGE) -> list[float]:
    """The score axis of a panel: every point with its error bar and the baseline, 10% of room around them, and
    at least `minimum` points wide (centred on them), so that differences within the seeds' noise look as small
    as they are."""
    lows = [p["y"] - (p.get("err") or 0.0) for p in points] + ([baseline] if baseline is not None else [])
    highs = [p["y"] + (p.get("err") or 0.0) for p in points] + ([baseline] if baseline is not None else [])
    low, high = min(lows), max(highs)
    pad = 0.1 * (high - low)
    low, high = low - pad, high + pad
    if high - low < minimum:
        centre = (low + high) / 2
        low, high = centre - minimum / 2, centre + minimum / 2
    return [low, high]


def _score_axis(tasks: list[str], glue: bool) -> str:
    return f"{'GLUE dev' if glue else 'dev'} score, mean of {len(tasks)} tasks (%)"


def efficiency_data(
    ours: list[dict],
    quoted: list[dict],
    ours_average: str,
    quoted_average: str,
    baseline: float | None,
    ours_tasks: list[str],
    quoted_tasks: list[str],
    x_key: str = "flops",
) -> dict:
    """Score against training FLOPs (log). Our points share the literature's panel only when both scores average
    the same tasks (`ours_tasks == quoted_tasks`); otherwise ours get their own panel that says what it averages.
    Each panel names the tasks its scores average ("tasks"). The no-pretraining baseline is a line in our panel.
    Our points carry their seeds' spread as error bars (`err`), and our panel's score axis spans at least
    MIN_SCORE_RANGE points (`score_range`)."""
    xlabel = "pretraining FLOPs (log)" if x_key == "flops" else "parameters (log)"
    ours_pts = [_point(p, x_key) for p in ours if p.get(x_key)]
    quoted_pts = [_point(p, x_key) for p in quoted if p.get(x_key)]
    legend = [
        {"label": "ours (measured)", "marker": "o", "fill": "C0", "color": "C0"},
        {"label": "quoted (literature)", "marker": "s", "fill": "none", "color": "C1"},
    ]
    base = (
        []
        if baseline is None
        else [{"y": baseline, "color": REFERENCE_COLOUR, "style": "--", "label": f"no pretraining ({baseline:.1f})"}]
    )
    if ours_tasks == quoted_tasks:
        panel = {
            "title": f"score: {ours_average}",
            "xlabel": xlabel,
            "ylabel": _score_axis(ours_tasks, glue=True),
            "xscale": "log",
            "tasks": ours_tasks,
            "points": ours_pts + quoted_pts,
            "legend_points": legend,
            "hlines": base,
            "ylim": score_range(ours_pts + quoted_pts, baseline) if ours_pts + quoted_pts else None,
        }
        return {"columns": 1, "panel_size": (PANEL_SIZE[0] * 1.6, PANEL_SIZE[1] * 1.5), "panels": [panel]}
    panels = [
        {
            "title": f"quoted: {quoted_average}",
            "xlabel": xlabel,
            "ylabel": _score_axis(quoted_tasks, glue=True),
            "xscale": "log",
            "tasks": quoted_tasks,
            "points": quoted_pts,
            "legend_points": legend[1:],
            "hlines": [],
        },
        {
            "title": f"ours: {ours_average}",
            "xlabel": xlabel,
            "ylabel": _score_axis(ours_tasks, glue=False),
            "xscale": "log",
            "tasks": ours_tasks,
            "points": ours_pts,
            "legend_points": legend[:1],
            "hlines": base,
            "ylim": score_range(ours_pts, baseline) if ours_pts else None,
        },
    ]
    return {"columns": 2, "panel_size": (PANEL_SIZE[0] * 1.3, PANEL_SIZE[1] * 1.5), "panels": panels}


def crossover_data(
    series: dict[str, list[dict]], baselines: list[dict], chance: dict[str, float], metrics: dict[str, str]
) -> dict:
    """Per task, each objective's mean dev score against its pretraining FLOPs, one line per objective in FLOPs
    order, with both spreads as error bars (`err`: ± the std over pretraining seeds, where a model has several;
    `err_inner`: ± the fine-tuning seeds' std within a pretraining seed) and its min..max over every seed in the
    data; each random-initialisation baseline's mean (dashed) and its min..max (dotted), and the task's chance level:
    where a line rises above the baseline's band is where that objective starts to beat random weights. `series`:
    objective -> [{"name", "flops", "scores": task -> {"mean", "low", "high", "pretrain_std", "finetune_std"}}];
    `baselines`: [{"name", "scores"}]."""
    panels = []
    for task, metric in metrics.items():
        lines = []
        for i, (kind, points) in enumerate(series.items()):
            pts = sorted((p for p in points if task in p["scores"]), key=lambda p: p["flops"])
            scores = [p["scores"][task] for p in pts]
            line = {
                "label": kind,
                "x": [p["flops"] for p in pts],
                "y": [s["mean"] for s in scores],
                "low": [s["low"] for s in scores],
                "high": [s["high"] for s in scores],
                "err_inner": [s["finetune_std"] for s in scores],
                "names": [p["name"] for p in pts],
                "color": f"C{i}",
                "marker": "o",
            }
            if any(s["pretrain_std"] is not None for s in scores):
                line["err"] = [s["pretrain_std"] for s in scores]
            lines.append(line)
        hlines = []
        for j, b in enumerate(x for x in baselines if task in x["scores"]):
            s = b["scores"][task]
            colour = REFERENCE_COLOUR if j == 0 else f"C{len(series) + j}"
            hlines += [
                {"y": s["mean"], "color": colour, "style": "--", "label": f"{b['name']} (no pretraining)"},
                {"y": s["low"], "color": colour, "style": ":", "label": None, "band_of": b["name"]},
                {"y": s["high"], "color": colour, "style": ":", "label": None, "band_of": b["name"]},
            ]
        if task in chance:
            hlines.append({"y": chance[task], "color": "k", "style": "-.", "label": "chance (majority class / 0)"})
        panels.append(
            {
                "title": task,
                "task": task,
                "xlabel": "pretraining FLOPs (log)",
                "xscale": "log",
                "ylabel": f"{metric} (dev, %; mean over seeds)",
                "lines": lines,
                "hlines": hlines,
            }
        )
    return {"columns": min(2, len(panels)), "panels": panels}


def electra_minus_mlm_data(points: list[dict]) -> dict:
    """ELECTRA − MLM at equal FLOPs against pretraining FLOPs (log), one line per model size in FLOPs order, each
    difference with its confidence interval as an error bar (none where the test could not run) and zero, no
    difference, as the reference: where a bar clears zero, one objective beats the other at that confidence. Where
    the test ran over pretraining seeds, `err` is its interval and `err_inner` the fine-tuning seeds' alone.
    `points`: [{"size", "name", "flops", "delta", "margin", "finetune_margin", "pretrain_seeds", "p"}] with a
    difference each (electra/report/write.py, from the verdicts)."""
    lines = []
    for i, size in enumerate(dict.fromkeys(p["size"] for p in points)):
        pts = sorted((p for p in points if p["size"] == size), key=lambda p: p["flops"])
        line = {
            "label": size,
            "x": [p["flops"] for p in pts],
            "y": [p["delta"] for p in pts],
            "err": [p["margin"] for p in pts],
            "p": [p["p"] for p in pts],
            "names": [p["name"] for p in pts],
            "color": f"C{i}",
            "marker": "o",
        }
        if any(p.get("pretrain_seeds") for p in pts):
            line["err_inner"] = [p.get("finetune_margin") if p.get("pretrain_seeds") else None for p in pts]
            line["pretrain_seeds"] = [p.get("pretrain_seeds") for p in pts]
        lines.append(line)
    panel = {
        "title": "ELECTRA − MLM at equal FLOPs, per model size",
        "xlabel": "pretraining FLOPs (log)",
        "xscale": "log",
        "ylabel": "ELECTRA − MLM (points; bars: 95% interval)",
        "lines": lines,
        "hlines": [{"y": 0.0, "color": REFERENCE_COLOUR, "style": "--", "label": "no difference"}],
    }
    return {"columns": 1, "panel_size": (PANEL_SIZE[0] * 1.5, PANEL_SIZE[1] * 1.3), "panels": [panel]}


def electra_minus_mlm(points: list[dict], path: Path) -> Path:
    return draw(electra_minus_mlm_data(points), path)


def crossover(series, baselines, chance, metrics, path: Path) -> Path:
    return draw(crossover_data(series, baselines, chance, metrics), path)


def efficiency(
    ours, quoted, ours_average, quoted_average, baseline, ours_tasks, quoted_tasks, path: Path, x_key: str = "flops"
) -> Path:
    return draw(
        efficiency_data(ours, quoted, ours_average, quoted_average, baseline, ours_tasks, quoted_tasks, x_key), path
    )
