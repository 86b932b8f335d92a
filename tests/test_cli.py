"""The command line's paper cuts: one quiet flag on every command, "did you mean" for a misspelled key, and counts
printed as people write them."""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys

import pytest

from electra.cli import COMMANDS, main
from electra.cli.common import invoked_as
from electra.cli.pretrain import resume_command
from electra.config import ConfigError, load_config
from electra.utils.wording import budget, plural

# the least each command needs to parse
REQUIRED = {
    "tokenizer": ["train", "--out", "x", "in.txt"],
    "data": ["prepare", "--tokenizer", "t", "--out", "x", "in.txt"],
    "pretrain": ["--out", "x"],
    "glue": ["--out", "x"],
    "study": ["--out", "x"],
    "report": ["x"],
    "export-hf": ["run", "out"],
    "import-hf": ["--discriminator", "d", "--generator", "g", "--out", "x"],
    "flops": [],
    "bench": ["pretrain"],
    "demo": [],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_takes_quiet(command):
    """`electra COMMAND ... --quiet` parses (pretrain refused it; glue only had --no-progress)."""
    import argparse

    _, add, _ = COMMANDS[command]
    parser = argparse.ArgumentParser()
    add(parser)
    assert parser.parse_args([*REQUIRED[command], "--quiet"]).quiet is True
    assert parser.parse_args(REQUIRED[command]).quiet is False


def test_pretrain_quiet_draws_no_progress_bar(tmp_path, capsys):
    args = [
        "pretrain",
        "--config",
        "tiny",
        "--max-steps",
        "2",
        "--batch-size",
        "4",
        "--eval-every",
        "1000",
        "--set",
        "train.eval_batches=1",
    ]
    assert main([*args, "--out", str(tmp_path / "quiet"), "--quiet"]) == 0
    assert "pretrain:" not in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "loud")]) == 0
    assert "pretrain:" in capsys.readouterr().err  # the bar is there without --quiet


def test_a_misspelled_key_gets_a_did_you_mean():
    with pytest.raises(ConfigError, match=r"unknown key 'train\.max_step'; did you mean 'train\.max_steps'\?"):
        load_config("tiny", ["train.max_step=3"])
    with pytest.raises(ConfigError, match=r"unknown key 'modle'; did you mean 'model'\?"):
        load_config("tiny", ["modle.hidden_size=3"])
    with pytest.raises(ConfigError, match=r"unknown key 'train\.zzz'; valid keys"):  # nothing close: no guess
        load_config("tiny", ["train.zzz=3"])


def test_glue_takes_no_progress_as_quiet():
    import argparse

    _, add, _ = COMMANDS["glue"]
    parser = argparse.ArgumentParser()
    add(parser)
    assert parser.parse_args([*REQUIRED["glue"], "--no-progress"]).quiet is True


def test_every_fine_tuning_flag_of_glue_says_what_it_does():
    """Each shortcut flag's help is its FinetuneConfig field's docstring (a docstring placed after the next field's
    left --eval-batch-size with none)."""
    import argparse

    from electra.cli.glue import GLUE_FLAGS

    _, add, _ = COMMANDS["glue"]
    parser = argparse.ArgumentParser()
    add(parser)
    helps = {a.dest: a.help for a in parser._actions}
    for dest, key in GLUE_FLAGS.items():
        assert helps[dest] != f"(finetune.{key})", dest  # more than the key it sets
    assert helps["eval_batch_size"].startswith("Examples per evaluation forward pass")


def test_counts_and_budgets_read_as_people_write_them(tmp_path):
    import json

    from electra.glue.report import chance_lines
    from electra.report.write import write_report
    from tests.helpers import fake_study

    assert [plural(1, "seed"), plural(3, "seed"), plural(1200, "step")] == ["1 seed", "3 seeds", "1,200 steps"]
    assert budget("flops=161988147200.0") == "flops=1.62e+11" and budget("steps=6000") == "steps=6,000"
    assert budget("steps") == "steps"
    chance = {
        "at_chance": True,
        "metric": "accuracy",
        "value": 50.0,
        "baseline": 50.0,
        "margin": 5.0,
        "constant": False,
    }
    assert chance_lines({"rte": [{"chance": chance}]})[0].startswith("rte: 1 of 1 seed at chance level")
    study = fake_study(tmp_path / "s", {"electra": [60.0]})
    meta = json.loads((study / "study.json").read_text())
    meta["settings"][0]["steps"] = 1200
    meta.update(budget="flops=161988147200.0", tasks=["rte"], seeds=[0])
    (study / "study.json").write_text(json.dumps(meta))
    header = (write_report([study]) / "report.md").read_text()
    assert "Budget per setting: flops=1.62e+11 (optimizer steps: electra: 1,200). Fine-tuned on rte" in header


