"""Reading tables of documents: Parquet and Arrow files, `datasets` folders (save_to_disk), hub datasets.

One row is one document, its text in one string column (`text` unless told otherwise); the text's lines are the
document's lines, as for a .jsonl row. A null is an empty document (counted, skipped). Files are read a record
batch at a time (Arrow files memory-mapped), so memory stays bounded whatever the table's size.

Hub datasets (`NAME` or `NAME:CONFIG`) go through `datasets.load_dataset_builder`. Offline (HF_HUB_OFFLINE=1, or
no network) it resolves a name to the copy a previous `load_dataset(NAME)` prepared in the datasets cache
(HF_DATASETS_CACHE, by default ~/.cache/huggingface/datasets/NAMESPACE___NAME/CONFIG/VERSION/HASH), which is
memory-mapped as it is; online, a cached copy of the current revision is used the same way, else the split is
streamed from the hub.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from electra.data.sources_text import ReadStats, split_lines
from electra.utils.errors import InputError
from electra.utils.wording import argument

ROWS_PER_BATCH = 1024
SAVED_DATASET_MARKERS = ("dataset_dict.json", "state.json")
"""Files that `Dataset.save_to_disk` / `DatasetDict.save_to_disk` write at the top of their folder."""


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: " + " ".join(str(err).split())


def _check_text_type(name: str, column: str, arrow_type) -> None:
    import pyarrow as pa

    if not (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)):
        raise InputError(
            f"{name}: column '{column}' holds {arrow_type}, not strings; choose one with "
            f"{argument('read_options.text_column')}"
        )


def _check_column(name: str, column: str, columns: list[str]) -> None:
    if column not in columns:
        raise InputError(
            f"{name}: no column '{column}' (columns: {', '.join(columns)}); choose one with "
            f"{argument('read_options.text_column')}"
        )


def _row_documents(texts: Iterable, name: str, first_row: int, stats: ReadStats) -> Iterator[list[str]]:
    for row, text in enumerate(texts, start=first_row):
        if text is None:
            yield []  # a missing value: an empty document
        elif not isinstance(text, str):
            raise InputError(f"{name}: row {row}: expected a string, got {type(text).__name__}")
        else:
            stats.bytes += len(text.encode("utf-8"))
            yield split_lines(text)


def parquet_documents(path: str, column: str, stats: ReadStats) -> Iterator[list[str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"{path}: not a readable Parquet file ({_one_line(err)})") from None
    _check_column(path, column, pf.schema_arrow.names)
    _check_text_type(path, column, pf.schema_arrow.field(column).type)
    size, num_rows = Path(path).stat().st_size, max(pf.metadata.num_rows, 1)
    start, row = stats.input_bytes, 0
    for batch in pf.iter_batches(batch_size=ROWS_PER_BATCH, columns=[column]):
        yield from _row_documents(batch.column(0).to_pylist(), path, row, stats)
        row += batch.num_rows
        stats.input_bytes = start + size * row // num_rows


def arrow_documents(path: str, column: str, stats: ReadStats) -> Iterator[list[str]]:
    """An Arrow IPC file: the stream format `datasets` writes, or the random-access file format."""
    import pyarrow as pa

    with pa.memory_map(path) as source:
        try:
            reader = pa.ipc.open_stream(source)
            batches = iter(reader)
        except pa.ArrowInvalid:
            source.seek(0)
            try:
                reader = pa.ipc.open_file(source)
            except pa.ArrowException as err:
                raise InputError(f"{path}: not a readable Arrow file ({_one_line(err)})") from None
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        _check_column(path, column, reader.schema.names)
        _check_text_type(path, column, reader.schema.field(column).type)
        start, row = stats.input_bytes, 0
        for batch in batches:
            yield from _row_documents(batch.column(column).to_pylist(), path, row, stats)
            row += batch.num_rows
            stats.input_bytes = start + source.tell()  # memory-mapped: the position is the bytes read


def is_saved_dataset(folder: Path) -> bool:
    return any((folder / marker).is_file() for marker in SAVED_DATASET_MARKERS)


def saved_dataset_arrow_files(folder: Path, split: str) -> list[Path]:
    """The arrow files of the split to read: a DatasetDict folder's FOLDER/SPLIT, a Dataset folder's own."""
    if (folder / "dataset_dict.json").is_file():
        folder = folder / split
    return sorted(folder.glob("*.arrow"))


def _import_datasets():
    import datasets

    # its messages (e.g. "using the cached version") have their own handler: do not print them twice
    datasets.utils.logging.disable_propagation()
    return datasets


def _dataset_documents(ds, name: str, column: str, size: int, stats: ReadStats) -> Iterator[list[str]]:
    """The rows of a `datasets.Dataset` (memory-mapped Arrow files), a batch at a time."""
    _check_column(name, column, ds.column_names)
    _check_text_type(name, column, ds.data.schema.field(column).type)
    start, row, num_rows = stats.input_bytes, 0, max(len(ds), 1)
    for batch in ds.select_columns([column]).iter(batch_size=ROWS_PER_BATCH):
        texts = batch[column]
        yield from _row_documents(texts, name, row, stats)
        row += len(texts)
        stats.input_bytes = start + size * row // num_rows


def saved_dataset_documents(path: str, column: str, split: str, size: int, stats: ReadStats) -> Iterator[list[str]]:
    """A folder written by `Dataset.save_to_disk` (or `DatasetDict.save_to_disk`: its split `split`)."""
    datasets = _import_datasets()
    try:
        ds = datasets.load_from_disk(path)
    except Exception as err:  # a damaged folder: datasets raises a variety of errors
        raise InputError(f"{path}: not a readable `datasets` folder ({_one_line(err)})") from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise InputError(
                f"{path}: no split '{split}' (splits: {', '.join(ds)}); choose one with "
                f"{argument('read_options.split')}"
            )
        ds = ds[split]
    yield from _dataset_documents(ds, path, column, size, stats)


def hub_builder(spec: str, split: str):
    """The `datasets` builder of hub dataset NAME[:CONFIG], from the local cache when offline; fails in one line."""
    datasets = _import_datasets()
    name, _, config = spec.partition(":")
    try:
        builder = datasets.load_dataset_builder(name, config or None)
    except Exception as err:  # offline and not cached, unknown name, no network, ...
        raise InputError(
            f"{spec}: not a file or folder, nor a dataset in the local Hugging Face cache or reachable on the hub "
            f"({_one_line(err)})"
        ) from None
    splits = builder.info.splits
    if splits and split not in splits:
        raise InputError(
            f"{spec}: no split '{split}' (splits: {', '.join(splits)}); choose one with "
            f"{argument('read_options.split')}"
        )
    return builder


def hub_revision_and_size(spec: str, split: str) -> tuple[str | None, int | None]:
    """The revision a hub dataset resolves to (the commit, or the hash of the cached copy), and its split's size."""
    builder = hub_builder(spec, split)
    info = builder.info.splits.get(split) if builder.info.splits else None
    return builder.hash, (info.num_bytes or None) if info else None


def hub_documents(spec: str, column: str, split: str, size: int | None, stats: ReadStats) -> Iterator[list[str]]:
    """A hub dataset's split: memory-mapped from the datasets cache if a copy is there, else streamed."""
    builder = hub_builder(spec, split)
    if (Path(builder.cache_dir) / "dataset_info.json").is_file():  # prepared by an earlier load_dataset
        yield from _dataset_documents(builder.as_dataset(split=split), spec, column, size or 0, stats)
        return
    ds = builder.as_streaming_dataset(split=split)
    if ds.features is not None:  # known from the hub's metadata; else checked on the first row
        _check_column(spec, column, list(ds.features))
        ds = ds.select_columns([column])
    info = builder.info.splits.get(split) if builder.info.splits else None
    num_rows = info.num_examples if info else 0
    start = stats.input_bytes
    for row, example in enumerate(ds):
        if column not in example:
            _check_column(spec, column, list(example))
        yield from _row_documents([example[column]], spec, row, stats)
        if size and num_rows and row % ROWS_PER_BATCH == 0:
            stats.input_bytes = start + size * (row + 1) // num_rows
    stats.input_bytes = start + (size or 0)
