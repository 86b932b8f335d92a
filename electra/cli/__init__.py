"""The `electra` command: the only package that knows about argparse. Each subcommand is a pair of plain
functions, `add_NAME(parser)` and `run_NAME(args) -> exit code`, in the module of its stage (corpus, pretrain, glue,
study, models); the run function turns the arguments into typed values and calls the library function that does
the work. Only the chosen command's modules are imported.

    torchrun --nproc_per_node 4 -m electra.cli pretrain ...   # several processes
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import shlex
import sys
from collections.abc import Callable
from typing import NoReturn

from electra.cli.common import Parser, invoked_as
from electra.cli.corpus import add_data, add_tokenizer, run_data, run_tokenizer
from electra.cli.glue import add_glue, run_glue
from electra.cli.models import (
    add_bench,
    add_export_hf,
    add_flops,
    add_import_hf,
    run_bench,
    run_export_hf,
    run_flops,
    run_import_hf,
)
from electra.cli.pretrain import add_pretrain, run_pretrain
from electra.cli.study import add_demo, add_report, add_study, run_demo, run_report, run_study
from electra.executors.jobs import JobsFailed
from electra.utils.errors import RankFailedError
from electra.utils.wording import as_flags

__all__ = ["COMMANDS", "main"]


Handlers = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]

# name -> (one-line help, add arguments, run), in pipeline order
COMMANDS: dict[str, Handlers] = {
    "tokenizer": ("train a byte-level BPE or WordPiece tokenizer", add_tokenizer, run_tokenizer),
    "data": ("prepare a tokenized pretraining corpus", add_data, run_data),
    "pretrain": ("pretrain ELECTRA (generator + discriminator)", add_pretrain, run_pretrain),
    "glue": ("fine-tune and evaluate on GLUE over several seeds, with a report", add_glue, run_glue),
    "study": ("a grid of pretraining runs at equal budget, each fine-tuned, with a report", add_study, run_study),
    "report": ("report.md with figures for runs, GLUE sweeps and studies", add_report, run_report),
    "export-hf": ("write a run's model in transformers format", add_export_hf, run_export_hf),
    "import-hf": ("make a run folder from transformers ELECTRA folders", add_import_hf, run_import_hf),
    "flops": ("training FLOPs and pfs-days of a configuration", add_flops, run_flops),
    "bench": ("time a pretraining or fine-tuning step", add_bench, run_bench),
    "demo": ("the pipeline at toy scale on the built-in language, on a CPU", add_demo, run_demo),
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
