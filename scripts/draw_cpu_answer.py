"""Draw the figure at the top of docs/results.md ("The answer on a CPU") from committed report folders only: on
SST-2, ELECTRA − MLM at equal FLOPs by budget and model size, the fixed `cpu` preset's ELECTRA (temperature 3 → 1)
filled and the earlier temperature-1 ELECTRA hollow; and, at the 30-minute FLOPs, each pretrained start against
random weights of its own shape. Each difference, its 95% interval and p are scripts/compare_reports.py's (the
test every report uses, electra/report/verdicts.py), each model's FLOPs its report's efficiency.json. No run folder
is read, so the figure can be drawn again on any clone.

    python scripts/draw_cpu_answer.py        # writes docs/results/cpu-answer/electra-mlm-random.png and .json
"""

import argparse
import json
from pathlib import Path

from compare_reports import side  # scripts/compare_reports.py, beside this file

from electra.report.figures import PANEL_SIZE, REFERENCE_COLOUR, draw, electra_minus_mlm_data
from electra.report.verdicts import compare_models

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
TASKS = ["sst2", "mrpc", "rte", "wnli"]  # as the studies ran them; the test leaves out those at chance
BUDGETS, FIXED_2X64, FIXED_4X128 = "wiki-cpu-budgets", "wiki-cpu-2x64-T3", "wiki-cpu-4x128-T3"
SMALL, LARGER = "2 layers, hidden 64", "4 layers, hidden 128"
COLOURS = {SMALL: "C0", LARGER: "C1"}

# (size, ELECTRA as FOLDER:MODEL, MLM as FOLDER:MODEL): the four-budget report's ELECTRA at temperature 1
T1_MINUS_MLM = [
    (SMALL, f"{BUDGETS}:demo-text/electra", f"{BUDGETS}:demo-text/mlm"),
    (SMALL, f"{BUDGETS}:study-10m/electra", f"{BUDGETS}:study-10m/mlm"),
    (SMALL, f"{BUDGETS}:study-30m/electra", f"{BUDGETS}:study-30m/mlm"),
    (SMALL, f"{BUDGETS}:study-100m/electra", f"{BUDGETS}:study-100m/mlm"),
    (LARGER, f"{BUDGETS}:study-4x128-30m/electra", f"{BUDGETS}:study-4x128-30m/mlm"),
]
# the fixed preset's ELECTRA, rerun alone, against the same MLM (the schedule is ELECTRA's sampling only)
FIXED_MINUS_MLM = [
    (SMALL, f"{FIXED_2X64}:electra", f"{BUDGETS}:study-30m/mlm"),
    (LARGER, f"{FIXED_4X128}:electra", f"{BUDGETS}:study-4x128-30m/mlm"),
]
# at the 30-minute FLOPs, each start against random weights of its own shape: (bar label, colour, hatch, pairs)
OVER_RANDOM = [
    (
        "ELECTRA, fixed preset (temperature 3 → 1)",
        "C2",
        None,
        [
            (f"{FIXED_2X64}:electra", f"{BUDGETS}:study-30m/none"),
            (f"{FIXED_4X128}:electra", f"{BUDGETS}:study-4x128-30m/none"),
        ],
    ),
    (
        "ELECTRA, temperature 1 (earlier runs)",
        "0.85",
        "//",
        [
            (f"{BUDGETS}:study-30m/electra", f"{BUDGETS}:study-30m/none"),
            (f"{BUDGETS}:study-4x128-30m/electra", f"{BUDGETS}:study-4x128-30m/none"),
        ],
    ),
    (
        "masked LM",
        "C4",
        None,
        [
            (f"{BUDGETS}:study-30m/mlm", f"{BUDGETS}:study-30m/none"),
            (f"{BUDGETS}:study-4x128-30m/mlm", f"{BUDGETS}:study-4x128-30m/none"),
        ],
    ),
]
DODGE = 1.15
"""The filled points are drawn at DODGE x their FLOPs (the 4 x 128 one at DODGE squared), so that their intervals do
not hide the temperature-1 ones at the same budget; each point's true FLOPs are in the JSON ("flops")."""


def flops(spec: str) -> float:
    """A model's pretraining FLOPs as its report's efficiency figure records them."""
    folder, _, model = spec.rpartition(":")
    figure = json.loads((RESULTS / folder / "efficiency.json").read_text())
    found = [p["x"] for panel in figure["panels"] for p in panel.get("points", []) if p.get("label") == model]
    if len(found) != 1:
        raise SystemExit(f"{RESULTS / folder / 'efficiency.json'}: no single point for {model!r}")
    return found[0]


