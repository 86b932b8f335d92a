"""Fast, exact batch encoding of text lines for corpus preparation: tokenize each distinct word once.

Why: HF `tokenizers` spends most of its time per word (pre-tokenisation regex, BPE merges, one Encoding object
per sequence). Natural text repeats its words, so on the Wikipedia sample only ~7% of the space-separated chunks
are new; encoding each distinct chunk once and gathering the rest from a cache with numpy is ~3x faster
(measured in docs/data.md) and gives exactly the same ids (tests/data/test_data_encoding.py checks it on real text).

When it is exact: the tokenizer must treat a single ASCII space before a non-space as a hard boundary that the
text on either side does not see across. That holds for the pre-tokenizers we recognise:
- ByteLevel (GPT-2 regex, add_prefix_space): the space glues to the following piece (" word"), so "a b" encodes
  as " a" + " b", which is what encoding "a" and "b" separately gives (the prefix space is added back);
- BertPreTokenizer / Whitespace / WhitespaceSplit: spaces are dropped;
with no normalizer, or BERT's (its changes are per character). Any other tokenizer, and any line containing a
special token's text (added tokens are matched across the whole line), is encoded line by line with HF.
"""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
from tokenizers import Tokenizer

_BYTELEVEL_SPLIT = re.compile(r" (?=\S)")  # a space that starts a ByteLevel piece: " word"
_SPACE_THEN_SPACE = re.compile(r" \s")  # where a plain split(" ") would cut a whitespace run apart
MAX_CACHE_ENTRIES = 1 << 20  # ~100 MB of distinct chunks per worker; the cache restarts when full
JOIN_GROUP = 256  # distinct chunks encoded per HF sequence: amortises HF's per-sequence cost


def split_mode(tok: Tokenizer) -> str | None:
    """The chunking rule for this tokenizer ("bytelevel" or "whitespace"), or None when it would not be exact."""
    spec = json.loads(tok.to_str())
    norm, pre = spec.get("normalizer"), spec.get("pre_tokenizer") or {}
    if norm is not None and norm.get("type") != "BertNormalizer":
        return None
    if pre.get("type") == "ByteLevel" and pre.get("add_prefix_space") and pre.get("use_regex", True):
        return "bytelevel"
    if pre.get("type") in ("BertPreTokenizer", "Whitespace", "WhitespaceSplit"):
        return "whitespace"
    return None


