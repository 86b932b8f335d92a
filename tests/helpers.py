"""Small builders shared by the tests."""

import torch

from electra.config import ModelConfig, ObjectiveConfig, num_mask_slots
from electra.masking import mask_tokens
from electra.model import ElectraForPretraining

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIAL = torch.tensor([PAD, CLS, SEP, MASK])


def tiny_model_config(**overrides) -> ModelConfig:
    base = dict(
        vocab_size=97, embedding_size=24, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
        generator_fraction=0.5, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip
    base.update(overrides)
    return ModelConfig(**base)


def random_batch(B=4, T=24, vocab=97, seed=0, pad_from=None):
    """[CLS] A [SEP] B [SEP] rows with type ids, optionally padded from per-row positions."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (B, T), generator=g)
    attention = torch.ones(B, T, dtype=torch.long)
    types = torch.zeros(B, T, dtype=torch.long)
    for row in range(B):
        end = T if pad_from is None else pad_from[row]
        ids[row, 0], ids[row, end // 2], ids[row, end - 1] = CLS, SEP, SEP
        types[row, end // 2 + 1 : end] = 1
        ids[row, end:], attention[row, end:] = PAD, 0
    return ids, attention, types


def masked(ids, attention, objective=None, seed=0):
    objective = objective or ObjectiveConfig()
    n = num_mask_slots(objective, ids.shape[1])
    return mask_tokens(ids, attention, torch.arange(ids.shape[0]), seed, objective, n, MASK, SPECIAL)


def tiny_model(**overrides) -> ElectraForPretraining:
    return ElectraForPretraining(tiny_model_config(**overrides))
