"""`electra glue`: its flags (shortcuts for --set finetune.KEY=VALUE), and --executor with the SLURM options,
which `electra study` takes too."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path

from electra.cli.common import add_quiet, parse_seeds
from electra.executors.jobs import JobsDetached

# flag -> fine-tuning config key: the flags are shortcuts for --set finetune.KEY=VALUE (bools: --X / --no-X)
GLUE_FLAGS = {
    "head": "head",
    "head_init": "head_init",
    "optimizer": "optimizer",
    "lr": "lr",
    "schedule": "schedule",
    "warmup_fraction": "warmup_fraction",
    "layer_decay": "layer_decay",
    "depth_convention": "depth_convention",
    "weight_decay": "weight_decay",
    "decay_norm_and_bias": "decay_norm_and_bias",
    "batch_size": "batch_size",
    "epochs": "epochs",
    "grad_clip": "grad_clip",
    "loss_reduction": "loss_reduction",
    "max_length": "max_length",
    "scale_targets": "scale_targets",
    "swap_pairs": "swap_pairs",
    "precision": "precision",
    "max_steps": "max_steps",
    "eval_every_epoch": "eval_every_epoch",
    "eval_batch_size": "eval_batch_size",
    "predict_test": "predict_test",
    "save_models": "save_model",
}


GLUE_DIRS_HELP = f"; repeatable, or folders joined by {os.pathsep!r}: each task from the first that holds it"


def glue_dirs(folders: list[str] | None) -> str | None:
    """--glue-dir given once or more -> the os.pathsep-joined folders electra/glue/tasks.py glue_roots reads."""
    return os.pathsep.join(folders) if folders else None


def add_glue(p: argparse.ArgumentParser) -> None:
    import typing

    from electra.config import FinetuneConfig, recipe_names
    from electra.glue.tasks import GLUE_TASKS
    from electra.utils.fielddocs import field_docs

    p.add_argument(
        "--model",
        help="a pretraining run folder, a checkpoint, our HF export, a transformers ELECTRA "
        "folder, or a hub model id ORG/NAME[@REVISION] (offline: from the local Hugging Face cache); "
        "required unless --report-only",
    )
    tasks = f"all, or a comma list of {','.join(GLUE_TASKS)} and task folders holding a task.json"
    p.add_argument("--tasks", default="all", help=tasks)
    glue_dir = (
        "a GLUE folder: the original TSVs (CoLA/, SST-2/, ...), or per task nyu-mll/glue's config written by datasets' "
        "save_to_disk (rte/) or as the hub repo's Parquet files (rte/train-00000-of-00001.parquet, ...); default: "
        "nyu-mll/glue from the hub (offline, HF_HUB_OFFLINE=1: from the local datasets cache)"
    )
    p.add_argument("--glue-dir", action="append", default=None, help=glue_dir + GLUE_DIRS_HELP)
    p.add_argument("--seeds", default="3", help="N for seeds 0..N-1, or a comma list of seeds (default 3)")
    p.add_argument("--out", required=True, help="output folder; rerunning with the same folder resumes")
    p.add_argument("--tokenizer", default=None, help="tokenizer folder, if none comes with the model")
    g = p.add_argument_group("fine-tuning recipe (docs/glue.md); the flags below are shortcuts for --set keys")
    g.add_argument(
        "--recipe",
        default="off",
        help=f"{', '.join(recipe_names())} or a YAML file (default: off, OFF's recipe with the paper's lr for Small)",
    )
    overrides = "any fine-tuning value, e.g. --set finetune.lr=1e-4 (repeatable; applied after the flags)"
    g.add_argument("--set", action="append", default=[], metavar="finetune.KEY=VALUE", help=overrides)
    hints, docs = typing.get_type_hints(FinetuneConfig), field_docs(FinetuneConfig)
    for dest, key in GLUE_FLAGS.items():
        tp = hints[key]
        kind = next((t for t in typing.get_args(tp) if t is not type(None)), tp)  # int | None -> int
        extra: dict = {"help": f"{docs.get(key, '')} (finetune.{key})".lstrip()}
        if tp is bool:
            extra["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(tp) is typing.Literal:
            extra["choices"] = typing.get_args(tp)
        else:
            extra["type"] = kind
        g.add_argument(f"--{dest.replace('_', '-')}", dest=dest, default=None, **extra)
    g.add_argument(
        "--no-stsb-scale", dest="scale_targets", action="store_false", default=None, help="same as --no-scale-targets"
    )
    x = p.add_argument_group("execution")
    x.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1, ...")
    devices = "comma list, one worker process per entry (repeat a device for two workers on it)"
    x.add_argument("--devices", default=None, help=devices)
    x.add_argument("--num-workers", type=int, default=1, help="worker processes sharing the runs")
    x.add_argument("--stop-after", type=int, default=None, help="stop after this many runs (resume later)")
    add_quiet(x)
    x.add_argument("--no-progress", dest="quiet", action="store_true", help="same as --quiet")
    x.add_argument("--report-only", action="store_true", help="rewrite the report from the finished runs")
    x.add_argument("--tensorboard", action="store_true", help="also log each run to OUT/tensorboard/TASK/seedS")
    x.add_argument(
        "--wandb",
        action="store_true",
        help="also log each run to Weights & Biases, grouped by OUT's "
        "name (offline, under OUT/wandb, unless WANDB_MODE)",
    )
    add_executor(p)


SLURM_FLAGS = {
    "partition": "partition",
    "time_minutes": "time_minutes",
    "account": "account",
    "qos": "qos",
    "sbatch": "sbatch",
    "job_name": "job_name",
    "gpus_per_job": "pretrain_gpus",
    "ranks_per_job": "pretrain_ranks",
    "finetune_gpus": "finetune_gpus",
    "cpus_per_job": "cpus_per_job",
    "mem_gb": "mem_gb",
    "finetune_cpus": "finetune_cpus",
    "finetune_mem_gb": "finetune_mem_gb",
    "poll_seconds": "poll_seconds",
    "warn_seconds": "warn_seconds",
    "wckey": "wckey",
    "stall_minutes": "stall_minutes",
    "result_wait_seconds": "result_wait_seconds",
}
"""--executor slurm's flags (dest) and the SlurmOptions field each sets."""


