"""The report on continued runs (`pretrain --init`, issue 48): Table 1 gives the FLOPs of a continued run's own
steps with those already spent in the model it started from beside them (unknown for a model trained elsewhere);
the verdicts compare two continuations of one model in one study, and each with the model it started from."""

from __future__ import annotations

import json

from electra.config import load_config
from electra.modeling.flops import off_train_flops
from electra.report.results import Entry, PretrainRun, compute_row
from electra.report.tables import CONTINUED_NOTE, compute_table
from electra.report.write import write_report
from tests.helpers import fake_pretrain_run, fake_study, glue_results
from tests.report.test_answers import LEARNED
from tests.report.test_report import rows


def test_table_1_shows_the_sources_flops_beside_a_continued_runs_own(tmp_path):
    cfg = load_config("tiny")

    def entry(name: str, meta: dict) -> Entry:
        return Entry(name, PretrainRun(tmp_path, cfg, {"step": 300, "sessions": [], **meta}, [], []), None)

    ours = entry("tapt", {"init": {"source": "runs/base", "step": 9000, "flops": 2.5e13}})
    released = entry("dapt", {"init": {"source": "google/electra-small-discriminator", "step": None, "flops": None}})
    scratch = entry("scratch", {})
    assert compute_row(ours)["flops"] == off_train_flops(cfg, 300)  # its own steps only
    assert (compute_row(ours)["source_flops"], compute_row(released)["continued"]) == (2.5e13, True)
    text = "\n".join(compute_table([ours, released, scratch]))
    table = {r[0]: r for r in rows(text, "### Table 1: compute per experiment")}
    own = f"{off_train_flops(cfg, 300):.3g}"
    assert table["tapt"][4] == f"{own} (+ 2.5e+13 in its source)"
    assert table["dapt"][4] == f"{own} (+ unknown in its source)"
    assert table["scratch"][4] == own
    assert CONTINUED_NOTE in text
    assert CONTINUED_NOTE not in "\n".join(compute_table([scratch]))


def test_the_verdicts_compare_two_continuations_of_one_model_and_each_with_the_model_itself(tmp_path):
    base = fake_pretrain_run(tmp_path / "base", 100, LEARNED)
    (base / "glue").mkdir()
    (base / "glue" / "results.json").write_text(json.dumps(glue_results({"sst2": [78.0, 78.4, 78.2]})))
    scores = {"tapt": [82.0, 82.5, 83.0], "wiki": [80.0, 80.3, 80.1], "scratch": [79.0, 79.5, 80.5]}
    study = fake_study(tmp_path / "study", scores, task="sst2")
    init = {"source": str(base), "path": str((base / "checkpoints" / "step_00000100").resolve()), "sha256": "ab" * 32}
    for name in scores:
        run = fake_pretrain_run(study / "runs" / name / "pretrain", 15, LEARNED)
        meta = {"step": 15, "init": None if name == "scratch" else {**init, "flops": 1e12}}
        (run / "run.json").write_text(json.dumps(meta))
    text = (write_report([study, base], tmp_path / "report") / "report.md").read_text()
    said = [line for line in text.splitlines() if line.startswith("- ") and " beats " in line]
    assert [line.split(" (95%")[0] for line in said] == ["- tapt beats wiki", "- tapt beats base", "- wiki beats base"]
    assert "beats scratch" not in text and "scratch beats" not in text  # from scratch: not a continuation of base