def test_pretrain_ends_with_the_held_out_numbers_and_the_gates_word(tmp_path, capsys):
    """The last line: MLM accuracy and loss at [MASK] against token frequencies (nats), the discriminator's AUC,
    the gate's word, the numbers of metrics.jsonl's last evaluation."""
    import json

    out = tmp_path / "run"
    assert (
        main(
            [
                "pretrain",
                "--config",
                "tiny",
                "--max-steps",
                "2",
                "--batch-size",
                "4",
                "--eval-every",
                "1000",
                "--set",
                "train.eval_batches=1",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    *_, last, next_line = capsys.readouterr().out.strip().splitlines()
    ev = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "eval_disc_auc" in r][-1]
    assert last.startswith("held-out at step 2: MLM at [MASK]: accuracy ")
    assert (
        f"accuracy {ev['eval_masked_accuracy']:.3f} vs most-frequent-token {ev['eval_mlm_majority_rate']:.3f}" in last
    )
    assert f"loss {ev['eval_masked_loss']:.3f} vs token frequencies {ev['eval_mlm_unigram_loss']:.3f} nats" in last
    assert f"discriminator AUC {round(ev['eval_disc_auc'], 3)} not > 0.6" in last
    assert last.endswith("the gate says: NEVER LEARNED")  # 2 steps learn nothing
    glue = shlex.join([*invoked_as(), "glue", "--model", str(out), "--out", f"{out}-glue"])
    assert next_line == f"next: {glue} (--tasks and --glue-dir choose the tasks and where their files are)"


def test_a_printed_command_starts_with_the_electra_the_user_ran(tmp_path, monkeypatch):
    """`electra` only where that is the program on PATH; the path run otherwise (.venv/bin/electra, .venv not
    activated); `python -m electra.cli` as this interpreter with -m."""
    venv = tmp_path / ".venv" / "bin" / "electra"
    venv.parent.mkdir(parents=True)
    venv.write_text("#!/bin/sh\n")
    other = tmp_path / "elsewhere" / "electra"
    other.parent.mkdir()
    other.write_text("#!/bin/sh\n")
    monkeypatch.setattr("shutil.which", lambda name: str(venv) if name == "electra" else None)
    assert invoked_as(str(venv)) == ["electra"]
    assert invoked_as(str(other)) == [str(other)]  # another electra is first on PATH
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert invoked_as(".venv/bin/electra") == [".venv/bin/electra"]
    assert invoked_as("/src/electra/cli/__main__.py") == [sys.executable, "-m", "electra.cli"]


def test_pretrain_stopped_by_ctrl_c_prints_the_whole_command_that_continues_it(tmp_path, monkeypatch, capsys):
    """SIGINT at step 2 (from inside the loop): the last line names the command as given, --resume auto added (or
    put in place of another --resume); run as printed, it finishes the run."""
    import os

    import electra.training.loop as loop

    real = loop.step_batches

    def interrupted(run, step, host=None):
        if step == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return real(run, step, host)

    monkeypatch.setattr(loop, "step_batches", interrupted)
    argv = ["pretrain", "--config", "tiny", "--max-steps", "6", "--batch-size", "4", "--out", str(tmp_path / "run")]
    argv += ["--set", "train.eval_batches=1", "--quiet"]
    assert main(argv) == 128 + signal.SIGINT
    last = capsys.readouterr().out.strip().splitlines()[-1]
    step = json.loads((tmp_path / "run" / "run.json").read_text())["step"]
    command = shlex.join([*invoked_as(), *argv, "--resume", "auto"])
    assert last == f"stopped at step {step} by signal 2; continue with: {command}"
    monkeypatch.setattr(loop, "step_batches", real)
    assert main(shlex.split(command)[len(invoked_as()) :]) == 0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["step"] == 6
    again = argparse.Namespace(argv=[*argv[:3], "--resume", "runs/x/checkpoints/step_00000002", *argv[3:]])
    assert resume_command(again) == command  # the checkpoint named before becomes auto, once
    assert resume_command(argparse.Namespace(argv=[*argv, "--resume=auto"])) == command


def test_pretrain_help_lists_the_presets_folder(capsys):
    from electra.config import PRESET_DIR

    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # argparse wraps after a hyphen
    names = sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))
    assert {"cpu", "small-study", "tiny"} <= set(names)
    assert f"a preset ({', '.join(names)}) or a YAML file" in text


