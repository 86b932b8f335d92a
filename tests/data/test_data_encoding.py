"""The word-cached LineEncoder must give exactly the ids of plain HF `tokenizers` encoding, line by line."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from electra.data.encoding import LineEncoder, split_mode
from electra.data.synthetic import synthetic_tokenizer_json
from electra.data.tokenizer import train_tokenizer
from tests.helpers import SHARED_DATA

SHARED_CORPUS = SHARED_DATA / "corpus" / "wikipedia_en_sample.txt"
TRICKY = [
    "a  b   c\td",  # whitespace runs: ByteLevel keeps them as pieces of their own
    "x [SEP]y and [MASK]",  # special tokens' text is matched across the whole line
    "[CLS]",
    "héllo wörld ｆｕｌｌｗｉｄｔｈ 中文字 \u00a0 nbsp",
    "tab\there",
    "emoji 😀😀 ok 👩‍👩‍👧",
    "a \x1c b \x1f c",  # Python's str.isspace() says yes, Unicode White_Space says no
    "line \u2028 separator \u3000 ideographic space",
    "it's they'll we've I'M",
    "numbers 1,234.56 ²³ Ⅻ ½",
    "’curly’ “quotes” — dashes –",
    "Ünïcödé ÀÉÎ ǅ",
]


@pytest.fixture(scope="module")
def tokenizers_under_test(tmp_path_factory):
    folder = tmp_path_factory.mktemp("enc")
    text = folder / "train.txt"
    sample = ""
    if SHARED_CORPUS.exists():
        with open(SHARED_CORPUS, encoding="utf-8") as f:
            sample = f.read(200_000)
    text.write_text(sample + "\n".join(TRICKY * 5) + "\nThe quick brown fox jumps over the lazy dog.\n" * 50)
    toks = {
        kind: Tokenizer.from_file(str(train_tokenizer(kind, 800, [str(text)], folder / kind, False)))
        for kind in ("bpe", "wordpiece")
    }
    toks["synthetic"] = Tokenizer.from_str(synthetic_tokenizer_json())
    other = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    other.normalizer = normalizers.NFKC()
    other.pre_tokenizer = pre_tokenizers.Metaspace()
    toks["other"] = other  # not recognised: must fall back to plain encoding
    return toks


def _reference(tok: Tokenizer, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encs = tok.encode_batch(lines, add_special_tokens=False)
    return (
        np.fromiter(itertools.chain.from_iterable(e.ids for e in encs), np.uint32),
        np.array([len(e.ids) for e in encs]),
    )


def test_split_modes(tokenizers_under_test):
    modes = {name: split_mode(tok) for name, tok in tokenizers_under_test.items()}
    assert modes == {"bpe": "bytelevel", "wordpiece": "whitespace", "synthetic": "whitespace", "other": None}


@pytest.mark.parametrize("name", ["bpe", "wordpiece", "synthetic", "other"])
def test_same_ids_as_plain_encoding_on_tricky_lines(tokenizers_under_test, name):
    tok = tokenizers_under_test[name]
    enc = LineEncoder(tok.to_str())
    lines = [s.strip() for s in TRICKY] + ["The quick brown fox", "the the the fox fox"]
    for batch in (lines, lines[::-1], lines[:3]):  # the second and third batches hit the cache
        ids, lengths = enc.encode(batch)
        ref_ids, ref_lengths = _reference(tok, batch)
        np.testing.assert_array_equal(lengths, ref_lengths)
        np.testing.assert_array_equal(ids, ref_ids)


@pytest.mark.skipif(not SHARED_CORPUS.exists(), reason="shared Wikipedia sample not present")
@pytest.mark.parametrize("name", ["bpe", "wordpiece"])
def test_same_ids_as_plain_encoding_on_wikipedia(tokenizers_under_test, name):
    tok = tokenizers_under_test[name]
    with open(SHARED_CORPUS, encoding="utf-8") as f:
        text = f.read(1_000_000)
    lines = [s.strip() for s in text.split("\n") if s.strip()]
    enc = LineEncoder(tok.to_str())
    for i in range(0, len(lines), 2000):
        ids, lengths = enc.encode(lines[i : i + 2000])
        ref_ids, ref_lengths = _reference(tok, lines[i : i + 2000])
        np.testing.assert_array_equal(lengths, ref_lengths)
        np.testing.assert_array_equal(ids, ref_ids)


def test_cache_restarts_when_full_without_changing_ids(tokenizers_under_test, monkeypatch):
    import electra.data.encoding as encoding

    monkeypatch.setattr(encoding, "MAX_CACHE_ENTRIES", 10)
    tok = tokenizers_under_test["bpe"]
    enc = LineEncoder(tok.to_str())
    lines = ["The quick brown fox jumps over the lazy dog again and again", "héllo wörld"] * 3
    for _ in range(3):
        ids, _ = enc.encode(lines)
        np.testing.assert_array_equal(ids, _reference(tok, lines)[0])
        assert len(enc.cache) <= 20
