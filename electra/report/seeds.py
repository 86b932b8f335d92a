"""Models measured over pretraining seeds: their numbers, and the report's Table 5.

A study run with `--pretrain-seeds N` writes each setting as N runs (NAME-p0 ... NAME-p{N-1}, study.json's "group"
and "pretrain_seed"), each fine-tuned over the same fine-tuning seeds; here they become one model again, whose scores
nest: each pretraining seed's mean over its fine-tuning seeds, the model's mean and spread over its pretraining
seeds, and the spread of the fine-tuning seeds within them. An entry without group information (a lone run or sweep,
a study written before pretraining seeds, or one seed) is a model of one run: its numbers are that run's own, as
reports always gave them.

The share of a task score's variance that comes from the pretraining seed: a one-way random-effects ANOVA on the
(pretraining seed, fine-tuning seed) scores, by the method of moments (Searle, Casella & McCulloch 1992, Variance
Components, ch. 3): with k pretraining seeds of n_i fine-tuning seeds each, N = sum n_i,
MSB = sum n_i (m_i - m)^2 / (k - 1) and MSW = sum (n_i - 1) s_i^2 / (N - k) (m: the mean of all N scores),
sigma_p^2 = (MSB - MSW) / n0 with n0 = (N - sum n_i^2 / N) / (k - 1), sigma_f^2 = MSW, and the share
sigma_p^2 / (sigma_p^2 + sigma_f^2). The moment estimate of sigma_p^2 goes negative when the pretraining seeds' means
vary less than their fine-tuning seeds alone would make them; it is clipped at 0 (no measurable pretraining-seed
variance), and the share is then 0. It needs no more than results.json keeps per run (each run's mean, sample std and
n over its fine-tuning seeds): those hold the same sums of squares as the scores.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from electra.report.results import Entry, Gate, at_chance, task_scores, task_stats


@dataclass
class Model:
    """A model of the report: the runs of its pretraining seeds (one for a model without pretraining seeds)."""

    name: str
    runs: list[Entry]

    @property
    def first(self) -> Entry:
        return self.runs[0]

    @property
    def baseline(self) -> bool:
        return self.first.baseline

    @property
    def study(self) -> str | None:
        return self.first.study

    @property
    def corpus(self) -> str | None:
        return self.first.corpus

    @property
    def shape(self) -> str | None:
        return self.first.shape

    @property
    def kind(self) -> str:
        return self.first.kind

    @property
    def objective(self) -> str | None:
        """objective.kind: its pretraining run's, else as its study recorded it."""
        return self.pretrain.kind if self.pretrain is not None else self.first.objective

    @property
    def pretrain(self):
        """The first run's pretraining run (its seeds share the config but the seed, and the steps)."""
        return self.first.pretrain

    @property
    def results(self) -> list[dict] | None:
        """Each pretraining seed's results.json; None unless every one has been fine-tuned."""
        results = [e.glue for e in self.runs]
        return None if any(r is None for r in results) else results

    @property
    def seeded(self) -> bool:
        """Measured over more than one pretraining seed."""
        return len(self.runs) > 1

    def judge(self) -> Gate:
        """The learning gate over its pretraining seeds: rejected if any seed's pretraining is (a higher score from
        a model one of whose runs did not learn is not surely the objective's doing), learned if every one learned."""
        gates = [e.judge() for e in self.runs]
        if len(gates) == 1:
            return gates[0]
        rejected = [(e.name, g) for e, g in zip(self.runs, gates, strict=True) if g.learned is False]
        if rejected:
            reasons = [f"{name}: {g.describe()}" for name, g in rejected]
            return Gate(False, reasons, collapsed=all(g.collapsed for _, g in rejected))
        if all(g.learned for g in gates):
            return Gate(True, [f"all {len(gates)} pretraining seeds pass the gate"])
        return gates[0] if all(g.learned is None for g in gates) else Gate(None, ["not every seed judged"])


def models(entries: list[Entry]) -> list[Model]:
    """The report's models, in the order their first run comes: a study's runs of one group (its pretraining
    seeds) make one model named after the group, any other entry a model of its own under its own name. Groups of
    one name in several studies are told apart as STUDY/NAME."""
    groups: dict[object, list[Entry]] = {}
    for e in entries:
        key = (e.study, e.group) if e.group is not None else id(e)
        groups.setdefault(key, []).append(e)
    out = [Model(runs[0].name if len(runs) == 1 else runs[0].group, runs) for runs in groups.values()]
    names = Counter(m.name for m in out)
    for m in out:
        if names[m.name] > 1 and m.seeded and m.study is not None:
            m.name = f"{m.study}/{m.name}"
    return out


