"""Statistics of the corruption: slot counts, never special tokens, the 85/15 split, keyed determinism, and that
sampling draws from softmax(logits / T)."""

import math

import pytest
import torch
from torch import Tensor

from electra.config import ObjectiveConfig, num_mask_slots
from electra.modeling.masking import keyed_uniform, mask_tokens, sample_replacements, scatter_replacements
from tests.helpers import CLS, MASK, SEP, SPECIAL


def batch(B=512, T=128, vocab=1000, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (B, T), generator=g)
    lengths = torch.randint(8, T + 1, (B,), generator=g)
    attention = (torch.arange(T)[None, :] < lengths[:, None]).long()
    ids = ids * attention
    ids[:, 0] = CLS
    ids[torch.arange(B), lengths - 1] = SEP
    ids[:, T // 3] = torch.where(attention[:, T // 3].bool(), SEP, 0)  # a segment boundary inside
    return ids, attention, lengths


def run_mask(ids, attention, objective=None, seed=0, T=128):
    objective = objective or ObjectiveConfig()
    n = num_mask_slots(objective, T)
    return mask_tokens(ids, attention, torch.arange(ids.shape[0]), seed, objective, n, MASK, SPECIAL), n


@pytest.mark.parametrize("sampling", ["with_replacement", "without_replacement"])
def test_fixed_masking_counts_and_candidates(sampling):
    ids, attention, lengths = batch()
    m, n = run_mask(ids, attention, ObjectiveConfig(position_sampling=sampling))
    assert n == 19 and m.positions.shape == (512, 19)
    expected_k = torch.round(lengths.float() * 0.15).clamp(1, 19)  # k = max(1, min(N, round(0.15 * non-pad)))
    if sampling == "without_replacement":
        assert torch.equal(m.weights.sum(1), expected_k)
    else:  # k draws, of which repeats do not count again
        assert (m.weights.sum(1) <= expected_k).all() and (m.weights.sum(1) < expected_k).any()
        assert (m.weights[:, 0] == 1).all()  # the first draw is never a repeat
    chosen = m.positions[m.weights.bool()]
    rows = torch.arange(512)[:, None].expand(-1, 19)[m.weights.bool()]
    original = ids[rows, chosen]
    assert not torch.isin(original, SPECIAL).any()  # never [CLS]/[SEP]/[PAD]/[MASK]
    assert attention[rows, chosen].all()
    for row in range(512):  # distinct positions within a row
        assert m.positions[row].unique().numel() == 19
    # unused slots leave their position untouched
    unused = ~m.weights.bool()
    assert torch.equal(m.input_ids.gather(1, m.positions)[unused], m.targets[unused])


def expected_distinct(n: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and variance of the number of distinct values among k uniform draws from n (occupancy problem)."""
    miss1, miss2 = (1 - 1 / n) ** k, (1 - 2 / n) ** k
    return n * (1 - miss1), n * (n - 1) * miss2 + n * miss1 - n**2 * miss1**2


def full_rows(B: int, T: int = 128, vocab: int = 1000):
    """Rows without padding: [CLS] ... [SEP] ... [SEP], so T - 3 candidates each."""
    ids = torch.randint(5, vocab, (B, T), generator=torch.Generator().manual_seed(1))
    ids[:, 0], ids[:, T // 3], ids[:, -1] = CLS, SEP, SEP
    return ids, torch.ones(B, T, dtype=torch.long)


def test_positions_are_drawn_with_replacement_as_off():
    """OFF pretrain_helpers.mask draws N positions with tf.random.categorical and keeps the first k: on a full
    128-token row (k = N = 19 draws over 125 candidates) that leaves 17.7 distinct positions on average, not 19."""
    ids, attention = full_rows(8192)
    m, _ = run_mask(ids, attention)
    distinct = m.weights.sum(1)
    mean, var = expected_distinct(torch.tensor(125.0, dtype=torch.float64), 19)
    assert abs(mean - 17.69) < 0.01
    assert abs(distinct.mean().item() - mean) < 4 * math.sqrt(var / len(distinct))
    # rows of every length: the sum of distinct positions against the occupancy expectation row by row
    ids, attention, lengths = batch(B=4096)
    m, _ = run_mask(ids, attention)
    n = (attention.bool() & ~torch.isin(ids, SPECIAL)).sum(1).double()
    mean, var = expected_distinct(n, torch.round(lengths.double() * 0.15).clamp(1, 19))
    assert abs(m.weights.sum().item() - mean.sum().item()) < 4 * math.sqrt(var.sum().item())
    # the old draw, kept under its name, gives exactly k
    m, _ = run_mask(*full_rows(64), ObjectiveConfig(position_sampling="without_replacement"))
    assert (m.weights.sum(1) == 19).all()


@pytest.mark.parametrize("sampling", ["with_replacement", "without_replacement"])
def test_positions_are_uniform_over_candidates(sampling):
    ids, attention = full_rows(4096)
    m, _ = run_mask(ids, attention, ObjectiveConfig(position_sampling=sampling))
    counts = torch.zeros(128).index_add_(0, m.positions[m.weights.bool()], torch.ones(int(m.weights.sum())))
    assert counts[[0, 128 // 3, 127]].sum() == 0  # [CLS] and [SEP] never
    candidates = counts[torch.ones(128, dtype=torch.bool).index_fill_(0, torch.tensor([0, 128 // 3, 127]), False)]
    expected = candidates.sum() / 125
    chi2 = ((candidates - expected) ** 2 / expected).sum().item()
    assert chi2 < 168.9  # chi-square, 124 dof, p = 0.005


def test_mask_keep_split_is_85_15():
    ids, attention, _ = batch(B=4096)
    m, _ = run_mask(ids, attention)
    real = m.weights.bool()
    shown_mask = (m.input_ids.gather(1, m.positions) == MASK) & real
    frac = shown_mask.sum().item() / real.sum().item()
    n = real.sum().item()
    assert abs(frac - 0.85) < 4 * math.sqrt(0.85 * 0.15 / n)  # within 4 standard errors
    assert torch.equal(shown_mask, m.is_masked)
    # everything else is the original token: no random replacement
    untouched = torch.ones_like(ids, dtype=torch.bool).scatter(1, m.positions, ~m.is_masked)
    assert torch.equal(m.input_ids[untouched], ids[untouched])


def test_masking_is_keyed_by_seed_and_example_not_by_batch_layout():
    ids, attention, _ = batch(B=64)
    a, n = run_mask(ids, attention, seed=3)
    b, _ = run_mask(ids, attention, seed=3)
    c, _ = run_mask(ids, attention, seed=4)
    assert torch.equal(a.positions, b.positions) and torch.equal(a.input_ids, b.input_ids)
    assert not torch.equal(a.positions, c.positions)
    # the second half alone, with its global example ids, is masked exactly as inside the full batch
    half = mask_tokens(ids[32:], attention[32:], torch.arange(32, 64), 3, ObjectiveConfig(), n, MASK, SPECIAL)
    assert torch.equal(half.positions, a.positions[32:]) and torch.equal(half.input_ids, a.input_ids[32:])


def test_bernoulli_masking_rate():
    objective = ObjectiveConfig(masking="bernoulli")
    ids, attention, _ = batch(B=2048)
    m, n = run_mask(ids, attention, objective)
    assert n == 40  # 0.15 * 128 + 5 sd, +1
    candidates = attention.bool() & ~torch.isin(ids, SPECIAL)
    rate = m.weights.sum().item() / candidates.sum().item()
    assert abs(rate - 0.15) < 0.005
    assert not torch.isin(m.targets[m.weights.bool()], SPECIAL).any()


def test_keyed_uniform_is_uniform():
    u = keyed_uniform(torch.arange(2000), 500, stream=1)
    assert 0 < u.min() and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.002 and abs(u.var().item() - 1 / 12) < 0.001
    hist = torch.histc(u, bins=20, min=0, max=1) / u.numel()
    assert (hist - 0.05).abs().max() < 0.002
    # neighbouring keys and counters are uncorrelated
    assert abs(torch.corrcoef(torch.stack([u[:-1].flatten(), u[1:].flatten()]))[0, 1]) < 0.01


@pytest.mark.parametrize("sampler", ["inverse_cdf", "gumbel"])
@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_samples_follow_softmax_over_temperature(sampler, temperature):
    V, draws = 8, 20000
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, 1.5, 0.2])
    target = torch.softmax(logits / temperature, -1)
    s = sample_replacements(
        logits.expand(draws, 1, V),
        torch.zeros(draws, 1, dtype=torch.long),
        torch.arange(draws),
        temperature=temperature,
        sampler=sampler,
    )
    freq = torch.bincount(s.flatten(), minlength=V).float() / draws
    chi2 = (draws * (freq - target) ** 2 / target).sum().item()
    assert chi2 < 24.3  # chi-square, 7 dof, p = 0.001


def test_temperature_changes_the_distribution_and_disallow_correct():
    V, draws = 8, 20000
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, 1.5, 0.2]).expand(draws, 1, V)
    keys, targets = torch.arange(draws), torch.zeros(draws, 1, dtype=torch.long)
    hot = (sample_replacements(logits, targets, keys, temperature=1.0) == 0).float().mean()
    cold = (sample_replacements(logits, targets, keys, temperature=0.25) == 0).float().mean()
    assert cold > hot + 0.2  # a lower temperature concentrates on the argmax
    never = sample_replacements(logits, targets, keys, disallow_correct=True)
    assert not (never == 0).any()


def test_repeated_draws_can_count_twice_as_off():
    """objective.repeated_draws=original: OFF keeps every one of the k draws (a position drawn twice counts twice
    in the MLM loss), over the same distinct positions as `once`, shown as [MASK] if either draw says so."""
    ids, attention, lengths = batch(B=2048)
    once, _ = run_mask(ids, attention)
    off, _ = run_mask(ids, attention, ObjectiveConfig(repeated_draws="original"))
    assert torch.equal(off.weights.sum(1), torch.round(lengths.float() * 0.15).clamp(1, 19))
    assert off.weights.sum() > once.weights.sum()  # repeats exist at this length
    for m in (once, off):  # the same distinct positions either way
        assert torch.equal(
            torch.zeros_like(ids).scatter_(1, m.positions, m.weights.long()),
            torch.zeros_like(ids).scatter_(1, once.positions, once.weights.long()),
        )
    real = off.weights.bool()
    shown = off.input_ids.gather(1, off.positions)
    assert torch.equal(shown[real & off.is_masked], torch.full_like(shown[real & off.is_masked], MASK))
    assert torch.equal(shown[real & ~off.is_masked], off.targets[real & ~off.is_masked])


def test_a_position_written_twice_gets_the_floor_of_the_mean_as_off():
    """OFF's scatter_update (pretrain_helpers.py): scatter_nd sums repeated updates, then floordiv by their count."""
    ids = torch.tensor([[2, 10, 11, 12, 13, 3]])
    positions = torch.tensor([[1, 3, 1, 4]])
    values = torch.tensor([[100, 7, 205, 13]])
    assert scatter_replacements(ids, positions, values).tolist() == [[2, 152, 11, 7, 13, 3]]