def add_executor(p: argparse.ArgumentParser) -> None:
    """--executor and the SLURM options (electra/executors/slurm.py SlurmOptions), shared by glue and study."""
    from electra.executors.jobs import EXECUTORS
    from electra.executors.slurm import DEFAULT_CPUS, SlurmOptions

    d = SlurmOptions()
    x = p.add_argument_group("where runs run (--executor slurm: SLURM jobs through submitit, docs/cluster.md)")
    x.add_argument("--executor", choices=EXECUTORS, default="local", help="local (default) or slurm")
    x.add_argument(
        "--slurm-config", default=None, metavar="FILE.yaml", help="SLURM options as YAML (the flags below win)"
    )
    x.add_argument("--partition", default=None, help="SLURM partition (default: the cluster's)")
    x.add_argument(
        "--time-minutes", type=int, default=None, help="time limit of one job (default 24 h, or the partition's)"
    )
    x.add_argument("--account", default=None, help="SLURM account")
    x.add_argument("--qos", default=None, help="SLURM quality of service")
    x.add_argument("--sbatch", action="append", default=None, metavar="--OPTION[=VALUE]", help="more sbatch options")
    x.add_argument("--job-name", default=None, help=f"the jobs' name prefix (default {d.job_name})")
    gpus = "GPUs of a pretraining job, one DDP rank each (default: 1 on a partition with GPUs, else 0)"
    x.add_argument("--gpus-per-job", type=int, default=None, help=gpus)
    x.add_argument("--ranks-per-job", type=int, default=None, help="processes of a pretraining job (0: one per GPU)")
    x.add_argument("--finetune-gpus", type=int, default=None, help="GPUs of a fine-tuning job, 0 or 1 (as above)")
    cpus = f"CPU cores (and CPU threads) of a job (default {DEFAULT_CPUS}, or a node's CPUs if fewer)"
    x.add_argument("--cpus-per-job", type=int, default=None, help=cpus)
    x.add_argument("--mem-gb", type=float, default=None, help="memory of a job")
    x.add_argument("--finetune-cpus", type=int, default=None, help="CPU cores of a fine-tuning job (default: as above)")
    x.add_argument(
        "--finetune-mem-gb", type=float, default=None, help="memory of a fine-tuning job (default: as above)"
    )
    poll = f"how often to look at the queue (default {d.poll_seconds:g} s)"
    x.add_argument("--poll-seconds", type=float, default=None, help=poll)
    warn = f"SLURM's warning before the time limit, to save a checkpoint (default {d.warn_seconds} s)"
    x.add_argument("--warn-seconds", type=int, default=None, help=warn)
    x.add_argument("--wckey", default=None, help="sbatch --wckey (default: none)")
    stall = f"report a running job whose run writes nothing for this long (default {d.stall_minutes:g} min)"
    x.add_argument("--stall-minutes", type=float, default=None, help=stall)
    wait = f"how long a result may take to appear on a shared filesystem (default {d.result_wait_seconds:g} s)"
    x.add_argument("--result-wait-seconds", type=float, default=None, help=wait)


