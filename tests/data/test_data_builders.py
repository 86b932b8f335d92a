"""Invariants of the dynamic and static example builders: shapes, special tokens, type ids, coverage,
determinism, resume and rank disjointness."""

from __future__ import annotations

import numpy as np
import pytest

from electra.config import DataConfig
from electra.data.builders import DynamicSource, StaticSource, keyed_permutation
from electra.data.corpus import TokenCorpus, split_documents
from electra.data.pretraining_data import open_pretraining_data
from electra.data.synthetic import synthetic_corpus
from tests.helpers import CLS, PAD, SEP, prepared_synthetic_corpus, token_info

TOK = token_info(vocab_size=1000)


def toy_corpus(doc_lengths: list[int], line_length: int = 7) -> TokenCorpus:
    """Documents of the given lengths; token values are 10 + position, so every token is unique and findable."""
    doc_offsets = np.concatenate([[0], np.cumsum(doc_lengths)]).astype(np.int64)
    lines = sorted(
        {int(o) for o in doc_offsets}
        | {int(s) + k for s, n in zip(doc_offsets[:-1], doc_lengths, strict=True) for k in range(0, n, line_length)}
    )
    tokens = (10 + np.arange(doc_offsets[-1])).astype(np.uint32)
    return TokenCorpus(tokens=tokens, doc_offsets=doc_offsets, line_offsets=np.array(lines, np.int64))


def text_of(row: np.ndarray) -> np.ndarray:
    return row[row >= 10] - 10  # corpus positions of the text tokens in an example


def check_format(batch: dict[str, np.ndarray], seq_len: int) -> None:
    ids, mask, types = batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
    n = len(ids)
    for x in (ids, mask, types):
        assert x.shape == (n, seq_len) and x.dtype == np.int64
    real = mask.sum(1)
    assert (mask == (np.arange(seq_len) < real[:, None])).all()  # real tokens first, then padding
    assert (ids[:, 0] == CLS).all() and (ids[np.arange(n), real - 1] == SEP).all()
    assert (ids[mask == 0] == PAD).all() and (types[mask == 0] == 0).all()
    assert not np.isin(ids[mask == 1], [PAD, 1, 4]).any()


@pytest.mark.parametrize("cls", [DynamicSource, StaticSource])
def test_examples_are_well_formed_windows_of_one_document(cls):
    corpus = toy_corpus([300, 5, 40, 1000, 64, 62, 63])
    src = cls(corpus, np.arange(7), seq_len=64, seed=0, tok=TOK)
    batch = src.examples(np.arange(500))
    check_format(batch, 64)
    for row in batch["input_ids"]:
        pos = text_of(row)
        doc = np.searchsorted(corpus.doc_offsets, pos, "right") - 1
        assert (doc == doc[0]).all()  # never crosses a document
        assert (np.diff(pos) == 1).all()  # contiguous text: A then B, in corpus order


def test_dynamic_is_one_segment_and_pads_short_documents():
    corpus = toy_corpus([5, 300])
    src = DynamicSource(corpus, np.arange(2), seq_len=64, seed=0, tok=TOK)
    batch = src.examples(np.arange(200))
    assert (batch["token_type_ids"] == 0).all()
    doc, start, length = src.draws(np.arange(200))
    real = batch["attention_mask"].sum(1)
    assert (real[doc == 0] == 7).all()  # [CLS] 5 tokens [SEP], then padding: short documents are not packed
    assert (real[doc == 1] == 64).all()  # long documents fill the window


def test_dynamic_epoch_draws_each_document_in_proportion_to_its_length_and_covers_it():
    corpus = toy_corpus([1000, 62, 63, 10])
    src = DynamicSource(corpus, np.arange(4), seq_len=64, seed=3, tok=TOK)
    assert src.epoch_size == 17 + 1 + 2 + 1
    doc, _, _ = src.draws(np.arange(src.epoch_size))
    assert np.bincount(doc, minlength=4).tolist() == [17, 1, 2, 1]
    seen = np.zeros(1000, bool)
    ids = np.arange(20 * src.epoch_size)
    doc, start, length = src.draws(ids)
    for s, n in zip(start[doc == 0], length[doc == 0], strict=True):
        seen[s : s + n] = True
    assert seen.all()  # every token of the long document, its first and last ones included


