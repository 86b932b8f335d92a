"""Training FLOPs and pfs-days of a configuration: `electra flops` (docs/benchmarks.md).

Two counts, for two different questions:

- `off_train_flops`: the official accounting of google-research/electra `flops_computation.py`, re-derived
  here so that our numbers compare with the paper's tables (ELECTRA-Small, 1M steps: 1.2937e18). Its
  conventions: a matmul costs 2mn per row; element-wise ops cost a few FLOPs each (the constants below);
  embedding lookups are dense one-hot matmuls (2·E·V per token); the generator's output softmax is paid on a
  fixed 15.625% of the tokens; the backward pass costs the same as the forward, so training = 2 × forward.
- `pretrain_step_flops`: the matmul FLOPs one optimizer step of *our* implementation executes, for achieved
  TFLOP/s and MFU in `electra bench`. Per sequence of length T, one encoder (hidden H, L layers, FFN I,
  embedding E) does
      T · [2·E·H (embeddings_project, when E ≠ H) + L · (8·H² + 4·H·I + 4·T·H)]
  forward (Q, K, V, attention output; the two FFN matmuls; QKᵀ and attention × V); the discriminator head
  adds T · (2·H² + 2·H) and the generator head S · (2·H_g·E + 2·E·V) at S positions (S = the N masked slots
  for us, all T positions for a full-vocabulary head). Training = 3 × forward (the backward computes
  gradients for the inputs and for the weights, 2 matmuls per forward matmul). Lookups, norms, softmax and
  the optimizer are not counted (the usual MFU convention). ELECTRA-Small at T=128: 70.2 MFLOP per token
  (90.2 without the gather).
"""

from __future__ import annotations

from dataclasses import dataclass

from electra.config import EncoderSize, ModelConfig, PretrainConfig, num_mask_slots

# -- the official accounting (OFF flops_computation.py), re-derived ------------------------------------------

DROPOUT = 4  # random number, compare, mask multiply, 1/(1-p) rescale
LAYER_NORM = 5  # mean, variance (square + sum), scale, shift
GELU = 8  # the tanh approximation's operations, as OFF counts them
SOFTMAX = 5  # max-subtract, exp, sum, divide
OFF_OUTPUT_FRACTION = 0.15625  # OFF: share of tokens that pay the generator's output softmax (20 of 128)


@dataclass(frozen=True)
class _Stack:
    """What OFF's count needs of one encoder: sizes, sequence length, vocabulary."""

    h: int
    layers: int
    intermediate: int
    heads: int
    e: int
    seq_len: int
    vocab: int


def _off_block(s: _Stack) -> float:
    """Forward FLOPs of one transformer layer over one sequence."""
    h, i, t, heads = s.h, s.intermediate, s.seq_len, s.heads
    per_token = (
        3 * 2 * h * h
        + 3 * h  # Q, K, V projections and biases
        + 2 * h * t
        + (SOFTMAX + DROPOUT + 1) * t * heads  # scores; softmax, dropout, 1/sqrt(d) per head
        + 2 * h * t  # weighted sum of values
        + 2 * h * h
        + h
        + DROPOUT * h
        + h  # attention output dense, bias, dropout, residual
        + LAYER_NORM  # OFF counts this LayerNorm as 5 per token, not 5·h (kept: it reproduces OFF's figures)
        + 2 * h * i
        + i
        + GELU * i  # FFN in
        + 2 * h * i
        + h
        + DROPOUT * h
        + h
        + LAYER_NORM * h  # FFN out, bias, dropout, residual, LayerNorm
    )
    return per_token * t


def _off_input_embedding(s: _Stack) -> float:
    e, t = s.e, s.seq_len
    per_token = 2 * e * s.vocab + 2 * e * (t + 2) + 2 * e + LAYER_NORM * e + DROPOUT * e  # dense lookups
    if s.e != s.h:
        per_token += 2 * s.h * e + s.h  # embeddings_project
    return per_token * t


def _off_generator_output(s: _Stack, output_fraction: float) -> float:
    e, v = s.e, s.vocab
    per_token = 2 * e * v + 2 * s.h * e + e + GELU * e + LAYER_NORM * e + SOFTMAX * v + 2 * v
    return output_fraction * per_token * s.seq_len


def _off_discriminator_output(s: _Stack) -> float:
    return (2 * s.h * s.h + s.h + GELU * s.h + 2 * s.h) * s.seq_len


