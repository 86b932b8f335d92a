"""Choosing the positions to corrupt and sampling the generator's replacements (ELECTRA paper §2; OFF
pretrain/pretrain_helpers.py `mask` and `sample_from_softmax`).

All randomness here is keyed by (seed, example id, position) through a counter-based hash rather than drawn from a
stateful generator. The same example is therefore masked and sampled identically whichever rank, micro-batch or
resumed process handles it, which is what makes gradient accumulation and DDP exactly equal to one big batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from electra.config import ObjectiveConfig, masking_split

_MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9  # 2^32 / golden ratio: spreads consecutive counters apart
# Independent random streams per use, so that e.g. the mask/keep coin never correlates with position choice.
STREAM_POSITIONS, STREAM_KEEP, STREAM_SAMPLE, STREAM_RANDOM_TOKEN, STREAM_UNIFORM_MIX = 1, 2, 3, 4, 5


def _mul32(x: Tensor, c: int) -> Tensor:
    """(x * c) mod 2^32 for x in [0, 2^32), split so that no intermediate overflows int64."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _MASK32


def _mix32(x: Tensor) -> Tensor:
    """A 32-bit integer hash with full avalanche ("lowbias32", C. Wellons); x holds values in [0, 2^32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def example_keys(seed: int, example_ids: Tensor) -> Tensor:
    """(B,) int64 keys in [0, 2^32) from the run seed and each example's global index in the data stream."""
    ids = example_ids.long()
    # The hash runs on Python ints here: torch.tensor(seed, device="cuda") would be a blocking host-to-device
    # copy, i.e. a sync with the GPU on every call (same values; `electra bench check` asserts no syncs).
    seed_key = _mix32((seed & _MASK32) ^ _mix32(seed >> 32))
    x = _mix32((ids & _MASK32) ^ seed_key)
    return _mix32(x ^ ((ids >> 32) & _MASK32))


def keyed_uniform(keys: Tensor, n: int, stream: int) -> Tensor:
    """(B, n) float32 uniforms in the open interval (0, 1), a pure function of (key, counter, stream)."""
    base = _mix32((keys.long()[:, None] + stream * _GOLDEN) & _MASK32)  # (B, 1)
    counters = torch.arange(n, device=keys.device) * _GOLDEN  # (n,)
    x = _mix32(_mix32((base + counters) & _MASK32) ^ base)  # (B, n)
    return ((x >> 9).float() + 0.5) * (1.0 / (1 << 23))  # 23 random bits + 1/2 fit fp32's 24-bit mantissa


@dataclass
class MaskedBatch:
    """The generator's input and the static (B, N) description of the corrupted slots."""

    input_ids: Tensor
    """(B, T) the original tokens with chosen positions shown as [MASK] (or kept, for the 15%)."""
    positions: Tensor
    """(B, N) chosen positions, distinct within a row."""
    weights: Tensor
    """(B, N) float 1.0 for a real slot, 0.0 for an unused one (its position is left untouched)."""
    targets: Tensor
    """(B, N) the original tokens at `positions`."""
    is_masked: Tensor
    """(B, N) bool: the slot is shown to the generator as [MASK] (False: kept as the original token)."""
    keys: Tensor
    """(B,) per-example keys for the generator's sampling noise."""
    disc_mask: Tensor
    """(B, T) bool: positions that count in the discriminator loss (non-pad; non-special too unless OFF)."""


