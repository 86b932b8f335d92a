"""GLUE loading and inputs: every task's loader on format-exact fixture files, the hub conversion, bad input, the
real GLUE files when present (tests/glue_fixtures.py GLUE_DATA), and the [CLS] A [SEP] B [SEP] encoding with
truncation and padding."""

from __future__ import annotations

import json

import numpy as np
import pytest

from electra.glue.features import collate, encode, eval_batches, truncate_pair
from electra.glue.loading import Example, examples_from_hub, load_task, read_tsv
from electra.glue.tasks import GLUE_TASKS, TASKS, load_custom_task, resolve_tasks
from tests.glue_fixtures import GLUE_DATA, label_of, make_tokenizer, write_custom_task, write_glue


@pytest.fixture(scope="module")
def glue(tmp_path_factory):
    return write_glue(tmp_path_factory.mktemp("glue"))


def test_every_task_loads_from_glue_files(glue):
    specs, skipped = resolve_tasks("all", glue)
    assert [s.task.name for s in specs] == list(GLUE_TASKS) and skipped == []
    for spec in specs:
        data = load_task(spec, with_test=True)
        name = spec.task.name
        assert data.n_train == 32, name
        assert data.n_eval == (32 if name == "mnli" else 16), name  # MNLI: matched + mismatched
        for split in [data.train, *data.dev.values()]:
            assert [e.label for e in split] == [label_of(name, i) for i in range(len(split))], name
            assert all(e.text_a.rstrip().endswith(" .") for e in split)  # SST-2 keeps its trailing space
            assert all((e.text_b is None) == (name in ("cola", "sst2")) for e in split)
        expected = ["MNLI-m.tsv", "MNLI-mm.tsv", "AX.tsv"] if name == "mnli" else [TASKS[name].test[0].submission]
        assert list(data.test) == expected
        for rows in data.test.values():
            assert [e.index for e in rows] == [str(i) for i in range(8)] and all(e.label is None for e in rows)
    cola = load_task(specs[0]).train
    assert cola[0] == Example(cola[0].text_a, None, 0, "0")  # headerless: row 1 is data, column 3 the sentence
    mrpc = load_task(specs[2]).train
    assert mrpc[0].text_a.startswith('" ')  # the stray quote survives (quoting disabled); the BOM is gone
    stsb = load_task(specs[3]).dev
    assert [e.label for e in stsb[""]][:3] == [0.0, 1.8, 1.6]


# The hub's ClassLabel names (nyu-mll/glue) and how a GLUE TSV label string reads in them.
HUB = {
    "cola": ("sentence", None, ["unacceptable", "acceptable"], {"0": "unacceptable", "1": "acceptable"}),
    "sst2": ("sentence", None, ["negative", "positive"], {"0": "negative", "1": "positive"}),
    "mrpc": ("sentence1", "sentence2", ["not_equivalent", "equivalent"], {"0": "not_equivalent", "1": "equivalent"}),
    "qqp": ("question1", "question2", ["not_duplicate", "duplicate"], {"0": "not_duplicate", "1": "duplicate"}),
    "stsb": ("sentence1", "sentence2", None, None),
    "mnli": ("premise", "hypothesis", ["entailment", "neutral", "contradiction"], None),
    "qnli": ("question", "sentence", ["entailment", "not_entailment"], None),
    "rte": ("sentence1", "sentence2", ["entailment", "not_entailment"], None),
    "wnli": ("sentence1", "sentence2", ["not_entailment", "entailment"], {"0": "not_entailment", "1": "entailment"}),
}