def off_train_flops(
    cfg: PretrainConfig, steps: int | None = None, output_fraction: float = OFF_OUTPUT_FRACTION
) -> float:
    """Training FLOPs of a full run by the official ELECTRA accounting: generator + discriminator, or for the MLM
    baseline one masked LM of the discriminator's size (OFF counts BERT as TransformerHparams.get_train_flops
    with its output softmax: `bert_small` there)."""
    m, T = cfg.model, cfg.data.seq_len
    steps = cfg.train.max_steps if steps is None else steps
    E, V = m.embedding_size, m.vocab_size
    disc, gen = (
        _Stack(s.hidden_size, s.num_layers, s.intermediate_size, s.num_heads, E, T, V)
        for s in (m.discriminator, m.generator)
    )
    if cfg.objective.kind == "mlm":
        forward = (
            disc.layers * _off_block(disc) + _off_input_embedding(disc) + _off_generator_output(disc, output_fraction)
        )
        return 2 * forward * cfg.train.batch_size * steps
    forward = (
        disc.layers * _off_block(disc)
        + _off_input_embedding(disc)
        + _off_discriminator_output(disc)
        + gen.layers * _off_block(gen)
        + _off_input_embedding(gen)
        + _off_generator_output(gen, output_fraction)
    )
    return 2 * forward * cfg.train.batch_size * steps  # backward counted equal to forward


# -- the matmul FLOPs our training step executes -------------------------------------------------------------


def encoder_forward_flops(size: EncoderSize, embedding_size: int, seq_len: int) -> int:
    """Matmul FLOPs of embeddings_project + the encoder layers, forward, one sequence."""
    H, I, T = size.hidden_size, size.intermediate_size, seq_len
    project = 2 * embedding_size * H if embedding_size != H else 0
    layer = 8 * H * H + 4 * H * I + 4 * T * H
    return T * (project + size.num_layers * layer)


def generator_head_flops(m: ModelConfig, positions: int, hidden: int | None = None) -> int:
    """Dense(H -> E) and the tied output matmul (E -> V) at `positions` positions, forward (H: the generator's
    hidden size unless given, e.g. the discriminator's for the MLM baseline)."""
    hidden = m.generator.hidden_size if hidden is None else hidden
    return positions * (2 * hidden * m.embedding_size + 2 * m.embedding_size * m.vocab_size)


def pretrain_step_flops(cfg: PretrainConfig, batch_size: int, seq_len: int, full_vocab_head: bool = False) -> int:
    """Matmul FLOPs of one training step (forward + backward) of generator + discriminator (the MLM baseline:
    its encoder and its head at the masked slots)."""
    m = cfg.model
    H = m.hidden_size
    slots = seq_len if full_vocab_head else num_mask_slots(cfg.objective, seq_len)
    if cfg.objective.kind == "mlm":
        forward = encoder_forward_flops(m.discriminator, m.embedding_size, seq_len) + generator_head_flops(m, slots, H)
        return 3 * forward * batch_size
    forward = (
        encoder_forward_flops(m.generator, m.embedding_size, seq_len)
        + generator_head_flops(m, slots)
        + encoder_forward_flops(m.discriminator, m.embedding_size, seq_len)
        + seq_len * (2 * H * H + 2 * H)  # discriminator head
    )
    return 3 * forward * batch_size


def finetune_step_flops(
    m: ModelConfig, batch_size: int, seq_len: int, num_labels: int, train: bool = True, head: str = "cls-linear"
) -> int:
    """Matmul FLOPs of a GLUE step on the discriminator body; the head (electra.glue.heads) runs once per
    sequence: Linear(H, n) for cls-linear, Linear(H, H) then Linear(H, n) for mean-mlp and hf."""
    H = m.hidden_size
    body = encoder_forward_flops(m.discriminator, m.embedding_size, seq_len)
    forward = body + (0 if head == "cls-linear" else 2 * H * H) + 2 * H * num_labels
    return (3 if train else 1) * forward * batch_size


# -- wall-clock compute (pfs-days) -----------------------------------------------------------------------

UTILISATION = 0.33  # OpenAI "AI and Compute": assumed fraction of peak actually used
PFS_DAY = 1e15 * 86400  # FLOPs in one petaflop/s-day

# Peak dense TFLOP/s from vendor datasheets, in the precision the conventional tables use: fp32 for the GPUs
# of the ELECTRA-era comparisons (V100 at 15.7 gives the reproduction study's 0.02 for ELECTRA-Small; its 125 TFLOP/s
# tensor-core figure would give 0.165).
DEVICE_PEAK_TFLOPS = {
    "v100": 15.7,  # SXM2, fp32
    "p6000": 12.0,  # Quadro P6000, fp32 (RC's "P600" row for GPT only reproduces with this card)
    "rtx3090": 35.6,  # fp32
    "a100": 312.0,  # bf16 dense
    "h100": 989.0,  # SXM, bf16 dense
    "h200": 989.0,  # bf16 dense (same compute as H100 SXM)
}


