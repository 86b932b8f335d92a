"""The machine a run ran on, in words, recorded beside every wall time it writes (each pretraining session in
run.json, each fine-tuning run and each task of a sweep's results.json), so that a time can always be read against
the CPU that took it: CPU models differ several-fold in speed, and a cloud VM's CPU can change between sessions."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import torch

from electra.utils.processes import usable_cpus
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


def cores_busy_elsewhere(seconds: float = 0.3, stat: Path = Path("/proc/stat")) -> float | None:
    """How many cores other processes kept busy over the next `seconds`: the machine's busy CPU time (Linux's
    /proc/stat) less this process's own, per second of wall time; None where /proc/stat cannot be read."""

    def busy_and_wall() -> tuple[float, float]:
        fields = [float(x) for x in stat.read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
        return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK"), time.perf_counter()

    try:
        (busy0, wall0), own0 = busy_and_wall(), time.process_time()
        time.sleep(seconds)
        (busy1, wall1), own1 = busy_and_wall(), time.process_time()
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, (busy1 - busy0) - (own1 - own0)) / max(wall1 - wall0, 1e-6)


def auto_threads(cores: int, busy_elsewhere: float | None) -> int:
    """Threads for one process that may use `cores` cores while other work keeps `busy_elsewhere` of the machine's
    cores busy: the cores left free (a core counts as taken from BUSY_CORE of one), at least one."""
    if busy_elsewhere is None:
        return max(1, cores)
    taken = int(busy_elsewhere + (1 - BUSY_CORE))  # 0.49 -> 0, 0.5 -> 1, 1.5 -> 2
    return max(1, min(cores, usable_cpus() - taken))


def choose_threads(setting: int | str, share: int = 1, keep: int | None = None) -> tuple[int, str]:
    """torch's intra-op threads for this process and why, set here: an explicit number; under OMP_NUM_THREADS
    what it says; `auto`: `keep` where given and within this process's share of the usable cores (1/`share`: the
    processes of one machine that split them, a torchrun node's ranks), else `auto_threads` of that share, given
    what other work uses now.

    `keep` is a resumed run's first choice: CPU sums split over other thread counts round differently, so a run
    that kept its threads continues bit for bit, as if it had never stopped."""
    if setting != "auto":
        torch.set_num_threads(int(setting))
        return int(setting), "asked for"
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads(), "OMP_NUM_THREADS"
    cores = max(1, usable_cpus() // share)
    if keep is not None and 1 <= keep <= cores:
        torch.set_num_threads(keep)
        return keep, "auto: as the run's first session, so that it continues bit for bit"
    busy = cores_busy_elsewhere()
    threads = auto_threads(cores, busy)
    torch.set_num_threads(threads)
    said = "unknown" if busy is None else f"{busy:.1f}"
    return threads, f"auto: {plural(cores, 'core')} for this process, {said} of the machine's busy with other work"
