"""Raw text inputs for tokenizer training and corpus preparation, read as documents (lists of non-empty lines).

What `electra tokenizer train` and `electra data prepare` accept (`resolve_inputs`):
- .txt files: `ReadOptions.doc_separator` says where a document ends: at a blank line (the default), at the end
  of the file (OpenWebText's one document per file, blank lines between paragraphs), or at every line;
- .jsonl files: one JSON object per line, its text in the `text` field (`ReadOptions.text_column`);
- tar archives, read as streams: OpenWebText as downloaded (`openwebtext.tar.xz`, or its `urlsf_subset*.xz`
  files), .tar, .tar.gz, .tar.xz; each .txt member is one document, nested archives are read in place;
- .parquet and .arrow files, and folders written by `datasets`' save_to_disk: one row is one document;
- folders of any of these files (recursive, sorted by path);
- anything else that is not a path: a Hugging Face hub dataset NAME or NAME:CONFIG, from the local datasets
  cache when offline.
Lines are kept as the "sentences" of OFF's static builder. An input that is not UTF-8 text (a binary file, text
in another encoding) is refused unless allowed (check_binary). The readers: sources_text.py (text files, archives)
and sources_datasets.py (tables, `datasets` folders, the hub).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from electra.data.sources_datasets import (
    arrow_documents,
    hub_documents,
    hub_revision_and_size,
    is_saved_dataset,
    parquet_documents,
    saved_dataset_arrow_files,
    saved_dataset_documents,
)
from electra.data.sources_text import (
    DOC_SEPARATORS,
    ReadStats,
    archive_documents,
    is_archive,
    jsonl_documents,
    txt_documents,
)
from electra.utils.errors import InputError, RefusedError
from electra.utils.wording import plural

FILE_KINDS = {".txt": "txt", ".jsonl": "jsonl", ".parquet": "parquet", ".arrow": "arrow"}
ROW_KINDS = {"jsonl", "parquet", "arrow", "saved", "hf"}
"""Inputs whose rows carry the text in a named field or column."""
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?(:[\w.-]+)?$")


@dataclass(frozen=True)
class ReadOptions:
    """How inputs are read into documents; part of a prepared folder's source fingerprint."""

    doc_separator: str = "blank"
    """.txt files: "blank" (a blank line ends a document), "file" (each file is one document, blank lines separate
    its paragraphs, as OpenWebText's files) or "line" (every non-empty line is a document)."""
    text_column: str = "text"
    """The text field of .jsonl objects, the text column of Parquet/Arrow files and `datasets` data."""
    split: str = "train"
    """The split read from a DatasetDict folder or a hub dataset."""

    def __post_init__(self):
        if self.doc_separator not in DOC_SEPARATORS:
            raise InputError(
                f"unknown document separator {self.doc_separator!r}: expected one of {', '.join(DOC_SEPARATORS)}"
            )
        if not self.text_column or not self.split:
            raise InputError("the text column and the split must be non-empty names")


@dataclass(frozen=True)
class Input:
    kind: str  # "txt", "jsonl", "archive", "parquet", "arrow", "saved" (a save_to_disk folder) or "hf"
    name: str  # a path, or NAME[:CONFIG] of a hub dataset
    size: int | None  # bytes on disk, for the progress bar; None when unknown
    revision: str | None = None  # hub datasets: the commit (or cached copy) the name resolved to

    @property
    def label(self) -> str:
        return self.name if self.revision is None else f"{self.name}@{self.revision}"


def _file_kind(path: Path) -> str | None:
    return "archive" if is_archive(path.name) else FILE_KINDS.get(path.suffix)


def _file_input(path: Path) -> Input:
    kind = _file_kind(path)
    if kind is None:
        raise InputError(
            f"{path}: unsupported input type {path.suffix!r} (expected .txt, .jsonl, .parquet, .arrow or a tar archive)"
        )
    size = path.stat().st_size
    if size == 0:
        raise InputError(f"{path}: empty input file")
    return Input(kind, str(path), size)


