"""Models over pretraining seeds (electra/report/seeds.py) and the verdicts over them: Welch's t over
pretraining-seed means against scipy on the same means, the pretraining seed's share of the variance against an
ANOVA on the raw scores, and a report of a study run with pretraining seeds read back nested; a study folder
written before pretraining seeds (no group) reads exactly as one seed each."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from scipy import stats

from electra.report.seeds import nest, seed_means, variance_share
from electra.report.verdicts import CONFIDENCE, compare, compare_models
from electra.report.write import write_report
from tests.helpers import fake_seeded_study, glue_results, run_python

# SST-2 scores of 3 pretraining seeds x 5 fine-tuning seeds a side: seed means 81.0, 82.2, 80.4 and 80.6, 80.0, 79.6
ELECTRA = [[80.5, 81.0, 81.5, 80.8, 81.2], [82.0, 82.5, 81.8, 82.4, 82.3], [80.1, 80.6, 80.4, 80.2, 80.7]]
MLM = [[80.3, 80.9, 80.6, 80.4, 80.8], [79.8, 80.2, 80.1, 79.7, 80.2], [79.5, 79.9, 79.4, 79.6, 79.6]]


def runs(seeds: list[list[float]], task: str = "sst2") -> list[dict]:
    return [glue_results({task: scores}, metric=None) for scores in seeds]


def test_the_verdict_over_pretraining_seeds_is_welchs_t_on_their_means():
    """Each pretraining seed's mean over its fine-tuning seeds is one observation: t, df and p are scipy's Welch
    test on those means; the fine-tuning seeds alone would call the same difference resolved."""
    c = compare_models("electra", runs(ELECTRA), "mlm", runs(MLM), ["sst2"])
    means_a, means_b = [np.mean(s) for s in ELECTRA], [np.mean(s) for s in MLM]
    ref = stats.ttest_ind(means_a, means_b, equal_var=False)
    assert c.pretrain_seeds == 3 and c.seeds == 5
    assert c.delta == pytest.approx(np.mean(means_a) - np.mean(means_b))
    assert c.t == pytest.approx(ref.statistic) and c.df == pytest.approx(ref.df) and c.p == pytest.approx(ref.pvalue)
    se = np.sqrt(np.var(means_a, ddof=1) / 3 + np.var(means_b, ddof=1) / 3)
    assert c.margin == pytest.approx(stats.t.ppf(0.975, ref.df) * se)
    assert c.p > 1 - CONFIDENCE and not c.concluded and "within the pretraining seeds' spread" in c.reason
    # the 15 scores a side taken as independent draws (what one pretraining run per objective amounts to)
    pooled = stats.ttest_ind(np.ravel(ELECTRA), np.ravel(MLM), equal_var=False)
    assert pooled.pvalue < 0.01 < c.p
    assert c.finetune_margin < c.margin  # the fine-tuning seeds' interval alone is the narrower one
    assert "mean over 3 pretraining seeds × 5 fine-tuning seeds" in c.numbers()
    assert "Welch's t over pretraining-seed means" in c.numbers()


def test_over_several_tasks_each_pretraining_seed_averages_its_task_means():
    a = [{"sst2": s, "stsb": [v - 60 for v in s]} for s in ELECTRA]
    b = [{"sst2": s, "stsb": [v - 64 for v in s]} for s in MLM]
    ra, rb = [glue_results(x, metric=None) for x in a], [glue_results(x, metric=None) for x in b]
    c = compare_models("electra", ra, "mlm", rb, ["sst2", "stsb"])
    xa = [(np.mean(x["sst2"]) + np.mean(x["stsb"])) / 2 for x in a]
    xb = [(np.mean(x["sst2"]) + np.mean(x["stsb"])) / 2 for x in b]
    ref = stats.ttest_ind(xa, xb, equal_var=False)
    assert seed_means(ra, ["sst2", "stsb"]) == pytest.approx(xa)
    assert c.t == pytest.approx(ref.statistic) and c.p == pytest.approx(ref.pvalue) and c.concluded and c.a_better


def test_fewer_than_three_pretraining_seeds_a_side_conclude_nothing_and_one_a_side_is_the_old_test():
    c = compare_models("electra", runs(ELECTRA[:2]), "mlm", runs(MLM[:2]), ["sst2"])
    assert c.p is None and c.reason == "2 pretraining seeds a side: the test needs at least 3"
    one = compare_models("electra", runs(ELECTRA[:1]), "mlm", runs(MLM[:1]), ["sst2"])
    old = compare("electra", runs(ELECTRA[:1])[0], "mlm", runs(MLM[:1])[0], ["sst2"])
    assert one == old and one.pretrain_seeds is None
    ref = stats.ttest_ind(ELECTRA[0], MLM[0], equal_var=False)
    assert one.p == pytest.approx(ref.pvalue) and one.finetune_margin == one.margin


def anova(scores: list[list[float]]) -> tuple[float, float]:
    """(sigma_p^2, sigma_f^2) of a one-way random-effects ANOVA from the raw scores, computed apart from the
    module: sums of squares about the grand mean of all scores."""
    flat = np.concatenate([np.asarray(s, dtype=float) for s in scores])
    k, total, ns = len(scores), flat.size, np.array([len(s) for s in scores])
    ssb = sum(len(s) * (np.mean(s) - flat.mean()) ** 2 for s in scores)
    ssw = sum(((np.asarray(s) - np.mean(s)) ** 2).sum() for s in scores)
    msb, msw = ssb / (k - 1), ssw / (total - k)
    n0 = (total - (ns**2).sum() / total) / (k - 1)
    return (msb - msw) / n0, msw


def summaries(scores: list[list[float]]) -> tuple[list[float], list[float], list[int]]:
    return [np.mean(s) for s in scores], [np.std(s, ddof=1) for s in scores], [len(s) for s in scores]


def test_the_pretraining_seeds_share_of_the_variance_by_the_method_of_moments():
    # seed means 70, 72, 74, each over 4 fine-tuning seeds at +-1: MSW 4/3, MSB 16, sigma_p^2 (16 - 4/3) / 4 = 11/3
    known = [[m - 1, m + 1, m - 1, m + 1] for m in (70.0, 72.0, 74.0)]
    share = variance_share(*summaries(known))
    assert share.within == pytest.approx(4 / 3) and share.between == pytest.approx(11 / 3)
    assert share.share == pytest.approx(11 / 15) and not share.clipped
    unbalanced = [[80.1, 81.3, 80.7], [82.0, 81.1, 82.6, 81.9, 82.2], [79.0, 80.4]]
    between, within = anova(unbalanced)
    share = variance_share(*summaries(unbalanced))
    assert share.between == pytest.approx(between) and share.within == pytest.approx(within)
    # pretraining seeds whose means agree more closely than their fine-tuning seeds predict: clipped at 0
    close = [[70.0, 74.0, 72.0], [71.0, 73.0, 72.1], [72.5, 71.5, 72.0]]
    assert anova(close)[0] < 0
    share = variance_share(*summaries(close))
    assert share.between == 0.0 and share.clipped and share.share == 0.0
    assert variance_share(*summaries(close[:1])) is None  # one pretraining seed: nothing to split


def test_the_share_recovers_known_components_from_many_draws():
    rng = np.random.default_rng(0)
    draws = [list(72.0 + rng.normal(0, 2.0) + rng.normal(0, 1.0, size=20)) for _ in range(400)]
    share = variance_share(*summaries(draws))  # sigma_p^2 4, sigma_f^2 1: a share of 0.8
    assert share.between == pytest.approx(4.0, rel=0.15) and share.within == pytest.approx(1.0, rel=0.05)
    assert share.share == pytest.approx(0.8, abs=0.03)
    n = nest([glue_results({"sst2": d}, metric=None) for d in draws], "sst2")
    assert n.finetune_std == pytest.approx(1.0, rel=0.05) and n.pretrain_std == pytest.approx(
        np.std([np.mean(d) for d in draws], ddof=1)
    )


def table(text: str, heading: str) -> list[list[str]]:
    block = next(b for b in text.split(heading, 1)[1].split("\n\n") if b.startswith("|"))
    return [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()[2:]]


def test_a_study_with_pretraining_seeds_is_reported_nested(tmp_path):
    """The Summary gives each objective's mean ± its pretraining seeds' std, the verdicts test over pretraining-seed
    means, Table 5 holds each seed's mean, both spreads and the variance share, and results.json keeps them."""
    scores = {
        "electra": [{"sst2": s} for s in ELECTRA],
        "mlm": [{"sst2": s} for s in MLM],
        "none": [{"sst2": [v - 4 for v in s]} for s in MLM],
    }
    study = fake_seeded_study(tmp_path / "s", scores, kinds={"mlm": "mlm"})
    report = write_report([study])
    text = (report / "report.md").read_text()
    summary = {r[0]: r for r in table(text, "## Summary")}
    means = [np.mean(s) for s in ELECTRA]
    assert set(summary) == {"electra", "mlm", "none"}
    assert summary["electra"][3] == f"{np.mean(means):.2f} ± {np.std(means, ddof=1):.2f} (3 pretraining seeds)"
    assert summary["electra"][4] == f"{np.mean(means) - np.mean([np.mean(s) - 4 for s in MLM]):+.2f}"
    ref = stats.ttest_ind(means, [np.mean(s) for s in MLM], equal_var=False)
    assert (
        f"- electra +{np.mean(means) - np.mean([np.mean(s) for s in MLM]):.1f} points vs mlm on sst2 (mean over 3 "
        f"pretraining seeds × 5 fine-tuning seeds; 95% interval" in text
    )
    assert f"Welch's t over pretraining-seed means {ref.statistic:.2f}, df {ref.df:.1f}, p = {ref.pvalue:.3f})" in text
    rows = {r[0]: r for r in table(text, "### Table 5: pretraining seeds")}
    n = nest(runs(ELECTRA), "sst2")
    share = variance_share(*summaries(ELECTRA))
    assert rows["electra"][1:] == [
        "sst2",
        ", ".join(f"{m:.2f}" for m in means),
        f"{np.mean(means):.2f} ± {np.std(means, ddof=1):.2f}",
        f"{n.finetune_std:.2f}",
        f"{share.share:.0%}",
    ]
    kept = json.loads((report / "results.json").read_text())["pretrain_seeds"]["electra"]
    assert kept["runs"] == ["electra-p0", "electra-p1", "electra-p2"] and kept["pretrain_seeds"] == [0, 1, 2]
    assert kept["tasks"]["sst2"]["seed_means"] == pytest.approx(means)
    assert kept["tasks"]["sst2"]["pretrain_std"] == pytest.approx(np.std(means, ddof=1))
    assert kept["tasks"]["sst2"]["finetune_std"] == pytest.approx(n.finetune_std)
    assert kept["tasks"]["sst2"]["pretrain_share"] == pytest.approx(share.share)


