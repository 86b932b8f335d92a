"""`electra report` on made-up studies (study.json and GLUE results.json only): the verdicts, the comment on a
baseline that beats the pretrained models, and the tables and figures' data (the figures are checked through the
data each figure writes beside its PNG, never through pixels)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from electra.data.synthetic_tasks import write_synthetic_tasks
from electra.modeling.flops import PFS_DAY, flops_report, off_train_flops
from electra.report.results import gate, read_pretrain_run
from electra.report.write import write_report
from electra.study.grid import StudySpec
from electra.study.run import run_study
from electra.utils.machine import cpu_model
from tests.helpers import fake_pretrain_run, fake_study, glue_results

LEARNED = [{"step": 10, "eval_masked_accuracy": 0.3, "eval_mlm_majority_rate": 0.1, "eval_disc_auc": 0.8}]
"""A held-out evaluation the learning gate passes (for ELECTRA and MLM alike)."""


def test_the_report_says_what_the_seeds_allow_and_comments_on_a_better_baseline(tmp_path):
    scores = {"electra": [60.0, 61.0, 62.0], "mlm": [70.0, 70.5, 71.0], "none": [75.0, 75.5, 76.0]}
    report = (write_report([fake_study(tmp_path / "s", scores)]) / "report.md").read_text()
    assert (
        "- pretraining did NOT help (95% confidence): electra -14.5 points vs none on rte (mean over 3 seeds; "
        in report
    )
    assert "**Verdicts** at 95% confidence (Welch's t-test on the difference of seed means, at least 3" in report
    assert "**The no-pretraining baseline beats electra, mlm.**" in report
    one = (write_report([fake_study(tmp_path / "one", {"electra": [90.0], "none": [50.0]})]) / "report.md").read_text()
    assert (
        "- electra +40.0 points vs none on rte (mean over 1 seed): nothing can be concluded at 95% confidence "
        "(1 fine-tuning seed a side: the test needs at least 3)." in one
    )
    assert "baseline beats" not in one


def test_the_report_never_says_helped_of_a_pretraining_the_gate_rejects(tmp_path):
    """The shipped real-text report said "pretraining helped" of a model its own gate column called NEVER LEARNED:
    a higher score, however clear, from a pretraining that did not learn is not that pretraining's doing."""
    study = fake_study(tmp_path / "s", {"electra": [80.0, 81.0, 82.0], "none": [60.0, 61.0, 62.0]})
    never = [{**LEARNED[0], "eval_disc_auc": 0.597}]
    fake_pretrain_run(study / "runs" / "electra" / "pretrain", 10, never)
    text = (write_report([study]) / "report.md").read_text()
    assert "helped" not in text.split("**Verdicts**")[1].split("**Never left")[0]
    assert (
        "- electra +20.0 points vs none on rte (mean over 3 seeds; 95% interval ±2.3, Welch's t 24.49, df 4.0, "
        "p < 0.001): nothing can be concluded at 95% confidence (electra's pretraining never learned (the learning "
        "gate): its higher score is not that pretraining's doing)." in text
    )
    gates = json.loads((study / "report" / "results.json").read_text())["gates"]  # comparable without the run folders
    assert gates == {"electra": {"learned": False, "collapsed": False}, "none": {"learned": None, "collapsed": False}}


def test_studies_at_several_budgets_in_one_report_keep_their_settings_apart(tmp_path):
    short = fake_study(tmp_path / "study-3m", {"electra": [60.0, 61.0, 62.0], "none": [70.0, 70.5, 71.0]})
    long = fake_study(tmp_path / "study-30m", {"electra": [80.0, 81.0, 82.0]})
    report = write_report([short, long], tmp_path / "report")
    settings = json.loads((report / "results.json").read_text())["settings"]
    assert sorted(settings) == ["none", "study-30m/electra", "study-3m/electra"]  # a unique name stays as it was
    assert settings["study-30m/electra"]["tasks"]["rte"]["metrics"]["accuracy"]["median"] == 81.0
    text = (report / "report.md").read_text()
    assert "- pretraining helped (95% confidence): study-30m/electra +10.5 points vs none on rte" in text
    assert "- pretraining did NOT help (95% confidence): study-3m/electra -9.5 points vs none on rte" in text


# -- a real study on the built-in language: the four tables and the two figures --------------------------------

