"""The `electra` command: the only module that knows about argparse. Each subcommand is a pair of plain functions
here, `_add_NAME(parser)` and `_run_NAME(args) -> exit code`; the run function turns the arguments into typed
values and calls the library function that does the work. Only the chosen command's modules are imported.

    torchrun --nproc_per_node 4 -m electra.cli pretrain ...   # several processes
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import logging
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from electra.executors.jobs import JobsDetached, JobsFailed
from electra.utils.errors import RankFailedError
from electra.utils.wording import as_flags


class Parser(argparse.ArgumentParser):
    """Every parser of the command, a subcommand's own subcommands' too (`add_subparsers` makes its parsers of its
    parent's class): no abbreviated flags, so `--max-step 100` is refused with a did-you-mean (`_flag_suggestion`)
    instead of silently meaning --max-steps, and `--task sst2` instead of meaning --tasks."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def _add_quiet(p: argparse.ArgumentParser, what: str = "no progress bars") -> None:
    """The one quiet flag every command takes (commands without progress bars accept it too, for scripts)."""
    p.add_argument("--quiet", action="store_true", help=what)


# -- tokenizer ------------------------------------------------------------------------------------------------


def _add_tokenizer(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("train", help="train a tokenizer and write OUT/tokenizer.json")
    kinds = "bpe: byte-level BPE, cased (the study); wordpiece: uncased WordPiece (the original)"
    p.add_argument("--kind", choices=["bpe", "wordpiece"], default="bpe", help=kinds)
    p.add_argument("--vocab-size", type=int, default=30522, help="vocabulary size, special tokens included")
    p.add_argument("--out", required=True, help="output folder (tokenizer.json is written into it)")
    p.add_argument("--overwrite", action="store_true", help="replace the tokenizer that --out already holds")
    _add_input_arguments(p)
    _add_quiet(p)


INPUTS_HELP = (
    ".txt/.jsonl/.parquet/.arrow files, tar archives (OpenWebText's openwebtext.tar.xz or its urlsf_subset*.xz), "
    "folders of those, a folder written by datasets' save_to_disk, or a hub dataset NAME[:CONFIG] (offline: from "
    "the local datasets cache)"
)


def _add_input_arguments(p: argparse.ArgumentParser) -> None:
    """The inputs and how to read them: shared by `tokenizer train` and `data prepare`."""
    from electra.data.sources import BINARY_RATE, DOC_SEPARATORS, ReadOptions

    d = ReadOptions()
    separators = (
        ".txt files: blank: a blank line ends a document (default); file: each file is one document, blank lines "
        "separate its paragraphs (OpenWebText); line: each non-empty line is a document"
    )
    column = "the text field of .jsonl rows, the text column of Parquet/Arrow/datasets rows (default: text)"
    p.add_argument("inputs", nargs="+", metavar="INPUT", help=INPUTS_HELP)
    p.add_argument("--doc-separator", choices=DOC_SEPARATORS, default=d.doc_separator, help=separators)
    p.add_argument("--text-column", default=d.text_column, help=column)
    p.add_argument("--split", default=d.split, help="the split of a DatasetDict folder or hub dataset (default: train)")
    binary = (
        f"read inputs that are not UTF-8 text (over {BINARY_RATE * 100:g}%% of their bytes invalid UTF-8 or NUL: a "
        "binary file, or another encoding), invalid sequences as U+FFFD"
    )
    p.add_argument("--allow-binary", action="store_true", help=binary)


def _read_options(args: argparse.Namespace):
    from electra.data.sources import ReadOptions

    return ReadOptions(doc_separator=args.doc_separator, text_column=args.text_column, split=args.split)


def _run_tokenizer(args: argparse.Namespace) -> int:
    import time

    from electra.data.tokenizer import load_tokenizer, train_tokenizer

    start = time.perf_counter()
    path = train_tokenizer(
        args.kind,
        args.vocab_size,
        args.inputs,
        args.out,
        show_progress=not args.quiet,
        read_options=_read_options(args),
        overwrite=args.overwrite,
        allow_binary=args.allow_binary,
    )
    vocab = load_tokenizer(path).get_vocab()
    print(f"wrote {path} ({len(vocab)} tokens) in {time.perf_counter() - start:.1f}s{_vocab_overshoot(vocab, args)}")
    return 0


def _vocab_overshoot(vocab: dict[str, int], args: argparse.Namespace) -> str:
    """Why a WordPiece vocabulary came out larger than --vocab-size: its trainer keeps every character of the
    text's alphabet (each alone and as a ##continuation), whatever the size asked for; "" when it did not."""
    if len(vocab) <= args.vocab_size:
        return ""
    chars = sum(len(t.removeprefix("##")) == 1 for t in vocab)
    return (
        f"; {len(vocab) - args.vocab_size:,} more than --vocab-size {args.vocab_size:,}: WordPiece keeps every "
        f"character of the text's alphabet ({chars:,} single-character entries here, ## forms included); "
        "a byte-level BPE (--kind bpe) keeps the size"
    )


# -- data -----------------------------------------------------------------------------------------------------


def _add_data(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("prepare", help="tokenize text into a memory-mapped pretraining corpus folder")
    tokenizer = (
        "folder with tokenizer.json (or a BERT vocab.txt), or the file; or a model's: a run folder or checkpoint, our "
        "transformers export, a transformers folder or hub id ORG/NAME[@REVISION] (the text a model continues on)"
    )
    p.add_argument("--tokenizer", required=True, help=tokenizer)
    p.add_argument("--out", required=True, help="output folder (created atomically)")
    _add_input_arguments(p)
    workers = "tokenizer processes (default: one per core; one on machines with two cores or fewer)"
    p.add_argument("--workers", type=int, default=None, help=workers)
    p.add_argument("--overwrite", action="store_true", help="replace an existing, different prepared folder")
    unknown = "prepare a corpus even when most of its tokens are [UNK] (the tokenizer cannot read it)"
    p.add_argument("--allow-unknown-tokens", action="store_true", help=unknown)
    _add_quiet(p)


def _run_data(args: argparse.Namespace) -> int:
    from electra.data.prepare import prepare, summary
    from electra.modeling.hub import resolve_model

    meta = prepare(
        args.inputs,
        resolve_model(args.tokenizer),  # a hub id: its cached snapshot; a model folder: its tokenizer (prepare)
        args.out,
        args.workers,
        args.overwrite,
        not args.quiet,
        read_options=_read_options(args),
        allow_unknown_tokens=args.allow_unknown_tokens,
        allow_binary=args.allow_binary,
    )
    print(summary(meta, args.out))
    return 0


# -- pretrain -------------------------------------------------------------------------------------------------

# flag -> config key: the flags are shortcuts for --set
PRETRAIN_FLAGS = {
    "data": "data.path",
    "max_steps": "train.max_steps",
    "seed": "train.seed",
    "batch_size": "train.batch_size",
    "micro_batch_size": "train.micro_batch_size",
    "max_memory_gb": "train.max_memory_gb",
    "save_every": "train.save_every",
    "eval_every": "train.eval_every",
    "log_every": "train.log_every",
    "precision": "train.precision",
    "compile": "train.compile",
}


def _add_pretrain(p: argparse.ArgumentParser) -> None:
    from electra.config import preset_names

    presets = ", ".join(preset_names())
    p.add_argument("--config", default=None, help=f"a preset ({presets}) or a YAML file (default: small)")
    p.add_argument("--data", help="a folder from `electra data prepare` (default: the built-in synthetic corpus)")
    p.add_argument("--out", required=True, help="the run folder")
    p.add_argument("--max-steps", type=int, help="optimizer steps (train.max_steps)")
    p.add_argument("--seed", type=int)
    p.add_argument("--batch-size", type=int, help="global batch in sequences (train.batch_size)")
    p.add_argument("--micro-batch-size", type=int, help="sequences per forward pass on one device")
    p.add_argument("--max-memory-gb", type=float, help="choose the micro-batch to fit this GPU memory budget")
    p.add_argument("--save-every", type=int)
    p.add_argument("--eval-every", type=int)
    p.add_argument("--log-every", type=int)
    p.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"])
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile the step (default: on with CUDA, off on CPU)",
    )
    p.add_argument("--resume", help="'auto' (newest valid checkpoint of --out) or a checkpoint folder")
    init = (
        "start from a model you already have (continued pretraining; weights only: a fresh optimizer, schedule and "
        "step counter; the model's shape is the source's): a run folder or checkpoint, our transformers export, a "
        "transformers ELECTRA discriminator folder or hub id ORG/NAME[@REVISION]"
    )
    p.add_argument("--init", metavar="SOURCE", help=init)
    gen = "the transformers generator beside a --init discriminator (folder or hub id); without it one is made afresh"
    p.add_argument("--init-generator", metavar="GENERATOR", help=gen)
    p.add_argument(
        "--device", help="cpu, cuda (under torchrun: the local rank's GPU) or cuda:N (default: cuda if available)"
    )
    p.add_argument("--tensorboard", action="store_true", help="also log to RUN/tensorboard")
    p.add_argument("--wandb", action="store_true", help="also log to Weights & Biases (offline unless WANDB_MODE)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any config value, e.g. --set model.generator_fraction=1.0 (repeatable)",
    )
    _add_quiet(p, "no progress bar")


def _run_pretrain(args: argparse.Namespace) -> int:
    import torch.distributed as dist

    from electra.config import load_config
    from electra.training.loop import pretrain
    from electra.training.step import NonFiniteError

    flags = [f"{key}={getattr(args, flag)}" for flag, key in PRETRAIN_FLAGS.items() if getattr(args, flag) is not None]
    cfg = load_config(args.config or "small", flags + args.set)
    loggers = tuple(name for name in ("tensorboard", "wandb") if getattr(args, name))
    try:
        meta = pretrain(
            cfg,
            args.out,
            resume=args.resume,
            device=args.device,
            loggers=loggers,
            progress=not args.quiet,
            init=_init(args, flags),
        )
    except NonFiniteError as err:
        print(f"electra pretrain: {err}", file=sys.stderr)
        return 3
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if meta.stopped_by_signal:
        print(f"stopped at step {meta.step} by signal {meta.stopped_by_signal}; continue with: {resume_command(args)}")
        return 128 + meta.stopped_by_signal
    if cfg.objective.kind == "none":
        print(f"wrote the no-pretraining baseline (the initialised model, step 0, 0 FLOPs) to {args.out}")
        print(next_glue_line(args))
        return 0
    status = "the discriminator collapsed: see run.json" if meta.collapsed else "ok"
    print(f"finished step {meta.step} ({status}); run folder {args.out}")
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun: once
        print(held_out_line(args.out))
        print(next_glue_line(args))
    return 0


def _init(args: argparse.Namespace, flags: list[str]):
    """--init (and --init-generator) as `pretrain`'s `init`, with what set each config key (a preset given with
    --config, or --set and the flags), for its refusals; None without --init."""
    if args.init is None:
        if args.init_generator is not None:
            raise ValueError("--init-generator names the generator beside a --init discriminator: give --init too")
        return None
    from electra.config import keys_set
    from electra.training.continued import Init

    in_preset, overridden = keys_set(args.config, flags + args.set)
    set_by = {key: f"--config {args.config}" for key in in_preset} | {key: "--set" for key in overridden}
    return Init(args.init, args.init_generator, set_by)


def resume_command(args: argparse.Namespace) -> str:
    """The command that continues a stopped pretraining run: the one given, its --resume (if any) as --resume auto."""
    words, skip = [], False
    for word in args.argv:
        if skip or word == "--resume" or word.startswith("--resume="):
            skip = word == "--resume"
            continue
        words.append(word)
    return shlex.join([*invoked_as(), *words, "--resume", "auto"])


def next_glue_line(args: argparse.Namespace) -> str:
    """`pretrain`'s last line: the command that fine-tunes the run over seeds (the `cpu` recipe for a model of the
    `cpu` preset: docs/glue.md), into the folder beside it."""
    recipe = ["--recipe", "cpu"] if args.config == "cpu" else []
    command = [*invoked_as(), "glue", "--model", args.out, *recipe, "--out", f"{args.out.rstrip('/')}-glue"]
    return f"next: {shlex.join(command)} (--tasks and --glue-dir choose the tasks and where their files are)"


def held_out_line(run_dir: str) -> str:
    """The run's last held-out numbers as the report's gate reads them (electra/report/results.py gate): MLM
    accuracy and loss at [MASK] against token frequencies, the discriminator's AUC, and the gate's word."""
    from electra.report.results import gate, read_pretrain_run

    run = read_pretrain_run(run_dir)
    verdict = gate(run)
    step = f" at step {run.evals[-1]['step']:,}" if run.evals else ""
    return f"held-out{step}: {'; '.join(verdict.reasons)}; the gate says: {verdict.word.upper()}"


# -- glue -----------------------------------------------------------------------------------------------------


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


def _glue_dirs(folders: list[str] | None) -> str | None:
    """--glue-dir given once or more -> the os.pathsep-joined folders electra/glue/tasks.py glue_roots reads."""
    return os.pathsep.join(folders) if folders else None


def _add_glue(p: argparse.ArgumentParser) -> None:
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
    _add_quiet(x)
    x.add_argument("--no-progress", dest="quiet", action="store_true", help="same as --quiet")
    x.add_argument("--report-only", action="store_true", help="rewrite the report from the finished runs")
    x.add_argument("--tensorboard", action="store_true", help="also log each run to OUT/tensorboard/TASK/seedS")
    x.add_argument(
        "--wandb",
        action="store_true",
        help="also log each run to Weights & Biases, grouped by OUT's "
        "name (offline, under OUT/wandb, unless WANDB_MODE)",
    )
    _add_executor(p)


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


def _add_executor(p: argparse.ArgumentParser) -> None:
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


def _slurm_options(args: argparse.Namespace):
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


def _parse_seeds(text: str) -> list[int]:
    try:
        return [int(s) for s in text.split(",") if s.strip()] if "," in text else list(range(int(text)))
    except ValueError:
        raise ValueError(f"--seeds {text!r}: expected a count or a comma list of integers") from None


def _run_glue(args: argparse.Namespace) -> int:
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
        glue_dir=_glue_dirs(args.glue_dir),
        seeds=_parse_seeds(args.seeds),
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
        slurm=_slurm_options(args),
    )
    try:
        return 0 if run_sweep(spec).ok else 1
    except SweepInterrupted as stop:  # Ctrl-C: what is done, what is not, and the command that continues
        print("\n".join([*stop.lines(), f"continue with: {args.command_line}"]), flush=True)
        return 130
    except JobsDetached as stop:  # Ctrl-C while following SLURM jobs: they go on
        print("\n".join([*stop.lines, f"follow them with: {args.command_line}"]), flush=True)
        return 130


# -- study ------------------------------------------------------------------------------------------------------


def _add_study(p: argparse.ArgumentParser) -> None:
    from electra.study.grid import StudySpec

    d = StudySpec(out="")
    p.add_argument("--out", required=True, help="the study folder; rerunning with the same folder resumes")
    p.add_argument("--base", default=d.base, help="pretraining preset or YAML file every setting starts from")
    p.add_argument("--data", default=None, help="a prepared corpus (default: the built-in synthetic language)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="pretraining override, all settings")
    p.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="the grid, e.g. --vary objective.kind=electra,mlm,none (repeatable: the product)",
    )
    p.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE;KEY=VALUE",
        help="a named setting (repeatable), e.g. --setting mlm:objective.kind=mlm",
    )
    p.add_argument(
        "--budget",
        default=d.budget,
        help="per setting: steps[=N] (default: the preset's max_steps), flops=F (official ELECTRA "
        "accounting) or seconds=S (timed on this device first)",
    )
    p.add_argument("--tasks", default=d.tasks, help="GLUE tasks and/or task folders (default: sst2,mrpc,rte,wnli)")
    p.add_argument(
        "--glue-dir", action="append", default=None, help="GLUE data in the original TSV layout" + GLUE_DIRS_HELP
    )
    p.add_argument("--seeds", default="3", help="fine-tuning seeds: N for 0..N-1, or a comma list (default 3)")
    p.add_argument(
        "--pretrain-seeds",
        type=int,
        default=d.pretrain_seeds,
        metavar="N",
        help="pretrain each setting under N seeds (train.seed + 0..N-1; runs NAME-p0 ...), each fine-tuned over "
        "--seeds; the verdicts then test over pretraining seeds (default 1)",
    )
    p.add_argument("--recipe", default=d.recipe, help="fine-tuning recipe (default: off)")
    p.add_argument(
        "--finetune-set",
        action="append",
        default=[],
        metavar="finetune.KEY=VALUE",
        help="fine-tuning override (repeatable)",
    )
    p.add_argument("--parallel", type=int, default=1, help="pretraining runs at once (CPU threads are split)")
    p.add_argument("--device", default=None, help="e.g. cpu, cuda (default: cuda if available)")
    p.add_argument("--description", default="", help="a line for the report")
    p.add_argument("--tensorboard", action="store_true", help="also log every run to its tensorboard/ folder")
    p.add_argument(
        "--wandb", action="store_true", help="also log every run to Weights & Biases (offline unless WANDB_MODE)"
    )
    _add_quiet(p, "no progress bars (the plan and each phase's lines are still printed)")
    _add_executor(p)


