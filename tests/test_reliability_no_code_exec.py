"""No code execution from files: checkpoints (optimizer.pt, scaler.pt, rng.pt), transformers folders
(pytorch_model.bin), prepared corpora (documents.npy, lines.npy), config files (YAML tags) and GLUE folders
(Python files, pickles beside the data) each get a payload that would create a marker file when unpickled or
imported. The marker never appears, and the file is refused with a message naming it. Each payload is first shown
to work: loading it the unsafe way does create the marker."""

from __future__ import annotations

import json
import logging
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from electra.config import ConfigError, load_config
from electra.data.corpus import META_FILE, open_corpus
from electra.glue.loading import load_task
from electra.glue.tasks import resolve_tasks
from electra.modeling.convert_hf import HFConversionError, to_hf
from electra.training.checkpoint import CheckpointError, list_checkpoints, load_discriminator, load_model_checkpoint
from electra.training.loop import pretrain
from electra.utils.errors import CorruptFileError
from electra.utils.files import sha256_file
from tests.glue_fixtures import make_run, write_custom_task, write_glue
from tests.helpers import prepared_synthetic_corpus, reseal_checkpoint

RUN = [
    "train.batch_size=4",
    "train.max_steps=2",
    "train.save_every=2",
    "train.eval_every=1000",
    "train.log_every=1",
    "train.eval_batches=1",
]


class Payload:
    """Unpickling this calls open(marker, "w"): it creates the marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "PWNED"


def test_the_payload_runs_when_loaded_unsafely(tmp_path, marker):
    path = tmp_path / "payload.pt"
    torch.save({"state": Payload(marker)}, path)
    torch.load(path, weights_only=False)
    assert marker.exists()  # so the tests below would see it, if any loader ran it


@pytest.mark.parametrize("name", ["optimizer.pt", "scaler.pt", "rng.pt"])
def test_a_checkpoint_carrying_a_pickle_payload_is_refused(tmp_path, marker, name, caplog):
    run = tmp_path / "run"
    pretrain(load_config("tiny", RUN), run)
    ckpt = list_checkpoints(run)[-1]
    torch.save({"state": {}, "param_groups": [], "payload": Payload(marker)}, ckpt / name)
    reseal_checkpoint(ckpt)  # the attacker also rewrote SHA256SUMS: only the loader itself stands in the way
    caplog.set_level(logging.WARNING)
    with pytest.raises(CheckpointError, match="no usable checkpoint among 1"):
        pretrain(load_config("tiny", RUN + ["train.max_steps=4"]), run, resume="auto")
    assert not marker.exists()
    assert f"{ckpt}" in caplog.text and "Weights only load failed" in caplog.text


def test_a_transformers_folder_carrying_a_pickle_payload_is_refused(tmp_path, marker):
    run = make_run(tmp_path / "run")
    model, _ = load_model_checkpoint(list_checkpoints(run)[-1])
    disc = to_hf(model, tmp_path / "hf") / "discriminator"
    (disc / "model.safetensors").unlink()
    with open(disc / "pytorch_model.bin", "wb") as f:
        torch.save({"electra.embeddings.word_embeddings.weight": Payload(marker)}, f)
    with pytest.raises(HFConversionError, match=r"discriminator/pytorch_model.bin: cannot load as plain weights"):
        load_discriminator(disc)  # what `electra glue --model FOLDER` does
    assert not marker.exists()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    return prepared_synthetic_corpus(tmp_path_factory.mktemp("prepared"), num_documents=20, vocab_size=300)


@pytest.mark.parametrize("name", ["documents.npy", "lines.npy"])
def test_a_prepared_corpus_carrying_a_pickle_payload_is_refused(prepared, tmp_path, marker, name):
    import shutil

    data = Path(shutil.copytree(prepared, tmp_path / "data"))
    np.save(data / name, np.array([Payload(marker)], dtype=object), allow_pickle=True)
    meta = json.loads((data / META_FILE).read_text())
    meta["sha256"][name] = sha256_file(data / name)  # the metadata rewritten to match: np.load must refuse alone
    (data / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(CorruptFileError, match=rf"{name}: cannot load \(Object arrays cannot be loaded"):
        open_corpus(data)
    assert not marker.exists()
    np.load(data / name, allow_pickle=True)  # the payload is real: loading it the unsafe way runs it
    assert marker.exists()


def test_a_config_file_with_a_python_tag_is_refused(tmp_path, marker):
    path = tmp_path / "evil.yaml"
    path.write_text(f"train:\n  lr: !!python/object/apply:builtins.open ['{marker}', 'w']\n")
    with pytest.raises(ConfigError, match=r"evil.yaml:2: not valid YAML: could not determine a constructor"):
        load_config(path)
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config("tiny", [f"train.lr=!!python/object/apply:builtins.open ['{marker}', 'w']"])
    assert not marker.exists()


def test_glue_folders_never_run_code_from_what_they_hold(tmp_path, marker):
    """Python files and pickles beside the data (a dataset loading script, a task.py, a pickled cache) are never
    imported or unpickled: the TSV, task.json and `datasets` folder routes read data only."""
    import datasets

    glue = write_glue(tmp_path / "glue", n_train=8, n_dev=4)
    custom = write_custom_task(tmp_path)
    script = f"open({str(marker)!r}, 'w')\n"
    rows = {"sentence1": ["a b"] * 4, "sentence2": ["c d"] * 4, "label": [0, 1] * 2, "idx": list(range(4))}
    features = datasets.Features(
        {
            "sentence1": datasets.Value("string"),
            "sentence2": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["entailment", "not_entailment"]),
            "idx": datasets.Value("int32"),
        }
    )
    saved = tmp_path / "hub" / "rte"
    split = datasets.Dataset.from_dict(rows, features=features)
    datasets.DatasetDict({"train": split, "validation": split}).save_to_disk(str(saved))
    for folder in (glue / "RTE", custom, saved):
        for name in ("rte.py", "task.py", "__init__.py", "dataset.py"):
            (folder / name).write_text(script)
        (folder / "cache.pkl").write_bytes(pickle.dumps(Payload(marker)))
    for names, root in (("rte", glue), (str(custom), None), ("rte", tmp_path / "hub")):
        for spec in resolve_tasks(names, root)[0]:
            assert load_task(spec, with_test=True).n_train > 0
    assert not marker.exists()
