"""STS-B in the CPU study: a regression task whose metric is Spearman's correlation and whose chance level is 0
(a model that ignores its input predicts one score). Its numbers flow through the report's table, figure and
verdicts as the paper's STS-B metric; a short sweep on the real files (skipped without them) records it so."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from electra.config import FinetuneConfig
from electra.glue.sweep import SweepSpec, run_sweep
from electra.report.verdicts import format_p
from electra.report.write import write_report
from tests.glue_fixtures import GLUE_DATA, make_run
from tests.helpers import fake_study, glue_results

# a 10-minute 2 x 64 study's STS-B Spearman, 3 seeds (issue 47): ELECTRA 16.6, random weights 12.1
ELECTRA = {"sst2": [80.5, 81.2, 80.9], "stsb": [16.1, 17.0, 16.7]}
NONE = {"sst2": [76.8, 77.4, 77.1], "stsb": [11.8, 12.6, 11.9]}


def results(scores: dict[str, list[float]]) -> dict:
    """results.json with each task's own chance level: SST-2's majority class (50.9%), STS-B's 0."""
    out = glue_results({"sst2": scores["sst2"]}, metric=None, baseline=50.9)
    out["tasks"]["stsb"] = glue_results({"stsb": scores["stsb"]}, metric=None, baseline=0.0)["tasks"]["stsb"]
    return out


def test_stsb_spearman_flows_through_the_table_the_figure_and_a_verdict_of_its_own(tmp_path):
    study = fake_study(tmp_path / "s", {"electra": {}, "none": {}})
    for name, scores in (("electra", ELECTRA), ("none", NONE)):
        (study / "runs" / name / "glue" / "results.json").write_text(json.dumps(results(scores)))
    report = write_report([study])
    text = (report / "report.md").read_text()
    block = next(b for b in text.split("### Table 2")[1].split("\n\n") if b.startswith("| model"))
    head, _, *rows = [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()]
    assert head[1:3] == ["sst2", "stsb"]
    row = next(r for r in rows if r[0] == "electra")
    mean, std = np.mean(ELECTRA["stsb"]), np.std(ELECTRA["stsb"], ddof=1)
    assert row[2] == f"16.70 ({mean:.2f} ± {std:.2f}, n=3)"  # Spearman: median, mean ± std, no chance mark
    (panel,) = json.loads((report / "glue.json").read_text())["panels"]
    assert panel["tasks"] == ["sst2", "stsb"] and panel["xticks"][1] == "stsb\n(spearman)"
    assert {h["task"]: h["y"] for h in panel["hlines"]} == {"sst2": 50.9, "stsb": 0.0}
    ref = stats.ttest_ind(ELECTRA["stsb"], NONE["stsb"], equal_var=False)
    delta = np.mean(ELECTRA["stsb"]) - np.mean(NONE["stsb"])
    assert (
        f"- pretraining helped (95% confidence): electra {delta:+.1f} points vs none on stsb (mean over 3 seeds; "
        f"95% interval ±{stats.t.ppf(0.975, ref.df) * delta / ref.statistic:.1f}, Welch's t {ref.statistic:.2f}, "
        f"df {ref.df:.1f}, {format_p(ref.pvalue)})." in text
    )
    assert "- pooled over the tasks that moved: pretraining helped (95% confidence)" in text


@pytest.mark.skipif(not (GLUE_DATA / "STS-B").is_dir(), reason="shared GLUE data (STS-B) not present")
def test_a_short_sweep_on_the_real_stsb_files_records_spearman_against_a_chance_level_of_0(tmp_path):
    out = tmp_path / "glue"
    spec = SweepSpec(
        out=str(out),
        model=str(make_run(tmp_path / "run")),
        tasks=["stsb"],
        glue_dir=str(GLUE_DATA),
        seeds=[0],
        finetune=FinetuneConfig(max_steps=2),
        progress=False,
    )
    assert run_sweep(spec).ok
    stsb = json.loads((out / "results.json").read_text())["tasks"]["stsb"]
    assert (stsb["n_train"], stsb["n_eval"]) == (5749, 1500)
    assert {"spearman", "pearson"} <= set(stsb["metrics"])
    assert stsb["chance"]["metric"] == "spearman" and stsb["chance"]["baseline"] == 0.0
    text = (write_report([out], tmp_path / "report") / "report.md").read_text()
    spearman = stsb["metrics"]["spearman"]["median"]
    assert "| model | stsb |" in text and f"| {spearman:.2f}" in text
