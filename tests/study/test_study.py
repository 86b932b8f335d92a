"""`electra study` and `electra report` at toy scale on CPU: the grid and its equal budgets, the files a study
writes, the report's numbers against `electra flops` and the runs' own metrics, the gate, a killed study resumed,
and parallel pretraining equal to sequential."""

import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from electra.config import ConfigError
from electra.data.synthetic_tasks import write_synthetic_tasks
from electra.modeling.flops import flops_report, off_train_flops
from electra.report.results import gate, read_pretrain_run
from electra.report.write import write_report
from electra.study.grid import StudySpec, grid
from electra.study.run import run_study, start
from electra.training.checkpoint import list_checkpoints
from tests.helpers import alive, child_pids, run_cli, start_cli, without_seconds

PRETRAIN = [
    "train.batch_size=8",
    "train.log_every=4",
    "train.eval_every=8",
    "train.eval_batches=2",
    "train.save_every=4",
    "train.warmup_steps=2",
]


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> str:
    folders = write_synthetic_tasks(tmp_path_factory.mktemp("tasks"))
    return ",".join(str(p) for p in folders[:2])  # syn-agree, syn-topic


def spec(out: Path, tasks: str, **changes) -> StudySpec:
    base = dict(
        out=str(out),
        base="tiny",
        overrides=PRETRAIN,
        vary=["objective.kind=electra,mlm,none"],
        budget="flops=6e9",
        tasks=tasks,
        seeds=[0],
        finetune_overrides=["finetune.max_steps=6"],
    )
    return StudySpec(**{**base, **changes})


@pytest.fixture(scope="module")
def study(tmp_path_factory, tasks) -> Path:
    out = tmp_path_factory.mktemp("study") / "s"
    run_study(spec(out, tasks))
    return out


def test_the_grid_is_the_product_of_the_lists_in_order():
    s = StudySpec(out="x", vary=["model.generator_fraction=0.25,0.5", "objective.temperature=1,3"])
    assert [g.name for g in grid(s)] == [
        "generator_fraction=0.25,temperature=1",
        "generator_fraction=0.25,temperature=3",
        "generator_fraction=0.5,temperature=1",
        "generator_fraction=0.5,temperature=3",
    ]
    with pytest.raises(ConfigError, match="expected section.key=value1,value2"):
        grid(StudySpec(out="x", vary=["objective.kind"]))
    named = ["electra:", "T3:objective.temperature=3;model.dropout=0", "none:objective.kind=none"]
    named = grid(StudySpec(out="x", settings=named))
    assert [(s.name, s.values, s.kind) for s in named] == [
        ("electra", {}, "electra"),
        ("T3", {"objective.temperature": "3", "model.dropout": "0"}, "electra"),
        ("none", {"objective.kind": "none"}, "none"),
    ]
    with pytest.raises(ConfigError, match="expected NAME:section.key=value"):
        grid(StudySpec(out="x", settings=["T3 objective.temperature=3"]))


