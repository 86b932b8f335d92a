"""What `electra glue` prints at the end: one line per task (its main metric, median ± std over seeds), the aggregate
scores that are defined, the warnings, and the report's path; the report itself stays in results.md."""

from __future__ import annotations

from electra.glue.report import summarize
from electra.glue.sweep import summary_line, summary_lines
from electra.glue.tasks import GLUE_TASKS, TASKS

METRICS = {
    "cola": ["mcc"],
    "sst2": ["accuracy"],
    "mrpc": ["f1", "accuracy"],
    "stsb": ["pearson", "spearman"],
    "qqp": ["f1", "accuracy"],
    "mnli": ["accuracy_m", "accuracy_mm"],
    "qnli": ["accuracy"],
    "rte": ["accuracy"],
    "wnli": ["accuracy"],
}


def record(task: str, seed: int, value: float, at_chance: bool = False, main_metric: str | None = None) -> dict:
    chance = {
        "at_chance": at_chance,
        "metric": "accuracy",
        "value": 50.0,
        "baseline": 50.0,
        "margin": 5.0,
        "constant": False,
    }
    metrics = {m: value + i for i, m in enumerate(METRICS.get(task, ["mcc", "accuracy"]))}
    r = {
        "task": task,
        "seed": seed,
        "metrics": metrics,
        "extra_metrics": {"accuracy_merged": value} if task == "mnli" else {},
        "n_train": 10,
        "n_eval": 5,
        "chance": chance,
    }
    return {**r, "main_metric": main_metric} if main_metric else r


def test_one_line_per_task_then_the_defined_scores():
    values = {task: [60.0 + i, 64.0 + i, 71.0 + i] for i, task in enumerate(GLUE_TASKS)}
    records = [record(t, s, v) for t, vs in values.items() for s, v in enumerate(vs)]
    records += [record("syn-agree", s, 80.0 + s, at_chance=s == 0, main_metric="accuracy") for s in range(3)]
    results = {k: v for k, v in summarize(records).items() if not k.startswith("_")}
    lines = summary_lines(results, records, failed=[{"task": "rte", "seed": 9, "error": "loss is nan"}])
    assert len(lines) == len(GLUE_TASKS) + 1 + 1 + 1 + 1  # tasks, custom task, scores, warning, failure
    for line, task in zip(lines, [*GLUE_TASKS, "syn-agree"], strict=False):
        metric = TASKS[task].main_metric if task in TASKS else "accuracy"  # syn-agree's record names its own
        s = results["tasks"][task]["metrics"][metric]
        assert line.split() == [
            task,
            metric,
            f"{s['median']:.2f}",
            "±",
            f"{s['std']:.2f}",
            "(median",
            "±",
            "std",
            "over",
            "3",
            "seeds;",
            "chance",
            "accuracy",  # the records' chance level is on accuracy: named, whatever the line's metric
            "50.00)",
        ]
    scores = results["scores"]
    assert None not in scores.values()
    assert lines[10] == "GLUE scores: " + ", ".join(f"{k} {v:.2f}" for k, v in scores.items())
    assert lines[11].startswith("WARNING syn-agree: 1 of 3 seeds at chance level")
    assert lines[12].startswith("1 run failed (non-finite loss)")
    partial = [r for r in records if r["task"] != "wnli"]  # the paper's score is defined, the other two are not
    results = {k: v for k, v in summarize(partial).items() if not k.startswith("_")}
    assert [line for line in summary_lines(results, partial, []) if line.startswith("GLUE scores")] == [
        f"GLUE scores: paper {results['scores']['paper']:.2f}"
    ]


def test_a_runs_line_counts_its_steps_in_words():
    r = {**record("wnli", 0, 56.3), "steps": 1, "loss_start": 0.7, "loss_end": 0.69, "seconds": 0.4}
    assert "| 1 step, loss 0.700 -> 0.690, 0.4 s" in summary_line(r)
    assert "| 6,315 steps," in summary_line({**r, "steps": 6315})
