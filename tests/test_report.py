"""`electra report` on made-up studies (study.json and GLUE results.json only): the verdicts, the comment on a
baseline that beats the pretrained models, and the tables and figures' data (the figures are checked through the
data each figure writes beside its PNG, never through pixels)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from electra.data.synthetic_tasks import write_synthetic_tasks
from electra.flops import PFS_DAY, off_train_flops
from electra.report import write_report
from electra.results import gate, read_pretrain_run
from electra.study import StudySpec, run_study
from tests.helpers import fake_study


def test_the_report_says_what_the_seeds_allow_and_comments_on_a_better_baseline(tmp_path):
    scores = {"electra": [60.0, 61.0, 62.0], "mlm": [70.0, 70.5, 71.0], "none": [75.0, 75.5, 76.0]}
    report = (write_report([fake_study(tmp_path / "s", scores)]) / "report.md").read_text()
    assert "- pretraining did NOT help: electra -14.5 points vs none on rte, seeds' spread" in report
    assert "**The no-pretraining baseline beats electra, mlm.**" in report
    one = (write_report([fake_study(tmp_path / "one", {"electra": [90.0], "none": [50.0]})]) / "report.md").read_text()
    assert "- electra +40.0 points vs none on rte: nothing can be concluded (one fine-tuning seed" in one
    assert "baseline beats" not in one


def test_studies_at_several_budgets_in_one_report_keep_their_settings_apart(tmp_path):
    short = fake_study(tmp_path / "study-3m", {"electra": [60.0, 61.0, 62.0], "none": [70.0, 70.5, 71.0]})
    long = fake_study(tmp_path / "study-30m", {"electra": [80.0, 81.0, 82.0]})
    report = write_report([short, long], tmp_path / "report")
    settings = json.loads((report / "results.json").read_text())["settings"]
    assert sorted(settings) == ["none", "study-30m/electra", "study-3m/electra"]  # a unique name stays as it was
    assert settings["study-30m/electra"]["tasks"]["rte"]["metrics"]["accuracy"]["median"] == 81.0
    text = (report / "report.md").read_text()
    assert "- pretraining helped: study-30m/electra +10.5 points vs none on rte" in text
    assert "- pretraining did NOT help: study-3m/electra -9.5 points vs none on rte" in text


# -- a real study on the built-in language: the four tables and the two figures --------------------------------

PRETRAIN = ["train.batch_size=8", "train.log_every=4", "train.eval_every=8", "train.eval_batches=2",
            "train.save_every=8", "train.warmup_steps=2"]  # fmt: skip
SETTINGS = ["g0.25:model.generator_fraction=0.25", "g1:model.generator_fraction=1.0", "mlm:objective.kind=mlm",
            "none:objective.kind=none"]  # fmt: skip


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """Two generator sizes, MLM and no pretraining at equal steps, two seeds on two built-in tasks (~1 minute)."""
    root = tmp_path_factory.mktemp("sweep")
    tasks = ",".join(str(p) for p in write_synthetic_tasks(root / "tasks")[:2])
    spec = StudySpec(out=str(root / "s"), base="tiny", overrides=PRETRAIN, settings=SETTINGS, budget="steps=16",
                     tasks=tasks, seeds=[0, 1], finetune_overrides=["finetune.max_steps=4"],
                     progress=False)  # fmt: skip
    run_study(spec)
    return root / "s"


def side(report: Path, name: str) -> dict:
    return json.loads((report / f"{name}.json").read_text())


def rows(text: str, heading: str) -> list[list[str]]:
    """The body rows of the markdown table under `heading`, as cells."""
    block = next(b for b in text.split(heading, 1)[1].split("\n\n") if b.startswith("|"))
    return [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()[2:]]


@pytest.mark.slow
def test_table_1_holds_each_runs_compute_from_its_files(sweep):
    text = (sweep / "report" / "report.md").read_text()
    table = {r[0]: r for r in rows(text, "### Table 1: compute per experiment")}
    assert set(table) == {"g0.25", "g1", "mlm", "none"}
    for name in ("g0.25", "g1", "mlm"):
        run = read_pretrain_run(sweep / "runs" / name / "pretrain")
        results = json.loads((sweep / "runs" / name / "glue" / "results.json").read_text())
        _, kind, steps, tokens, flops, pfs, gpus, devices, hours, tuning, wall = table[name]
        assert (kind, steps, tokens) == (run.kind, "16", f"{16 * 8 * run.cfg.data.seq_len:,}")
        assert float(flops) == pytest.approx(off_train_flops(run.cfg, 16), rel=5e-3)
        assert float(pfs) == pytest.approx(off_train_flops(run.cfg, 16) / PFS_DAY, rel=5e-3)
        assert gpus == "1" and devices == "cpu (16 steps)" and wall == "–"  # a CPU has no peak: no pfs-days
        assert float(hours) == pytest.approx(run.meta["train_seconds"] / 3600, rel=5e-3)
        assert float(tuning) == pytest.approx(sum(t["seconds"] for t in results["tasks"].values()) / 3600, rel=5e-3)


@pytest.mark.slow
def test_table_2_and_the_glue_figure_hold_every_seeds_statistics_and_chance(sweep):
    report = sweep / "report"
    text = (report / "report.md").read_text()
    table = {r[0]: r for r in rows(text, "### Table 2: GLUE dev per task")}
    figure = side(report, "glue")["panels"][0]
    for name in ("g0.25", "g1", "mlm", "none"):
        results = json.loads((sweep / "runs" / name / "glue" / "results.json").read_text())
        bar = next(b for b in figure["bars"] if b["model"] == name)
        for i, task in enumerate(figure["tasks"]):
            s = results["tasks"][task]["metrics"]["accuracy"]
            assert table[name][1 + i].startswith(f"{s['median']:.2f}")
            assert f"({s['mean']:.2f} ± {s['std']:.2f}, n=2)" in table[name][1 + i]
            assert bar["height"][i] == s["median"]
        run = read_pretrain_run(sweep / "runs" / name / "pretrain") if name != "none" else None
        assert bar["rejected"] == (run is not None and gate(run).learned is False)
    chance = {h["task"]: h["y"] for h in figure["hlines"]}
    assert chance == {t: results["tasks"][t]["chance"]["baseline"] for t in figure["tasks"]}
    assert "no comparison with OFF or the study" in text  # built-in tasks: nothing published to put beside them


@pytest.mark.slow
def test_table_4_and_figure_2_hold_the_generator_sweep(sweep):
    report = sweep / "report"
    text = (report / "report.md").read_text()
    table = rows(text, "### Table 4: generator size")
    assert [r[0] for r in table] == ["0.25", "1"]
    for r, name in zip(table, ("g0.25", "g1"), strict=True):
        run = read_pretrain_run(sweep / "runs" / name / "pretrain")
        last = run.evals[-1]
        assert r[1] == str(run.cfg.model.generator.hidden_size) and r[2] == "16"
        assert (r[3], r[4], r[5]) == (f"{last['eval_mlm_loss']:.3f}", f"{last['eval_disc_auc']:.3f}",
                                      f"{last['eval_disc_recall']:.3f}")  # fmt: skip
        assert r[6] == ("yes" if run.meta["collapsed"] else "no")
    assert "Warning: the sizes ran unequal steps" not in text  # a steps budget: equal steps
    figure = side(report, "collapse")
    assert [p["key"] for p in figure["panels"]] == ["eval_disc_loss", "eval_disc_accuracy", "eval_disc_precision",
                                                    "eval_disc_recall", "eval_disc_auc", "eval_mlm_loss"]  # fmt: skip
    auc = next(p for p in figure["panels"] if p["key"] == "eval_disc_auc")
    run = read_pretrain_run(sweep / "runs" / "g1" / "pretrain")
    line = next(s for s in auc["lines"] if s["label"].startswith("g1"))
    assert line["x"] == [r["step"] for r in run.evals] and line["y"] == [r["eval_disc_auc"] for r in run.evals]
    assert "mlm" not in {s["label"] for s in auc["lines"]}  # no discriminator to collapse


@pytest.mark.slow
def test_figure_3_and_table_3_from_the_runs(sweep):
    report = sweep / "report"
    mlm = side(report, "dynamics-mlm")
    assert not any("generator" in p["title"] or "discriminator" in p["title"] for p in mlm["panels"])
    electra = side(report, "dynamics-g1")
    run = read_pretrain_run(sweep / "runs" / "g1" / "pretrain")
    loss = next(p for p in electra["panels"] if p["key"] == "mlm_loss")
    assert loss["title"] == "generator loss (masked LM)" and loss["ylabel"] == "nats"
    assert next(s for s in loss["lines"] if s["label"] == "training")["y"] == [r["mlm_loss"] for r in run.train]
    text = (report / "report.md").read_text()
    table = {(r[0], r[1]): r for r in rows(text, "### Table 3: efficiency")}
    assert {("GPT", "quoted (the study)"), ("DistilBERT", "quoted (the study)"),
            ("ELECTRA-Small (the study)", "quoted (the study)"), ("ELECTRA-Small 25%", "quoted (ELECTRA paper "
            "Table 1)"), ("no pretraining", "ours")} <= set(table)  # fmt: skip
    efficiency = side(report, "efficiency")
    assert len(efficiency["panels"]) == 2 and efficiency["panels"][1]["title"].startswith("ours: mean over syn-")
    assert efficiency["panels"][1]["hlines"][0]["y"] == pytest.approx(float(table[("no pretraining", "ours")][5]),
                                                                      abs=0.01)  # fmt: skip


def test_table_2_puts_glue_tasks_beside_the_published_numbers_with_the_mnli_caveat(tmp_path):
    from electra.published import REFERENCE_TASKS

    rte = (write_report([fake_study(tmp_path / "rte", {"electra": [60.0, 62.0]})]) / "report.md").read_text()
    assert "| electra (ours: median / mean ± std) | 61.00 / 61.00 ± 1.41 |" in rte
    for name, row in REFERENCE_TASKS.items():
        assert f"| {name} (quoted) | {row['rte']:.1f} |" in rte
    assert "† MNLI" not in rte  # no MNLI column: no caveat
    mnli = fake_study(tmp_path / "mnli", {"electra": [78.0, 79.0]}, task="mnli", metric="accuracy_m")
    text = (write_report([mnli]) / "report.md").read_text()
    assert "| model | mnli† |" in text and "| the study (RC) (quoted) | 80.2 |" in text
    assert "† MNLI: ours and OFF's are matched accuracy; the study merged matched and mismatched" in text


def test_table_1_counts_every_session_and_wall_clock_pfs_days_where_the_device_has_a_peak(tmp_path):
    from electra.config import load_config
    from electra.flops import pfs_days
    from electra.results import Entry, PretrainRun, compute_row

    meta = {"step": 300, "train_seconds": 7200.0, "sessions": [
        {"device": "cpu", "world_size": 1, "start_step": 0, "start_seconds": 0.0},
        {"device": "NVIDIA H200", "world_size": 2, "start_step": 100, "start_seconds": 3600.0}]}  # fmt: skip
    entry = Entry("resumed", PretrainRun(tmp_path, load_config("tiny"), meta, [], []), None)
    row = compute_row(entry)
    assert row["world_size"] == 2 and [(s["device"], s["steps"], s["seconds"]) for s in row["sessions"]] == [
        ("cpu", 100, 3600.0), ("NVIDIA H200", 200, 3600.0)]  # fmt: skip
    assert row["pfs_days_wall"] is None  # the CPU session has no peak: no wall-clock pfs-days
    meta["sessions"][0]["device"] = "Tesla V100-SXM2-16GB"
    row = compute_row(entry)
    assert row["pfs_days_wall"] == pytest.approx(pfs_days(1 / 24, 1, 15.7) + pfs_days(1 / 24, 2, 989.0))
    old = compute_row(Entry("old", PretrainRun(tmp_path, load_config("tiny"), {"step": 5, "device": "cpu"}, [], []),
                            None))  # fmt: skip
    assert [s["device"] for s in old["sessions"]] == ["cpu"]  # a run.json from before sessions were kept


def test_table_4_warns_when_generator_sizes_ran_unequal_steps(tmp_path):
    from electra.config import load_config
    from electra.report_tables import sweep_entries, sweep_table
    from electra.results import Entry, PretrainRun

    def run(fraction: float, steps: int) -> Entry:
        cfg = load_config("tiny", [f"model.generator_fraction={fraction}"])
        evals = [{"step": steps, "eval_mlm_loss": 4.0, "eval_disc_auc": 0.7, "eval_disc_recall": 0.3}]
        return Entry(f"g{fraction}", PretrainRun(tmp_path, cfg, {"step": steps}, [], evals), None)

    equal = sweep_table(sweep_entries([run(1.0, 100), run(0.25, 100)]), [])
    assert [line.split(" | ")[0] for line in equal[4:6]] == ["| 0.25", "| 1"]  # sorted by size
    assert not any("unequal steps" in line for line in equal)
    unequal = sweep_table(sweep_entries([run(0.25, 120), run(1.0, 80)]), [])
    assert any(line.startswith("**Warning: the sizes ran unequal steps (80, 120)") for line in unequal)
    assert sweep_entries([run(0.25, 100)]) == []  # one size is no sweep


@pytest.mark.slow  # the `sweep` fixture
def test_a_sweep_written_before_results_json_kept_chance_gets_it_from_its_runs(sweep):
    from electra.results import read_glue

    glue = sweep / "runs" / "g1" / "glue"
    current = json.loads((glue / "results.json").read_text())
    old = json.loads(json.dumps(current))
    for entry in old["tasks"].values():
        del entry["chance"], entry["seconds"]
    (glue / "results.json").write_text(json.dumps(old))
    try:
        assert read_glue(glue) == current  # the chance line and the fine-tuning time, from the run records
    finally:
        (glue / "results.json").write_text(json.dumps(current))
