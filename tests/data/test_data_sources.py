"""Every corpus route gives the tokens of the plain .txt route: OpenWebText as downloaded (nested tar.xz), `datasets`
folders, Parquet and Arrow files, a hub dataset from the offline cache; all built here from real Wikipedia text.
What both commands refuse to read (files that are not UTF-8 text), and what `data prepare` warns of (a .txt file
the document separator cut into few, long documents)."""

from __future__ import annotations

import io
import re
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from electra.data.corpus import open_corpus
from electra.data.prepare import prepare
from electra.data.sources import (
    DOC_SEPARATORS,
    ReadOptions,
    ReadStats,
    long_document_warnings,
    read_documents,
    resolve_inputs,
)
from electra.data.tokenizer import train_tokenizer
from electra.utils.errors import RefusedError
from tests.helpers import cli_main, run_cli, write_synthetic_text

SLICE_BYTES = 250_000  # ~10 documents, ~150k tokens: each preparation well under a second
PREPARED_FILES = ("tokens.bin", "documents.npy", "lines.npy")


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    """A small byte-level BPE: it need not have seen Wikipedia to encode it exactly the same way twice."""
    folder = tmp_path_factory.mktemp("tok")
    write_synthetic_text(folder / "train.txt", num_documents=30)
    return train_tokenizer("bpe", 400, [str(folder / "train.txt")], folder / "bpe", show_progress=False).parent


@pytest.fixture
def wiki_docs(shared_data) -> list[list[str]]:
    """The first documents of the Wikipedia sample, each a list of paragraphs."""
    with open(shared_data / "corpus" / "wikipedia_en_sample.txt", encoding="utf-8") as f:
        text = f.read(SLICE_BYTES)
    docs = [[line for line in doc.split("\n") if line.strip()] for doc in text.split("\n\n")[:-1]]  # last: cut
    assert len(docs) >= 6
    return docs


def _txt(path: Path, docs: list[list[str]]) -> Path:
    """The reference route: one .txt file, a blank line between documents."""
    path.write_text("\n\n".join("\n".join(doc) for doc in docs) + "\n", encoding="utf-8")
    return path


def _prepared(tok_dir: Path, inputs: list, out: Path, **kwargs) -> dict[str, bytes]:
    prepare([str(i) for i in inputs], tok_dir, out, workers=1, show_progress=False, **kwargs)
    return {name: (out / name).read_bytes() for name in PREPARED_FILES}


def _tar(members: list[tuple[str, bytes]], mode: str = "w:xz") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, **({"preset": 1} if mode == "w:xz" else {})) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _openwebtext(folder: Path, docs: list[list[str]], num_subsets: int = 3) -> Path:
    """OpenWebText's layout: openwebtext.tar.xz > openwebtext/urlsf_subset00-M_data.xz, each an xz tar of .txt
    files, one document per file with a blank line between paragraphs. Returns the outer archive; the subset files
    are also left unpacked in folder/openwebtext, as after `tar xf openwebtext.tar.xz`."""
    (folder / "openwebtext").mkdir(parents=True)
    bounds = np.linspace(0, len(docs), num_subsets + 1).astype(int)
    subsets = []
    for m in range(num_subsets):
        files = [
            (f"{m:02d}{i:05d}-{len(doc)}.txt", ("\n\n".join(doc) + "\n").encode())
            for i, doc in enumerate(docs[bounds[m] : bounds[m + 1]])
        ]
        name = f"openwebtext/urlsf_subset00-{m + 1}_data.xz"
        subsets.append((name, _tar(files)))
        (folder / name).write_bytes(subsets[-1][1])
    outer = folder / "openwebtext.tar.xz"
    outer.write_bytes(_tar([("openwebtext/README", b"not text"), *subsets]))
    return outer