def mask_tokens(
    input_ids: Tensor,
    attention_mask: Tensor,
    example_ids: Tensor,
    seed: int,
    objective: ObjectiveConfig,
    num_slots: int,
    mask_token_id: int,
    special_ids: Tensor,
    vocab_size: int | None = None,
) -> MaskedBatch:
    """Choose positions among non-special, non-pad tokens and hide 85% of them behind [MASK] (ELECTRA), or 80%
    behind [MASK] and 10% behind a random token of the vocabulary (`vocab_size`; objective.kind mlm, BERT).

    fixed (OFF pretrain_helpers.mask): k = max(1, min(N, round(p * non-pad tokens))) slots per sequence, each
    drawn uniformly over the candidates: with replacement as OFF (repeats leave fewer distinct positions), or
    without. bernoulli (RC): every candidate independently with probability p, at most N kept (N is the mean plus
    five standard deviations; see config.num_mask_slots).
    """
    B, T = input_ids.shape
    keys = example_keys(seed, example_ids)
    candidates = attention_mask.bool() & ~torch.isin(input_ids, special_ids)
    if objective.masking == "fixed":
        k = torch.round(attention_mask.sum(1).float() * objective.mask_prob).clamp(1, num_slots)  # (B,)
        if objective.position_sampling == "with_replacement":
            u = keyed_uniform(keys, num_slots, STREAM_POSITIONS)  # (B, N): one draw per slot
            positions, real = _draw_with_replacement(candidates, k, u, objective.repeated_draws == "once")
        else:
            u = keyed_uniform(keys, T, STREAM_POSITIONS)  # (B, T): a random priority per position
            positions, real = _draw_without_replacement(torch.where(candidates, u, -1.0), k, num_slots)
    else:
        u = keyed_uniform(keys, T, STREAM_POSITIONS)
        priority = torch.where(candidates & (u < objective.mask_prob), u, -1.0)
        all_slots = torch.full((B,), float(num_slots), device=input_ids.device)
        positions, real = _draw_without_replacement(priority, all_slots, num_slots)
    targets = input_ids.gather(1, positions)
    keep_coin = keyed_uniform(keys, num_slots, STREAM_KEEP)
    mask_p, random_p = masking_split(objective)
    is_masked = real & (keep_coin < mask_p)
    if objective.repeated_draws == "original":  # a position drawn twice is shown as [MASK] if either draw says so
        shown_masked = torch.zeros_like(input_ids).scatter_add_(1, positions, is_masked.long()) > 0  # (B, T)
        is_masked = real & shown_masked.gather(1, positions)
    shown = torch.where(is_masked, torch.full_like(targets, mask_token_id), targets)
    if random_p > 0:
        if vocab_size is None:
            raise ValueError("random-token masking (objective.kind mlm) needs the vocabulary size")
        random_token = uniform_tokens(keys, num_slots, vocab_size, STREAM_RANDOM_TOKEN)
        shown = torch.where(real & ~is_masked & (keep_coin < mask_p + random_p), random_token, shown)
    return MaskedBatch(
        input_ids=input_ids.scatter(1, positions, shown),
        positions=positions,
        weights=real.float(),
        targets=targets,
        is_masked=is_masked,
        keys=keys,
        disc_mask=attention_mask.bool() if objective.disc_on_special else candidates,
    )


def uniform_tokens(keys: Tensor, n: int, vocab_size: int, stream: int) -> Tensor:
    """(B, n) token ids drawn uniformly from [0, vocab_size), keyed like everything here."""
    return (keyed_uniform(keys, n, stream) * vocab_size).long().clamp_(max=vocab_size - 1)


def _draw_without_replacement(priority: Tensor, k: Tensor, num_slots: int) -> tuple[Tensor, Tensor]:
    """The N highest-priority positions, distinct; the first k of them are real where their priority is >= 0."""
    top, positions = priority.topk(num_slots, dim=1)  # (B, N)
    slot = torch.arange(num_slots, device=priority.device)
    return positions, (slot[None, :] < k[:, None]) & (top >= 0)


