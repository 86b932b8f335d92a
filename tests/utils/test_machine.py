"""The machine recorded beside every wall time: the CPU's model read from Linux's /proc/cpuinfo."""

from __future__ import annotations

import torch

from electra.utils.machine import cpu_model, describe_machine

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu avx512_bf16 amx_bf16

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC 9B45
"""


def test_the_cpu_is_named_with_its_family_and_model_from_the_first_processor(tmp_path):
    """A VM's "Intel(R) Xeon(R) Processor" names several generations; the family and model numbers tell them
    apart. Only the first processor's block is read."""
    info = tmp_path / "cpuinfo"
    info.write_text(CPUINFO)
    assert cpu_model(info) == "Intel(R) Xeon(R) Processor (family 6 model 143)"
    info.write_text("processor\t: 0\nmodel name\t: Apple M2\n")  # no family and model numbers: the name alone
    assert cpu_model(info) == "Apple M2"
    assert cpu_model(tmp_path / "absent") != ""  # no /proc: what the platform module says


def test_a_cpu_machine_is_its_model_and_the_threads_torch_uses(monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    monkeypatch.setattr("electra.utils.machine.usable_cpus", lambda: 2)
    assert describe_machine(torch.device("cpu")) == f"{cpu_model()}, 1 thread of 2 cores"
