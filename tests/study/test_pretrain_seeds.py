"""`electra study --pretrain-seeds N`: every setting under N pretraining seeds (train.seed + k) as settings NAME-pK
with their own folders, resumable like the rest; one seed reads as a study always did; and a toy study with two
pretraining seeds a side writes the nested report (electra/report/seeds.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from electra.cli import main
from electra.config import ConfigError
from electra.data.synthetic_tasks import write_synthetic_tasks
from electra.study import run as study_run
from electra.study.grid import _NOT_FINGERPRINTED, StudySpec, fingerprint, grid
from electra.study.run import StudyStopped, run_study, start
from electra.training.checkpoint import list_checkpoints
from tests.study.test_study import PRETRAIN


def test_each_setting_is_pretrained_under_each_seed_and_one_seed_names_it_as_before():
    settings = ["electra:", "mlm:objective.kind=mlm;train.seed=5", "none:objective.kind=none"]
    three = grid(StudySpec(out="x", settings=settings, pretrain_seeds=3))
    assert [(s.name, s.group, s.pretrain_seed) for s in three] == [
        ("electra-p0", "electra", 0),
        ("electra-p1", "electra", 1),
        ("electra-p2", "electra", 2),
        ("mlm-p0", "mlm", 5),  # the setting's own seed + k
        ("mlm-p1", "mlm", 6),
        ("mlm-p2", "mlm", 7),
        ("none-p0", "none", 0),  # N initialisations of random weights
        ("none-p1", "none", 1),
        ("none-p2", "none", 2),
    ]
    spec = StudySpec(out="x", settings=settings, pretrain_seeds=3)
    assert [s.config(spec).train.seed for s in three] == [0, 1, 2, 5, 6, 7, 0, 1, 2]
    one = grid(StudySpec(out="x", settings=settings))
    assert [s.name for s in one] == ["electra", "mlm", "none"]  # the names, so the folders, of a study before
    plain = StudySpec(out="x", settings=settings)
    assert [s.config(plain) for s in one] == [
        dataclasses.replace(s, pretrain_seed=None).config(plain) for s in one
    ]  # and the configs


def test_the_pretraining_seeds_of_a_setting_share_its_steps_timed_once(monkeypatch):
    """A seconds budget times each setting's step once: its seeds run the same step, and timing each would give
    them different steps, i.e. unequal budgets within one objective."""
    from electra.study import grid as grid_module

    rates = iter([0.25, 0.5, 0.75, 1.0, 1.25, 1.5])
    monkeypatch.setattr(grid_module, "seconds_per_step", lambda cfg, device: next(rates))
    spec = StudySpec(out="x", vary=["objective.kind=electra,mlm,none"], budget="seconds=60", pretrain_seeds=3)
    settings = grid(spec)
    grid_module.assign_steps(spec, settings)
    steps = {s.name: s.steps for s in settings}
    assert [steps[f"kind=electra-p{k}"] for k in range(3)] == [240] * 3  # 60 s / 0.25 s, timed once
    assert [steps[f"kind=mlm-p{k}"] for k in range(3)] == [120] * 3  # 60 s / 0.5 s
    assert [steps[f"kind=none-p{k}"] for k in range(3)] == [0] * 3
    assert next(rates) == 0.75  # two timings for six pretraining runs


def test_one_pretraining_seed_keeps_the_fingerprint_of_studies_written_before_the_option():
    spec = StudySpec(out="x", vary=["objective.kind=electra,none"])
    before = {k: v for k, v in dataclasses.asdict(spec).items() if k not in _NOT_FINGERPRINTED}
    del before["pretrain_seeds"]  # what a study written before the option hashed
    assert fingerprint(spec) == hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:16]
    assert fingerprint(dataclasses.replace(spec, pretrain_seeds=2)) != fingerprint(spec)


def test_a_bad_number_of_pretraining_seeds_is_refused_in_one_line(tmp_path, capsys):
    for bad in (0, -1):
        with pytest.raises(ConfigError, match=rf"^`pretrain_seeds={bad}`: expected a whole number"):
            start(StudySpec(out=str(tmp_path / "s"), pretrain_seeds=bad))
    assert main(["study", "--out", str(tmp_path / "s"), "--pretrain-seeds", "0"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "electra study: error: --pretrain-seeds 0: expected a whole number of pretraining seeds, 1 or more\n"
    )
    assert not (tmp_path / "s" / "study.json").exists()


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> str:
    return str(write_synthetic_tasks(tmp_path_factory.mktemp("tasks"))[0])  # syn-agree


def seeded(out: Path, task: str, **changes) -> StudySpec:
    base = dict(
        out=str(out),
        base="tiny",
        overrides=PRETRAIN,
        vary=["objective.kind=electra,none"],
        budget="steps=8",
        tasks=task,
        seeds=[0, 1],
        pretrain_seeds=2,
        finetune_overrides=["finetune.max_steps=4"],
        progress=False,
    )
    return StudySpec(**{**base, **changes})


def weights(run: Path) -> dict:
    return load_file(list_checkpoints(run)[-1] / "model.safetensors")


@pytest.mark.slow  # a toy study: 2 pretraining runs, 2 initialisations, 8 fine-tuning runs (~1 minute)
def test_a_study_with_two_pretraining_seeds_resumes_and_writes_the_nested_report(tmp_path, task, monkeypatch):
    out = tmp_path / "s"
    stop = monkeypatch.setattr  # stopped between its phases, as Ctrl-C after pretraining would
    stop(study_run, "finetune_all", lambda spec, settings: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(StudyStopped) as stopped:
        run_study(seeded(out, task))
    assert "  kind=electra-p1: pretrained; 0 of 2 fine-tuning runs finished" in stopped.value.lines
    monkeypatch.undo()
    names = ["kind=electra-p0", "kind=electra-p1", "kind=none-p0", "kind=none-p1"]
    kept = {p: p.stat().st_mtime_ns for n in names for p in (out / "runs" / n / "pretrain").rglob("*.safetensors")}
    run_study(seeded(out, task))  # the same command: only the fine-tuning is left to do
    assert {p: p.stat().st_mtime_ns for p in kept} == kept
    saved = json.loads((out / "study.json").read_text())
    assert [(s["name"], s["group"], s["pretrain_seed"], s["pretrain"]) for s in saved["settings"]] == [
        (n, n.rsplit("-", 1)[0], int(n[-1]), f"runs/{n}/pretrain") for n in names
    ]
    for group in ("kind=electra", "kind=none"):  # two seeds: two different models
        a, b = (weights(out / "runs" / f"{group}-p{k}" / "pretrain") for k in (0, 1))
        assert not all(torch.equal(a[key], b[key]) for key in a), group
    assert json.loads((out / "runs" / "kind=electra-p1" / "pretrain" / "run.json").read_text())["step"] == 8
    # a fine-tuning run lost: the rerun redoes that one only
    lost = out / "runs" / "kind=electra-p1" / "glue" / "runs" / Path(task).name / "seed1"
    results = sorted(out.glob("runs/*/glue/runs/*/*/result.json"))
    before = {p: p.stat().st_mtime_ns for p in results if lost not in p.parents}
    for p in sorted(lost.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    lost.rmdir()
    report = run_study(seeded(out, task))
    assert {p: p.stat().st_mtime_ns for p in before} == before and (lost / "result.json").exists()
    text = (report / "report.md").read_text()
    assert "### Table 5: pretraining seeds" in text and "| kind=electra | syn-agree |" in text
    assert "| **kind=electra** (2 pretraining seeds) | electra | 2 × 8 |" in text
    nested = json.loads((report / "results.json").read_text())["pretrain_seeds"]
    assert nested["kind=electra"]["runs"] == ["kind=electra-p0", "kind=electra-p1"]
    means = [
        json.loads((out / "runs" / n / "glue" / "results.json").read_text())["tasks"][Path(task).name]["metrics"][
            "accuracy"
        ]["mean"]
        for n in ("kind=electra-p0", "kind=electra-p1")
    ]
    assert nested["kind=electra"]["tasks"][Path(task).name]["seed_means"] == pytest.approx(means)
    (verdict,) = [line for line in text.splitlines() if line.startswith("- ")]  # one model a side, not one per run
    assert "kind=electra" in verdict and "kind=none" in verdict and "-p0" not in verdict and "-p1" not in verdict
    assert (
        "2 pretraining seeds a side: the test needs at least 3" in verdict
        or "at chance level for the model that scores higher there: no verdict" in verdict
    )
    with pytest.raises(ConfigError, match=r"other settings \(pretrain_seeds: 2 -> 3\)"):
        run_study(seeded(out, task, pretrain_seeds=3))