def pfs_days(days: float, gpus: int, peak_tflops: float, utilisation: float = UTILISATION) -> float:
    """OpenAI "AI and Compute" convention, used by the reproduction study: days × GPUs × peak TFLOP/s ×
    utilisation / 1000."""
    return days * gpus * peak_tflops * utilisation / 1000


# -- the report -----------------------------------------------------------------------------------------


def flops_report(
    cfg: PretrainConfig,
    steps: int | None = None,
    days: float | None = None,
    peak_tflops: float | None = None,
    gpus: int = 1,
) -> dict:
    """FLOPs of a run (both accountings) and, given its wall-clock days and a device's peak, its pfs-days."""
    steps = cfg.train.max_steps if steps is None else steps
    B, T = cfg.train.batch_size, cfg.data.seq_len
    step = pretrain_step_flops(cfg, B, T)
    total = off_train_flops(cfg, steps)
    out = {
        "steps": steps,
        "batch_size": B,
        "seq_len": T,
        "total_flops": total,
        "method": "google-research/electra flops_computation.py (backward = forward, dense lookups)",
        "executed_flops_per_step": step,
        "executed_flops_per_token": step / (B * T),
        "executed_total_flops": step * steps,
        "executed_method": "matmuls only, train = 3 x forward, generator head at the masked slots",
        "pfs_days_of_flops": total / PFS_DAY,
    }
    if days is not None:
        out["wall_days"] = days
        out["wall_hours"] = days * 24
        if peak_tflops is not None:
            out.update(gpus=gpus, peak_tflops=peak_tflops, utilisation=UTILISATION)
            out["pfs_days"] = pfs_days(days, gpus, peak_tflops)
    return out


def flops_lines(report: dict, name: str) -> list[str]:
    """`flops_report` as `electra flops` prints it for `name` (a preset or YAML file): what a run of the config does,
    its FLOPs by the official accounting and in pfs-days, what the matmuls execute, and the wall clock's pfs-days
    where they were given."""
    r = report
    lines = [
        f"{name}: {r['steps']:,} steps x {r['batch_size']:,} sequences x {r['seq_len']:,} tokens",
        f"  training FLOPs {r['total_flops']:.5g} = {r['pfs_days_of_flops']:.3g} pfs-days, as {r['method']}",
        f"  executed {r['executed_total_flops']:.5g}, {r['executed_flops_per_step']:.4g} a step, "
        f"{r['executed_flops_per_token']:.4g} a token: {r['executed_method']}",
    ]
    if "wall_days" in r:
        wall = f"  wall clock {r['wall_hours']:.3g} h"
        if "pfs_days" in r:
            wall += (
                f" on {r['gpus']} x {r['peak_tflops']:g} TFLOP/s at {r['utilisation']:.0%} of peak: "
                f'{r["pfs_days"]:.3g} pfs-days (OpenAI\'s "AI and Compute" convention)'
            )
        lines.append(wall)
    return lines


def embedding_parameters(m: ModelConfig) -> int:
    """Word, position and type tables plus their LayerNorm (shared by generator and discriminator)."""
    positions = m.max_position_embeddings if m.position_embedding == "learned" else 0  # rotary: no table
    return (m.vocab_size + positions + m.type_vocab_size + 2) * m.embedding_size


def stack_parameters(m: ModelConfig, s: EncoderSize) -> int:
    """One encoder stack: `embeddings_project` (when the sizes differ) and its layers."""
    per_layer = 4 * (s.hidden_size**2 + s.hidden_size) + 2 * s.hidden_size * s.intermediate_size
    per_layer += s.intermediate_size + s.hidden_size + 4 * s.hidden_size  # FFN biases, two LayerNorms
    project = (m.embedding_size + 1) * s.hidden_size if m.embedding_size != s.hidden_size else 0
    return s.num_layers * per_layer + project


def backbone_parameters(m: ModelConfig) -> int:
    """The body that fine-tuning starts from (embeddings + discriminator stack): 13.48M for ELECTRA-Small."""
    return embedding_parameters(m) + stack_parameters(m, m.discriminator)


def parameter_count(cfg: PretrainConfig) -> int:
    """Every pretraining parameter: embeddings, both stacks, the generator's and the discriminator's heads (the MLM
    baseline: embeddings, its stack and its head)."""
    m = cfg.model
    g, d = m.generator, m.discriminator
    if cfg.objective.kind == "mlm":
        head = (d.hidden_size + 1) * m.embedding_size + 2 * m.embedding_size + m.vocab_size
        return embedding_parameters(m) + stack_parameters(m, d) + head
    gen_head = (g.hidden_size + 1) * m.embedding_size + 2 * m.embedding_size + m.vocab_size
    disc_head = (d.hidden_size + 1) * d.hidden_size + d.hidden_size + 1
    return embedding_parameters(m) + stack_parameters(m, g) + stack_parameters(m, d) + gen_head + disc_head
