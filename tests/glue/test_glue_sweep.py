"""The GLUE sweep end to end on CPU: the files `run_sweep` writes, resume after a stop and after a kill, several
worker processes sharing one output folder, bad input, the GLUE submission, and a short run on the real files.
Most tests call the library function; a few go through `electra glue` to cover the CLI adapter: its flags, worker
processes, and the one-line error messages."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from electra.config import ConfigError, FinetuneConfig, load_finetune_config
from electra.glue.sweep import SweepSpec, run_sweep, spec_from_dict, write_report_only
from electra.utils.machine import cpu_model
from tests.glue_fixtures import GLUE_DATA, make_run, write_custom_task, write_glue
from tests.helpers import cli_main, start_cli


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    return {"glue": write_glue(root / "glue"), "run": make_run(root / "run"), "custom": write_custom_task(root)}


def glue_args(world, out, tasks, *extra):
    return [
        "glue",
        "--model",
        str(world["run"]),
        "--glue-dir",
        str(world["glue"]),
        "--tasks",
        tasks,
        "--out",
        str(out),
        "--no-progress",
        *extra,
    ]


def sweep(world, out, tasks: str, seeds: int, **finetune) -> SweepSpec:
    """The library call equivalent to glue_args(world, out, tasks, "--seeds", seeds, ...)."""
    return SweepSpec(
        out=str(out),
        model=str(world["run"]),
        tasks=tasks.split(","),
        glue_dir=str(world["glue"]),
        seeds=list(range(seeds)),
        finetune=FinetuneConfig(**finetune),
        progress=False,
    )


def results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def test_sweep_writes_the_interface_and_a_submission(world, tmp_path, capsys):
    out = tmp_path / "out"
    tasks = f"rte,mrpc,stsb,mnli,cola,{world['custom']}"
    result = run_sweep(sweep(world, out, tasks, 2, max_steps=2, predict_test=True))
    r = results(out)
    assert result.ok and result.results == r
    assert set(r) == {"tasks", "scores", "missing", "source"}
    ckpt = world["run"] / "checkpoints" / "step_00000000"  # the model every score came from, named in every file
    sha = hashlib.sha256((ckpt / "model.safetensors").read_bytes()).hexdigest()
    assert r["source"] == {"model": str(world["run"]), "path": str(ckpt.resolve()), "step": 0, "sha256": sha}
    assert json.loads((out / "sweep.json").read_text())["source"] == r["source"]
    assert list(r["tasks"]) == ["cola", "mrpc", "stsb", "mnli", "rte", "syn-agree"]
    expected_metrics = {
        "cola": ["mcc"],
        "mrpc": ["f1", "accuracy"],
        "stsb": ["pearson", "spearman"],
        "mnli": ["accuracy_m", "accuracy_mm"],
        "rte": ["accuracy"],
        "syn-agree": ["accuracy", "mcc"],
    }
    for task, entry in r["tasks"].items():
        assert set(entry) == {"n_train", "n_eval", "metrics", "chance", "seconds", "machines"}
        assert entry["seconds"] > 0 and entry["chance"]["n"] == 2
        assert len(entry["machines"]) == 1 and entry["machines"][0].startswith(cpu_model())  # where the seconds ran
        assert list(entry["metrics"]) == expected_metrics[task]
        assert (entry["n_train"], entry["n_eval"]) == {"mnli": (32, 32), "syn-agree": (64, 32)}.get(task, (32, 16))
        for metric, s in entry["metrics"].items():
            assert set(s) == {"median", "mean", "std", "min", "max", "n"} and s["n"] == 2
            low = 0 if metric.startswith(("accuracy", "f1")) else -100  # correlations can be negative
            assert low <= s["min"] <= s["median"] <= s["max"] <= 100 and s["std"] >= 0
    assert r["scores"] == {"paper": None, "glue": None, "study": None}  # required tasks are missing
    assert r["missing"] == ["sst2", "qqp", "qnli", "wnli"]
    record = json.loads((out / "runs" / "rte" / "seed1" / "result.json").read_text())
    assert record["steps"] == 2 and record["seed"] == 1 and record["config"]["max_steps"] == 2
    assert record["checkpoint"] == r["source"]
    assert not (out / "runs" / "rte" / "seed1" / "claim").exists()
    md = (out / "results.md").read_text()
    assert f"Every run fine-tuned {ckpt.resolve()} (step 0, sha256 {sha[:12]})." in md
    assert "n/a (missing: sst2, qqp, qnli, wnli)" in md and "| rte | accuracy |" in md
    assert (out / "results.csv").read_text().splitlines()[0].startswith("task,metric,n,median")
    printed = capsys.readouterr().out
    # a line per run, the report's path (not the report), then last a line per task: its main metric over the
    # seeds and its chance level named by its metric (MCC: 0; STS-B: Spearman 0, the line's metric, not Pearson)
    assert printed.count("] rte seed") == 2 and "## Aggregate scores" not in printed
    lines = printed.splitlines()
    summary = [line.split()[:2] for line in lines if "(median ± std over 2 seeds; chance " in line]
    assert summary == [
        ["cola", "mcc"],
        ["mrpc", "accuracy"],
        ["stsb", "spearman"],
        ["mnli", "accuracy_m"],
        ["rte", "accuracy"],
        ["syn-agree", "accuracy"],
    ]
    report = lines.index(f"report: {out / 'results.md'} (also .json, .csv)")
    assert lines[report + 1] == f"model: {ckpt.resolve()} (step 0, sha256 {sha[:12]})"  # what the scores came from
    assert lines[report + 2].startswith("cola ") and lines[report + 2].endswith("; chance mcc 0.00)")
    stsb = lines[report + 4]
    assert stsb.split()[:2] == ["stsb", "spearman"] and stsb.endswith("; chance spearman 0.00)")
    assert r["tasks"]["stsb"]["chance"]["metric"] == "spearman"

    with zipfile.ZipFile(out / "glue_submission.zip") as z:
        names = sorted(z.namelist())
        assert names == sorted(["CoLA.tsv", "MRPC.tsv", "STS-B.tsv", "MNLI-m.tsv", "MNLI-mm.tsv", "AX.tsv", "RTE.tsv"])
        files = {n: z.read(n).decode().splitlines() for n in names}
    allowed = {
        "CoLA.tsv": {"0", "1"},
        "MRPC.tsv": {"0", "1"},
        "RTE.tsv": {"entailment", "not_entailment"},
        "MNLI-m.tsv": {"entailment", "neutral", "contradiction"},
    }
    allowed["MNLI-mm.tsv"] = allowed["AX.tsv"] = allowed["MNLI-m.tsv"]
    for name, lines in files.items():
        assert lines[0] == "index\tprediction" and [x.split("\t")[0] for x in lines[1:]] == [str(i) for i in range(8)]
        values = [x.split("\t")[1] for x in lines[1:]]
        if name == "STS-B.tsv":
            assert all(0.0 <= float(v) <= 5.0 and len(v.split(".")[1]) == 3 for v in values)
        else:
            assert set(values) <= allowed[name], name
    chosen = json.loads((out / "submission.json").read_text())
    assert chosen["missing"] == ["SST-2.tsv", "QQP.tsv", "QNLI.tsv", "WNLI.tsv"]


def test_stopped_sweep_resumes_with_only_the_remaining_runs(world, tmp_path, capsys):
    out = tmp_path / "out"
    spec = sweep(world, out, "rte,wnli", 2, max_steps=2)
    assert run_sweep(dataclasses.replace(spec, stop_after=1)).ok
    first = out / "runs" / "rte" / "seed0" / "result.json"
    assert [p.parent.name for p in out.glob("runs/*/*/result.json")] == ["seed0"]
    assert results(out)["tasks"]["rte"]["metrics"]["accuracy"]["n"] == 1  # the report is there already
    before = (first.read_bytes(), first.stat().st_mtime_ns)
    capsys.readouterr()
    assert run_sweep(spec).ok
    printed = capsys.readouterr().out
    assert "skipping 1 finished run(s)" in printed and printed.count("] rte seed") == 1
    assert (first.read_bytes(), first.stat().st_mtime_ns) == before  # untouched
    r = results(out)
    assert [r["tasks"][t]["metrics"]["accuracy"]["n"] for t in ("rte", "wnli")] == [2, 2]
    # other hyperparameters, or another recipe, into the same folder would mix configurations: refused, nothing lost
    for other in (FinetuneConfig(max_steps=3), load_finetune_config("study", ["finetune.max_steps=2"])):
        with pytest.raises(ValueError, match="holds runs with other settings"):
            run_sweep(dataclasses.replace(spec, finetune=other))
    assert first.read_bytes() == before[0]
    assert cli_main([*glue_args(world, out, "rte,wnli", "--seeds", "2", "--max-steps", "2"), "--recipe", "paper"]) == 2
    err = capsys.readouterr().err
    assert "holds runs with other settings" in err and "optimizer: 'adam' -> 'adamw'" in err
    assert len(err.splitlines()) == 1


@pytest.mark.slow
def test_killed_sweep_resumes(world, tmp_path, capsys):
    """SIGKILL the sweep process right after its first run finished, while the second is training; the rerun
    takes over the dead process's claim, redoes only what is missing, and reports every run."""
    out = tmp_path / "out"
    args = glue_args(world, out, "rte", "--seeds", "3", "--batch-size", "2", "--max-steps", "40")
    proc = start_cli(*args)
    first = out / "runs" / "rte" / "seed0" / "result.json"
    claim = out / "runs" / "rte" / "seed1" / "claim"
    deadline = time.time() + 120
    while not (first.exists() and _held(claim)) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert first.exists(), "the first run did not finish in time"
    done_before = sorted(p.parent.name for p in out.glob("runs/rte/*/result.json"))
    assert done_before == ["seed0"]
    assert json.loads(claim.read_text())["pid"] == proc.pid  # left behind by the killed process
    before = first.read_bytes()
    capsys.readouterr()
    assert run_sweep(sweep(world, out, "rte", 3, batch_size=2, max_steps=40)).ok  # the CLI's spec, same fingerprint
    printed = capsys.readouterr().out
    assert "skipping 1 finished run(s)" in printed
    assert "rte seed 0:" not in printed and "rte seed 1:" in printed and "rte seed 2:" in printed
    assert first.read_bytes() == before and not claim.exists()
    assert results(out)["tasks"]["rte"]["metrics"]["accuracy"]["n"] == 3


