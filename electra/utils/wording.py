"""Numbers and counts in the words people read: `1 seed`, `2 seeds`, `flops=1.62e11` rather than
`flops=161988147200.0`. For what the commands print and the report writes; files keep the exact values."""

from __future__ import annotations


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