PRETRAIN = [
    "train.batch_size=8",
    "train.log_every=4",
    "train.eval_every=8",
    "train.eval_batches=2",
    "train.save_every=8",
    "train.warmup_steps=2",
]
SETTINGS = [
    "g0.25:model.generator_fraction=0.25",
    "g1:model.generator_fraction=1.0",
    "mlm:objective.kind=mlm",
    "none:objective.kind=none",
]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """Two generator sizes, MLM and no pretraining at equal steps, two seeds on two built-in tasks (~1 minute)."""
    root = tmp_path_factory.mktemp("sweep")
    tasks = ",".join(str(p) for p in write_synthetic_tasks(root / "tasks")[:2])
    spec = StudySpec(
        out=str(root / "s"),
        base="tiny",
        overrides=PRETRAIN,
        settings=SETTINGS,
        budget="steps=16",
        tasks=tasks,
        seeds=[0, 1],
        finetune_overrides=["finetune.max_steps=4"],
        progress=False,
    )
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
        _, kind, steps, tokens, flops, pfs, gpus, devices, precision, hours, tuning, wall = table[name]
        assert precision == f"{run.meta['precision']}, TF32 off"  # what the run resolved; no TF32 on a CPU
        assert (kind, steps, tokens) == (run.kind, "16", f"{16 * 8 * run.cfg.data.seq_len:,}")
        assert float(flops) == pytest.approx(off_train_flops(run.cfg, 16), rel=5e-3)
        assert float(pfs) == pytest.approx(off_train_flops(run.cfg, 16) / PFS_DAY, rel=5e-3)
        assert gpus == "0" and wall == "–"  # a CPU has no peak: no pfs-days
        assert re.fullmatch(r"cpu \[M\d\] \(16 steps\)", devices)  # keyed to its machine in the legend
        assert float(hours) == pytest.approx(run.meta["train_seconds"] / 3600, rel=5e-3)
        tuning_hours, *marks = tuning.split()
        assert float(tuning_hours) == pytest.approx(
            sum(t["seconds"] for t in results["tasks"].values()) / 3600, rel=5e-3
        )
        assert marks and all(re.fullmatch(r"\[M\d\]", m) for m in marks)
    assert f"Machines (the times beside each key were taken there): [M1] {cpu_model()}" in text


@pytest.mark.slow
def test_table_2_and_the_glue_figure_hold_every_seeds_statistics_and_chance(sweep):
    report = sweep / "report"
    text = (report / "report.md").read_text()
    table = {r[0].split(" [")[0]: r for r in rows(text, "### Table 2: GLUE dev per task")}  # without the marks
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
        assert (r[3], r[4], r[5]) == (
            f"{last['eval_mlm_loss']:.3f}",
            f"{last['eval_disc_auc']:.3f}",
            f"{last['eval_disc_recall']:.3f}",
        )
        assert r[6] == ("yes" if run.meta["collapsed"] or gate(run).collapsed else "no") and r[7] == gate(run).word
        results = json.loads((sweep / "runs" / name / "glue" / "results.json").read_text())
        medians = [t["metrics"]["accuracy"]["median"] for t in results["tasks"].values()]
        assert len(medians) == 2 and r[8] == f"{sum(medians) / 2:.2f}"  # the task mean of both tasks
    assert "Warning: the sizes ran unequal steps" not in text  # a steps budget: equal steps
    figure = side(report, "collapse")
    assert [p["key"] for p in figure["panels"]] == [
        "eval_disc_loss",
        "eval_disc_accuracy",
        "eval_disc_precision",
        "eval_disc_recall",
        "eval_disc_auc",
        "eval_mlm_loss",
        "eval_disc_effective_rank",  # logged since the rank existed
    ]
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
    assert {
        ("GPT", "quoted (the study)"),
        ("DistilBERT", "quoted (the study)"),
        ("ELECTRA-Small (the study)", "quoted (the study)"),
        ("ELECTRA-Small 25%", "quoted (ELECTRA paper Table 1)"),
        ("no pretraining", "ours"),
    } <= set(table)
    for name in ("g0.25", "g1", "mlm"):
        run = read_pretrain_run(sweep / "runs" / name / "pretrain")
        _, _, params, flops, pfs, *_ = table[(name, "ours")]
        total = flops_report(run.cfg, 16)["total_flops"]  # what `electra flops` prints for the run
        assert params == f"{body_parameters(run.cfg) / 1e6:.2f}M" and float(flops) == pytest.approx(total, rel=5e-3)
        assert float(pfs) == pytest.approx(total / PFS_DAY, rel=5e-3)
    efficiency = side(report, "efficiency")
    assert len(efficiency["panels"]) == 2 and efficiency["panels"][1]["title"].startswith("ours: mean over syn-")
    assert [p["ylabel"] for p in efficiency["panels"]] == [
        "GLUE dev score, mean of 8 tasks (%)",
        "dev score, mean of 2 tasks (%)",
    ]
    assert efficiency["panels"][1]["hlines"][0]["y"] == pytest.approx(
        float(table[("no pretraining", "ours")][5]), abs=0.01
    )