def test_a_study_folder_without_groups_reads_as_one_pretraining_seed_each(tmp_path):
    """Study folders written before pretraining seeds (no group) and a study of one seed (group = the name)
    give the same report: every setting a model of its own, the verdicts over fine-tuning seeds."""
    scores = {"electra": [{"sst2": [81.0, 82.0, 84.0]}], "none": [{"sst2": [76.0, 77.0, 77.5]}]}
    seeded = fake_seeded_study(tmp_path / "new", scores)
    old = tmp_path / "old"
    shutil.copytree(seeded, old)
    meta = json.loads((old / "study.json").read_text())
    for s in meta["settings"]:
        del s["group"], s["pretrain_seed"]
    (old / "study.json").write_text(json.dumps(meta))
    new_text = (write_report([seeded], tmp_path / "r-new") / "report.md").read_text()
    old_text = (write_report([old], tmp_path / "r-old") / "report.md").read_text()
    assert new_text == old_text
    assert "Table 5" not in old_text and "pretraining seed" not in old_text
    assert "- pretraining helped (95% confidence): electra +5.5 points vs none on sst2 (mean over 3 seeds;" in old_text


def test_compare_reports_compares_two_models_of_committed_reports_over_their_pretraining_seeds(tmp_path):
    """scripts/compare_reports.py names a model pretrained under several seeds by its setting, as the report does,
    and gives the report's verdict over its pretraining seeds."""
    scores = {"electra": [{"sst2": s} for s in ELECTRA], "mlm": [{"sst2": s} for s in MLM]}
    report = write_report([fake_seeded_study(tmp_path / "s", scores, kinds={"mlm": "mlm"})])
    out = run_python("scripts/compare_reports.py", f"{report}:electra", f"{report}:mlm", "--tasks", "sst2", check=True)
    means_a, means_b = [np.mean(s) for s in ELECTRA], [np.mean(s) for s in MLM]
    ref = stats.ttest_ind(means_a, means_b, equal_var=False)
    assert f"electra: sst2 {np.mean(means_a):.1f} ± {np.std(means_a, ddof=1):.1f} (3 pretraining seeds × 5; " in (
        out.stdout
    )
    assert f"Welch's t over pretraining-seed means {ref.statistic:.2f}, df {ref.df:.1f}, p = {ref.pvalue:.3f}" in (
        out.stdout
    )
    assert "nothing can be concluded at 95% confidence" in out.stdout


