"""The figures cannot mislead: checked on the data each figure is drawn from and writes beside its PNG
(electra/report/figures.py), never on pixels. Made-up metrics lines, so every case is exact."""

from __future__ import annotations

import json
import math

from electra.report import figures

NAN = float("nan")


def train_rows(kind: str = "electra") -> list[dict]:
    rows = []
    for step, loss in ((10, 5.0), (20, NAN), (30, 4.0)):  # one undefined window
        row = {"step": step, "mlm_loss": loss, "mlm_accuracy": 0.1, "masked_accuracy": 0.08}
        if kind == "electra":
            row.update(disc_loss=0.4, disc_accuracy=0.85, disc_precision=NAN, disc_recall=0.0, replaced_fraction=0.12)
        else:  # an MLM run logs the discriminator's metrics as NaN
            row.update(disc_loss=NAN, disc_accuracy=NAN, disc_recall=NAN, replaced_fraction=NAN)
        rows.append(row)
    return rows


def eval_rows(aucs=(0.7, 0.8)) -> list[dict]:
    return [
        {
            "step": 10 * (i + 1),
            "eval_mlm_loss": 5.0 - i,
            "eval_disc_auc": a,
            "eval_disc_accuracy": 0.86,
            "eval_disc_recall": 0.2,
            "eval_disc_precision": 0.5,
            "eval_disc_loss": 0.3,
            "eval_replaced_fraction": 0.14,
            "eval_masked_accuracy": 0.1,
            "eval_mlm_majority_rate": 0.16,
            "eval_masked_loss": 5.1,
            "eval_mlm_unigram_loss": 5.3,
        }
        for i, a in enumerate(aucs)
    ]


def panel(figure: dict, key: str) -> dict:
    return next(p for p in figure["panels"] if p["key"] == key)


def test_dynamics_units_reference_lines_gaps_and_one_colour_per_split():
    fig = figures.dynamics_data(train_rows(), eval_rows(), "run", "electra", gate_auc=0.6)
    units = {p["key"]: p["ylabel"] for p in fig["panels"]}
    assert units["mlm_loss"] == "nats" and units["disc_accuracy"] == "accuracy (%)" and units["disc_auc"] == "AUC"
    splits = ("training", "held out")
    colours = {(s["label"], s["color"]) for p in fig["panels"] for s in p["lines"] if s["label"] in splits}
    assert colours == {("training", "C0"), ("held out", "C1")}  # the same colour for a split in every panel
    loss = next(s for s in panel(fig, "mlm_loss")["lines"] if s["label"] == "training")
    assert loss["x"] == [10, 20, 30] and loss["y"] == [5.0, None, 4.0]  # a gap, not a line across it
    auc = panel(fig, "disc_auc")["hlines"]
    assert [(h["y"], h["label"]) for h in auc] == [(0.5, "chance (0.5)"), (0.6, "gate threshold (0.6)")]
    original = {s["label"]: s["y"] for s in panel(fig, "disc_accuracy")["lines"]}
    assert original["always 'original' (training)"] == [88.0, 88.0, 88.0]  # 100 * (1 - replaced fraction)
    assert original["always 'original' (held out)"] == [86.0, 86.0]
    assert original["training"] == [85.0, 85.0, 85.0]  # accuracy in %, like its reference
    # training precision is undefined at every window (no replaced token predicted): no line, not a line at 0
    assert [s["label"] for s in panel(fig, "disc_precision")["lines"]] == ["held out"]


def test_an_mlm_run_has_no_generator_nor_discriminator_panels():
    fig = figures.dynamics_data(train_rows("mlm"), [], "mlm run", "mlm", gate_auc=0.6)
    titles = [p["title"] for p in fig["panels"]]
    assert titles == ["masked LM loss", "masked LM accuracy (all chosen slots)", "masked LM accuracy at [MASK] slots"]
    assert not any("generator" in t or "discriminator" in t for t in titles)


def test_collapse_figure_has_the_studys_panels_and_marks_collapsed_runs():
    curves = {"0.25": eval_rows((0.7, 0.8)), "1.0": eval_rows((0.7, 0.5))}
    fig = figures.collapse_data(curves, {"1.0": True}, gate_auc=0.6)
    assert [p["key"] for p in fig["panels"]] == [
        "eval_disc_loss",
        "eval_disc_accuracy",
        "eval_disc_precision",
        "eval_disc_recall",
        "eval_disc_auc",
        "eval_mlm_loss",
    ]
    auc = panel(fig, "eval_disc_auc")
    assert [(s["label"], s["style"], s["collapsed"], s["y"]) for s in auc["lines"]] == [
        ("0.25", "-", False, [0.7, 0.8]),
        ("1.0 (collapsed)", "--", True, [0.7, 0.5]),
    ]
    assert {h["y"] for h in auc["hlines"]} == {0.5, 0.6}
    assert [h["y"] for h in panel(fig, "eval_disc_accuracy")["hlines"]] == [86.0]  # always "original"
    assert [p["ylabel"] for p in fig["panels"]] == ["nats", "accuracy (%)", "fraction", "fraction", "AUC", "nats"]
    assert panel(fig, "eval_disc_accuracy")["lines"][0]["y"] == [86.0, 86.0]  # in %, like its reference line


