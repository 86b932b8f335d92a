"""What the README tells a newcomer to type agrees with what the code does: the set-up command exists, and the GLUE
commands it shows pass the seeds `electra glue` runs by default."""

from __future__ import annotations

import re

from electra.cli import COMMANDS
from electra.cli.common import Parser
from electra.glue.sweep import SweepSpec
from tests.helpers import ROOT

README = (ROOT / "README.md").read_text()


def test_the_quick_start_names_make_install_as_the_set_up_and_the_makefile_has_it():
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "make install   # the set-up: .venv at the repo root with the project and its dependencies" in quick
    assert quick.index("make install") < quick.index("make demo") < quick.index("make test")
    assert re.search(r"^install: \$\(STAMP\)$", (ROOT / "Makefile").read_text(), re.M)


def test_glues_default_seeds_are_those_the_readmes_glue_commands_pass():
    parser = Parser()
    COMMANDS["glue"][1](parser)
    commands = [line for line in README.splitlines() if re.search(r"(\$E|electra) glue ", line)]
    passed = {m[1] for m in (re.search(r"--seeds (\S+)", c) for c in commands) if m}
    assert len(commands) >= 2 and passed == {"3"}
    assert parser.get_default("seeds") == "3" and SweepSpec(out="x").seeds == [0, 1, 2]  # the CLI and the library
