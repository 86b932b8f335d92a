"""TensorBoard and Weights & Biases, with the real packages and read back with their own readers: TensorBoard's
EventAccumulator, and `wandb leet inspect --json` for the .wandb file of an offline run. What they hold must equal
metrics.jsonl (every numeric value, training and held-out lines; non-finite values, null there, absent here), for
`electra pretrain` and for every (task, seed) run of `electra glue`."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from electra.config import FinetuneConfig, to_dict
from electra.training.checkpoint import read_config
from electra.training.trackers import open_loggers, write_metrics
from electra.utils.faults import ENV
from tests.glue_fixtures import make_run, write_glue
from tests.helpers import KILLED, cli_main, run_cli, run_python

pytestmark = pytest.mark.slow  # W&B's service process, and its reader in a child (`python -m wandb`)


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    """W&B offline, silent, with everything it writes outside the run folders kept in tmp."""
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CONSOLE": "off"}
    env.update({f"WANDB_{kind}_DIR": str(tmp_path / f"wandb-{kind.lower()}") for kind in ("CACHE", "CONFIG", "DATA")})
    for var, value in {**env, "WANDB_DIR": str(tmp_path / "wandb-dir")}.items():
        monkeypatch.setenv(var, value)
    yield
    import wandb

    wandb.teardown()  # stops the service process this test started


def jsonl_values(path: Path) -> dict[str, list[tuple[int, float]]]:
    """metric -> [(step, value)] for every non-null value of a metrics.jsonl."""
    out = defaultdict(list)
    for line in path.read_text().splitlines():
        row = json.loads(line)
        for key, value in row.items():
            if key != "step" and value is not None:
                out[key].append((row["step"], value))
    return dict(out)


def tensorboard_values(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def as_float32(values: dict[str, list[tuple[int, float]]]) -> dict[str, list[tuple[int, float]]]:
    """TensorBoard stores scalars as float32."""
    return {k: [(s, float(np.float32(v))) for s, v in pairs] for k, pairs in values.items()}


def wandb_runs(folder: Path) -> list[dict]:
    """Each offline run under folder/wandb, read by wandb's own reader (see `wandb_run`)."""
    return [wandb_run(path) for path in sorted(folder.glob("wandb/offline-run-*/run-*.wandb"))]


def wandb_run(path: Path) -> dict:
    """{"run": its run record, "history": the logged rows} of one offline run's .wandb file."""
    out = run_python("-m", "wandb", "leet", "inspect", "--json", str(path), timeout=120, check=True).stdout
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    run = next(r["run"] for r in records if r["type"] == "run")
    return {"run": run, "history": [r["history"]["item"] for r in records if r["type"] == "history"]}


def wandb_values(history: list[dict]) -> dict[str, list[tuple[int, float]]]:
    out = defaultdict(list)
    for item in history:
        for key, value in item.items():
            if not key.startswith("_"):  # wandb's own _step, _runtime, _timestamp
                out[key].append((item["_step"], value))
    return dict(out)


def test_pretrain_logs_metrics_jsonl_to_tensorboard_and_wandb(tmp_path, wandb_offline, capsys):
    run = tmp_path / "run"
    args = [
        "pretrain",
        "--config",
        "tiny",
        "--out",
        str(run),
        "--max-steps",
        "30",
        "--log-every",
        "10",
        "--eval-every",
        "15",
        "--save-every",
        "30",
        "--batch-size",
        "8",
        "--set",
        "train.eval_batches=1",
        "--device",
        "cpu",
        "--tensorboard",
        "--wandb",
    ]
    assert cli_main(args) == 0
    expected = jsonl_values(run / "metrics.jsonl")
    steps = {key: [s for s, _ in pairs] for key, pairs in expected.items()}
    assert steps["mlm_loss"] == [10, 20, 30] and steps["eval_disc_auc"] == [15, 30]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(v is None for row in rows for v in row.values())  # early on, precision is undefined: skipped below
    assert tensorboard_values(run / "tensorboard") == as_float32(expected)  # the metrics' names are the tags

    (wb,) = wandb_runs(run)
    assert wandb_values(wb["history"]) == expected  # train and eval lines of a step are one W&B row
    config = {k: v for k, v in wb["run"]["config"]["update"].items() if not k.startswith("_")}
    assert config == to_dict(read_config(run / "config.yaml")) and wb["run"]["display_name"] == "run"


def test_a_resumed_run_logs_each_step_once(tmp_path, wandb_offline):
    """Killed after logging past its last checkpoint and resumed, a run logs those steps again: TensorBoard must
    then hold each step once (the killed session's events past the checkpoint purged, as metrics.jsonl is
    trimmed), and W&B must continue the same run."""
    run = tmp_path / "run"
    args = [
        "pretrain",
        "--config",
        "tiny",
        "--out",
        str(run),
        "--max-steps",
        "12",
        "--save-every",
        "3",
        "--eval-every",
        "4",
        "--log-every",
        "2",
        "--batch-size",
        "4",
        "--set",
        "train.eval_batches=1",
        "--device",
        "cpu",
        "--tensorboard",
        "--wandb",
        "--resume",
        "auto",
    ]
    killed = run_cli(*args, env={ENV: "evaluate@2"})  # after step 8's evaluation is logged
    assert killed.returncode == KILLED, killed.stderr[-2000:]
    assert max(s for pairs in tensorboard_values(run / "tensorboard").values() for s, _ in pairs) == 8  # past step 6
    assert cli_main(args) == 0
    expected = jsonl_values(run / "metrics.jsonl")
    assert [s for s, _ in expected["mlm_loss"]] == [2, 4, 6, 8, 10, 12]
    assert tensorboard_values(run / "tensorboard") == as_float32(expected)

    run_id = (run / "wandb" / "run_id").read_text().strip()
    # offline-run-TIME-ID, one per session, the same W&B run (W&B adds "-1" when both start within one second)
    sessions = sorted(run.glob("wandb/offline-run-*"))
    assert len(sessions) == 2 and all(
        re.fullmatch(rf"offline-run-\d{{8}}_\d{{6}}-{run_id}(-\d+)?", d.name) for d in sessions
    ), sessions
    # what the killed session logged may not have reached its file (W&B buffers); the resumed one logs from step 7
    resumed = wandb_run(sessions[1] / f"run-{run_id}.wandb")
    assert resumed["run"]["run_id"] == run_id
    after_checkpoint = {k: [(s, v) for s, v in pairs if s > 6] for k, pairs in expected.items()}
    assert wandb_values(resumed["history"]) == {k: pairs for k, pairs in after_checkpoint.items() if pairs}


