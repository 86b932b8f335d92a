"""Peak-memory estimate of a pretraining step, to pick the micro-batch for a memory budget (--max-memory-gb).

Conservative by construction (an upper bound, not a best guess), in the precision the run resolved:

    weights, gradients, Adam moments:  16 bytes per parameter (fp32 master weights in every precision)
    activations per layer:             T * b * H * (34 + 5 * heads * T / H) bytes with 16-bit activations
                                       (Korthikanti et al. 2022, "Reducing Activation Recomputation", eq. 1),
                                       x 2 in fp32 and x 1.5 under bf16/fp16 autocast (its LayerNorm, softmax and
                                       residual stream stay fp32, so the paper's all-16-bit count is a lower
                                       bound); summed over generator and discriminator layers
    generator head:                    fp32 (b, N, V) tensors over the masked slots: the loss's 5 (the logits,
                                       their log-softmax, its gradient and two temporaries of its backward) and
                                       the sampler's (`sampler_copies`: its CDF or, for `gumbel`, the noise and
                                       two temporaries; the fp32 copy of 16-bit logits; logits / T; the copy that
                                       masks the correct token)
    margin:                            x 1.25 for the allocator's fragmentation on CUDA, x 1.75 on a CPU (glibc's
                                       heap fragments across the micro-batches of an accumulated step: at
                                       `small`'s micro-batch 32, 128 sequences a step peak up to 0.9 GiB above
                                       one micro-batch alone), plus what the process holds
                                       beyond the step: on CUDA 0.75 GiB for the context and cuBLAS workspaces
                                       (not in torch.cuda.max_memory_allocated), on a CPU 0.75 GiB for the
                                       interpreter, torch, transformers and the data (the estimate is then of the
                                       process's peak resident memory, what run.json's peak_memory_gb records)

So a budget is met with room to spare. Measured on a CPU (docs/benchmarks.md, scripts/measure_cpu_memory.py):
the estimate exceeds the process's peak by 6% at the closest (fp32, micro-batch 32 in a 128-sequence step, a small
vocabulary) and by up to 2x in bf16. On a GPU, scripts/bench_gpu.sh compares it with
torch.cuda.max_memory_allocated of the real loop; `electra bench pretrain` prints both.

"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

from electra.config import PretrainConfig
from electra.modeling.flops import parameter_count

MARGIN = {"cuda": 1.25, "cpu": 1.75}
"""Per device type, of the step's tensors: the allocator's fragmentation (see the module docstring)."""
LOSS_COPIES = 5
AUTOCAST_FACTOR = 1.5  # of the all-16-bit activation bytes: under autocast about half the values stay fp32
PROCESS_BYTES = {"cuda": 0.75 * 2**30, "cpu": 0.75 * 2**30}
"""What the process holds beyond the step's tensors, per device type (see the module docstring)."""


def sampler_copies(cfg: PretrainConfig, precision: str) -> int:
    """fp32 (b, N, V) tensors that drawing the replacements holds at once (electra/modeling/masking.py
    `sample_replacements`): the inverse CDF built in place (1) or the Gumbel noise, its logs and the perturbed
    logits (3); one more for the fp32 copy of 16-bit logits, for logits / T when T is not 1 or anneals, and for
    the copy that masks the correct token (`disallow_correct`)."""
    o = cfg.objective
    copies = 3 if o.sampler == "gumbel" else 1
    copies += precision != "fp32"
    copies += o.temperature != 1.0 or o.temperature_start is not None
    copies += o.disallow_correct
    return copies


def estimate_peak_bytes(
    cfg: PretrainConfig, micro_batch: int, precision: str = "fp32", device_type: str = "cuda"
) -> float:
    """Bytes a step of `micro_batch` sequences may peak at (see the module docstring). `precision` is the resolved
    one (fp32, bf16, fp16): "auto" is refused, it means different things on different devices."""
    if precision not in ("fp32", "bf16", "fp16"):
        raise ValueError(f"estimate_peak_bytes needs a resolved precision, not {precision!r}")
    T, b = cfg.data.seq_len, micro_batch
    activations = 0.0
    m = cfg.model
    electra = cfg.objective.kind != "mlm"
    for s in (m.generator, m.discriminator) if electra else (m.discriminator,):
        bytes_16bit = T * b * s.hidden_size * (34 + 5 * s.num_heads * T / s.hidden_size)  # per layer
        activations += s.num_layers * bytes_16bit * (2 if precision == "fp32" else AUTOCAST_FACTOR)
    copies = LOSS_COPIES + (sampler_copies(cfg, precision) if electra else 0)
    head = copies * cfg.num_mask_slots * b * cfg.model.vocab_size * 4
    tensors = 16 * parameter_count(cfg) + activations + head
    return MARGIN.get(device_type, MARGIN["cuda"]) * tensors + PROCESS_BYTES.get(device_type, 0.0)


def process_peak_bytes() -> int:
    """This process's peak resident memory: VmHWM of /proc/self/status on Linux, since its ru_maxrss carries over
    from the parent through fork and exec (a run started by a large process, a study or a test runner, would show
    at least that process's size); ru_maxrss elsewhere (KiB on Linux, bytes on macOS)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
