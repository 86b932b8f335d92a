"""Reading text files as documents: .txt, .jsonl, and tar archives of .txt files such as OpenWebText.

A document is a list of non-empty, stripped lines. Files are read in pieces, archives as streams (never
extracted), so memory holds one document and one piece of file at a time. Bytes that are not valid UTF-8 are
replaced by U+FFFD and counted, and so are NUL bytes (sources.py refuses an input where they are many); error
locations name the file (inside an archive: ARCHIVE/MEMBER) and the line.

OpenWebText as distributed: `openwebtext.tar.xz` holds `openwebtext/urlsf_subsetNN-M_data.xz` files, each an
xz-compressed tar of .txt files with one document per file (blank lines separate its paragraphs). Any .txt inside
an archive is therefore one document, as OFF's build_openwebtext_pretraining_dataset.py reads it.
"""

from __future__ import annotations

import gzip
import io
import json
import lzma
import os
import tarfile
import zlib
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from electra.utils.errors import InputError

CHUNK_BYTES = 8 << 20  # read text in 8 MiB pieces: bounded memory, few Python calls
DOC_SEPARATORS = ("blank", "file", "line")
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".txz", ".xz")
"""A bare .xz is an xz-compressed tar, as OpenWebText's urlsf_subset*.xz files are."""
_ARCHIVE_ERRORS = (tarfile.TarError, lzma.LZMAError, EOFError, zlib.error, gzip.BadGzipFile)
_REPLACEMENT = "\ufffd"


@dataclass
class ReadStats:
    """Counts gathered while reading, for the metadata, the summary line and the progress bar."""

    documents: int = 0
    empty_documents: int = 0
    lines: int = 0
    bytes: int = 0
    """Text read, in UTF-8 bytes (uncompressed)."""
    input_bytes: int = 0
    """Input consumed, in bytes of the files as they lie on disk (compressed bytes for archives; for tables, the
    file's size times the fraction of rows read): what the progress bar counts."""
    replaced_chars: int = 0
    """Invalid UTF-8 sequences replaced by U+FFFD."""
    first_replacement: str | None = None
    """file:line of the first replacement."""
    nul_bytes: int = 0
    """NUL bytes: valid UTF-8, but text has none (binary files and UTF-16 text do)."""
    files: list[str] = field(default_factory=list)
    txt_files: list[tuple[str, int, int, int]] = field(default_factory=list)
    """(path, bytes, documents, lines) of each .txt input read: did the document separator find its documents?"""


class _CountingReader(io.RawIOBase):
    """A binary file whose reads are added to `stats.input_bytes`."""

    def __init__(self, raw: BinaryIO, stats: ReadStats):
        self.raw, self.stats = raw, stats

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self.raw.readinto(buffer)
        self.stats.input_bytes += n or 0
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


def open_counted(path: str, stats: ReadStats) -> io.BufferedReader:
    """`path` opened for binary reading, its bytes counted in `stats.input_bytes` as they are read."""
    # a small buffer, so that the count follows what a reader of small pieces (tarfile) consumed; large reads
    # (CHUNK_BYTES) go straight through
    return io.BufferedReader(_CountingReader(open(path, "rb", buffering=0), stats), 1 << 16)


def _decode(raw: bytes, name: str, first_line: int, stats: ReadStats) -> str:
    """UTF-8 text of `raw` (which starts at line `first_line` of `name`), invalid bytes replaced and counted, NUL
    bytes counted."""
    stats.nul_bytes += raw.count(b"\0")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        text = raw.decode("utf-8", errors="replace")
        # U+FFFD that were already in the file (as valid UTF-8) are not replacements
        stats.replaced_chars += text.count(_REPLACEMENT) - raw.count(_REPLACEMENT.encode())
        if stats.first_replacement is None:
            line = first_line + raw[: err.start].count(b"\n")
            stats.first_replacement = f"{name}:{line}"
        return text


