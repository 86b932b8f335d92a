"""What the GLUE numbers allow one to say: "pretraining helped", "ELECTRA beats MLM", or that nothing can be
concluded. Read by the report, `electra study`'s last lines and the demo's (electra/report/questions.py); works on
results.json objects (and the learning gate's verdicts, electra/report/results.py) only.

A difference counts only at a stated confidence (`CONFIDENCE`, 95%): Welch's unequal-variance t-test (Welch 1947)
on the difference of the two models' task means, each task's mean over fine-tuning seeds averaged over the tasks
compared. results.json keeps each task's summary over seeds (mean, sample std, n), not the seeds' scores, so the
test runs on those (scipy.stats.ttest_ind_from_stats for one task; for several, the standard error of the mean of
per-task differences with the Welch-Satterthwaite degrees of freedom, which is the same test for one task). The
difference shown is the one tested: of seed means, not of medians.

A model pretrained under several seeds (a study's `--pretrain-seeds`, electra/report/seeds.py) is tested over its
pretraining seeds instead: each pretraining seed's mean over its fine-tuning seeds (averaged over the tasks
compared) is one observation, and Welch's t compares the two models' observations (`welch_seeds`). Its fine-tuning
seeds are not independent draws of the pretrained model (they all start from one pretraining run), so pooling them
as if they were would take one lucky pretraining run for a property of the objective. A linear mixed model
(pretraining seed as a random effect) would use the same information; with 3 pretraining seeds a side its variance
component is barely estimable and its test is no sharper, while Welch's over the seed means is exact for balanced
designs (each pretraining seed fine-tuned over the same seeds) and needs no model fitting. With one pretraining seed a
side the test is the one over fine-tuning seeds above, as reports always gave it.

Nothing is concluded with fewer than `MIN_SEEDS` seeds a side (fine-tuning seeds, or pretraining seeds where the
test runs over those: with two, the t distribution at df ~2 makes any interval too wide to mean anything, and the
sample std of two scores is itself a guess). A task where the model that scores higher there is at chance level for
most seeds (results.json "chance", electra/glue/metrics.py) is left out: a number within noise of a model that
ignores its input cannot show that model better. A model above chance on a task where the other is at chance is a
difference, and stays. And a model whose pretraining the gate rejects (never learned, or collapsed) is never said to
help or to beat another: a higher score from a pretraining that did not learn is not that pretraining's doing.

Verdicts are given per task (`answer`): the question asked is "did it help on SST-2?". A pooled verdict over several
tasks is added only over the tasks that moved (those not left out at chance), and withheld where the tasks point
opposite ways: a pooled mean can follow one task's large difference against another's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from electra.report.results import Gate
from electra.report.seeds import at_chance_pooled, nest, seed_means
from electra.utils.wording import plural

CONFIDENCE = 0.95
"""The level every verdict is stated at: a difference counts when Welch's two-sided p-value is below 1 - this."""
MIN_SEEDS = 3
"""Seeds a side, at least, before anything is concluded: fine-tuning seeds, or pretraining seeds where the test runs
over those."""


@dataclass
class Comparison:
    """Model `a` against model `b` on the tasks both were fine-tuned on."""

    a: str
    b: str
    delta: float | None = None
    """Mean over `tasks` of a's mean over seeds minus b's, in points: the difference Welch's test tests."""
    margin: float | None = None
    """Half-width of `delta`'s confidence interval at CONFIDENCE (Welch's t quantile x standard error); None
    without a test."""
    t: float | None = None
    df: float | None = None
    """Welch-Satterthwaite degrees of freedom of `t`."""
    p: float | None = None
    """Two-sided p-value of Welch's t-test of `delta` against zero."""
    seeds: int | None = None
    """The fewest fine-tuning seeds any side has on the tasks compared (per pretraining seed)."""
    pretrain_seeds: int | None = None
    """The fewest pretraining seeds a side, where the test runs over pretraining seeds; None where it runs over
    fine-tuning seeds (one pretraining seed a side)."""
    finetune_margin: float | None = None
    """Half-width of the interval the fine-tuning seeds' spread alone would give (within each pretraining seed,
    pooled), for figures that show both spreads; with one pretraining seed a side, `margin`."""
    tasks: list[str] = field(default_factory=list)
    """The tasks compared: both models above chance level."""
    at_chance: list[str] = field(default_factory=list)
    """Left out: at chance level for the model that scores higher there (on a tie, for either)."""
    reason: str = ""
    """Why nothing can be concluded (empty when something can)."""

    @property
    def concluded(self) -> bool:
        return not self.reason

    @property
    def a_better(self) -> bool:
        return self.concluded and self.delta is not None and self.delta > 0

    @property
    def b_better(self) -> bool:
        return self.concluded and self.delta is not None and self.delta < 0

    def numbers(self) -> str:
        """The difference and its test, e.g. "a +3.4 points vs b on sst2 (mean over 3 seeds; 95% interval ±1.1,
        Welch's t 8.90, df 3.9, p < 0.001; rte left out: at chance level)"."""
        if self.delta is None:
            return f"{self.a} vs {self.b}"
        if self.pretrain_seeds is None:
            said, over = [f"mean over {plural(self.seeds, 'seed')}"], ""
        else:
            seeds = f"{plural(self.pretrain_seeds, 'pretraining seed')} × {plural(self.seeds, 'fine-tuning seed')}"
            said, over = [f"mean over {seeds}"], " over pretraining-seed means"
        if self.p is not None:
            said.append(
                f"{CONFIDENCE:.0%} interval ±{self.margin:.1f}, Welch's t{over} {self.t:.2f}, df {self.df:.1f}, "
                f"{format_p(self.p)}"
            )
        if self.at_chance:
            said.append(f"{', '.join(self.at_chance)} left out: at chance level")
        return f"{self.a} {self.delta:+.1f} points vs {self.b} on {', '.join(self.tasks)} ({'; '.join(said)})"

    def sentence(self, a_wins: str, b_wins: str) -> str:
        """`a_wins` / `b_wins` at CONFIDENCE when the statistics allow it, else that nothing can be concluded, and
        why."""
        if not self.concluded:
            return f"{self.numbers()}: nothing can be concluded at {CONFIDENCE:.0%} confidence ({self.reason})"
        return f"{a_wins if self.delta > 0 else b_wins} ({CONFIDENCE:.0%} confidence): {self.numbers()}"


