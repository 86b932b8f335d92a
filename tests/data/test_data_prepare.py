"""`electra data prepare`: the prepared folder's contents, its keying by source + tokenizer, and bad inputs."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import resource
import signal
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from electra.data.corpus import META_FILE, open_corpus
from electra.data.prepare import prepare
from electra.data.sources import ReadOptions, read_documents, resolve_inputs
from electra.data.tokenizer import add_post_processor, load_tokenizer, train_tokenizer
from tests.helpers import cli_main, run_cli, write_synthetic_text

ENGLISH = [
    "Anarchism is a political philosophy that advocates self-governed societies.",
    "The term was first used in 1642; Proudhon adopted it in 1840 (in France).",
    "Naïve café owners in Zürich serve crème brûlée to 13,960 guests.",
]


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    text = folder / "train.txt"
    write_synthetic_text(text, num_documents=30)
    text.write_text(text.read_text() + "\n" + "\n".join(ENGLISH * 20) + "\n")
    return train_tokenizer("bpe", 500, [str(text)], folder / "bpe", show_progress=False).parent


@pytest.fixture
def inputs(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "docs.txt").write_text(f"{ENGLISH[0]}\n{ENGLISH[1]}\n\n\n{ENGLISH[2]}\n")  # 2 docs, 3 lines
    (folder / "one_doc.txt").write_text("A single document.\nWithout blank lines.\n")
    rows = [{"text": "Json document one.\nSecond line."}, {"text": ""}, {"text": "Json two."}]
    (folder / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return folder


def test_prepared_folder_holds_every_line_exactly(tok_dir, inputs, tmp_path):
    meta = prepare([str(inputs)], tok_dir, tmp_path / "out", workers=1, show_progress=False)
    corpus, meta2 = open_corpus(tmp_path / "out")
    assert meta == meta2
    # docs.txt: 2 documents; one_doc.txt: 1; rows.jsonl: 2 (the empty one is counted, not kept)
    assert meta["num_documents"] == corpus.num_documents == 5
    assert meta["empty_documents"] == 1
    assert meta["num_tokens"] == corpus.num_tokens == len(corpus.tokens)
    assert meta["dtype"] == "uint16" and corpus.tokens.dtype == np.uint16
    tok = load_tokenizer(tmp_path / "out" / "tokenizer")  # the copy inside the folder
    # files are read in sorted order: docs.txt, one_doc.txt, rows.jsonl
    lines = [*ENGLISH, "A single document.", "Without blank lines.", "Json document one.", "Second line.", "Json two."]
    offsets = corpus.line_offsets
    assert len(offsets) - 1 == meta["num_lines"] == len(lines)
    for i, line in enumerate(lines):
        assert tok.decode(corpus.tokens[offsets[i] : offsets[i + 1]].tolist()) == line
    assert list(np.searchsorted(offsets, corpus.doc_offsets)) == [0, 2, 3, 5, 7, 8]


def test_parallel_workers_give_identical_files(tok_dir, tmp_path):
    text = tmp_path / "syn.txt"
    write_synthetic_text(text, num_documents=400)
    prepare([str(text)], tok_dir, tmp_path / "w1", workers=1, show_progress=False)
    prepare([str(text)], tok_dir, tmp_path / "w2", workers=2, show_progress=False)
    for name in ("tokens.bin", "documents.npy", "lines.npy", "tokenizer/tokenizer.json"):
        assert (tmp_path / "w1" / name).read_bytes() == (tmp_path / "w2" / name).read_bytes(), name


def test_same_source_and_tokenizer_is_reused_another_tokenizer_is_refused(tok_dir, inputs, tmp_path):
    out = tmp_path / "out"
    first = prepare([str(inputs)], tok_dir, out, workers=1, show_progress=False)
    stamp = (out / "tokens.bin").stat().st_mtime_ns
    assert prepare([str(inputs)], tok_dir, out, workers=1, show_progress=False) == first
    assert (out / "tokens.bin").stat().st_mtime_ns == stamp  # not rewritten
    other = train_tokenizer("wordpiece", 300, [str(inputs)], tmp_path / "wp", show_progress=False).parent
    with pytest.raises(ValueError, match="another tokenizer"):
        prepare([str(inputs)], other, out, workers=1, show_progress=False)
    with pytest.raises(ValueError, match="other inputs"):
        prepare([str(inputs / "docs.txt")], tok_dir, out, workers=1, show_progress=False)
    meta = prepare([str(inputs)], other, out, workers=1, overwrite=True, show_progress=False)
    assert meta["tokenizer_sha256"] != first["tokenizer_sha256"]
    assert open_corpus(out)[1] == meta


def test_older_format_or_tampered_tokenizer_is_refused(tok_dir, inputs, tmp_path):
    out = tmp_path / "out"
    prepare([str(inputs)], tok_dir, out, workers=1, show_progress=False)
    copy = out / "tokenizer" / "tokenizer.json"
    copy.write_text(copy.read_text().replace('"[MASK]"', '"[MASK2]"'))
    with pytest.raises(ValueError, match="does not match the tokenizer hash"):
        open_corpus(out)
    meta = json.loads((out / META_FILE).read_text())
    meta["format_version"] = 1
    (out / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="format version 1"):
        open_corpus(out)
    with pytest.raises(ValueError, match="format version 1"):
        prepare([str(inputs)], tok_dir, out, workers=1, show_progress=False)


def test_invalid_utf8_is_replaced_and_counted_with_its_line(tok_dir, tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"good line\n\nsecond doc \xff\xfe here\nand \xe2\x82 cut\n\xef\xbf\xbd is a real U+FFFD\n")
    meta = prepare([str(path)], tok_dir, tmp_path / "out", workers=1, show_progress=False)
    assert meta["replaced_invalid_utf8"] == 3  # \xff, \xfe, and the truncated \xe2\x82
    assert meta["first_invalid_utf8"] == f"{path}:3"
    assert meta["num_documents"] == 2 and meta["num_lines"] == 4


def _tar_xz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", preset=1) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_invalid_utf8_inside_an_archive_is_located_by_member_and_line(tok_dir, tmp_path):
    inner = _tar_xz({"0001.txt": b"fine\n", "0002.txt": b"para one\n\npara \xff two\n"})
    archive = tmp_path / "owt.tar.xz"
    archive.write_bytes(_tar_xz({"openwebtext/urlsf_subset00-1_data.xz": inner}))
    meta = prepare([str(archive)], tok_dir, tmp_path / "out", workers=1, show_progress=False)
    assert meta["replaced_invalid_utf8"] == 1
    assert meta["first_invalid_utf8"] == f"{archive}/openwebtext/urlsf_subset00-1_data.xz/0002.txt:3"
    assert meta["num_documents"] == 2 and meta["num_lines"] == 3  # one document per member


TWO_FILES = {
    "a.txt": "P1 first paragraph.\nP2 second one.\n\n\nP3 after two blank lines.\n",
    "b.txt": "Q1 alone.\n  \nQ2 after a line of spaces.\n",
}


@pytest.mark.parametrize(
    "separator, lines_per_document", [("blank", [2, 1, 1, 1]), ("file", [3, 2]), ("line", [1, 1, 1, 1, 1])]
)
def test_the_doc_separator_says_where_txt_documents_end(tok_dir, tmp_path, separator, lines_per_document):
    folder = tmp_path / "in"
    folder.mkdir()
    for name, text in TWO_FILES.items():
        (folder / name).write_text(text)
    options = ReadOptions(doc_separator=separator)
    docs = list(read_documents(resolve_inputs([str(folder)]), options))
    assert [len(doc) for doc in docs] == lines_per_document
    assert [line[:2] for doc in docs for line in doc] == ["P1", "P2", "P3", "Q1", "Q2"]  # the same lines, always
    meta = prepare([str(folder)], tok_dir, tmp_path / "out", workers=1, show_progress=False, read_options=options)
    corpus, _ = open_corpus(tmp_path / "out")
    assert np.diff(np.searchsorted(corpus.line_offsets, corpus.doc_offsets)).tolist() == lines_per_document
    assert meta["read_options"]["doc_separator"] == separator


def test_the_doc_separator_is_part_of_the_source_key(tok_dir, inputs, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["data", "prepare", "--quiet", "--workers", "1", "--tokenizer", str(tok_dir), "--out", str(out), str(inputs)]
    assert cli_main(args) == 0
    blank = open_corpus(out)[1]
    assert cli_main([*args, "--doc-separator", "file"]) == 2
    assert "prepared from other inputs" in capsys.readouterr().err
    assert cli_main([*args, "--doc-separator", "file", "--overwrite"]) == 0
    per_file = open_corpus(out)[1]
    assert per_file["read_options"]["doc_separator"] == "file"
    # docs.txt becomes one document (the .jsonl rows stay documents): 5 -> 4, the same tokens
    assert (blank["num_documents"], per_file["num_documents"]) == (5, 4)
    assert per_file["num_tokens"] == blank["num_tokens"]
    # read with the default options, .txt/.jsonl inputs keep the fingerprint they always had: folders prepared
    # before the separator option existed stay valid
    files = sorted(inputs.iterdir())
    legacy = [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in files]
    assert blank["source_fingerprint"] == hashlib.sha256(json.dumps(legacy).encode()).hexdigest()


def test_a_vocabulary_too_large_for_uint16_is_stored_as_uint32(tmp_path):
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])}
    vocab |= {f"w{i}": i + 5 for i in range(70_000)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    add_post_processor(tok)
    (tmp_path / "tok").mkdir()
    tok.save(str(tmp_path / "tok" / "tokenizer.json"))
    (tmp_path / "big.txt").write_text("w1 w69999 w65536\n\nw3\n")  # two documents: a corpus pretraining can split
    meta = prepare([str(tmp_path / "big.txt")], tmp_path / "tok", tmp_path / "out", workers=1, show_progress=False)
    corpus, _ = open_corpus(tmp_path / "out")
    assert meta["dtype"] == "uint32" and corpus.tokens.dtype == np.uint32
    assert corpus.tokens.tolist() == [6, 70004, 65541, 8]


def _write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def _parquet(path: Path, columns: dict) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path)
    return path


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing.txt", "no such file or folder"),
        (lambda d: _write(d / "empty.txt", ""), "empty input file"),
        (lambda d: _write(d / "blank.txt", "\n \n\n"), "no text in this input"),
        (lambda d: (d / "sub").mkdir() or d / "sub", "folder holds no .txt, .jsonl, .parquet"),
        (lambda d: _write(d / "x.csv", "a,b"), "unsupported input type"),
        (lambda d: _write(d / "bad.jsonl", '{"text": "ok"}\n{"text": \n'), "bad.jsonl:2: not valid JSON"),
        (
            lambda d: _write(d / "nt.jsonl", '{"text": "ok"}\n{"body": "x"}\n'),
            "nt.jsonl:2: expected an object with a string 'text' field",
        ),
        (
            lambda d: _write(d / "cut.tar.xz", _tar_xz({"a.txt": os.urandom(60_000)})[:30_000]),
            "cut.tar.xz: not a readable tar archive, or damaged",
        ),
        (lambda d: _write(d / "plain.xz", lzma.compress(b"a text, not a tar")), "plain.xz: not a readable tar"),
        (
            lambda d: _write(d / "notext.tar.xz", _tar_xz({"README.md": b"# no .txt"})),
            "notext.tar.xz: archive holds no .txt files",
        ),
        (lambda d: _write(d / "bad.parquet", "not parquet"), "bad.parquet: not a readable Parquet file"),
        (lambda d: _parquet(d / "body.parquet", {"body": ["x"]}), "body.parquet: no column 'text' (columns: body)"),
        (lambda d: _write(d / "bad.arrow", "not arrow"), "bad.arrow: not a readable Arrow file"),
    ],
)
def test_bad_inputs_fail_with_one_line_naming_the_file(tok_dir, tmp_path, capsys, make, message):
    bad = make(tmp_path)
    out = tmp_path / "out"
    code = cli_main(
        ["data", "prepare", "--quiet", "--workers", "1", "--tokenizer", str(tok_dir), "--out", str(out), str(bad)]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and "\n" not in err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.tmp")]


def _run_with_file_size_limit(args: list[str], limit: int) -> subprocess.CompletedProcess:
    """Run the CLI in a child that cannot write files bigger than `limit` bytes: a real "disk full" (EFBIG)."""

    def limit_writes():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get an OSError instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return run_cli(*args, env={"PYTHONDONTWRITEBYTECODE": "1"}, preexec_fn=limit_writes, timeout=120)


@pytest.mark.slow
def test_a_full_disk_leaves_no_corrupt_set_and_keeps_the_old_one(tok_dir, inputs, tmp_path):
    out = tmp_path / "out"
    old = prepare([str(inputs)], tok_dir, out, workers=1, show_progress=False)
    big = tmp_path / "big.txt"
    write_synthetic_text(big, num_documents=600)  # ~30k tokens: 60 kB of uint16
    args = ["data", "prepare", "--quiet", "--workers", "1", "--tokenizer", str(tok_dir)]
    tok_size = (tok_dir / "tokenizer.json").stat().st_size
    result = _run_with_file_size_limit(args + ["--out", str(out), "--overwrite", str(big)], tok_size + 1000)
    assert result.returncode == 2, result.stderr
    assert "disk full" in result.stderr and result.stderr.count("\n") == 1
    assert open_corpus(out)[1] == old  # the previous set is untouched
    result = _run_with_file_size_limit(args + ["--out", str(tmp_path / "new"), str(big)], tok_size + 1000)
    assert result.returncode == 2 and not (tmp_path / "new").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp folders left


def test_the_summary_counts_its_workers_in_words():
    from electra.data.prepare import summary

    meta = {
        "num_documents": 2583,
        "num_tokens": 12575469,
        "dtype": "uint16",
        "bytes": 40.7e6,
        "elapsed_s": 8.4,
        "tokens_per_s": 1.49e6,
        "workers": 1,
        "empty_documents": 0,
        "replaced_invalid_utf8": 0,
    }
    assert summary(meta, "c").endswith("(1.49M tokens/s, 1 worker)")
    assert summary({**meta, "workers": 2}, "c").endswith("(1.49M tokens/s, 2 workers)")
    assert summary({**meta, "empty_documents": 1}, "c").endswith("1 worker); 1 empty document skipped")


@pytest.fixture(scope="module")
def english_wordpiece(tmp_path_factory):
    """A WordPiece trained on English only: its alphabet has no CJK character, so CJK text is all [UNK]."""
    folder = tmp_path_factory.mktemp("wp")
    text = folder / "english.txt"
    text.write_text("\n".join(ENGLISH * 20) + "\n")
    return train_tokenizer("wordpiece", 400, [str(text)], folder / "wp", show_progress=False).parent


def test_a_corpus_the_tokenizer_cannot_read_is_refused_unless_forced(english_wordpiece, tmp_path, capsys):
    """200,000 CJK characters under an English WordPiece: every token [UNK]. Refused in one line naming the file,
    nothing kept; --allow-unknown-tokens prepares it with the rate in metadata.json and the summary line."""
    cjk = _write(
        tmp_path / "cjk.txt",
        "\n\n".join("".join(chr(0x4E00 + (i + j) % 20000) for j in range(100)) for i in range(0, 200_000, 100)) + "\n",
    )
    out = tmp_path / "cjk"
    args = ["data", "prepare", str(cjk), "--tokenizer", str(english_wordpiece), "--out", str(out), "--quiet"]
    assert cli_main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(cjk) in err[0] and "100.0% of the tokens are [UNK]" in err[0], err
    assert err[0].endswith("; refusing to prepare it; --allow-unknown-tokens forces it")
    assert not out.exists() and not list(tmp_path.glob(".cjk.tmp-*"))
    assert cli_main([*args, "--allow-unknown-tokens"]) == 0
    meta = json.loads((out / META_FILE).read_text())
    assert meta["unk_rate"] == 1.0 and meta["unk_tokens"] == meta["num_tokens"] == 200_000  # one per character
    assert "[UNK] 100.00% of tokens" in capsys.readouterr().out


def test_english_under_an_english_tokenizer_has_a_low_unknown_rate(english_wordpiece, tmp_path, caplog):
    text = _write(tmp_path / "en.txt", "\n\n".join(ENGLISH + ["Zürich guests ☃ adopted it."]) + "\n")
    meta = prepare([str(text)], english_wordpiece, tmp_path / "en", workers=1, show_progress=False)
    assert meta["unk_tokens"] == 1 and 0 < meta["unk_rate"] < 0.05  # the snowman only
    assert "[UNK]" not in caplog.text  # under the warning threshold


def test_a_wordpiece_larger_than_asked_says_why(tmp_path, capsys):
    text = _write(tmp_path / "cjk.txt", "".join(chr(0x4E00 + i) for i in range(400)) + "\n" + ENGLISH[0] + "\n")
    assert (
        cli_main(
            [
                "tokenizer",
                "train",
                str(text),
                "--kind",
                "wordpiece",
                "--vocab-size",
                "300",
                "--out",
                str(tmp_path / "wp"),
                "--quiet",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    size = len(json.loads((tmp_path / "wp" / "tokenizer.json").read_text())["model"]["vocab"])
    assert size > 400 and f"({size} tokens)" in out  # 400 CJK characters, each a word of its own
    assert f"{size - 300:,} more than --vocab-size 300: WordPiece keeps every character" in out
