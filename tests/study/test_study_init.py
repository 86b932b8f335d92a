"""A study setting that starts from a model (`--setting "NAME:init=RUN"`, issue 48): its pretraining continues the
model, the FLOPs budget pays for the continued steps only, and the report's Table 1 shows the source's FLOPs beside
them."""

from __future__ import annotations

import json

import pytest

from electra.config import load_config
from electra.data.synthetic_tasks import write_synthetic_tasks
from electra.modeling.flops import off_train_flops
from electra.study.grid import StudySpec, vocabulary_size
from electra.study.run import run_study
from electra.training.checkpoint import list_checkpoints, read_config
from electra.training.loop import pretrain
from electra.utils.files import read_checksums
from tests.helpers import prepared_synthetic_corpus

COMMON = [
    "train.batch_size=8",
    "train.log_every=2",
    "train.eval_every=4",
    "train.eval_batches=1",
    "train.save_every=4",
    "train.warmup_steps=2",
    "model.dropout=0.0",
    "model.attention_dropout=0.0",
]


@pytest.mark.slow  # a toy study: two pretraining runs, each fine-tuned on two synthetic tasks
def test_a_setting_with_init_continues_the_model_at_the_budgets_steps_and_the_report_shows_its_source(tmp_path):
    data = prepared_synthetic_corpus(tmp_path, num_documents=40, vocab_size=300)
    base = tmp_path / "base"
    pretrain(load_config("tiny", [*COMMON, "train.max_steps=4", f"data.path={data}"]), base, progress=False)
    tasks = ",".join(str(p) for p in write_synthetic_tasks(tmp_path / "tasks")[:2])
    vocab = f"model.vocab_size={vocabulary_size(str(data))}"
    one_step = off_train_flops(load_config("tiny", [*COMMON, f"data.path={data}", vocab]), 1)
    spec = StudySpec(
        out=str(tmp_path / "study"),
        base="tiny",
        overrides=COMMON,
        settings=[f"cont:init={base}", "scratch:"],
        budget=f"flops={6.5 * one_step}",
        data=str(data),
        tasks=tasks,
        seeds=[0],
        finetune_overrides=["finetune.max_steps=4"],
        progress=False,
    )
    report = run_study(spec)

    settings = {s["name"]: s for s in json.loads((tmp_path / "study" / "study.json").read_text())["settings"]}
    assert settings["cont"]["steps"] == settings["scratch"]["steps"] == 6  # its own steps only
    assert settings["cont"]["setting"] == {"init": str(base)}
    cont = tmp_path / "study" / "runs" / "cont" / "pretrain"
    meta = json.loads((cont / "run.json").read_text())
    source = list_checkpoints(base)[-1]
    assert meta["step"] == 6 and meta["init"]["sha256"] == read_checksums(source)["model.safetensors"]
    assert meta["init"]["flops"] == off_train_flops(read_config(source / "config.yaml"), 4)
    assert json.loads((tmp_path / "study" / "runs" / "scratch" / "pretrain" / "run.json").read_text())["init"] is None
    table = (report / "report.md").read_text().split("### Table 1", 1)[1].split("###", 1)[0]
    row = next(line for line in table.splitlines() if line.startswith("| cont |"))
    assert (
        f"| {off_train_flops(read_config(cont / 'config.yaml'), 6):.3g} (+ {meta['init']['flops']:.3g} in its source) |"
        in row
    )
    assert "A continued run (pretrain --init) counts the steps it made itself" in table