def body_parameters(cfg) -> int:
    """What fine-tuning starts from, counted on the model itself: the embeddings and the discriminator's body (the
    masked LM's, for MLM)."""
    from electra.modeling.electra import build_model

    with torch.device("meta"):
        model = build_model(cfg)
    body = model.masked_lm.electra if cfg.objective.kind == "mlm" else model.discriminator.electra
    return sum(p.numel() for m in (model.embeddings, body) for p in m.parameters())


def test_a_study_on_all_nine_tasks_shares_the_literatures_panel_averaging_the_papers_eight(tmp_path):
    """8 tasks + WNLI: ours average exactly the paper's 8 in the literature's panel (WNLI would otherwise keep them
    apart for good); Table 3's row of ours holds the model's parameters and `electra flops`' FLOPs."""
    from electra.glue.report import AGGREGATES
    from electra.report.results import collect
    from electra.report.tables import efficiency_points
    from electra.report.write import PAPER_AVERAGE

    paper = [t for t, _ in AGGREGATES["paper"]]
    electra = {t: [60.0 + i, 61.0 + i] for i, t in enumerate(paper)} | {"wnli": [30.0, 31.0]}  # WNLI pulls down
    none = {t: [50.0, 51.0] for t in [*paper, "wnli"]}
    study = fake_study(tmp_path / "s", {"electra": electra, "none": none}, metric=None)
    run = read_pretrain_run(
        fake_pretrain_run(study / "runs" / "electra" / "pretrain", 40, overrides=["model.position_embedding=rotary"])
    )
    entries, _ = collect([study])
    (point,) = efficiency_points(entries, paper)
    assert point["params"] == body_parameters(run.cfg)  # rotary positions: no position table to count
    report = write_report([study])
    (panel,) = side(report, "efficiency")["panels"]
    assert panel["tasks"] == paper and panel["ylabel"] == "GLUE dev score, mean of 8 tasks (%)"
    ours = [(p["label"], p["y"]) for p in panel["points"] if p["source"] == "ours"]
    assert ours == [("electra", pytest.approx(64.0))]  # the 8 medians 60.5 ... 67.5; with WNLI it would be 60.3
    assert [h["y"] for h in panel["hlines"]] == [50.5]  # no pretraining, on the same 8 tasks
    text = (report / "report.md").read_text()
    assert "in one panel, both averaging the paper's 8 tasks (wnli left out of ours)" in text
    row = {(r[0], r[1]): r for r in rows(text, "### Table 3: efficiency")}[("electra", "ours")]
    _, _, params, flops, pfs, score, _, averages = row
    assert params == f"{body_parameters(run.cfg) / 1e6:.2f}M" and averages == PAPER_AVERAGE and score == "64.00"
    total = flops_report(run.cfg, 40)["total_flops"]  # what `electra flops` prints for the run's config and steps
    assert float(flops) == pytest.approx(total, rel=5e-3) and float(pfs) == pytest.approx(total / PFS_DAY, rel=5e-3)


def test_table_2_puts_glue_tasks_beside_the_published_numbers_with_the_mnli_caveat(tmp_path):
    from electra.report.published import REFERENCE_TASKS

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
    from electra.modeling.flops import pfs_days
    from electra.report.results import Entry, PretrainRun, compute_row

    meta = {
        "step": 300,
        "train_seconds": 7200.0,
        "sessions": [
            {"device": "cpu", "world_size": 1, "start_step": 0, "start_seconds": 0.0},
            {"device": "NVIDIA H200", "world_size": 2, "start_step": 100, "start_seconds": 3600.0},
        ],
    }
    entry = Entry("resumed", PretrainRun(tmp_path, load_config("tiny"), meta, [], []), None)
    row = compute_row(entry)
    assert row["world_size"] == row["gpus"] == 2  # the most GPUs any session ran on
    assert [(s["device"], s["steps"], s["seconds"]) for s in row["sessions"]] == [
        ("cpu", 100, 3600.0),
        ("NVIDIA H200", 200, 3600.0),
    ]
    assert row["pfs_days_wall"] is None  # the CPU session has no peak: no wall-clock pfs-days
    meta["sessions"][0]["device"] = "Tesla V100-SXM2-16GB"
    row = compute_row(entry)
    assert row["pfs_days_wall"] == pytest.approx(pfs_days(1 / 24, 1, 15.7) + pfs_days(1 / 24, 2, 989.0))
    old = compute_row(
        Entry("old", PretrainRun(tmp_path, load_config("tiny"), {"step": 5, "device": "cpu"}, [], []), None)
    )
    assert [s["device"] for s in old["sessions"]] == ["cpu"]  # a run.json from before sessions were kept


