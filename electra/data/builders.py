"""Example builders: the `ExampleSource`s that turn a tokenized corpus into [CLS] ... [SEP] training examples.

Both are pure functions of (seed, example id), which is what makes resume exact and DDP ranks disjoint (see
electra/data/__init__.py). Global ids are cut into epochs of `epoch_size` draws; within an epoch, id -> draw goes
through a keyed pseudo-random permutation (a Feistel network), so an epoch visits every draw exactly once, in an
order that changes every epoch, with no state and no O(corpus) shuffle array.

- `DynamicSource` (the study, RC): each draw is one document and a random window of it.
- `StaticSource` (the original, OFF): a fixed set of examples packed from consecutive lines, [CLS] A [SEP] B [SEP].

Batch assembly is numpy gathers on the (memory-mapped) token array: no per-token Python.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from electra.data.corpus import TokenCorpus, split_documents
from electra.data.tokenizer import TokenizerInfo

# OFF build_pretraining_dataset.py::ExampleBuilder
SINGLE_SEGMENT_PROB = 0.1  # "small chance to only have one segment as in classification tasks"
SHORT_TARGET_PROB = 0.05  # "small chance for random-length instead of max_length-length example"
SHORT_TARGET_MIN = 5  # random.randint(5, max_length)
EXTRA_LINE_PROB = 0.5  # a line that would overfill segment A still goes to A half the time

_M64 = (1 << 64) - 1
_GOLD, _MIX1, _MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
STREAM_ORDER, STREAM_OFFSET = 1, 2
_ROUNDS = [np.uint64((r * 0x9E3779B97F4A7C15) & _M64) for r in range(4)]  # Feistel round constants


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """A 64-bit integer hash with full avalanche (SplitMix64's finalizer); uint64 arithmetic wraps by design."""
    x = x + _GOLD
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


def keyed_hash(seed: int, values: np.ndarray, stream: int) -> np.ndarray:
    """(n,) uint64 hashes of integer `values`, a pure function of (seed, stream, value)."""
    key = _splitmix64(np.array([(seed * 0x100000001B3 + stream) & _M64], dtype=np.uint64))
    return _splitmix64(np.asarray(values).astype(np.uint64) ^ key)


def keyed_permutation(index: np.ndarray, n: int, keys: np.ndarray) -> np.ndarray:
    """Apply a pseudo-random bijection of [0, n), chosen by each element's key, to `index` (values in [0, n)).

    A 4-round unbalanced Feistel network on the ceil(log2 n) bits covering n; values that land outside [0, n)
    are encrypted again ("cycle walking"), which keeps it a bijection of [0, n) (the domain is < 2n, so fewer than
    two encryptions are needed on average). Any round function keeps it a bijection; SplitMix64 mixes well enough
    that consecutive positions land far apart.
    """
    bits = max(2, (n - 1).bit_length())
    x = np.asarray(index).astype(np.uint64)
    keys = np.broadcast_to(np.asarray(keys, dtype=np.uint64), x.shape)
    todo = np.arange(len(x))
    while todo.size:
        v, k = x[todo], keys[todo]
        lo_bits = bits // 2  # the halves swap sizes every round: (hi, lo) = (bits - lo_bits, lo_bits)
        for r in _ROUNDS:
            hi_bits = bits - lo_bits
            hi, lo = v >> np.uint64(lo_bits), v & np.uint64((1 << lo_bits) - 1)
            f = _splitmix64(lo ^ (k + r)) >> np.uint64(64 - hi_bits)
            v = (lo << np.uint64(hi_bits)) | (hi ^ f)  # new (hi, lo) = (lo, hi ^ F(lo)): invertible
            lo_bits = hi_bits
        x[todo] = v
        todo = todo[v >= n]
    return x.astype(np.int64)


class EpochOrder:
    """Global example id -> draw index: epoch = id // n, then a keyed permutation of [0, n) for that epoch.

    Computed BLOCK consecutive positions at a time and memoised: a permutation's cost is numpy's per-call overhead
    (a few hundred small ops for the cycle walks), not the arithmetic, and the loop asks for consecutive ids, so
    one block serves many batches. The result is still a pure function of (seed, id).
    """

    BLOCK = 8192
    KEEP = 8  # blocks kept: enough for the train ids and the eval ids the loop alternates between

    def __init__(self, n: int, seed: int):
        self.n, self.seed = n, seed
        self._blocks: dict[tuple[int, int], np.ndarray] = {}

    def __call__(self, example_ids: np.ndarray) -> np.ndarray:
        epoch, pos = np.divmod(np.asarray(example_ids, dtype=np.int64), self.n)
        block = pos // self.BLOCK
        out = np.empty(len(pos), dtype=np.int64)
        for e, b in set(zip(epoch.tolist(), block.tolist(), strict=True)):
            sel = (epoch == e) & (block == b)
            out[sel] = self._block(e, b)[pos[sel] - b * self.BLOCK]
        return out

    def _block(self, epoch: int, block: int) -> np.ndarray:
        if (epoch, block) not in self._blocks:
            if len(self._blocks) >= self.KEEP:
                self._blocks.pop(next(iter(self._blocks)))  # the oldest
            positions = np.arange(block * self.BLOCK, min((block + 1) * self.BLOCK, self.n))
            key = keyed_hash(self.seed, np.array([epoch]), STREAM_ORDER)
            self._blocks[epoch, block] = keyed_permutation(positions, self.n, key)
        return self._blocks[epoch, block]


def _uniform(h: np.ndarray) -> np.ndarray:
    """uint64 hashes -> float64 uniforms in [0, 1) from their top 53 bits."""
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def assemble(
    tokens: np.ndarray, start: np.ndarray, a_len: np.ndarray, b_len: np.ndarray, seq_len: int, tok: TokenizerInfo
) -> dict[str, np.ndarray]:
    """Build [CLS] A [SEP] (B [SEP]) [PAD]... rows where A = tokens[start : start + a_len] and B follows A directly.

    `b_len == 0` gives a single segment. Requires a_len + b_len + 2 + (b_len > 0) <= seq_len.
    """
    n = len(start)
    rows = np.arange(n)
    has_b = b_len > 0
    total = a_len + b_len + 2 + has_b  # (n,) real tokens including [CLS] and [SEP]s
    cols = np.arange(seq_len)[None, :]  # (1, T)
    a, end = a_len[:, None], total[:, None]  # (n, 1)
    # B follows A in the corpus, so the text token at column j is tokens[start + j - 1] in A and
    # tokens[start + j - 2] in B (one [SEP] further right)
    src = start[:, None] + cols - 1 - (cols > a + 1)  # (n, T)
    text = (cols >= 1) & (cols < end - 1) & (cols != a + 1)
    gathered = tokens[np.clip(src, 0, len(tokens) - 1)]  # a numpy gather on the memory map
    input_ids = np.where(text, gathered, tok.pad_id).astype(np.int64)
    input_ids[:, 0] = tok.cls_id
    input_ids[rows, a_len + 1] = tok.sep_id
    input_ids[rows[has_b], total[has_b] - 1] = tok.sep_id
    attention_mask = (cols < end).astype(np.int64)
    token_type_ids = ((cols > a + 1) & (cols < end)).astype(np.int64)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


class DynamicSource:
    """The study's dynamic segmentation: every draw is one document and a random window of `seq_len - 2` tokens.

    Which document: an epoch holds ceil(len / (seq_len - 2)) draws of each document, so documents are drawn in
    proportion to their length (one epoch ~ one pass over the tokens) and a long document is not under-sampled
    the way "one draw per document per epoch" would under-sample it. The order within an epoch is a keyed
    permutation of those draws.

    Which window: the start is random over every window that overlaps the document, including those hanging
    off either end, then shifted inside it. A plain uniform start in [0, len - window] would show the first and
    last tokens of a document ~window times less often than the middle; this way every token is covered with
    probability >= window / (len + window - 1) per draw, so over training every part of every document is seen.
    The k draws of a document in one epoch are stratified: draw j takes its start from the j-th of k equal parts
    of that range, so one epoch spreads its windows over the whole document instead of clustering them.

    Short documents (fewer tokens than a window) are padded, not packed: each row is one document, so no
    attention crosses documents and an example depends on one document only. The cost is padding, which is small
    for the corpora of the study (OpenWebText, Wikipedia: documents average well over 128 tokens; measured in
    docs/data.md) and [PAD] positions are masked out of the losses anyway.
    """

    def __init__(self, corpus: TokenCorpus, doc_ids: np.ndarray, seq_len: int, seed: int, tok: TokenizerInfo):
        if seq_len < 3:
            raise ValueError(f"data.seq_len must be at least 3 ([CLS] x [SEP]), got {seq_len}")
        self.corpus, self.seq_len, self.seed, self.tok = corpus, seq_len, seed, tok
        self.window = seq_len - 2
        self.doc_ids = np.asarray(doc_ids, dtype=np.int64)
        self.doc_start = corpus.doc_offsets[self.doc_ids]
        self.doc_len = corpus.doc_offsets[self.doc_ids + 1] - self.doc_start
        self.draws_per_doc = np.maximum(1, -(-self.doc_len // self.window))
        self._draw_ends = np.cumsum(self.draws_per_doc)  # (D,) draw j belongs to the first doc with end > j
        self.epoch_size = int(self._draw_ends[-1])
        self._order = EpochOrder(self.epoch_size, seed)

    def draw_index(self, example_ids: np.ndarray) -> np.ndarray:
        """Which of the epoch's draws each id is: distinct ids within an epoch get distinct draws."""
        return self._order(example_ids)

    def draws(self, example_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(doc, start, length) of each example: an index into `doc_ids`, the window start within that document,
        and the window length (< window only for a short document)."""
        ids = np.asarray(example_ids, dtype=np.int64)
        draw = self.draw_index(ids)
        doc = np.searchsorted(self._draw_ends, draw, side="right")
        k = self.draws_per_doc[doc]
        j = draw - (self._draw_ends[doc] - k)  # this draw's stratum among the document's k
        length = np.minimum(self.doc_len[doc], self.window)
        overlapping = self.doc_len[doc] + self.window - 1  # starts in [-(window - 1), len - 1]
        u = (j + _uniform(keyed_hash(self.seed, ids, STREAM_OFFSET))) / k  # uniform within stratum j
        s = (u * overlapping).astype(np.int64) - (self.window - 1)
        start = np.clip(s, 0, self.doc_len[doc] - length)
        return doc, start, length

    def examples(self, example_ids: np.ndarray) -> dict[str, np.ndarray]:
        doc, start, length = self.draws(example_ids)
        return assemble(
            self.corpus.tokens, self.doc_start[doc] + start, length, np.zeros_like(length), self.seq_len, self.tok
        )


def static_plan(
    corpus: TokenCorpus, doc_ids: np.ndarray, seq_len: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OFF's offline example building as arrays (start, a_len, b_len), one entry per example, in document order.

    Follows OFF's ExampleBuilder: lines accumulate to the target length (5% of examples: a random target in
    [5, seq_len]); 10% are single-segment; otherwise segment A takes lines while it stays under half the target,
    plus, half of the time, the line that would overfill it; B takes the rest. Two deliberate differences:
    - OFF truncates what overfills an example and drops it; here the overflow starts the next example instead,
      so every token of the corpus is in exactly one example (the whole corpus is covered).
    - OFF can put a later short line back into A after B has started, so A is not contiguous text; here A is
      always a prefix of the example's lines.
    Examples never cross documents. Vectorised over documents: one numpy step per example position within a
    document, so building is O(examples) numpy work, not a Python loop over lines.
    """
    rng = np.random.default_rng([seed, 0x57A71C])
    lines = corpus.line_offsets
    pos = corpus.doc_offsets[doc_ids].astype(np.int64)
    end = corpus.doc_offsets[np.asarray(doc_ids) + 1].astype(np.int64)
    starts, a_lens, b_lens = [], [], []
    active = np.flatnonzero(pos < end)
    while active.size:
        p, e_doc, m = pos[active], end[active], active.size
        target = np.where(rng.random(m) < SHORT_TARGET_PROB, rng.integers(SHORT_TARGET_MIN, seq_len + 1, m), seq_len)
        single = rng.random(m) < SINGLE_SEGMENT_PROB
        extra_line = rng.random(m) < EXTRA_LINE_PROB
        e = np.minimum(p + target - 3, e_doc)  # room for [CLS] A [SEP] B [SEP]
        first_target = np.where(single, seq_len, (target - 3) // 2)  # single: A takes everything
        # A ends at a line boundary: at least the first line, then every line that keeps it under first_target
        k = np.maximum(np.searchsorted(lines, p, "right"), np.searchsorted(lines, p + first_target, "left") - 1)
        k = np.minimum(k + (extra_line & (lines[k] - p < first_target)), len(lines) - 1)
        a_end = np.minimum(lines[k], e)
        no_b = single | (a_end >= e)
        e = np.where(no_b, np.minimum(p + target - 2, e_doc), e)  # one [SEP] fewer: one more text token
        a_end = np.where(no_b, e, a_end)
        starts.append(p)
        a_lens.append(a_end - p)
        b_lens.append(e - a_end)
        pos[active] = e
        active = active[e < e_doc]
    cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)  # noqa: E731
    return cat(starts, np.int64), cat(a_lens, np.int32), cat(b_lens, np.int32)


class StaticSource:
    """OFF's static examples (see `static_plan`), built once from the seed and visited in a new order each epoch."""

    def __init__(self, corpus: TokenCorpus, doc_ids: np.ndarray, seq_len: int, seed: int, tok: TokenizerInfo):
        if seq_len < 5:
            raise ValueError(f"data.seq_len must be at least 5 for the static builder, got {seq_len}")
        self.corpus, self.seq_len, self.seed, self.tok = corpus, seq_len, seed, tok
        self.doc_ids = np.asarray(doc_ids, dtype=np.int64)
        self.start, self.a_len, self.b_len = static_plan(corpus, np.asarray(doc_ids, dtype=np.int64), seq_len, seed)
        self.epoch_size = len(self.start)
        self._order = EpochOrder(self.epoch_size, seed)

    def plan_index(self, example_ids: np.ndarray) -> np.ndarray:
        """Which planned example each id is (an index into start/a_len/b_len)."""
        return self._order(example_ids)

    def examples(self, example_ids: np.ndarray) -> dict[str, np.ndarray]:
        i = self.plan_index(example_ids)
        return assemble(self.corpus.tokens, self.start[i], self.a_len[i], self.b_len[i], self.seq_len, self.tok)


def build_sources(
    corpus: TokenCorpus, builder: str, seq_len: int, eval_fraction: float, seed: int, tok: TokenizerInfo
) -> tuple[DynamicSource | StaticSource, DynamicSource | StaticSource]:
    """(train, eval) sources over a held-out split of the documents."""
    classes = {"dynamic": DynamicSource, "static": StaticSource}
    if builder not in classes:
        raise ValueError(f"data.builder must be one of {sorted(classes)}, got {builder!r}")
    train_docs, eval_docs = split_documents(corpus.num_documents, eval_fraction)
    cls = classes[builder]
    return cls(corpus, train_docs, seq_len, seed, tok), cls(corpus, eval_docs, seq_len, seed + 1, tok)


class ExampleSource(Protocol):
    seq_len: int

    def examples(self, example_ids: np.ndarray) -> dict[str, np.ndarray]:
        """(n,) int64 global example ids -> `input_ids`, `attention_mask`, `token_type_ids`, each (n, seq_len) int64.

        A pure function of (the source's seed, the ids): the same id always gives the same example.
        """
        ...
