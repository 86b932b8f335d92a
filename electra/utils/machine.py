"""The machine a run ran on, in words, recorded beside every wall time it writes (each pretraining session in
run.json, each fine-tuning run and each task of a sweep's results.json), so that a time can always be read against
the CPU that took it: CPU models differ several-fold in speed, and a cloud VM's CPU can change between sessions."""

from __future__ import annotations

import contextlib
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from electra.utils.processes import THREADS_SHARE_ENV, usable_cpus
from electra.utils.wording import plural


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU as Linux names it, with its family and model numbers where the name alone is vague (a VM's
    "Intel(R) Xeon(R) Processor"): "Intel(R) Xeon(R) Processor (family 6 model 143)"; elsewhere what Python's
    platform module says, or "unknown CPU"."""
    fields: dict[str, str] = {}
    try:
        for line in cpuinfo.read_text().splitlines():
            key, sep, value = line.partition(":")
            if not sep:
                if fields:
                    break  # the first processor's block is enough
                continue
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']} model {fields['model']})"
    return name


def describe_machine(device: torch.device) -> str:
    """The machine behind `device`'s times: the GPU's name beside the host CPU on CUDA; on a CPU its model and the
    threads torch uses of the cores this process may use, e.g. "Intel(R) Xeon(R) Processor (family 6 model 143),
    1 thread of 2 cores"."""
    threads = f"{plural(torch.get_num_threads(), 'thread')} of {plural(usable_cpus(), 'core')}"
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} on {cpu_model()}"
    return f"{cpu_model()}, {threads}"


BUSY_CORE = 0.5
"""A core that other processes keep busy this much of the time counts as taken: OpenMP threads wait for each other
at every parallel region, so one thread sharing its core with other work holds the rest back (docs/benchmarks.md
"Threads")."""


@dataclass(frozen=True)
class BusyMark:
    """A moment's CPU clocks: the busy seconds of the cores this process may use (Linux's /proc/stat), this
    process's own CPU seconds, and the wall clock. Two marks give what other work used in between."""

    busy: float
    own: float
    wall: float


def busy_mark(stat: Path = Path("/proc/stat")) -> BusyMark | None:
    """The clocks now; None where /proc/stat cannot be read. Only the CPUs of this process's affinity mask count:
    under `srun -c 8` on a shared node, work on the node's other cores takes nothing from this process."""
    allowed = {f"cpu{i}" for i in _affinity()}
    try:
        busy = 0.0
        for line in stat.read_text().splitlines():
            name, *values = line.split()
            if name not in allowed:
                continue
            fields = [float(x) for x in values]
            idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
            busy += sum(fields[:8]) - idle
    except (OSError, ValueError, IndexError):
        return None
    return BusyMark(busy / os.sysconf("SC_CLK_TCK"), time.process_time(), time.perf_counter())


def busy_since(mark: BusyMark | None, stat: Path = Path("/proc/stat")) -> float | None:
    """How many of this process's usable cores other processes kept busy since `mark`, on average; None where the
    machine cannot say."""
    now = busy_mark(stat)
    if mark is None or now is None:
        return None
    elsewhere = (now.busy - mark.busy) - (now.own - mark.own)
    return max(0.0, elsewhere) / max(now.wall - mark.wall, 1e-6)


def cores_busy_elsewhere(seconds: float = 0.3, stat: Path = Path("/proc/stat")) -> float | None:
    """How many of this process's usable cores other processes kept busy over the next `seconds` (`busy_since`);
    None where /proc/stat cannot be read."""
    mark = busy_mark(stat)
    if mark is None:
        return None
    time.sleep(seconds)
    return busy_since(mark, stat)


def _affinity() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # no affinity call (macOS): every CPU
        return set(range(os.cpu_count() or 1))


def auto_threads(cores: int, busy_elsewhere: float | None) -> int:
    """Threads for one process that may use `cores` cores while other work keeps `busy_elsewhere` of the machine's
    cores busy: the cores left free (a core counts as taken from BUSY_CORE of one), at least one."""
    if busy_elsewhere is None:
        return max(1, cores)
    taken = int(busy_elsewhere + (1 - BUSY_CORE))  # 0.49 -> 0, 0.5 -> 1, 1.5 -> 2
    return max(1, min(cores, usable_cpus() - taken))


def choose_threads(setting: int | str, share: int = 1) -> tuple[int, str]:
    """torch's intra-op threads for this process and why, set here: an explicit number; under OMP_NUM_THREADS
    what it says (and why it was set, where the process that set it said: THREADS_SHARE_ENV); `auto`:
    `auto_threads` of this process's share of the usable cores (1/`share`: the processes of one machine that split
    them, a torchrun node's ranks), given what other work uses now. An explicit number or OMP_NUM_THREADS stays for
    the whole run (and a resumed run with the same number continues bit for bit: CPU sums split over other thread
    counts round differently); auto follows the load (electra/training/threads.py) and chooses again on resume."""
    if setting != "auto":
        torch.set_num_threads(int(setting))
        return int(setting), "asked for"
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads(), os.environ.get(THREADS_SHARE_ENV) or "OMP_NUM_THREADS"
    cores = max(1, usable_cpus() // share)
    busy = cores_busy_elsewhere()
    threads = auto_threads(cores, busy)
    torch.set_num_threads(threads)
    said = "unknown" if busy is None else f"{busy:.1f}"
    usable = plural(usable_cpus(), "usable core")
    return threads, f"auto: {plural(cores, 'core')} for this process, {said} of {usable} busy with other work"


@contextlib.contextmanager
def threads_kept():
    """torch's thread count as it was, however the block ends: a library call (pretraining, a sweep) chooses its
    own threads and leaves its caller's as it found them."""
    before = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(before)
