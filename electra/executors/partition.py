"""What a SLURM partition offers (`sinfo`: CPUs, memory and GPUs of its largest node, its time limit), and the
options fitted to it before anything is submitted: what was left to the defaults is fitted (no GPU asked on a
partition without any or for `--device cpu`, no more CPUs than a node has, a time limit within the partition's),
and what was asked that no node can give is refused in one line naming the flag. A request the partition could
grant but the queue still cannot (an account's limits, a QOS) shows as a pending reason: electra/executors/queue.py.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import subprocess
from dataclasses import dataclass

from electra.executors.slurm import DEFAULT_CPUS, DEFAULT_MINUTES, SlurmOptions
from electra.utils.wording import argument, plural

log = logging.getLogger("electra.slurm")

FLAG_OF = {"pretrain_gpus": "gpus_per_job", "pretrain_ranks": "ranks_per_job"}
"""SlurmOptions fields whose command-line flag has another name (the others: the field's, e.g. --cpus-per-job)."""


@dataclass(frozen=True)
class Partition:
    """The largest node of a partition and its time limit, as `sinfo` reports them."""

    name: str
    cpus: int
    mem_gb: float | None
    gpus: int
    minutes: int | None
    """The partition's time limit; None: none."""

    def text(self) -> str:
        limit = "no time limit" if self.minutes is None else f"time limit {_minutes_text(self.minutes)}"
        mem = f", {self.mem_gb:.0f} GB" if self.mem_gb is not None else ""
        gpus = plural(self.gpus, "GPU") if self.gpus else "no GPUs"
        return f"partition {self.name}: nodes of up to {plural(self.cpus, 'CPU')}{mem}, {gpus}, {limit}"


def _minutes_text(minutes: int) -> str:
    return f"{minutes // 60} h" if minutes % 60 == 0 else f"{minutes} min"


def parse_minutes(text: str) -> int | None:
    """sinfo's time limit in whole minutes (seconds dropped: never above the limit): "infinite" / "UNLIMITED" ->
    None; "M", "M:S", "H:M:S"; with days, "D-H", "D-H:M", "D-H:M:S"."""
    text = text.strip()
    if text.lower() in ("infinite", "unlimited", "n/a", ""):
        return None
    days, sep, clock = text.partition("-") if "-" in text else ("0", "", text)
    parts = [int(p) for p in clock.split(":")]
    if sep:  # after days: hours first
        hours, minutes = parts[0], parts[1] if len(parts) > 1 else 0
    else:  # M, M:S or H:M:S
        hours, minutes = (parts[0], parts[1]) if len(parts) == 3 else (0, parts[0])
    return int(days) * 1440 + hours * 60 + minutes


def parse_gpus(gres: str) -> int:
    """GPUs per node in sinfo's GRES column: "(null)" -> 0, "gpu:4" -> 4, "gpu:a100:4(S:0-1),shard:8" -> 4."""
    return sum(int(n) for n in re.findall(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)", gres))


def parse_sinfo(text: str, name: str | None) -> Partition | None:
    """The partition `name` (None: the default one, marked `*`) among `sinfo -h -o %P|%c|%m|%G|%l` lines (one per
    group of like nodes): its largest node. None when no line names it."""
    rows = [line.split("|") for line in text.splitlines() if line.count("|") == 4]
    if name is None:
        rows = [r for r in rows if r[0].endswith("*")] or rows[:1]
    else:
        rows = [r for r in rows if r[0].rstrip("*") == name]
    if not rows:
        return None
    number = [re.match(r"\d+", r[1]) for r in rows]
    mem = [re.match(r"\d+", r[2]) for r in rows]
    limits = [parse_minutes(r[4]) for r in rows]
    return Partition(
        name=rows[0][0].rstrip("*"),
        cpus=max(int(n.group()) for n in number if n) if any(number) else DEFAULT_CPUS,
        mem_gb=max(int(m.group()) for m in mem if m) / 1024 if any(mem) else None,
        gpus=max(parse_gpus(r[3]) for r in rows),
        minutes=None if None in limits else max(limits),
    )


def read_partition(name: str | None) -> Partition | None:
    """`sinfo` of partition `name` (None: the cluster's default). Raises ValueError for a partition the cluster does
    not have; None (and a warning) where sinfo itself fails: the options are then used as given."""
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-o", "%P|%c|%m|%G|%l"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError) as err:
        log.warning("sinfo failed (%s): the SLURM options are used as given, not fitted to the partition", err)
        return None
    if out.returncode != 0:
        said = " ".join((out.stderr or out.stdout).split())[-300:]
        log.warning("sinfo failed (%s): the SLURM options are used as given, not fitted to the partition", said)
        return None
    partition = parse_sinfo(out.stdout, name)
    if partition is None:
        names = sorted({line.split("|")[0].rstrip("*") for line in out.stdout.splitlines() if "|" in line})
        raise ValueError(f"{argument('partition', name)}: no such partition (sinfo lists: {', '.join(names)})")
    return partition


def fit(o: SlurmOptions, p: Partition, device: str | None) -> tuple[SlurmOptions, list[str]]:
    """`o` with what it left open (None) fitted to partition `p`, and a line for each choice made; ValueError naming
    the flag for what was asked that no node of `p` can give."""
    notes: list[str] = []
    changes = {**_fit_gpus(o, p, device, notes), **_fit_cpus(o, p, notes)}
    if o.mem_gb is not None and p.mem_gb is not None and o.mem_gb > p.mem_gb:
        _refuse("mem_gb", o.mem_gb, f"its nodes have {p.mem_gb:.0f} GB", p)
    if o.finetune_mem_gb is not None and p.mem_gb is not None and o.finetune_mem_gb > p.mem_gb:
        _refuse("finetune_mem_gb", o.finetune_mem_gb, f"its nodes have {p.mem_gb:.0f} GB", p)
    if o.time_minutes is None:
        changes["time_minutes"] = min(DEFAULT_MINUTES, p.minutes or DEFAULT_MINUTES)
        if p.minutes is not None and p.minutes < DEFAULT_MINUTES:
            notes.append(f"time limit {_minutes_text(p.minutes)}: the partition's")
    elif p.minutes is not None and o.time_minutes > p.minutes:
        _refuse("time_minutes", o.time_minutes, f"its time limit is {_minutes_text(p.minutes)}", p)
    fitted = dataclasses.replace(o, **changes)
    return fitted, [f"fitted to {p.text()}: {'; '.join(notes)}"] if notes else [f"within {p.text()}"]


def _fit_gpus(o: SlurmOptions, p: Partition, device: str | None, notes: list[str]) -> dict:
    wants_gpu = device not in (None, "auto", "cpu")
    if wants_gpu and p.gpus == 0:
        raise ValueError(
            f"{argument('device', device)}: partition {p.name} has no GPUs (sinfo); choose a partition with GPUs "
            f"({argument('partition')}) or run on the CPU ({argument('device', 'cpu')})"
        )
    default = 0 if device == "cpu" or p.gpus == 0 else 1
    changes = {}
    for key in ("pretrain_gpus", "finetune_gpus"):
        asked = getattr(o, key)
        if asked is None:
            changes[key] = default
        elif asked > p.gpus:
            _refuse(key, asked, f"its nodes have {plural(p.gpus, 'GPU')}" if p.gpus else "it has no GPUs", p)
    if o.pretrain_gpus is None or o.finetune_gpus is None:
        why = "the device is the CPU" if device == "cpu" else f"partition {p.name} has none"
        notes.append(f"{plural(default, 'GPU')} a job ({why})" if default == 0 else "1 GPU a job")
    return changes


def _fit_cpus(o: SlurmOptions, p: Partition, notes: list[str]) -> dict:
    ranks = o.pretrain_ranks or max(1, o.pretrain_gpus or 0)
    changes = {}
    if o.cpus_per_job is None:
        changes["cpus_per_job"] = max(1, min(DEFAULT_CPUS, p.cpus // ranks))
        if changes["cpus_per_job"] < DEFAULT_CPUS:
            notes.append(f"{plural(changes['cpus_per_job'], 'CPU')} a job (a node has {p.cpus})")
    elif o.cpus_per_job * ranks > p.cpus:
        each = f" for each of {ranks} processes" if ranks > 1 else ""
        _refuse("cpus_per_job", o.cpus_per_job, f"its nodes have {plural(p.cpus, 'CPU')}; ask at most "
                f"{p.cpus // ranks}{each}", p)  # fmt: skip
    if o.finetune_cpus is not None and o.finetune_cpus > p.cpus:
        _refuse("finetune_cpus", o.finetune_cpus, f"its nodes have {plural(p.cpus, 'CPU')}", p)
    if o.pretrain_ranks > p.cpus:
        _refuse("pretrain_ranks", o.pretrain_ranks, f"its nodes have {plural(p.cpus, 'CPU')}", p)
    return changes


def _refuse(key: str, value: object, why: str, p: Partition) -> None:
    raise ValueError(
        f"{argument(FLAG_OF.get(key, key), value)}: no node of partition {p.name} can run such a job ({why}; sinfo); "
        "nothing was submitted"
    )


def fit_to_cluster(o: SlurmOptions, device: str | None) -> tuple[SlurmOptions, list[str]]:
    """`fit` to the partition `o` names (the default one: None), read with sinfo. Where sinfo cannot say, the
    options go as given, with the defaults a cluster of GPU nodes expects (1 GPU a job unless the device is the
    CPU), and the note says so."""
    partition = read_partition(o.partition)
    if partition is not None:
        return fit(o, partition, device)
    gpus = 0 if device == "cpu" else 1
    given = dataclasses.replace(
        o,
        pretrain_gpus=gpus if o.pretrain_gpus is None else o.pretrain_gpus,
        finetune_gpus=gpus if o.finetune_gpus is None else o.finetune_gpus,
    )
    return given, ["not fitted to the partition (sinfo could not be read): the options as given"]