# -- nested statistics -----------------------------------------------------------------------------------------


@dataclass
class Share:
    """The pretraining seed's variance component beside the fine-tuning seeds' (method of moments, clipped at 0)."""

    between: float
    """sigma_p^2: the pretraining seeds' variance component (0 where the moment estimate was negative)."""
    within: float
    """sigma_f^2: the fine-tuning seeds' variance within a pretraining seed (MSW)."""
    clipped: bool
    """The moment estimate of `between` was negative and is reported as 0."""

    @property
    def share(self) -> float | None:
        total = self.between + self.within
        return self.between / total if total > 0 else None


def variance_share(means: list[float], stds: list[float], ns: list[int]) -> Share | None:
    """One-way random-effects ANOVA (module docstring) from each pretraining seed's mean, sample std and number of
    fine-tuning seeds; None with fewer than two pretraining seeds or no fine-tuning seed's spread to measure."""
    k, total = len(means), sum(ns)
    if k < 2 or total <= k:
        return None
    grand = sum(n * m for n, m in zip(ns, means, strict=True)) / total
    msb = sum(n * (m - grand) ** 2 for n, m in zip(ns, means, strict=True)) / (k - 1)
    msw = sum((n - 1) * s**2 for n, s in zip(ns, stds, strict=True)) / (total - k)
    n0 = (total - sum(n * n for n in ns) / total) / (k - 1)
    between = (msb - msw) / n0
    return Share(max(0.0, between), msw, between < 0)


@dataclass
class Nested:
    """One model's scores on one task: each pretraining seed's summary over its fine-tuning seeds."""

    means: list[float]
    """Each pretraining seed's mean over its fine-tuning seeds."""
    stds: list[float]
    ns: list[int]
    low: float
    """The lowest and highest score of any (pretraining seed, fine-tuning seed)."""
    high: float

    @property
    def mean(self) -> float:
        """The mean over pretraining seeds of their means (each pretraining seed weighs the same)."""
        return float(np.mean(self.means))

    @property
    def pretrain_std(self) -> float | None:
        """Sample std of the pretraining seeds' means; None with one pretraining seed."""
        return float(np.std(self.means, ddof=1)) if len(self.means) > 1 else None

    @property
    def finetune_std(self) -> float | None:
        """The fine-tuning seeds' sample std within a pretraining seed, pooled over the pretraining seeds (with one:
        that run's own std); None where no run has two fine-tuning seeds."""
        dof = sum(n - 1 for n in self.ns)
        if dof < 1:
            return None
        return math.sqrt(sum((n - 1) * s**2 for n, s in zip(self.ns, self.stds, strict=True)) / dof)

    @property
    def share(self) -> Share | None:
        return variance_share(self.means, self.stds, self.ns)

    def finetune_summary(self) -> dict:
        """(mean, std, n) as results.json summarises one run's seeds: the fine-tuning seeds' spread alone, over all
        of them (for one pretraining seed, that run's own summary)."""
        std = self.finetune_std
        return {"mean": self.mean, "std": 0.0 if std is None else std, "n": sum(self.ns)}


def nest(results: list[dict], task: str) -> Nested | None:
    """`task`'s nested scores over the runs `results` (one results.json per pretraining seed); None unless every
    run has the task."""
    stats = [task_stats(r).get(task) for r in results]
    ranges = [task_scores(r).get(task) for r in results]
    if not stats or any(s is None for s in stats):
        return None
    return Nested(
        [float(s["mean"]) for s in stats],
        [float(s["std"]) for s in stats],
        [int(s["n"]) for s in stats],
        min(r[1] for r in ranges),
        max(r[2] for r in ranges),
    )


def at_chance_pooled(results: list[dict], task: str) -> bool:
    """Most of a model's (pretraining seed, fine-tuning seed) runs of `task` at chance level (for one pretraining
    seed: results.json's `at_chance`)."""
    if len(results) == 1:
        return at_chance(results[0], task)
    chance = [r.get("tasks", {}).get(task, {}).get("chance") for r in results]
    if any(c is None for c in chance):
        return False
    return sum(c["seeds_at_chance"] for c in chance) * 2 > sum(c["n"] for c in chance)


