"""Model inputs: `[CLS] A [SEP] B [SEP]` with token type ids 0/1, longest-first truncation, dynamic padding.

Truncation is deterministic (no random cropping, which made the study's dev scores vary run to run). Each batch
is padded only to its own longest sequence; evaluation batches are sorted by length so little padding is wasted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from tokenizers import Tokenizer

from electra.glue.loading import Example


@dataclass
class Features:
    input_ids: list[np.ndarray]
    """One (T_i,) int64 array per example: [CLS] A [SEP] (B [SEP])."""
    token_type_ids: list[np.ndarray]
    labels: np.ndarray
    """(N,) int64 label ids (-1 when unlabelled) or float32 scores (nan when unlabelled)."""
    pad_id: int

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(x) for x in self.input_ids])


def special_ids(tokenizer: Tokenizer) -> tuple[int, int, int]:
    """[CLS], [SEP], [PAD] ids; a tokenizer without them cannot build ELECTRA inputs."""
    ids = [tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]")]
    if any(i is None for i in ids):
        raise ValueError("the tokenizer has no [CLS], [SEP] or [PAD] token")
    return ids[0], ids[1], ids[2]


def truncate_pair(a: list[int], b: list[int] | None, budget: int) -> tuple[list[int], list[int] | None]:
    """Longest-first: drop the last token of the longer side (of B on ties) until both fit (BERT/OFF
    `_truncate_seq_pair`)."""
    if b is None:
        return a[:budget], None
    la, lb = len(a), len(b)
    while la + lb > budget:
        if la > lb:
            la -= 1
        else:
            lb -= 1
    return a[:la], b[:lb]


def encode(examples: list[Example], tokenizer: Tokenizer, max_length: int = 128, regression: bool = False) -> Features:
    """Tokenize a list of examples into unpadded model inputs of at most `max_length` tokens."""
    cls_id, sep_id, pad_id = special_ids(tokenizer)
    tokenizer.no_truncation()  # we truncate pairs ourselves, longest first
    tokenizer.no_padding()
    enc_a = tokenizer.encode_batch([e.text_a for e in examples], add_special_tokens=False)
    pairs = [e for e in examples if e.text_b is not None]
    enc_b = iter(tokenizer.encode_batch([e.text_b for e in pairs], add_special_tokens=False))
    input_ids, type_ids = [], []
    for e, a in zip(examples, enc_a, strict=True):
        b = next(enc_b).ids if e.text_b is not None else None
        a_ids, b_ids = truncate_pair(a.ids, b, max_length - (3 if b is not None else 2))
        ids = [cls_id, *a_ids, sep_id]
        types = [0] * len(ids)
        if b_ids is not None:
            ids += [*b_ids, sep_id]
            types += [1] * (len(b_ids) + 1)
        input_ids.append(np.array(ids, dtype=np.int64))
        type_ids.append(np.array(types, dtype=np.int64))
    if regression:
        labels = np.array([np.nan if e.label is None else e.label for e in examples], dtype=np.float32)
    else:
        labels = np.array([-1 if e.label is None else e.label for e in examples], dtype=np.int64)
    return Features(input_ids, type_ids, labels, pad_id)


def collate(features: Features, idx: np.ndarray) -> dict[str, torch.Tensor]:
    """Pad the examples `idx` to the longest of them: input_ids, attention_mask, token_type_ids (B, T), labels (B,)."""
    T = max(len(features.input_ids[i]) for i in idx)
    input_ids = np.full((len(idx), T), features.pad_id, dtype=np.int64)
    type_ids = np.zeros((len(idx), T), dtype=np.int64)
    mask = np.zeros((len(idx), T), dtype=np.int64)
    for row, i in enumerate(idx):
        n = len(features.input_ids[i])
        input_ids[row, :n] = features.input_ids[i]
        type_ids[row, :n] = features.token_type_ids[i]
        mask[row, :n] = 1
    return {
        "input_ids": torch.from_numpy(input_ids),
        "attention_mask": torch.from_numpy(mask),
        "token_type_ids": torch.from_numpy(type_ids),
        "labels": torch.from_numpy(features.labels[idx]),
    }


def train_batches(n: int, batch_size: int, generator: torch.Generator) -> Iterator[np.ndarray]:
    """One epoch of shuffled index batches (the last one may be smaller)."""
    order = torch.randperm(n, generator=generator).numpy()
    for start in range(0, n, batch_size):
        yield order[start : start + batch_size]


def eval_batches(features: Features, batch_size: int) -> list[np.ndarray]:
    """Index batches sorted by length, longest first (so a too-large batch fails at once, not at the end)."""
    order = np.argsort(-features.lengths, kind="stable")
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
