"""The report's figures, drawn with matplotlib from what runs wrote to disk (see electra/report.py for what is
read). Each function takes plain data and a path, writes one PNG and returns the path; nothing here trains or
loads a model, so any old run can be drawn again.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display needed (CI, servers)
import matplotlib.pyplot as plt  # noqa: E402

DPI = 110
PANEL_SIZE = (4.2, 3.0)  # inches: readable without zooming at DPI

# (metrics.jsonl key without the eval_ prefix, panel title), in the study's order (RC, training dynamics)
DYNAMICS = (
    ("mlm_loss", "generator loss"),
    ("mlm_accuracy", "MLM accuracy (all chosen slots)"),
    ("masked_accuracy", "MLM accuracy at [MASK] slots"),
    ("sampled_accuracy", "sampled-token accuracy"),
    ("disc_loss", "discriminator loss"),
    ("disc_accuracy", "discriminator accuracy"),
    ("disc_precision", "discriminator precision"),
    ("disc_recall", "discriminator recall"),
    ("disc_auc", "discriminator AUC (held out)"),
)


def _finite(values: list) -> bool:
    return any(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def training_dynamics(train: list[dict], evals: list[dict], title: str, path: Path) -> Path:
    """One panel per metric: the logged training windows (line) and the held-out evaluations (dots)."""
    panels = [(k, t) for k, t in DYNAMICS if _finite([r.get(k) for r in train] + [r.get(f"eval_{k}") for r in evals])]
    cols = 4
    rows = max(1, math.ceil(len(panels) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(PANEL_SIZE[0] * cols, PANEL_SIZE[1] * rows), squeeze=False)
    for ax, (key, name) in zip(axes.flat, panels, strict=False):
        pts = [(r["step"], r[key]) for r in train if isinstance(r.get(key), (int, float))]
        if pts:
            ax.plot(*zip(*pts, strict=True), label="training", linewidth=1.2)
        pts = [(r["step"], r[f"eval_{key}"]) for r in evals if isinstance(r.get(f"eval_{key}"), (int, float))]
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", markersize=3, label="held out")
        if key == "masked_accuracy":
            pts = [(r["step"], r["eval_mlm_majority_rate"]) for r in evals if r.get("eval_mlm_majority_rate")]
            if pts:
                ax.plot(*zip(*pts, strict=True), "k:", label="most frequent token")
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(title)
    return _save(fig, path)


def collapse(curves: dict[str, list[dict]], collapsed: dict[str, bool], path: Path) -> Path:
    """Held-out discriminator AUC and recall over steps, one line per setting; collapsed runs drawn dashed and
    marked in the legend."""
    fig, axes = plt.subplots(1, 2, figsize=(PANEL_SIZE[0] * 2.4, PANEL_SIZE[1] * 1.3))
    for name, evals in curves.items():
        style = "--" if collapsed.get(name) else "-"
        label = f"{name} (collapsed)" if collapsed.get(name) else name
        for ax, key in zip(axes, ("eval_disc_auc", "eval_disc_recall"), strict=True):
            pts = [(r["step"], r[key]) for r in evals if isinstance(r.get(key), (int, float))]
            if pts:
                ax.plot(*zip(*pts, strict=True), style, marker="o", markersize=3, label=label)
    axes[0].axhline(0.5, color="k", linewidth=0.8, linestyle=":")
    for ax, title in zip(axes, ("discriminator AUC (held out)", "recall on replaced tokens (held out)"), strict=True):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, path)


def glue_scores(scores: dict[str, dict[str, tuple[float, float, float]]], path: Path) -> Path:
    """Grouped bars: per task (x), one bar per setting, height = median over seeds, error bar = min..max."""
    tasks = sorted({t for per in scores.values() for t in per})
    names = list(scores)
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(max(PANEL_SIZE[0] * 1.5, 1.2 * len(tasks) * max(1, len(names)) * 0.5), 4.0))
    for i, name in enumerate(names):
        xs, med, lo, hi = [], [], [], []
        for j, task in enumerate(tasks):
            if task in scores[name]:
                m, a, b = scores[name][task]
                xs.append(j + (i - (len(names) - 1) / 2) * width)
                med.append(m)
                lo.append(m - a)
                hi.append(b - m)
        ax.bar(xs, med, width, yerr=[lo, hi], capsize=3, label=name)
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_ylabel("dev score (median over seeds; bars: min-max)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=min(3, len(names)))
    return _save(fig, path)


def efficiency(points: list[dict], x_key: str, x_label: str, path: Path) -> Path:
    """Score against log compute (or parameters): our runs filled, quoted literature rows hollow and labelled."""
    fig, ax = plt.subplots(figsize=(PANEL_SIZE[0] * 1.6, PANEL_SIZE[1] * 1.5))
    for p in points:
        if not p.get(x_key):
            continue
        ours = p["source"] == "ours"
        ax.scatter(p[x_key], p["score"], marker="o" if ours else "s", s=36,
                   facecolors="C0" if ours else "none", edgecolors="C0" if ours else "C1")  # fmt: skip
        ax.annotate(p["name"], (p[x_key], p["score"]), fontsize=7, xytext=(4, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel(x_label)
    ax.set_ylabel("score (see the table: what each averages)")
    ax.scatter([], [], marker="o", color="C0", label="ours (measured)")
    ax.scatter([], [], marker="s", facecolors="none", edgecolors="C1", label="quoted (literature)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    return _save(fig, path)
