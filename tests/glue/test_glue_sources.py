"""GLUE in the schema of the hub's nyu-mll/glue, offline: a folder written by `datasets`' save_to_disk, the hub
repo's Parquet files, and the hub dataset itself from the local datasets cache (HF_HUB_OFFLINE=1). Each is built
here from the real GLUE TSVs (SST-2, MRPC, RTE, WNLI), converted to the hub's field names, label ids and `idx`
independently of the loader, and must give exactly the examples of the TSV route: texts, label ids, indices, for
the training, dev and test sets."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from electra.glue.loading import load_task
from electra.glue.tasks import resolve_tasks
from tests.helpers import SHARED_DATA, run_python

# nyu-mll/glue's schema (its dataset card): config -> (TSV folder, text fields as TSV column -> hub field, the
# TSV label column, the ClassLabel names in id order, TSV label string -> ClassLabel name)
HUB = {
    "sst2": ("SST-2", {"sentence": "sentence"}, "label", ["negative", "positive"], {"0": "negative", "1": "positive"}),
    "mrpc": (
        "MRPC",
        {"#1 String": "sentence1", "#2 String": "sentence2"},
        "Quality",
        ["not_equivalent", "equivalent"],
        {"0": "not_equivalent", "1": "equivalent"},
    ),
    "rte": (
        "RTE",
        {"sentence1": "sentence1", "sentence2": "sentence2"},
        "label",
        ["entailment", "not_entailment"],
        {"entailment": "entailment", "not_entailment": "not_entailment"},
    ),
    "wnli": (
        "WNLI",
        {"sentence1": "sentence1", "sentence2": "sentence2"},
        "label",
        ["not_entailment", "entailment"],
        {"0": "not_entailment", "1": "entailment"},
    ),
}
SPLITS = {"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"}


def hub_split(tsv: Path, config: str, labelled: bool):
    """One GLUE TSV as the hub has it: its fields, label ids (-1 for test rows), and idx (the index column, or
    the row number where the file has none)."""
    import datasets

    _, texts, label_col, names, to_hub = HUB[config]
    with open(tsv, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    header, rows = rows[0], [r for r in rows[1:] if r]
    col = {name: i for i, name in enumerate(header)}
    columns = {field: [r[col[name]] for r in rows] for name, field in texts.items()}
    columns["label"] = [names.index(to_hub[r[col[label_col]]]) if labelled else -1 for r in rows]
    columns["idx"] = [int(r[col["index"]]) if "index" in col else i for i, r in enumerate(rows)]
    features = {field: datasets.Value("string") for field in texts.values()}
    features.update(label=datasets.ClassLabel(names=names), idx=datasets.Value("int32"))
    return datasets.Dataset.from_dict(columns, features=datasets.Features(features))


@pytest.fixture(scope="module")
def routes(tmp_path_factory) -> dict[str, Path]:
    """The same GLUE tasks as TSVs, as save_to_disk folders, and as the hub repo's Parquet files."""
    import datasets

    glue = SHARED_DATA / "glue"
    if not glue.is_dir():
        pytest.skip(f"shared GLUE data not found at {glue}")
    root = tmp_path_factory.mktemp("routes")
    for config, (folder, *_) in HUB.items():
        splits = {s: hub_split(glue / folder / f, config, labelled=s != "test") for s, f in SPLITS.items()}
        datasets.DatasetDict(splits).save_to_disk(str(root / "saved" / config))
        for split, ds in splits.items():  # the hub repo's file names
            ds.to_parquet(str(root / "parquet" / config / f"{split}-00000-of-00001.parquet"))
    return {"tsv": glue, "datasets": root / "saved", "parquet": root / "parquet"}


def examples(glue_dir: Path | None) -> dict[str, dict]:
    """Every split of the four tasks, as plain tuples."""
    specs, _ = resolve_tasks(list(HUB), glue_dir)
    out = {}
    for spec in specs:
        data = load_task(spec, with_test=True)
        rows = {"train": data.train, **{f"dev{k}": v for k, v in data.dev.items()}, **data.test}
        out[spec.task.name] = {k: [(e.text_a, e.text_b, e.label, e.index) for e in v] for k, v in rows.items()}
    return out