def seed_means(results: list[dict], tasks: list[str]) -> list[float] | None:
    """Each pretraining seed's mean over `tasks` of its means over fine-tuning seeds: one observation per
    pretraining seed (what the verdicts' test over pretraining seeds compares); None unless every run has every
    task."""
    nested = [nest(results, t) for t in tasks]
    if not tasks or any(n is None for n in nested):
        return None
    return [float(np.mean(per_seed)) for per_seed in zip(*(n.means for n in nested), strict=True)]


@dataclass
class Spread:
    """A model's mean over tasks with both spreads."""

    mean: float
    pretrain_std: float | None
    """Sample std over pretraining seeds of each seed's task mean; None with one pretraining seed."""
    finetune_std: float | None
    """The std of one fine-tuning seed's task mean within a pretraining seed: sqrt(sum of the tasks' pooled
    fine-tuning variances) / tasks (each (task, seed) is its own run, so the tasks' noise is independent)."""


def task_mean_spread(results: list[dict] | None, tasks: list[str]) -> Spread | None:
    """The mean over `tasks` of each task's nested mean, with both spreads; None unless every run has every task."""
    means = seed_means(results, tasks) if results else None
    if means is None:
        return None
    stds = [nest(results, t).finetune_std for t in tasks]
    finetune = None if any(s is None for s in stds) else math.sqrt(sum(s * s for s in stds)) / len(tasks)
    return Spread(float(np.mean(means)), float(np.std(means, ddof=1)) if len(means) > 1 else None, finetune)


def seeds_summary(model: Model, tasks: list[str]) -> dict:
    """results.json's record of a model over pretraining seeds: its runs and train.seed values, and per task each
    pretraining seed's mean, std and n over fine-tuning seeds, the mean, both spreads and the variance share."""
    out = {"runs": [e.name for e in model.runs], "pretrain_seeds": [e.pretrain_seed for e in model.runs], "tasks": {}}
    for task in tasks:
        n = nest(model.results or [], task)
        if n is None:
            continue
        share = n.share
        out["tasks"][task] = {
            "seed_means": n.means,
            "seed_stds": n.stds,
            "seed_n": n.ns,
            "mean": n.mean,
            "pretrain_std": n.pretrain_std,
            "finetune_std": n.finetune_std,
            "pretrain_variance": None if share is None else share.between,
            "finetune_variance": None if share is None else share.within,
            "pretrain_share": None if share is None else share.share,
            "pretrain_share_clipped": None if share is None else share.clipped,
        }
    return out


# -- Table 5: pretraining seeds ---------------------------------------------------------------------------------


def seeds_table(seeded: list[Model], tasks: list[str]) -> list[str]:
    """Per model pretrained under several seeds and per task: each pretraining seed's mean over its fine-tuning
    seeds, the model's mean ± the std over pretraining seeds, the fine-tuning seeds' std within a pretraining seed
    (pooled), and the share of the variance that comes from the pretraining seed (electra/report/seeds.py)."""
    lines = [
        "### Table 5: pretraining seeds",
        "",
        "Each model pretrained under several seeds (train.seed + 0, 1, ...), each pretraining seed fine-tuned over "
        "the same fine-tuning seeds. Per task: each pretraining seed's mean over its fine-tuning seeds (in seed "
        "order), their mean ± their std, the fine-tuning seeds' std within a pretraining seed (pooled), and the share "
        "of a score's variance that comes from the pretraining seed: a one-way random-effects ANOVA on the "
        "(pretraining seed, fine-tuning seed) scores by the method of moments, the pretraining seed's variance "
        "component over the total; a negative estimate of that component is clipped at 0 (marked). The verdicts "
        "test over the pretraining seeds' means (Welch's t; electra/report/verdicts.py).",
        "",
        "| model | task | each pretraining seed's mean | mean ± std over pretraining seeds | fine-tuning seeds' std "
        "| share of variance from the pretraining seed |",
        "|---|---|---|---|---|---|",
    ]
    for m in seeded:
        for task in tasks:
            n = nest(m.results, task)
            if n is None:
                continue
            share = n.share
            said = "–" if share is None or share.share is None else f"{share.share:.0%}"
            if share is not None and share.clipped:
                said += " (clipped at 0)"
            lines.append(
                f"| {m.name} | {task} | {', '.join(f'{v:.2f}' for v in n.means)} | {n.mean:.2f} ± "
                f"{n.pretrain_std:.2f} | {'–' if n.finetune_std is None else f'{n.finetune_std:.2f}'} | {said} |"
            )
    return lines + [""]
