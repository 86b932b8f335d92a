"""Hub model ids where a model folder is taken (`electra glue --model`, `electra import-hf`), offline: a real
huggingface_hub cache layout (models--ORG--NAME/refs/main, blobs/, snapshots/COMMIT/ of links into blobs) built
here from a tiny model exported with `export_run_to_hf`, read with HF_HUB_OFFLINE set. An id resolves to the same
weights as the local folder, a local path of the same name wins, and an id that is not cached fails in one line."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

from electra.modeling.hub import is_hub_id, resolve_model
from electra.training.checkpoint import export_run_to_hf, list_checkpoints
from tests.glue_fixtures import make_run, write_glue
from tests.helpers import cli_main

ORG = "tiny-org"
NAMES = {"discriminator": "electra-tiny-discriminator", "generator": "electra-tiny-generator"}


def cache_snapshot(cache: Path, repo: str, files: Path) -> Path:
    """`files` as huggingface_hub stores a download of `repo` (main branch) in `cache`; returns the snapshot."""
    org, name = repo.split("/")
    root = cache / f"models--{org}--{name}"
    commit = hashlib.sha1(repo.encode()).hexdigest()
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (root / "blobs").mkdir()
    for f in sorted(files.iterdir()):
        blob = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copy(f, root / "blobs" / blob)
        (snapshot / f.name).symlink_to(Path("..", "..", "blobs", blob))
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    return snapshot


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    return export_run_to_hf(make_run(root / "run"), root / "hf")


@pytest.fixture
def offline_cache(exported, tmp_path, monkeypatch) -> dict[str, Path]:
    """The exported discriminator and generator in a hub cache, huggingface_hub switched offline (it reads both
    settings from its constants module at call time)."""
    import huggingface_hub.constants

    cache = tmp_path / "hub-cache"
    snapshots = {which: cache_snapshot(cache, f"{ORG}/{name}", exported / which) for which, name in NAMES.items()}
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return snapshots


def weights(run: Path) -> dict:
    return load_file(list_checkpoints(run)[-1] / "model.safetensors")


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


def test_hub_ids_and_paths():
    assert is_hub_id("google/electra-small-discriminator") and is_hub_id("google/electra-small-generator@v1.0")
    assert not any(map(is_hub_id, ["/abs/run", "./runs/x", "run", "a/b/c", "~/x/y"]))


def test_import_hf_from_hub_ids_equals_the_local_folders(offline_cache, exported, tmp_path, monkeypatch, capsys):
    disc, gen = (f"{ORG}/{NAMES[w]}" for w in ("discriminator", "generator"))
    assert resolve_model(disc) == offline_cache["discriminator"]
    assert cli_main(["import-hf", "--discriminator", disc, "--generator", gen, "--out", str(tmp_path / "hub")]) == 0
    local = ["--discriminator", str(exported / "discriminator"), "--generator", str(exported / "generator")]
    assert cli_main(["import-hf", *local, "--out", str(tmp_path / "local")]) == 0
    assert same(weights(tmp_path / "hub"), weights(tmp_path / "local"))
    assert (tmp_path / "hub" / "tokenizer" / "tokenizer.json").read_bytes() == (
        exported / "discriminator" / "tokenizer.json"
    ).read_bytes()

    # a local folder named like the id wins over the cache
    other = export_run_to_hf(make_run(tmp_path / "other-run", seed=1), tmp_path / "other")
    monkeypatch.chdir(tmp_path)
    shutil.copytree(other / "discriminator", Path(disc))
    assert cli_main(["import-hf", "--discriminator", disc, "--generator", gen, "--out", "shadowed"]) == 0
    local = ["--discriminator", str(other / "discriminator"), "--generator", gen]
    assert cli_main(["import-hf", *local, "--out", "other-import"]) == 0
    assert same(weights(tmp_path / "shadowed"), weights(tmp_path / "other-import"))
    assert not same(weights(tmp_path / "shadowed"), weights(tmp_path / "hub"))


def test_glue_with_a_hub_id_equals_the_local_folder(offline_cache, exported, tmp_path, capsys):
    glue = write_glue(tmp_path / "glue")
    common = ["--glue-dir", str(glue), "--tasks", "rte", "--seeds", "1", "--max-steps", "3", "--no-progress"]
    model = f"{ORG}/{NAMES['discriminator']}"
    assert cli_main(["glue", "--model", model, "--out", str(tmp_path / "hub"), *common]) == 0
    args = ["glue", "--model", str(exported / "discriminator"), "--out", str(tmp_path / "local"), *common]
    assert cli_main(args) == 0
    hub, local = (json.loads((tmp_path / w / "runs/rte/seed0/result.json").read_text()) for w in ("hub", "local"))
    for key in ("metrics", "loss_start", "loss_end"):  # fine-tuning from the same weights: the same numbers
        assert hub[key] == local[key]
    header = json.loads((tmp_path / "hub" / "sweep.json").read_text())
    assert header["fields"]["model"] == f"{model}@{offline_cache['discriminator'].name}"  # the commit it used

    capsys.readouterr()
    assert cli_main(["glue", "--model", f"{ORG}/not-cached", "--out", str(tmp_path / "none"), *common]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"electra glue: error: {ORG}/not-cached: not a local path, nor a model in the local Hugging Face "
        "cache (HF_HUB_OFFLINE is set: nothing is downloaded)"
    )
    assert not (tmp_path / "none" / "runs").exists()