def test_hub_schema_gives_the_same_examples_and_label_ids(glue):
    """An in-memory Dataset with the hub's schema and label order converts to exactly what the TSVs give."""
    import datasets

    for name, (fa, fb, names, tsv_to_hub) in HUB.items():
        task = TASKS[name]
        path = glue / task.folder / ("dev_matched.tsv" if name == "mnli" else "dev.tsv")
        tsv = read_tsv(path, task)
        raw = [line.split("\t") for line in path.read_text(encoding="utf-8-sig").splitlines()]
        if task.headerless is None:
            raw = raw[1:]
        label_col = {"cola": 1, "mrpc": 0}.get(name, -1)
        columns = {fa: [e.text_a for e in tsv], "idx": list(range(len(tsv)))}
        if fb:
            columns[fb] = [e.text_b for e in tsv]
        if names is None:
            features = {"label": datasets.Value("float32")}
            columns["label"] = [float(r[label_col]) for r in raw]
        else:
            features = {"label": datasets.ClassLabel(names=names)}
            columns["label"] = [names.index(tsv_to_hub[r[label_col]] if tsv_to_hub else r[label_col]) for r in raw]
        features.update({k: datasets.Value("int32" if k == "idx" else "string") for k in columns if k != "label"})
        ds = datasets.Dataset.from_dict(columns, features=datasets.Features(features))
        hub = examples_from_hub(task, ds)
        assert [(e.text_a, e.text_b) for e in hub] == [(e.text_a, e.text_b) for e in tsv], name
        assert np.allclose([e.label for e in hub], [e.label for e in tsv], atol=1e-6), name
        if name not in ("cola", "sst2", "mrpc"):  # these TSVs have no index column: row numbers, as the hub's idx
            assert [e.index for e in hub] == [e.index for e in tsv]
        test = datasets.Dataset.from_dict({**columns, "label": [-1] * len(tsv)}, features=ds.features)
        assert all(e.label is None for e in examples_from_hub(task, test, labelled=False))
    wrong = datasets.Dataset.from_dict(
        {"sentence1": ["a ."], "sentence2": ["b ."], "label": [0], "idx": [0]},
        features=datasets.Features(
            {
                "sentence1": datasets.Value("string"),
                "sentence2": datasets.Value("string"),
                "label": datasets.ClassLabel(names=["no", "yes"]),
                "idx": datasets.Value("int32"),
            }
        ),
    )
    with pytest.raises(ValueError, match="label names"):
        examples_from_hub(TASKS["rte"], wrong)


def _corrupt(glue, tmp_path, file: str, line: int, text: str):
    import shutil

    root = tmp_path / "glue"
    shutil.copytree(glue, root)
    lines = (root / file).read_bytes().split(b"\n")
    lines[line - 1] = text.encode()
    (root / file).write_bytes(b"\n".join(lines))
    return root


@pytest.mark.parametrize(
    "file,line,text,message",
    [
        ("RTE/train.tsv", 5, "3\tonly two\tcolumns", r"RTE/train.tsv:5: 3 columns, expected 4"),
        ("RTE/dev.tsv", 3, "1\ta .\tb .\tmaybe", r"RTE/dev.tsv:3: label 'maybe' is not one of"),
        ("SST-2/train.tsv", 2, " \t1", r"SST-2/train.tsv:2: empty text in column 'sentence'"),
        ("CoLA/train.tsv", 1, "gj04\t1\t\t", r"CoLA/train.tsv:1: empty text"),  # headerless: line 1 is a row
        ("STS-B/dev.tsv", 4, "2\tg\tf\ty\t0\tn\tn\ta .\tb .\thigh", r"STS-B/dev.tsv:4: label 'high' is not a number"),
        ("MRPC/train.tsv", 1, "\ufeffLabel\t#1 ID\t#2 ID\t#1 String\t#2 String", r"MRPC/train.tsv:1: no column 'Qual"),
    ],
)
def test_malformed_rows_name_file_and_line(glue, tmp_path, file, line, text, message):
    root = _corrupt(glue, tmp_path, file, line, text)
    name = {"RTE": "rte", "SST-2": "sst2", "CoLA": "cola", "STS-B": "stsb", "MRPC": "mrpc"}[file.split("/")[0]]
    specs, _ = resolve_tasks(name, root)
    with pytest.raises(ValueError, match=message):
        load_task(specs[0])


def test_a_file_without_rows_is_an_error(glue, tmp_path):
    root = _corrupt(glue, tmp_path, "WNLI/dev.tsv", 2, "")
    (root / "WNLI" / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n")
    with pytest.raises(ValueError, match=r"WNLI/dev.tsv:1: no examples"):
        load_task(resolve_tasks("wnli", root)[0][0])


def test_task_names_and_folders(glue, tmp_path):
    with pytest.raises(ValueError, match="unknown task 'cols'"):
        resolve_tasks("rte,cols", glue)
    with pytest.raises(ValueError, match="listed twice"):
        resolve_tasks("rte,RTE", glue)
    with pytest.raises(ValueError, match="test-only diagnostic"):
        resolve_tasks("ax", glue)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=r"empty/CoLA: no such task folder"):
        resolve_tasks("cola", empty)
    specs, skipped = resolve_tasks("all", empty)  # `all` means all that have data; the rest are reported
    assert specs == [] and skipped == list(GLUE_TASKS)
    with pytest.raises(FileNotFoundError, match="`glue_dir` is not a folder"):
        resolve_tasks("rte", tmp_path / "nope")


