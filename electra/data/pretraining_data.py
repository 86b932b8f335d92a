"""The train and eval example sources of a run, opened from its data config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from electra.config import DataConfig
from electra.data.builders import ExampleSource, build_sources
from electra.data.corpus import TOKENIZER_FILE, open_corpus, too_few_documents
from electra.data.synthetic import synthetic_corpus, synthetic_tokenizer_info
from electra.data.tokenizer import TokenizerInfo, tokenizer_info
from electra.utils.errors import InputError


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

    if cfg.path is None:
        corpus, tokens = synthetic_corpus(), synthetic_tokenizer_info()
    else:
        corpus, _ = open_corpus(cfg.path)  # checks format version and that its tokenizer.json is the one used
        refused = too_few_documents(corpus.num_documents, cfg.path)  # prepared before `data prepare` refused it
        if refused:
            raise InputError(
                f"{refused}; prepare its text again (electra data prepare), with --doc-separator line if each of "
                "its lines is a document"
            )
        tokens = tokenizer_info(Path(cfg.path) / TOKENIZER_FILE)  # .path: the folder DIR/tokenizer
    train, eval_ = build_sources(corpus, cfg.builder, cfg.seq_len, cfg.eval_fraction, seed, tokens)
    return PretrainingData(train=train, eval=eval_, tokens=tokens)