def test_table_1_claims_no_gpu_for_a_cpu_session_and_says_1_step(tmp_path):
    from electra.config import load_config
    from electra.report.results import Entry, PretrainRun
    from electra.report.tables import compute_table

    def table(sessions: list[tuple[str, int, int]], step: int) -> list[str]:
        meta = {
            "step": step,
            "train_seconds": 60.0,
            "sessions": [{"device": d, "world_size": w, "start_step": s, "start_seconds": 0.0} for d, w, s in sessions],
        }
        entry = Entry("run", PretrainRun(tmp_path, load_config("tiny"), meta, [], []), None)
        (row,) = rows("\n".join(compute_table([entry])), "### Table 1: compute per experiment")
        return row[6:8]  # GPUs, device per session

    assert table([("cpu", 1, 0)], 1) == ["0", "cpu (1 step)"]
    assert table([("cpu", 1, 0), ("NVIDIA H200", 2, 1)], 5) == ["2", "cpu (1 step); NVIDIA H200 ×2 (4 steps)"]


def test_table_1_keys_each_session_and_sweep_to_the_machine_its_times_were_taken_on(tmp_path):
    """A CPU's model in a legend under Table 1, keyed from the session that ran there and from the fine-tuning
    hours of a sweep that ran there; each machine once, in order of first appearance."""
    from electra.config import load_config
    from electra.report.results import Entry, PretrainRun
    from electra.report.tables import compute_table

    xeon, epyc = "Intel(R) Xeon(R) Processor (family 6 model 143), 1 thread of 2 cores", "AMD EPYC 9B45, 1 thread"
    meta = {
        "step": 300,
        "train_seconds": 7200.0,
        "sessions": [
            {"device": "cpu", "machine": xeon, "world_size": 1, "start_step": 0, "start_seconds": 0.0},
            {"device": "cpu", "machine": epyc, "world_size": 1, "start_step": 100, "start_seconds": 3600.0},
        ],
    }
    glue = glue_results({"rte": [60.0, 61.0, 62.0]})
    glue["tasks"]["rte"]["seconds"], glue["tasks"]["rte"]["machines"] = 1800.0, [epyc]
    entry = Entry("run", PretrainRun(tmp_path, load_config("tiny"), meta, [], []), glue)
    text = "\n".join(compute_table([entry]))
    (row,) = rows(text, "### Table 1: compute per experiment")
    assert row[7] == "cpu [M1] (100 steps); cpu [M2] (200 steps)" and row[10] == "0.5 [M2]"
    assert f"Machines (the times beside each key were taken there): [M1] {xeon}; [M2] {epyc}." in text
    baseline = Entry("none", None, None, baseline=True)  # random initialisation: no pretraining, no GPU
    (row,) = rows("\n".join(compute_table([baseline])), "### Table 1: compute per experiment")
    assert row[6:9] == ["0", "–", "–"]
    old = Entry("old", PretrainRun(tmp_path, load_config("tiny"), {"step": 1, "sessions": []}, [], []), None)
    (row,) = rows("\n".join(compute_table([old])), "### Table 1: compute per experiment")
    assert row[8] == "?, TF32 ?"  # a run older than the keys: said, not guessed
    meta = {"step": 1, "sessions": [], "precision": "bf16", "tf32": True}
    new = Entry("new", PretrainRun(tmp_path, load_config("tiny"), meta, [], []), None)
    (row,) = rows("\n".join(compute_table([new])), "### Table 1: compute per experiment")
    assert row[8] == "bf16, TF32 on"


def test_table_4_warns_when_generator_sizes_ran_unequal_steps(tmp_path):
    from electra.config import load_config
    from electra.report.results import Entry, PretrainRun
    from electra.report.tables import sweep_entries, sweep_table

    def run(fraction: float, steps: int, aucs: tuple[float, ...] = (0.7,), glue: dict | None = None) -> Entry:
        cfg = load_config("tiny", [f"model.generator_fraction={fraction}"])
        evals = [
            {
                "step": steps * (i + 1) // len(aucs),
                "eval_mlm_loss": 4.0,
                "eval_disc_auc": auc,
                "eval_disc_recall": 0.3,
                "eval_masked_accuracy": 0.3,
                "eval_mlm_majority_rate": 0.1,
            }
            for i, auc in enumerate(aucs)
        ]
        return Entry(f"g{fraction}", PretrainRun(tmp_path, cfg, {"step": steps}, [], evals), glue)

    equal = sweep_table(sweep_entries([run(1.0, 100), run(0.25, 100)]), [])
    assert [line.split(" | ")[0] for line in equal[4:6]] == ["| 0.25", "| 1"]  # sorted by size
    assert not any("unequal steps" in line for line in equal)
    unequal = sweep_table(sweep_entries([run(0.25, 120), run(1.0, 80)]), [])
    assert any(line.startswith("**Warning: the sizes ran unequal steps (80, 120)") for line in unequal)
    assert sweep_entries([run(0.25, 100)]) == []  # one size is no sweep
    # the gate's word and the GLUE task mean (each task's median over seeds) per size
    learned = run(0.25, 100, glue=glue_results({"rte": [60.0, 62.0], "sst2": [70.0, 71.0]}))
    collapsed = run(1.0, 100, aucs=(0.8, 0.5), glue=glue_results({"rte": [50.0, 51.0], "sst2": [52.0, 52.0]}))
    table = rows("\n".join(sweep_table(sweep_entries([collapsed, learned]), ["rte", "sst2"])), "### Table 4")
    assert [r[4:] for r in table] == [
        ["0.700", "0.300", "no", "learned", "65.75"],
        ["0.500", "0.300", "yes", "collapsed", "51.25"],
    ]