def test_custom_task_folder(tmp_path, glue):
    folder = write_custom_task(tmp_path)
    specs, _ = resolve_tasks(f"rte,{folder}", glue)
    custom = specs[1]
    assert custom.task.name == "syn-agree" and not custom.task.glue and custom.task.metric_names == ["accuracy", "mcc"]
    data = load_task(custom, with_test=True)
    assert (data.n_train, data.n_eval, len(data.test["test.tsv"])) == (64, 32, 8)
    assert [e.label for e in data.train[:4]] == [0, 1, 0, 1]
    spec = json.loads((folder / "task.json").read_text())
    for change, message in [
        ({"name": "rte"}, "not a GLUE task name"),
        ({"metrics": ["pearson"]}, "do not fit"),
        ({"main_metric": "f1"}, "main_metric"),
        ({"extra": 1}, "unknown keys"),
    ]:
        (folder / "task.json").write_text(json.dumps({**spec, **change}))
        with pytest.raises(ValueError, match=message):
            resolve_tasks(str(folder), None)
    (folder / "task.json").write_text('{\n "name": "x",\n oops}')
    with pytest.raises(ValueError, match=r"task.json:3: not valid JSON"):
        resolve_tasks(str(folder), None)


def test_task_behaviour_is_data_and_custom_tasks_may_set_it(tmp_path):
    """What fine-tuning does differently per task comes from Task fields, never from names: OFF trains MRPC and
    STS-B on both pair orders, STS-B on scores / 5 with test predictions clipped to [0, 5], and MNLI's model
    predicts AX. A task.json may set the same fields."""
    assert {n for n, t in TASKS.items() if t.unordered} == {"mrpc", "stsb"}
    assert {n: t.target_scale for n, t in TASKS.items() if t.target_scale != 1} == {"stsb": 5.0}
    assert {n: t.prediction_range for n, t in TASKS.items() if t.prediction_range} == {"stsb": (0.0, 5.0)}
    assert {n: t.also_predict for n, t in TASKS.items() if t.also_predict} == {"mnli": ("ax",)}
    folder = tmp_path / "similar"
    folder.mkdir()
    spec = {
        "name": "similar",
        "text_a": "a",
        "text_b": "b",
        "label": "score",
        "labels": None,
        "metrics": ["pearson"],
        "main_metric": "pearson",
        "epochs": 1,
        "unordered": True,
        "target_scale": 4,
        "prediction_range": [0, 4],
    }
    (folder / "task.json").write_text(json.dumps(spec))
    task = load_custom_task(folder)
    assert (task.unordered, task.target_scale, task.prediction_range) == (True, 4.0, (0.0, 4.0))
    bad = [
        ({"unordered": "yes"}, "unordered must be true or false"),
        ({"text_b": None}, "unordered needs a pair task"),
        ({"labels": ["0", "1"], "metrics": ["accuracy"], "main_metric": "accuracy"}, "for regression tasks"),
        ({"target_scale": 0}, "target_scale must be a positive number"),
        ({"prediction_range": [4, 0]}, "prediction_range must be \\[low, high\\]"),
    ]
    for change, message in bad:
        (folder / "task.json").write_text(json.dumps({**spec, **change}))
        with pytest.raises(ValueError, match=f"task.json:1: .*{message}"):
            load_custom_task(folder)


@pytest.mark.skipif(not GLUE_DATA.is_dir(), reason="shared GLUE data not present")
def test_real_glue_files():
    specs, skipped = resolve_tasks("all", GLUE_DATA)
    assert [s.task.name for s in specs] == ["sst2", "mrpc", "stsb", "rte", "wnli"]
    assert skipped == ["cola", "qqp", "mnli", "qnli"]  # QNLI: dev and test only
    counts = {s.task.name: load_task(s, with_test=True) for s in specs if s.task.name != "sst2"}
    assert {k: (d.n_train, d.n_eval) for k, d in counts.items()} == {
        "mrpc": (3668, 408),
        "stsb": (5749, 1500),  # PROVENANCE: 5749 / 1500 rows
        "rte": (2490, 277),
        "wnli": (635, 71),
    }
    assert 0.0 <= min(e.label for e in counts["stsb"].dev[""]) and max(e.label for e in counts["stsb"].dev[""]) <= 5.0
    assert sum(e.label == 0 for e in counts["rte"].dev[""]) == 146  # entailment (PROVENANCE: 146 / 131)
    assert sum(e.label == 1 for e in counts["wnli"].dev[""]) == 31
    assert len(counts["mrpc"].test["MRPC.tsv"]) == 1725 and counts["mrpc"].test["MRPC.tsv"][-1].index == "1724"
    qnli = read_tsv(GLUE_DATA / "QNLI" / "dev.tsv", TASKS["qnli"])
    assert len(qnli) == 5463 and sum(e.label == 0 for e in qnli) == 2702


