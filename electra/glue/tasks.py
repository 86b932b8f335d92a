"""The task registry: the nine GLUE tasks, the AX diagnostic set, and custom tasks described by a `task.json`; and
where a task's data is (`resolve_tasks`).

A task says where its text and labels are (column names in the original GLUE TSV header, as written by
download_glue_data.py, and field names in the HF hub dataset `nyu-mll/glue`), its label strings in id order, its
metrics and epochs, and how fine-tuning treats it: whether its pairs are unordered (both orders are trained on),
how regression targets are scaled, the range its predictions are clipped to, and the test sets of other tasks its
model predicts. Fine-tuning reads only these fields, never a task's name, so a new task is data, not code.
Label ids follow the hub's order, so both sources give the same ids.

A GLUE folder (--glue-dir) may hold each task in one of three layouts, found per task:

    DIR/RTE/train.tsv, dev.tsv, test.tsv              the original TSVs (download_glue_data.py)
    DIR/rte/dataset_dict.json, train/, validation/    `datasets`' save_to_disk of nyu-mll/glue's config `rte`
    DIR/rte/train-00000-of-00001.parquet, ...         the Parquet files of the hub repo nyu-mll/glue (or of its
                                                      parquet export: DIR/rte/validation/0000.parquet)

Without a folder, tasks come from the hub dataset nyu-mll/glue through `datasets.load_dataset` (offline, with
HF_HUB_OFFLINE=1: from the local datasets cache).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from electra.utils.errors import InputError
from electra.utils.wording import argument

METRICS = ("mcc", "accuracy", "f1", "pearson", "spearman")

NLI3 = ("entailment", "neutral", "contradiction")  # hub order (OFF orders them differently; ids are ours)
NLI2 = ("entailment", "not_entailment")
BINARY = ("0", "1")


@dataclass(frozen=True)
class Split:
    """One file of a task: where it is in the GLUE folder and in the hub dataset."""

    file: str
    """Path relative to the task folder."""
    hub: str
    """Split name in the hub dataset."""
    suffix: str = ""
    """Appended to metric names (MNLI: `_m`, `_mm`)."""
    submission: str | None = None
    """GLUE server file name of the predictions on this (test) split."""


@dataclass(frozen=True)
class Task:
    name: str
    """Key in results.json: cola sst2 mrpc stsb qqp mnli qnli rte wnli ax, or a custom task's name."""
    folder: str
    """Folder under --glue-dir (CoLA, SST-2, ...); for a custom task the absolute folder."""
    text_a: str
    """Column names in the TSV header."""
    text_b: str | None
    label: str | None
    labels: tuple[str, ...] | None
    """Label strings in id order; None for regression."""
    metrics: tuple[str, ...]
    main_metric: str
    """Names the run in the summary line and picks the seed whose test predictions are submitted."""
    epochs: int
    """3, and 10 for RTE and STS-B (OFF configure_finetuning.py)."""
    train: Split | None = Split("train.tsv", "train")
    dev: tuple[Split, ...] = (Split("dev.tsv", "validation"),)
    test: tuple[Split, ...] = ()
    headerless: tuple[str, ...] | None = None
    """CoLA's train/dev files have no header row: the names of their columns."""
    hub_config: str | None = None
    hub_fields: tuple[str, str | None] = ("sentence1", "sentence2")
    hub_labels: tuple[str, ...] | None = None
    """The hub's ClassLabel names, checked when loading (their order is our id order)."""
    also_predict: tuple[str, ...] = ()
    """Test sets of other tasks predicted by this task's model, written with this task's labels (MNLI predicts
    AX, OFF classification_tasks.py MNLI.get_test_splits)."""
    unordered: bool = False
    """The two sentences' order carries no meaning (MRPC, STS-B): with finetune.swap_pairs, each training pair is
    also seen swapped (OFF double_unordered)."""
    target_scale: float = 1.0
    """Regression targets are divided by this for training when finetune.scale_targets (STS-B: 5, OFF
    RegressionTask normalises 0-5 scores to [0, 1]); predictions are multiplied back."""
    prediction_range: tuple[float, float] | None = None
    """Test predictions of a regression task are clipped to this range (STS-B: [0, 5], the server's scale)."""
    glue: bool = True
    """False for custom tasks: never part of the GLUE aggregates."""

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def num_outputs(self) -> int:
        return 1 if self.labels is None else len(self.labels)

    @property
    def metric_names(self) -> list[str]:
        """The names in results.json: metric + split suffix (MNLI: accuracy_m, accuracy_mm)."""
        return [m + s.suffix for s in self.dev for m in self.metrics]