@pytest.mark.slow  # the `sweep` fixture
def test_a_sweep_written_before_results_json_kept_chance_gets_it_from_its_runs(sweep):
    from electra.report.results import read_glue

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


def test_a_report_rederives_the_collapse_flag_from_the_held_out_curve(tmp_path):
    """run.json's flag is what the watch said when the run ran; the report applies today's rule to the curve, so a
    discriminator whose AUC climbed past the gate at a low recall (an older run flagged it) is not called collapsed,
    and one whose last `collapse_patience` evaluations sit at AUC ~0.52 is."""
    rising = [{"step": s, "eval_disc_recall": 0.03, "eval_disc_auc": a} for s, a in ((1, 0.64), (2, 0.67), (3, 0.72))]
    run = read_pretrain_run(fake_pretrain_run(tmp_path / "rising", 3, rising))
    (run.path / "run.json").write_text(json.dumps({"step": 3, "collapsed": True}))
    assert not read_pretrain_run(run.path).collapsed
    flat = [{**r, "eval_disc_auc": 0.52} for r in rising]
    assert read_pretrain_run(fake_pretrain_run(tmp_path / "flat", 3, flat)).collapsed
    assert not read_pretrain_run(fake_pretrain_run(tmp_path / "short", 2, flat[:2])).collapsed  # 2 < patience 3


def test_several_studies_measure_each_model_against_its_own_baseline_and_electra_against_mlm_at_one_budget(tmp_path):
    """The real-text budgets report: the 30-minute study has the random-init baseline, the 10-minute one (same
    prepared corpus) has none, the demo has its own on its own corpus. Each pretrained model is measured against
    its study's baseline, else the one built from the same corpus, never one of another shape (a larger model's
    study whose own random start is not fine-tuned yet gets no verdict against the small model's); ELECTRA is
    compared with MLM only inside a study (across budgets it would not be at equal FLOPs)."""

    def study(name, scores, data, mlm=(), shape=()):
        root = fake_study(tmp_path / name, scores, data=data, kinds=dict.fromkeys(mlm, "mlm"))
        for setting in scores:  # a study's none has a step-0 run: its config, no training
            kind = ["objective.kind=mlm"] if setting in mlm else []
            steps, evals = (0, []) if setting == "none" else (10, LEARNED)
            fake_pretrain_run(root / "runs" / setting / "pretrain", steps, evals, [f"data.path={data}", *shape, *kind])
        return root

    demo = study("demo", {"electra": [60.0, 60.5, 61.0], "none": [70.0, 70.5, 71.0]}, "demo/data")
    ten = study("study-10m", {"electra": [80.0, 80.5, 81.0], "mlm": [90.0, 90.5, 91.0]}, "wiki", mlm=["mlm"])
    thirty = study("study-30m", {"none": [50.0, 50.5, 51.0]}, "wiki")
    text = (write_report([demo, ten, thirty], tmp_path / "report") / "report.md").read_text()
    verdicts = [line for line in text.splitlines() if line.startswith("- ")]
    assert "- pretraining did NOT help (95% confidence): demo/electra -10.0 points vs demo/none on rte" in text
    assert "- pretraining helped (95% confidence): study-10m/electra +30.0 points vs study-30m/none on rte" in text
    assert "- pretraining helped (95% confidence): mlm +40.0 points vs study-30m/none on rte" in text  # unique name
    assert [v for v in verdicts if "MLM" in v] == [
        "- ELECTRA does NOT beat MLM (95% confidence): study-10m/electra -10.0 points vs mlm on rte (mean over 3 "
        "seeds; 95% interval ±1.1, Welch's t -24.49, df 4.0, p < 0.001)."
    ]
    wide = ["model.num_layers=4", "model.hidden_size=128", "model.num_heads=2", "model.intermediate_size=512"]
    big = study("wide-30m", {"electra": [60.0, 60.5, 61.0]}, "wiki", shape=wide)
    text = (write_report([ten, thirty, big], tmp_path / "unfinished") / "report.md").read_text()
    assert "study-10m/electra +30.0 points vs none" in text and "wide-30m/electra" in text
    assert not [line for line in text.splitlines() if line.startswith("- ") and "wide-30m/electra" in line]
    fake_study(tmp_path / "wide-none", {"none": [65.0, 65.5, 66.0]})  # the large study's random start, fine-tuned
    (big / "runs" / "none").mkdir()
    (tmp_path / "wide-none" / "runs" / "none" / "glue").rename(big / "runs" / "none" / "glue")
    fake_pretrain_run(big / "runs" / "none" / "pretrain", 0, [], ["data.path=wiki", *wide])
    spec = json.loads((big / "study.json").read_text())
    spec["settings"].append(
        {
            **spec["settings"][0],
            "name": "none",
            "kind": "none",
            "pretrain": "runs/none/pretrain",
            "glue": "runs/none/glue",
        }
    )
    (big / "study.json").write_text(json.dumps(spec))
    text = (write_report([ten, thirty, big], tmp_path / "finished") / "report.md").read_text()
    assert "- pretraining did NOT help (95% confidence): wide-30m/electra -5.0 points vs wide-30m/none on rte" in text
    assert "study-10m/electra +30.0 points vs study-30m/none" in text  # the small model keeps the small one