@pytest.mark.parametrize("cls", [DynamicSource, StaticSource])
def test_pure_function_of_seed_and_ids_resume_and_rank_disjointness(cls):
    corpus = synthetic_corpus()
    docs = np.arange(200)
    src = cls(corpus, docs, seq_len=64, seed=11, tok=TOK)
    step, batch_size = 7, 32
    ids = np.arange(step * batch_size, (step + 1) * batch_size)
    full = src.examples(ids)["input_ids"]
    # a fresh source (a resumed process) gives the same batch; so does asking for a longer range
    np.testing.assert_array_equal(cls(corpus, docs, 64, 11, TOK).examples(ids)["input_ids"], full)
    np.testing.assert_array_equal(src.examples(np.arange((step + 1) * batch_size))["input_ids"][-batch_size:], full)
    # ranks take disjoint slices of the global ids: together they rebuild the batch, and share no draw
    parts = [src.examples(r)["input_ids"] for r in np.array_split(ids, 4)]
    np.testing.assert_array_equal(np.concatenate(parts), full)
    draws = src.draw_index(ids) if cls is DynamicSource else src.plan_index(ids)
    assert len(set(draws.tolist())) == batch_size
    if cls is DynamicSource:  # and the stratified windows of one epoch do not repeat either
        doc, start, _ = src.draws(ids)
        assert len(set(zip(doc.tolist(), start.tolist(), strict=True))) == batch_size
    other = cls(corpus, docs, 64, 12, TOK).examples(ids)["input_ids"]
    assert (other != full).any()


def test_keyed_permutation_is_a_bijection_that_changes_with_the_key():
    for n in (1, 2, 3, 17, 1000, 4097):
        perm = keyed_permutation(np.arange(n), n, np.uint64(5))
        assert sorted(perm.tolist()) == list(range(n))
    a = keyed_permutation(np.arange(1000), 1000, np.uint64(1))
    b = keyed_permutation(np.arange(1000), 1000, np.uint64(2))
    assert (a != b).mean() > 0.9


def test_static_plan_covers_every_token_once_with_offs_proportions():
    corpus = synthetic_corpus()
    seq_len = 64
    src = StaticSource(corpus, np.arange(corpus.num_documents), seq_len, seed=0, tok=TOK)
    # every token in exactly one example: the planned spans tile the corpus
    spans = np.stack([src.start, src.start + src.a_len + src.b_len], 1)
    order = np.argsort(spans[:, 0])
    assert spans[order[0], 0] == 0 and spans[order[-1], 1] == corpus.num_tokens
    assert (spans[order[1:], 0] == spans[order[:-1], 1]).all()
    total = src.a_len + src.b_len + 2 + (src.b_len > 0)
    assert total.max() == seq_len and (src.a_len > 0).all()
    # OFF: 10% single segment by the coin; more when a document's tail fits in segment A
    single = (src.b_len == 0).mean()
    assert 0.1 <= single < 0.3
    # OFF: 5% of examples get a random shorter target length; the rest are full unless at a document's end
    at_doc_end = np.isin(spans[:, 1], corpus.doc_offsets)
    short = (total < seq_len) & ~at_doc_end
    assert 0.03 < short.mean() < 0.07
    # segment B starts at a line boundary and A + B stay within the document
    two = src.b_len > 0
    assert np.isin(src.start[two] + src.a_len[two], corpus.line_offsets).mean() > 0.95
    batch = src.examples(np.arange(2000))
    check_format(batch, seq_len)
    types, ids = batch["token_type_ids"], batch["input_ids"]
    for row, t in zip(ids[:200], types[:200], strict=True):
        seps = np.flatnonzero(row == SEP)
        if len(seps) == 2:  # [CLS] A [SEP] B [SEP]: type 1 from B's first token through the last [SEP]
            assert (t[: seps[0] + 1] == 0).all() and (t[seps[0] + 1 : seps[1] + 1] == 1).all()
        else:
            assert len(seps) == 1 and (t == 0).all()


def test_eval_split_holds_out_whole_documents():
    train, held = split_documents(1000, 0.05)
    assert len(held) == 50 and len(train) == 950 and not set(train) & set(held)
    assert np.array_equal(split_documents(1000, 0.05)[1], held)  # fixed: not tied to the run seed
    assert len(split_documents(3, 0.0)[1]) == 1  # evaluation always gets a document
    data = open_pretraining_data(DataConfig(seq_len=64, eval_fraction=0.05), seed=0)
    assert not set(data.train.doc_ids.tolist()) & set(data.eval.doc_ids.tolist())


@pytest.mark.parametrize("builder", ["dynamic", "static"])
def test_open_pretraining_data_on_a_prepared_folder(tmp_path, builder):
    prepared_synthetic_corpus(tmp_path, num_documents=60, vocab_size=400)
    data = open_pretraining_data(DataConfig(path=str(tmp_path / "data"), builder=builder, seq_len=32), seed=0)
    # the tokenizer folder holds the tokenizer only, so a run can copy it without the data
    assert data.tokens.path == tmp_path / "data" / "tokenizer" and data.tokens.vocab_size <= 400
    assert sorted(p.name for p in data.tokens.path.iterdir()) == ["tokenizer.json"]
    assert (data.tokens.cls_id, data.tokens.sep_id, data.tokens.pad_id) == (CLS, SEP, PAD)
    check_format(data.train.examples(np.arange(64)), 32)
    check_format(data.eval.examples(np.arange(8)), 32)
