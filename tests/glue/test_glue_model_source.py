"""Every score names the model it came from: a pretraining run counts as finished only once its final checkpoint and
export are on disk; `electra glue --model RUN` refuses a run still training (naming its newest checkpoint, which may
be named instead); result.json, sweep.json, results.json and results.md name the checkpoint (path, step, sha256);
and a sweep refuses to add seeds from another checkpoint to a folder whose runs came from a different one."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
from pathlib import Path

import pytest

from electra.config import FinetuneConfig, load_config
from electra.glue.sweep import SweepSpec, run_sweep
from electra.study.grid import pretrained
from electra.training.checkpoint import CheckpointError, list_checkpoints, run_finished
from electra.training.loop import pretrain
from tests.glue_fixtures import write_glue
from tests.helpers import cli_main, die_at

STEPS = 4
QUICK = ["train.batch_size=8", "train.log_every=2", f"train.max_steps={STEPS}", "train.save_every=2",
         "train.eval_every=2", "train.eval_batches=1", "train.keep_last=5"]  # fmt: skip


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def killed_at_the_end(tmp_path_factory) -> Path:
    """A tiny run killed after its final evaluation wrote run.json (step 4) and before the step-4 checkpoint."""
    run = tmp_path_factory.mktemp("killed") / "run"
    code = die_at("evaluate@2", pretrain, load_config("tiny", QUICK), run, progress=False)
    assert code == -signal.SIGKILL
    return run


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory) -> Path:
    return write_glue(tmp_path_factory.mktemp("glue") / "glue")


def sweep(model: Path, glue: Path, out: Path, seeds: list[int]) -> SweepSpec:
    return SweepSpec(out=str(out), model=str(model), tasks=["rte"], glue_dir=str(glue), seeds=seeds, progress=False,
                     finetune=FinetuneConfig(max_steps=2))  # fmt: skip


@pytest.mark.parametrize("moment", ["evaluate@2", "finish@1"])
def test_a_run_is_finished_only_once_its_final_checkpoint_and_export_are_on_disk(tmp_path, moment):
    """Killed after the final evaluation (run.json already at step 4), or after the final save and export but
    before run.json says so: not finished, so a study resumed there trains to the end instead of fine-tuning the
    previous checkpoint; resumed, it finishes."""
    run, cfg = tmp_path / "run", load_config("tiny", QUICK)
    assert die_at(moment, pretrain, cfg, run, progress=False) == -signal.SIGKILL
    meta = json.loads((run / "run.json").read_text())
    assert meta["step"] == STEPS and meta["finished"] is False
    assert run_finished(run) is False and not pretrained(run, STEPS)
    pretrain(cfg, run, resume="auto", progress=False)
    assert run_finished(run) is True and pretrained(run, STEPS)
    assert list_checkpoints(run)[-1].name == "step_00000004" and (run / "hf").is_dir()


def test_glue_refuses_a_run_still_training_and_names_its_newest_checkpoint(killed_at_the_end, glue_dir, tmp_path,
                                                                           capsys):  # fmt: skip
    run, out = killed_at_the_end, tmp_path / "out"
    newest = run / "checkpoints" / "step_00000002"
    assert list_checkpoints(run)[-1] == newest
    with pytest.raises(CheckpointError) as err:
        run_sweep(sweep(run, glue_dir, out, [0]))
    assert str(err.value) == (
        f"{run}: pretraining is not finished (step 4 of 4; newest checkpoint 2): name a checkpoint to use it "
        f'anyway, `model="{newest}"`, or let the run finish'
    )
    assert not out.exists()  # refused before anything is written
    code = cli_main(["glue", "--model", str(run), "--glue-dir", str(glue_dir), "--tasks", "rte", "--out", str(out),
                     "--seeds", "1", "--max-steps", "2", "--no-progress"])  # fmt: skip
    said = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(said) == 1 and f"--model {newest}," in said[0]  # one line, in the command's flags


def test_every_record_names_the_checkpoint_and_a_sweep_refuses_another_one(killed_at_the_end, glue_dir, tmp_path):
    """A seed fine-tuned from the finished run (its step-4 checkpoint); the run extended to step 6 and finished
    again; `--model RUN` into the same folder now means step 6: refused, naming both checkpoints. The step-4
    checkpoint named explicitly adds the seed to the runs it belongs with."""
    run, out = tmp_path / "run", tmp_path / "out"
    shutil.copytree(killed_at_the_end, run)
    pretrain(load_config("tiny", QUICK), run, resume="auto", progress=False)
    step4 = run / "checkpoints" / "step_00000004"
    run_sweep(sweep(run, glue_dir, out, [0]))
    record = json.loads((out / "runs" / "rte" / "seed0" / "result.json").read_text())
    expected = {
        "model": str(run),
        "path": str(step4.resolve()),
        "step": 4,
        "sha256": sha256(step4 / "model.safetensors"),
    }
    assert record["checkpoint"] == expected
    assert json.loads((out / "sweep.json").read_text())["source"] == expected
    assert json.loads((out / "results.json").read_text())["source"] == expected
    assert f"(step 4, sha256 {expected['sha256'][:12]})" in (out / "results.md").read_text()

    longer = [*QUICK, "train.max_steps=6"]
    pretrain(load_config("tiny", longer), run, resume="auto", progress=False)  # finished again, at step 6
    step6 = run / "checkpoints" / "step_00000006"
    with pytest.raises(ValueError) as err:
        run_sweep(sweep(run, glue_dir, out, [0, 1]))
    said = str(err.value)
    assert f"fine-tuned from {step4.resolve()} (step 4, sha256 {expected['sha256'][:12]})" in said
    assert f"{step6.resolve()} (step 6, sha256 {sha256(step6 / 'model.safetensors')[:12]})" in said
    assert not (out / "runs" / "rte" / "seed1").exists()
    run_sweep(sweep(step4, glue_dir, out, [0, 1]))  # the runs' own checkpoint, named: the seed is added
    steps = [json.loads(p.read_text())["checkpoint"]["step"] for p in sorted(out.glob("runs/rte/seed*/result.json"))]
    assert steps == [4, 4]


def test_the_gate_in_results_md_judges_the_checkpoint_fine_tuned_not_the_runs_last_evaluation(tmp_path):
    """A checkpoint's gate reads the held-out evaluation at its step: rows logged after it are not its model's."""
    from electra.glue.report import pretraining_gate
    from tests.helpers import fake_pretrain_run

    good = {"eval_masked_accuracy": 0.5, "eval_mlm_majority_rate": 0.1, "eval_masked_loss": 2.0,
            "eval_mlm_unigram_loss": 5.0, "eval_disc_auc": 0.9}  # fmt: skip
    bad = {**good, "eval_disc_auc": 0.5}
    run = fake_pretrain_run(tmp_path / "run", 8, evals=[{"step": 4, **bad}, {"step": 8, **good}])
    assert pretraining_gate(str(run)).learned is True  # the run's last evaluation
    assert pretraining_gate(str(run / "checkpoints" / "step_00000004"), 4).learned is False