# -- inputs ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tok"))


def test_pair_encoding_matches_the_tokenizers_template(tok):
    ex = [Example("the film was wonderful .", "a dog ?", 1, "0"), Example("the cat .", None, 0, "1")]
    f = encode(ex, tok, 128)
    for e, ids, types in zip(ex, f.input_ids, f.token_type_ids, strict=True):
        ref = tok.encode(e.text_a, e.text_b) if e.text_b else tok.encode(e.text_a)
        assert ids.tolist() == ref.ids and types.tolist() == ref.type_ids  # [CLS] A [SEP] B [SEP], types 0/1
    assert f.input_ids[0][0] == tok.token_to_id("[CLS]") and (f.input_ids[0] == tok.token_to_id("[SEP]")).sum() == 2


def test_longest_first_truncation(tok):
    a, b = list(range(10)), list(range(100, 104))
    assert truncate_pair(a, b, 9) == (a[:5], b)  # the longer side loses tokens first
    assert truncate_pair(a[:6], list(range(100, 106)), 9) == (a[:5], [100, 101, 102, 103])  # ties: from B
    assert truncate_pair(a, None, 4) == (a[:4], None)
    long = " ".join(["wonderful film"] * 100)
    f = encode([Example(long, "a dog .", 1, "0"), Example(long, long, 0, "1")], tok, 128)
    assert [len(x) for x in f.input_ids] == [128, 128]
    assert f.token_type_ids[0].tolist().count(1) == len(tok.encode("a dog .", add_special_tokens=False).ids) + 1
    assert f.token_type_ids[1].tolist().count(1) == 63  # 125 tokens split 63 (A) / 62 (B) + [SEP]


def test_dynamic_padding_and_length_sorted_eval_batches(tok):
    ex = [Example(" ".join(["dog"] * n), None, n % 2, str(i)) for i, n in enumerate([3, 9, 1, 6, 12, 2, 7])]
    f = encode(ex, tok, 128)
    batch = collate(f, np.array([0, 2, 5]))
    assert batch["input_ids"].shape == (3, 5)  # padded to the longest of these three ([CLS] 3 dogs [SEP])
    assert batch["attention_mask"].sum(1).tolist() == [5, 3, 4]
    assert (batch["input_ids"][batch["attention_mask"] == 0] == tok.token_to_id("[PAD]")).all()
    batches = eval_batches(f, 3)
    lengths = [f.lengths[b].tolist() for b in batches]
    assert lengths == [[14, 11, 9], [8, 5, 4], [3]]
    assert sorted(np.concatenate(batches).tolist()) == list(range(7))


def test_glue_dir_takes_several_folders_each_task_from_the_first_that_holds_it(tmp_path):
    """RTE kept in one folder and WNLI in another: `--glue-dir A --glue-dir B` (or A:B) finds both."""
    import argparse
    import os
    import shutil

    from electra.cli import COMMANDS
    from electra.cli.glue import glue_dirs

    full = write_glue(tmp_path / "glue")
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    shutil.copytree(full / "RTE", a / "RTE")
    shutil.copytree(full / "WNLI", b / "WNLI")
    shutil.copytree(full / "RTE", b / "RTE")  # also in B: A's, the first, is taken
    parser = argparse.ArgumentParser()
    COMMANDS["glue"][1](parser)
    args = parser.parse_args(["--out", "x", "--glue-dir", str(a), "--glue-dir", str(b)])
    joined = glue_dirs(args.glue_dir)
    assert joined == f"{a}{os.pathsep}{b}"
    specs, _ = resolve_tasks("rte,wnli", joined)
    assert [(s.task.name, s.root.parent) for s in specs] == [("rte", a), ("wnli", b)]
    specs, skipped = resolve_tasks("all", joined)
    assert [s.task.name for s in specs] == ["rte", "wnli"] and "cola" in skipped
    with pytest.raises(FileNotFoundError, match=r"cola: no data in any `glue_dir` \(.*a, .*b\)"):
        resolve_tasks("cola", joined)
    with pytest.raises(FileNotFoundError, match="`glue_dir` is not a folder"):
        resolve_tasks("rte", f"{a}{os.pathsep}{tmp_path / 'missing'}")
