"""Tokenizers: loading an existing one (ours, or a BERT `vocab.txt`), training a new one, `electra tokenizer`.

Special tokens and their ids are fixed for tokenizers we train: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4.
A BERT vocab.txt keeps its own ids ([PAD]=0, [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from electra.data.sources import ReadOptions, ReadStats, read_documents, resolve_inputs, total_size
from electra.utils.errors import InputError, RefusedError
from electra.utils.wording import argument

log = logging.getLogger(__name__)

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A `tokenizers.Tokenizer` from a folder (or file) holding tokenizer.json, or a BERT-style vocab.txt.

    Sequences are encoded with [CLS] A [SEP] (B [SEP]) and token type ids 0/1; no padding or truncation is set.
    """
    path = Path(path)
    if path.is_dir():
        if (path / "tokenizer.json").exists():
            path = path / "tokenizer.json"
        elif (path / "vocab.txt").exists():
            path = path / "vocab.txt"
        else:
            raise FileNotFoundError(f"{path}: no tokenizer.json or vocab.txt in this folder")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such tokenizer file")
    if path.name.endswith(".txt"):
        from tokenizers.implementations import BertWordPieceTokenizer

        tok = BertWordPieceTokenizer(str(path), lowercase=True, strip_accents=True)
        return tok._tokenizer
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:
        raise ValueError(f"{path}: not a valid tokenizer.json: {err}") from err


def find_tokenizer(path: str | Path) -> Path | None:
    """The tokenizer folder that belongs to a run, checkpoint, prepared corpus or HF folder (our export: its
    discriminator/ or masked_lm/), if any."""
    path = Path(path)
    for candidate in (
        path / "tokenizer",
        path.parent.parent / "tokenizer",
        path,
        path / "discriminator",
        path / "masked_lm",
    ):
        if (candidate / "tokenizer.json").exists() or (candidate / "vocab.txt").exists():
            return candidate
    return None


def tokenizer_info(path: str | Path) -> TokenizerInfo:
    tok = load_tokenizer(path)
    ids = {}
    for token in SPECIAL_TOKENS:
        token_id = tok.token_to_id(token)
        if token_id is None:
            raise ValueError(f"{path}: tokenizer has no {token} token")
        ids[token] = token_id
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    return TokenizerInfo(
        vocab_size=tok.get_vocab_size(),
        pad_id=ids["[PAD]"],
        unk_id=ids["[UNK]"],
        cls_id=ids["[CLS]"],
        sep_id=ids["[SEP]"],
        mask_id=ids["[MASK]"],
        path=folder,
    )


# -- training ---------------------------------------------------------------------------------------------------


def new_tokenizer(kind: str) -> Tokenizer:
    """An untrained tokenizer of `kind`: "bpe" (byte-level, cased: the study) or "wordpiece" (uncased: OFF)."""
    from tokenizers import decoders, models, normalizers, pre_tokenizers

    if kind == "bpe":
        # RoBERTa/GPT-2 style: no normalisation, so case and accents are kept and any byte is representable.
        # add_prefix_space: a word gets the same tokens at the start of a text as after a space.
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        # the prefix space is an encoding device, not text: strip it again when decoding
        tok.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Strip(" ", 1, 0)])
    elif kind == "wordpiece":
        # BERT uncased: lower-case, strip accents, split on whitespace and punctuation, "##" continuations.
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True, clean_text=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##")
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r}: expected 'bpe' or 'wordpiece'")
    return tok


def add_post_processor(tok: Tokenizer) -> None:
    """[CLS] A [SEP] and [CLS] A [SEP] B [SEP] with token type ids 0 / 1, as BERT and ELECTRA expect."""
    from tokenizers import processors

    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )


def train_tokenizer(
    kind: str,
    vocab_size: int,
    inputs: list[str],
    out_dir: str | Path,
    show_progress: bool = True,
    read_options: ReadOptions | None = None,
    overwrite: bool = False,
    allow_binary: bool = False,
) -> Path:
    """Train on text, archives, tables, folders or a hub dataset (sources.py, read as `read_options` says, by
    default ReadOptions()); write out_dir/tokenizer.json.

    The special tokens come first, so [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4 whatever the data. A folder that
    already holds a tokenizer is refused unless `overwrite`, an input that is not UTF-8 text unless `allow_binary`
    (sources.check_binary).
    """
    from tokenizers import pre_tokenizers, trainers
    from tqdm import tqdm

    read_options = read_options or ReadOptions()
    if vocab_size < 300:
        raise ValueError(
            f"{argument('vocab_size', vocab_size)} is too small: use at least 300 (256 bytes + 5 special tokens)"
        )
    out_dir = Path(out_dir)
    _check_out_dir(out_dir, overwrite)  # before the work, not after it
    resolved = resolve_inputs(inputs, read_options)
    tok = new_tokenizer(kind)
    # the trainer's own bars (indicatif, on stdout) print an empty line per phase where stdout is no terminal, and
    # one more on a terminal: the reading bar below stands for the whole, on stderr as every bar of ours
    common = dict(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    if kind == "bpe":
        trainer = trainers.BpeTrainer(initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), **common)
    else:
        trainer = trainers.WordPieceTrainer(continuing_subword_prefix="##", **common)
    stats = ReadStats()
    with tqdm(total=total_size(resolved), unit="B", unit_scale=True, desc="reading", disable=not show_progress) as bar:

        def batches():
            # Lists of lines: the trainer pre-tokenizes each batch in parallel in Rust.
            batch, seen = [], 0
            for doc in read_documents(resolved, read_options, stats, allow_binary):
                batch += doc
                if len(batch) >= 1000:
                    yield batch
                    batch = []
                    bar.update(stats.input_bytes - seen)
                    seen = stats.input_bytes
            yield batch
            bar.update(stats.input_bytes - seen)

        tok.train_from_iterator(batches(), trainer=trainer)
    for i, token in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(token) == i, f"{token} should have id {i}"
    add_post_processor(tok)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".tokenizer.json.tmp-{os.getpid()}"
    tok.save(str(tmp), pretty=True)
    os.replace(tmp, out_dir / "tokenizer.json")  # atomic: a reader never sees half a file
    if stats.replaced_chars:
        log.warning("%d invalid UTF-8 sequences replaced (first at %s)", stats.replaced_chars, stats.first_replacement)
    log.info(
        "trained %s tokenizer: %d tokens from %d documents (%.1f MB)",
        kind,
        tok.get_vocab_size(),
        stats.documents,
        stats.bytes / 1e6,
    )
    return out_dir / "tokenizer.json"


def _check_out_dir(out_dir: Path, overwrite: bool) -> None:
    """Refuse a folder that already holds a tokenizer (one load_tokenizer would read), unless `overwrite`."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a folder")
    held = [name for name in ("tokenizer.json", "vocab.txt") if (out_dir / name).exists()]
    if held and not overwrite:
        raise RefusedError(f"{out_dir}: already holds a tokenizer ({', '.join(held)})", "overwrite", "replaces it")


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