def test_a_flops_budget_gives_each_setting_the_steps_it_pays_for(tmp_path, tasks):
    settings = start(spec(tmp_path / "s", tasks))
    by_kind = {s.kind: s for s in settings}
    assert by_kind["none"].steps == 0
    for kind in ("electra", "mlm"):
        cfg = by_kind[kind].config(spec(tmp_path / "s", tasks))
        per_step = off_train_flops(cfg, 1)
        assert by_kind[kind].steps == int(6e9 // per_step)
        assert by_kind[kind].steps * per_step <= 6e9 < (by_kind[kind].steps + 1) * per_step
    assert by_kind["mlm"].steps > by_kind["electra"].steps  # the MLM step is cheaper: equal FLOPs, more steps
    # the study folder now holds this spec: another is refused
    with pytest.raises(ConfigError, match=r"holds a study with other settings \(budget: 'flops=6e9' -> 'steps=3'\)"):
        start(spec(tmp_path / "s", tasks, budget="steps=3"))


@pytest.mark.slow  # the `study` fixture: a whole toy study, pretraining and fine-tuning three settings
def test_a_study_writes_runs_sweeps_and_a_report_whose_numbers_match_their_sources(study):
    meta = json.loads((study / "study.json").read_text())
    assert [s["name"] for s in meta["settings"]] == ["kind=electra", "kind=mlm", "kind=none"]
    report = (study / "report" / "report.md").read_text()
    for s in meta["settings"]:
        run = study / s["pretrain"]
        assert (study / s["glue"] / "results.json").exists()
        if s["kind"] == "none":
            assert [p.name for p in list_checkpoints(run)] == ["step_00000000"]  # random initialisation
            continue
        assert json.loads((run / "run.json").read_text())["step"] == s["steps"]
        # the compute table's FLOPs are what `electra flops` prints for the run's config and steps
        cfg = read_pretrain_run(run).cfg
        total = flops_report(cfg, s["steps"])["total_flops"]
        assert total <= 6e9 < off_train_flops(cfg, s["steps"] + 1)  # the run itself spent the budget
        row = re.search(rf"^\| {re.escape(s['name'])} \| \w+ \| {s['steps']:,} \| [\d,]+ \| ([^ |]+) \|", report, re.M)
        assert row is not None and float(row.group(1)) == pytest.approx(total, rel=5e-3)
        assert (study / "report" / f"dynamics-kind-{s['kind']}.png").stat().st_size > 10_000
    for figure in ("glue.png", "efficiency.png"):
        assert (study / "report" / figure).stat().st_size > 10_000
    # results.json: `electra glue`'s schema for the first setting, every setting under "settings"
    results = json.loads((study / "report" / "results.json").read_text())
    first = json.loads((study / "runs" / "kind=electra" / "glue" / "results.json").read_text())
    assert {k: results[k] for k in ("tasks", "scores", "missing")} == {
        k: first[k] for k in ("tasks", "scores", "missing")
    }
    for s in meta["settings"]:  # each model's scores name the checkpoint they came from: the run's final one
        source = json.loads((study / s["glue"] / "results.json").read_text())["source"]
        final = list_checkpoints(study / s["pretrain"])[-1]
        sha = hashlib.sha256((final / "model.safetensors").read_bytes()).hexdigest()
        assert (source["path"], source["step"], source["sha256"]) == (str(final.resolve()), s["steps"], sha)
        assert f"| {s['name']} | {final.resolve()} | {s['steps']:,} | {sha[:12]} |" in report
    assert set(results["settings"]) == {"kind=electra", "kind=mlm", "kind=none"}
    assert "| kind=none | none (random initialisation) | not pretrained |" in report


@pytest.mark.slow
def test_a_dynamics_figure_is_drawn_from_the_runs_metrics(study, tmp_path):
    run = study / "runs" / "kind=electra" / "pretrain"
    first = write_report([run], tmp_path / "a") / "dynamics-pretrain.png"
    lines = (run / "metrics.jsonl").read_text().splitlines()
    changed = tmp_path / "run"
    changed.mkdir()
    for name in ("config.yaml", "run.json"):
        (changed / name).write_text((run / name).read_text())
    edited = [json.loads(line) for line in lines]
    edited[0]["mlm_loss"] = 100.0  # one point moved
    (changed / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in edited) + "\n")
    second = write_report([changed], tmp_path / "b") / "dynamics-run.png"
    again = write_report([run], tmp_path / "c") / "dynamics-pretrain.png"
    assert first.read_bytes() == again.read_bytes()  # deterministic ...
    assert first.read_bytes() != second.read_bytes()  # ... and it moves with the metrics


@pytest.mark.slow
def test_the_gate_judges_the_last_held_out_evaluation(study, tmp_path):
    run = read_pretrain_run(study / "runs" / "kind=electra" / "pretrain")
    assert run.evals[-1]["eval_mlm_unigram_loss"] > run.evals[-1]["eval_mlm_unigram_entropy"]
    del run.evals[-1]["eval_mlm_unigram_loss"]  # first as a run logged before that metric existed
    run.evals[-1].update(
        eval_masked_accuracy=0.30,
        eval_mlm_majority_rate=0.18,
        eval_disc_auc=0.75,
        eval_masked_loss=4.5,
        eval_mlm_unigram_entropy=4.55,
    )
    verdict = gate(run)
    assert verdict.learned is True and "loss 4.500 vs the slots' own entropy 4.550 nats" in verdict.describe()
    run.evals[-1].update(eval_disc_auc=0.58)  # the discriminator never left the plateau
    verdict = gate(run)
    assert verdict.learned is False and "discriminator AUC 0.58 not > 0.6" in verdict.describe()
    run.evals[-1].update(eval_disc_auc=0.75, eval_masked_accuracy=0.19)  # the generator predicts the unigram mode
    assert gate(run).learned is False
    run.evals[-1].update(eval_masked_loss=4.4)  # ... but knows more than frequencies: 0.15 nats under unigram
    assert gate(run).learned is True
    run.evals[-1].update(eval_masked_loss=4.5)
    run.evals[-1].update(eval_mlm_accuracy=0.33)  # all chosen slots, kept ones included: not what the gate reads
    assert gate(run).learned is False
    # with the training text's token frequencies logged, the gate compares with them, not with the slots' entropy
    run.evals[-1].update(eval_mlm_unigram_loss=4.65)
    verdict = gate(run)
    assert verdict.learned is True and "loss 4.500 vs token frequencies 4.650 nats" in verdict.describe()
    run.evals[-1].update(eval_mlm_unigram_loss=4.55)
    assert gate(run).learned is False
    assert gate(None).learned is None