def test_openwebtext_as_downloaded_gives_the_tokens_of_the_txt_route(tok_dir, wiki_docs, tmp_path):
    reference = _prepared(tok_dir, [_txt(tmp_path / "wiki.txt", wiki_docs)], tmp_path / "ref")
    outer = _openwebtext(tmp_path / "owt", wiki_docs)
    per_doc = tmp_path / "per_doc"  # the same documents as a folder of .txt files, one per document
    per_doc.mkdir()
    for i, doc in enumerate(wiki_docs):
        (per_doc / f"{i:04d}.txt").write_text("\n\n".join(doc) + "\n", encoding="utf-8")
    file_docs = ReadOptions(doc_separator="file")
    assert _prepared(tok_dir, [per_doc], tmp_path / "per_doc_out", read_options=file_docs) == reference
    assert _prepared(tok_dir, [outer], tmp_path / "outer_out") == reference
    assert _prepared(tok_dir, [outer.parent / "openwebtext"], tmp_path / "subsets_out") == reference
    # one subset alone: its documents' slice of the reference
    subset = outer.parent / "openwebtext" / "urlsf_subset00-2_data.xz"
    prepare([str(subset)], tok_dir, tmp_path / "one", workers=1, show_progress=False)
    (one, meta), (ref, _) = open_corpus(tmp_path / "one"), open_corpus(tmp_path / "ref")
    first, last = np.linspace(0, len(wiki_docs), 4).astype(int)[1:3]
    assert meta["num_documents"] == last - first
    assert np.array_equal(one.doc_offsets, ref.doc_offsets[first : last + 1] - ref.doc_offsets[first])
    assert np.array_equal(one.tokens, ref.tokens[ref.doc_offsets[first] : ref.doc_offsets[last]])


def test_an_archive_is_streamed_in_archive_order_and_never_unpacked(tmp_path):
    rng = np.random.default_rng(0)  # random hex words: 540 kB of text that xz cannot shrink below half
    docs = [[" ".join(f"{w:08x}" for w in rng.integers(0, 1 << 32, 120)) for _ in range(5)] for _ in range(100)]
    outer = _openwebtext(tmp_path / "owt", docs, num_subsets=2)
    before = sorted(tmp_path.rglob("*"))
    stats = ReadStats()
    documents = read_documents(resolve_inputs([str(outer)]), stats=stats)
    assert next(documents) == docs[0]
    assert 0 < stats.input_bytes < outer.stat().st_size / 2  # the first document came before most of the file
    assert [docs[0], *documents] == docs
    assert stats.input_bytes == outer.stat().st_size  # the progress bar ends at the file size
    assert sorted(tmp_path.rglob("*")) == before  # nothing extracted


def _dataset(docs: list[list[str]]):
    import datasets

    texts = ["\n".join(doc) for doc in docs]  # one row per document, a line per paragraph
    return datasets.Dataset.from_dict({"id": list(range(len(docs))), "text": texts})


def test_datasets_folders_parquet_and_arrow_give_the_tokens_of_the_txt_route(tok_dir, wiki_docs, tmp_path):
    import datasets

    reference = _prepared(tok_dir, [_txt(tmp_path / "wiki.txt", wiki_docs)], tmp_path / "ref")
    ds = _dataset(wiki_docs)
    ds.save_to_disk(str(tmp_path / "saved"))
    datasets.DatasetDict({"train": ds, "validation": ds.select([0])}).save_to_disk(str(tmp_path / "saved_dict"))
    ds.to_parquet(str(tmp_path / "wiki.parquet"))
    (arrow,) = (tmp_path / "saved").glob("*.arrow")  # the Arrow stream file `datasets` writes
    for name, route in [("saved", tmp_path / "saved"), ("dict", tmp_path / "saved_dict"), ("arrow", arrow)]:
        assert _prepared(tok_dir, [route], tmp_path / f"{name}_out") == reference, name
    # the interface other tools rely on: a Parquet file with a `text` column, one document a row
    out = tmp_path / "parquet_out"
    args = ["data", "prepare", "--quiet", "--workers", "1", "--tokenizer", str(tok_dir), "--out", str(out)]
    assert cli_main([*args, str(tmp_path / "wiki.parquet")]) == 0
    assert {name: (out / name).read_bytes() for name in PREPARED_FILES} == reference