def _run_study(args: argparse.Namespace) -> int:
    from electra.study.grid import StudySpec
    from electra.study.run import StudyStopped, run_study

    spec = StudySpec(
        out=args.out,
        base=args.base,
        overrides=args.set,
        vary=args.vary,
        settings=args.setting,
        budget=args.budget,
        data=args.data,
        tasks=args.tasks,
        glue_dir=_glue_dirs(args.glue_dir),
        seeds=_parse_seeds(args.seeds),
        pretrain_seeds=args.pretrain_seeds,
        recipe=args.recipe,
        finetune_overrides=args.finetune_set,
        description=args.description,
        parallel=args.parallel,
        device=args.device,
        loggers=[name for name in ("tensorboard", "wandb") if getattr(args, name)],
        progress=not args.quiet,
        executor=args.executor,
        slurm=_slurm_options(args),
    )
    try:
        report = run_study(spec)
    except StudyStopped as stop:  # a signal: what is done, what is not, and the command that continues
        print("\n".join([*stop.lines, f"continue with: {args.command_line}"]), flush=True)
        return 130
    from electra.study.demo import verdict_lines

    print("\n".join(verdict_lines(report.parent)))  # what the report allows one to say, as `make demo` ends
    print(f"report: {report / 'report.md'}")
    return 0