def _draw_with_replacement(candidates: Tensor, k: Tensor, u: Tensor, once: bool = True) -> tuple[Tensor, Tensor]:
    """OFF's draw: each of the N slots picks one candidate uniformly and independently, the first k count.

    `once`: a repeated draw becomes an unused slot, so each distinct position counts once (OFF counts it once per
    draw in the MLM loss and shows it as [MASK] if any of its draws says so; objective.repeated_draws=original keeps
    OFF's way: the repeat stays a real slot at the same position). Every unused slot is then moved to a distinct
    position that no real slot uses (`scatter_replacements` resolves what a repeated position shows).
    """
    B, N = u.shape
    slot = torch.arange(N, device=u.device)
    n_candidates = candidates.sum(1, keepdim=True)  # (B, 1)
    rank = (u * n_candidates).long().clamp(max=(n_candidates - 1).clamp(min=0))  # (B, N): which candidate
    drawn = torch.searchsorted(candidates.long().cumsum(1), rank + 1)  # (B, N): its position
    drawn = drawn.clamp(max=candidates.shape[1] - 1)  # a row without candidates has no real slot anyway
    earlier = slot[None, :] < slot[:, None]  # (N, N): [i, j] is j < i
    repeat = ((drawn[:, :, None] == drawn[:, None, :]) & earlier).any(-1)  # (B, N): drawn by an earlier slot
    real = (slot[None, :] < k[:, None]) & (n_candidates > 0) & ~(repeat & once)
    taken = torch.zeros(candidates.shape, dtype=torch.long, device=u.device).scatter_add_(1, drawn, real.long())
    free = torch.searchsorted((taken == 0).long().cumsum(1), slot.expand(B, N) + 1)  # (B, N): j-th free position
    return torch.where(real, drawn, free), real


def scatter_replacements(input_ids: Tensor, positions: Tensor, values: Tensor) -> Tensor:
    """(B, T) `input_ids` with `values` (B, N) written at `positions` (B, N). A position that appears twice (OFF's
    repeated draws) gets the floor of the mean of its values, as OFF's scatter_update computes it
    (pretrain_helpers.py: scatter_nd sums the updates, floordiv by their count); a distinct one gets its value."""
    total = torch.zeros_like(input_ids).scatter_add_(1, positions, values)
    count = torch.zeros_like(input_ids).scatter_add_(1, positions, torch.ones_like(values))
    return torch.where(count > 0, total.div(count.clamp(min=1), rounding_mode="floor"), input_ids)


@torch.no_grad()
def sample_replacements(
    logits: Tensor,
    targets: Tensor,
    keys: Tensor,
    temperature: float | Tensor = 1.0,
    disallow_correct: bool = False,
    sampler: str = "inverse_cdf",
) -> Tensor:
    """Draw one token per slot from softmax(logits / T), in fp32 and without gradient. (B, N, V) -> (B, N).

    `gumbel` is the paper's argmax(logits / T + Gumbel noise); `inverse_cdf` draws from the identical categorical
    distribution with one uniform per slot instead of one per vocabulary entry. Both are keyed per example; the
    inverse CDF is the default because keyed noise over B x N x V entries costs seconds per step on a CPU.
    """
    logits = logits.float()  # fp32 always: pytorch/pytorch#41663
    if isinstance(temperature, Tensor) or temperature != 1.0:  # T = 1: a pass over B x N x V for nothing
        logits = logits / temperature
    if disallow_correct:
        logits = logits.scatter(-1, targets[..., None], float("-inf"))
    B, N, V = logits.shape
    if sampler == "gumbel":
        slots = torch.arange(N, device=keys.device) * _GOLDEN
        row_keys = _mix32((keys[:, None] + slots) & _MASK32)  # (B, N): one key per slot
        u = keyed_uniform(row_keys.reshape(-1), V, STREAM_SAMPLE).view(B, N, V)
        return (logits - torch.log(-torch.log(u))).argmax(-1)
    # An unnormalised CDF, built in place: the uniform is scaled by its total below, so softmax's sum and
    # division are not needed (about twice as fast as softmax + cumsum: docs/benchmarks.md).
    cdf = (logits - logits.amax(-1, keepdim=True)).exp_().cumsum_(-1)  # (B, N, V)
    u = keyed_uniform(keys, N, STREAM_SAMPLE)  # (B, N)
    target = (u * cdf[..., -1])[..., None].contiguous()
    return torch.searchsorted(cdf, target).squeeze(-1).clamp_(max=V - 1)