def format_p(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def welch(tasks: list[tuple[dict, dict]]) -> tuple[float, float, float, float]:
    """Welch's t-test of the mean over tasks of (a's mean - b's mean), from each task's summary over seeds
    (mean, sample std, n of a and of b): returns (difference, standard error, t, df). The variance of the mean of
    the 2 x tasks independent seed means is their summed variance / tasks^2; its degrees of freedom are the
    Welch-Satterthwaite approximation over those terms (for one task, scipy's ttest_ind_from_stats)."""
    delta = sum(sa["mean"] - sb["mean"] for sa, sb in tasks) / len(tasks)
    terms = [(s["std"] ** 2 / s["n"], s["n"] - 1) for pair in tasks for s in pair]
    variance = sum(v for v, _ in terms)
    se = math.sqrt(variance) / len(tasks)
    if se == 0:
        return delta, 0.0, math.nan, math.nan
    return delta, se, delta / se, variance**2 / sum(v**2 / dof for v, dof in terms if v > 0)


def _better_at_chance(runs_a: list[dict], a: float, runs_b: list[dict], b: float, task: str) -> bool:
    """Is the model with the higher mean on `task` (`a`, `b`) at chance level there? On a tie, either."""
    if a == b:
        return at_chance_pooled(runs_a, task) or at_chance_pooled(runs_b, task)
    return at_chance_pooled(runs_a if a > b else runs_b, task)


def _rejected(name: str, gate: Gate | None) -> str | None:
    """Why a higher score from `name` says nothing about its pretraining (the gate rejects it), else None."""
    if gate is None or gate.learned is not False:
        return None
    return f"{name}'s pretraining {gate.word} (the learning gate): its higher score is not that pretraining's doing"


def compare(
    a: str,
    results_a: dict | None,
    b: str,
    results_b: dict | None,
    tasks: list[str],
    gate_a: Gate | None = None,
    gate_b: Gate | None = None,
) -> Comparison:
    """Compare two models' GLUE results on `tasks` over fine-tuning seeds (see the module docstring for when a
    difference counts); `gate_a`, `gate_b`: the learning gate's verdict on each model's pretraining (None: not
    judged)."""
    return compare_models(a, [results_a], b, [results_b], tasks, gate_a, gate_b)


def compare_models(
    a: str,
    runs_a: list[dict | None],
    b: str,
    runs_b: list[dict | None],
    tasks: list[str],
    gate_a: Gate | None = None,
    gate_b: Gate | None = None,
) -> Comparison:
    """Compare two models, each given as its pretraining seeds' results.json (one each: `compare`'s test over
    fine-tuning seeds; more on either side: Welch's t over pretraining-seed means), on `tasks`."""
    out = Comparison(a, b)
    missing = [name for name, runs in ((a, runs_a), (b, runs_b)) if not runs or any(r is None for r in runs)]
    if missing:
        out.reason = f"{missing[0]} has no GLUE results"
        return out
    na, nb = {t: nest(runs_a, t) for t in tasks}, {t: nest(runs_b, t) for t in tasks}
    common = [t for t in tasks if na[t] is not None and nb[t] is not None]
    out.at_chance = [t for t in common if _better_at_chance(runs_a, na[t].mean, runs_b, nb[t].mean, t)]
    out.tasks = [t for t in common if t not in out.at_chance]
    if not common:
        out.reason = "no task in common"
        return out
    if not out.tasks:
        out.reason = f"every task ({', '.join(common)}) is at chance level for the model that scores higher there"
        return out
    within = [(na[t].finetune_summary(), nb[t].finetune_summary()) for t in out.tasks]
    out.seeds = min(min(n) for t in out.tasks for n in (na[t].ns, nb[t].ns))
    out.delta = sum(x["mean"] - y["mean"] for x, y in within) / len(within)
    if len(runs_a) == 1 and len(runs_b) == 1:
        reasons = _test(out, within, out.seeds, "fine-tuning seed", "seeds'")
        out.finetune_margin = out.margin
    else:
        seeds_a, seeds_b = seed_means(runs_a, out.tasks), seed_means(runs_b, out.tasks)
        out.pretrain_seeds = min(len(seeds_a), len(seeds_b))
        pair = [(_summary(seeds_a), _summary(seeds_b))]
        reasons = _test(out, pair, out.pretrain_seeds, "pretraining seed", "pretraining seeds'")
        if out.seeds >= 2:
            _, se, _, df = welch(within)
            out.finetune_margin = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df) * se) if se > 0 else None
    higher = (a, gate_a) if out.delta > 0 else (b, gate_b) if out.delta < 0 else None
    rejected = _rejected(*higher) if higher else None
    if rejected:
        reasons.append(rejected)
    out.reason = "; ".join(reasons)
    return out