def test_datasets_folders_and_parquet_files_give_the_examples_of_the_tsvs(routes):
    reference = examples(routes["tsv"])
    assert {t: {k: len(v) for k, v in splits.items()} for t, splits in reference.items()}["rte"] == {
        "train": 2490,
        "dev": 277,
        "RTE.tsv": 3000,
    }
    for layout in ("datasets", "parquet"):
        specs, _ = resolve_tasks(list(HUB), routes[layout])
        assert {s.layout for s in specs} == {layout}
        assert examples(routes[layout]) == reference, layout


@pytest.mark.slow
def test_the_hub_dataset_from_the_offline_cache_gives_the_examples_of_the_tsvs(routes, tmp_path):
    """A cache entry as `load_dataset("nyu-mll/glue", CONFIG)` leaves it (DATASETS_CACHE/nyu-mll___glue/CONFIG/
    0.0.0/HASH/glue-SPLIT.arrow + dataset_info.json), made here from the Parquet files, read with the hub
    offline in a fresh process, as a user would; a config not in the cache fails in one line."""
    from datasets.packaged_modules.parquet.parquet import Parquet

    cache = tmp_path / "hf" / "datasets"
    for config in HUB:
        files = {s: [str(routes["parquet"] / config / f"{s}-00000-of-00001.parquet")] for s in SPLITS}
        builder = Parquet(
            cache_dir=str(tmp_path / "build"),
            dataset_name="glue",
            config_name=config,
            hash="0123456789abcdef",
            data_files=files,
        )
        builder.download_and_prepare()
        (built,) = (tmp_path / "build" / "glue").glob(f"{config}-*")  # named after its data files; the hub's: CONFIG
        shutil.move(built, cache / "nyu-mll___glue" / config)
    env = {
        "HF_HOME": str(tmp_path / "hf"),
        "HF_DATASETS_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    # one process: the examples of the four tasks, then `electra glue` on a config the cache lacks
    args = ["glue", "--model", str(tmp_path), "--tasks", "cola", "--out", str(tmp_path / "out"), "--seeds", "1"]
    script = (
        "import json, sys; from tests.glue.test_glue_sources import examples; from electra.cli import main; "
        f"json.dump(examples(None), open({str(tmp_path / 'hub.json')!r}, 'w')); sys.exit(main({args!r}))"
    )
    done = run_python("-c", script, env=env, timeout=300)
    hub = json.loads((tmp_path / "hub.json").read_text())
    hub = {task: {k: [tuple(e) for e in v] for k, v in splits.items()} for task, splits in hub.items()}
    assert hub == examples(routes["tsv"])
    err = done.stderr.strip().splitlines()[-1]
    message = "nyu-mll/glue (cola): not in the local datasets cache, and the hub is not reachable"
    assert done.returncode == 2 and err.startswith(f"electra glue: error: {message}"), done.stderr


def test_label_names_are_checked_and_a_missing_split_is_named(routes, tmp_path):
    """Label ids are only taken after the ClassLabel names are checked: a Parquet file without the `datasets`
    metadata (plain integer labels) or with other names is refused, as is a folder lacking a split."""
    import pyarrow.parquet as pq

    bad = tmp_path / "bad" / "rte"
    bad.mkdir(parents=True)
    for split in SPLITS:
        table = pq.read_table(routes["parquet"] / "rte" / f"{split}-00000-of-00001.parquet")
        pq.write_table(table.replace_schema_metadata(None), bad / f"{split}-00000-of-00001.parquet")
    (spec,), _ = resolve_tasks("rte", tmp_path / "bad")
    expected = r"bad/rte/train: label names \(\), expected \('entailment', 'not_entailment'\)"
    with pytest.raises(ValueError, match=expected):
        load_task(spec)
    (bad / "validation-00000-of-00001.parquet").unlink()
    with pytest.raises(FileNotFoundError, match="bad/rte: no split 'validation' \\(task rte needs it"):
        resolve_tasks("rte", tmp_path / "bad")
    assert resolve_tasks("all", tmp_path / "bad")[0] == []  # `all`: the incomplete task is skipped, not an error