def _pretraining_midway(out: Path) -> bool:
    """The first setting's pretraining finished, the second's started."""
    first = out / "runs" / "kind=electra" / "pretrain" / "run.json"
    return first.exists() and (out / "runs" / "kind=mlm" / "pretrain" / "metrics.jsonl").exists()


def _fine_tuning_midway(out: Path) -> bool:
    """A fine-tuning run finished (a session's end is as likely to fall in this phase as in pretraining)."""
    return any(out.glob("runs/*/glue/runs/*/*/result.json"))


@pytest.mark.slow
@pytest.mark.parametrize("midway", [_pretraining_midway, _fine_tuning_midway], ids=["pretraining", "fine-tuning"])
def test_a_killed_study_resumes_to_the_same_results(study, tasks, tmp_path, midway):
    """SIGKILL the study midway through a phase; running it again completes it, and every setting's weights and
    GLUE results equal the uninterrupted study's."""
    out = tmp_path / "s"
    s = spec(out, tasks)
    args = [
        "study",
        "--out",
        str(out),
        "--base",
        "tiny",
        "--vary",
        s.vary[0],
        "--budget",
        s.budget,
        "--tasks",
        tasks,
        "--seeds",
        "1",
        "--finetune-set",
        s.finetune_overrides[0],
        *[a for o in PRETRAIN for a in ("--set", o)],
    ]
    proc = start_cli(*args)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not midway(out):
        time.sleep(0.05)
    assert midway(out), "the study ended or hung before the moment to kill it"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "report").exists()  # it really was stopped midway
    run_cli(*args, check=True)
    for name in ("kind=electra", "kind=mlm"):
        a = load_file(list_checkpoints(study / "runs" / name / "pretrain")[-1] / "model.safetensors")
        b = load_file(list_checkpoints(out / "runs" / name / "pretrain")[-1] / "model.safetensors")
        assert all(torch.equal(a[k], b[k]) for k in a), name
    for name in ("kind=electra", "kind=mlm", "kind=none"):
        a, b = (json.loads((d / "runs" / name / "glue" / "results.json").read_text()) for d in (study, out))
        source_a, source_b = a.pop("source"), b.pop("source")  # the same checkpoint, in another study's folder
        assert (source_a["step"], source_a["sha256"]) == (source_b["step"], source_b["sha256"]), name
        assert without_seconds(a) == without_seconds(b), name  # only the wall-clock seconds differ


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["pretraining", "fine-tuning"])
def test_ctrl_c_says_where_each_setting_stands_and_the_command_that_continues(tasks, tmp_path, phase):
    """Ctrl-C at a terminal (SIGINT to the study's process group) in either phase: exit 130, what stopped, each
    setting's pretraining and fine-tuning runs, and the command that continues, with no traceback."""
    out = tmp_path / "s"
    budget = "steps=3000" if phase == "pretraining" else "steps=8"
    args = ["study", "--out", str(out), "--base", "tiny", "--budget", budget, "--tasks", tasks, "--seeds", "2"]
    args += ["--setting", "electra:", "--setting", "mlm:objective.kind=mlm", "--quiet"]
    args += [a for o in PRETRAIN for a in ("--set", o)] + ["--finetune-set", "finetune.max_steps=3000"]
    proc = start_cli(*args, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    first_run = out / "runs" / "electra" / "glue" / "runs" / "syn-agree" / "seed0" / "claim"
    first_save = out / "runs" / "electra" / "pretrain" / "checkpoints"
    deadline = time.time() + 300
    while (
        time.time() < deadline
        and proc.poll() is None
        and not (first_save if phase == "pretraining" else first_run).exists()
    ):
        time.sleep(0.05)
    time.sleep(1.0)  # into the step loop, or into the run
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal's Ctrl-C does
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-2000:]
    lines = stdout.splitlines()
    if phase == "pretraining":
        step = json.loads((out / "runs" / "electra" / "pretrain" / "run.json").read_text())["step"]
        assert lines[-4] == f"electra stopped at step {step:,} of 3,000 (a checkpoint was saved)"
        assert lines[-3:-1] == [
            f"  electra: pretraining at step {step:,} of 3,000; 0 of 4 fine-tuning runs finished",
            "  mlm: pretraining not started; 0 of 4 fine-tuning runs finished",
        ]
    else:
        assert (
            lines[-4]
            == "Ctrl-C interrupted the fine-tuning of electra: syn-agree seed 0 (it starts again from its first step)"
        )
        assert lines[-3:-1] == [
            "  electra: pretrained; 0 of 4 fine-tuning runs finished",
            "  mlm: pretrained; 0 of 4 fine-tuning runs finished",
        ]
        assert not list(out.glob("runs/*/glue/runs/*/*/claim"))
    assert lines[-1] == f"continue with: {shlex.join([sys.executable, '-m', 'electra.cli', *args])}"  # as started