class LineEncoder:
    """Encode lists of lines (no special tokens added) to one flat id array plus per-line token counts."""

    def __init__(self, tokenizer_json: str):
        self.tok = Tokenizer.from_str(tokenizer_json)
        self.tok.no_padding()
        self.tok.no_truncation()
        self.mode = split_mode(self.tok)
        self.specials = [t.content for t in self.tok.get_added_tokens_decoder().values()]
        self._reset_cache()

    def _reset_cache(self) -> None:
        self.cache: dict[str, int] = {}  # chunk -> index into chunk_start / chunk_len
        self.chunk_start, self.chunk_len = np.zeros(0, np.int64), np.zeros(0, np.int64)
        self.flat = np.zeros(0, np.uint32)  # the ids of every cached chunk, back to back

    def encode(self, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids (N,) uint32, lengths (len(lines),) int64) for stripped, non-empty lines."""
        if self.mode is None or not lines:
            return self._encode_plain(lines)
        big = " ".join(lines)
        if any(s in big for s in self.specials):  # rare: route just those lines through plain HF
            plain = [any(s in line for s in self.specials) for line in lines]
            return self._encode_mixed(lines, plain)
        if self.mode == "whitespace" or not _SPACE_THEN_SPACE.search(big):
            chunks = big.split(" ")
            counts = np.fromiter(map(str.count, lines, itertools.repeat(" ")), np.int64, len(lines)) + 1
        else:  # a whitespace run somewhere: split exactly where ByteLevel pieces start
            per_line = [_BYTELEVEL_SPLIT.split(line) for line in lines]
            chunks = list(itertools.chain.from_iterable(per_line))
            counts = np.fromiter(map(len, per_line), np.int64, len(lines))
        idx = np.fromiter(map(self.cache.get, chunks, itertools.repeat(-1)), np.int64, len(chunks))
        missing = np.flatnonzero(idx < 0)
        if missing.size:
            if len(self.cache) + missing.size > MAX_CACHE_ENTRIES:
                self._reset_cache()
                idx[:] = -1
                missing = np.arange(len(chunks))
            missed = [chunks[i] for i in missing.tolist()]
            self._add(list(dict.fromkeys(missed)))
            idx[missing] = np.fromiter(map(self.cache.__getitem__, missed), np.int64, len(missed))
        lens, starts = self.chunk_len[idx], self.chunk_start[idx]  # (C,)
        # gather every chunk's ids: output position p of chunk c reads flat[start_c + p - out_start_c]
        out_start = np.cumsum(lens) - lens
        ids = self.flat[np.repeat(starts - out_start, lens) + np.arange(int(lens.sum()))]
        line_lengths = np.add.reduceat(lens, np.cumsum(counts) - counts) if len(lines) else np.zeros(0, np.int64)
        return ids, line_lengths

    def _add(self, new: list[str]) -> None:
        """Encode distinct new chunks, JOIN_GROUP per HF sequence, and split the ids back by character offset."""
        seqs = [" ".join(new[i : i + JOIN_GROUP]) for i in range(0, len(new), JOIN_GROUP)]
        ids, chunk_of = [], []
        for g, enc in enumerate(self.tok.encode_batch(seqs, add_special_tokens=False)):
            group = new[g * JOIN_GROUP : (g + 1) * JOIN_GROUP]
            sizes = np.fromiter(map(len, group), np.int64, len(group)) + 1
            chunk_starts = np.cumsum(sizes) - sizes  # character offset of each chunk in the joined sequence
            token_starts = np.fromiter((o[0] for o in enc.offsets), np.int64, len(enc.ids))
            # +1: a ByteLevel token " word" starts on the space just before its chunk
            chunk_of.append(np.searchsorted(chunk_starts, token_starts + 1, "right") - 1 + g * JOIN_GROUP)
            ids.append(np.asarray(enc.ids, np.uint32))
        lens = np.bincount(np.concatenate(chunk_of), minlength=len(new)) if new else np.zeros(0, np.int64)
        base = len(self.chunk_len)
        self.chunk_start = np.concatenate([self.chunk_start, len(self.flat) + np.cumsum(lens) - lens])
        self.chunk_len = np.concatenate([self.chunk_len, lens])
        self.flat = np.concatenate([self.flat, *ids])
        self.cache.update(zip(new, range(base, base + len(new)), strict=True))

    def _encode_plain(self, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
        encs = self.tok.encode_batch_fast(lines, add_special_tokens=False)
        lengths = np.fromiter(map(len, encs), np.int64, len(encs))
        ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encs), np.uint32, int(lengths.sum()))
        return ids, lengths

    def _encode_mixed(self, lines: list[str], plain: list[bool]) -> tuple[np.ndarray, np.ndarray]:
        is_plain = np.array(plain)
        fast_ids, fast_len = self.encode([lines[i] for i in np.flatnonzero(~is_plain)])
        slow_ids, slow_len = self._encode_plain([lines[i] for i in np.flatnonzero(is_plain)])
        # interleave the two groups back into line order
        lengths = np.zeros(len(lines), np.int64)
        lengths[~is_plain], lengths[is_plain] = fast_len, slow_len
        ends = np.cumsum(lengths)
        out = np.empty(int(ends[-1]) if len(ends) else 0, np.uint32)
        line_of = np.repeat(np.arange(len(lines)), lengths)
        out[is_plain[line_of]] = slow_ids
        out[~is_plain[line_of]] = fast_ids
        return out, lengths
