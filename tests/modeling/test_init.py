"""Initial weights, parameter by parameter: OFF's truncated normal and Glorot uniform ("original"), or
transformers' plain normal ("normal"); zero biases and unit LayerNorms either way."""

import math

import pytest
import torch

from electra.modeling.electra import ElectraForPretraining
from tests.helpers import tiny_model_config

STD = 0.02
TRUNCATED_STD = STD * 0.87962566  # normal(0, s) cut at +-2s: s * sqrt(1 - 4 phi(2) / (2 Phi(2) - 1))
# The dense layers OFF builds without a kernel_initializer, so TF's default Glorot uniform applies:
# modeling.py BertModel `embeddings_project`, run_pretraining.py _get_discriminator_output `dense(hidden, units=1)`.
GLOROT = ("embeddings_project.weight", "discriminator_predictions.dense_prediction.weight")


def model(init: str) -> ElectraForPretraining:
    # embedding 128 != hidden 256 and != generator 64, so both models have an embeddings_project
    cfg = tiny_model_config(
        vocab_size=2000,
        embedding_size=128,
        hidden_size=256,
        intermediate_size=1024,
        generator_fraction=0.25,
        max_position_embeddings=512,
        init=init,
    )
    return ElectraForPretraining(cfg)


def split(m: ElectraForPretraining) -> tuple[dict, dict, dict]:
    """(normal-family weights, Glorot weights, biases and LayerNorms) by parameter name."""
    weights, glorot, rest = {}, {}, {}
    for name, p in m.named_parameters():
        p = p.detach()
        if name.endswith(GLOROT):
            glorot[name] = p
        elif name.endswith("weight") and p.dim() == 2:
            weights[name] = p
        else:
            rest[name] = p
    return weights, glorot, rest


def test_original_init_is_offs_truncated_normal_and_glorot():
    weights, glorot, rest = split(model("original"))
    assert len(weights) == 3 + 2 * (2 * 6) + 2  # embeddings, 2 x 2 layers x 6, generator and disc head denses
    assert sorted(glorot) == [
        "discriminator.discriminator_predictions.dense_prediction.weight",
        "discriminator.electra.embeddings_project.weight",
        "generator.electra.embeddings_project.weight",
    ]
    for name, w in weights.items():
        assert w.abs().max() <= 2 * STD, name  # truncated at two standard deviations
        assert abs(w.mean().item()) < 6 * TRUNCATED_STD / math.sqrt(w.numel()), name
        if w.numel() >= 50_000:
            assert abs(w.std().item() / TRUNCATED_STD - 1) < 0.02, (name, w.std().item())
    pooled = torch.cat([w.flatten() for w in weights.values()])
    assert abs(pooled.std().item() / TRUNCATED_STD - 1) < 0.005
    assert pooled.abs().max() > 1.99 * STD  # fills the truncated range
    for name, w in glorot.items():
        fan_out, fan_in = w.shape  # nn.Linear stores (out, in); TF's kernel is (in, out): the same fans
        limit = math.sqrt(6 / (fan_in + fan_out))
        assert w.abs().max() <= limit, name
        assert w.abs().max() > 0.95 * limit, name  # uniform over the whole range, not a normal(0, 0.02)
        assert abs(w.std().item() / (limit / math.sqrt(3)) - 1) < 6 / math.sqrt(2 * w.numel()), name
    check_biases_and_layer_norms(rest)


def test_normal_init_is_transformers_normal():
    weights, glorot, rest = split(model("normal"))
    pooled = torch.cat([w.flatten() for w in [*weights.values(), *glorot.values()]])
    assert abs(pooled.std().item() / STD - 1) < 0.005
    beyond = (pooled.abs() > 2 * STD).float().mean().item()
    assert abs(beyond - 0.0455) < 0.003  # a normal's tails, not cut
    check_biases_and_layer_norms(rest)


def check_biases_and_layer_norms(rest: dict) -> None:
    for name, p in rest.items():
        if "LayerNorm.weight" in name:
            assert torch.equal(p, torch.ones_like(p)), name
        else:
            assert name.endswith(("bias", "lm_head_bias")), name
            assert torch.equal(p, torch.zeros_like(p)), name


@pytest.mark.parametrize("init", ["original", "normal"])
def test_init_follows_the_seed(init):
    torch.manual_seed(5)
    a = model(init).state_dict()
    torch.manual_seed(5)
    b = model(init).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