def _interrupted_runs(line: str) -> set[tuple[str, int]]:
    """ "rte seeds 0, 2 (...)" / "rte seed 1" / "none" -> {(task, seed)}."""
    runs = set()
    for part in line.split(" (")[0].split("; "):
        if part != "none":
            task, _, seeds = part.split(" ", 2)
            runs |= {(task, int(s)) for s in seeds.split(", ")}
    return runs


def _held(claim: Path) -> bool:
    """The claim holds its owner: a file seen between its creation and its first write is empty, and one released
    between looking for it and reading it is gone."""
    try:
        return claim.stat().st_size > 0
    except FileNotFoundError:
        return False


def _training(out: Path) -> bool:
    """A run of the sweep in OUT holds its claim and has not finished. A finished run's claim outlives its
    result.json by a moment, and a Ctrl-C then, or in the report written after it, lands between two runs."""
    return any(_held(c) and not c.with_name("result.json").exists() for c in out.glob("runs/*/*/claim"))


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["--num-workers", "2"]], ids=["one process", "two workers"])
def test_ctrl_c_says_what_finished_what_was_interrupted_and_the_command_that_continues(world, tmp_path, workers):
    """Ctrl-C at a terminal (SIGINT to the sweep's process group) while a run trains: exit 130 with one summary,
    no worker's traceback, no claim left behind; the command it prints finishes the sweep, redoing only the rest."""
    out = tmp_path / "out"
    # 400 steps (a second or two a run): the Ctrl-C lands inside a run, not between two runs that take 0.2 s
    args = glue_args(world, out, "rte", "--seeds", "4", "--batch-size", "2", "--max-steps", "400", *workers)
    proc = start_cli(*args, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    first = out / "runs" / "rte" / "seed0" / "result.json"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if first.exists() and _training(out):
            break
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal's Ctrl-C does
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-2000:]
    assert not list(out.glob("runs/*/*/claim"))  # every interrupted run let go of its claim
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("stopped (Ctrl-C): "))
    head, finished, interrupted, waiting = lines[start : start + 4]
    done = {("rte", int(p.parent.name[4:])) for p in out.glob("runs/rte/*/result.json")}
    assert ("rte", 0) in done and _interrupted_runs(finished.removeprefix("  finished: ")) == done
    cut = _interrupted_runs(interrupted.removeprefix("  interrupted: "))
    rest = _interrupted_runs(waiting.removeprefix("  not started: "))
    assert cut and not cut & done and done | cut | rest == {("rte", s) for s in range(4)} and not rest & cut
    assert head == f"stopped (Ctrl-C): {len(done)} of 4 runs finished, {len(cut)} interrupted, {len(rest)} not started"
    assert interrupted.endswith("starts again from its first step)" if len(cut) == 1 else "their first step)")
    assert lines[start + 4] == f"report of the finished runs: {out / 'results.md'}"
    command = lines[start + 5].removeprefix("continue with: ")
    # started as `python -m electra.cli` (start_cli): the command names that, which works without electra on PATH
    assert lines[start + 5].startswith("continue with: ")
    assert shlex.split(command) == [sys.executable, "-m", "electra.cli", *args]
    assert cli_main(shlex.split(command)[3:]) == 0
    assert results(out)["tasks"]["rte"]["metrics"]["accuracy"]["n"] == 4


