"""A tokenized corpus in memory or on disk: one flat token array plus document and line offsets.

The on-disk form is what `electra data prepare` writes (see prepare.py); the built-in synthetic corpus builds the
same object in memory, so both go through the same example builders.

    DIR/tokens.bin       all tokens, documents back to back, uint16 (vocab <= 65536) or uint32, memory-mapped
    DIR/documents.npy    (num_documents + 1,) int64 token offsets: document d is tokens[doc[d]:doc[d+1]]
    DIR/lines.npy        (num_lines + 1,) int64 token offsets of the input lines ("sentences" for the static
                         builder); every document offset is also a line offset
    DIR/tokenizer/       a copy of the tokenizer (tokenizer.json), so a prepared folder is self-contained; a
                         folder of its own so that a run can copy it without the data
    DIR/metadata.json    counts, dtype, format version, tokenizer hash, source fingerprint, and the sha256 of
                         tokens.bin, documents.npy and lines.npy (checked by `open_corpus`)

Opening a folder checks every file against metadata.json, so a flipped byte, a truncation or an edit is an
error naming the file, never a silently different corpus. Folders prepared before the hashes were recorded open
unverified, with one warning.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from electra.utils.errors import CorruptFileError, InputError
from electra.utils.files import sha256_file, verify_digests
from electra.utils.wording import plural

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
"""Bumped whenever the files above change meaning; an older folder must be prepared again (1: tokenizer.json at
the top level)."""
TOKENS_FILE, DOCS_FILE, LINES_FILE, META_FILE = "tokens.bin", "documents.npy", "lines.npy", "metadata.json"
TOKENIZER_FILE = "tokenizer/tokenizer.json"
HASHED_FILES = (TOKENS_FILE, DOCS_FILE, LINES_FILE)
"""Their sha256 is metadata.json's `sha256` (the tokenizer's is `tokenizer_sha256`)."""
MIN_DOCUMENTS = 2
"""Pretraining holds documents out for its held-out evaluation (`split_documents`: at least one) and trains on the
others: a corpus of fewer cannot be split, and would fail inside the first evaluation."""
EVAL_SPLIT_SEED = 0x5EED
"""The held-out documents depend only on the corpus, not on the run seed, so runs with different seeds are
evaluated on the same documents."""


@dataclass(frozen=True)
class TokenCorpus:
    tokens: np.ndarray
    """(num_tokens,) uint16 or uint32 token ids, usually a read-only memory map."""
    doc_offsets: np.ndarray
    """(num_documents + 1,) int64 offsets into `tokens`."""
    line_offsets: np.ndarray
    """(num_lines + 1,) int64 offsets into `tokens`; a superset of `doc_offsets`."""

    @property
    def num_documents(self) -> int:
        return len(self.doc_offsets) - 1

    @property
    def num_tokens(self) -> int:
        return int(self.doc_offsets[-1])

    def doc_lengths(self) -> np.ndarray:
        return np.diff(self.doc_offsets)

    def document(self, d: int) -> np.ndarray:
        return np.asarray(self.tokens[self.doc_offsets[d] : self.doc_offsets[d + 1]])


def too_few_documents(num_documents: int, where: str) -> str | None:
    """Why a corpus of `num_documents` (read from `where`) cannot be split into training and held-out documents, or
    None when it can (MIN_DOCUMENTS or more)."""
    if num_documents >= MIN_DOCUMENTS:
        return None
    return (
        f"{where}: {plural(num_documents, 'document')}, too few to split into training and held-out documents "
        f"(pretraining holds at least one out for its evaluation and needs {MIN_DOCUMENTS})"
    )


def split_documents(num_documents: int, eval_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(train_doc_ids, eval_doc_ids), sorted: a fixed random `eval_fraction` of the documents is held out, at
    least one on each side, so evaluation always has data (fewer than MIN_DOCUMENTS documents: refused)."""
    if not 0 <= eval_fraction < 1:
        raise ValueError(f"data.eval_fraction must be in [0, 1), got {eval_fraction}")
    refused = too_few_documents(num_documents, "the corpus")
    if refused:
        raise InputError(refused)
    n_eval = min(max(int(round(num_documents * eval_fraction)), 1), num_documents - 1)
    order = np.random.default_rng(EVAL_SPLIT_SEED).permutation(num_documents)
    return np.sort(order[n_eval:]).astype(np.int64), np.sort(order[:n_eval]).astype(np.int64)