def test_compare_reports_joins_one_pretraining_seed_per_report_into_the_same_verdict(tmp_path):
    """A study too long for one machine, run one pretraining seed per study folder and report: the sides joined
    with `+` give the verdict and the variance share of one study with all its pretraining seeds."""
    mlm = {"mlm": "mlm"}
    whole_study = {"electra": [{"sst2": s} for s in ELECTRA], "mlm": [{"sst2": s} for s in MLM]}
    one = write_report([fake_seeded_study(tmp_path / "all", whole_study, kinds=mlm)])
    parts = []
    for k, (a, b) in enumerate(zip(ELECTRA, MLM, strict=True)):
        study = fake_seeded_study(tmp_path / f"p{k}", {"electra": [{"sst2": a}], "mlm": [{"sst2": b}]}, kinds=mlm)
        parts.append(write_report([study]))
    electra, masked = ("+".join(f"{p}:{model}" for p in parts) for model in ("electra", "mlm"))
    joined = run_python("scripts/compare_reports.py", electra, masked, "--tasks", "sst2", check=True)
    whole = run_python("scripts/compare_reports.py", f"{one}:electra", f"{one}:mlm", "--tasks", "sst2", check=True)
    assert joined.stdout == whole.stdout
    means, stds = [float(np.mean(s)) for s in ELECTRA], [float(np.std(s, ddof=1)) for s in ELECTRA]
    share = variance_share(means, stds, [5, 5, 5]).share
    assert f"the pretraining seed's share of the variance {share:.0%}" in whole.stdout
