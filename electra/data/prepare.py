"""`electra data prepare`: raw text -> a tokenized, memory-mapped corpus folder (format: see corpus.py).

    electra data prepare --tokenizer TOKENIZER_DIR --out DATA_DIR corpus/*.txt
    electra data prepare --tokenizer TOKENIZER_DIR --out DATA_DIR openwebtext.tar.xz   # or .parquet, a dataset...

Pipeline: the main process reads documents (sources.py) and cuts them into ~2 MB batches of whole documents;
worker processes (one per core) encode the batches (encoding.py); the main process appends the ids to tokens.bin
in input order, so the result does not depend on the number of workers.

The folder is keyed by source + tokenizer: metadata.json records the tokenizer's sha256 and a fingerprint of the
inputs and of the options they are read with (sources.py). Preparing into a folder made from other inputs or
with another tokenizer fails (or, with --overwrite, replaces it); the same inputs and tokenizer again is a no-op.
Everything is written into a temporary sibling folder that is renamed into place only when complete (the sha256
of every file recorded in metadata.json, written last), so an interrupted run or a full disk leaves no
half-written set that looks complete: a kill at any moment leaves the old folder (or none), and rerunning
completes the new one. One process at a time prepares into a folder (electra.utils.files.folder_lock).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np

from electra.data.corpus import (
    DOCS_FILE,
    FORMAT_VERSION,
    LINES_FILE,
    META_FILE,
    TOKENIZER_FILE,
    TOKENS_FILE,
    read_metadata,
    too_few_documents,
)
from electra.data.encoding import LineEncoder
from electra.data.sources import (
    ReadOptions,
    ReadStats,
    long_document_warnings,
    read_documents,
    resolve_inputs,
    source_fingerprint,
    total_size,
)
from electra.data.tokenizer import find_tokenizer, load_tokenizer
from electra.utils.errors import DiskFullError, InputError, RefusedError, is_disk_full
from electra.utils.faults import failpoint
from electra.utils.files import folder_lock
from electra.utils.wording import argument, plural

log = logging.getLogger(__name__)
BATCH_BYTES = 2 << 20  # text per worker task: large enough to amortise pickling, small enough to pipeline
UINT16_MAX_VOCAB = 1 << 16

_encoder = None  # the worker process's LineEncoder


def _init_worker(tokenizer_json: str, in_pool: bool = True) -> None:
    global _encoder
    if in_pool:  # one process per core already: no nested thread pools
        os.environ["TOKENIZERS_PARALLELISM"] = "false"

    _encoder = LineEncoder(tokenizer_json)


def _encode_batch(lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
    return _encoder.encode(lines)


def _batches(docs: Iterator[list[str]]) -> Iterator[tuple[list[str], list[int]]]:
    """(lines, lines per document) batches of whole documents, ~BATCH_BYTES of text each."""
    lines: list[str] = []
    counts: list[int] = []
    size = 0
    for doc in docs:
        lines += doc
        counts.append(len(doc))
        size += sum(map(len, doc))
        if size >= BATCH_BYTES:
            yield lines, counts
            lines, counts, size = [], [], 0
    if lines:
        yield lines, counts


def default_workers() -> int:
    """One process per core; on two cores or fewer, one process (HF still encodes new words on every core).

    Each worker meets most of the common words once, so workers cost extra CPU (~1.4x in total on the Wikipedia
    sample); on a 2-core machine shared with other jobs one process was faster (7.3 s vs 9.9 s, docs/data.md).
    """
    cores = len(os.sched_getaffinity(0))
    return cores if cores > 2 else 1


def _tokenizer_json(tokenizer: str | Path) -> str:
    """The tokenizer as tokenizer.json text (a BERT vocab.txt is converted), to store beside the data. A folder
    without one of its own is read as a model's: a run folder or checkpoint (RUN/tokenizer), our transformers
    export (its discriminator/ or masked_lm/), a prepared corpus (find_tokenizer)."""

    path = Path(tokenizer)
    if path.is_dir() and not any((path / name).exists() for name in ("tokenizer.json", "vocab.txt")):
        path = find_tokenizer(path) or path  # else load_tokenizer names the folder
    file = path / "tokenizer.json" if path.is_dir() else path
    if file.name == "tokenizer.json" and file.exists():
        load_tokenizer(file)  # validates it
        return file.read_text(encoding="utf-8")
    return load_tokenizer(path).to_str(pretty=True)


def tokenizer_sha256(tokenizer: str | Path) -> str:
    """The digest a corpus prepared with `tokenizer` records as metadata.json's `tokenizer_sha256`: of the
    tokenizer.json text `prepare` stores (so a model's tokenizer can be compared with a corpus's)."""
    return hashlib.sha256(_tokenizer_json(tokenizer).encode("utf-8")).hexdigest()


UNK_WARN_RATE = 0.05
"""Above this share of [UNK] tokens `data prepare` warns: English text under an English WordPiece has ~0.1%
(symbols outside its alphabet); a few percent means text in a script the tokenizer was not trained on."""
UNK_REFUSE_RATE = 0.5
"""Above this share the corpus is refused (unless allow_unknown_tokens): a model pretrained on it learns to
predict [UNK]. 200,000 CJK characters under an English WordPiece are 100% [UNK]."""


def check_unknown_rate(meta: dict, inputs: list[str], allow_unknown_tokens: bool) -> None:
    """Warn about, or refuse (InputError), a corpus whose tokens are mostly [UNK]: the tokenizer cannot read it."""
    rate = meta.get("unk_rate")
    if rate is None or rate <= UNK_WARN_RATE:
        return
    what = (
        f"{', '.join(inputs)}: {rate:.1%} of the tokens are [UNK] (the tokenizer cannot read this text; "
        "a tokenizer trained on it can: electra tokenizer train)"
    )
    if rate > UNK_REFUSE_RATE and not allow_unknown_tokens:
        raise RefusedError(f"{what}; refusing to prepare it", "allow_unknown_tokens", "forces it")
    log.warning("%s", what)


def check_splittable(meta: dict, inputs: list[str], read_options: ReadOptions) -> None:
    """Refuse (InputError) a corpus too small to split into training and held-out documents, saying how the text
    may be read as more documents (a text without blank lines is one document under the default separator)."""
    refused = too_few_documents(meta["num_documents"], ", ".join(inputs))
    if refused is None:
        return
    if read_options.doc_separator == "line":
        raise InputError(f"{refused}; give it more text")
    raise InputError(
        f"{refused}: {SEPARATOR_READS[read_options.doc_separator]}; if each line of the text is a document, "
        f"prepare it with {argument('read_options.doc_separator', 'line')}"
    )


SEPARATOR_READS = {
    "blank": "a document ends at a blank line and the text has none between documents",
    "file": "each file is one document",
}
"""How each --doc-separator but `line` reads a text as one document, for the refusal above."""


def _check_existing(out: Path, tok_sha: str, fingerprint: str, overwrite: bool) -> dict | None:
    """The metadata of `out` if it is already this exact preparation; raise if it holds anything else."""
    if not out.exists() or overwrite:
        return None
    if not (out / META_FILE).exists():
        if out.is_dir() and not any(out.iterdir()):
            return None
        raise ValueError(f"{out}: exists and is not a prepared corpus; choose another --out")
    try:
        meta = read_metadata(out)
    except ValueError as err:
        raise RefusedError(str(err), "overwrite", "replaces it") from None
    if meta.get("tokenizer_sha256") != tok_sha:
        raise RefusedError(
            f"{out}: prepared with another tokenizer (sha256 {meta.get('tokenizer_sha256', '?')[:12]}, "
            f"this one is {tok_sha[:12]}); use another output folder",
            "overwrite",
            "replaces it",
        )
    if meta.get("source_fingerprint") != fingerprint:
        raise RefusedError(f"{out}: prepared from other inputs; use another output folder", "overwrite", "replaces it")
    return meta


def prepare(
    inputs: list[str],
    tokenizer: str | Path,
    out_dir: str | Path,
    workers: int | None = None,
    overwrite: bool = False,
    show_progress: bool = True,
    read_options: ReadOptions | None = None,
    allow_unknown_tokens: bool = False,
    allow_binary: bool = False,
) -> dict:
    """Tokenize `inputs` (read as `read_options` says, by default ReadOptions()) with `tokenizer` into `out_dir`;
    returns the metadata written (or found up to date). Holds `out_dir`'s lock while it works. A corpus mostly of
    [UNK] tokens is refused unless `allow_unknown_tokens` (check_unknown_rate), an input that is not UTF-8 text
    unless `allow_binary` (sources.check_binary); a refusal keeps whatever `out_dir` held."""
    start_time = time.perf_counter()
    read_options = read_options or ReadOptions()
    out = Path(out_dir)
    resolved = resolve_inputs(inputs, read_options)
    tok_json = _tokenizer_json(tokenizer)
    tok_sha = hashlib.sha256(tok_json.encode("utf-8")).hexdigest()
    fingerprint = source_fingerprint(resolved, read_options)
    with folder_lock(out, "data prepare"):
        _remove_leftovers(out)
        existing = _check_existing(out, tok_sha, fingerprint, overwrite)
        if existing is not None:
            log.info("%s: already prepared from these inputs with this tokenizer; nothing to do", out)
            return existing
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        tmp.mkdir()
        name = ""
        try:
            name = TOKENS_FILE
            meta = _tokenize(inputs, resolved, read_options, tok_json, tmp, workers, show_progress, allow_binary)
            check_unknown_rate(meta, inputs, allow_unknown_tokens)  # before anything is kept
            check_splittable(meta, inputs, read_options)  # ... in one line
            for warning in meta.pop("_warnings"):
                log.warning("%s", warning)
            for name, array in ((DOCS_FILE, meta.pop("_doc_offsets")), (LINES_FILE, meta.pop("_line_offsets"))):
                buf = io.BytesIO()
                np.save(buf, array)
                meta["sha256"][name] = _write_synced(tmp / name, buf.getvalue())
            name = TOKENIZER_FILE
            (tmp / TOKENIZER_FILE).parent.mkdir()
            meta["tokenizer_sha256"] = _write_synced(tmp / TOKENIZER_FILE, tok_json.encode("utf-8"))
            elapsed = time.perf_counter() - start_time
            meta.update(
                source_fingerprint=fingerprint,
                sources=[i.label for i in resolved],
                read_options=asdict(read_options),
                elapsed_s=round(elapsed, 2),
                tokens_per_s=round(meta["num_tokens"] / elapsed),
            )
            name = META_FILE
            _write_synced(tmp / META_FILE, (json.dumps(meta, indent=2) + "\n").encode())  # last: marks it complete
            name = ""
            _replace_dir(tmp, out)
        except BaseException as err:
            shutil.rmtree(tmp, ignore_errors=True)
            if is_disk_full(err):
                kept = f"the previous {out} is intact" if out.exists() else "nothing was kept"
                raise DiskFullError(
                    err.errno, f"disk full while writing {out / name} ({err.strerror}); {kept}"
                ) from err
            raise
    return meta


def _tokenize(
    inputs: list[str],
    resolved,
    read_options: ReadOptions,
    tok_json: str,
    tmp: Path,
    workers: int | None,
    show_progress: bool,
    allow_binary: bool,
) -> dict:
    """Write tmp/tokens.bin; returns the metadata so far, with the offset arrays under `_doc_offsets` and
    `_line_offsets`, and under `_warnings` what to say of .txt files whose documents are few for their size
    (long_document_warnings)."""
    from tokenizers import Tokenizer
    from tqdm import tqdm

    tok = Tokenizer.from_str(tok_json)
    vocab_size, unk_id = tok.get_vocab_size(), tok.token_to_id("[UNK]")  # None: a byte-level BPE has no [UNK]
    num_unk = 0
    dtype = np.dtype(np.uint16 if vocab_size <= UINT16_MAX_VOCAB else np.uint32)
    workers = workers or default_workers()
    stats = ReadStats()
    line_lengths: list[np.ndarray] = []
    doc_line_counts: list[np.ndarray] = []
    num_tokens = empty_after_tokenizing = 0
    tokens_hash = hashlib.sha256()
    docs = read_documents(resolved, read_options, stats, allow_binary)
    with (
        open(tmp / TOKENS_FILE, "wb") as f,
        tqdm(
            total=total_size(resolved), unit="B", unit_scale=True, desc="tokenizing", disable=not show_progress
        ) as bar,
    ):
        for (ids, lengths), counts in _encode_in_order(docs, tok_json, workers):
            # lines that tokenize to nothing (e.g. only control characters) are dropped, and so are
            # documents left without lines; the counts say how many
            keep = lengths > 0
            per_doc = np.bincount(np.repeat(np.arange(len(counts)), counts)[keep], minlength=len(counts))
            empty_after_tokenizing += int((per_doc == 0).sum())
            doc_line_counts.append(per_doc[per_doc > 0])
            line_lengths.append(lengths[keep])
            array = np.ascontiguousarray(ids, dtype=dtype)
            if unk_id is not None:
                num_unk += int(np.count_nonzero(array == unk_id))
            data = array.data
            failpoint("prepare.write")
            f.write(data)  # (ndarray.tofile hides the errno)
            tokens_hash.update(data)
            num_tokens += len(ids)
            bar.update(stats.input_bytes - bar.n)
            bar.set_postfix_str(f"{num_tokens / max(bar.format_dict['elapsed'], 1e-9) / 1e6:.2f}M tok/s")
        f.flush()
        os.fsync(f.fileno())
    if num_tokens == 0:
        raise InputError(f"{', '.join(inputs)}: no tokens after tokenization (empty inputs?)")
    return _tokens_metadata(
        line_lengths,
        doc_line_counts,
        num_tokens=num_tokens,
        tokens_sha256=tokens_hash.hexdigest(),
        dtype=dtype,
        vocab_size=vocab_size,
        unk_tokens=num_unk if unk_id is not None else None,
        empty_after_tokenizing=empty_after_tokenizing,
        stats=stats,
        read_options=read_options,
        workers=workers,
    )


def _tokens_metadata(
    line_lengths: list[np.ndarray],
    doc_line_counts: list[np.ndarray],
    *,
    num_tokens: int,
    tokens_sha256: str,
    dtype: np.dtype,
    vocab_size: int,
    unk_tokens: int | None,
    empty_after_tokenizing: int,
    stats: ReadStats,
    read_options: ReadOptions,
    workers: int,
) -> dict:
    """`_tokenize`'s metadata from what it counted while writing tokens.bin: the line and document offsets (from
    each batch's kept line lengths and lines per document), the counts, and None for what `prepare` fills in."""
    line_offsets = np.concatenate([[0], np.cumsum(np.concatenate(line_lengths))]).astype(np.int64)
    line_counts = np.concatenate(doc_line_counts)
    doc_offsets = line_offsets[np.concatenate([[0], np.cumsum(line_counts)])]
    return {
        "format_version": FORMAT_VERSION,
        "num_documents": len(doc_offsets) - 1,
        "num_tokens": int(num_tokens),
        "num_lines": len(line_offsets) - 1,
        "dtype": dtype.name,
        "vocab_size": vocab_size,
        "tokenizer_sha256": None,
        "source_fingerprint": None,
        "sources": None,
        "read_options": None,
        "sha256": {TOKENS_FILE: tokens_sha256},
        "bytes": stats.bytes,
        "empty_documents": stats.empty_documents + empty_after_tokenizing,
        "unk_tokens": unk_tokens,
        "unk_rate": round(unk_tokens / num_tokens, 6) if unk_tokens is not None else None,
        "replaced_invalid_utf8": stats.replaced_chars,
        "first_invalid_utf8": stats.first_replacement,
        "document_tokens": _length_stats(np.diff(doc_offsets)),
        "elapsed_s": None,
        "tokens_per_s": None,
        "workers": workers,
        "_doc_offsets": doc_offsets,
        "_line_offsets": line_offsets,
        "_warnings": long_document_warnings(stats, read_options.doc_separator),  # said once it is not refused
    }