@pytest.mark.slow
def test_a_study_killed_alone_stops_its_pretraining_workers_with_a_checkpoint(tasks, tmp_path):
    """SIGTERM to the study's process only (not its group) while two pretraining workers run: the workers get a
    SIGTERM of their own, save a checkpoint saying so and exit, instead of training on as orphans."""
    out = tmp_path / "s"
    args = ["study", "--out", str(out), "--base", "tiny", "--budget", "steps=3000", "--parallel", "2"]
    args += ["--setting", "electra:", "--setting", "mlm:objective.kind=mlm", "--tasks", tasks, "--seeds", "1"]
    args += [a for o in PRETRAIN for a in ("--set", o)]
    proc = start_cli(*args)
    metrics = [out / "runs" / name / "pretrain" / "metrics.jsonl" for name in ("electra", "mlm")]
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not all(m.exists() for m in metrics):
        time.sleep(0.05)
    workers = child_pids(proc.pid, "spawn_main")
    assert len(workers) == 2 and proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    assert not alive(workers, within=120), "a worker trained on after the study died"
    for name in ("electra", "mlm"):
        run = out / "runs" / name / "pretrain"
        state = json.loads((run / "run.json").read_text())
        assert state["stopped_by_signal"] == signal.SIGTERM and 0 < state["step"] < 3000, name
        assert list_checkpoints(run)[-1].name == f"step_{state['step']:08d}"


@pytest.mark.slow
def test_a_study_killed_alone_in_fine_tuning_leaves_no_glue_worker_running(tasks, tmp_path):
    """The fine-tuning phase's `python -m electra.glue.sweep` workers stop when the study's process dies alone;
    before, they fine-tuned on as orphans."""
    out = tmp_path / "s"
    args = ["study", "--out", str(out), "--base", "tiny", "--budget", "steps=8", "--parallel", "2"]
    args += ["--setting", "electra:", "--setting", "mlm:objective.kind=mlm", "--tasks", tasks, "--seeds", "2"]
    args += [a for o in PRETRAIN for a in ("--set", o)] + ["--finetune-set", "finetune.epochs=100000"]  # runs on
    proc = start_cli(*args)
    deadline, workers = time.time() + 300, []
    while time.time() < deadline and proc.poll() is None and len(workers) < 2:
        workers = child_pids(proc.pid, "electra.glue.sweep")
        time.sleep(0.1)
    assert len(workers) == 2 and proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    assert not alive(workers, within=60), "a GLUE worker ran on after the study died"


@pytest.mark.slow
def test_parallel_pretraining_equals_sequential(study, tasks, tmp_path):
    """Worker processes compute what the study computes in one process: the same data, masks and initial weights
    (threads may differ, and with them the order of floating-point sums: equal to rounding)."""
    out = tmp_path / "p"
    run_study(spec(out, tasks, parallel=2))
    for name in ("kind=electra", "kind=mlm"):
        a = load_file(list_checkpoints(study / "runs" / name / "pretrain")[-1] / "model.safetensors")
        b = load_file(list_checkpoints(out / "runs" / name / "pretrain")[-1] / "model.safetensors")
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=f"{name} {k}")


def test_a_second_study_on_a_folder_in_use_is_refused(tmp_path, tasks):
    from electra.utils.errors import FolderInUseError
    from electra.utils.files import folder_lock

    out = tmp_path / "s"
    with folder_lock(out, "study"):  # another `electra study` holds the folder
        with pytest.raises(FolderInUseError, match=f"{out}: in use by another study"):
            run_study(spec(out, tasks))
    assert not (out / "study.json").exists()  # refused before it wrote anything