def test_non_finite_values_are_null_in_metrics_jsonl_and_absent_from_the_trackers(tmp_path, wandb_offline):
    writers = open_loggers(["tensorboard", "wandb"], tmp_path, {"what": "rows"})
    rows = [{"step": 1, "a": 0.5, "b": math.nan, "n": 3}, {"step": 2, "a": math.inf, "b": 0.25, "n": 4}]
    for row in rows:
        write_metrics(tmp_path, row, writers)
    for w in writers:
        w.close()
    expected = {"a": [(1, 0.5)], "b": [(2, 0.25)], "n": [(1, 3), (2, 4)]}
    assert jsonl_values(tmp_path / "metrics.jsonl") == expected
    assert [json.loads(line)["b"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [None, 0.25]
    assert tensorboard_values(tmp_path / "tensorboard") == expected
    assert wandb_values(wandb_runs(tmp_path)[0]["history"]) == expected
    with pytest.raises(ValueError, match="unknown tracker 'mlflow'"):
        open_loggers(["mlflow"], tmp_path, {})


def test_glue_logs_each_run_to_its_own_tracker_run(tmp_path, wandb_offline, capsys):
    """One tracker run per (task, seed): TensorBoard in OUT/tensorboard/TASK/seedS, W&B runs named TASK-seedS in
    the sweep's group with the resolved FinetuneConfig; both equal the run's metrics.jsonl (the training loss
    every 10 steps, the final dev metrics)."""
    glue, model, out = write_glue(tmp_path / "glue"), make_run(tmp_path / "model"), tmp_path / "sweep"
    args = [
        "glue",
        "--model",
        str(model),
        "--glue-dir",
        str(glue),
        "--tasks",
        "rte,wnli",
        "--seeds",
        "2",
        "--out",
        str(out),
        "--no-progress",
        "--batch-size",
        "4",
        "--max-steps",
        "25",
        "--tensorboard",
        "--wandb",
    ]
    assert cli_main(args) == 0
    cfg = dataclasses.asdict(FinetuneConfig(batch_size=4, max_steps=25))
    runs = {wb["run"]["display_name"]: wb for wb in wandb_runs(out)}
    assert sorted(runs) == ["rte-seed0", "rte-seed1", "wnli-seed0", "wnli-seed1"]
    for task, last in (("rte", 25), ("wnli", 24)):  # 32 examples / 4 = 8 steps an epoch; RTE 10 epochs, WNLI 3
        for seed in (0, 1):
            rdir = out / "runs" / task / f"seed{seed}"
            expected = jsonl_values(rdir / "metrics.jsonl")
            record = json.loads((rdir / "result.json").read_text())
            assert set(expected) == {"loss", "lr", "dev_accuracy"}
            assert [s for s, _ in expected["loss"]] == [10, 20, last]
            assert expected["dev_accuracy"] == [(last, record["metrics"]["accuracy"])]
            assert tensorboard_values(out / "tensorboard" / task / f"seed{seed}") == as_float32(expected)
            wb = runs[f"{task}-seed{seed}"]
            assert wandb_values(wb["history"]) == expected
            assert wb["run"]["run_group"] == "sweep"
            config = wb["run"]["config"]["update"]
            assert config["finetune"] == cfg and (config["task"], config["seed"]) == (task, seed)


def test_a_study_logs_every_pretraining_and_fine_tuning_run(tmp_path):
    """`electra study --tensorboard`: each setting's pretraining run and each of its fine-tuning runs write event
    files equal to their metrics.jsonl, as `electra pretrain` and `electra glue` do."""
    from electra.data.synthetic_tasks import write_synthetic_tasks

    task = write_synthetic_tasks(tmp_path / "tasks")[0]
    out = tmp_path / "study"
    args = [
        "study",
        "--out",
        str(out),
        "--base",
        "tiny",
        "--set",
        "train.batch_size=8",
        "--set",
        "train.log_every=4",
        "--set",
        "train.eval_every=8",
        "--set",
        "train.eval_batches=1",
        "--set",
        "train.save_every=8",
        "--vary",
        "objective.kind=electra,none",
        "--budget",
        "steps=8",
        "--tasks",
        str(task),
        "--seeds",
        "1",
        "--finetune-set",
        "finetune.max_steps=12",
        "--device",
        "cpu",
        "--tensorboard",
    ]
    assert cli_main(args) == 0
    pretrain = out / "runs" / "kind=electra" / "pretrain"
    assert tensorboard_values(pretrain / "tensorboard") == as_float32(jsonl_values(pretrain / "metrics.jsonl"))
    for name in ("kind=electra", "kind=none"):
        glue = out / "runs" / name / "glue"
        expected = jsonl_values(glue / "runs" / task.name / "seed0" / "metrics.jsonl")
        assert expected["loss"] and tensorboard_values(glue / "tensorboard" / task.name / "seed0") == as_float32(
            expected
        )