def _folder_inputs(folder: Path, options: ReadOptions) -> list[Input]:
    if is_saved_dataset(folder):
        size = sum(p.stat().st_size for p in saved_dataset_arrow_files(folder, options.split))
        return [Input("saved", str(folder), size)]
    files = sorted(p for p in folder.rglob("*") if _file_kind(p) and p.is_file())
    if not files:
        raise FileNotFoundError(f"{folder}: folder holds no .txt, .jsonl, .parquet, .arrow or archive files")
    return [Input(_file_kind(p), str(p), p.stat().st_size) for p in files]


def resolve_inputs(specs: list[str], options: ReadOptions = ReadOptions()) -> list[Input]:
    """Classify each input and expand folders; fail clearly on missing or empty input or an unknown dataset."""
    if not specs:
        raise InputError("no input given: pass text, archive, Parquet or Arrow files, folders, or a dataset name")
    inputs: list[Input] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            inputs += _folder_inputs(path, options)
        elif path.is_file():
            inputs.append(_file_input(path))
        elif _file_kind(path) or spec.startswith((".", "/", "~")) or not _HUB_NAME.match(spec):
            raise FileNotFoundError(f"{path}: no such file or folder")
        else:
            revision, size = hub_revision_and_size(spec, options.split)
            inputs.append(Input("hf", spec, size, revision))
    return inputs


def total_size(inputs: list[Input]) -> int | None:
    """Bytes the progress bar will count (see ReadStats.input_bytes); None when an input's size is unknown."""
    sizes = [i.size for i in inputs]
    return None if None in sizes else sum(sizes) or None


def _options_used(inputs: list[Input], options: ReadOptions) -> dict:
    """The read options that change what `inputs` give, where they differ from the defaults."""
    kinds, default, used = {i.kind for i in inputs}, ReadOptions(), {}
    if "txt" in kinds and options.doc_separator != default.doc_separator:
        used["doc_separator"] = options.doc_separator
    if kinds & ROW_KINDS and options.text_column != default.text_column:
        used["text_column"] = options.text_column
    if kinds & {"saved", "hf"} and options.split != default.split:
        used["split"] = options.split
    return used


def source_fingerprint(inputs: list[Input], options: ReadOptions = ReadOptions()) -> str:
    """sha256 over what identifies the inputs and the read options that apply to them.

    A file: its resolved path, size and modification time; a `datasets` folder: those of every file in it; a hub
    dataset: its name and revision. .txt/.jsonl inputs read with the default options hash as they always have,
    so folders prepared before the other kinds and options existed stay valid.
    """
    parts: list = []
    for inp in inputs:
        path = Path(inp.name)
        if inp.kind == "hf":
            parts.append(["hf", inp.name, inp.revision])
        elif inp.kind == "saved":
            files = sorted(p for p in path.rglob("*") if p.is_file())
            stamps = [[str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns] for p in files]
            parts.append(["saved", str(path.resolve()), stamps])
        else:
            st = path.stat()
            entry = [str(path.resolve()), st.st_size, st.st_mtime_ns]
            parts.append(entry if inp.kind in ("txt", "jsonl") else [inp.kind, *entry])
    used = _options_used(inputs, options)
    return hashlib.sha256(json.dumps([parts, used] if used else parts).encode()).hexdigest()


def _documents_of(inp: Input, options: ReadOptions, stats: ReadStats) -> Iterator[list[str]]:
    column, split = options.text_column, options.split
    if inp.kind == "txt":
        return txt_documents(inp.name, options.doc_separator, stats)
    if inp.kind == "jsonl":
        return jsonl_documents(inp.name, column, stats)
    if inp.kind == "archive":
        return archive_documents(inp.name, stats)
    if inp.kind == "parquet":
        return parquet_documents(inp.name, column, stats)
    if inp.kind == "arrow":
        return arrow_documents(inp.name, column, stats)
    if inp.kind == "saved":
        return saved_dataset_documents(inp.name, column, split, inp.size, stats)
    return hub_documents(inp.name, column, split, inp.size, stats)