def read_metadata(folder: Path) -> dict:
    path = Path(folder) / META_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: not a prepared corpus (no {META_FILE}; run `electra data prepare`)")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: unreadable metadata: {err}") from err
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
        found = meta.get("format_version") if isinstance(meta, dict) else None
        raise InputError(
            f"{path}: prepared with format version {found}, this code reads version {FORMAT_VERSION}; "
            "run `electra data prepare` again into a new folder"
        )
    kinds = {"num_tokens": int, "num_documents": int, "num_lines": int, "dtype": str, "tokenizer_sha256": str}
    for key, kind in kinds.items():
        if not isinstance(meta.get(key), kind) or isinstance(meta.get(key), bool):
            raise InputError(f"{path}: '{key}' must be a {kind.__name__}, got {meta.get(key)!r}")
    if meta["dtype"] not in ("uint16", "uint32"):
        raise InputError(f"{path}: 'dtype' must be uint16 or uint32, got {meta['dtype']!r}")
    return meta


_warned_unverified = False


def verify_corpus(folder: Path, meta: dict) -> None:
    """Every file of a prepared folder against the sha256 in its metadata (CorruptFileError naming the file)."""
    global _warned_unverified
    tok_path = folder / TOKENIZER_FILE
    if not tok_path.exists():
        raise CorruptFileError(f"{tok_path}: missing; the prepared folder is incomplete")
    if sha256_file(tok_path) != meta["tokenizer_sha256"]:
        raise CorruptFileError(f"{tok_path}: does not match the tokenizer hash in {META_FILE}; prepare the data again")
    digests = meta.get("sha256")
    if isinstance(digests, dict):
        verify_digests(folder, digests, HASHED_FILES, recorded_in=META_FILE)
    elif not _warned_unverified:
        log.warning(
            "%s (and any other folder prepared before file hashes were recorded) has no 'sha256' in %s: "
            "its files are checked by size only",
            folder,
            META_FILE,
        )
        _warned_unverified = True


def open_corpus(folder: str | Path, verify: bool = True) -> tuple[TokenCorpus, dict]:
    """Memory-map a prepared folder, checking that it is complete and matches its own metadata; `verify` also
    hashes every file (see docs/reliability.md for what that costs)."""
    folder = Path(folder)
    meta = read_metadata(folder)
    if verify:
        verify_corpus(folder, meta)
    dtype = np.dtype(meta["dtype"])
    tokens_path = folder / TOKENS_FILE
    expected = meta["num_tokens"] * dtype.itemsize
    if not tokens_path.exists() or tokens_path.stat().st_size != expected or expected == 0:
        raise CorruptFileError(f"{tokens_path}: expected {expected} bytes ({meta['num_tokens']} tokens); truncated?")
    tokens = np.memmap(tokens_path, dtype=dtype, mode="r", shape=(meta["num_tokens"],))
    docs, lines = _offsets(folder / DOCS_FILE), _offsets(folder / LINES_FILE)
    if len(docs) != meta["num_documents"] + 1 or docs[0] != 0 or docs[-1] != meta["num_tokens"]:
        raise CorruptFileError(f"{folder / DOCS_FILE}: does not match {META_FILE} (num_documents, num_tokens)")
    if len(lines) != meta["num_lines"] + 1 or lines[0] != 0 or lines[-1] != meta["num_tokens"]:
        raise CorruptFileError(f"{folder / LINES_FILE}: does not match {META_FILE} (num_lines, num_tokens)")
    return TokenCorpus(tokens=tokens, doc_offsets=docs, line_offsets=lines), meta


def _offsets(path: Path) -> np.ndarray:
    """A (n,) int64 array of non-decreasing offsets; np.load with allow_pickle=False never runs code."""
    try:
        offsets = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise CorruptFileError(f"{path}: cannot load ({' '.join(str(err).split())})") from None
    if offsets.dtype != np.int64 or offsets.ndim != 1 or len(offsets) < 2 or np.any(np.diff(offsets) < 0):
        raise CorruptFileError(f"{path}: expected non-decreasing int64 offsets, got {offsets.dtype} {offsets.shape}")
    return offsets
