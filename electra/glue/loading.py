"""Examples from a GLUE folder in the original TSV layout (download_glue_data.py), or from the hub's `nyu-mll/glue`.

Both give the same examples and label ids. TSVs are read with quoting disabled (some rows hold stray quote
characters) and a UTF-8 BOM is tolerated (MRPC starts with one). Any malformed row is an error naming the file
and line: a silently skipped row changes the dev set and makes scores incomparable.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from pathlib import Path

from electra.glue.tasks import TASKS, Task, TaskSpec

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
    """All splits of a task from its folder, or from the hub when `spec.root` is None."""
    task = spec.task
    if spec.root is None:
        return _load_from_hub(task, with_test)
    train = read_tsv(spec.root / task.train.file, task) if task.train else []
    dev = {s.suffix: read_tsv(spec.root / s.file, task) for s in task.dev}
    test: dict[str, list[Example]] = {}
    if with_test:
        for s in task.test:
            if (spec.root / s.file).exists():
                test[s.submission or s.file] = read_tsv(spec.root / s.file, task, labelled=False)
        for name, folder in spec.extra.items():
            other = TASKS[name]
            for s in other.test:
                if folder is None:
                    test[s.submission or s.file] = _load_from_hub(other, True).test[s.submission or s.file]
                else:
                    test[s.submission or s.file] = read_tsv(folder / s.file, other, labelled=False)
    return TaskData(task, train, dev, test)


def read_tsv(path: Path, task: Task, labelled: bool = True) -> list[Example]:
    """Rows of one GLUE TSV as examples; `labelled=False` for test files (any label column is ignored)."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (task {task.name})")
    # utf-8-sig drops MRPC's byte-order mark; newline="" lets csv see each row's own line ending.
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        # CoLA's train/dev files have no header row; its test file has one (`index sentence`).
        if task.headerless and labelled:
            header = list(task.headerless)
        else:
            header = next(reader, None)
            if header is None:
                raise ValueError(f"{path}:1: empty file (task {task.name})")
        col = {name: i for i, name in enumerate(header)}
        needed = [task.text_a] + ([task.text_b] if task.text_b else []) + ([task.label] if labelled else [])
        for name in needed:
            if name not in col:
                raise ValueError(f"{path}:1: no column {name!r} in the header {header} (task {task.name})")
        index_col = next((col[c] for c in INDEX_COLUMNS if c in col), None)
        examples = []
        for row in reader:
            line = reader.line_num
            if row == [] or row == [""]:
                continue  # a blank line (e.g. at the end of a file)
            if len(row) != len(header):
                raise ValueError(f"{path}:{line}: {len(row)} columns, expected {len(header)} (task {task.name})")
            text_a = row[col[task.text_a]]
            text_b = row[col[task.text_b]] if task.text_b else None
            for name, text in ((task.text_a, text_a), (task.text_b, text_b)):
                if text is not None and not text.strip():
                    raise ValueError(f"{path}:{line}: empty text in column {name!r} (task {task.name})")
            label = parse_label(row[col[task.label]], task, f"{path}:{line}") if labelled else None
            index = row[index_col] if index_col is not None else str(len(examples))
            examples.append(Example(text_a, text_b, label, index))
    if not examples:
        raise ValueError(f"{path}:{reader.line_num}: no examples in this file (task {task.name})")
    return examples


def parse_label(value: str, task: Task, where: str) -> int | float:
    if task.labels is None:
        try:
            score = float(value)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise ValueError(f"{where}: label {value!r} is not a number (task {task.name})")
        return score
    try:
        return task.labels.index(value.strip())
    except ValueError:
        raise ValueError(f"{where}: label {value!r} is not one of {list(task.labels)} (task {task.name})") from None


# -- the HF hub ------------------------------------------------------------------------------------------------


def _load_from_hub(task: Task, with_test: bool) -> TaskData:
    import datasets

    if task.hub_config is None:
        raise ValueError(f"task {task.name} has no hub dataset; pass --glue-dir")
    ds = datasets.load_dataset("nyu-mll/glue", task.hub_config)
    train = examples_from_hub(task, ds[task.train.hub]) if task.train else []
    dev = {s.suffix: examples_from_hub(task, ds[s.hub]) for s in task.dev}
    test: dict[str, list[Example]] = {}
    if with_test:
        for s in task.test:
            test[s.submission or s.file] = examples_from_hub(task, ds[s.hub], labelled=False)
        for name in task.also_predict:
            test.update(_load_from_hub(TASKS[name], True).test)
    return TaskData(task, train, dev, test)


def examples_from_hub(task: Task, split, labelled: bool = True) -> list[Example]:
    """A `datasets.Dataset` with the hub's schema (text fields, `label`, `idx`) -> examples.

    The hub's ClassLabel names are checked against the task's, so label ids mean the same as from the TSVs.
    """
    field_a, field_b = task.hub_fields
    if task.hub_labels is not None and "label" in split.features:
        names = tuple(getattr(split.features["label"], "names", ()))
        if names != task.hub_labels:
            raise ValueError(f"hub {task.hub_config}: label names {names}, expected {task.hub_labels}")
    examples = []
    for i, row in enumerate(split):
        for name in (field_a, field_b):
            if name is not None and not str(row[name]).strip():
                raise ValueError(f"hub {task.hub_config} row {i}: empty text in field {name!r}")
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