def _summary(values: list[float]) -> dict:
    """(mean, sample std, n) of observations, as results.json summarises seeds."""
    return {
        "mean": float(np.mean(values)),
        "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
        "n": len(values),
    }


def welch_seeds(a: list[float], b: list[float]) -> tuple[float, float, float, float]:
    """Welch's t-test of two models' pretraining-seed means (each pretraining seed's mean over its fine-tuning
    seeds, one observation each): (difference, standard error, t, df), as scipy.stats.ttest_ind(a, b,
    equal_var=False)."""
    return welch([(_summary(a), _summary(b))])


def _test(out: Comparison, pairs: list[tuple[dict, dict]], seeds: int, unit: str, whose: str) -> list[str]:
    """Welch's test of `out.delta` from the summaries `pairs` (per task, or one pair of pretraining-seed means),
    needing MIN_SEEDS `unit`s a side: sets t, df, p and the margin on `out`; returns why nothing can be concluded
    (`whose`: the seeds that spread, as the reasons name them)."""
    if seeds < MIN_SEEDS:
        return [f"{plural(seeds, unit)} a side: the test needs at least {MIN_SEEDS}"]
    out.delta, se, out.t, out.df = welch(pairs)
    if se == 0:
        return [f"the {whose} scores do not vary: no spread to test the difference against"]
    out.p = float(2 * stats.t.sf(abs(out.t), out.df))
    out.margin = float(stats.t.ppf(0.5 + CONFIDENCE / 2, out.df) * se)
    return [] if out.p < 1 - CONFIDENCE else [f"p ≥ {1 - CONFIDENCE:.2f}: within the {whose} spread"]


# -- per task, and pooled over the tasks that moved ------------------------------------------------------------


@dataclass
class Answer:
    """Model a against model b task by task (the verdicts), and pooled over the tasks that moved where those
    agree."""

    per_task: list[Comparison]
    """One comparison per task both were fine-tuned on (one over all tasks where there is none: it says why)."""
    pooled: Comparison | None = None
    """Over the tasks that moved, when two or more did and they do not point opposite ways."""
    withheld: str = ""
    """Why no pooled verdict is given although two or more tasks moved."""

    @property
    def moved(self) -> list[str]:
        """The tasks compared: not left out at chance level."""
        return [t for c in self.per_task for t in c.tasks]

    @property
    def left_out(self) -> list[str]:
        return [t for c in self.per_task for t in c.at_chance]

    @property
    def verdicts(self) -> list[Comparison]:
        """The comparisons that decide: the per-task ones, and the pooled one where given."""
        return [*self.per_task, *([self.pooled] if self.pooled else [])]


def answer(
    a: str,
    runs_a: list[dict | None],
    b: str,
    runs_b: list[dict | None],
    tasks: list[str],
    gate_a: Gate | None = None,
    gate_b: Gate | None = None,
) -> Answer:
    """`compare_models` on each task alone, then over the tasks that moved (at least two), unless the verdicts
    they give, the pooled one included, point opposite ways: then the pooled one is withheld, and why is said."""
    per_task = [compare_models(a, runs_a, b, runs_b, [t], gate_a, gate_b) for t in tasks]
    per_task = [c for c in per_task if c.tasks or c.at_chance]
    if not per_task:  # no task in common, or a side without results: one comparison that says so
        return Answer([compare_models(a, runs_a, b, runs_b, tasks, gate_a, gate_b)])
    out = Answer(per_task)
    if len(out.moved) < 2:
        return out
    pooled = compare_models(a, runs_a, b, runs_b, out.moved, gate_a, gate_b)
    concluded = [c for c in [*per_task, pooled] if c.concluded and c.delta]
    if len({c.delta > 0 for c in concluded}) > 1:
        ahead = [f"{', '.join(c.tasks)}: {c.a if c.delta > 0 else c.b} ahead" for c in concluded if c is not pooled]
        out.withheld = (
            f"the tasks point opposite ways ({'; '.join(ahead)}), and a mean over them ({pooled.delta:+.1f}) "
            "would say what the larger difference says"
        )
        return out
    out.pooled = pooled
    return out
