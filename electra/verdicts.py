"""What the GLUE numbers allow one to say: "pretraining helped", "ELECTRA beats MLM", or that nothing can be
concluded. Read by the demo's closing lines and by the report; works on results.json objects only.

A difference counts only when it exceeds the seeds' spread: the two models' task means (each task's median over
fine-tuning seeds, averaged over the tasks both have) must differ by more than twice the standard error of that
difference, estimated from the per-task sample std over seeds (`SPREAD_FACTOR`). A task where the model that scores
higher there is at chance level for most seeds (results.json "chance", electra/glue/metrics.py) is left out: a
number within noise of a model that ignores its input cannot show that model better. A model above chance on a task
where the other is at chance is a difference, and stays (subject to the seeds' spread like any other). With one
seed there is no spread to compare with, and nothing is concluded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from electra.results import task_scores, task_stats

SPREAD_FACTOR = 2.0
"""A difference must exceed this many standard errors of the difference of the two task means (~95% for normal
seed noise)."""


@dataclass
class Comparison:
    """Model `a` against model `b` on the tasks both were fine-tuned on."""

    a: str
    b: str
    delta: float | None = None
    """Mean over `tasks` of a's median minus b's, in points."""
    margin: float | None = None
    """SPREAD_FACTOR standard errors of `delta`, from the seeds; None with one seed."""
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
        if self.delta is None:
            return ""
        spread = "" if self.margin is None else f", seeds' spread ±{self.margin:.1f}"
        return f"{self.a} {self.delta:+.1f} points vs {self.b} on {', '.join(self.tasks)}{spread}"

    def sentence(self, a_wins: str, b_wins: str) -> str:
        """`a_wins` / `b_wins` when the statistics allow it, else that nothing can be concluded, and why."""
        left_out = f" ({', '.join(self.at_chance)} left out: at chance level)" if self.at_chance and self.tasks else ""
        if not self.concluded:
            numbers = f"{self.numbers()}{left_out}" if self.delta is not None else f"{self.a} vs {self.b}"
            return f"{numbers}: nothing can be concluded ({self.reason})"
        return f"{a_wins if self.delta > 0 else b_wins}: {self.numbers()}{left_out}"


def _at_chance(results: dict, task: str) -> bool:
    chance = results.get("tasks", {}).get(task, {}).get("chance")
    return chance is not None and chance["seeds_at_chance"] * 2 > chance["n"]


def _better_at_chance(results_a: dict, a: float, results_b: dict, b: float, task: str) -> bool:
    """Is the model with the higher median on `task` (`a`, `b`) at chance level there? On a tie, either."""
    if a == b:
        return _at_chance(results_a, task) or _at_chance(results_b, task)
    return _at_chance(results_a if a > b else results_b, task)


def compare(a: str, results_a: dict | None, b: str, results_b: dict | None, tasks: list[str]) -> Comparison:
    """Compare two models' GLUE results on `tasks` (see the module docstring for when a difference counts)."""
    out = Comparison(a, b)
    if results_a is None or results_b is None:
        out.reason = f"{a if results_a is None else b} has no GLUE results"
        return out
    sa, sb = task_stats(results_a), task_stats(results_b)
    ma, mb = task_scores(results_a), task_scores(results_b)
    common = [t for t in tasks if t in sa and t in sb]
    out.at_chance = [t for t in common if _better_at_chance(results_a, ma[t][0], results_b, mb[t][0], t)]
    out.tasks = [t for t in common if t not in out.at_chance]
    if not common:
        out.reason = "no task in common"
        return out
    if not out.tasks:
        out.reason = f"every task ({', '.join(common)}) is at chance level for the model that scores higher there"
        return out
    out.delta = sum(ma[t][0] - mb[t][0] for t in out.tasks) / len(out.tasks)
    seeds = min(min(sa[t]["n"], sb[t]["n"]) for t in out.tasks)
    if seeds < 2:
        out.reason = "one fine-tuning seed: the spread over seeds is unknown"
        return out
    variance = sum(sa[t]["std"] ** 2 / sa[t]["n"] + sb[t]["std"] ** 2 / sb[t]["n"] for t in out.tasks)
    out.margin = SPREAD_FACTOR * math.sqrt(variance) / len(out.tasks)
    if abs(out.delta) <= out.margin:
        out.reason = "the difference is within the seeds' spread"
    return out
