"""Pretraining data: tokenizers, corpus preparation, and the example sources the training loop draws from.

The contract with the training loop is small and pure: an `ExampleSource` maps global example ids to token
arrays. The loop asks for ids [step * B, (step + 1) * B) and splits them across ranks and micro-batches, so a
resumed run sees exactly the batches it would have seen, ranks get disjoint data, and how a batch is split never
changes what it contains.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from electra.config import DataConfig


@dataclass(frozen=True)
class TokenizerInfo:
    """What the model and the objective need to know about a tokenizer."""

    vocab_size: int
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    path: Path | None = None
    """Folder holding tokenizer.json (or vocab.txt); None for the built-in synthetic vocabulary."""

    @property
    def special_ids(self) -> list[int]:
        """Tokens never chosen for masking: [PAD] [CLS] [SEP] [MASK] (and [UNK] is left maskable, as OFF)."""
        return [self.pad_id, self.cls_id, self.sep_id, self.mask_id]


class ExampleSource(Protocol):
    seq_len: int

    def examples(self, example_ids: np.ndarray) -> dict[str, np.ndarray]:
        """(n,) int64 global example ids -> `input_ids`, `attention_mask`, `token_type_ids`, each (n, seq_len) int64.

        A pure function of (the source's seed, the ids): the same id always gives the same example.
        """
        ...


@dataclass
class PretrainingData:
    train: ExampleSource
    eval: ExampleSource
    tokens: TokenizerInfo


def open_pretraining_data(cfg: DataConfig, seed: int) -> PretrainingData:
    """Train and eval sources for a run: the prepared folder `cfg.path`, or the built-in synthetic corpus.

    The train and eval sources draw from disjoint documents (a fixed `cfg.eval_fraction` of them held out).
    `tokens.path` is a folder holding only the tokenizer.json the data was made with (a run copies it).
    """
    from electra.data.builders import build_sources

    if cfg.path is None:
        from electra.data.synthetic import synthetic_corpus, synthetic_tokenizer_info

        corpus, tokens = synthetic_corpus(), synthetic_tokenizer_info()
    else:
        from electra.data.corpus import TOKENIZER_FILE, open_corpus
        from electra.data.tokenizer import tokenizer_info

        corpus, _ = open_corpus(cfg.path)  # checks format version and that its tokenizer.json is the one used
        tokens = tokenizer_info(Path(cfg.path) / TOKENIZER_FILE)  # .path: the folder DIR/tokenizer
    train, eval_ = build_sources(corpus, cfg.builder, cfg.seq_len, cfg.eval_fraction, seed, tokens)
    return PretrainingData(train=train, eval=eval_, tokens=tokens)
