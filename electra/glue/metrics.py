"""GLUE metrics on a 0-100 scale, and the chance-level check that makes "fine-tuning is at chance" visible.

Implemented in numpy (tests check them against scikit-learn and scipy). F1 is of the positive class (label id 1),
as GLUE scores MRPC and QQP.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def accuracy(pred: np.ndarray, gold: np.ndarray) -> float:
    return 100.0 * float(np.mean(pred == gold))


def f1(pred: np.ndarray, gold: np.ndarray) -> float:
    tp = float(np.sum((pred == 1) & (gold == 1)))
    fp = float(np.sum((pred == 1) & (gold != 1)))
    fn = float(np.sum((pred != 1) & (gold == 1)))
    return 0.0 if tp == 0 else 100.0 * 2 * tp / (2 * tp + fp + fn)


def mcc(pred: np.ndarray, gold: np.ndarray) -> float:
    """Matthews correlation, multi-class form (Gorodkin 2004); 0 when a marginal is constant (as sklearn)."""
    classes = np.union1d(pred, gold)
    C = np.array([[np.sum((gold == a) & (pred == b)) for b in classes] for a in classes], dtype=np.float64)
    t, p = C.sum(1), C.sum(0)  # true and predicted counts per class
    n, c = C.sum(), np.trace(C)
    denom = np.sqrt(n**2 - p @ p) * np.sqrt(n**2 - t @ t)
    return 0.0 if denom == 0 else 100.0 * float((c * n - p @ t) / denom)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    dx, dy = x - x.mean(), y - y.mean()
    denom = np.sqrt((dx @ dx) * (dy @ dy))
    return 0.0 if denom == 0 else 100.0 * float(dx @ dy / denom)


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, tied values sharing their mean rank (scipy.stats.rankdata's default)."""
    x = np.asarray(x)
    ranks = np.empty(len(x))
    ranks[np.argsort(x, kind="stable")] = np.arange(1, len(x) + 1)
    _, group, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.bincount(group, weights=ranks) / counts)[group]


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    return pearson(average_ranks(x), average_ranks(y))


METRIC_FUNCTIONS = {"mcc": mcc, "accuracy": accuracy, "f1": f1, "pearson": pearson, "spearman": spearman}
CORRELATIONS = ("pearson", "spearman")


def compute(metrics: tuple[str, ...], pred: np.ndarray, gold: np.ndarray, suffix: str = "") -> dict[str, float]:
    return {name + suffix: METRIC_FUNCTIONS[name](pred, gold) for name in metrics}


# -- chance level -------------------------------------------------------------------------------------------------


@dataclass
class ChanceCheck:
    at_chance: bool
    metric: str
    value: float
    baseline: float
    """What a model that learned nothing gets: the train majority class's accuracy on dev, or 0 correlation."""
    margin: float
    """Two standard errors of the baseline over n dev examples: the noise band above it."""
    constant: bool
    """Every dev prediction is the same class."""

    def describe(self) -> str:
        if not self.at_chance:
            return ""
        why = "predicts one class for every example; " if self.constant else ""
        return f"AT CHANCE: {why}{self.metric} {self.value:.1f} <= {self.baseline:.1f} + noise {self.margin:.1f}"


def chance_check(
    pred: np.ndarray, gold: np.ndarray, train_labels: np.ndarray, regression: bool, main_metric: str
) -> ChanceCheck:
    """Is a dev result within noise of what a model that ignores its input would get?

    Classification: accuracy vs. predicting the training set's majority class (margin 2 * sqrt(p(1-p)/n)), and
    for MCC-scored tasks MCC within 2/sqrt(n) of 0. Regression: the task's main correlation (STS-B: Spearman, the
    number the paper reports; Pearson where the main metric is no correlation) within 2/sqrt(n) of 0, so that the
    check is about the number a summary shows.
    """
    n = len(gold)
    if regression:
        metric = main_metric if main_metric in CORRELATIONS else "pearson"
        r = METRIC_FUNCTIONS[metric](pred, gold)
        margin = 100.0 * 2 / np.sqrt(n)  # the standard error of either correlation at 0 is about 1/sqrt(n)
        return ChanceCheck(bool(abs(r) <= margin), metric, r, 0.0, float(margin), bool(np.all(pred == pred[0])))
    constant = bool(np.all(pred == pred[0]))
    if main_metric.startswith("mcc"):
        value, margin = mcc(pred, gold), 100.0 * 2 / np.sqrt(n)
        return ChanceCheck(bool(constant or abs(value) <= margin), "mcc", value, 0.0, float(margin), constant)
    majority = np.bincount(train_labels[train_labels >= 0]).argmax()
    p = float(np.mean(gold == majority))
    value = accuracy(pred, gold)
    margin = float(100.0 * 2 * np.sqrt(max(p * (1 - p), 1e-12) / n))
    return ChanceCheck(bool(constant or value <= 100.0 * p + margin), "accuracy", value, 100.0 * p, margin, constant)
