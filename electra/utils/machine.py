"""The machine a run ran on, in words, recorded beside every wall time it writes (each pretraining session in
run.json, each fine-tuning run and each task of a sweep's results.json), so that a time can always be read against
the CPU that took it: CPU models differ several-fold in speed, and a cloud VM's CPU can change between sessions."""

from __future__ import annotations

import platform
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
