"""`electra study` (a grid of pretraining runs at equal budget, each fine-tuned), `electra report`, and
`electra demo` (the study at toy scale)."""

from __future__ import annotations

import argparse
import sys

from electra.cli.common import add_quiet, parse_seeds
from electra.cli.glue import GLUE_DIRS_HELP, add_executor, glue_dirs, slurm_options


def add_study(p: argparse.ArgumentParser) -> None:
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
    add_quiet(p, "no progress bars (the plan and each phase's lines are still printed)")
    add_executor(p)


def run_study(args: argparse.Namespace) -> int:
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
        glue_dir=glue_dirs(args.glue_dir),
        seeds=parse_seeds(args.seeds),
        pretrain_seeds=args.pretrain_seeds,
        recipe=args.recipe,
        finetune_overrides=args.finetune_set,
        description=args.description,
        parallel=args.parallel,
        device=args.device,
        loggers=[name for name in ("tensorboard", "wandb") if getattr(args, name)],
        progress=not args.quiet,
        executor=args.executor,
        slurm=slurm_options(args),
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


def add_report(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths",
        nargs="+",
        metavar="RUN_OR_STUDY",
        help="study folders, pretraining run folders and/or `electra glue` output folders",
    )
    p.add_argument("--out", default=None, help="report folder (default: FIRST_PATH/report)")
    add_quiet(p, "accepted for scripts; the report draws no progress bar")


def run_report(args: argparse.Namespace) -> int:
    from electra.report.write import write_report

    out = write_report(args.paths, args.out)
    print(f"report: {out / 'report.md'}")
    return 0


def add_demo(p: argparse.ArgumentParser) -> None:
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
    add_quiet(p, "no progress bars")


def run_demo(args: argparse.Namespace) -> int:
    from electra.study.demo import demo
    from electra.study.run import StudyStopped

    try:
        demo(
            args.out,
            args.corpus,
            args.glue_dir,
            args.steps,
            parse_seeds(args.seeds),
            args.finetune_steps,
            progress=not args.quiet,
        )
    except StudyStopped as err:
        print(f"electra demo: {err.args[0].split(';')[0]}; the demo starts afresh when run again", file=sys.stderr)
        return 130
    return 0