# -- report -----------------------------------------------------------------------------------------------------


def _add_report(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths",
        nargs="+",
        metavar="RUN_OR_STUDY",
        help="study folders, pretraining run folders and/or `electra glue` output folders",
    )
    p.add_argument("--out", default=None, help="report folder (default: FIRST_PATH/report)")
    _add_quiet(p, "accepted for scripts; the report draws no progress bar")


def _run_report(args: argparse.Namespace) -> int:
    from electra.report.write import write_report

    out = write_report(args.paths, args.out)
    print(f"report: {out / 'report.md'}")
    return 0


# -- transformers import and export ---------------------------------------------------------------------------


def _add_export_hf(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a run folder (its newest checkpoint) or a checkpoint folder")
    p.add_argument("out", help="output folder: writes OUT/discriminator and OUT/generator")
    _add_quiet(p, "accepted for scripts; the export draws no progress bar")


def _run_export_hf(args: argparse.Namespace) -> int:
    from electra.training.checkpoint import export_run_to_hf

    out = export_run_to_hf(args.run, args.out)
    print(f"wrote {out / 'discriminator'} and {out / 'generator'} (from {args.run})")
    return 0


def _add_import_hf(p: argparse.ArgumentParser) -> None:
    hub = "or a hub model id ORG/NAME[@REVISION] (offline: from the local Hugging Face cache)"
    p.add_argument("--discriminator", required=True, help=f"transformers ElectraForPreTraining folder, {hub}")
    p.add_argument("--generator", required=True, help=f"transformers ElectraForMaskedLM folder, {hub}")
    p.add_argument("--out", required=True, help="run folder to create (a step-0 checkpoint)")
    _add_quiet(p, "accepted for scripts; the import draws no progress bar")


def _run_import_hf(args: argparse.Namespace) -> int:
    from electra.training.checkpoint import import_run_from_hf

    ckpt = import_run_from_hf(args.discriminator, args.generator, args.out)
    tokenizer = (ckpt.parent.parent / "tokenizer").exists()
    print(f"imported into {ckpt}" + ("" if tokenizer else " (no tokenizer found beside the discriminator)"))
    return 0


# -- compute --------------------------------------------------------------------------------------------------


def _add_flops(p: argparse.ArgumentParser) -> None:
    from electra.modeling.flops import DEVICE_PEAK_TFLOPS

    p.add_argument("--preset", default="small", help="preset name or YAML file (default: small)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override; repeatable")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the config's max_steps)")
    p.add_argument("--batch-size", type=int, default=None, help="sequences per step (default: the config's)")
    p.add_argument("--seq-len", type=int, default=None, help="sequence length (default: the config's)")
    peak = p.add_mutually_exclusive_group()
    peak.add_argument("--device-tflops", type=float, default=None, help="peak TFLOP/s of one device")
    peak.add_argument("--device", choices=sorted(DEVICE_PEAK_TFLOPS), default=None, help="a device's peak")
    p.add_argument("--gpus", type=int, default=1, help="devices used (default 1)")
    wall = p.add_mutually_exclusive_group()
    wall.add_argument("--days", type=float, default=None, help="wall-clock days of the run")
    wall.add_argument("--hours", type=float, default=None, help="wall-clock hours of the run")
    wall.add_argument("--ms-per-step", type=float, default=None, help="a measured step time (electra bench)")
    p.add_argument("--json", action="store_true", help="print the numbers as one JSON line instead")
    _add_quiet(p, "accepted for scripts; flops draws no progress bar")


def _run_flops(args: argparse.Namespace) -> int:
    from electra.config import load_config
    from electra.modeling.flops import DEVICE_PEAK_TFLOPS, flops_lines, flops_report

    overrides = list(args.set)
    if args.batch_size is not None:
        overrides.append(f"train.batch_size={args.batch_size}")
    if args.seq_len is not None:
        overrides.append(f"data.seq_len={args.seq_len}")
    cfg = load_config(args.preset, overrides)
    steps = cfg.train.max_steps if args.steps is None else args.steps
    days = args.days
    if args.hours is not None:
        days = args.hours / 24
    if args.ms_per_step is not None:
        days = args.ms_per_step * steps / 1000 / 86400
    peak = DEVICE_PEAK_TFLOPS[args.device] if args.device else args.device_tflops
    report = flops_report(cfg, steps, days=days, peak_tflops=peak, gpus=args.gpus)
    print(json.dumps({"preset": args.preset, **report}) if args.json else "\n".join(flops_lines(report, args.preset)))
    return 0


def _add_bench(p: argparse.ArgumentParser) -> None:
    from electra.bench import BenchSettings
    from electra.training.precision import DTYPES

    d = BenchSettings()
    sub = p.add_subparsers(dest="what", required=True)
    for name, help_text in (
        ("pretrain", "time a pretraining step (masking, generator, discriminator, backward, clip, AdamW)"),
        ("finetune", "time a GLUE classification step and evaluation throughput"),
        ("check", "bf16 vs fp32 and compiled vs eager losses agree, no host-device syncs (exit 1 if not)"),
    ):
        q = sub.add_parser(name, help=help_text)
        q.add_argument("--preset", default=d.preset, help="preset name or YAML file (default: small)")
        q.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override; repeatable")
        q.add_argument("--batch-size", type=int, default=d.batch_size)
        q.add_argument("--seq-len", type=int, default=d.seq_len)
        q.add_argument("--device", default=d.device)
        _add_quiet(q, "accepted for scripts; bench prints one JSON line")
        if name == "check":
            q.add_argument("--steps", type=int, default=d.steps, help="training steps compared (default 10)")
            continue
        q.add_argument(
            "--no-malloc-tuning",
            dest="malloc_tuning",
            action="store_false",
            help="on CPU, leave glibc's defaults (see keep_freed_memory_in_heap)",
        )
        q.add_argument("--steps", type=int, default=d.steps, help="timed steps (default 10)")
        q.add_argument("--warmup", type=int, default=None, help="untimed steps (default 2; 3 with --compile)")
        q.add_argument("--dtype", choices=DTYPES, default=d.dtype)
        q.add_argument("--compile", action="store_true", help="torch.compile(dynamic=False) the forward")
        q.add_argument(
            "--compile-mode",
            default=None,
            choices=("default", "reduce-overhead", "max-autotune-no-cudagraphs"),
            help="torch.compile mode (reduce-overhead: CUDA graphs)",
        )
        if name == "pretrain":
            q.add_argument("--impl", choices=("ours", "hf", "both"), default="ours", help="both: alternate")
        else:
            from electra.glue.heads import HEADS

            q.add_argument("--num-labels", type=int, default=2)
            q.add_argument("--head", choices=HEADS, default="cls-linear", help="GLUE head (electra.glue.heads)")
            q.add_argument("--eval-batch-size", type=int, default=None, help="default: 4x the training batch")


def _run_bench(args: argparse.Namespace) -> int:
    from electra.bench import BenchSettings, bench_check, bench_finetune, bench_pretrain

    settings = BenchSettings(
        preset=args.preset,
        overrides=args.set,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        device=args.device,
        steps=args.steps,
        warmup=getattr(args, "warmup", None),
        dtype=getattr(args, "dtype", "fp32"),
        compile=getattr(args, "compile", False),
        compile_mode=getattr(args, "compile_mode", None),
        malloc_tuning=getattr(args, "malloc_tuning", False),
    )
    if args.what == "pretrain":
        out = bench_pretrain(settings, args.impl)
    elif args.what == "finetune":
        out = bench_finetune(settings, args.num_labels, args.head, args.eval_batch_size)
    else:
        out = bench_check(settings)
    print(json.dumps(out))
    return 0 if out.get("ok", True) else 1


# -- demo -----------------------------------------------------------------------------------------------------


def _add_demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="runs/demo", help="the demo's folder (replaced if it exists)")
    p.add_argument("--corpus", default=None, help="pretrain on this text instead of the built-in language")
    p.add_argument("--glue-dir", default=None, help="fine-tune on SST-2, MRPC, RTE and WNLI from this GLUE folder")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="the budget: FLOPs of this many ELECTRA steps (2000; with --corpus 2700)",
    )
    p.add_argument("--seeds", default="3", help="fine-tuning seeds: N for 0..N-1, or a comma list (default 3)")
    cap = "cap every fine-tuning run at this many steps (default: each task's full schedule)"
    p.add_argument("--finetune-steps", type=int, default=None, help=cap)
    _add_quiet(p, "no progress bars")


