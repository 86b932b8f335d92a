"""Bad input, fuzzed (hypothesis): every generated GLUE TSV, custom task.json, corpus .txt/.jsonl, YAML config,
`--set` override and `--set finetune.*` override either loads or fails with the project's own error type and a
message naming the file and line (or the key); never another exception, never a hang (a deadline per input).

The test_fuzzed_* tests run FAST_EXAMPLES inputs per reader, the same ones every time (derandomized); the
test_many_fuzzed_* ones SLOW_EXAMPLES fresh ones. Both are marked slow (the first kind takes ~20 s together): `make
test` runs them, `make test-fast` runs only the named cases. Each test counts what it saw; run with -s for the
summary.
Out-of-range config values are refused before any work starts, naming the key (the table at the end).

What the fuzzing found in the GLUE readers (electra/glue) is kept as named cases at the end of the file.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import re
import types
import typing
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from electra.config import (
    ConfigError,
    DataConfig,
    FinetuneConfig,
    ModelConfig,
    ObjectiveConfig,
    PretrainConfig,
    TrainConfig,
    load_config,
    load_finetune_config,
)
from electra.data.sources import read_documents, resolve_inputs
from electra.glue.loading import Example, read_tsv
from electra.glue.tasks import METRICS, TASKS, Task, load_custom_task
from electra.utils.errors import InputError

FAST_EXAMPLES = int(os.environ.get("ELECTRA_FUZZ_EXAMPLES", "300"))
SLOW_EXAMPLES = int(os.environ.get("ELECTRA_FUZZ_EXAMPLES_SLOW", "5000"))
FAST = settings(
    max_examples=FAST_EXAMPLES,
    deadline=timedelta(seconds=5),
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SLOW = settings(FAST, max_examples=SLOW_EXAMPLES, derandomize=False)
SEEN: collections.Counter = collections.Counter()
"""(reader, "loaded" | "refused") -> inputs seen."""


@pytest.fixture(scope="module", autouse=True)
def _summary():
    yield
    readers = sorted({reader for reader, _ in SEEN})
    for reader in readers:
        loaded, refused = SEEN[(reader, "loaded")], SEEN[(reader, "refused")]
        print(
            f"\nfuzz {reader}: {loaded + refused} inputs, {loaded} loaded, {refused} refused with a located "
            "message, 0 unhandled exceptions"
        )


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


# -- strategies -------------------------------------------------------------------------------------------------

ODD_TEXT = [
    "",
    " ",
    '"',
    "'",
    "\t",
    "\r",
    "\n",
    "\r\n",
    "\x00",
    "\ufeff",
    "\u2028",
    "\x85",
    "é",
    "\U0001f600",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e400",
    "-1",
    "0",
    "3.5",
    "#",
    "null",
    "[",
    "{",
    "- x",
    "a: b",
    "!!python/object/apply:os.system ['touch pwned']",
    "1" * 5000,
    "2020-02-30",
    "[" * 3000,
]
scalar = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12), st.sampled_from(ODD_TEXT)
)
json_value = st.recursive(
    scalar, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4), max_leaves=12
)
cell = st.one_of(st.text(max_size=20), st.sampled_from(ODD_TEXT))


@st.composite
def glue_tsv(draw) -> tuple[str, bool, bytes]:
    """(task name, labelled, file bytes): a well-formed file of the task (its columns in any order, extra ones,
    labels from its label set) with 0-3 things broken in it (a cell, a row's width, the header, a line ending), or
    any text at all."""
    task = draw(st.sampled_from(sorted(TASKS)))
    t = TASKS[task]
    labelled = t.label is not None and draw(st.booleans())
    if draw(st.integers(0, 19)) == 0:
        return task, labelled, draw(st.text(max_size=300)).encode("utf-8")
    columns = [c for c in ("index", t.text_a, t.text_b, t.label if labelled else None) if c]
    columns += draw(st.lists(st.sampled_from(["id", "genre", "label1", "#1 ID"]), max_size=2, unique=True))
    columns = draw(st.permutations(columns))
    labels = list(t.labels or ("0.0", "2.5", "5", "-1e-3"))
    text = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=20)

    def valid_cell(column: str) -> str:
        if column == t.label:
            return draw(st.sampled_from(labels))
        if column in (t.text_a, t.text_b):
            return draw(text.filter(str.strip))
        return draw(st.text("0123456789", max_size=4))

    rows = [[valid_cell(c) for c in columns] for _ in range(draw(st.integers(1, 5)))]
    header = not (t.headerless and labelled)
    if t.headerless and labelled:  # CoLA's files: the registry's column order, no header line
        rows = [[valid_cell(c) for c in t.headerless] for _ in rows]
    for _ in range(draw(st.integers(0, 3))):  # break something
        row = draw(st.integers(0, len(rows) - 1))
        kind = draw(st.sampled_from(["cell", "cell", "drop", "add", "header", "empty"]))
        if kind == "cell" and rows[row]:
            rows[row][draw(st.integers(0, len(rows[row]) - 1))] = draw(cell)
        elif kind == "drop" and rows[row]:
            rows[row].pop()
        elif kind == "add":
            rows[row].append(draw(cell))
        elif kind == "header":
            header = False
        else:
            rows[row] = []
    lines = (["\t".join(columns)] if header else []) + ["\t".join(r) for r in rows]
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    data = draw(st.sampled_from(["", "\ufeff"])) + ending.join(lines) + draw(st.sampled_from([ending, "", "\n\n"]))
    return task, labelled, data.encode("utf-8")


CUSTOM_VALID = [
    {
        "name": "my-task",
        "text_a": "sentence",
        "text_b": None,
        "label": "label",
        "labels": ["0", "1"],
        "metrics": ["accuracy", "mcc"],
        "main_metric": "accuracy",
        "epochs": 3,
    },
    {
        "name": "pairs",
        "text_a": "s1",
        "text_b": "s2",
        "label": "y",
        "labels": ["no", "yes"],
        "metrics": ["f1"],
        "main_metric": "f1",
        "epochs": 2,
        "unordered": True,
    },
    {
        "name": "score",
        "text_a": "s1",
        "text_b": "s2",
        "label": "score",
        "labels": None,
        "metrics": ["pearson", "spearman"],
        "main_metric": "spearman",
        "epochs": 10,
        "target_scale": 5.0,
        "prediction_range": [0, 5],
    },
    {
        "name": "three",
        "text_a": "t",
        "text_b": None,
        "label": "l",
        "labels": ["a", "b", "c"],
        "metrics": ["accuracy"],
        "main_metric": "accuracy",
        "epochs": 1,
    },
]
CUSTOM_VALUES = {
    "name": st.sampled_from(["", "rte", "a/b", "a b", "ok"]),
    "labels": st.lists(scalar | st.sampled_from(["0", "1", "2"]), max_size=4),
    "metrics": st.lists(st.sampled_from(METRICS) | scalar, max_size=3),
    "main_metric": st.sampled_from(METRICS),
    "epochs": st.integers(-1, 5),
    "unordered": st.booleans(),
    "target_scale": st.floats(),
    "prediction_range": st.lists(st.floats() | scalar, max_size=3),
}


@st.composite
def task_json(draw) -> bytes:
    """A task.json: a valid one (classification, pairs, regression) with 0-3 keys changed to plausible or random
    values, dropped or added; or any JSON value, or any text."""
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return draw(st.text(max_size=200)).encode("utf-8")
    if kind == 1:
        return json.dumps(draw(json_value)).encode()
    raw = dict(draw(st.sampled_from(CUSTOM_VALID)))
    keys = sorted({*CUSTOM_VALID[0], "unordered", "target_scale", "prediction_range"})
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from([*keys, "extra"]))
        change = draw(st.sampled_from(["plausible", "random", "drop"]))
        if change == "drop":
            raw.pop(key, None)
        else:
            raw[key] = draw(CUSTOM_VALUES.get(key, scalar) if change == "plausible" else scalar)
    return json.dumps(raw, indent=draw(st.sampled_from([None, 1]))).encode()


SECTIONS = {"model": ModelConfig, "objective": ObjectiveConfig, "data": DataConfig, "train": TrainConfig}
CONFIG_KEYS = [f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
FINETUNE_KEYS = [f"finetune.{f.name}" for f in dataclasses.fields(FinetuneConfig)]
FIELD_TYPES = {f"{s}.{k}": tp for s, cls in SECTIONS.items() for k, tp in typing.get_type_hints(cls).items()}
FIELD_TYPES |= {f"finetune.{k}": tp for k, tp in typing.get_type_hints(FinetuneConfig).items()}
FIELD_TYPES["finetune.epochs"] = int | None  # (hinted int | None; as the others)


def plausible(key: str) -> st.SearchStrategy:
    """Values of the key's type near its default (so that many configs load), sometimes out of range."""
    tp = FIELD_TYPES.get(key)
    args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    section, _, name = key.partition(".")
    owner = FinetuneConfig if section == "finetune" else SECTIONS.get(section)
    default = getattr(owner(), name, None) if owner is not None else None
    out: list[st.SearchStrategy] = [st.none()] if type(None) in args else []
    for t in (t for t in args if t is not type(None)):
        if typing.get_origin(t) is typing.Literal:
            out.append(st.sampled_from(typing.get_args(t)))
        elif t is bool:
            out.append(st.booleans())
        elif t is int:
            d = default if isinstance(default, int) and not isinstance(default, bool) and default > 0 else 8
            out.append(st.sampled_from(sorted({d, max(1, d // 2), 2 * d, 1})) | st.integers(-2, 2 * d))
        elif t is float:
            d = default if isinstance(default, float) and default > 0 else 0.5
            out.append(st.sampled_from(sorted({d, d / 2, min(2 * d, 0.99) if d < 1 else 2 * d})) | st.floats(-1, 2))
        elif t is str:
            out.append(st.text(max_size=8))
    return st.one_of(*out) if out else scalar


def any_value(key: str) -> st.SearchStrategy:
    return plausible(key) | plausible(key) | config_value


config_value = st.one_of(
    scalar,
    st.integers(-3, 300),
    st.floats(-2, 2),
    st.lists(scalar, max_size=3),
    st.dictionaries(st.text(max_size=5), scalar, max_size=2),
)


@st.composite
def preset_yaml(draw) -> bytes:
    """A preset file: sections and keys (real ones, misspelt ones) with values of their type or random ones, dumped
    as YAML; or that YAML cut short, or any text."""
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return draw(st.text(max_size=300)).encode("utf-8")
    raw: dict = {}
    real = st.sampled_from(CONFIG_KEYS)
    for key in draw(st.lists(real | real | real | st.text(max_size=8), max_size=6)):
        section, _, name = key.partition(".")
        if name:
            node = raw.setdefault(section, {})
            if isinstance(node, dict):
                node[name] = draw(any_value(key))
        else:
            raw[section] = draw(config_value)
    text = yaml.safe_dump(raw, allow_unicode=True)
    if kind == 1:
        text = text[: draw(st.integers(0, len(text)))] + draw(st.sampled_from(ODD_TEXT))
    return text.encode("utf-8")


def _yaml_scalar(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True, allow_unicode=True).strip().removesuffix("...").strip()


@st.composite
def override(draw, keys: list[str]) -> str:
    """One `key=value`: mostly a real key with a value of its type, written as YAML; sometimes anything."""
    key = draw(st.sampled_from(keys) | st.sampled_from(keys) | st.sampled_from(keys) | st.text(max_size=10))
    value = draw(any_value(key).map(_yaml_scalar) | st.sampled_from(ODD_TEXT) | st.text(max_size=12))
    return f"{key}{draw(st.sampled_from(['='] * 8 + [' = ', '']))}{value}"


# -- what counts as a good refusal --------------------------------------------------------------------------------


def located(message: str, path: Path, line_required: bool = True) -> bool:
    pattern = rf"^{re.escape(str(path))}:\d+: " if line_required else rf"^{re.escape(str(path))}[:/ ]"
    return re.search(pattern, message) is not None and "\n" not in message.strip()


def names_a_key(message: str, keys: list[str]) -> bool:
    return any(key in message for key in keys)


# -- the readers ----------------------------------------------------------------------------------------------


def check_glue_tsv(scratch: Path, case: tuple[str, bool, bytes]) -> None:
    task, labelled, data = case
    path = scratch / "task.tsv"
    path.write_bytes(data)
    try:
        examples = read_tsv(path, TASKS[task], labelled=labelled)
    except InputError as err:
        assert located(str(err), path), str(err)
        SEEN[("GLUE read_tsv", "refused")] += 1
        return
    assert examples and all(isinstance(e, Example) and e.text_a.strip() for e in examples)
    SEEN[("GLUE read_tsv", "loaded")] += 1


def check_task_json(scratch: Path, data: bytes) -> None:
    folder = scratch / "custom"
    folder.mkdir(exist_ok=True)
    (folder / "task.json").write_bytes(data)
    try:
        task = load_custom_task(folder)
    except InputError as err:
        assert located(str(err), folder / "task.json"), str(err)
        SEEN[("GLUE load_custom_task", "refused")] += 1
        return
    assert isinstance(task, Task) and task.main_metric in task.metrics
    SEEN[("GLUE load_custom_task", "loaded")] += 1


def check_corpus(scratch: Path, suffix: str, data: bytes) -> None:
    path = scratch / f"corpus{suffix}"
    path.write_bytes(data)
    try:
        docs = list(read_documents(resolve_inputs([str(path)])))
    except InputError as err:
        # .jsonl: the line; empty files and files without text: the file
        assert located(
            str(err),
            path,
            line_required=suffix == ".jsonl" and "no text" not in str(err) and "empty input" not in str(err),
        ), str(err)
        SEEN[(f"corpus {suffix}", "refused")] += 1
        return
    assert docs and all(doc and all(line and line == line.strip() for line in doc) for doc in docs)
    SEEN[(f"corpus {suffix}", "loaded")] += 1


def jsonl_line() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.builds(lambda t: json.dumps({"text": t}).encode(), st.text(max_size=40)),
        st.builds(lambda t: json.dumps({"text": t}, ensure_ascii=False).encode("utf-8"), st.text(max_size=40)),
        json_value.map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=40),
        st.sampled_from(
            [
                b"",
                b" ",
                b"1" * 5000,
                b"[" * 5000,
                b'{"text": "a\\ud800"}',
                b'{"text": 1}',
                b'{"text": "\xff\xfe"}',
                b'{"text": "x"} trailing',
            ]
        ),
    )


def check_preset(scratch: Path, data: bytes) -> None:
    path = scratch / "preset.yaml"
    path.write_bytes(data)
    try:
        cfg = load_config(path)
    except ConfigError as err:
        assert str(path) in str(err) or names_a_key(str(err), CONFIG_KEYS), str(err)
        SEEN[("config YAML file", "refused")] += 1
        return
    assert isinstance(cfg, PretrainConfig)
    SEEN[("config YAML file", "loaded")] += 1


def check_overrides(items: list[str], finetune: bool) -> None:
    reader, keys = ("--set finetune.*", FINETUNE_KEYS) if finetune else ("--set", CONFIG_KEYS)
    try:
        cfg = load_finetune_config(None, items) if finetune else load_config("tiny", items)
    except ConfigError as err:
        assert any(repr(item) in str(err) for item in items) or names_a_key(str(err), keys), str(err)
        SEEN[(reader, "refused")] += 1
        return
    assert isinstance(cfg, FinetuneConfig if finetune else PretrainConfig)
    SEEN[(reader, "loaded")] += 1


# -- the same FAST_EXAMPLES inputs per reader every run -----------------------------------------------------------


@pytest.mark.slow
@FAST
@given(case=glue_tsv())
def test_fuzzed_glue_tsv_loads_or_is_refused_naming_file_and_line(scratch, case):
    check_glue_tsv(scratch, case)


@pytest.mark.slow
@FAST
@given(data=task_json())
@example(
    data=b'{"name": "x", "text_a": "a", "text_b": null, "label": "l", "labels": ["0", "1"], '
    b'"metrics": ["accuracy"], "main_metric": "accuracy", "epochs": 3}'
)
def test_fuzzed_custom_task_json_loads_or_is_refused_naming_the_file(scratch, data):
    check_task_json(scratch, data)


@pytest.mark.slow
@FAST
@given(data=st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_fuzzed_txt_corpus_loads_or_is_refused_naming_the_file(scratch, data):
    check_corpus(scratch, ".txt", data)


@pytest.mark.slow
@FAST
@given(lines=st.lists(jsonl_line(), max_size=6), ending=st.sampled_from([b"\n", b"\r\n"]))
@example(lines=[b'{"text": "ok"}', b"[" * 5000], ending=b"\n")
@example(lines=[b"1" * 5000], ending=b"\n")
def test_fuzzed_jsonl_corpus_loads_or_is_refused_naming_file_and_line(scratch, lines, ending):
    check_corpus(scratch, ".jsonl", ending.join(lines))


@pytest.mark.slow
@FAST
@given(data=preset_yaml())
@example(data=b"train:\n  lr: " + b"1" * 5000 + b"\n")
@example(data=b"train: \xff\n")
@example(data=b"[" * 3000)
def test_fuzzed_config_file_loads_or_is_refused_naming_the_file_or_key(scratch, data):
    check_preset(scratch, data)


@pytest.mark.slow
@FAST
@given(items=st.lists(override(CONFIG_KEYS), min_size=1, max_size=3))
@example(items=["train.lr=" + "1" * 5000])  # what the fuzzing found: YAML's int() and date parsing raise ValueError
@example(items=["train.seed=2020-02-30"])
@example(items=["model.num_heads=0"])  # a ZeroDivisionError in validate, before the ranges were checked first
@example(items=["objective.masking=bernoulli", "objective.mask_prob=-3"])  # a complex number in num_mask_slots
def test_fuzzed_set_overrides_load_or_are_refused_naming_the_key(items):
    check_overrides(items, finetune=False)


@pytest.mark.slow
@FAST
@given(items=st.lists(override(FINETUNE_KEYS), min_size=1, max_size=3))
@example(items=["finetune.lr=" + "1" * 5000])
@example(items=["finetune.lr=" + "[" * 3000])
def test_fuzzed_finetune_overrides_load_or_are_refused_naming_the_key(items):
    check_overrides(items, finetune=True)


# -- slow: SLOW_EXAMPLES fresh inputs per reader ---------------------------------------------------------------------


@pytest.mark.slow
@SLOW
@given(case=glue_tsv())
def test_many_fuzzed_glue_tsv(scratch, case):
    check_glue_tsv(scratch, case)


@pytest.mark.slow
@SLOW
@given(data=task_json())
def test_many_fuzzed_custom_task_json(scratch, data):
    check_task_json(scratch, data)


@pytest.mark.slow
@SLOW
@given(data=st.binary(max_size=2000) | st.text(max_size=2000).map(str.encode))
def test_many_fuzzed_txt_corpus(scratch, data):
    check_corpus(scratch, ".txt", data)


@pytest.mark.slow
@SLOW
@given(lines=st.lists(jsonl_line(), max_size=12), ending=st.sampled_from([b"\n", b"\r\n"]))
def test_many_fuzzed_jsonl_corpus(scratch, lines, ending):
    check_corpus(scratch, ".jsonl", ending.join(lines))


@pytest.mark.slow
@SLOW
@given(data=preset_yaml())
def test_many_fuzzed_config_files(scratch, data):
    check_preset(scratch, data)


@pytest.mark.slow
@SLOW
@given(items=st.lists(override(CONFIG_KEYS), min_size=1, max_size=3))
def test_many_fuzzed_set_overrides(items):
    check_overrides(items, finetune=False)


@pytest.mark.slow
@SLOW
@given(items=st.lists(override(FINETUNE_KEYS), min_size=1, max_size=3))
def test_many_fuzzed_finetune_overrides(items):
    check_overrides(items, finetune=True)


# -- what the fuzzing found in the GLUE readers ----------------------------------------------------------------------

RTE_HEADER = b"index\tsentence1\tsentence2\tlabel\n"


def test_glue_tsv_with_invalid_utf8_is_refused_naming_file_and_line(scratch):
    # was: UnicodeDecodeError from the csv reader's iteration, without the file or line
    check_glue_tsv(scratch, ("rte", True, RTE_HEADER + b"0\tok\tbad \xff byte\tentailment\n"))
    with pytest.raises(InputError, match=r"task.tsv:2: not valid UTF-8 \(byte 0xff"):
        read_tsv(scratch / "task.tsv", TASKS["rte"])
    (scratch / "task.tsv").write_bytes(RTE_HEADER + b"0\ta\tb\tentailment\r1\tok\t\xff\tentailment\n")
    with pytest.raises(InputError, match=r"task.tsv:3: not valid UTF-8 \(byte 0xff"):
        read_tsv(scratch / "task.tsv", TASKS["rte"])  # a lone \r ends a line for csv too


def test_glue_tsv_with_a_huge_cell_is_refused_naming_file_and_line(scratch):
    # was: _csv.Error (not a ValueError: the CLI printed a traceback)
    check_glue_tsv(scratch, ("rte", True, RTE_HEADER + b"0\tok\t" + b"x" * 200_000 + b"\tentailment\n"))
    with pytest.raises(InputError, match=r"task.tsv:2: field larger than field limit"):
        read_tsv(scratch / "task.tsv", TASKS["rte"])


CUSTOM = {
    "name": "x",
    "text_a": "a",
    "text_b": None,
    "label": "l",
    "labels": ["0", "1"],
    "metrics": ["accuracy"],
    "main_metric": "accuracy",
    "epochs": 3,
}


def test_custom_task_with_unhashable_labels_is_refused(scratch):
    check_task_json(scratch, json.dumps({**CUSTOM, "labels": [["0"], ["1"]]}).encode())  # was: TypeError


def test_custom_task_with_unhashable_metrics_is_refused(scratch):
    check_task_json(scratch, json.dumps({**CUSTOM, "metrics": [["accuracy"]]}).encode())  # was: TypeError


def test_custom_task_with_invalid_utf8_is_refused(scratch):
    check_task_json(scratch, b'{"name": "\xff"}')  # was: UnicodeDecodeError from read_text, without the file


def test_custom_task_nested_too_deeply_is_refused(scratch):
    check_task_json(scratch, b"[" * 100_000)  # was: RecursionError


def test_custom_task_labels_equal_as_strings_are_refused(scratch):
    """[1, "1"] passed the distinctness check before str() made them equal: a task with two labels called "1"."""
    folder = scratch / "dup"
    folder.mkdir(exist_ok=True)
    (folder / "task.json").write_text(json.dumps({**CUSTOM, "labels": [1, "1"]}))
    with pytest.raises(InputError, match="labels must be"):
        load_custom_task(folder)


# -- out-of-range config values: refused before any work, naming the key ------------------------------------------

OUT_OF_RANGE = [
    ("train.lr=-1e-3", "train.lr must be > 0"),
    ("train.lr=.nan", "train.lr must be > 0"),
    ("objective.mask_prob=0", "objective.mask_prob must be in (0, 1)"),
    ("objective.mask_prob=1", "objective.mask_prob must be in (0, 1)"),
    ("model.generator_fraction=0", "model.generator_fraction must be in (0, 1]"),
    ("model.generator_fraction=1.5", "model.generator_fraction must be in (0, 1]"),
    ("train.max_steps=-5", "train.max_steps must be >= 1"),
    ("train.warmup_steps=-1", "train.warmup_steps must be >= 0"),
    ("data.eval_fraction=1", "data.eval_fraction must be in [0, 1)"),
    ("data.eval_fraction=-0.1", "data.eval_fraction must be in [0, 1)"),
    ("train.batch_size=0", "train.batch_size must be >= 1"),
    ("train.micro_batch_size=3", "train.micro_batch_size 3 does not divide train.batch_size 32"),
    ("train.log_every=0", "train.log_every must be >= 1"),
    ("train.save_every=0", "train.save_every must be >= 1"),
    ("train.eval_every=0", "train.eval_every must be >= 1"),
    ("model.num_heads=0", "model.num_heads must be >= 1"),
    ("model.dropout=1", "model.dropout must be in [0, 1)"),
    ("train.beta2=1", "train.beta2 must be in [0, 1)"),
    ("train.grad_clip=0", "train.grad_clip must be > 0"),
    ("train.seed=-1", "train.seed must be >= 0"),
    ("objective.temperature=.inf", "objective.temperature must be > 0"),
    ("objective.masking=bernoulli", None),
    ("model.generator_fraction=1.0", None),
]


@pytest.mark.parametrize("item, message", OUT_OF_RANGE)
def test_out_of_range_values_are_refused_naming_the_key(item, message):
    if message is None:
        load_config("tiny", [item])  # in range: loads
        return
    with pytest.raises(ConfigError) as err:
        load_config("tiny", [item])
    assert str(err.value).startswith(message)


def test_a_batch_that_does_not_divide_over_the_processes_is_refused_before_any_work(tmp_path, monkeypatch):
    import electra.training.loop as pretrain_module

    monkeypatch.setattr(pretrain_module, "init_distributed", lambda device: (0, 3, __import__("torch").device("cpu")))
    opened = []
    monkeypatch.setattr(pretrain_module, "open_pretraining_data", lambda *a: opened.append(a))
    with pytest.raises(ConfigError, match="train.batch_size 32 does not divide over 3 processes"):
        pretrain_module.pretrain(load_config("tiny"), tmp_path / "run")
    assert not opened and not (tmp_path / "run").exists()


def test_every_preset_and_recipe_is_in_range():
    from electra.config import preset_names, recipe_names

    for name in preset_names():
        assert load_config(name).model.generator_fraction <= 1
    for name in recipe_names():
        assert math.isfinite(load_finetune_config(name).lr)
