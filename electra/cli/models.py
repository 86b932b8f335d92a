"""The commands around a model: `electra export-hf` and `import-hf` (transformers format), `electra flops`
(training FLOPs of a configuration) and `electra bench` (a step timed)."""

from __future__ import annotations

import argparse
import json

from electra.cli.common import add_quiet


def add_export_hf(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a run folder (its newest checkpoint) or a checkpoint folder")
    p.add_argument("out", help="output folder: writes OUT/discriminator and OUT/generator")
    add_quiet(p, "accepted for scripts; the export draws no progress bar")


def run_export_hf(args: argparse.Namespace) -> int:
    from electra.training.checkpoint import export_run_to_hf

    out = export_run_to_hf(args.run, args.out)
    print(f"wrote {out / 'discriminator'} and {out / 'generator'} (from {args.run})")
    return 0


def add_import_hf(p: argparse.ArgumentParser) -> None:
    hub = "or a hub model id ORG/NAME[@REVISION] (offline: from the local Hugging Face cache)"
    p.add_argument("--discriminator", required=True, help=f"transformers ElectraForPreTraining folder, {hub}")
    p.add_argument("--generator", required=True, help=f"transformers ElectraForMaskedLM folder, {hub}")
    p.add_argument("--out", required=True, help="run folder to create (a step-0 checkpoint)")
    add_quiet(p, "accepted for scripts; the import draws no progress bar")


def run_import_hf(args: argparse.Namespace) -> int:
    from electra.training.checkpoint import import_run_from_hf

    ckpt = import_run_from_hf(args.discriminator, args.generator, args.out)
    tokenizer = (ckpt.parent.parent / "tokenizer").exists()
    print(f"imported into {ckpt}" + ("" if tokenizer else " (no tokenizer found beside the discriminator)"))
    return 0


def add_flops(p: argparse.ArgumentParser) -> None:
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
    add_quiet(p, "accepted for scripts; flops draws no progress bar")


def run_flops(args: argparse.Namespace) -> int:
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


def add_bench(p: argparse.ArgumentParser) -> None:
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
        add_quiet(q, "accepted for scripts; bench prints one JSON line")
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


def run_bench(args: argparse.Namespace) -> int:
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
