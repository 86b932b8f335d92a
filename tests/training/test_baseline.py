"""`electra pretrain --set objective.kind=none`: the no-pretraining baseline from the ordinary commands, a step-0
run of the weights a trained run of the same config starts from, which `electra glue` fine-tunes and `electra
report` measures the trained model against."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from electra.cli import main
from electra.config import load_config
from electra.data.synthetic_tasks import write_synthetic_tasks
from electra.modeling.electra import build_model
from electra.modeling.flops import off_train_flops
from electra.report.results import collect
from electra.training.checkpoint import list_checkpoints, read_config
from electra.training.loop import pretrain

TINY = ["--config", "tiny", "--set", "train.batch_size=8", "--set", "train.eval_batches=2"]


def test_kind_none_writes_the_initialised_model_as_a_finished_step_0_run(tmp_path, capsys):
    run = tmp_path / "none"
    assert main(["pretrain", *TINY, "--out", str(run), "--set", "objective.kind=none", "--quiet"]) == 0
    assert "wrote the no-pretraining baseline (the initialised model, step 0, 0 FLOPs)" in capsys.readouterr().out
    assert [c.name for c in list_checkpoints(run)] == ["step_00000000"]
    assert json.loads((run / "run.json").read_text())["step"] == 0
    cfg = read_config(run / "config.yaml")
    assert cfg.objective.kind == "none"
    # the very weights an ELECTRA run of this config and seed starts training from
    electra = dataclasses.replace(cfg, objective=dataclasses.replace(cfg.objective, kind="electra"))
    torch.manual_seed(cfg.train.seed)
    start = build_model(electra).state_dict()
    from safetensors.torch import load_file

    saved = load_file(list_checkpoints(run)[0] / "model.safetensors")
    assert set(saved) == set(start)
    assert all(torch.equal(saved[k], start[k]) for k in start)
    (entry,) = collect([run])[0]
    assert entry.baseline and entry.pretrain.flops == 0.0 and off_train_flops(cfg, 1) > 0


def test_kind_none_keeps_its_folder_with_resume_auto_and_refuses_a_trained_one(tmp_path):
    cfg = load_config("tiny", ["train.batch_size=8", "objective.kind=none"])
    run = tmp_path / "none"
    pretrain(cfg, run)
    before = (run / "run.json").read_text()
    with pytest.raises(ValueError, match="already holds checkpoints"):
        pretrain(cfg, run)
    assert pretrain(cfg, run, resume="auto").step == 0 and (run / "run.json").read_text() == before
    trained = tmp_path / "trained"
    pretrain(load_config("tiny", ["train.batch_size=8", "train.max_steps=2", "train.save_every=2"]), trained)
    with pytest.raises(ValueError, match="trained to step 2, not a no-pretraining baseline"):
        pretrain(cfg, trained, resume="auto")


def test_a_trained_run_is_measured_against_a_kind_none_run_in_the_report(tmp_path, capsys):
    tasks = [str(write_synthetic_tasks(tmp_path / "tasks")[0])]
    common = ["--tasks", *tasks, "--seeds", "1", "--set", "finetune.max_steps=2", "--quiet"]
    for name, extra in (("none", ["--set", "objective.kind=none"]), ("trained", ["--max-steps", "4"])):
        run = tmp_path / name
        assert main(["pretrain", *TINY, "--out", str(run), "--quiet", *extra]) == 0
        assert main(["glue", "--model", str(run), "--out", str(run / "glue"), *common]) == 0
    assert main(["report", str(tmp_path / "trained"), str(tmp_path / "none"), "--out", str(tmp_path / "r")]) == 0
    text = (tmp_path / "r" / "report.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| trained |"))
    delta = row.strip("|").split("|")[-1].strip()
    assert delta != "–" and float(delta) == pytest.approx(float(delta))  # a number: the baseline was found
    assert next(line for line in text.splitlines() if line.startswith("| none |")).split("|")[2].strip() == (
        "none (random initialisation)"
    )