def _run_demo(args: argparse.Namespace) -> int:
    from electra.study.demo import demo
    from electra.study.run import StudyStopped

    try:
        demo(
            args.out,
            args.corpus,
            args.glue_dir,
            args.steps,
            _parse_seeds(args.seeds),
            args.finetune_steps,
            progress=not args.quiet,
        )
    except StudyStopped as err:
        print(f"electra demo: {err.args[0].split(';')[0]}; the demo starts afresh when run again", file=sys.stderr)
        return 130
    return 0


# -- dispatch -------------------------------------------------------------------------------------------------

Handlers = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]

# name -> (one-line help, add arguments, run), in pipeline order
COMMANDS: dict[str, Handlers] = {
    "tokenizer": ("train a byte-level BPE or WordPiece tokenizer", _add_tokenizer, _run_tokenizer),
    "data": ("prepare a tokenized pretraining corpus", _add_data, _run_data),
    "pretrain": ("pretrain ELECTRA (generator + discriminator)", _add_pretrain, _run_pretrain),
    "glue": ("fine-tune and evaluate on GLUE over several seeds, with a report", _add_glue, _run_glue),
    "study": ("a grid of pretraining runs at equal budget, each fine-tuned, with a report", _add_study, _run_study),
    "report": ("report.md with figures for runs, GLUE sweeps and studies", _add_report, _run_report),
    "export-hf": ("write a run's model in transformers format", _add_export_hf, _run_export_hf),
    "import-hf": ("make a run folder from transformers ELECTRA folders", _add_import_hf, _run_import_hf),
    "flops": ("training FLOPs and pfs-days of a configuration", _add_flops, _run_flops),
    "bench": ("time a pretraining or fine-tuning step", _add_bench, _run_bench),
    "demo": ("the pipeline at toy scale on the built-in language, on a CPU", _add_demo, _run_demo),
}


