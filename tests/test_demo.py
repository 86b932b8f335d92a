"""`make demo` at a smaller scale: the study's four settings on the built-in language, the plain-words verdict, and
the interface other checks rely on: it ends by printing the report folder, which holds report.md, the PNG figures
it links, and results.json in `electra glue`'s schema."""

import json
import re
from pathlib import Path

import pytest

from electra.demo import SETTINGS, demo, verdict_lines
from tests.helpers import fake_study


@pytest.mark.slow
def test_the_demo_runs_the_study_and_ends_with_the_report_folder(tmp_path, capsys):
    report = demo(tmp_path / "demo", electra_steps=30, seeds=[0], finetune_steps=5)
    printed = capsys.readouterr().out.strip().splitlines()
    assert Path(printed[-1]) == report and report.is_dir()
    text = (report / "report.md").read_text()
    for figure in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert (report / figure).stat().st_size > 5_000, figure  # every linked figure is there
    results = json.loads((report / "results.json").read_text())
    assert {"tasks", "scores", "missing", "settings"} <= set(results)
    assert set(results["settings"]) == {s.split(":")[0] for s in SETTINGS}
    assert set(results["tasks"]) == {"syn-agree", "syn-topic", "syn-entail", "syn-sim"}
    verdict = [line for line in printed if line.startswith("   electra-T3:")]
    assert verdict and "nothing can be concluded" in verdict[0]  # one seed (and tasks at chance): no verdict
    assert any(line.startswith("   at equal FLOPs: ") and "nothing can be concluded" in line for line in printed)


def test_the_verdict_follows_the_seeds(tmp_path):
    one = verdict_lines(fake_study(tmp_path / "one", {"electra": [80.0], "mlm": [60.0], "none": [50.0]}))
    assert one[1] == "   electra: electra +30.0 points vs none on rte: nothing can be concluded (one " \
        "fine-tuning seed: the spread over seeds is unknown)"  # fmt: skip
    assert one[-1].startswith("   at equal FLOPs: electra +20.0 points vs mlm") and "nothing can be" in one[-1]
    three = {"electra": [80.0, 81.0, 82.0], "mlm": [60.0, 61.0, 62.0], "none": [70.0, 70.5, 71.0]}
    three = verdict_lines(fake_study(tmp_path / "three", three))
    assert three[1].startswith("   electra: pretraining helped: electra +10.5 points vs none on rte")
    assert three[2].startswith("   mlm: pretraining did NOT help (no pretraining is better): mlm -9.5 points")
    assert three[-1].startswith("   at equal FLOPs: ELECTRA beats MLM: electra +20.0 points vs mlm")
