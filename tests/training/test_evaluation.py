"""Held-out evaluation: no autograd graph, and chunks of the micro-batch that add up to the whole batches."""

import contextlib
import math

import numpy as np
import pytest
import torch

from electra.config import load_config
from electra.data.pretraining_data import open_pretraining_data
from electra.modeling.electra import ElectraForPretraining, attention_bias
from electra.training.batches import batch_to_device, masked_batch
from electra.training.evaluation import TokenStates, evaluate

CPU = torch.device("cpu")


def _setup(*overrides: str):
    cfg = load_config(
        "tiny",
        ["model.dropout=0.0", "model.attention_dropout=0.0", "train.batch_size=16", "train.eval_batches=2", *overrides],
    )
    data = open_pretraining_data(cfg.data, cfg.train.seed)
    torch.manual_seed(0)
    model = ElectraForPretraining(cfg.model, cfg.objective)
    return cfg, data, model


def test_evaluation_builds_no_graph_and_chunks_equal_whole_batches(monkeypatch):
    cfg, data, model = _setup()
    seen = []
    forward = model.forward

    def spy(*args, **kwargs):
        out = forward(*args, **kwargs)
        seen.append((args[0].shape[0], out.loss.requires_grad, out.loss.grad_fn, torch.is_inference(out.loss)))
        return out

    monkeypatch.setattr(model, "forward", spy)
    whole = evaluate(model, data.eval, cfg, data.tokens, CPU, contextlib.nullcontext(), train=data.train)
    assert [s[0] for s in seen] == [16, 16]
    assert all(not grad and fn is None and inference for _, grad, fn, inference in seen)
    seen.clear()
    chunked = evaluate(model, data.eval, cfg, data.tokens, CPU, contextlib.nullcontext(), train=data.train, chunk=6)
    assert [s[0] for s in seen] == [6, 6, 6, 6, 6, 2]  # 32 examples, 6 at a time: the same examples
    assert whole.keys() == chunked.keys() and len(whole) > 10
    for k, v in whole.items():
        assert math.isclose(v, chunked[k], rel_tol=1e-5, abs_tol=1e-6) or (math.isnan(v) and math.isnan(chunked[k])), k
    assert model.training  # restored


def test_effective_rank_and_mean_share_of_token_states():
    """The rank is exp of the entropy of the normalised singular values (Roy & Vetterli 2007): k orthogonal
    directions of equal weight give k, states on one line give 1; added in pieces, the same as all at once."""
    g = torch.Generator().manual_seed(0)
    basis = torch.linalg.qr(torch.randn(64, 64, generator=g))[0]
    for k in (1, 4, 32):
        states = TokenStates()
        coefficients = torch.linalg.qr(torch.randn(3000, k, generator=g))[0]  # orthonormal: each direction alike
        whole = coefficients @ basis[:k]
        for part in whole.split(700):
            states.add(part)
        assert states.effective_rank() == pytest.approx(k, rel=1e-4)
        assert states.count == 3000
    one_vector = TokenStates()
    one_vector.add(torch.randn(64, generator=g).expand(500, 64) + 1e-3 * torch.randn(500, 64, generator=g))
    assert one_vector.effective_rank() < 1.2 and one_vector.mean_share() > 0.999
    centred = TokenStates()
    centred.add(torch.randn(20000, 64, generator=g))
    assert centred.mean_share() < 0.01 and centred.effective_rank() > 60


def test_effective_rank_is_of_the_singular_values_not_of_their_squares():
    """States of rank 4 with singular values 8, 4, 2, 1 (equal ones cannot tell σ from σ², whose normalised
    entropies are then the same): Roy & Vetterli's rank is exp of the entropy of σ / Σσ, 3.117 here; of σ² it
    would be 2.063. The expected value is computed from σ alone, not through the states' Gram matrix."""
    g = torch.Generator().manual_seed(1)
    sigma = torch.tensor([8.0, 4.0, 2.0, 1.0], dtype=torch.float64)
    left = torch.linalg.qr(torch.randn(3000, 4, generator=g, dtype=torch.float64))[0]  # orthonormal columns
    right = torch.linalg.qr(torch.randn(64, 64, generator=g, dtype=torch.float64))[0][:4]  # 4 orthonormal rows
    states = TokenStates()
    for part in ((left * sigma) @ right).split(700):  # (3000, 64), singular values sigma
        states.add(part)

    def exp_entropy(weights: list[float]) -> float:
        p = [w / sum(weights) for w in weights]
        return math.exp(-sum(q * math.log(q) for q in p))

    expected = exp_entropy([8.0, 4.0, 2.0, 1.0])
    assert expected == pytest.approx(3.117, abs=1e-3) and exp_entropy([64.0, 16.0, 4.0, 1.0]) == pytest.approx(
        2.063, abs=1e-3
    )
    assert states.effective_rank() == pytest.approx(expected, rel=1e-5)  # the 60 null directions: round-off


def test_evaluation_reports_the_discriminators_last_layer_rank():
    """Against the states computed directly: the discriminator's last layer over non-pad tokens of the set."""
    cfg, data, model = _setup()
    metrics = evaluate(model, data.eval, cfg, data.tokens, CPU, contextlib.nullcontext())
    states = TokenStates()
    special = torch.tensor(data.tokens.special_ids)
    model.eval()
    with torch.no_grad():
        for start in (0, 16):
            ids = np.arange(start, start + 16, dtype=np.int64)
            batch = batch_to_device(data.eval.examples(ids), ids, CPU)
            m = masked_batch(cfg, data.tokens, batch, special)
            h = model.discriminator.electra(
                model.embeddings(out_input(model, batch, m), batch["token_type_ids"]),
                attention_bias(batch["attention_mask"]),
            )
            states.add(h[batch["attention_mask"].bool()])
    assert metrics["disc_effective_rank"] == pytest.approx(states.effective_rank(), rel=1e-5)
    assert metrics["disc_mean_share"] == pytest.approx(states.mean_share(), rel=1e-5)
    assert 1 < metrics["disc_effective_rank"] <= cfg.model.hidden_size


def out_input(model, batch, m):
    """The discriminator's input: the sequence with the generator's samples at the chosen slots."""
    return model.corrupt(batch["input_ids"], attention_bias(batch["attention_mask"]), batch["token_type_ids"], m)[3]


def test_evaluation_samples_at_the_schedules_end_points_and_puts_the_schedule_back():
    """A discriminator is scored on the task the recipe ends on (temperature 1, no uniform replacements) at every
    evaluation: the same numbers whatever the schedules had reached, which the training goes on with."""
    cfg, data, model = _setup("objective.temperature_start=3.0", "objective.uniform_replace_start=0.5")
    reference = evaluate(model, data.eval, cfg, data.tokens, CPU, contextlib.nullcontext())
    model.set_temperature(3.0)
    model.set_uniform_replace(0.5)
    scheduled = evaluate(model, data.eval, cfg, data.tokens, CPU, contextlib.nullcontext())
    assert scheduled["disc_auc"] == reference["disc_auc"]
    assert scheduled["disc_loss"] == reference["disc_loss"]
    assert float(model.temperature) == 3.0 and float(model.uniform_replace) == 0.5
