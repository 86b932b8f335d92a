"""Examples from a GLUE folder in the original TSV layout (download_glue_data.py), or in the schema of the hub's
`nyu-mll/glue`: a `datasets` save_to_disk folder, the hub repo's Parquet files, or the hub dataset itself (from
the local datasets cache when offline). Where each layout lives: electra/glue/tasks.py.

All give the same examples and label ids. TSVs are read with quoting disabled (some rows hold stray quote
characters) and a UTF-8 BOM is tolerated (MRPC starts with one). Any malformed row (bad UTF-8, a wrong width, an
unknown label, a cell over csv's size limit) is an InputError naming the file and line: a silently skipped row
changes the dev set and makes scores incomparable. Hub-schema label ids are taken only after the ClassLabel names
are checked against the task's.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from electra.data.sources_datasets import _import_datasets, _one_line
from electra.glue.tasks import HUB_DATASET, Split, Task, TaskSpec, parquet_files
from electra.utils.errors import InputError
from electra.utils.wording import argument

INDEX_COLUMNS = ("index", "id")  # the test files' row ids (QQP calls it id); submissions echo them


@dataclass(frozen=True)
class Example:
    text_a: str
    text_b: str | None
    label: int | float | None
    """Label id, or the score for regression; None for unlabelled (test) rows."""
    index: str
    """The row's index column, or its row number when the file has none."""


@dataclass
class TaskData:
    task: Task
    train: list[Example]
    dev: dict[str, list[Example]]
    """Metric suffix ("" or MNLI's "_m", "_mm") -> examples."""
    test: dict[str, list[Example]]
    """Submission file name (CoLA.tsv, MNLI-m.tsv, AX.tsv ...; test.tsv for a custom task) -> examples."""

    @property
    def n_train(self) -> int:
        return len(self.train)

    @property
    def n_eval(self) -> int:
        """Rows of the evaluation file(s); MNLI counts matched and mismatched together."""
        return sum(len(v) for v in self.dev.values())


def load_task(spec: TaskSpec, with_test: bool = False) -> TaskData:
    """All splits of a task from where `spec` says (tasks.py `resolve_tasks`); test sets only `with_test`, with
    those of the tasks in `spec.extra` (MNLI's model predicts AX)."""
    task = spec.task
    if spec.layout == "tsv":
        assert spec.root is not None
        root = spec.root
        train = read_tsv(root / task.train.file, task) if task.train else []
        dev = {s.suffix: read_tsv(root / s.file, task) for s in task.dev}
        test = {
            _test_name(s): read_tsv(root / s.file, task, labelled=False)
            for s in task.test
            if with_test and (root / s.file).exists()
        }
    else:
        split = _hub_schema_splits(spec)
        train = examples_from_hub(task, split(task.train.hub)) if task.train else []
        dev = {s.suffix: examples_from_hub(task, split(s.hub)) for s in task.dev}
        test = {
            _test_name(s): examples_from_hub(task, split(s.hub), labelled=False)
            for s in task.test
            if with_test and split(s.hub, optional=True) is not None
        }
    if with_test:
        for other in spec.extra.values():
            test.update(load_task(other, with_test=True).test)
    return TaskData(task, train, dev, test)


def _test_name(split: Split) -> str:
    return split.submission or split.file


def read_tsv(path: Path, task: Task, labelled: bool = True) -> list[Example]:
    """Rows of one GLUE TSV as examples; `labelled=False` for test files (any label column is ignored)."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (task {task.name})")
    # utf-8-sig drops MRPC's byte-order mark; newline="" lets csv see each row's own line ending.
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            return _tsv_examples(reader, path, task, labelled)
    except UnicodeDecodeError:  # raised a buffer ahead of the row csv is on: find the line in the bytes
        line, byte = _first_invalid_utf8(path.read_bytes())
        raise InputError(f"{path}:{line}: not valid UTF-8 (byte {byte:#04x}; task {task.name})") from None
    except csv.Error as err:  # a cell over csv.field_size_limit(), a NUL byte before Python 3.11
        raise InputError(f"{path}:{reader.line_num}: {err} (task {task.name})") from None


def _tsv_examples(reader, path: Path, task: Task, labelled: bool) -> list[Example]:
    # CoLA's train/dev files have no header row; its test file has one (`index sentence`).
    if task.headerless and labelled:
        header = list(task.headerless)
    else:
        header = next(reader, None)
        if header is None:
            raise InputError(f"{path}:1: empty file (task {task.name})")
    col = {name: i for i, name in enumerate(header)}
    needed = [task.text_a] + ([task.text_b] if task.text_b else []) + ([task.label] if labelled else [])
    for name in needed:
        if name not in col:
            raise InputError(f"{path}:1: no column {name!r} in the header {header} (task {task.name})")
    index_col = next((col[c] for c in INDEX_COLUMNS if c in col), None)
    examples = []
    for row in reader:
        line = reader.line_num
        if row == [] or row == [""]:
            continue  # a blank line (e.g. at the end of a file)
        if len(row) != len(header):
            raise InputError(f"{path}:{line}: {len(row)} columns, expected {len(header)} (task {task.name})")
        text_a = row[col[task.text_a]]
        text_b = row[col[task.text_b]] if task.text_b else None
        for name, text in ((task.text_a, text_a), (task.text_b, text_b)):
            if text is not None and not text.strip():
                raise InputError(f"{path}:{line}: empty text in column {name!r} (task {task.name})")
        label = parse_label(row[col[task.label]], task, f"{path}:{line}") if labelled else None
        index = row[index_col] if index_col is not None else str(len(examples))
        examples.append(Example(text_a, text_b, label, index))
    if not examples:
        raise InputError(f"{path}:{reader.line_num}: no examples in this file (task {task.name})")
    return examples


def _first_invalid_utf8(data: bytes) -> tuple[int, int]:
    """(line, byte value) of the first byte of `data` that is not UTF-8, lines counted as csv counts them in a
    file opened with newline="" (LF, CRLF and a lone CR each end one)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        before = data[: err.start]
        return before.count(b"\n") + before.count(b"\r") - before.count(b"\r\n") + 1, data[err.start]
    raise AssertionError("the file decoded this time")  # changed between the two reads


