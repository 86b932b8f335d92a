"""Raw text inputs for tokenizer training and corpus preparation: .txt files, .jsonl files, folders of them, or
a Hugging Face hub dataset. Everything is read as documents, each a list of non-empty lines.

- .txt: a blank line separates documents; each file starts a new document (so a file without blank lines is one
  document). Lines are kept as the "sentences" of OFF's static builder.
- .jsonl: one JSON object per line with a string `text` field; one object is one document.
- anything else that is not a path: `datasets.load_dataset(NAME, [CONFIG,] split="train", streaming=True)`,
  written NAME or NAME:CONFIG (e.g. `openwebtext`, `wikipedia:20220301.en`), using the `text` column.

Bytes that are not valid UTF-8 are replaced by U+FFFD and counted, never fatal. Errors name the file and line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

TEXT_SUFFIXES = (".txt", ".jsonl")
CHUNK_BYTES = 8 << 20  # read .txt files in 8 MiB pieces: bounded memory, few Python calls
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?(:[\w.-]+)?$")
_REPLACEMENT = "\ufffd"


@dataclass
class ReadStats:
    """Counts gathered while reading, for the metadata and the summary line."""

    documents: int = 0
    empty_documents: int = 0
    lines: int = 0
    bytes: int = 0
    replaced_chars: int = 0
    """Invalid UTF-8 sequences replaced by U+FFFD."""
    first_replacement: str | None = None
    """file:line of the first replacement."""
    files: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Input:
    kind: str  # "txt", "jsonl" or "hf"
    name: str  # a path, or NAME[:CONFIG] of a hub dataset


def resolve_inputs(specs: list[str]) -> list[Input]:
    """Expand folders (recursively, sorted) into their .txt/.jsonl files; fail clearly on missing or empty input."""
    if not specs:
        raise ValueError("no input given: pass .txt/.jsonl files, folders of them, or a dataset name")
    inputs: list[Input] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.suffix in TEXT_SUFFIXES and p.is_file())
            if not files:
                raise FileNotFoundError(f"{path}: folder holds no .txt or .jsonl files")
            inputs += [Input(p.suffix[1:], str(p)) for p in files]
        elif path.is_file():
            if path.suffix not in TEXT_SUFFIXES:
                raise ValueError(f"{path}: unsupported input type {path.suffix!r} (expected .txt or .jsonl)")
            if path.stat().st_size == 0:
                raise ValueError(f"{path}: empty input file")
            inputs.append(Input(path.suffix[1:], str(path)))
        elif path.suffix in TEXT_SUFFIXES or spec.startswith((".", "/", "~")) or not _HUB_NAME.match(spec):
            raise FileNotFoundError(f"{path}: no such file or folder")
        else:
            inputs.append(Input("hf", spec))
    return inputs


def _decode(raw: bytes, path: str, first_line: int, stats: ReadStats) -> str:
    """UTF-8 text of `raw` (which starts at line `first_line` of `path`), invalid bytes replaced and counted."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        text = raw.decode("utf-8", errors="replace")
        # U+FFFD that were already in the file (as valid UTF-8) are not replacements
        stats.replaced_chars += text.count(_REPLACEMENT) - raw.count(_REPLACEMENT.encode())
        if stats.first_replacement is None:
            line = first_line + raw[: err.start].count(b"\n")
            stats.first_replacement = f"{path}:{line}"
        return text


def _txt_documents(path: str, stats: ReadStats) -> Iterator[list[str]]:
    doc: list[str] = []
    line_no = 0  # lines before the current chunk, for error locations
    with open(path, "rb") as f:
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
            text = _decode(data, path, line_no + 1, stats)
            lines = text.split("\n")
            if text.endswith("\n"):
                lines.pop()
            line_no += len(lines)
            for line in lines:
                line = line.strip()
                if line:
                    doc.append(line)
                elif doc:
                    yield doc
                    doc = []
            if not chunk:
                break
    if doc:
        yield doc


def _jsonl_documents(path: str, stats: ReadStats) -> Iterator[list[str]]:
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            stats.bytes += len(raw)
            if not raw.strip():
                continue
            text = _decode(raw, path, line_no, stats)
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{line_no}: not valid JSON ({err.msg})") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise ValueError(f"{path}:{line_no}: expected an object with a string 'text' field")
            yield _split_lines(obj["text"])


def _split_lines(text: str) -> list[str]:
    return [s for s in (line.strip() for line in text.split("\n")) if s]


def _hf_documents(spec: str, stats: ReadStats) -> Iterator[list[str]]:
    import datasets

    name, _, config = spec.partition(":")
    try:
        ds = datasets.load_dataset(name, config or None, split="train", streaming=True)
    except Exception as err:  # offline, unknown name, ...: one line, naming the input
        raise ValueError(f"{spec}: not a file or folder, and not a loadable dataset: {err}") from err
    for i, row in enumerate(ds):
        text = row.get("text")
        if not isinstance(text, str):
            raise ValueError(f"{spec}: row {i} has no string 'text' column")
        stats.bytes += len(text.encode())
        yield _split_lines(text)


def read_documents(inputs: list[Input], stats: ReadStats | None = None) -> Iterator[list[str]]:
    """Every non-empty document of the inputs, in order; empty ones are counted in `stats`, not yielded."""
    stats = stats if stats is not None else ReadStats()
    readers = {"txt": _txt_documents, "jsonl": _jsonl_documents, "hf": _hf_documents}
    for inp in inputs:
        stats.files.append(inp.name)
        n_before = stats.documents
        for doc in readers[inp.kind](inp.name, stats):
            if doc:
                stats.documents += 1
                stats.lines += len(doc)
                yield doc
            else:
                stats.empty_documents += 1
        if stats.documents == n_before:
            raise ValueError(f"{inp.name}: no text in this input (only blank lines or empty documents)")