def _glue_test(name: str) -> tuple[Split, ...]:
    return (Split("test.tsv", "test", submission=f"{name}.tsv"),)


# Epochs: 3, and 10 for RTE and STS-B (ELECTRA paper, appendix; OFF configure_finetuning.py).
TASKS: dict[str, Task] = {
    t.name: t
    for t in [
        Task(
            "cola",
            "CoLA",
            "sentence",
            None,
            "label",
            BINARY,
            ("mcc",),
            "mcc",
            3,
            test=_glue_test("CoLA"),
            headerless=("source", "label", "original_label", "sentence"),
            hub_config="cola",
            hub_fields=("sentence", None),
            hub_labels=("unacceptable", "acceptable"),
        ),
        Task(
            "sst2",
            "SST-2",
            "sentence",
            None,
            "label",
            BINARY,
            ("accuracy",),
            "accuracy",
            3,
            test=_glue_test("SST-2"),
            hub_config="sst2",
            hub_fields=("sentence", None),
            hub_labels=("negative", "positive"),
        ),
        Task(
            "mrpc",
            "MRPC",
            "#1 String",
            "#2 String",
            "Quality",
            BINARY,
            ("f1", "accuracy"),
            "accuracy",
            3,
            test=_glue_test("MRPC"),
            hub_config="mrpc",
            hub_labels=("not_equivalent", "equivalent"),
            unordered=True,
        ),
        Task(
            "stsb",
            "STS-B",
            "sentence1",
            "sentence2",
            "score",
            None,
            ("pearson", "spearman"),
            "spearman",
            10,
            test=_glue_test("STS-B"),
            hub_config="stsb",
            unordered=True,
            target_scale=5.0,
            prediction_range=(0.0, 5.0),
        ),
        Task(
            "qqp",
            "QQP",
            "question1",
            "question2",
            "is_duplicate",
            BINARY,
            ("f1", "accuracy"),
            "accuracy",
            3,
            test=_glue_test("QQP"),
            hub_config="qqp",
            hub_fields=("question1", "question2"),
            hub_labels=("not_duplicate", "duplicate"),
        ),
        Task(
            "mnli",
            "MNLI",
            "sentence1",
            "sentence2",
            "gold_label",
            NLI3,
            ("accuracy",),
            "accuracy_m",
            3,
            dev=(
                Split("dev_matched.tsv", "validation_matched", "_m"),
                Split("dev_mismatched.tsv", "validation_mismatched", "_mm"),
            ),
            test=(
                Split("test_matched.tsv", "test_matched", submission="MNLI-m.tsv"),
                Split("test_mismatched.tsv", "test_mismatched", submission="MNLI-mm.tsv"),
            ),
            hub_config="mnli",
            hub_fields=("premise", "hypothesis"),
            hub_labels=NLI3,
            also_predict=("ax",),
        ),
        Task(
            "qnli",
            "QNLI",
            "question",
            "sentence",
            "label",
            NLI2,
            ("accuracy",),
            "accuracy",
            3,
            test=_glue_test("QNLI"),
            hub_config="qnli",
            hub_fields=("question", "sentence"),
            hub_labels=NLI2,
        ),
        Task(
            "rte",
            "RTE",
            "sentence1",
            "sentence2",
            "label",
            NLI2,
            ("accuracy",),
            "accuracy",
            10,
            test=_glue_test("RTE"),
            hub_config="rte",
            hub_labels=NLI2,
        ),
        Task(
            "wnli",
            "WNLI",
            "sentence1",
            "sentence2",
            "label",
            BINARY,
            ("accuracy",),
            "accuracy",
            3,
            test=_glue_test("WNLI"),
            hub_config="wnli",
            hub_labels=("not_entailment", "entailment"),
        ),
        # The diagnostic set: test only, predicted by the MNLI model, scored by the server with R3 (MCC).
        Task(
            "ax",
            "diagnostic",
            "sentence1",
            "sentence2",
            None,
            NLI3,
            ("mcc",),
            "mcc",
            0,
            train=None,
            dev=(),
            test=(Split("diagnostic.tsv", "test", submission="AX.tsv"),),
            hub_config="ax",
            hub_fields=("premise", "hypothesis"),
            hub_labels=NLI3,
        ),
    ]
}

HUB_DATASET = "nyu-mll/glue"
"""The hub dataset the GLUE tasks come from without --glue-dir; its schema is the one of the hub layouts."""

GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")
"""The nine fine-tuning tasks in the usual order; `--tasks all`."""

AX_FOLDERS = ("diagnostic", "AX")
"""download_glue_data.py writes diagnostic/diagnostic.tsv; some mirrors use AX/diagnostic.tsv."""


Layout = Literal["tsv", "datasets", "parquet", "hub"]


@dataclass(frozen=True)
class TaskSpec:
    """A task as asked for on the command line, resolved to its registry entry and where its data is."""

    task: Task
    root: Path | None
    """The task's folder; None for the hub."""
    layout: Layout = "tsv"
    """tsv: the original files (or a custom task's); datasets: a save_to_disk folder; parquet: the hub repo's
    Parquet files; hub: `datasets.load_dataset(HUB_DATASET, task.hub_config)`."""
    extra: dict[str, TaskSpec] = field(default_factory=dict)
    """The tasks in `also_predict` that have data (MNLI -> AX), with where it is."""


def load_custom_task(folder: Path) -> Task:
    """A task described by `folder/task.json` (train.tsv, dev.tsv and optionally test.tsv beside it)."""
    path = folder / "task.json"
    raw = _read_json(path)
    required = {"name", "text_a", "text_b", "label", "labels", "metrics", "main_metric", "epochs"}
    if not isinstance(raw, dict) or required - raw.keys():
        raise InputError(f"{path}:1: task.json needs the keys {sorted(required)}")
    if raw.keys() - required - CUSTOM_OPTIONS:
        raise InputError(f"{path}:1: unknown keys {sorted(raw.keys() - required - CUSTOM_OPTIONS)}")
    name = raw["name"]
    if not isinstance(name, str) or not name or name in TASKS or any(c in name for c in "/\\ \t"):
        raise InputError(f"{path}:1: name {name!r} must be a plain name, not a GLUE task name")
    for key in ("text_a", "label"):
        if not isinstance(raw[key], str) or not raw[key]:
            raise InputError(f"{path}:1: {key} must name a column, got {raw[key]!r}")
    if raw["text_b"] is not None and (not isinstance(raw["text_b"], str) or not raw["text_b"]):
        raise InputError(f"{path}:1: text_b must name a column, or be null (single sentences)")
    labels = raw["labels"]
    names = None if labels is None else _label_names(labels)
    if labels is not None and names is None:
        raise InputError(f"{path}:1: labels must be null (regression) or a list of at least 2 distinct strings")
    metrics = raw["metrics"]
    if not isinstance(metrics, list) or not metrics or not all(m in METRICS for m in metrics):
        raise InputError(f"{path}:1: metrics must be a non-empty list drawn from {list(METRICS)}")
    regression_only, classification_only = {"pearson", "spearman"}, {"mcc", "accuracy", "f1"}
    if set(metrics) & (classification_only if labels is None else regression_only):
        kind = "regression" if labels is None else "classification"
        raise InputError(f"{path}:1: metrics {metrics} do not fit a {kind} task")
    if "f1" in metrics and labels is not None and len(labels) != 2:
        raise InputError(f"{path}:1: f1 needs exactly two labels (the second is the positive class)")
    if raw["main_metric"] not in metrics:
        raise InputError(f"{path}:1: main_metric {raw['main_metric']!r} is not one of metrics {metrics}")
    if not isinstance(raw["epochs"], int) or isinstance(raw["epochs"], bool) or raw["epochs"] < 1:
        raise InputError(f"{path}:1: epochs must be a positive integer")
    test = (Split("test.tsv", "test"),) if (folder / "test.tsv").exists() else ()
    return Task(
        name=name,
        folder=str(folder),
        text_a=raw["text_a"],
        text_b=raw["text_b"],
        label=raw["label"],
        labels=names,
        metrics=tuple(metrics),
        main_metric=raw["main_metric"],
        epochs=raw["epochs"],
        test=test,
        glue=False,
        **_custom_options(raw, path),
    )


def _label_names(labels) -> tuple[str, ...] | None:
    """The label strings of task.json's `labels` (numbers as their str(): 1 -> "1"); None unless it is a list of at
    least 2 strings or numbers, distinct as strings ([1, "1"] would be two labels called "1")."""
    if not isinstance(labels, list) or not all(isinstance(x, (str, int, float)) for x in labels):
        return None
    names = tuple(str(x) for x in labels)
    return names if len(names) >= 2 and len(set(names)) == len(names) else None