@pytest.mark.slow
def test_a_hub_dataset_in_the_offline_cache_gives_the_tokens_of_the_txt_route(
    tok_dir, wiki_docs, tmp_path, monkeypatch
):
    import datasets

    reference = _prepared(tok_dir, [_txt(tmp_path / "wiki.txt", wiki_docs)], tmp_path / "ref")
    # A cache entry as `load_dataset` leaves it: DATASETS_CACHE/wiki_sample/default/0.0.0/HASH/*.arrow + info,
    # made here by loading a local folder of that name once (a hub download makes the same layout)
    source = tmp_path / "src" / "wiki_sample"
    source.mkdir(parents=True)
    _dataset(wiki_docs).to_parquet(str(source / "train.parquet"))
    cache = tmp_path / "hf" / "datasets"
    datasets.load_dataset(str(source), cache_dir=str(cache))
    (entry,) = cache.glob("wiki_sample/default/*/*/")
    for var in ("HF_DATASETS_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    out = tmp_path / "hub_out"
    args = ["data", "prepare", "--quiet", "--workers", "1", "--tokenizer", str(tok_dir), "--out", str(out)]
    result = run_cli(*args, "wiki_sample", timeout=120)  # the monkeypatched environment
    assert result.returncode == 0, result.stderr
    assert {name: (out / name).read_bytes() for name in PREPARED_FILES} == reference
    assert open_corpus(out)[1]["sources"] == [f"wiki_sample@{entry.name}"]  # the cached revision
    # neither cached nor reachable: one line naming it
    result = run_cli(*args[:-1], str(tmp_path / "none"), "someone/not_cached", timeout=120)
    err = result.stderr.strip()
    assert result.returncode == 2 and "\n" not in err, err
    assert "someone/not_cached: not a file or folder, nor a dataset in the local Hugging Face cache" in err


def test_text_column_split_and_missing_values(tmp_path):
    import datasets

    train = datasets.Dataset.from_dict({"body": ["a b\n\nc", None, "", "d"], "n": [1, 2, 3, 4]})
    dev = datasets.Dataset.from_dict({"body": ["x y"], "n": [5]})
    datasets.DatasetDict({"train": train, "validation": dev}).save_to_disk(str(tmp_path / "dict"))
    train.to_parquet(str(tmp_path / "train.parquet"), batch_size=2)  # two row groups

    def read(path, **options):
        stats = ReadStats()
        inputs = resolve_inputs([str(path)], ReadOptions(**options))
        return list(read_documents(inputs, ReadOptions(**options), stats)), stats

    for path in (tmp_path / "dict", tmp_path / "train.parquet"):
        docs, stats = read(path, text_column="body")
        assert docs == [["a b", "c"], ["d"]] and stats.empty_documents == 2  # a null is an empty document
        size = (
            sum(p.stat().st_size for p in (tmp_path / "dict" / "train").glob("*.arrow"))
            if path.is_dir()
            else path.stat().st_size
        )
        assert stats.input_bytes == size  # the progress bar ends at the input's size
        column = r"no column 'text' \(columns: body, n\); choose one with `read_options.text_column`"
        with pytest.raises(ValueError, match=column):
            read(path)
        with pytest.raises(ValueError, match="column 'n' holds int64, not strings"):
            read(path, text_column="n")
    assert read(tmp_path / "dict", text_column="body", split="validation")[0] == [["x y"]]
    split = r"no split 'test' \(splits: train, validation\); choose one with `read_options.split`"
    with pytest.raises(ValueError, match=split):
        read(tmp_path / "dict", text_column="body", split="test")


def test_the_text_column_and_split_are_part_of_the_source_key(tok_dir, tmp_path):
    import datasets

    rows = {"body": ["One document.\nTwo lines.", "Another document."], "text": ["Other words.", "Here."]}
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict(rows), "validation": datasets.Dataset.from_dict(rows)}
    ).save_to_disk(str(tmp_path / "dict"))
    out, inputs = tmp_path / "out", [str(tmp_path / "dict")]
    first = prepare(inputs, tok_dir, out, workers=1, show_progress=False, read_options=ReadOptions(text_column="body"))
    assert first["read_options"] == {"doc_separator": "blank", "text_column": "body", "split": "train"}
    assert (first["num_documents"], first["num_lines"]) == (2, 3)
    for other in (ReadOptions(), ReadOptions(text_column="body", split="validation")):
        with pytest.raises(ValueError, match="other inputs"):
            prepare(inputs, tok_dir, out, workers=1, show_progress=False, read_options=other)
    again = prepare(inputs, tok_dir, out, workers=1, show_progress=False, read_options=ReadOptions(text_column="body"))
    assert again == first


