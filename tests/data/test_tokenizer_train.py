"""Tokenizer training (byte-level BPE, WordPiece), loading (ours, BERT vocab.txt) and the transformers round trip."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from transformers import PreTrainedTokenizerFast

from electra.data.tokenizer import SPECIAL_TOKENS, load_tokenizer, tokenizer_info, train_tokenizer
from electra.utils.errors import RefusedError
from tests.helpers import cli_main

TEXT = """The quick brown fox jumps over the lazy dog. Æsop's fables, 1867 edition!
Naïve café owners in Zürich serve crème brûlée; 東京 has 13,960,000 people.
Emoji 😀 and tabs\tand "quotes" (brackets) [square] {curly} <angle> a+b=c 50% #hash @at.

A second document starts here. It repeats the words: the fox, the dog, the café.
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("text")
    (folder / "a.txt").write_text(TEXT * 40)
    rows = [{"text": "A jsonl document about tokenizers.\nIt has two lines."}, {"text": "Another one, shorter."}]
    (folder / "b.jsonl").write_text(("\n".join(json.dumps(r) for r in rows) + "\n") * 20)
    return folder


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    return {
        kind: train_tokenizer(kind, 400, [str(corpus)], out / kind, show_progress=False).parent
        for kind in ("bpe", "wordpiece")
    }


@pytest.mark.parametrize("kind", ["bpe", "wordpiece"])
def test_special_tokens_have_fixed_ids(trained, kind):
    info = tokenizer_info(trained[kind])
    assert (info.pad_id, info.unk_id, info.cls_id, info.sep_id, info.mask_id) == (0, 1, 2, 3, 4)
    assert 200 < info.vocab_size <= 400  # a small corpus may not fill the vocabulary
    tok = load_tokenizer(trained[kind])
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("kind", ["bpe", "wordpiece"])
def test_round_trip_through_transformers(trained, kind):
    hf = PreTrainedTokenizerFast(tokenizer_file=str(trained[kind] / "tokenizer.json"))
    ours = load_tokenizer(trained[kind])
    a, b = "Naïve café owners in Zürich, 1867!", "The quick 😀 fox."
    enc = hf(a, b, return_token_type_ids=True)
    ids_a = ours.encode(a, add_special_tokens=False).ids
    ids_b = ours.encode(b, add_special_tokens=False).ids
    assert enc["input_ids"] == [2] + ids_a + [3] + ids_b + [3]
    assert enc["token_type_ids"] == [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)
    decoded = hf.decode(ids_a)
    if kind == "bpe":  # byte-level: cased and lossless, even for characters never seen in training
        assert decoded == a
        assert hf.decode(hf("日本語 ∑", add_special_tokens=False)["input_ids"]) == "日本語 ∑"
        assert 1 not in hf("日本語 ∑")["input_ids"]  # no [UNK]
    else:  # uncased WordPiece: lower-cased, accents stripped
        assert decoded == "naive cafe owners in zurich, 1867!"


def test_wordpiece_is_uncased_and_bpe_is_cased(trained):
    bpe, wp = load_tokenizer(trained["bpe"]), load_tokenizer(trained["wordpiece"])
    assert bpe.encode("The").ids != bpe.encode("the").ids
    assert wp.encode("The").ids == wp.encode("the").ids


def test_cli_trains_and_writes_tokenizer_json(corpus, tmp_path, capsys):
    out = tmp_path / "cli_tok"
    assert (
        cli_main(
            [
                "tokenizer",
                "train",
                "--kind",
                "wordpiece",
                "--vocab-size",
                "350",
                "--quiet",
                "--out",
                str(out),
                str(corpus / "a.txt"),
            ]
        )
        == 0
    )
    assert (out / "tokenizer.json").exists()
    assert "tokenizer.json" in capsys.readouterr().out
    assert tokenizer_info(out).vocab_size <= 350


@pytest.mark.parametrize("kind", ["bpe", "wordpiece"])
def test_cli_prints_one_line_and_no_empty_ones_with_its_progress_bar_on(corpus, tmp_path, capfd, kind):
    """Without --quiet: the tokenizers trainer's own bars used to print three empty lines on stdout (where it is no
    terminal); captured at the file descriptors, as the Rust library writes there, not through sys.stdout."""
    out = tmp_path / kind
    assert cli_main(["tokenizer", "train", "--kind", kind, "--vocab-size", "350", "--out", str(out), str(corpus)]) == 0
    printed = capfd.readouterr().out
    assert (
        printed.count("\n") == 1 and printed.startswith(f"wrote {out / 'tokenizer.json'} (") and printed.endswith("s\n")
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--vocab-size", "100"], "too small"),
        (["missing_file.txt"], "no such file"),
        (["--kind", "unigram"], None),  # argparse rejects the choice itself
    ],
)
def test_cli_rejects_bad_input_with_one_line(corpus, tmp_path, capsys, args, message):
    base = ["tokenizer", "train", "--out", str(tmp_path / "t"), "--quiet"]
    inputs = [] if any(a.endswith(".txt") for a in args) else [str(corpus / "a.txt")]
    if message is None:
        with pytest.raises(SystemExit) as exc:
            cli_main(base + args + inputs)
        assert exc.value.code == 2
        return
    assert cli_main(base + args + inputs) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not (tmp_path / "t" / "tokenizer.json").exists()