@pytest.mark.slow
def test_worker_processes_share_one_out(world, tmp_path):
    out = tmp_path / "out"
    args = glue_args(world, out, "wnli", "--seeds", "4", "--max-steps", "2", "--num-workers", "2")
    proc = start_cli(*args, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    records = [json.loads(p.read_text()) for p in sorted(out.glob("runs/wnli/*/result.json"))]
    assert sorted(r["seed"] for r in records) == [0, 1, 2, 3] and not list(out.glob("runs/*/*/claim"))
    pids = {r["worker"]["pid"] for r in records}
    assert proc.pid not in pids and 1 <= len(pids) <= 2  # the runs were done by the worker processes
    assert stdout.count("] wnli seed") == 4  # each run exactly once
    assert results(out)["tasks"]["wnli"]["metrics"]["accuracy"]["n"] == 4


@pytest.mark.parametrize(
    "change,message",
    [
        (("--tasks", "rte,cols"), "unknown task 'cols'"),
        (("--model", "MODEL_IS_GLUE"), "no complete checkpoint found"),
        (("--seeds", "two"), "--seeds 'two'"),
        (("--recipe", "nope"), "unknown recipe 'nope': not a file, and recipes are ['cpu', 'off', 'paper', 'study']"),
        (("--set", "finetune.lrr=1"), "override 'finetune.lrr=1': unknown key 'finetune.lrr'"),
        (("--set", "finetune.lr=fast"), "override 'finetune.lr=fast': finetune.lr must be float, got 'fast'"),
        (("--set", "finetune.head=pooler"), "finetune.head must be one of ['cls-linear', 'mean-mlp', 'hf']"),
        (("--set", "lr=1"), "override 'lr=1': expected finetune.KEY=VALUE"),
        (("--max-steps", "-1"), "finetune.max_steps must be >= 1 or null, got -1"),
        (("--lr", "0"), "finetune.lr must be > 0, got 0.0"),
        (("--warmup-fraction", "1"), "finetune.warmup_fraction must be in [0, 1), got 1.0"),
        (("--layer-decay", "1.2"), "finetune.layer_decay must be in (0, 1], got 1.2"),
        (("--batch-size", "0"), "finetune.batch_size must be >= 1, got 0"),
    ],
)
def test_bad_input_is_one_line_naming_the_problem(world, tmp_path, capsys, change, message):
    """Refused before any work: one line on stderr, exit 2, nothing written."""
    args = glue_args(world, tmp_path / "out", "rte", "--seeds", "1", "--max-steps", "1")
    value = str(world["glue"]) if change[1] == "MODEL_IS_GLUE" else change[1]
    if change[0] in args:
        args[args.index(change[0]) + 1] = value
    else:
        args += list(change)
    assert cli_main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out" / "runs").exists()


def test_flags_are_shortcuts_for_the_recipe_keys(world, tmp_path, capsys):
    """`electra glue` builds the SweepSpec the library gets: recipe, then flags, then --set (the last wins)."""
    out = tmp_path / "out"
    args = glue_args(
        world,
        out,
        "wnli",
        "--seeds",
        "3,1",
        "--max-steps",
        "2",
        "--recipe",
        "study",
        "--lr",
        "1e-3",
        "--no-swap-pairs",
        "--set",
        "finetune.lr=2e-3",
        "--stop-after",
        "1",
    )
    assert cli_main(args) == 0
    header = json.loads((out / "sweep.json").read_text())
    expected = load_finetune_config("study", ["finetune.max_steps=2", "finetune.lr=2e-3"])
    assert header["config"] == dataclasses.asdict(expected) and header["recipe"] == "study"
    assert [p.parent.name for p in out.glob("runs/wnli/*/result.json")] == ["seed3"]  # seeds 3, 1; stopped after 1


def test_worker_spec_is_rebuilt_typed_and_strictly(world, tmp_path):
    """Worker processes get the SweepSpec as JSON and rebuild it through the strict config merge."""
    spec = sweep(world, tmp_path / "out", "rte,wnli", 3, lr=1e-3, epochs=2)
    raw = json.loads(json.dumps(dataclasses.asdict(spec)))
    assert spec_from_dict(raw, "spec.json") == spec
    for change, message in [
        ({"finetune": {**raw["finetune"], "lr": "fast"}}, "finetune.lr must be float"),
        ({"finetune": {**raw["finetune"], "hed": 1}}, "unknown key 'finetune.hed'"),
        ({"seeds": [0, "1"]}, r"seeds\[1\] must be int"),
        ({"stop": 1}, "unknown key 'stop'"),
        ({"finetune": {**raw["finetune"], "lr": -1}}, "finetune.lr must be > 0"),
    ]:
        with pytest.raises(ConfigError, match=message):
            spec_from_dict({**raw, **change}, "spec.json")


def test_malformed_row_fails_before_training_and_keeps_finished_runs(world, tmp_path, capsys):
    import shutil

    glue = tmp_path / "glue"
    shutil.copytree(world["glue"], glue)
    out = tmp_path / "out"
    spec = dataclasses.replace(sweep(world, out, "rte,wnli", 1, max_steps=1), glue_dir=str(glue))
    assert run_sweep(spec).ok
    with open(glue / "WNLI" / "dev.tsv", "a") as f:
        f.write("99\tonly one sentence\t1\n")
    with pytest.raises(ValueError, match="WNLI/dev.tsv:18: 3 columns, expected 4 \\(task wnli\\)"):
        run_sweep(spec)
    assert results(out)["tasks"]["rte"]["metrics"]["accuracy"]["n"] == 1
    (out / "results.md").unlink()
    assert write_report_only(out).results == results(out) and (out / "results.md").exists()
    (out / "results.md").unlink()
    assert cli_main(["glue", "--out", str(out), "--report-only"]) == 0 and (out / "results.md").exists()


@pytest.mark.skipif(not GLUE_DATA.is_dir(), reason="shared GLUE data not present")
def test_short_run_on_the_real_files(world, tmp_path):
    out = tmp_path / "out"
    spec = dataclasses.replace(sweep(world, out, "wnli,rte", 1, max_steps=3), glue_dir=str(GLUE_DATA))
    assert run_sweep(spec).ok
    tasks = results(out)["tasks"]
    assert (tasks["wnli"]["n_train"], tasks["wnli"]["n_eval"]) == (635, 71)
    assert (tasks["rte"]["n_train"], tasks["rte"]["n_eval"]) == (2490, 277)
    record = json.loads((out / "runs" / "rte" / "seed0" / "result.json").read_text())
    assert record["steps"] == 3 and record["chance"]["baseline"] == pytest.approx(100 * 146 / 277)


def test_saved_hf_model_reproduces_the_reported_dev_score(world, tmp_path):
    """The hf head, saved: transformers loads the fine-tuned model and gets the accuracy the report has."""
    import numpy as np
    import torch
    from transformers import ElectraForSequenceClassification

    from electra.data.tokenizer import load_tokenizer
    from electra.glue.features import collate, encode
    from electra.glue.loading import load_task
    from electra.glue.tasks import resolve_tasks

    out = tmp_path / "out"
    assert run_sweep(sweep(world, out, "rte", 1, head="hf", save_model=True, eval_every_epoch=True)).ok
    record = json.loads((out / "runs" / "rte" / "seed0" / "result.json").read_text())
    assert [h["epoch"] for h in record["history"]] == list(range(1, 11)) and record["steps"] == 10  # RTE: 10 epochs
    assert record["history"][-1]["metrics"] == record["metrics"]
    hf = ElectraForSequenceClassification.from_pretrained(out / "runs" / "rte" / "seed0" / "model").eval()
    assert hf.config.id2label == {0: "entailment", 1: "not_entailment"}
    dev = load_task(resolve_tasks("rte", world["glue"])[0][0]).dev[""]
    f = encode(dev, load_tokenizer(out / "runs" / "rte" / "seed0" / "model"), 128)
    b = collate(f, np.arange(len(dev)))
    with torch.no_grad():
        logits = hf(**{k: b[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).logits
    accuracy = 100 * float((logits.argmax(-1) == b["labels"]).float().mean())
    assert accuracy == pytest.approx(record["metrics"]["accuracy"])
