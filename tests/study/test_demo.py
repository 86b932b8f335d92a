"""`make demo` at a smaller scale: the study's four settings on the built-in language, the plain-words verdict, and
the interface other checks rely on: it prints the report folder (the line after "The report (report.md) ..."),
which holds report.md, the PNG figures it links, and results.json in `electra glue`'s schema, and ends with the
command for real text; with --corpus it runs the `cpu` preset and recipe."""

import json
import re
from pathlib import Path

import pytest

from electra.cli import main
from electra.study.demo import REAL_TEXT_COMMAND, SETTINGS, demo, verdict_lines
from tests.helpers import fake_pretrain_run, fake_study


@pytest.mark.slow
def test_the_demo_runs_the_study_and_ends_with_the_report_folder(tmp_path, capsys):
    report = demo(tmp_path / "demo", electra_steps=30, seeds=[0], finetune_steps=5)
    printed = capsys.readouterr().out.strip().splitlines()
    folder = printed.index("The report (report.md), its figures and results.json are in this folder:") + 1
    assert Path(printed[folder]) == report and report.is_dir()
    assert printed[-1].endswith(REAL_TEXT_COMMAND)
    text = (report / "report.md").read_text()
    for figure in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert (report / figure).stat().st_size > 5_000, figure  # every linked figure is there
    results = json.loads((report / "results.json").read_text())
    assert {"tasks", "scores", "missing", "settings"} <= set(results)
    assert set(results["settings"]) == {s.split(":")[0] for s in SETTINGS}
    assert set(results["tasks"]) == {"syn-agree", "syn-topic", "syn-entail", "syn-sim"}
    # one seed (and tasks at chance): no verdict on any task, each task said as the report says it
    undecided = ("nothing can be concluded", "at chance level for the model that scores higher there: no verdict")
    verdict = [line for line in printed if line.startswith("   electra-T3:")]
    assert verdict and all(any(u in line for u in undecided) for line in verdict)
    assert any(line.startswith("   at equal FLOPs: ") and any(u in line for u in undecided) for line in printed)


def test_the_verdict_follows_the_seeds(tmp_path):
    mlm = {"mlm": "mlm"}  # the study's objective (study.json "kind") pairs ELECTRA with MLM, as in the report
    one = verdict_lines(fake_study(tmp_path / "one", {"electra": [80.0], "mlm": [60.0], "none": [50.0]}, kinds=mlm))
    assert (
        one[1] == "   electra: electra +30.0 points vs none on rte (mean over 1 seed): nothing can be concluded "
        "at 95% confidence (1 fine-tuning seed a side: the test needs at least 3)"
    )
    assert one[-1].startswith("   at equal FLOPs: electra +20.0 points vs mlm") and "nothing can be" in one[-1]
    three = {"electra": [80.0, 81.0, 82.0], "mlm": [60.0, 61.0, 62.0], "none": [70.0, 70.5, 71.0]}
    three = verdict_lines(fake_study(tmp_path / "three", three, kinds=mlm))
    assert three[0] == "\n== verdict at 95% confidence (each task's mean over seeds, on rte)"
    assert three[1].startswith("   electra: pretraining helped (95% confidence): electra +10.5 points vs none on rte")
    assert three[2].startswith("   mlm: pretraining did NOT help (95% confidence): mlm -9.5")  # the report's words
    assert three[-1].startswith("   at equal FLOPs: ELECTRA beats MLM (95% confidence): electra +20.0 points vs mlm")


def test_a_collapsed_pretraining_is_called_collapsed_not_never_learned(tmp_path):
    """The gate's own word in the verdict: a discriminator whose held-out AUC passed the gate and then fell under
    it collapsed; it did not "never leave the plateau"."""
    study = fake_study(tmp_path / "s", {"electra": [60.0, 61.0, 62.0], "none": [60.0, 61.0, 62.0]})
    evals = [
        {"step": s, "eval_masked_accuracy": 0.3, "eval_mlm_majority_rate": 0.1, "eval_disc_auc": auc}
        for s, auc in ((100, 0.55), (200, 0.81), (300, 0.52))
    ]
    fake_pretrain_run(study / "runs" / "electra" / "pretrain", 300, evals)
    line = verdict_lines(study)[1]
    assert line.startswith("   electra: electra +0.0 points vs none on rte") and "nothing can be concluded" in line
    assert "; its pretraining collapsed (" in line and "it had reached 0.810 at step 200" in line
    assert "never" not in line and "plateau" not in line


def test_the_demo_on_real_text_runs_the_cpu_preset_and_recipe(tmp_path, monkeypatch):
    """--corpus: the cpu preset (rotary positions), the cpu fine-tuning recipe, ELECTRA with the preset's temperature
    schedule, MLM and none, each task's full fine-tuning schedule unless capped; what the study is asked to run,
    read before it runs."""
    import electra.study.demo as demo_module
    from tests.helpers import prepared_synthetic_corpus

    (tmp_path / "corpus").mkdir()
    data = prepared_synthetic_corpus(tmp_path / "corpus", num_documents=40, vocab_size=300)
    monkeypatch.setattr(demo_module, "_prepare_corpus", lambda corpus, out: str(data))
    asked = []

    def study(spec):
        asked.append(spec)
        raise SystemExit

    monkeypatch.setattr(demo_module, "run_study", study)
    with pytest.raises(SystemExit):
        demo(tmp_path / "demo", corpus="text.txt")
    with pytest.raises(SystemExit):
        main(["demo", "--corpus", "text.txt", "--out", str(tmp_path / "demo"), "--finetune-steps", "800"])
    spec, capped = asked
    assert (spec.base, spec.recipe, spec.data) == ("cpu", "cpu", str(data))
    assert [s.split(":")[0] for s in spec.settings] == ["electra", "mlm", "none"]
    assert spec.finetune_overrides == [] and capped.finetune_overrides == ["finetune.max_steps=800"]