def _read_json(path: Path):
    """The JSON value in `path`; anything that is not UTF-8 JSON is an InputError naming the file and line."""
    data = path.read_bytes()
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: not valid UTF-8 (byte {data[err.start]:#04x})") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{err.lineno}: not valid JSON: {err.msg}") from None
    except (ValueError, RecursionError) as err:  # a 5000-digit number, deep nesting
        raise InputError(f"{path}:1: not valid JSON ({type(err).__name__}: {err})") from None


CUSTOM_OPTIONS = {"unordered", "target_scale", "prediction_range"}
"""Optional task.json keys: the Task fields of the same names."""


def _custom_options(raw: dict, path: Path) -> dict:
    """The optional task.json keys, checked: unordered (pair tasks), target_scale and prediction_range (regression)."""
    options = {k: raw[k] for k in CUSTOM_OPTIONS if k in raw}
    if not isinstance(options.get("unordered", False), bool):
        raise InputError(f"{path}:1: unordered must be true or false")
    if options.get("unordered") and raw["text_b"] is None:
        raise InputError(f"{path}:1: unordered needs a pair task (text_b names a column)")
    if raw["labels"] is not None and options.keys() & {"target_scale", "prediction_range"}:
        raise InputError(f"{path}:1: target_scale and prediction_range are for regression tasks (labels: null)")

    def number(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    scale = options.get("target_scale", 1.0)
    if not number(scale) or not 0 < scale < math.inf:  # NaN and inf would silently zero every target
        raise InputError(f"{path}:1: target_scale must be a positive number, got {scale!r}")
    if "target_scale" in options:
        options["target_scale"] = float(scale)
    bounds = options.get("prediction_range")
    if bounds is not None:
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(map(number, bounds)) and bounds[0] < bounds[1]):
            raise InputError(f"{path}:1: prediction_range must be [low, high] with low < high, got {bounds!r}")
        options["prediction_range"] = (float(bounds[0]), float(bounds[1]))
    return options


def resolve_tasks(names: str | list[str], glue_dir: str | Path | None) -> tuple[list[TaskSpec], list[str]]:
    """Task names (all, GLUE names, or task folders holding task.json; a list or a comma-separated string) -> the
    tasks to run, and the GLUE tasks of `all` skipped because their data is not in `glue_dir`.

    A task named explicitly whose folder or files are missing is an error; `all` means all that have data.
    `glue_dir` may name several folders, os.pathsep-separated (glue_roots): each task is taken from the first
    that holds it, so tasks kept in different places need no folder of symlinks.
    """
    roots = glue_roots(glue_dir)
    items = [x.strip() for x in (names.split(",") if isinstance(names, str) else names) if x.strip()]
    if not items:
        raise ValueError(f"no tasks given ({argument('tasks')} is empty)")
    specs: list[TaskSpec] = []
    skipped: list[str] = []
    for item in items:
        if item.lower() == "all":
            for name in GLUE_TASKS:
                spec = _glue_spec_in(TASKS[name], roots, strict=False)
                if spec is None:
                    skipped.append(name)
                else:
                    specs.append(spec)
        elif item.lower() in TASKS:
            task = TASKS[item.lower()]
            if task.train is None:
                raise ValueError(
                    f"{item}: a test-only diagnostic set; run mnli with {argument('finetune.predict_test', True)} "
                    "to predict it"
                )
            specs.append(_glue_spec_in(task, roots, strict=True))
        elif (Path(item) / "task.json").exists():
            folder = Path(item).resolve()
            task = load_custom_task(folder)
            _check_files(task, folder, strict=True)
            specs.append(TaskSpec(task, folder))
        else:
            known = ", ".join(GLUE_TASKS)
            raise ValueError(f"unknown task {item!r}: expected all, one of {known}, or a folder with a task.json")
    seen: set[str] = set()
    for spec in specs:
        if spec.task.name in seen:
            raise ValueError(f"task {spec.task.name!r} is listed twice in {argument('tasks')}")
        seen.add(spec.task.name)
    return specs, skipped


def glue_roots(glue_dir: str | Path | None) -> list[Path | None]:
    """The GLUE folders of `glue_dir`: one, or several joined by os.pathsep (`--glue-dir` given more than once);
    [None] for the hub. A name that is not a folder fails in one line."""
    if glue_dir is None:
        return [None]
    roots = [Path(p) for p in str(glue_dir).split(os.pathsep) if p]
    for root in roots:
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: {argument('glue_dir')} is not a folder")
    return roots or [None]


def _glue_spec_in(task: Task, roots: list[Path | None], strict: bool) -> TaskSpec | None:
    """`task` from the first of `roots` that holds its data; strict: missing everywhere is an error (naming the
    first folder's missing files, or all the folders)."""
    for root in roots:
        spec = _glue_spec(task, root, strict=False)
        if spec is not None:
            return spec
    if strict and len(roots) > 1:
        raise FileNotFoundError(f"{task.name}: no data in any {argument('glue_dir')} ({', '.join(map(str, roots))})")
    return _glue_spec(task, roots[0], strict) if strict else None


def _glue_spec(task: Task, glue_root: Path | None, strict: bool) -> TaskSpec | None:
    if glue_root is None:  # the HF hub has every task
        return TaskSpec(task, None, "hub", {name: TaskSpec(TASKS[name], None, "hub") for name in task.also_predict})
    spec = _locate(task, glue_root, strict)
    if spec is None:
        return None
    located = {name: _locate(TASKS[name], glue_root, strict=False) for name in task.also_predict}
    return replace(spec, extra={name: s for name, s in located.items() if s is not None})


def _locate(task: Task, glue_root: Path, strict: bool) -> TaskSpec | None:
    """The task's data under `glue_root` in whichever layout holds it (the TSVs first); when `strict`, raise
    naming what is missing."""
    folders = [glue_root / task.folder] if task.train else [glue_root / name for name in AX_FOLDERS]
    for folder in folders:
        if _check_files(task, folder, strict=False):
            return TaskSpec(task, folder, "tsv")
    hub_folder = glue_root / task.hub_config if task.hub_config else None
    if hub_folder is not None and hub_folder.is_dir():
        layout = hub_layout(task, hub_folder, strict)
        return None if layout is None else TaskSpec(task, hub_folder, layout)
    if strict and folders[0].is_dir():
        _check_files(task, folders[0], strict=True)  # raises naming the missing file
    if strict:
        also = f", nor {hub_folder} (save_to_disk or Parquet)" if hub_folder is not None else ""
        raise FileNotFoundError(f"{folders[0]}: no such task folder (task {task.name}){also}")
    return None


def required_splits(task: Task) -> list[Split]:
    """The splits a task cannot run without: train and dev (a test-only set such as AX: its test split)."""
    return [s for s in (task.train, *task.dev) if s is not None] or list(task.test)


def parquet_files(folder: Path, split: str) -> list[Path]:
    """A split's Parquet files in the hub repo's layout (SPLIT-00000-of-00001.parquet) or its parquet export's
    (SPLIT/0000.parquet)."""
    return sorted(folder.glob(f"{split}-*.parquet")) or sorted((folder / split).glob("*.parquet"))


def saved_splits(folder: Path) -> list[str] | None:
    """The splits of a folder written by `DatasetDict.save_to_disk`; None when it is not one."""
    path = folder / "dataset_dict.json"
    if not path.is_file():
        return None
    raw = _read_json(path)
    splits = raw.get("splits") if isinstance(raw, dict) else None
    if not isinstance(splits, list) or not all(isinstance(x, str) for x in splits):
        raise InputError(f"{path}:1: not a `datasets` DatasetDict description (no list of split names 'splits')")
    return splits


def hub_layout(task: Task, folder: Path, strict: bool) -> Layout | None:
    """The layout ("datasets" or "parquet") in which `folder` holds the task's splits, else None; when `strict`,
    raise naming the missing split."""
    needed = [s.hub for s in required_splits(task)]
    splits = saved_splits(folder)
    if splits is not None:
        layout: Layout = "datasets"
        missing = [s for s in needed if s not in splits]
    else:
        layout = "parquet"
        missing = [s for s in needed if not parquet_files(folder, s)]
    if missing and strict:
        have = f"splits {splits}" if splits is not None else "Parquet files named SPLIT-*.parquet or SPLIT/*.parquet"
        raise FileNotFoundError(f"{folder}: no split {missing[0]!r} (task {task.name} needs it; found {have})")
    return None if missing else layout


def _check_files(task: Task, folder: Path, strict: bool) -> bool:
    """True when the training and dev files are there; when `strict`, raise naming the first one missing."""
    if not folder.is_dir():
        if strict:
            raise FileNotFoundError(f"{folder}: no such task folder (task {task.name})")
        return False
    for split in required_splits(task):
        if not (folder / split.file).exists():
            if strict:
                raise FileNotFoundError(f"{folder / split.file}: missing (task {task.name} needs it)")
            return False
    return True