# -- files that are not UTF-8 text ------------------------------------------------------------------------------


def _not_text(kind: str) -> bytes:
    """Bytes that a .txt name does not make text."""
    if kind == "random":
        return np.random.default_rng(0).bytes(100_000)
    if kind == "executable":  # the interpreter running the tests, renamed
        return Path(sys.executable).resolve().read_bytes()
    return ("The quick brown fox jumps over the lazy dog.\n" * 2000).encode("utf-16")  # English, in UTF-16


def _bad_rate(data: bytes) -> float:
    """Invalid UTF-8 sequences and NUL bytes per byte, counted here as the reader should."""
    return (data.decode("utf-8", errors="replace").count("\ufffd") + data.count(b"\0")) / len(data)


def _refusal(err: str, path: Path, data: bytes) -> None:
    """One line naming the file, its rate and the flag that reads it anyway."""
    assert "\n" not in err and err.startswith("electra "), err
    rate = re.search(rf"{re.escape(str(path))}: not UTF-8 text: (\d+\.\d)% of the [\d,]+ bytes read", err)
    assert rate, err
    # the executable is judged on its first piece of lines, up to its last newline
    assert abs(float(rate[1]) - 100 * _bad_rate(data)) < 1.0, (rate[1], _bad_rate(data))
    assert "--allow-binary reads it anyway" in err and "allow_binary=True" not in err


@pytest.mark.parametrize("kind", ["random", "executable", "utf16"])
def test_a_file_that_is_not_utf8_text_is_refused_by_both_commands_keeping_what_was_there(
    tok_dir, tmp_path, capsys, kind
):
    data = _not_text(kind)
    assert _bad_rate(data) > 0.2  # random 42%, an executable ~50% (NULs and invalid UTF-8), UTF-16 50% (NULs)
    bad = tmp_path / f"{kind}.txt"
    bad.write_bytes(data)
    tok_out = tmp_path / "tok"
    assert cli_main(["tokenizer", "train", "--vocab-size", "300", "--quiet", "--out", str(tok_out), str(bad)]) == 2
    _refusal(capsys.readouterr().err.strip(), bad, data)
    assert not tok_out.exists()

    # a prepared folder stays as it was when a run meant to replace it is refused
    out, good = tmp_path / "out", _txt(tmp_path / "good.txt", [["A document of text.", "Its second line."], ["Two."]])
    args = ["data", "prepare", "--quiet", "--workers", "1", "--tokenizer", str(tok_dir), "--out", str(out)]
    assert cli_main([*args, str(good)]) == 0
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert cli_main([*args, "--overwrite", str(good), str(bad)]) == 2
    _refusal(capsys.readouterr().err.strip(), bad, data)
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([bad.name, "good.txt", "out"])  # no temp folders


def test_the_python_api_names_its_argument_and_reads_binary_when_allowed(tok_dir, tmp_path):
    bad = tmp_path / "random.txt"
    bad.write_bytes(data := _not_text("random")[:20_000])
    for call in (
        lambda: train_tokenizer("bpe", 300, [str(bad)], tmp_path / "tok", show_progress=False),
        lambda: prepare([str(bad)], tok_dir, tmp_path / "out", workers=1, show_progress=False),
    ):
        with pytest.raises(RefusedError) as refused:
            call()
        assert f"{bad}: not UTF-8 text: {_bad_rate(data):.1%}" in str(refused.value)
        assert "; `allow_binary=True` reads it anyway" in str(refused.value) and "--allow" not in str(refused.value)
    lines = ReadOptions(doc_separator="line")  # documents enough to split (a blank line is rare in random bytes)
    meta = prepare([str(bad)], tok_dir, tmp_path / "out", 1, show_progress=False, read_options=lines, allow_binary=True)
    assert meta["replaced_invalid_utf8"] == data.decode("utf-8", errors="replace").count("\ufffd")


