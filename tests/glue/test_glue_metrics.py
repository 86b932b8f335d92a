"""Metrics against scikit-learn / scipy, the aggregate scores against the published rows, the report's statistics,
and the chance-level check."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from electra.glue.metrics import accuracy, chance_check, f1, mcc, pearson, spearman
from electra.glue.report import aggregate, summarize


def test_metrics_match_sklearn_and_scipy():
    rng = np.random.default_rng(0)
    for trial in range(20):
        k = 3 if trial % 4 == 0 else 2
        gold = rng.integers(0, k, 200)
        pred = np.where(rng.random(200) < 0.3 + 0.03 * trial, gold, rng.integers(0, k, 200))
        assert mcc(pred, gold) == pytest.approx(100 * matthews_corrcoef(gold, pred), abs=1e-9)
        assert accuracy(pred, gold) == pytest.approx(100 * accuracy_score(gold, pred), abs=1e-9)
        if k == 2:
            assert f1(pred, gold) == pytest.approx(100 * f1_score(gold, pred), abs=1e-9)
        x = rng.normal(size=100)
        y = x * trial / 10 + rng.normal(size=100)
        y[:10] = np.round(y[:10])  # some ties for the rank correlation
        x[5:15] = 1.0
        assert pearson(x, y) == pytest.approx(100 * pearsonr(x, y)[0], abs=1e-9)
        assert spearman(x, y) == pytest.approx(100 * spearmanr(x, y)[0], abs=1e-9)
    ones, zeros = np.ones(10, dtype=int), np.zeros(10, dtype=int)
    mixed = np.array([0, 1] * 5)
    assert mcc(ones, mixed) == 100 * matthews_corrcoef(mixed, ones) == 0.0  # constant predictions
    assert f1(zeros, mixed) == 100 * f1_score(mixed, zeros, zero_division=0) == 0.0


PUBLISHED_ROWS = {  # CoLA SST-2 MRPC STS-B QQP MNLI QNLI RTE -> the stated 8-task mean (sources in the keys)
    "OFF ELECTRA-Small-OWT": ([56.8, 88.3, 87.4, 86.8, 88.3, 78.9, 87.9, 68.5], 80.36),
    "OFF ELECTRA-Small++": ([57.0, 91.2, 88.0, 87.5, 89.0, 81.3, 88.4, 66.7], 81.1),
    "richarddwang": ([58.72, 88.03, 86.04, 86.16, 88.63, 80.4, 87.45, 67.46], 80.36),
    "1:1 generator": ([51.04, 85.21, 83.58, 84.79, 87.16, 75.01, 84.79, 66.06], 77.2),
}
PAPER_METRICS = [
    ("cola", "mcc"),
    ("sst2", "accuracy"),
    ("mrpc", "accuracy"),
    ("stsb", "spearman"),
    ("qqp", "accuracy"),
    ("mnli", "accuracy_m"),
    ("qnli", "accuracy"),
    ("rte", "accuracy"),
]


@pytest.mark.parametrize("source", list(PUBLISHED_ROWS))
def test_paper_score_reproduces_spec_rows(source):
    numbers, stated = PUBLISHED_ROWS[source]
    values = {task: {metric: v} for (task, metric), v in zip(PAPER_METRICS, numbers, strict=True)}
    agg = aggregate(values, "paper")
    decimals = len(str(stated).split(".")[1])
    assert agg.missing == [] and abs(agg.score - stated) <= 0.5 * 10**-decimals  # equal at the stated precision
    glue = aggregate(values, "glue")  # needs F1, Pearson, MNLI-mm and WNLI: not silently averaged without them
    assert glue.score is None and glue.missing == ["mrpc", "stsb", "qqp", "mnli", "wnli"]


def test_study_score_of_the_rc_row():
    """RC's row reports MNLI with matched + mismatched merged and no WNLI: its mean is 78.79 (the README's 79.2 is
    not the mean of its own row); the study score stays undefined until WNLI is there."""
    numbers = [53.5, 88.7, 87.6, 85.2, 86.1, 80.2, 87.5, 61.5]
    metrics = [m if t != "mnli" else "accuracy_merged" for t, m in PAPER_METRICS]
    values = {t: {m: v} for (t, _), m, v in zip(PAPER_METRICS, metrics, numbers, strict=True)}
    study = aggregate(values, "study")
    assert study.score is None and study.missing == ["wnli"]
    assert round(float(np.mean(list(study.parts.values()))), 2) == 78.79
    assert aggregate(values, "paper").missing == ["mnli"]  # merged MNLI is not MNLI-m: not comparable
    values["wnli"] = {"accuracy": 56.3}
    assert aggregate(values, "study").score == pytest.approx((sum(numbers) + 56.3) / 9)


def test_glue_score_averages_two_metric_tasks_first_and_includes_wnli():
    values = {
        "cola": {"mcc": 50.0},
        "sst2": {"accuracy": 90.0},
        "mrpc": {"f1": 90.0, "accuracy": 86.0},
        "stsb": {"pearson": 88.0, "spearman": 87.0},
        "qqp": {"f1": 70.0, "accuracy": 88.0},
        "mnli": {"accuracy_m": 80.0, "accuracy_mm": 81.0},
        "qnli": {"accuracy": 88.0},
        "rte": {"accuracy": 66.0},
        "wnli": {"accuracy": 56.0},
    }
    expected = (50 + 90 + (90 + 86) / 2 + (88 + 87) / 2 + (70 + 88) / 2 + (80 + 81) / 2 + 88 + 66 + 56) / 9
    agg = aggregate(values, "glue")
    assert agg.score == pytest.approx(expected) and agg.parts["mnli"] == 80.5
    assert aggregate(values, "paper").score == pytest.approx((50 + 90 + 86 + 87 + 88 + 80 + 88 + 66) / 8)
    del values["wnli"]
    assert aggregate(values, "glue").score is None and aggregate(values, "paper").score is not None


def _record(task, seed, metrics, extra=None, at_chance=False):
    chance = {
        "at_chance": at_chance,
        "metric": "accuracy",
        "value": 50.0,
        "baseline": 50.0,
        "margin": 5.0,
        "constant": False,
    }
    return {
        "task": task,
        "seed": seed,
        "metrics": metrics,
        "extra_metrics": extra or {},
        "n_train": 100,
        "n_eval": 20,
        "chance": chance,
    }


def test_summary_statistics_and_interface():
    rte = [61.0, 65.0, 70.0, 62.0]
    records = [_record("rte", s, {"accuracy": v}) for s, v in enumerate(rte)]
    records += [_record("mnli", 0, {"accuracy_m": 80.0, "accuracy_mm": 82.0}, {"accuracy_merged": 81.0})]
    records += [_record("syn-agree", 0, {"accuracy": 99.0, "mcc": 98.0}, at_chance=True)]
    s = summarize(records)
    public = {k: v for k, v in s.items() if not k.startswith("_")}
    assert set(public) == {"tasks", "scores", "missing"}
    assert list(s["tasks"]) == ["mnli", "rte", "syn-agree"]  # GLUE order, then custom tasks
    assert s["tasks"]["rte"] == {
        "n_train": 100,
        "n_eval": 20,
        "metrics": {
            "accuracy": {
                "median": 63.5,
                "mean": 64.5,
                "std": pytest.approx(float(np.std(rte, ddof=1))),
                "min": 61.0,
                "max": 70.0,
                "n": 4,
            }
        },
        "chance": {"metric": "accuracy", "baseline": 50.0, "margin": 5.0, "seeds_at_chance": 0, "n": 4},
        "seconds": 0.0,
        "machines": [],  # records without a machine (written before runs kept it)
    }
    assert s["tasks"]["syn-agree"]["chance"]["seeds_at_chance"] == 1  # the figures draw the line, the verdicts read it
    assert s["tasks"]["mnli"]["metrics"]["accuracy_mm"] == {
        "median": 82.0,
        "mean": 82.0,
        "std": 0.0,
        "min": 82.0,
        "max": 82.0,
        "n": 1,
    }
    assert s["scores"] == {"paper": None, "glue": None, "study": None}
    assert s["missing"] == ["cola", "sst2", "mrpc", "stsb", "qqp", "qnli", "wnli"]  # the custom task is no GLUE task
    assert s["_aggregates"]["study"].parts["mnli"] == 81.0 and "syn-agree" not in s["_aggregates"]["glue"].parts


def test_chance_check():
    rng = np.random.default_rng(1)
    gold = np.array([0] * 60 + [1] * 40)
    train = np.array([0] * 70 + [1] * 30)  # majority class 0: 60% on this dev set
    constant = chance_check(np.zeros(100, dtype=int), gold, train, False, "accuracy")
    assert constant.at_chance and constant.constant and constant.baseline == 60.0
    assert constant.margin == pytest.approx(100 * 2 * np.sqrt(0.6 * 0.4 / 100))
    noisy = np.where(rng.random(100) < 0.1, 1 - gold, gold)  # ~90% accurate
    assert not chance_check(noisy, gold, train, False, "accuracy").at_chance
    near = gold.copy()
    near[:35] = 1 - near[:35]  # 65%: within 60 + 9.8
    assert chance_check(near, gold, train, False, "accuracy").at_chance
    cola = chance_check(np.array([0, 1] * 50), gold, train, False, "mcc")  # independent of gold: MCC 0
    assert cola.metric == "mcc" and cola.at_chance and cola.margin == pytest.approx(20.0)
    x, z = rng.normal(size=400), rng.normal(size=400)
    xc = x - x.mean()
    unrelated = z - (z @ xc) / (xc @ xc) * xc  # Pearson exactly 0 with x
    assert chance_check(unrelated, x, x, True, "spearman").at_chance
    assert not chance_check(x + 0.3 * rng.normal(size=400), x, x, True, "spearman").at_chance
    assert "AT CHANCE" in constant.describe() and "one class" in constant.describe()
    # a regression task is judged on its main correlation (STS-B: Spearman, the number its summary line shows): an
    # outlier drags Pearson into the noise band (-17 within 20) while the ranks agree (Spearman 94)
    gold = np.arange(100.0)
    pred = np.where(gold == 99, -1e6, gold)
    stsb = chance_check(pred, gold, gold, True, "spearman")
    assert (stsb.metric, stsb.value, stsb.at_chance) == ("spearman", pytest.approx(spearman(pred, gold)), False)
    by_pearson = chance_check(pred, gold, gold, True, "pearson")
    assert (by_pearson.metric, by_pearson.at_chance) == ("pearson", True) and by_pearson.value > -20
