"""Where a process computes and in which precision: the device (`cpu`, `cuda`, `cuda:N`, under torchrun the local
rank's GPU), the autocast precision that `auto` resolves to and why, and the fp32 matmul mode on CUDA.

`auto` on CUDA: bf16 on compute capability >= 8.0 (Ampere and later have bf16 tensor cores); on 7.x (V100, T4)
bf16 is only emulated, so fp16 with the GradScaler. `auto` on a CPU: fp32, even where the CPU computes bf16
natively (AMX-BF16 tiles, Intel Xeon 4th generation on; AVX512-BF16 dot products, AMD Zen 4 and 5), where bf16
steps ELECTRA-Small ~1.9x faster: measured, bf16 autocast holds a 256-wide model on the token-frequency plateau
that fp32 leaves by step ~1000, because on the plateau the gradient that leads off it is smaller than bf16's
rounding of the activations (docs/benchmarks.md, "bf16 on CPU"). `--precision bf16` still takes it. The decision
and its reason go to the run's log and RUN/run.json.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from electra.utils.errors import InputError
from electra.utils.wording import argument

log = logging.getLogger("electra.devices")

BF16_MIN_CUDA_CAPABILITY = (8, 0)  # Ampere: bf16 tensor cores; 7.x emulates bf16 (slower than fp32)
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
"""Linux /proc/cpuinfo flags of native bf16 arithmetic, in the order reported: AMX tiles, AVX-512 dot products."""


class DeviceError(InputError):
    """The device asked for does not exist here (e.g. CUDA on a machine without one): one line, non-zero exit."""


def resolve_device(name: str | None, local_rank: int = 0, world: int = 1) -> torch.device:
    """The device this process computes on. None / "auto": the local rank's GPU when CUDA is there, else the CPU;
    "cuda" without an index: the local rank's GPU (torchrun starts one process per GPU); "cuda:N": GPU N, refused
    with `world` > 1 processes (every rank would compute on GPU N). CUDA asked for where there is none raises
    DeviceError: never a silent fall-back to the CPU."""
    if name in (None, "auto"):
        return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    try:
        dev = torch.device(name)
    except RuntimeError as err:
        raise DeviceError(f"{argument('device', name)}: not a device name (expected cpu, cuda or cuda:N)") from err
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise DeviceError(f"{argument('device', name)}: only cpu, cuda and cuda:N are supported")
    if dev.index is not None and world > 1:
        raise DeviceError(
            f"{argument('device', name)}: all {world} processes would share GPU {dev.index}; pass "
            f"{argument('device', 'cuda')} "
            "(each process takes its local rank's GPU)"
        )
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise DeviceError(f"{argument('device', name)}: no CUDA device is visible (torch {torch.__version__}, {build})")
    index = local_rank if dev.index is None else dev.index
    if index >= torch.cuda.device_count():
        raise DeviceError(f"{argument('device', name)}: GPU {index} asked for, {torch.cuda.device_count()} visible")
    return torch.device("cuda", index)


# -- precision ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Precision:
    """The autocast precision a run uses, and why (written to the log and RUN/run.json)."""

    name: str
    """fp32 (no autocast), bf16, or fp16 (with the GradScaler)."""
    reason: str


@functools.lru_cache(maxsize=2)
def cpu_native_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The CPU's native bf16 arithmetic, one of CPU_BF16_FLAGS (None: emulated): its Linux flags, else torch's own
    AMX probe where it has one (no /proc, e.g. another OS)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split())
                return next((f for f in CPU_BF16_FLAGS if f in flags), None)
    except OSError:
        pass
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)  # private; absent in some builds
    return "amx_bf16" if probe is not None and probe() else None


def choose_precision(
    asked: str,
    device_type: str,
    *,
    cuda_capability: tuple[int, int] | None = None,
    cpu_bf16: str | None = None,
) -> Precision:
    """The precision for `asked` (auto, fp32, bf16, fp16) from the facts about the device: a pure function."""
    if asked != "auto":
        if asked == "fp16" and device_type != "cuda":
            raise InputError(f"precision fp16 needs a CUDA device (on {device_type}: bf16 or fp32)")
        if asked == "bf16" and cuda_capability is not None and cuda_capability < BF16_MIN_CUDA_CAPABILITY:
            log.warning("bf16 asked for on compute capability %d.%d, which emulates it (slow)", *cuda_capability)
        return Precision(asked, "asked for")
    if device_type == "cuda":
        cc = cuda_capability or (0, 0)
        if cc >= BF16_MIN_CUDA_CAPABILITY:
            return Precision("bf16", f"auto: compute capability {cc[0]}.{cc[1]} >= 8.0 has bf16 tensor cores")
        return Precision("fp16", f"auto: compute capability {cc[0]}.{cc[1]} < 8.0 only emulates bf16; fp16 + scaler")
    if cpu_bf16 is None:
        return Precision("fp32", "auto: fp32 on a CPU (this one has neither AMX-BF16 nor AVX512-BF16)")
    return Precision(
        "fp32",
        f"auto: fp32 on a CPU, even with {cpu_bf16}: bf16 autocast can hold a model on the token-frequency plateau "
        "(docs/benchmarks.md, 'bf16 on CPU'); --precision bf16 takes it",
    )


def resolve_precision(asked: str, device: torch.device) -> Precision:
    """`choose_precision` with the facts of this machine."""
    if device.type == "cuda":
        return choose_precision(asked, "cuda", cuda_capability=torch.cuda.get_device_capability(device))
    native = cpu_native_bf16() if asked == "auto" else None
    return choose_precision(asked, device.type, cpu_bf16=native)


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast_for(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16/fp16 autocast on the device, or a no-op context for fp32 (reusable: entered once per forward)."""
    if precision in ("bf16", "fp16"):
        return torch.autocast(device.type, dtype=DTYPES[precision])
    return contextlib.nullcontext()


def tf32_on(device: torch.device, asked: bool = True) -> bool:
    """Whether fp32 matmuls run in TF32 on `device` when `asked` (train.tf32 / finetune.tf32): CUDA >= 8.0 only."""
    return asked and _tf32_capable(device)


def _tf32_capable(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= BF16_MIN_CUDA_CAPABILITY


def enable_tf32(device: torch.device, asked: bool = True) -> bool:
    """TF32 matmuls and convolutions for every fp32 path on Ampere and later (10-bit mantissa inputs, fp32
    accumulation: what PyTorch's own AMP guide recommends for fp32 training there), unless `asked` is False
    (train.tf32 / finetune.tf32: then plain fp32, switched off explicitly). Returns whether TF32 is on."""
    if not _tf32_capable(device):
        return False
    torch.backends.cuda.matmul.allow_tf32 = asked
    torch.backends.cudnn.allow_tf32 = asked
    return asked


def resolve_compile(asked: bool | None, device: torch.device) -> bool:
    """train.compile: as asked, else on for CUDA (fused kernels, fewer launches) and off on the CPU, where the
    compiled step measured slower (docs/benchmarks.md)."""
    return device.type == "cuda" if asked is None else asked