def test_studies_at_several_budgets_draw_each_tasks_score_against_flops_beside_the_baseline(tmp_path):
    """The crossover figure: per task, one line per objective through its budgets in FLOPs order (median, with
    min..max in the data), random initialisation's median and min..max band, and chance; read from crossover.json.
    With two model sizes, one line per objective and size."""

    def study(name, scores, steps, mlm=(), size=()):
        root = fake_study(tmp_path / name, scores, data="wiki", kinds=dict.fromkeys(mlm, "mlm"))
        for setting in set(scores) - {"none"}:
            kind = ["objective.kind=mlm"] if setting in mlm else []
            fake_pretrain_run(root / "runs" / setting / "pretrain", steps[setting], overrides=[*size, *kind])
        return root

    long = study(
        "study-30m",
        {"electra": [80.0, 81.0, 82.0], "mlm": [83.0, 84.0, 85.0], "none": [70.0, 71.0, 72.0]},
        {"electra": 300, "mlm": 500},
        mlm=["mlm"],
    )
    short = study(
        "study-3m", {"electra": [60.0, 61.0, 62.0], "mlm": [75.0, 76.0, 77.0]}, {"electra": 30, "mlm": 50}, mlm=["mlm"]
    )
    report = write_report([long, short], tmp_path / "report")  # the longer budget first: lines go by FLOPs
    (panel,) = side(report, "crossover")["panels"]
    assert panel["task"] == "rte" and panel["xscale"] == "log"
    lines = {line["label"]: line for line in panel["lines"]}
    assert lines["electra"]["names"] == ["study-3m/electra", "study-30m/electra"]
    assert lines["electra"]["y"] == [61.0, 81.0] and lines["electra"]["low"] == [60.0, 80.0]
    assert lines["mlm"]["y"] == [76.0, 84.0] and lines["mlm"]["x"] == sorted(lines["mlm"]["x"])
    assert lines["electra"]["x"][0] < lines["electra"]["x"][1]
    assert [
        (h["y"], h["style"]) for h in panel["hlines"] if h.get("band_of") or "no pretraining" in str(h["label"])
    ] == [(71.0, "--"), (70.0, ":"), (72.0, ":")]
    assert "crossover.png" in (report / "report.md").read_text()
    one = write_report([long], tmp_path / "one")  # one budget: no curve to draw
    assert not (one / "crossover.json").exists()
    # a larger model at the 30-minute FLOPs is a line of its own, not a third point on the small model's
    wide = ["model.num_layers=4", "model.hidden_size=128", "model.num_heads=2", "model.intermediate_size=512"]
    big = study("wide-30m", {"electra": [90.0, 91.0, 92.0]}, {"electra": 40}, size=wide)
    (panel,) = side(write_report([long, short, big], tmp_path / "sizes"), "crossover")["panels"]
    lines = {line["label"]: line for line in panel["lines"]}
    assert set(lines) == {
        "electra (2 layers, hidden 64)",
        "mlm (2 layers, hidden 64)",
        "electra (4 layers, hidden 128)",
    }
    assert lines["electra (2 layers, hidden 64)"]["names"] == ["study-3m/electra", "study-30m/electra"]
    assert lines["electra (4 layers, hidden 128)"]["names"] == ["wide-30m/electra"]
    assert lines["electra (4 layers, hidden 128)"]["y"] == [91.0]


