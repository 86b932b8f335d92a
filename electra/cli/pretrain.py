"""`electra pretrain`: its flags (shortcuts for --set), the run, and the lines it ends with: the command that
continues a stopped run, the held-out numbers the report's gate reads, and the command that fine-tunes the run."""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from electra.cli.common import add_quiet, invoked_as

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


def add_pretrain(p: argparse.ArgumentParser) -> None:
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
    add_quiet(p, "no progress bar")


def run_pretrain(args: argparse.Namespace) -> int:
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