def test_glue_bars_draw_each_tasks_chance_line_and_mark_rejected_models():
    scores = {"electra": {"rte": (60.0, 58.0, 62.0), "cola": (10.0, 5.0, 15.0)}, "none": {"rte": (55.0, 54.0, 56.0)}}
    fig = figures.glue_data(
        scores, {"cola": "mcc", "rte": "accuracy"}, {"rte": 52.7, "cola": 0.0}, {"electra": "never learned"}
    )
    (p,) = fig["panels"]
    assert p["tasks"] == ["cola", "rte"] and p["xticks"] == ["cola\n(mcc)", "rte\n(accuracy)"]
    assert p["ylabel"] == "dev score (%; MCC and correlations × 100)"
    assert [(h["task"], h["y"], h["x0"], h["x1"]) for h in p["hlines"]] == [
        ("cola", 0.0, -0.45, 0.45),
        ("rte", 52.7, 0.55, 1.45),
    ]
    bars = {b["model"]: b for b in p["bars"]}
    assert bars["electra"]["label"] == "electra (never learned)" and bars["electra"]["hatch"] == "//"
    assert bars["none"]["hatch"] is None and bars["none"]["height"] == [55.0]
    assert bars["electra"]["low"] == [5.0, 2.0] and bars["electra"]["high"] == [5.0, 2.0]  # min..max


def ours(name, flops, score):
    return {"name": name, "flops": flops, "params": 1e6, "score": score, "source": "ours"}


PAPER = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]


def test_efficiency_puts_ours_beside_the_literature_only_on_the_same_tasks(tmp_path):
    quoted = [{"name": "ELECTRA-Small", "flops": 1.4e18, "params": 14e6, "score": 79.9, "source": "quoted"}]
    fig = figures.efficiency_data(
        [ours("a", 1e12, 60.0)], quoted, "mean over rte, sst2", "8-task GLUE", 55.0, ["sst2", "rte"], PAPER
    )
    assert [p["title"] for p in fig["panels"]] == ["quoted: 8-task GLUE", "ours: mean over rte, sst2"]
    assert [p["ylabel"] for p in fig["panels"]] == [
        "GLUE dev score, mean of 8 tasks (%)",
        "dev score, mean of 2 tasks (%)",
    ]
    assert [p["tasks"] for p in fig["panels"]] == [PAPER, ["sst2", "rte"]]
    assert [pt["source"] for pt in fig["panels"][0]["points"]] == ["quoted"]
    assert [pt["source"] for pt in fig["panels"][1]["points"]] == ["ours"]
    assert [(h["y"], h["label"]) for h in fig["panels"][1]["hlines"]] == [(55.0, "no pretraining (55.0)")]
    same = figures.efficiency_data([ours("a", 1e12, 60.0)], quoted, "8-task GLUE", "8-task GLUE", None, PAPER, PAPER)
    (p,) = same["panels"]
    assert sorted(pt["source"] for pt in p["points"]) == ["ours", "quoted"]
    assert p["ylabel"] == "GLUE dev score, mean of 8 tasks (%)" and p["tasks"] == PAPER


def overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_point_labels_do_not_overlap_and_the_side_file_holds_what_was_drawn(tmp_path):
    crowd = [ours(f"setting-{i}", 1e12 * (1 + 0.01 * i), 60.0 + 0.01 * i) for i in range(5)]  # one spot ...
    crowd += [ours("far-left", 1e9, 50.0), ours("far-right", 1e15, 70.0)]  # ... on a wide axis
    fig = figures.efficiency_data(crowd, [], "x", "y", None, ["rte"], PAPER)
    path = figures.draw(fig, tmp_path / "eff.png")
    written = json.loads(path.with_suffix(".json").read_text())
    boxes = written["label_boxes"]
    assert len(boxes) == 7
    assert not any(overlaps(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    assert written["panels"] == json.loads(json.dumps(fig["panels"]))  # the data drawn, as drawn
    dyn = figures.dynamics_data(train_rows(), eval_rows(), "run", "electra", 0.6)
    side = json.loads(figures.draw(dyn, tmp_path / "d.png").with_suffix(".json").read_text())
    loss = next(s for s in side["panels"][0]["lines"] if s["label"] == "training")
    assert loss["y"] == [5.0, None, 4.0] and not any(isinstance(v, float) and math.isnan(v) for v in loss["y"])


def test_the_discriminators_effective_rank_is_drawn_where_it_was_logged():
    """Runs logged before the rank existed draw no empty panel; runs with it get one, held out only."""
    rows = eval_rows((0.7, 0.8))
    for row, rank in zip(rows, (40.0, 2.5), strict=True):
        row["eval_disc_effective_rank"] = rank
    dynamics = figures.dynamics_data(train_rows(), rows, "run", "electra", gate_auc=0.6)
    lines = panel(dynamics, "disc_effective_rank")["lines"]
    assert [(s["label"], s["y"]) for s in lines] == [("held out", [40.0, 2.5])]
    collapse = figures.collapse_data({"a": rows}, {}, gate_auc=0.6)
    assert panel(collapse, "eval_disc_effective_rank")["lines"][0]["y"] == [40.0, 2.5]
    assert "eval_disc_effective_rank" not in [
        p["key"] for p in figures.collapse_data({"a": eval_rows((0.7,))}, {}, 0.6)["panels"]
    ]
