"""The SLURM executor's options and the words it reports with, without a cluster: YAML then flags, refused
values named, the sbatch lines, a failed job's error line from its log."""

from __future__ import annotations

import argparse

import pytest

from electra.cli.glue import add_executor, slurm_options
from electra.config import ConfigError
from electra.executors.follow import error_line
from electra.executors.slurm import (
    Resources,
    SlurmOptions,
    check_options,
    plan_line,
    resources,
    sbatch_options,
)


def parsed(*argv: str) -> SlurmOptions:
    p = argparse.ArgumentParser()
    add_executor(p)
    return slurm_options(p.parse_args(list(argv)))


def test_yaml_then_flags_and_a_bad_file_named(tmp_path):
    yaml = tmp_path / "slurm.yaml"
    yaml.write_text("partition: gpu\nsbatch: ['--constraint=a100']\nmem_gb: 32\ncpus_per_job: 8\n")
    o = parsed("--slurm-config", str(yaml), "--partition", "debug", "--gpus-per-job", "4")
    assert (o.partition, o.sbatch, o.mem_gb, o.cpus_per_job, o.pretrain_gpus) == (
        "debug",
        ["--constraint=a100"],
        32,
        8,
        4,
    )
    assert parsed() == SlurmOptions()  # no flag given: the defaults
    yaml.write_text("partitio: gpu\n")
    with pytest.raises(ConfigError, match=f"{yaml}: unknown key 'partitio'; did you mean 'partition'"):
        parsed("--slurm-config", str(yaml))
    yaml.write_text("- gpu\n")
    with pytest.raises(ConfigError, match="expected a mapping of SLURM options"):
        parsed("--slurm-config", str(yaml))


def test_what_each_job_asks_for():
    o = SlurmOptions(
        partition="gpu", account="lab", sbatch=["--constraint=a100", "--exclusive"], pretrain_gpus=4, mem_gb=64,
        finetune_gpus=1, finetune_cpus=2, finetune_mem_gb=16,
    )  # fmt: skip
    assert sbatch_options(o) == {"constraint": "a100", "exclusive": True}  # a bare flag: `#SBATCH --exclusive`
    assert plan_line(o) == (
        "   on SLURM: each pretraining one job (4 GPUs, 4 processes, 4 CPUs each, 64 GB, 24 h, partition gpu, "
        "account lab, --constraint=a100, --exclusive), each fine-tuning run one element of a job array (1 GPU, "
        "2 CPUs, 16 GB, 24 h, partition gpu, account lab, --constraint=a100, --exclusive); the times above are this "
        "machine's"
    )
    assert resources(SlurmOptions(pretrain_gpus=0, pretrain_ranks=2), "pretrain") == Resources(0, 2, 4, None)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"time_minutes": 0}, "time_minutes must be >= 1, got 0"),
        ({"cpus_per_job": 0}, "cpus_per_job must be >= 1, got 0"),
        ({"pretrain_ranks": -1}, "pretrain_ranks must be >= 0, got -1"),
        ({"finetune_gpus": 2}, "finetune_gpus must be 0 or 1, got 2"),
        ({"mem_gb": 0.0}, "mem_gb must be > 0, got 0.0"),
        ({"finetune_cpus": 0}, "finetune_cpus must be >= 1, got 0"),
        ({"warn_seconds": 5}, "warn_seconds must be >= 10 and result_wait_seconds >= 60"),
        ({"result_wait_seconds": 15.0}, "warn_seconds must be >= 10 and result_wait_seconds >= 60"),
        ({"sbatch": ["constraint=a100"]}, "SLURM option 'constraint=a100': expected an sbatch option"),
    ],
)
def test_options_no_job_can_run_with_are_refused_before_submitting(change, message):
    with pytest.raises(ValueError, match=message):
        check_options(SlurmOptions(**change))


def test_a_failed_jobs_line_is_its_last_exception_or_slurms_note(tmp_path):
    log = tmp_path / "12_0_log.err"
    log.write_text(
        "Traceback (most recent call last):\n  File 'x.py', line 1\n"
        "electra.config.ConfigError: glue/RTE/dev.tsv:12: expected 4 columns\nsrun: error: vm: task 0: Exited\n"
    )
    assert error_line(log) == "electra.config.ConfigError: glue/RTE/dev.tsv:12: expected 4 columns"
    log.write_text("step 3\nslurmstepd: error: *** JOB 12 ON vm CANCELLED AT 2026-12-05T23:59:01 ***\n")
    assert error_line(log) == "*** JOB 12 ON vm CANCELLED AT 2026-12-05T23:59:01 ***"
    assert error_line(tmp_path / "none.err") is None  # no log (yet): the result may still be on its way
