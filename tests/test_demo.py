"""`make demo` at a smaller scale: the study's four settings on the built-in language, the plain-words verdict, and
the interface other checks rely on: it ends by printing the report folder, which holds report.md, the PNG figures
it links, and results.json in `electra glue`'s schema."""

import json
import re
from pathlib import Path

import pytest

from electra.demo import SETTINGS, demo


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
    assert verdict and "without pretraining" in verdict[0]
    assert any(line.startswith("   at equal FLOPs,") for line in printed)