def test_a_folder_holding_a_tokenizer_is_refused_unless_overwrite(corpus, tmp_path, capsys):
    out = tmp_path / "tok"
    args = ["tokenizer", "train", "--vocab-size", "300", "--quiet", "--out", str(out), str(corpus / "a.txt")]
    assert cli_main([*args, "--kind", "wordpiece"]) == 0
    first = (out / "tokenizer.json").read_bytes()
    capsys.readouterr()
    assert cli_main([*args, "--kind", "bpe"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == f"electra tokenizer: error: {out}: already holds a tokenizer (tokenizer.json); --overwrite replaces it"
    )
    assert (out / "tokenizer.json").read_bytes() == first
    assert cli_main([*args, "--kind", "bpe", "--overwrite"]) == 0
    assert json.loads(first)["model"]["type"] == "WordPiece"
    assert json.loads((out / "tokenizer.json").read_text())["model"]["type"] == "BPE"

    # from Python the message names the argument; checked before any input is read (this one does not exist)
    with pytest.raises(RefusedError) as refused:
        train_tokenizer("bpe", 300, [str(tmp_path / "missing.txt")], out, show_progress=False)
    assert str(refused.value) == f"{out}: already holds a tokenizer (tokenizer.json); `overwrite=True` replaces it"
    bert = tmp_path / "bert"  # a BERT vocab.txt is a tokenizer too: load_tokenizer would read our file instead
    bert.mkdir()
    (bert / "vocab.txt").write_text("\n".join(SPECIAL_TOKENS) + "\n")
    with pytest.raises(RefusedError, match=r"bert: already holds a tokenizer \(vocab.txt\)"):
        train_tokenizer("bpe", 300, [str(corpus / "a.txt")], bert, show_progress=False)
    assert sorted(p.name for p in bert.iterdir()) == ["vocab.txt"]
    train_tokenizer("bpe", 300, [str(corpus / "a.txt")], bert, show_progress=False, overwrite=True)
    assert tokenizer_info(bert).vocab_size == 300  # ours, read before vocab.txt


def _tar_xz(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", preset=1) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_archive_and_parquet_routes_feed_the_trainer_the_same_text(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = [doc.split("\n") for doc in TEXT.strip().split("\n\n")] * 20
    docs = [[f"{line} {i}" for line in doc] for i, doc in enumerate(docs)]  # every document a little different
    (tmp_path / "docs.txt").write_text("\n\n".join("\n".join(doc) for doc in docs) + "\n")
    # OpenWebText's layout: an xz tar of xz tars of .txt files, one document each, blank lines between paragraphs
    subset = _tar_xz([(f"{i:04d}.txt", "\n\n".join(doc).encode()) for i, doc in enumerate(docs)])
    (tmp_path / "owt.tar.xz").write_bytes(_tar_xz([("openwebtext/urlsf_subset00-1_data.xz", subset)]))
    pq.write_table(pa.table({"text": ["\n".join(doc) for doc in docs]}), tmp_path / "docs.parquet")
    tokenizers = {}
    for name in ("docs.txt", "owt.tar.xz", "docs.parquet"):
        out = tmp_path / f"tok_{name}"
        assert (
            cli_main(["tokenizer", "train", "--vocab-size", "350", "--quiet", "--out", str(out), str(tmp_path / name)])
            == 0
        )
        tokenizers[name] = (out / "tokenizer.json").read_text()
    assert tokenizers["owt.tar.xz"] == tokenizers["docs.txt"] == tokenizers["docs.parquet"]
    assert len(json.loads(tokenizers["docs.txt"])["model"]["vocab"]) == 350


def test_bert_vocab_txt_loads_with_its_own_ids(tmp_path):
    words = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words += ["the", "fox", "##es", "quick"]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
    info = tokenizer_info(tmp_path)
    assert (info.pad_id, info.unk_id, info.cls_id, info.sep_id, info.mask_id) == (0, 100, 101, 102, 103)
    assert load_tokenizer(tmp_path).encode("The quick foxes").ids == [101, 104, 107, 105, 106, 102]