BINARY_RATE = 0.01
"""An input whose bytes are more than this share invalid UTF-8 sequences and NUL bytes is refused (unless
allow_binary): it is a binary file, or text in another encoding. Measured: English text (a 41 MB Wikipedia sample,
GLUE's TSVs) 0; that Wikipedia text re-encoded as Latin-1 0.05% (its accented letters); random bytes and gzip data
42%; executables (ls, bash, python3) 51-55%; UTF-16 text 50% (its NULs)."""
BINARY_MIN_COUNT = 100
"""...and at least this many: a few stray bytes in a short file are noise, not a binary file."""
BINARY_JUDGED_FROM = 1 << 20
"""An input is judged once this much of it has been read, before the document that follows goes on (a .txt file
is read in 8 MiB pieces: before any of its first piece), and again at its end."""


def check_binary(name: str, size: int, invalid: int, nul: int) -> None:
    """Refuse (RefusedError) input `name` if, of its `size` bytes read, `invalid` UTF-8 sequences and `nul` NUL
    bytes are more than BINARY_RATE (and at least BINARY_MIN_COUNT)."""
    bad = invalid + nul
    if bad < BINARY_MIN_COUNT or bad <= BINARY_RATE * size:
        return
    raise RefusedError(
        f"{name}: not UTF-8 text: {bad / size:.1%} of the {size:,} bytes read are invalid UTF-8 "
        f"({plural(invalid, 'sequence')}) or NUL ({nul:,}), over {BINARY_RATE:.0%}: a binary file, or text in "
        "another encoding (convert it to UTF-8)",
        "allow_binary",
        "reads it anyway (invalid sequences become U+FFFD)",
    )


DOCUMENT_BYTES_WARN = 1_000_000
"""A .txt file whose documents average more than this many bytes of text gets a warning: the document separator
probably misses where its documents end (a 16 MB book of one paragraph per line, read with `blank`, gave 6
documents). The 2,583 articles of a 41 MB English Wikipedia sample average 16 kB, the longest 152 kB."""


def long_document_warnings(stats: ReadStats, separator: str) -> list[str]:
    """A line for each .txt file read whose documents average more than DOCUMENT_BYTES_WARN bytes, naming the
    separator's choices; none under `line`, which has no finer split to offer."""
    if separator == "line":
        return []
    return [
        f"{path}: {plural(documents, 'document')} ({plural(lines, 'line')}) from {size / 1e6:.1f} MB of text, "
        f"{size / documents / 1e6:.1f} MB per document on average (over {DOCUMENT_BYTES_WARN / 1e6:g} MB): does "
        f"--doc-separator {separator} miss where its documents end? The choices: {', '.join(DOC_SEPARATORS)}"
        for path, size, documents, lines in stats.txt_files
        if size > DOCUMENT_BYTES_WARN * documents
    ]


def read_documents(
    inputs: list[Input],
    options: ReadOptions = ReadOptions(),
    stats: ReadStats | None = None,
    allow_binary: bool = False,
) -> Iterator[list[str]]:
    """Every non-empty document of the inputs, in order; empty ones are counted in `stats`, not yielded. An input
    that is not UTF-8 text is refused (check_binary), unless `allow_binary`."""
    stats = stats if stats is not None else ReadStats()
    for inp in inputs:
        stats.files.append(inp.label)
        before = replace(stats)  # the counts so far: this input's own are the differences
        for doc in _documents_of(inp, options, stats):
            if not allow_binary and stats.bytes - before.bytes >= BINARY_JUDGED_FROM:
                _check_binary_since(inp.name, stats, before)
            if doc:
                stats.documents += 1
                stats.lines += len(doc)
                yield doc
            else:
                stats.empty_documents += 1
        if not allow_binary:
            _check_binary_since(inp.name, stats, before)
        if stats.documents == before.documents:
            raise InputError(f"{inp.name}: no text in this input (only blank lines or empty documents)")
        if inp.kind == "txt":
            documents, lines = stats.documents - before.documents, stats.lines - before.lines
            stats.txt_files.append((inp.name, stats.bytes - before.bytes, documents, lines))


def _check_binary_since(name: str, stats: ReadStats, before: ReadStats) -> None:
    invalid, nul = stats.replaced_chars - before.replaced_chars, stats.nul_bytes - before.nul_bytes
    check_binary(name, stats.bytes - before.bytes, invalid, nul)