def slurm_options(args: argparse.Namespace):
    """SlurmOptions: the defaults, then --slurm-config's YAML (strict: an unknown key or a wrong type is refused,
    naming the file), then the flags given."""
    from electra.config import ConfigError, merge, read_yaml
    from electra.executors.slurm import SlurmOptions

    options = SlurmOptions()
    if args.slurm_config:
        raw = read_yaml(Path(args.slurm_config))
        if not isinstance(raw, dict):
            raise ConfigError(f"{args.slurm_config}: expected a mapping of SLURM options (partition: gpu, ...)")
        options = merge(options, raw, source=args.slurm_config)
    given = {key: getattr(args, dest) for dest, key in SLURM_FLAGS.items() if getattr(args, dest) is not None}
    return dataclasses.replace(options, **given)


def run_glue(args: argparse.Namespace) -> int:
    from electra.config import load_finetune_config
    from electra.glue.sweep import SweepInterrupted, SweepSpec, run_sweep, write_report_only

    if args.report_only:
        return 0 if write_report_only(args.out).ok else 1
    if not args.model:
        raise ValueError("--model is required (a run folder, a checkpoint or an HF folder)")
    flags = [
        f"finetune.{key}={json.dumps(getattr(args, dest))}"
        for dest, key in GLUE_FLAGS.items()
        if getattr(args, dest) is not None
    ]
    spec = SweepSpec(
        out=args.out,
        model=args.model,
        tasks=args.tasks.split(","),
        glue_dir=glue_dirs(args.glue_dir),
        seeds=parse_seeds(args.seeds),
        tokenizer=args.tokenizer,
        recipe=args.recipe,
        finetune=load_finetune_config(args.recipe, flags + args.set),
        device=args.device,
        devices=args.devices.split(",") if args.devices else [],
        num_workers=args.num_workers,
        stop_after=args.stop_after,
        progress=not args.quiet,
        loggers=[name for name in ("tensorboard", "wandb") if getattr(args, name)],
        executor=args.executor,
        slurm=slurm_options(args),
    )
    try:
        return 0 if run_sweep(spec).ok else 1
    except SweepInterrupted as stop:  # Ctrl-C: what is done, what is not, and the command that continues
        print("\n".join([*stop.lines(), f"continue with: {args.command_line}"]), flush=True)
        return 130
    except JobsDetached as stop:  # Ctrl-C while following SLURM jobs: they go on
        print("\n".join([*stop.lines, f"follow them with: {args.command_line}"]), flush=True)
        return 130
