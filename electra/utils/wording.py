"""Numbers and counts in the words people read: `1 seed`, `2 seeds`, `flops=1.62e11` rather than
`flops=161988147200.0`. For what the commands print and the report writes; files keep the exact values.

And the arguments a message names, in the caller's words: an error raised by a library function names the Python
argument that changes the outcome (`argument`: pass `resume="auto"`), and `electra`, which called that function
for a command line, prints the command's flag in its place (`as_flags`: pass --resume auto).
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Mapping


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 seed`, `3 seeds`, `1,200 steps` (`many`: an irregular plural)."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"


def number(value: float) -> str:
    """A count as people write it: integers with thousands separators, large or fractional values in three
    significant digits (`161988147200.0` -> `1.62e+11`)."""
    if float(value).is_integer() and abs(value) < 1e7:
        return f"{int(value):,}"
    return f"{value:.3g}"


def budget(text: str) -> str:
    """A study's budget as written in study.json (`flops=161988147200.0`) -> `flops=1.62e+11`."""
    kind, sep, value = text.partition("=")
    try:
        return f"{kind}={number(float(value))}" if sep else text
    except ValueError:
        return text


def duration(seconds: float) -> str:
    """`45 s`, `12.5 min`, `3.2 h`, `2.1 days`."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def argument(name: str, value: object = None) -> str:
    """An argument of a public function as a message names it, between backticks: `glue_dir`, `resume="auto"`,
    `overwrite=True` (`value` None: the argument alone). A dotted name is a field of an argument
    (`finetune.predict_test`, `read_options.text_column`)."""
    if value is None:
        return f"`{name}`"
    return f"`{name}={json.dumps(value) if isinstance(value, str) else repr(value)}`"


_ARGUMENT = re.compile(r"`([A-Za-z_][\w.]*)(?:=([^`]*))?`")


def as_flags(message: str, flags: Mapping[str, str]) -> str:
    """`message` with each `argument` that a command line sets as that flag: `resume="auto"` -> --resume auto,
    `overwrite=True` -> --overwrite, `glue_dir` -> --glue-dir. `flags` maps parameter names to the command's flags
    (run_dir -> --out); a dotted name is looked up whole, then by its last part (`finetune.predict_test` ->
    predict_test). Names the command has no flag for, and any other text between backticks, stay as they are."""

    def flag(match: re.Match) -> str:
        name, value = match.groups()
        option = flags.get(name) or flags.get(name.rsplit(".", 1)[-1])
        if option is None:
            return match.group(0)
        if value is None:
            return option
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            pass
        return option if value is True else f"{option} {shlex.quote(str(value))}"

    return _ARGUMENT.sub(flag, message)


def source_text(source: dict) -> str:
    """A model's source (electra.training.checkpoint.model_source: path, step, sha256) in one phrase:
    "RUN/checkpoints/step_00009000 (step 9,000, sha256 1a2b3c4d5e6f)"."""
    step = f"step {source['step']:,}, " if source.get("step") is not None else ""
    return f"{source['path']} ({step}sha256 {source['sha256'][:12]})"