@pytest.mark.slow  # the `study` fixture
def test_a_run_and_its_glue_folder_make_one_entry_of_the_report(study, tmp_path):
    """`electra report RUN GLUE`: the sweep's sweep.json names the run, so the two are one model in the report;
    given alone, a GLUE folder brings its run along; a step-0 run is the random-initialisation baseline."""
    from electra.report.results import collect

    run, glue = study / "runs" / "kind=electra" / "pretrain", study / "runs" / "kind=electra" / "glue"
    entries, _ = collect([run, glue])
    assert len(entries) == 1 and entries[0].glue == json.loads((glue / "results.json").read_text())
    (alone,) = collect([glue])[0]
    assert alone.pretrain is not None and alone.pretrain.path.resolve() == run.resolve() and not alone.baseline
    (none,) = collect([study / "runs" / "kind=none" / "glue"])[0]
    assert none.baseline and none.kind == "none (random initialisation)" and none.judge().learned is None
    report = (
        write_report([run, glue, study / "runs" / "kind=none" / "glue"], tmp_path / "r") / "report.md"
    ).read_text()
    assert "| pretrain | electra |" in report and "| glue | none (random initialisation) | not pretrained |" in report


def test_a_pretraining_run_stopped_by_a_signal_stops_the_study(tmp_path, tasks, monkeypatch):
    """SIGTERM / Ctrl-C make a pretraining run save a checkpoint and return early; the study must then stop with a
    message instead of going on to the next setting and fine-tuning a half-trained model."""
    import electra.study.run as study_module

    calls = []

    def stopped_early(cfg_dict, run, device, threads=None, loggers=(), progress=True):
        calls.append(run)
        Path(run).mkdir(parents=True, exist_ok=True)  # what a run stopped by a signal leaves: run.json at its step
        (Path(run) / "run.json").write_text(json.dumps({"step": 3, "finished": False}))
        return 3  # the step it stopped at, short of the budget

    monkeypatch.setattr(study_module, "_pretrain_worker", stopped_early)
    with pytest.raises(study_module.StudyStopped, match=r"kind=electra stopped at step 3 of \d+"):
        run_study(spec(tmp_path / "s", tasks))
    assert len(calls) == 1  # not the next setting
    assert not (tmp_path / "s" / "runs" / "kind=electra" / "glue").exists()  # nor its fine-tuning


def test_the_study_prints_its_plan_before_it_starts(tmp_path, tasks, monkeypatch, capsys):
    """Settings, steps, FLOPs, the fine-tuning runs and an estimated wall time from timed steps (here made
    exact: 0.01 s a pretraining step, 0.002 s a fine-tuning step), printed before the first pretraining run."""
    import electra.study.grid as grid_module
    import electra.study.plan as plan_module
    import electra.study.run as study_module

    for module in (grid_module, plan_module):  # where it is defined, and the plan's name for it
        monkeypatch.setattr(module, "seconds_per_step", lambda cfg, device: 0.01)
    monkeypatch.setattr(plan_module, "finetune_step_seconds", lambda cfg, spec, length: 0.002)
    monkeypatch.setattr(study_module, "_pretrain_worker", lambda *a, **k: 0)  # stops the study after the plan
    s = spec(tmp_path / "s", tasks, seeds=[0, 1])
    with pytest.raises(study_module.StudyStopped):
        run_study(s)
    printed = capsys.readouterr().out.splitlines()
    settings = start(s)
    plan = plan_module.make_plan(s, settings)
    assert plan.tasks == {Path(t).name: 6 for t in tasks.split(",")}  # finetune.max_steps=6 caps both tasks
    assert plan.finetune_runs == 3 * 2 * 2 and plan.finetune_seconds == pytest.approx(3 * 2 * 12 * 0.002)
    steps = {x.name: x.steps for x in settings}
    assert plan.pretrain_seconds == pytest.approx(0.01 * (steps["kind=electra"] + steps["kind=mlm"]))
    first = printed.index(next(line for line in printed if line.startswith("== the plan of study")))
    assert printed[first] == f"== the plan of study {s.out}: 3 settings, budget flops=6e+09 each"
    assert first < printed.index(next(line for line in printed if line.startswith("== pretraining")))
    for x in settings:
        row = next(line for line in printed[first:] if line.startswith(f"   {x.name} "))
        flops = off_train_flops(x.config(s), x.steps) if x.steps else 0.0
        assert f"{x.steps:,} step" in row and f"{flops:9.3g} FLOPs" in row
        assert ("no pretraining" in row) if x.kind == "none" else "about" in row
        if x.kind != "none":  # the precision `electra pretrain` will resolve here: fp32 on a CPU
            assert "FLOPs  fp32, TF32 off  about" in row, row
    assert (
        printed[first + 4] == "   then 12 fine-tuning runs: 3 settings x 2 tasks x 2 seeds (syn-agree 6 steps, "
        "syn-topic 6 steps)"
    )
    assert printed[first + 5].startswith(f"   estimated wall time: about {plan.pretrain_seconds + 0.144:.0f} s")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin a process to one")
