"""`electra report` on made-up studies (study.json and GLUE results.json only): the verdicts, the comment on a
baseline that beats the pretrained models, and the tables and figures' data (the figures are checked through the
data each figure writes beside its PNG, never through pixels)."""

from __future__ import annotations

from electra.report import write_report
from tests.helpers import fake_study


def test_the_report_says_what_the_seeds_allow_and_comments_on_a_better_baseline(tmp_path):
    scores = {"electra": [60.0, 61.0, 62.0], "mlm": [70.0, 70.5, 71.0], "none": [75.0, 75.5, 76.0]}
    report = (write_report([fake_study(tmp_path / "s", scores)]) / "report.md").read_text()
    assert "- pretraining did NOT help: electra -14.5 points vs none on rte, seeds' spread" in report
    assert "**The no-pretraining baseline beats electra, mlm.**" in report
    one = (write_report([fake_study(tmp_path / "one", {"electra": [90.0], "none": [50.0]})]) / "report.md").read_text()
    assert "- electra +40.0 points vs none on rte: nothing can be concluded (one fine-tuning seed" in one
    assert "baseline beats" not in one
