"""The report answers per task (issue 49): a verdict for each task, tasks at chance left out of a pooled verdict
that is given only over the tasks that moved and withheld where they point opposite ways; one difference (of means,
the one the verdicts test) in the Summary and the verdicts; Table 1's random-weights row from the step-0 run that
wrote it; the efficiency figure's seed spread and score axis; both spreads in the crossover and ELECTRA − MLM
figures."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from electra.config import load_config
from electra.report.verdicts import answer
from electra.report.write import write_report
from electra.training.baseline import write_initialised_run
from electra.utils.machine import cpu_model
from electra.utils.revision import code_revision
from tests.helpers import fake_pretrain_run, fake_seeded_study, fake_study, glue_results

LEARNED = [{"step": 10, "eval_masked_accuracy": 0.3, "eval_mlm_majority_rate": 0.1, "eval_disc_auc": 0.8}]

# issue 49's report: ahead on SST-2, far behind on CoLA, at chance on RTE
MLM = {"sst2": [79.5, 80.0, 80.2], "cola": [1.0, 2.0, 0.5], "rte": [52.0, 53.0, 52.5]}
NONE = {"sst2": [77.2, 77.5, 77.9], "cola": [14.0, 15.5, 15.0], "rte": [53.0, 52.0, 52.7]}


def test_each_task_gets_its_verdict_and_a_pooled_one_that_would_contradict_them_is_withheld():
    mlm = glue_results(MLM, at_chance=("rte",), metric=None)
    none = glue_results(NONE, at_chance=("rte",), metric=None)
    ans = answer("mlm", [mlm], "none", [none], ["sst2", "cola", "rte"])
    sst2, cola, rte = ans.per_task
    ref = stats.ttest_ind(MLM["sst2"], NONE["sst2"], equal_var=False)
    assert sst2.tasks == ["sst2"] and sst2.a_better and sst2.p == pytest.approx(ref.pvalue)
    assert cola.tasks == ["cola"] and cola.b_better
    assert rte.tasks == [] and rte.at_chance == ["rte"] and ans.moved == ["sst2", "cola"]
    # pooled over sst2 and cola the masked LM would lose (-6.0, p < 0.05): the opposite of what SST-2 says
    pooled = (np.mean(MLM["sst2"]) - np.mean(NONE["sst2"]) + np.mean(MLM["cola"]) - np.mean(NONE["cola"])) / 2
    assert pooled < -5
    assert ans.pooled is None and ans.withheld.startswith("the tasks point opposite ways (sst2: mlm ahead; cola: none")
    agree = answer("mlm", [mlm], "none", [none], ["sst2", "rte"])  # one task moved: its verdict is the answer
    assert agree.pooled is None and not agree.withheld and len(agree.per_task) == 2


def test_a_pooled_verdict_is_given_over_the_tasks_that_moved_where_they_agree(tmp_path):
    scores = {
        "electra": {"sst2": [80.0, 81.0, 82.0], "stsb": [20.0, 22.0, 21.0], "rte": [53.0, 52.0, 54.0]},
        "none": {"sst2": [76.0, 77.0, 78.0], "stsb": [12.0, 13.0, 11.0], "rte": [52.0, 53.0, 53.0]},
    }
    study = fake_study(tmp_path / "s", scores, metric=None)
    for name in scores:  # rte at chance level for both
        results = glue_results(scores[name], at_chance=("rte",), metric=None)
        (study / "runs" / name / "glue" / "results.json").write_text(json.dumps(results))
    text = (write_report([study]) / "report.md").read_text()
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert lines[0].startswith("- pretraining helped (95% confidence): electra +4.0 points vs none on sst2 (")
    assert lines[1].startswith("- pretraining helped (95% confidence): electra +9.0 points vs none on stsb (")
    assert lines[2] == (
        "- electra vs none on rte: at chance level for the model that scores higher there: no verdict, and left out "
        "of any pooled one."
    )
    assert lines[3].startswith(
        "- pooled over the tasks that moved; rte left out at chance level: pretraining helped (95% confidence): "
        "electra +6.5 points vs none on sst2, stsb ("
    )


def test_the_summary_shows_the_difference_of_means_the_verdict_tests(tmp_path):
    """Seeds skewed so that medians and means part: the Summary's task mean and its difference are of means, the
    number in the verdict under it."""
    study = fake_study(tmp_path / "s", {"electra": [80.0, 80.2, 83.0], "none": [79.0, 79.9, 80.1]}, task="sst2")
    text = (write_report([study]) / "report.md").read_text()
    assert "## Summary: mean over sst2 (each task's mean over seeds, the mean the verdicts test)" in text
    delta = np.mean([80.0, 80.2, 83.0]) - np.mean([79.0, 79.9, 80.1])
    assert f"| no pretraining run at hand to judge | {np.mean([80.0, 80.2, 83.0]):.2f} | {delta:+.2f} |" in text
    assert f"| {delta:+.2f} |" in text and f"electra {delta:+.1f} points vs none on sst2" in text
    assert "+0.10 |" not in text  # the difference of medians (80.2 - 79.9 = 0.3) is nowhere
    assert "+0.30 |" not in text


def test_table_1_fills_the_random_weights_row_from_the_step_0_run_that_wrote_it(tmp_path):
    study = fake_study(tmp_path / "s", {"electra": [80.0, 81.0, 82.0], "none": [76.0, 77.0, 78.0]}, task="sst2")
    fake_pretrain_run(study / "runs" / "electra" / "pretrain", 10, LEARNED)
    cfg = load_config("tiny", ["train.seed=3"])
    write_initialised_run(cfg, study / "runs" / "none" / "pretrain")
    meta = json.loads((study / "runs" / "none" / "pretrain" / "run.json").read_text())
    assert (meta["device"], meta["precision"], meta["tf32"], meta["step"]) == ("cpu", "fp32", False, 0)
    assert meta["code_revision"] == code_revision() and meta["sessions"][0]["machine"].startswith(cpu_model())
    text = (write_report([study]) / "report.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| none | none (random initialisation) | 0 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[6:9] == ["0", "cpu [M1] (0 steps)", "fp32, TF32 off"]  # GPUs, device, precision: nothing unknown
    assert f"none: resolved config (code revision <code>{code_revision()}</code>)" in text
    assert "unknown" not in row
    # a step-0 run written before run.json said where (device "unknown"): no GPU is claimed for it
    old = fake_pretrain_run(tmp_path / "old" / "none", 0, [], ["objective.kind=none"])
    table = (write_report([old], tmp_path / "old-report") / "report.md").read_text().split("### Table 1")[1]
    row = next(line for line in table.splitlines() if line.startswith("| none |"))
    assert [c.strip() for c in row.strip("|").split("|")][6:8] == ["0", "unknown (0 steps)"]


def test_the_efficiency_figure_draws_the_seed_spread_on_a_score_axis_wider_than_the_noise(tmp_path):
    study = fake_study(tmp_path / "s", {"electra": [80.0, 80.4, 80.9], "none": [79.9, 80.0, 80.2]}, task="sst2")
    fake_pretrain_run(study / "runs" / "electra" / "pretrain", 10, LEARNED)
    report = write_report([study])
    panel = json.loads((report / "efficiency.json").read_text())["panels"][-1]
    (point,) = panel["points"]
    assert point["y"] == pytest.approx(np.mean([80.0, 80.4, 80.9]))
    assert point["err"] == pytest.approx(np.std([80.0, 80.4, 80.9], ddof=1))
    low, high = panel["ylim"]
    assert high - low >= 5.0 and low < 80.0 and high > 80.9  # 0.4 points of difference on 5 points of axis
    assert "Error bars on ours: ± the seeds' std" in (report / "report.md").read_text()


def test_the_crossover_and_electra_minus_mlm_figures_draw_both_spreads(tmp_path):
    """Two budgets of a study with 3 pretraining seeds a side: each point's thin bar is the pretraining seeds'
    (crossover: their std; ELECTRA − MLM: the test's interval), its thick bar the fine-tuning seeds' alone."""
    base = [[80.5, 81.0, 81.5], [82.0, 82.5, 81.8], [80.1, 80.6, 80.4]]

    def study(name, shift, steps):
        scores = {
            "electra": [{"sst2": [v + shift for v in s]} for s in base],
            "mlm": [{"sst2": [v + shift - 1 for v in s[::-1]]} for s in base[::-1]],
            "none": [{"sst2": [v - 5 for v in s]} for s in base],
        }
        root = fake_seeded_study(tmp_path / name, scores, kinds={"mlm": "mlm"})
        for group, kind in (("electra", []), ("mlm", ["objective.kind=mlm"])):
            for k in range(3):
                fake_pretrain_run(root / "runs" / f"{group}-p{k}" / "pretrain", steps[group], LEARNED, kind)
        return root

    report = write_report(
        [study("s-3m", 0.0, {"electra": 30, "mlm": 50}), study("s-30m", 2.0, {"electra": 300, "mlm": 500})],
        tmp_path / "report",
    )
    (panel,) = json.loads((report / "crossover.json").read_text())["panels"]
    electra = next(line for line in panel["lines"] if line["label"] == "electra")
    means = [np.mean(s) for s in base]
    assert electra["names"] == ["s-3m/electra", "s-30m/electra"]
    assert electra["y"] == pytest.approx([np.mean(means), np.mean(means) + 2.0])
    assert electra["err"] == pytest.approx([np.std(means, ddof=1)] * 2)
    within = np.sqrt(np.mean([np.var(s, ddof=1) for s in base]))
    assert electra["err_inner"] == pytest.approx([within] * 2)
    (panel,) = json.loads((report / "electra-minus-mlm.json").read_text())["panels"]
    (line,) = panel["lines"]
    assert line["y"] == pytest.approx([1.0, 1.0]) and line["pretrain_seeds"] == [3, 3]
    se = np.sqrt(2 * np.var(means, ddof=1) / 3)
    df = stats.ttest_ind(means, means, equal_var=False).df
    assert line["err"] == pytest.approx([stats.t.ppf(0.975, df) * se] * 2)
    assert all(inner < outer for inner, outer in zip(line["err_inner"], line["err"], strict=True))
    text = (report / "report.md").read_text()
    assert "| 3 pretraining × 3 fine-tuning | sst2 |" in text and "(fine-tuning seeds alone ±" in text
