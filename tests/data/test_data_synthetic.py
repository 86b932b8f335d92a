"""The built-in synthetic corpus, its tokenizer and its downstream tasks."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from electra.config import DataConfig
from electra.data.pretraining_data import open_pretraining_data
from electra.data.synthetic import (
    DET_PL,
    DET_SG,
    SPECIAL_TOKENS,
    decode,
    lexicon,
    synthetic_corpus,
    synthetic_documents,
    write_synthetic_tokenizer,
)
from electra.data.synthetic_tasks import TASKS, write_synthetic_tasks


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ELECTRA_CACHE", str(tmp_path / "cache"))


def test_vocabulary_fits_the_tiny_preset_with_fixed_special_ids():
    words = lexicon().words
    assert len(words) <= 1024
    assert words[:5] == SPECIAL_TOKENS
    assert len(set(words)) == len(words)
    assert all(" " not in w and "\t" not in w for w in words)


def test_generation_is_deterministic_and_seed_dependent():
    a, b, c = synthetic_documents(3, 20), synthetic_documents(3, 20), synthetic_documents(4, 20)
    assert a == b and a != c
    corpus = synthetic_corpus()
    assert corpus.num_documents == 3000 and corpus.num_tokens > 300_000
    lengths = corpus.doc_lengths()
    assert (lengths > 62).mean() > 0.9  # most documents fill a tiny-preset window: little padding
    assert corpus.tokens.max() < len(lexicon().words) and corpus.tokens.min() >= 5  # no special tokens in text


def test_determiners_agree_with_their_nouns():
    lex = lexicon()
    number = {}
    for topic in lex.nouns:
        for group in topic:
            for sg, pl in group:
                number[sg], number[pl] = 0, 1
    adjectives = {a for t in lex.adjectives for a in t}
    det_number = {lex[w]: 0 for w in DET_SG} | {lex[w]: 1 for w in DET_PL}
    checked = 0
    for doc in synthetic_documents(0, 200):
        for line in doc:
            for i, t in enumerate(line[:-2]):
                if t in det_number:
                    noun = line[i + 2] if line[i + 1] in adjectives else line[i + 1]
                    assert number[noun] == det_number[t], decode(line)
                    checked += 1
    assert checked > 1000


def test_pronouns_refer_to_the_last_named_character():
    lex = lexicon()
    name_class = {n: c for c, names in enumerate(lex.names) for n in names}
    pronoun_class = {lex["ke"]: 0, lex["le"]: 1}
    checked = 0
    for doc in synthetic_documents(1, 200):
        last = None
        for t in (t for line in doc for t in line):
            if t in name_class:
                last = name_class[t]
            elif t in pronoun_class:
                assert pronoun_class[t] == last
                checked += 1
    assert checked > 200


def test_tokenizer_json_round_trips_through_transformers(tmp_path):
    from transformers import PreTrainedTokenizerFast

    folder = write_synthetic_tokenizer(tmp_path / "tok")
    tok = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    line = synthetic_documents(0, 1)[0][0]
    enc = tok(decode(line), decode(line[:3]), return_token_type_ids=True)
    assert enc["input_ids"] == [2] + line + [3] + line[:3] + [3]
    assert enc["token_type_ids"] == [0] * (len(line) + 2) + [1] * 4
    assert tok.convert_tokens_to_ids(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]) == [0, 1, 2, 3, 4]
    assert tok("zzzz")["input_ids"] == [2, 1, 3]  # an unknown word is [UNK]


@pytest.mark.parametrize("builder", ["dynamic", "static"])
def test_open_pretraining_data_without_a_path_gives_the_synthetic_corpus(builder):
    data = open_pretraining_data(DataConfig(builder=builder, seq_len=64), seed=0)
    assert data.tokens.vocab_size == len(lexicon().words)
    assert (data.tokens.path / "tokenizer.json").exists()
    batch = data.train.examples(np.arange(32))
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        assert batch[key].shape == (32, 64) and batch[key].dtype == np.int64
    assert (batch["input_ids"][:, 0] == 2).all()
    n_real = batch["attention_mask"].sum(1)
    assert (batch["input_ids"][np.arange(32), n_real - 1] == 3).all()  # the last real token is [SEP]
    assert (batch["input_ids"][batch["attention_mask"] == 0] == 0).all()
    np.testing.assert_array_equal(
        data.eval.examples(np.arange(4))["input_ids"], data.eval.examples(np.arange(4))["input_ids"]
    )


def test_synthetic_tasks_follow_the_custom_task_schema(tmp_path):
    folders = write_synthetic_tasks(tmp_path, seed=0, sizes={"train": 300, "dev": 100, "test": 100})
    assert sorted(f.name for f in folders) == sorted(TASKS)
    kinds = set()
    for folder in folders:
        spec = json.loads((folder / "task.json").read_text())
        assert set(spec) == {"name", "text_a", "text_b", "label", "labels", "metrics", "main_metric", "epochs"}
        assert spec["main_metric"] in spec["metrics"]
        assert set(spec["metrics"]) <= {"mcc", "accuracy", "f1", "pearson", "spearman"}
        kinds.add((spec["text_b"] is None, spec["labels"] is None))
        texts = {}
        for split, n in (("train", 300), ("dev", 100), ("test", 100)):
            with open(folder / f"{split}.tsv", newline="") as f:
                rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
            assert len(rows) == n
            keys = [(r[spec["text_a"]], r[spec["text_b"]] if spec["text_b"] else None) for r in rows]
            texts[split] = set(keys)
            labels = [r[spec["label"]] for r in rows]
            if spec["labels"] is None:
                values = np.array(labels, dtype=float)
                assert values.min() >= 0 and values.max() <= 5 and values.std() > 1
            else:
                assert set(labels) <= set(spec["labels"])
                # no class dominates: a constant prediction does not solve the task
                assert max(labels.count(v) for v in set(labels)) / n < 0.7
        assert not texts["train"] & texts["dev"] and not texts["train"] & texts["test"]
    # single-sentence and pair tasks, classification and regression
    assert {(True, False), (False, False), (False, True)} <= kinds