@pytest.mark.parametrize("flag", [["--vocab-sise", "4096"], ["--vocab-sise=4096"]])
def test_a_misspelled_flag_gets_a_did_you_mean(flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["tokenizer", "train", "in.txt", "--out", "x", *flag])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == f"electra tokenizer: error: unrecognized arguments: {' '.join(flag)}; did you mean --vocab-size?"


@pytest.mark.parametrize(
    "argv, flag, meant",
    [
        (["pretrain", "--config", "tiny", "--out", "x", "--max-step", "100"], "--max-step 100", "--max-steps"),
        (["glue", "--model", "m", "--out", "x", "--task", "sst2"], "--task sst2", "--tasks"),
        (["tokenizer", "train", "in.txt", "--out", "x", "--vocab", "300"], "--vocab 300", "--vocab-size"),
    ],
)
def test_an_abbreviated_flag_is_refused_naming_the_flag_it_is_short_for(argv, flag, meant, capsys):
    """argparse's prefix matching took `--max-step 100` as --max-steps and `glue --task sst2` as --tasks (5 seeds of
    SST-2 started); every parser, a subcommand's subcommands' too, refuses them before anything runs."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == f"electra {argv[0]}: error: unrecognized arguments: {flag}; did you mean {meant}?"


def test_a_key_named_as_the_original_code_names_it_gets_ours():
    """google-research/electra's learning_rate is our lr: difflib finds nothing that close, the alias does."""
    with pytest.raises(ConfigError, match=r"unknown key 'train\.learning_rate'; did you mean 'train\.lr'\?"):
        load_config("tiny", ["train.learning_rate=1e-3"])
    with pytest.raises(ConfigError, match=r"unknown key 'train\.num_train_steps'; did you mean 'train\.max_steps'\?"):
        load_config("tiny", ["train.num_train_steps=3"])


def test_glue_on_a_missing_cuda_is_refused_before_any_data_is_read_in_pretrains_words(tmp_path, capsys):
    """No GLUE folder exists: the device is checked first, with the words of `electra pretrain --device cuda`."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    missing = tmp_path / "no-such-glue"
    assert (
        main(
            [
                "glue",
                "--model",
                str(tmp_path),
                "--tasks",
                "rte",
                "--glue-dir",
                str(missing),
                "--device",
                "cuda",
                "--out",
                str(tmp_path / "out"),
                "--quiet",
            ]
        )
        == 2
    )
    glue_err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--device cuda: no CUDA device is visible" in glue_err and str(missing) not in glue_err
    assert main(["pretrain", "--config", "tiny", "--device", "cuda", "--out", str(tmp_path / "run")]) == 2
    pretrain_err = capsys.readouterr().err.strip().splitlines()[-1]
    assert glue_err.split(": ", 1)[1] == pretrain_err.split(": ", 1)[1]


def test_library_errors_name_python_arguments_and_the_cli_names_flags(tmp_path, capsys):
    """`electra.pretrain(cfg, RUN)` into a run that holds checkpoints says `resume="auto"`, which is what Python takes;
    `electra pretrain` says --resume auto. The same for the GLUE sweep's and the study's arguments."""
    import electra

    args = ["--config", "tiny", "--max-steps", "2", "--batch-size", "4", "--set", "train.eval_batches=1", "--quiet"]
    run = tmp_path / "run"
    assert main(["pretrain", *args, "--out", str(run)]) == 0
    capsys.readouterr()
    with pytest.raises(ValueError) as python:
        electra.pretrain(load_config("tiny", ["train.max_steps=2"]), run, progress=False)
    assert (
        str(python.value) == f'{run} already holds checkpoints: pass `resume="auto"` to continue, or another `run_dir`'
    )
    assert main(["pretrain", *args, "--out", str(run)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"electra pretrain: error: {run} already holds checkpoints: pass --resume auto to continue, or another --out"
    )

    missing = tmp_path / "missing"
    with pytest.raises(FileNotFoundError, match=f"{missing}: `glue_dir` is not a folder"):
        electra.run_sweep(
            electra.SweepSpec(out=str(tmp_path / "g"), model=str(run), tasks=["rte"], glue_dir=str(missing))
        )
    assert main(["glue", "--model", str(run), "--tasks", "rte", "--glue-dir", str(missing), "--out", "g"]) == 2
    assert capsys.readouterr().err.strip() == f"electra glue: error: {missing}: --glue-dir is not a folder"

    with pytest.raises(ConfigError, match=r'^`budget="flops"`: flops needs a value'):
        electra.run_study(electra.StudySpec(out=str(tmp_path / "s"), base="tiny", budget="flops"))
    assert main(["study", "--out", str(tmp_path / "s"), "--base", "tiny", "--budget", "flops"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("electra study: error: --budget flops: flops needs a value, e.g. flops=1e14")
    )
