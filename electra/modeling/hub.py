"""Hugging Face hub model ids wherever a model folder is taken (`electra glue --model`, `electra import-hf`).

A path that exists locally always wins. Otherwise an id ORG/NAME (optionally ORG/NAME@REVISION) resolves through
huggingface_hub's cache (HF_HUB_CACHE, by default ~/.cache/huggingface/hub/models--ORG--NAME/snapshots/COMMIT/)
to a folder like the transformers folders the commands already accept: downloaded first when online, read from
the cache alone when offline (HF_HUB_OFFLINE=1). Only what a model folder needs is fetched: the config, the
weights (safetensors, else pytorch_model.bin) and the tokenizer files, at the top and one folder down (our export
keeps discriminator/ and generator/ side by side).
"""

from __future__ import annotations

import re
from pathlib import Path

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?")
"""ORG/NAME[@REVISION], as the hub spells repository ids."""

_FILES = [
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
]
MODEL_FILES = _FILES + [f"*/{name}" for name in _FILES]
FALLBACK_WEIGHTS = ["pytorch_model.bin", "*/pytorch_model.bin"]
"""Fetched only for a repository without safetensors weights."""


def is_hub_id(text: str) -> bool:
    return HUB_ID.fullmatch(text) is not None


def resolve_model(path_or_id: str | Path) -> Path:
    """A local path as it is; a hub model id that is not a local path: its snapshot folder in the local cache
    (downloaded first unless offline). A missing path that is no hub id is returned as is, for the caller's error."""
    path = Path(path_or_id).expanduser()
    if path.exists() or not is_hub_id(str(path_or_id)):
        return path
    return snapshot(str(path_or_id))


def model_identity(path_or_id: str | Path) -> str:
    """What a model argument names, for fingerprints: a local path made absolute, or a hub id with the commit
    its snapshot holds (so a sweep notices when the hub's model changed)."""
    path = Path(path_or_id).expanduser()
    if path.exists() or not is_hub_id(str(path_or_id)):
        return str(path.resolve())
    repo_id = str(path_or_id).partition("@")[0]
    return f"{repo_id}@{snapshot(str(path_or_id)).name}"


def snapshot(model_id: str) -> Path:
    """The local snapshot folder of hub model ORG/NAME[@REVISION]; fails in one line naming the id."""
    from huggingface_hub import is_offline_mode, snapshot_download

    repo_id, _, revision = model_id.partition("@")
    offline = is_offline_mode()

    def fetch(patterns: list[str]) -> Path:
        return Path(
            snapshot_download(repo_id, revision=revision or None, allow_patterns=patterns, local_files_only=offline)
        )

    try:
        folder = fetch(MODEL_FILES)
        if not any(folder.glob("model.safetensors")) and not any(folder.glob("*/model.safetensors")):
            folder = fetch(MODEL_FILES + FALLBACK_WEIGHTS)
    except Exception as err:  # not cached while offline, no network, no such repository, ...
        if offline:
            raise ValueError(
                f"{model_id}: not a local path, nor a model in the local Hugging Face cache "
                "(HF_HUB_OFFLINE is set: nothing is downloaded)"
            ) from None
        reason = " ".join(str(err).split())[:200]
        raise ValueError(
            f"{model_id}: not a local path, nor a model in the local Hugging Face cache or on the hub "
            f"({type(err).__name__}: {reason})"
        ) from None
    return folder