def test_electra_minus_mlm_is_tabled_and_drawn_by_budget_and_model_size_with_the_verdicts_numbers(tmp_path):
    """Issue 27's size axis: each study's ELECTRA − MLM (the verdict's difference of seed means, its 95% interval
    and p), a row per study ordered by size then FLOPs, and a figure with one line per model size in FLOPs order
    (electra-minus-mlm.json), an error bar of the interval, zero as reference."""

    def study(name, electra, mlm, steps, size=()):
        root = fake_study(tmp_path / name, {"electra": electra, "mlm": mlm}, data="wiki", kinds={"mlm": "mlm"})
        for setting, kind in (("electra", []), ("mlm", ["objective.kind=mlm"])):
            run = root / "runs" / setting / "pretrain"
            fake_pretrain_run(run, steps[setting], LEARNED, [*size, *kind])
        return root

    wide = ["model.num_layers=4", "model.hidden_size=128", "model.num_heads=2", "model.intermediate_size=512"]
    small_long = study("small-30m", [80.0, 81.0, 82.0], [79.0, 80.0, 81.0], {"electra": 300, "mlm": 500})
    small_short = study("small-3m", [60.0, 61.0, 62.0], [65.0, 66.0, 67.0], {"electra": 30, "mlm": 50})
    big = study("wide-30m", [85.0, 86.0, 87.0], [80.0, 80.5, 81.0], {"electra": 40, "mlm": 60}, wide)
    report = write_report([small_long, big, small_short], tmp_path / "report")
    text = (report / "report.md").read_text()
    table = rows(text, "### ELECTRA − MLM at equal FLOPs, by budget and model size")
    assert [(r[0], r[1]) for r in table] == [
        ("2 layers, hidden 64", "small-3m/electra − small-3m/mlm"),
        ("2 layers, hidden 64", "small-30m/electra − small-30m/mlm"),
        ("4 layers, hidden 128", "wide-30m/electra − wide-30m/mlm"),
    ]
    three, thirty, wide_row = table
    # the verdicts' numbers: -5.0 (Welch: 3 seeds of std 1 a side, t -6.12, df 4), +1.0 (p 0.29), +5.5
    assert three[3:6] == ["-5.0", "±2.3", "0.004"] and three[-1] == "MLM better"
    assert thirty[3:6] == ["+1.0", "±2.3", "0.288"] and thirty[-1].startswith("not resolved: p ≥ 0.05")
    assert wide_row[3] == "+5.5" and wide_row[-1] == "ELECTRA better" and wide_row[6:8] == ["3", "rte"]
    (panel,) = side(report, "electra-minus-mlm")["panels"]
    lines = {line["label"]: line for line in panel["lines"]}
    small = lines["2 layers, hidden 64"]
    assert small["names"] == ["small-3m/electra", "small-30m/electra"] and small["x"] == sorted(small["x"])
    assert small["y"] == pytest.approx([-5.0, 1.0]) and small["err"] == pytest.approx([2.2669, 2.2669], abs=1e-3)
    assert lines["4 layers, hidden 128"]["y"] == pytest.approx([5.5])
    assert panel["xscale"] == "log" and [h["y"] for h in panel["hlines"]] == [0.0]
    alone = write_report([small_long], tmp_path / "alone")  # one pair: the verdict says it all
    assert not (alone / "electra-minus-mlm.json").exists()