def _write_synced(path: Path, data: bytes) -> str:
    """Write and fsync `data`; returns its sha256."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return hashlib.sha256(data).hexdigest()


def _remove_leftovers(out: Path) -> None:
    """Undo what killed runs left (only called while holding `out`'s lock): a run killed between moving the old
    folder away and the new one into place left no `out`; its old folder (.OUT.old-PID) is put back. Then the
    temporary folders (.OUT.tmp-PID, .OUT.old-PID) are deleted."""
    olds = sorted(out.parent.glob(f".{out.name}.old-*"))
    if not out.exists() and olds and (olds[0] / META_FILE).exists():
        log.warning("%s: restored from %s, left by an interrupted run", out, olds[0])
        os.rename(olds[0], out)
    for pattern in (f".{out.name}.tmp-*", f".{out.name}.old-*"):
        for leftover in out.parent.glob(pattern):
            shutil.rmtree(leftover, ignore_errors=True)


def _length_stats(lengths: np.ndarray) -> dict:
    return {
        "min": int(lengths.min()),
        "median": float(np.median(lengths)),
        "mean": float(lengths.mean()),
        "max": int(lengths.max()),
    }


def _encode_in_order(docs: Iterator[list[str]], tok_json: str, workers: int):
    """((ids, line lengths), lines per document) per batch, in input order; `workers` processes at a time."""
    if workers <= 1:  # in this process; HF still encodes new words on all cores
        _init_worker(tok_json, in_pool=False)
        for lines, counts in _batches(docs):
            yield _encode_batch(lines), counts
        return
    import multiprocessing

    # "spawn": workers start clean, whatever threads the parent holds (fork with threads can deadlock)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(tok_json,)) as pool:
        pending: deque = deque()  # at most 2 batches per worker in flight: bounded memory, workers never idle
        for lines, counts in _batches(docs):
            pending.append((pool.submit(_encode_batch, lines), counts))
            if len(pending) >= 2 * workers:
                future, c = pending.popleft()
                yield future.result(), c
        while pending:
            future, c = pending.popleft()
            yield future.result(), c


def _replace_dir(tmp: Path, out: Path) -> None:
    """Move the finished `tmp` to `out`, replacing an older `out` only once the new one is complete."""
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.rename(out, old)
        failpoint("prepare.commit")
        os.rename(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, out)


def summary(meta: dict, out: str | Path) -> str:
    s = (
        f"{out}: {plural(meta['num_documents'], 'document')}, {meta['num_tokens']:,} tokens ({meta['dtype']}) from "
        f"{meta['bytes'] / 1e6:.1f} MB of text, prepared in {meta['elapsed_s']:.1f}s "
        f"({meta['tokens_per_s'] / 1e6:.2f}M tokens/s, {plural(meta['workers'], 'worker')})"
    )
    if meta.get("unk_rate") is not None:  # None: a tokenizer without [UNK], or a folder prepared before the field
        s += f"; [UNK] {meta['unk_rate']:.2%} of tokens"
    if meta["empty_documents"]:
        s += f"; {plural(meta['empty_documents'], 'empty document')} skipped"
    if meta["replaced_invalid_utf8"]:
        n = plural(meta["replaced_invalid_utf8"], "invalid UTF-8 sequence")
        s += f"; {n} replaced (first: {meta['first_invalid_utf8']})"
    return s
