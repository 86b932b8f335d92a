"""What every subcommand shares: the parser class (no abbreviated flags), the quiet flag, the seeds argument,
and how the user started `electra` (for the commands printed for them to run next)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path


class Parser(argparse.ArgumentParser):
    """Every parser of the command, a subcommand's own subcommands' too (`add_subparsers` makes its parsers of its
    parent's class): no abbreviated flags, so `--max-step 100` is refused with a did-you-mean (`_flag_suggestion`,
    electra/cli/__init__.py) instead of silently meaning --max-steps, and `--task sst2` instead of meaning --tasks."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def add_quiet(p: argparse.ArgumentParser, what: str = "no progress bars") -> None:
    """The one quiet flag every command takes (commands without progress bars accept it too, for scripts)."""
    p.add_argument("--quiet", action="store_true", help=what)


def invoked_as(argv0: str | None = None) -> list[str]:
    """How the user started `electra` (`argv0`, default sys.argv[0]), as the first words of a command printed for
    them to run next: `electra` where that is the program on PATH, else the path they ran (`.venv/bin/electra` when
    the virtual environment is not activated), or this interpreter with `-m electra.cli`."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    if Path(argv0).name == "__main__.py":  # python -m electra.cli (or a runner that imports it)
        return [sys.executable, "-m", "electra.cli"]
    on_path = shutil.which("electra")
    if on_path is not None and Path(argv0).exists() and os.path.samefile(on_path, argv0):
        return ["electra"]
    return [argv0]


def parse_seeds(text: str) -> list[int]:
    """--seeds: N for seeds 0..N-1, or a comma list of seeds."""
    try:
        return [int(s) for s in text.split(",") if s.strip()] if "," in text else list(range(int(text)))
    except ValueError:
        raise ValueError(f"--seeds {text!r}: expected a count or a comma list of integers") from None