def test_table_3_divides_by_pfs_days_only_the_tasks_above_chance_and_marks_what_bounds_each_score(tmp_path):
    """A task at chance level measures no pretraining: score per pfs-day averages the others (said under the
    table), or says there are none; a capped fine-tuning and a `train.max_steps` changed on resume are marked next
    to the score they bound (and next to the model's GLUE numbers in Table 2), each with its line under the table."""
    study = fake_study(tmp_path / "s", {"part": {}, "flat": {}, "none": {"rte": [50.0] * 3, "sst2": [50.0] * 3}})
    glue = study / "runs"
    scores = {"rte": [60.0, 62.0, 64.0], "sst2": [70.0, 72.0, 74.0]}
    (glue / "part" / "glue" / "results.json").write_text(json.dumps(glue_results(scores, at_chance=("rte",))))
    (glue / "flat" / "glue" / "results.json").write_text(json.dumps(glue_results(scores, at_chance=("rte", "sst2"))))
    (glue / "part" / "glue" / "sweep.json").write_text(json.dumps({"model": "x", "config": {"max_steps": 200}}))
    part = fake_pretrain_run(glue / "part" / "pretrain", 40, LEARNED)  # a model the gate passes: judged on its tasks
    session = {"device": "cpu", "world_size": 1, "start_seconds": 0.0}
    (part / "run.json").write_text(
        json.dumps(
            {
                "step": 40,
                "sessions": [
                    {**session, "start_step": 0, "max_steps": 20},
                    {**session, "start_step": 20, "max_steps": 40},
                ],
            }
        )
    )
    fake_pretrain_run(glue / "flat" / "pretrain", 40, LEARNED)
    text = (write_report([study]) / "report.md").read_text()
    table = {(r[0], r[1]): r for r in rows(text, "### Table 3: efficiency")}
    _, _, _, _, pfs, score, per_pfs, _ = table[("part", "ours")]
    assert score == "67.00 [1] [2]"  # the mean of both tasks' medians, 62 and 72
    value, mark = per_pfs.rsplit(" ", 1)  # sst2's 72 only (pfs-days shown to 3 digits; 67 would be 7% off)
    assert float(value.replace(",", "")) == pytest.approx(72.0 / float(pfs), rel=6e-3) and mark == "[3]"
    assert table[("flat", "ours")][5:7] == ["67.00", "–, no task above chance"]
    assert "[1] fine-tuning capped at 200 steps per task (`finetune.max_steps`), not the recipe's epochs." in text
    assert "[2] `train.max_steps` changed to 40 on resume at step 20; the learning-rate schedule changed there." in text
    assert "[3] score per pfs-day averages the tasks above chance only (sst2; rte at chance level, left out)." in text
    # and in Table 2, next to the GLUE numbers they bound, with their lines under it
    glue_rows = {r[0]: r for r in rows(text, "### Table 2: GLUE dev per task")}
    assert "part [1] [2]" in glue_rows and "flat" in glue_rows
    table2 = text[text.index("### Table 2") : text.index("### Table 3")]
    assert "[1] fine-tuning capped at 200 steps per task" in table2 and "[2] `train.max_steps` changed" in table2


def test_table_3_gives_no_score_per_pfs_day_to_a_model_the_gate_rejects(tmp_path):
    """A model whose pretraining never left the plateau scores what fine-tuning alone gives: divided by its few
    pfs-days that made an efficiency hundreds of thousands of times ELECTRA-Small's. It gets a dash and a note."""
    plateau = [{"step": 40, "eval_masked_accuracy": 0.1, "eval_mlm_majority_rate": 0.1, "eval_disc_auc": 0.52}]
    study = fake_study(tmp_path / "s", {"stuck": [70.0, 72.0, 74.0], "good": [70.0, 72.0, 74.0]})
    fake_pretrain_run(study / "runs" / "stuck" / "pretrain", 40, plateau)
    fake_pretrain_run(study / "runs" / "good" / "pretrain", 40, LEARNED)
    text = (write_report([study]) / "report.md").read_text()
    table = {(r[0], r[1]): r for r in rows(text, "### Table 3: efficiency")}
    _, _, _, _, pfs, score, per_pfs, _ = table[("stuck", "ours")]
    assert (score, per_pfs) == ("72.00", "– [1]")
    assert "[1] no score per pfs-day: the learning gate says NEVER LEARNED (see the gate's verdicts)" in text
    _, _, _, _, pfs, score, per_pfs, _ = table[("good", "ours")]  # the same scores from a model that learned
    assert float(per_pfs.replace(",", "")) == pytest.approx(72.0 / float(pfs), rel=6e-3)


def test_a_summary_without_common_tasks_says_why_in_a_sentence(tmp_path):
    study = fake_study(tmp_path / "s", {"electra": {"rte": [60.0] * 3}, "none": {"sst2": [50.0] * 3}})
    text = (write_report([study]) / "report.md").read_text()
    assert "no common tasks" not in text
    assert (
        "## Summary\n\nNo task was fine-tuned for every model with GLUE results, so there is no task mean to "
        "compare them on (Table 2 has each model's tasks).\n" in text
    )


def test_two_lone_runs_in_folders_of_one_name_are_named_apart_in_tables_and_figure_titles(tmp_path):
    """Two runs both in folders named `cpu` (a/cpu, b/cpu): each table row and each figure's title names its own."""
    runs = [fake_pretrain_run(tmp_path / side_ / "cpu", 10, LEARNED) for side_ in ("a", "b")]
    report = write_report(runs, tmp_path / "report")
    text = (report / "report.md").read_text()
    names = [r[0] for r in rows(text, "### Table 1")]
    assert names == ["a/cpu", "b/cpu"]
    titles = sorted(side(report, f"dynamics-{n.replace('/', '-')}")["title"] for n in names)
    assert titles == ["a/cpu (electra)", "b/cpu (electra)"]