def _read(path: Path) -> ReadStats:
    stats = ReadStats()
    for _ in read_documents(resolve_inputs([str(path)]), stats=stats):
        pass
    return stats


def test_text_passes_and_more_than_one_percent_bad_bytes_is_refused(wiki_docs, tmp_path):
    wiki = _read(_txt(tmp_path / "wiki.txt", wiki_docs))
    assert (wiki.replaced_chars, wiki.nul_bytes) == (0, 0)  # real English: not one bad byte
    # English with the odd stray byte, 100,000 bytes: 1,000 of them (1.0%) pass, 1,001 are refused
    line = b"a line of plain English text, just long enough to be a hundred bytes with its newline at the end...\n"
    assert len(line) == 100
    for stray, refused in ((1000, False), (1001, True)):
        data = bytearray(line * 1000)
        for at in [*range(0, len(data), len(line)), 50][:stray]:  # the first byte of every line, then one more
            data[at] = 0xFF
        path = tmp_path / f"stray{stray}.txt"
        path.write_bytes(data)
        if refused:
            with pytest.raises(RefusedError, match=re.escape(f"{path}: not UTF-8 text: 1.0% of the 100,000 bytes")):
                _read(path)
        else:
            assert _read(path).replaced_chars == stray
    # a large file is judged before its first document goes on to the tokenizer
    big = tmp_path / "big.txt"
    big.write_bytes(np.random.default_rng(1).bytes(2 << 20))
    with pytest.raises(RefusedError, match=r"big.txt: not UTF-8 text: 4\d\.\d% of the"):
        next(read_documents(resolve_inputs([str(big)])))
    # a short file is judged on at least 100 bad bytes: 99 NULs in 1,000 bytes are noise, 100 are not
    for nul, refused in ((99, False), (100, True)):
        path = tmp_path / f"nul{nul}.txt"
        path.write_bytes(b"\0" * nul + b"x" * (900 - nul) + b"\n" * 100)
        if refused:
            with pytest.raises(RefusedError, match=r"NUL \(100\), over 1%"):
                _read(path)
        else:
            assert _read(path).nul_bytes == 99


# -- few, long documents ------------------------------------------------------------------------------------------


def test_a_txt_file_cut_into_few_long_documents_gets_a_warning_naming_the_separators(
    tok_dir, wiki_docs, tmp_path, capsys, caplog
):
    """Two books of one paragraph per line and no blank line, a blank line between them: two 1.2 MB documents
    under the default separator. (One book alone is refused: one document cannot be split into training and
    held-out documents, tests/data/test_corpus_too_small.py.)"""
    book = tmp_path / "book.txt"
    one = "".join(f"Paragraph {i} of the book, one line long, as some books are kept.\n" for i in range(18_000))
    book.write_text(one + "\n" + one)
    assert 2.2e6 < book.stat().st_size < 2.6e6
    args = ["data", "prepare", "--quiet", "--workers", "1", "--tokenizer", str(tok_dir), "--out", str(tmp_path / "o")]
    assert cli_main([*args, str(book)]) == 0
    assert "o: 2 documents," in capsys.readouterr().out
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning.startswith(f"{book}: 2 documents (36,000 lines) from 2.4 MB of text, 1.2 MB per document")
    assert "(over 1 MB): does --doc-separator blank miss where its documents end?" in warning
    # the choices named are the ones the command offers
    with pytest.raises(SystemExit):
        cli_main(["data", "prepare", "--help"])
    assert "{" + ",".join(DOC_SEPARATORS) + "}" in capsys.readouterr().out
    assert warning.endswith(f"The choices: {', '.join(DOC_SEPARATORS)}")

    def warnings(path: Path, separator: str) -> list[str]:
        stats = ReadStats()
        options = ReadOptions(doc_separator=separator)
        for _ in read_documents(resolve_inputs([str(path)], options), options, stats):
            pass
        return long_document_warnings(stats, separator)

    assert len(warnings(book, "file")) == 1
    assert warnings(book, "line") == []  # 36,000 documents; and no finer split to offer
    assert warnings(_txt(tmp_path / "wiki.txt", wiki_docs), "blank") == []  # articles of 16 kB on average