def test_workers_split_the_cpus_the_process_may_use_not_the_machines():
    """A study or sweep started under `taskset` or in a SLURM / container cpuset gives its workers threads out of
    the CPUs it may run on: a process pinned to one CPU counts 1 (os.cpu_count() would count the machine's)."""
    pinned = subprocess.run(
        [sys.executable, "-c", "from electra.utils.processes import usable_cpus; print(usable_cpus())"],
        preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(pinned.stdout) == 1 and os.cpu_count() >= 2


def test_with_parallel_workers_the_plan_times_each_workers_threads_and_spreads_the_runs(tmp_path, tasks, monkeypatch):
    """--parallel 2 on a CPU: each worker gets half the cores, so steps are timed with that many threads, and the
    wall time is the busiest worker's share (the two pretraining runs at once; the fine-tuning runs halved), not
    the sum of every run."""
    import torch

    import electra.study.grid as grid_module
    import electra.study.plan as plan_module
    import electra.utils.processes as processes_module

    threads = []
    for module in (grid_module, plan_module):  # where it is defined, and the plan's name for it
        monkeypatch.setattr(
            module,
            "seconds_per_step",
            lambda cfg, device: (
                threads.append(torch.get_num_threads()) or (0.01 if cfg.objective.kind == "electra" else 0.004)
            ),
        )
    monkeypatch.setattr(
        plan_module, "finetune_step_seconds", lambda cfg, spec, length: threads.append(torch.get_num_threads()) or 0.002
    )
    monkeypatch.setattr(processes_module.os, "sched_getaffinity", lambda pid: set(range(8)))  # 8 usable CPUs
    before = torch.get_num_threads()
    s = spec(tmp_path / "s", tasks, seeds=[0, 1], parallel=2, device="cpu")
    settings = start(s)
    plan = plan_module.make_plan(s, settings)
    lengths = set(plan_module.padded_lengths(s, 128).values())  # one timed step per distinct length
    assert threads == [4, 4] + [4] * len(lengths) and torch.get_num_threads() == before
    steps = {x.name: x.steps for x in settings}
    assert plan.pretrain_seconds == pytest.approx(max(0.01 * steps["kind=electra"], 0.004 * steps["kind=mlm"]))
    assert plan.finetune_seconds == pytest.approx(3 * 2 * 12 * 0.002 / 2)
    assert "2 processes at a time" in plan_module.plan_lines(plan, s.out)[-1]


def test_the_fine_tuning_phase_has_one_bar_over_its_runs(tmp_path, tasks, monkeypatch, capsys):
    """The bar moves as each fine-tuning run ends, not as each setting's sweep does: a one-setting study has an
    estimate after its first run; runs a resumed study finished before count from the start."""
    import electra.study.run as study_module
    from electra.glue.sweep import SweepResult
    from electra.study.run import finetune_all

    def sweep(spec, on_runs=None):  # each (task, seed) ends in turn, as work() tells it
        for task in ("syn-agree", "syn-topic"):
            for seed in spec.seeds:
                rdir = Path(spec.out) / "runs" / task / f"seed{seed}"
                if not (rdir / "result.json").exists():
                    rdir.mkdir(parents=True)
                    (rdir / "result.json").write_text("{}")
                    if on_runs is not None:
                        on_runs(1)
        return SweepResult({}, [])

    positions = []

    class Bar(study_module.tqdm):
        def update(self, n=1):
            super().update(n)
            positions.append(self.n)

    monkeypatch.setattr(study_module, "run_sweep", sweep)
    monkeypatch.setattr(study_module, "tqdm", Bar)
    s = spec(tmp_path / "s", tasks, seeds=[0, 1, 2])
    finetune_all(s, grid(s))
    assert positions == list(range(1, 19))  # 3 settings x 2 tasks x 3 seeds, one step per run
    bar = capsys.readouterr().err.replace("\r", "\n").splitlines()
    assert any(line.startswith("fine-tuning: 100%") and "18/18" in line and "run/s" in line for line in bar)
    one = spec(tmp_path / "one", tasks, seeds=[0, 1, 2], vary=[], settings=["electra:"])
    positions.clear()
    finetune_all(one, grid(one))
    assert positions == [1, 2, 3, 4, 5, 6]  # one setting: the bar moves before its sweep ends
    more = spec(tmp_path / "one", tasks, seeds=[0, 1, 2, 3], vary=[], settings=["electra:"])
    positions.clear()
    finetune_all(more, grid(more))
    assert positions == [7, 8]  # the 6 runs done before are counted from the start
    capsys.readouterr()
    finetune_all(spec(tmp_path / "q", tasks, progress=False), grid(s))
    assert "fine-tuning:" not in capsys.readouterr().err


def test_a_sweeps_worker_processes_report_each_finished_run(tmp_path, monkeypatch):
    """With several workers the runs end in other processes: the sweep counts the result.json files they write."""
    import electra.executors.local as local_module
    import electra.glue.sweep as sweep_module
    from electra.glue.sweep import SweepSpec, spawn_workers

    out = tmp_path / "glue"
    (out / "runs" / "rte" / "seed0").mkdir(parents=True)
    (out / "runs" / "rte" / "seed0" / "result.json").write_text("{}")  # finished before: not news

    class Worker:  # writes one result.json each time it is polled, then exits
        left = [("rte", 1), ("rte", 2), ("sst2", 0)]

        def __init__(self, *args, **kwargs):
            pass

        def poll(self):
            if not Worker.left:
                return 0
            task, seed = Worker.left.pop(0)
            (out / "runs" / task / f"seed{seed}").mkdir(parents=True)
            (out / "runs" / task / f"seed{seed}" / "result.json").write_text("{}")
            return None

        def wait(self):
            return 0

    told = []
    monkeypatch.setattr(local_module.subprocess, "Popen", Worker)
    monkeypatch.setattr(sweep_module, "WORKER_POLL_SECONDS", 0.0)
    assert spawn_workers(SweepSpec(out=str(out), model="m"), ["cpu", "cpu"], told.append) == [0, 0]
    assert sum(told) == 3 and all(n >= 1 for n in told)


def test_a_discriminator_whose_auc_fell_late_is_collapsed_not_never_learned(tmp_path):
    from electra.config import load_config
    from electra.report.results import PretrainRun

    evals = [
        {"step": s, "eval_masked_accuracy": 0.3, "eval_mlm_majority_rate": 0.1, "eval_disc_auc": auc}
        for s, auc in ((100, 0.55), (200, 0.81), (300, 0.52))
    ]
    run = PretrainRun(tmp_path, load_config("tiny"), {"step": 300}, [], evals)
    verdict = gate(run)
    assert verdict.learned is False and verdict.collapsed and verdict.word == "collapsed"
    assert verdict.describe().startswith("COLLAPSED: ") and "it had reached 0.810 at step 200" in verdict.describe()
    run.evals[1]["eval_disc_auc"] = 0.58  # never passed the gate: it never learned
    verdict = gate(run)
    assert not verdict.collapsed and verdict.word == "never learned" and verdict.describe().startswith("NEVER")
    run.evals[1]["eval_disc_auc"], run.evals[2]["eval_disc_auc"] = 0.603, 0.597  # a wobble at the threshold
    verdict = gate(run)  # (the real-text demo's ELECTRA: 0.603 at step 2000, 0.597 at its end)
    assert not verdict.collapsed and verdict.word == "never learned"


def test_a_generator_sweep_at_unequal_steps_is_warned_before_it_runs(tmp_path, tasks, caplog):
    sweep = ["model.generator_fraction=0.25,1.0"]
    start(spec(tmp_path / "flops", tasks, vary=sweep))
    assert "the generator sizes get unequal steps under this budget (generator_fraction=0.25: " in caplog.text
    caplog.clear()
    start(spec(tmp_path / "steps", tasks, vary=sweep, budget="steps=10"))
    assert "unequal steps" not in caplog.text


def test_the_plan_times_each_tasks_step_at_the_length_its_batches_are_padded_to(tmp_path, tasks, monkeypatch):
    """Fine-tuning batches are padded only to their longest example, so the plan times each task's step at the
    mean longest of its random batches (measured here from the tokenized training set), not at max_length: the
    synthetic tasks' sentences are far shorter than 128 tokens."""
    import numpy as np
    from tokenizers import Tokenizer

    import electra.study.grid as grid_module
    import electra.study.plan as plan_module
    from electra.data.synthetic import synthetic_tokenizer_json
    from electra.glue.features import encode
    from electra.glue.loading import load_task
    from electra.glue.tasks import resolve_tasks

    for module in (grid_module, plan_module):  # where it is defined, and the plan's name for it
        monkeypatch.setattr(module, "seconds_per_step", lambda cfg, device: 0.01)
    monkeypatch.setattr(plan_module, "finetune_step_seconds", lambda cfg, spec, length: 1e-4 * length)
    s = spec(tmp_path / "s", tasks, seeds=[0, 1])
    plan = plan_module.make_plan(s, start(s))
    lengths = plan_module.padded_lengths(s, 128)
    found, _ = resolve_tasks(tasks.split(","), None)
    tokenizer = Tokenizer.from_str(synthetic_tokenizer_json())
    for t in found:
        n = np.array([len(x) for x in encode(load_task(t).train, tokenizer).input_ids])
        batches = np.random.default_rng(1).choice(n, size=(2000, 32)).max(axis=1)  # the cpu/off recipe's batch
        assert lengths[t.task.name] < 128 and abs(lengths[t.task.name] - batches.mean()) <= 8.5, (t, batches.mean())
    assert plan.finetune_seconds == pytest.approx(3 * 2 * sum(6 * 1e-4 * lengths[t] for t in plan.tasks))


def cli_args(out: Path, tasks: str) -> list[str]:
    """`electra study` arguments of `spec(out, tasks)`."""
    s = spec(out, tasks)
    return [
        "study",
        "--out",
        str(out),
        "--base",
        "tiny",
        "--vary",
        s.vary[0],
        "--budget",
        s.budget,
        "--tasks",
        tasks,
        "--seeds",
        "1",
        "--finetune-set",
        s.finetune_overrides[0],
        *[a for o in PRETRAIN for a in ("--set", o)],
        "--quiet",
    ]


def test_the_study_ends_with_its_verdict_lines_and_the_reports_path(study, tasks, capsys):
    """As `make demo` ends: the verdict (electra/study/demo.py verdict_lines), then the report's path."""
    from electra.cli import main
    from electra.study.demo import verdict_lines

    assert main(cli_args(study, tasks)) == 0  # finished: nothing to run, the report rewritten
    printed = capsys.readouterr().out.rstrip().splitlines()
    expected = "\n".join(verdict_lines(study)).splitlines()
    assert printed[-1] == f"report: {study / 'report' / 'report.md'}"
    assert printed[-1 - len(expected) : -1] == expected
    assert expected[1].startswith("== verdict at 95% confidence") and expected[2].startswith("   kind=electra: ")


def test_more_seeds_and_tasks_extend_a_finished_study_fine_tuning_only_what_is_new(tmp_path, tasks):
    """`--seeds 2` after `--seeds 1` (and a task more): no pretraining rerun, the finished fine-tuning runs kept,
    only the new (task, seed) runs fine-tuned. Fewer seeds or another pretraining setting are still refused."""
    out = tmp_path / "s"
    first, *more = tasks.split(",")
    one = spec(out, first, vary=["objective.kind=electra,none"])
    run_study(one)
    pretrain = out / "runs" / "kind=electra" / "pretrain"
    kept = {
        p: p.stat().st_mtime_ns
        for p in [*pretrain.rglob("*.safetensors"), pretrain / "run.json", *out.rglob("result.json")]
    }
    run_study(spec(out, tasks, vary=one.vary, seeds=[0, 1]))
    assert {p: p.stat().st_mtime_ns for p in kept} == kept  # nothing redone
    for name in ("kind=electra", "kind=none"):
        results = json.loads((out / "runs" / name / "glue" / "results.json").read_text())
        assert sorted(results["tasks"]) == sorted(Path(t).name for t in tasks.split(","))
        assert all(next(iter(t["metrics"].values()))["n"] == 2 for t in results["tasks"].values())
    saved = json.loads((out / "study.json").read_text())
    assert saved["seeds"] == [0, 1] and saved["tasks"] == tasks.split(",")
    with pytest.raises(ConfigError, match=r"other settings \(seeds: \[0, 1\] -> \[0\]\)"):
        run_study(spec(out, tasks, vary=one.vary, seeds=[0]))
    with pytest.raises(ConfigError, match=r"other settings \(budget: 'flops=6e9' -> 'flops=7e9'\)"):
        run_study(spec(out, tasks, vary=one.vary, seeds=[0, 1], budget="flops=7e9"))