def difference(a: str, b: str) -> dict:
    """A − B on the tasks that moved (SST-2 in every pair here), as compare_reports.py prints it."""
    (na, ra, ga), (nb, rb, gb) = side(str(RESULTS / a)), side(str(RESULTS / b))
    c = compare_models(na, ra, nb, rb, TASKS, ga, gb)
    if c.tasks != ["sst2"] or c.margin is None:
        raise SystemExit(f"{a} − {b}: compared on {c.tasks or 'no task'} ({c.reason}); this figure is of SST-2")
    never_learned = ga is not None and ga.learned is False  # the learning gate's verdict on A's pretraining
    return {"name": f"{a} − {b}", "delta": c.delta, "margin": c.margin, "p": c.p, "never_learned": never_learned}


def minus_mlm_panel() -> dict:
    """The report's ELECTRA − MLM figure for the temperature-1 runs (electra_minus_mlm_data), its markers made
    hollow, and the fixed preset's points filled beside them."""
    earlier = [{"size": s, "flops": flops(a), **difference(a, b)} for s, a, b in T1_MINUS_MLM]
    gated = {d["name"] for d in earlier if d["never_learned"]}
    panel = electra_minus_mlm_data(earlier)["panels"][0]
    panel["title"] = "SST-2: ELECTRA − masked LM at equal FLOPs"
    panel["ylabel"] = "ELECTRA − MLM (points; bars: 95% interval)"
    points = []
    for line in panel["lines"]:
        line.update(style="--", marker=None, label=f"{line['label']}, temperature 1 (earlier runs)")
        for x, y, name, p in zip(line["x"], line["y"], line["names"], line["p"], strict=True):
            label = f"{y:+.1f}: its discriminator never learned" if name in gated else ""
            points.append(_point(x, y, None, line["color"], "none", label, name=name, p=p, flops=x))
    for i, (size, a, b) in enumerate(FIXED_MINUS_MLM):
        d, x = difference(a, b), flops(a)
        label = f"{d['delta']:+.1f} (±{d['margin']:.1f}, p = {d['p']:.2f})"
        colour = COLOURS[size]
        points.append(_point(x * DODGE ** (i + 1), d["delta"], d["margin"], colour, colour, label, **d, flops=x))
    panel["points"] = points
    panel["legend_points"] = [
        {"marker": "o", "fill": "none", "color": REFERENCE_COLOUR, "label": "hollow: ELECTRA at temperature 1"},
        {"marker": "o", "fill": REFERENCE_COLOUR, "color": REFERENCE_COLOUR, "label": "filled: fixed preset (3 → 1)"},
    ]
    return panel


def _point(x: float, y: float, err: float | None, colour: str, fill: str, label: str, **data) -> dict:
    point = {"x": x, "y": y, "marker": "o", "fill": fill, "color": colour, "label": label, **data}
    if err is not None:
        point["err"] = err
    return point


def over_random_panel() -> dict:
    """Each start − random weights of its own shape at the 30-minute FLOPs, one bar per start and size."""
    width, bars = 0.26, []
    for i, (label, colour, hatch, pairs) in enumerate(OVER_RANDOM):
        ds = [difference(a, b) for a, b in pairs]
        bars.append(
            {
                "x": [size + (i - 1) * width for size in range(len(pairs))],
                "height": [d["delta"] for d in ds],
                "width": width,
                "low": [d["margin"] for d in ds],
                "high": [d["margin"] for d in ds],
                "color": colour,
                "hatch": hatch,
                "label": label,
                "names": [d["name"] for d in ds],
                "p": [d["p"] for d in ds],
            }
        )
    return {
        "title": "SST-2 at the 30-minute FLOPs: each start − random weights",
        "ylabel": "points over random weights (bars: 95% interval)",
        "xticks": [SMALL, LARGER],
        "bars": bars,
        "hlines": [{"y": 0.0, "color": REFERENCE_COLOUR, "style": "--", "label": "random weights of that shape"}],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=RESULTS / "cpu-answer" / "electra-mlm-random.png")
    args = p.parse_args()
    figure = {"columns": 2, "panel_size": (PANEL_SIZE[0] * 1.3, PANEL_SIZE[1] * 1.35)}
    figure["panels"] = [minus_mlm_panel(), over_random_panel()]
    print(draw(figure, args.out))


if __name__ == "__main__":
    main()