def _flag_suggestion(parser: argparse.ArgumentParser, unknown: list[str]) -> str:
    """The "; did you mean --vocab-size?" for the first unknown --flag close to one of the subcommand's options
    (its sub-subcommands' too: `tokenizer train`); "" when none is close."""
    options, parsers = [], [parser]
    while parsers:
        for action in parsers.pop()._actions:
            options += [o for o in action.option_strings if o.startswith("--")]
            if isinstance(action, argparse._SubParsersAction):
                parsers += list(action.choices.values())
    for arg in unknown:
        if arg.startswith("--"):
            close = difflib.get_close_matches(arg.split("=", 1)[0], options, n=1)
            if close:
                return f"; did you mean {close[0]}?"
    return ""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    top = Parser(
        prog="electra",
        description="ELECTRA pretraining and GLUE transfer on a small compute budget.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n" + "\n".join(f"  {n:<10} {h}" for n, (h, _, _) in COMMANDS.items()),
    )
    top.add_argument("command", choices=COMMANDS, metavar="COMMAND", help="one of the commands below")
    if not argv or argv[0] in ("-h", "--help"):
        top.print_help()
        return 0
    if argv[0] not in COMMANDS:
        top.parse_args(argv[:1])  # exits with argparse's "invalid choice" message
    name = argv[0]
    help_text, add, run = COMMANDS[name]
    parser = Parser(prog=f"electra {name}", description=help_text)
    add(parser)
    args, unknown = parser.parse_known_args(argv[1:])
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}{_flag_suggestion(parser, unknown)}")
    args.argv, args.command_line = argv, shlex.join([*invoked_as(), *argv])  # what an interrupted run prints
    try:
        code = run(args) or 0
    except KeyboardInterrupt:
        code = 130
    except JobsFailed as err:  # SLURM jobs that ended without their runs' results, one line each
        print(f"electra {name}: {err}", file=sys.stderr)
        code = 1
    except (ValueError, FileNotFoundError, OSError, RankFailedError) as err:
        # Errors we raise for bad input carry the file and line; show them as one line, not a traceback.
        print(f"electra {name}: error: {_error_line(err, _flag_names(parser))}", file=sys.stderr)
        code = 2
    if name == "pretrain" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        _leave_rank(code)
    return code


