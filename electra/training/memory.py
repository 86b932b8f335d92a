"""Peak-memory estimate of a pretraining step, to pick the micro-batch for a GPU memory budget (--max-memory-gb).

Conservative by construction (an upper bound, not a best guess), in the precision the run resolved:

    weights, gradients, Adam moments:  16 bytes per parameter (fp32 master weights in every precision)
    activations per layer:             T * b * H * (34 + 5 * heads * T / H) bytes with 16-bit activations
                                       (Korthikanti et al. 2022, "Reducing Activation Recomputation", eq. 1),
                                       x 2 in fp32 and x 1.5 under bf16/fp16 autocast (its LayerNorm, softmax and
                                       residual stream stay fp32, so the paper's all-16-bit count is a lower
                                       bound); summed over generator and discriminator layers
    generator head:                    6 fp32 copies of the (b, N, V) logits: the logits, their log-softmax and
                                       its gradient for the loss, the sampler's CDF, and two temporaries
    margin:                            x 1.25 for the allocator's fragmentation, plus 0.75 GiB on CUDA for the
                                       context and cuBLAS workspaces (not in torch.cuda.max_memory_allocated)

So a budget is met with room to spare; how much is checked on the first GPU (scripts/bench_gpu.sh compares the
estimate with torch.cuda.max_memory_allocated of the real loop). `electra bench pretrain` prints both.

Also here: the glibc setting that `electra pretrain`, `electra glue` and `electra bench` use on CPU.
"""

from __future__ import annotations

from electra.config import PretrainConfig
from electra.modeling.flops import parameter_count

MARGIN = 1.25
LOGIT_COPIES = 6
AUTOCAST_FACTOR = 1.5  # of the all-16-bit activation bytes: under autocast about half the values stay fp32
CUDA_CONTEXT_BYTES = 0.75 * 2**30


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
    for s in (m.discriminator,) if cfg.objective.kind == "mlm" else (m.generator, m.discriminator):
        bytes_16bit = T * b * s.hidden_size * (34 + 5 * s.num_heads * T / s.hidden_size)  # per layer
        activations += s.num_layers * bytes_16bit * (2 if precision == "fp32" else AUTOCAST_FACTOR)
    head = LOGIT_COPIES * cfg.num_mask_slots * b * cfg.model.vocab_size * 4
    context = CUDA_CONTEXT_BYTES if device_type == "cuda" else 0.0
    return MARGIN * (16 * parameter_count(cfg) + activations + head) + context
