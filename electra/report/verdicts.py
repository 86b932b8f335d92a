"""What the GLUE numbers allow one to say: "pretraining helped", "ELECTRA beats MLM", or that nothing can be
concluded. Read by the demo's closing lines and by the report; works on results.json objects (and the learning
gate's verdicts, electra/report/results.py) only.

A difference counts only at a stated confidence (`CONFIDENCE`, 95%): Welch's unequal-variance t-test (Welch 1947)
on the difference of the two models' task means, each task's mean over fine-tuning seeds averaged over the tasks
compared. results.json keeps each task's summary over seeds (mean, sample std, n), not the seeds' scores, so the
test runs on those (scipy.stats.ttest_ind_from_stats for one task; for several, the standard error of the mean of
per-task differences with the Welch-Satterthwaite degrees of freedom, which is the same test for one task). The
difference shown is the one tested: of seed means, not of the medians the tables show.

Nothing is concluded with fewer than `MIN_SEEDS` seeds a side (with two, the t distribution at df ~2 makes any
interval too wide to mean anything, and the sample std of two scores is itself a guess). A task where the model
that scores higher there is at chance level for most seeds (results.json "chance", electra/glue/metrics.py) is
left out: a number within noise of a model that ignores its input cannot show that model better. A model above
chance on a task where the other is at chance is a difference, and stays. And a model whose pretraining the gate
rejects (never learned, or collapsed) is never said to help or to beat another: a higher score from a pretraining
that did not learn is not that pretraining's doing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scipy import stats

from electra.report.results import Gate, at_chance, task_stats
from electra.utils.wording import plural

CONFIDENCE = 0.95
"""The level every verdict is stated at: a difference counts when Welch's two-sided p-value is below 1 - this."""
MIN_SEEDS = 3
"""Fine-tuning seeds a side, at least, before anything is concluded."""


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
    """The fewest fine-tuning seeds any side has on the tasks compared."""
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
        said = [f"mean over {plural(self.seeds, 'seed')}"]
        if self.p is not None:
            said.append(
                f"{CONFIDENCE:.0%} interval ±{self.margin:.1f}, Welch's t {self.t:.2f}, df {self.df:.1f}, "
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


def _better_at_chance(results_a: dict, a: float, results_b: dict, b: float, task: str) -> bool:
    """Is the model with the higher mean on `task` (`a`, `b`) at chance level there? On a tie, either."""
    if a == b:
        return at_chance(results_a, task) or at_chance(results_b, task)
    return at_chance(results_a if a > b else results_b, task)


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
    """Compare two models' GLUE results on `tasks` (see the module docstring for when a difference counts);
    `gate_a`, `gate_b`: the learning gate's verdict on each model's pretraining (None: not judged)."""
    out = Comparison(a, b)
    if results_a is None or results_b is None:
        out.reason = f"{a if results_a is None else b} has no GLUE results"
        return out
    sa, sb = task_stats(results_a), task_stats(results_b)
    common = [t for t in tasks if t in sa and t in sb]
    out.at_chance = [t for t in common if _better_at_chance(results_a, sa[t]["mean"], results_b, sb[t]["mean"], t)]
    out.tasks = [t for t in common if t not in out.at_chance]
    if not common:
        out.reason = "no task in common"
        return out
    if not out.tasks:
        out.reason = f"every task ({', '.join(common)}) is at chance level for the model that scores higher there"
        return out
    pairs = [(sa[t], sb[t]) for t in out.tasks]
    out.seeds = min(min(x["n"], y["n"]) for x, y in pairs)
    out.delta = sum(x["mean"] - y["mean"] for x, y in pairs) / len(pairs)
    reasons = []
    if out.seeds < MIN_SEEDS:
        reasons.append(f"{plural(out.seeds, 'fine-tuning seed')} a side: the test needs at least {MIN_SEEDS}")
    else:
        out.delta, se, out.t, out.df = welch(pairs)
        if se == 0:
            reasons.append("the seeds' scores do not vary: no spread to test the difference against")
        else:
            out.p = float(2 * stats.t.sf(abs(out.t), out.df))
            out.margin = float(stats.t.ppf(0.5 + CONFIDENCE / 2, out.df) * se)
            if not out.p < 1 - CONFIDENCE:
                reasons.append(f"p ≥ {1 - CONFIDENCE:.2f}: within the seeds' spread")
    higher = (a, gate_a) if out.delta > 0 else (b, gate_b) if out.delta < 0 else None
    rejected = _rejected(*higher) if higher else None
    if rejected:
        reasons.append(rejected)
    out.reason = "; ".join(reasons)
    return out