def parse_label(value: str, task: Task, where: str) -> int | float:
    if task.labels is None:
        try:
            score = float(value)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise InputError(f"{where}: label {value!r} is not a number (task {task.name})")
        return score
    try:
        return task.labels.index(value.strip())
    except ValueError:
        raise InputError(f"{where}: label {value!r} is not one of {list(task.labels)} (task {task.name})") from None


# -- the nyu-mll/glue schema: datasets folders, Parquet files, the hub --------------------------------------------


@dataclass
class HubSplit:
    """One split in the hub's schema, however it was stored: its features (to check the label names) and rows."""

    where: str
    """Named in errors: the file, folder or hub config it came from."""
    features: dict
    """Column name -> `datasets` feature (ClassLabel for the labels of a classification task)."""
    rows: Iterable[dict]


def _hub_schema_splits(spec: TaskSpec):
    """`split(name, optional=False) -> HubSplit | None` for a task stored in the hub's schema."""

    datasets = _import_datasets()
    task, root = spec.task, spec.root
    if spec.layout == "parquet":
        assert root is not None

        def split(name: str, optional: bool = False) -> HubSplit | None:
            files = parquet_files(root, name)
            if not files:
                if optional:
                    return None
                raise FileNotFoundError(f"{root}: no Parquet files of split {name!r} (task {task.name})")
            return read_parquet_split(files, f"{root}/{name}")

        return split
    if spec.layout == "datasets":
        try:
            loaded = datasets.load_from_disk(str(root))
        except Exception as err:  # a damaged folder: datasets raises a variety of errors
            raise InputError(f"{root}: not a readable `datasets` folder ({_one_line(err)})") from None
        where = str(root)
    else:
        try:
            loaded = datasets.load_dataset(HUB_DATASET, task.hub_config)
        except Exception as err:  # offline and not cached, no network, ...
            raise InputError(
                f"{HUB_DATASET} ({task.hub_config}): not in the local datasets cache, and the hub is not reachable "
                f"({_one_line(err)}); pass a GLUE folder as {argument('glue_dir')}"
            ) from None
        where = f"{HUB_DATASET} {task.hub_config}"

    def split(name: str, optional: bool = False) -> HubSplit | None:
        if name not in loaded:
            if optional:
                return None
            raise InputError(f"{where}: no split {name!r} (splits: {', '.join(loaded)}; task {task.name})")
        return HubSplit(f"{where} {name}", dict(loaded[name].features), loaded[name])

    return split


def read_parquet_split(files: list[Path], where: str) -> HubSplit:
    """Parquet files written by `datasets` (the hub's files are): the features come from the schema's metadata."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pa.concat_tables([pq.read_table(f) for f in files])
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"{files[0]}: not a readable Parquet file ({type(err).__name__}: {err})") from None
    return HubSplit(where, dict(datasets.Features.from_arrow_schema(table.schema)), table.to_pylist())


def examples_from_hub(task: Task, split, labelled: bool = True) -> list[Example]:
    """A split with the hub's schema (text fields, `label`, `idx`; a `datasets.Dataset` or a HubSplit) -> examples.

    The ClassLabel names are checked against the task's, so label ids mean the same as from the TSVs.
    """
    if not isinstance(split, HubSplit):
        split = HubSplit(f"{HUB_DATASET} {task.hub_config}", dict(split.features), split)
    field_a, field_b = task.hub_fields
    for name in (field_a, field_b, "label" if labelled else None):
        if name is not None and name not in split.features:
            fields = ", ".join(split.features)
            raise InputError(f"{split.where}: no field {name!r} (fields: {fields}; task {task.name})")
    if task.hub_labels is not None and "label" in split.features:
        names = tuple(getattr(split.features["label"], "names", ()))
        if names != task.hub_labels:
            raise InputError(f"{split.where}: label names {names}, expected {task.hub_labels} (task {task.name})")
    examples = []
    for i, row in enumerate(split.rows):
        for name in (field_a, field_b):
            if name is not None and not str(row[name]).strip():
                raise InputError(f"{split.where} row {i}: empty text in field {name!r}")
        label = row.get("label")
        if not labelled or label is None or label == -1:  # test rows carry label -1
            label = None
        elif task.labels is None:
            label = float(label)
        else:
            label = int(label)
        text_b = row[field_b] if field_b is not None else None
        examples.append(Example(row[field_a], text_b, label, str(row.get("idx", i))))
    return examples


def with_swapped_pairs(examples: list[Example]) -> list[Example]:
    """OFF's `double_unordered` (google-research/electra#98): add each training pair with A and B swapped; used for
    tasks whose pairs are unordered (MRPC, STS-B)."""
    return examples + [replace(e, text_a=e.text_b, text_b=e.text_a) for e in examples if e.text_b is not None]