def _stripped_lines(f: BinaryIO, name: str, stats: ReadStats) -> Iterator[str]:
    """Every line of the stream, stripped ("" for a blank line), read CHUNK_BYTES at a time."""
    line_no = 0  # lines before the current chunk, for error locations
    rest = b""
    while True:
        chunk = f.read(CHUNK_BYTES)
        data = rest + chunk
        cut = len(data) if not chunk else data.rfind(b"\n") + 1  # never split a line (or a UTF-8 char)
        if cut == 0 and chunk:
            rest = data
            continue
        data, rest = data[:cut], data[cut:]
        stats.bytes += len(data)
        text = _decode(data, name, line_no + 1, stats)
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        line_no += len(lines)
        yield from map(str.strip, lines)
        if not chunk:
            return


def text_documents(f: BinaryIO, name: str, separator: str, stats: ReadStats) -> Iterator[list[str]]:
    """The documents of a text stream; `separator` says where one ends (see DOC_SEPARATORS).

    blank: at a blank line (and at the end of the stream); file: only at the end, blank lines merely separate
    paragraphs; line: every non-empty line is a document of its own.
    """
    if separator not in DOC_SEPARATORS:
        raise InputError(f"unknown document separator {separator!r}: expected one of {', '.join(DOC_SEPARATORS)}")
    doc: list[str] = []
    for line in _stripped_lines(f, name, stats):
        if line:
            doc.append(line)
            if separator == "line":
                yield doc
                doc = []
        elif separator == "blank" and doc:
            yield doc
            doc = []
    if doc:
        yield doc


def txt_documents(path: str, separator: str, stats: ReadStats) -> Iterator[list[str]]:
    with open_counted(path, stats) as f:
        yield from text_documents(f, path, separator, stats)


def split_lines(text: str) -> list[str]:
    """A row's text as a document: its non-empty lines, stripped."""
    return [s for s in (line.strip() for line in text.split("\n")) if s]


def jsonl_documents(path: str, field_name: str, stats: ReadStats) -> Iterator[list[str]]:
    """One document per JSON object, its text in `field_name`."""
    with open_counted(path, stats) as f:
        for line_no, raw in enumerate(f, start=1):
            stats.bytes += len(raw)
            if not raw.strip():
                continue
            text = _decode(raw, path, line_no, stats)
            try:
                obj = json.loads(text)
            except (ValueError, RecursionError) as err:  # JSONDecodeError, a 5000-digit number, deep nesting
                raise InputError(f"{path}:{line_no}: not valid JSON ({getattr(err, 'msg', err)})") from None
            if not isinstance(obj, dict) or not isinstance(obj.get(field_name), str):
                raise InputError(f"{path}:{line_no}: expected an object with a string '{field_name}' field")
            yield split_lines(obj[field_name])


def is_archive(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def archive_documents(path: str, stats: ReadStats) -> Iterator[list[str]]:
    """Every .txt member of a (possibly nested) tar archive as one document, in archive order."""
    start = stats.input_bytes
    with open_counted(path, stats) as f:  # counts compressed bytes: the progress bar stays in step with the file
        found = yield from _tar_documents(f, path, stats)
        stats.input_bytes = start + os.path.getsize(path)  # the end-of-archive padding is never read
    if not found:
        raise InputError(f"{path}: archive holds no .txt files (nor archives of them)")


def _tar_documents(f: BinaryIO, name: str, stats: ReadStats) -> Generator[list[str], None, int]:
    """Stream the tar in `f` ("r|*": any compression, read once front to back); returns the .txt files found."""
    found = 0
    try:
        with tarfile.open(fileobj=f, mode="r|*") as tar:
            for member in tar:
                tar.members = []  # a stream never seeks back: forget members read, memory stays bounded
                member_name = f"{name}/{member.name}"
                if not member.isfile():
                    continue
                if member.name.endswith(".txt"):
                    found += 1
                    yield from text_documents(tar.extractfile(member), member_name, "file", stats)
                elif is_archive(member.name):
                    found += yield from _tar_documents(tar.extractfile(member), member_name, stats)
    except _ARCHIVE_ERRORS as err:
        raise InputError(f"{name}: not a readable tar archive, or damaged ({type(err).__name__}: {err})") from None
    return found