def invoked_as(argv0: str | None = None) -> list[str]:
    """How the user started `electra` (`argv0`, default sys.argv[0]), as the first words of a command printed for
    them to run next: `electra` where that is the program on PATH, else the path they ran (`.venv/bin/electra` when
    the virtual environment is not activated), or this interpreter with `-m electra.cli`."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    if Path(argv0).name in ("cli.py", "__main__.py"):  # python -m electra.cli (or a runner that imports it)
        return [sys.executable, "-m", "electra.cli"]
    on_path = shutil.which("electra")
    if on_path is not None and Path(argv0).exists() and os.path.samefile(on_path, argv0):
        return ["electra"]
    return [argv0]


def _error_line(err: BaseException, flags: dict[str, str]) -> str:
    """The error's message with the library's arguments it names (`resume="auto"`, `overwrite=True`:
    electra.utils.wording.argument) as the command's flags (--resume auto, --overwrite)."""
    return as_flags(str(err), flags)


PARAMETER_FLAGS = {
    "run_dir": "--out",
    "out_dir": "--out",
    "settings": "--setting",
    "overrides": "--set",
    "finetune_overrides": "--finetune-set",
}
"""Library parameters (and StudySpec fields) whose flag has another name; the others are their flag's dest."""


def _flag_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Parameter name -> the command's flag, for `as_flags`: each option's dest (its sub-subcommands' too), and
    PARAMETER_FLAGS where the command has that flag."""
    flags, parsers = {}, [parser]
    while parsers:
        for action in parsers.pop()._actions:
            long = [o for o in action.option_strings if o.startswith("--")]
            if long:
                flags.setdefault(action.dest, long[0])
            if isinstance(action, argparse._SubParsersAction):
                parsers += list(action.choices.values())
    return flags | {name: flag for name, flag in PARAMETER_FLAGS.items() if flag in flags.values()}


def _leave_rank(code: int) -> NoReturn:
    """A torchrun rank leaves with `code` once its work is saved and its process group destroyed, skipping the
    interpreter's finalization: gloo's worker threads, still owned by objects only garbage collection frees, can
    abort the process there ("terminate called without an active exception", SIGABRT), which would replace the
    rank's exit code (143 after SIGTERM) with -6."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
