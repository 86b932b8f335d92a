"""The pretraining loop's checkpoints: the whole training state saved (every rank's RNG and loop state gathered)
and restored from the newest checkpoint that verifies, falling back to older ones with a warning naming the bad
file; what may change when a run is resumed; and the run folder brought back to the resumed step (metrics.jsonl
cut back, leftovers of interrupted saves removed). The files themselves: electra/training/checkpoint.py.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import socket
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import load_file

from electra.config import PretrainConfig, to_dict
from electra.data.tokenizer import TokenizerInfo
from electra.training.checkpoint import (
    CHECKPOINT_PREFIX,
    COMPLETE_MARKER,
    TRAINING_FILES,
    CheckpointError,
    RunMeta,
    checkpoint_dir,
    list_checkpoints,
    read_config,
    remove_dir,
    save_config,
    save_model_checkpoint,
    verify_checkpoint,
    weights_only,
)
from electra.training.stopping import agree_on_failure
from electra.utils.errors import DiskFullError
from electra.utils.files import write_atomic
from electra.utils.wording import argument

log = logging.getLogger("electra.checkpoint")

# Settings that may change when a run is resumed: they do not alter what the run computes.
RESUMABLE_CHANGES = {
    "data.path",
    "train.log_every",
    "train.eval_every",
    "train.eval_batches",
    "train.save_every",
    "train.keep_last",
    "train.max_nonfinite",
    "train.collapse_patience",
    "train.stop_on_collapse",
    "train.compile",
    "train.micro_batch_size",
    "train.max_memory_gb",
    "train.threads",
    "train.max_steps",  # extending a run is allowed: the schedule then stretches from the resumed step on
}


def config_differences(saved: PretrainConfig, current: PretrainConfig) -> list[str]:
    """`key: saved -> current` for every setting that differs and would change what a resumed run computes."""
    a, b = _flatten(to_dict(saved)), _flatten(to_dict(current))
    return [
        f"{k}: {a.get(k)!r} -> {b.get(k)!r}"
        for k in sorted(a.keys() | b.keys())
        if a.get(k) != b.get(k) and k not in RESUMABLE_CHANGES
    ]


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def prune_checkpoints(run_dir: Path, keep_last: int) -> None:
    for old in list_checkpoints(run_dir)[:-keep_last] if keep_last > 0 else []:
        remove_dir(old)


def remove_partial_saves(run_dir: Path) -> None:
    """Delete what killed saves and prunes left in RUN/checkpoints (hidden .step_* folders); call it only while
    holding the run folder's lock, so that no live save is among them."""
    for leftover in sorted(Path(run_dir, "checkpoints").glob(f".{CHECKPOINT_PREFIX}*")):
        shutil.rmtree(leftover, ignore_errors=True)


def rewind_run_folder(run_dir: Path, step: int) -> None:
    """Bring a run folder back to `step`, where the run (re)starts: leftovers of interrupted saves removed,
    metrics.jsonl cut back, and a RUN/config.yaml that no longer parses named in a warning (the caller rewrites
    it). Only while holding the folder's lock."""
    remove_partial_saves(run_dir)
    trim_metrics(run_dir, step)
    if (run_dir / "config.yaml").exists():
        try:
            read_config(run_dir / "config.yaml")
        except CheckpointError as err:
            log.warning("%s; rewritten from the resumed run's config", err)


def trim_metrics(run_dir: Path, step: int) -> int:
    """Cut RUN/metrics.jsonl back to its lines of steps <= `step`, the step a run resumes from: the lines logged
    after that checkpoint are logged again by the resumed run, and a kill can leave a partial last line. Then the
    file reads as if the run had never stopped. Returns the number of lines dropped."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return 0
    *lines, partial = path.read_bytes().split(b"\n")  # `partial`: b"" unless the last line was cut off
    kept = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a damaged line: nothing can be trusted in it
        if isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] <= step:
            kept.append(line + b"\n")
    dropped = len(lines) - len(kept) + (partial != b"")
    if dropped:
        log.info("%s: dropped %d line(s) logged after step %d (they are logged again)", path, dropped, step)
        write_atomic(path, b"".join(kept))
    return dropped


def save_training_state(
    run_dir, cfg, model, optimizer, scaler, meta: RunMeta, rank: int, world: int, loop_state: dict | None = None
) -> None:
    """A complete checkpoint of the training state (rank 0 writes; every rank's RNG state and `loop_state`, e.g.
    the sums of the open log window, are gathered into rng.pt)."""

    local = {"torch": torch.get_rng_state(), "loop": loop_state}
    if torch.cuda.is_available():
        local["cuda"] = torch.cuda.get_rng_state()
    states = [None] * world
    if world > 1:
        dist.all_gather_object(states, local)
    else:
        states = [local]
    error = None
    if rank == 0:
        try:
            write_training_state(run_dir, cfg, model, optimizer, scaler, meta, states)
        except Exception as err:  # every rank leaves here, not only rank 0 (the others would wait for it)
            error = err
    agree_on_failure(error, rank, world)


def write_training_state(run_dir, cfg, model, optimizer, scaler, meta: RunMeta, states: list) -> None:
    """Rank 0's part of `save_training_state`: the checkpoint folder, the pruning of old ones, run.json."""
    extra = {}
    for name, obj in (
        ("optimizer.pt", optimizer.state_dict()),
        ("scaler.pt", scaler.state_dict()),
        ("rng.pt", {f"rank{r}": s for r, s in enumerate(states)}),
    ):
        buf = io.BytesIO()
        torch.save(obj, buf)
        extra[name] = buf.getvalue()
    extra["state.json"] = meta.to_json().encode()
    try:
        save_model_checkpoint(model, cfg, checkpoint_dir(run_dir, meta.step), extra)
    except DiskFullError as err:
        raise DiskFullError(
            err.errno, f"{err}; free some space, then continue with {argument('resume', 'auto')}"
        ) from err
    prune_checkpoints(run_dir, cfg.train.keep_last)
    write_atomic(run_dir / "run.json", meta.to_json())


def check_same_corpus(ckpt: Path, saved: PretrainConfig, cfg: PretrainConfig, digests: dict | None) -> None:
    """Raise CheckpointError when the checkpoint `ckpt` was trained on another corpus than the one whose digests
    (RunMeta.data_digests) are `digests`: its token ids would mean other words, and RUN/tokenizer (the old one)
    would be exported with the new weights. data.path may change (a corpus moved); the tokenizer's sha256 and
    tokens.bin's sha256 may not. A checkpoint older than the recorded digests is resumed with a warning."""
    try:
        recorded = json.loads((ckpt / "state.json").read_text()).get("data_digests")
    except (OSError, ValueError, AttributeError):
        return  # an unreadable state.json is said when the checkpoint is loaded
    if recorded == digests:
        return
    if recorded is None and saved.data.path is not None:
        log.warning(
            "%s records no corpus digests (written before they were): cannot check that %s is the corpus "
            "it was trained on (%s)",
            ckpt,
            cfg.data.path,
            saved.data.path,
        )
        return

    def named(path, d: dict | None) -> str:
        if d is None:
            return "the built-in synthetic corpus"
        return f"{path} (tokenizer sha256 {d['tokenizer_sha256'][:12]}, tokens {d['tokens_sha256'][:12]})"

    raise CheckpointError(
        f"{ckpt} was trained on {named(saved.data.path, recorded)}, not on "
        f"{named(cfg.data.path, digests)}: refusing to resume on another corpus; give the run's "
        f"own corpus, or to continue pretraining its model on this text, {argument('init', str(ckpt))} "
        f"with another {argument('run_dir')} and no {argument('resume')} (another {argument('run_dir')} "
        f"without {argument('init')} starts from scratch)"
    )


def check_same_resume_step(step: int, run_dir: Path, rank: int, world: int) -> None:
    """Every rank resumes from the same step, or all raise: a node that does not see the run folder rank 0 wrote
    (no shared filesystem) would otherwise start from step 0 beside the others, silently (docs/multinode.md)."""
    if world == 1:
        return
    steps: list = [None] * world
    dist.all_gather_object(steps, (step, socket.gethostname()))
    if len({s for s, _ in steps}) > 1:
        views = ", ".join(f"rank {r} on {host}: step {s}" for r, (s, host) in enumerate(steps))
        raise CheckpointError(
            f"the ranks see different checkpoints in {Path(run_dir) / 'checkpoints'} ({views}): "
            "a run on several nodes needs the run folder on a filesystem they all share"
        )


def restore_training_state(
    path: Path,
    cfg,
    model,
    optimizer,
    scaler,
    rank: int,
    world: int,
    device: torch.device | str = "cpu",
    data_digests: dict | None = None,
) -> tuple[RunMeta, dict | None] | None:
    """Load the newest usable checkpoint of the run folder `path` (or the checkpoint `path`) into model,
    optimizer, scaler and RNG. Every file is checked against SHA256SUMS first; a damaged, edited or unreadable
    checkpoint is skipped with a warning naming the file, and the one before it is tried.

    Returns (meta, this rank's saved `loop_state` or None), or None when the run has no checkpoint yet. Raises
    CheckpointError when checkpoints exist but none is usable, or when the newest usable one was written with a
    config that computes something else, or on another corpus than `data_digests` (check_same_corpus). Tensors
    load onto `device`, this rank's, wherever they were saved (a checkpoint of rank 0 on cuda:0 would otherwise
    load onto cuda:0 in every rank)."""
    path = Path(path)
    candidates = [path] if (path / COMPLETE_MARKER).exists() else list_checkpoints(path)[::-1]
    problems = []
    for ckpt in candidates:
        refuse_weights_only(ckpt)
        try:
            verify_checkpoint(ckpt, TRAINING_FILES)
            saved = read_config(ckpt / "config.yaml")
        except CheckpointError as err:
            log.warning("skipping unreadable checkpoint %s: %s", ckpt, err)
            problems.append(str(err))
            continue
        check_same_corpus(ckpt, saved, cfg, data_digests)
        diff = config_differences(saved, cfg)
        if diff:
            raise CheckpointError(
                f"{ckpt} was written with another config; refusing to resume. Differences: {'; '.join(diff[:6])}"
            )
        if saved.train.max_steps != cfg.train.max_steps:  # said only for a resume that goes ahead
            log.warning(
                "max_steps %d -> %d: the learning-rate schedule changes from the resumed step on",
                saved.train.max_steps,
                cfg.train.max_steps,
            )
        try:
            model.load_state_dict(load_file(ckpt / "model.safetensors"))
            # weights_only: never runs code from a file
            optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", map_location=device, weights_only=True))
            scaler.load_state_dict(torch.load(ckpt / "scaler.pt", map_location="cpu", weights_only=True))
            rng = torch.load(ckpt / "rng.pt", map_location="cpu", weights_only=True)  # RNG states are CPU bytes
            meta = RunMeta.from_json((ckpt / "state.json").read_text())
        except Exception as err:  # noqa: BLE001 - any unreadable file means: try the previous checkpoint
            log.warning("skipping unreadable checkpoint %s: %s", ckpt, " ".join(str(err).split())[:500])
            problems.append(f"{ckpt}: {err}")
            continue
        saved_world = meta.world_size
        state = rng.get(f"rank{rank}") if saved_world == world else None
        if state is not None:
            torch.set_rng_state(state["torch"])
            if "cuda" in state and torch.cuda.is_available():
                torch.cuda.set_rng_state(state["cuda"])
        else:
            log.warning(
                "resuming with %d processes from a checkpoint of %d: dropout RNG is reseeded", world, saved_world
            )
        meta.world_size = world
        log.info("resumed from %s (step %d)", ckpt, meta.step)
        return meta, (state or {}).get("loop")
    if candidates:
        raise CheckpointError(
            f"{path}: no usable checkpoint among {len(candidates)}; the newest: {problems[0]}. "
            "Restore the files, or start over in another folder"
        )
    refuse_other_kind_of_folder(path)
    log.warning("%s holds no checkpoint yet: starting a fresh run there", path)
    return None


def refuse_weights_only(ckpt: Path) -> None:
    """A checkpoint of weights only (import-hf's step 0) is a model to start from, not a damaged training state:
    CheckpointError saying so, and to pass it as `init`."""
    if weights_only(ckpt):
        raise CheckpointError(
            f"{ckpt} holds a model's weights only (as `electra import-hf` writes them), no training state "
            f"to resume: to continue pretraining from it, pass {argument('init', str(ckpt))} (a fresh "
            f"optimizer and schedule) with another {argument('run_dir')} and no {argument('resume')}"
        )


# files that mark a folder another command writes: pretraining into it would mix two kinds of results (the
# report reads a folder with a config.yaml as a pretraining run and loses the GLUE results)
OTHER_FOLDERS = {
    "sweep.json": "a GLUE sweep (electra glue)",
    "study.json": "a study (electra study)",
    "results.json": "GLUE results (electra glue)",
}


def refuse_other_kind_of_folder(path: Path) -> None:
    """Raise CheckpointError when `path` is the folder of a GLUE sweep or a study, not a pretraining run."""
    for name, what in OTHER_FOLDERS.items():
        if (path / name).exists() and not (path / "config.yaml").exists():
            raise CheckpointError(
                f"{path} holds {what} ({name}), not a pretraining run: refusing to pretrain "
                f"into it; give the run's own folder, or another {argument('run_dir')}"
            )


def prepare_run_dir(run_dir: Path, cfg: PretrainConfig, tokens: TokenizerInfo, meta: RunMeta) -> None:
    """Make the run folder self-contained (resolved config, a copy of the tokenizer, run metadata) and as the
    resumed step left it: metrics.jsonl cut back to that step, leftovers of interrupted saves removed."""
    run_dir.mkdir(parents=True, exist_ok=True)
    rewind_run_folder(run_dir, meta.step)
    save_config(cfg, run_dir / "config.yaml")
    if tokens.path is not None and not (run_dir / "tokenizer").exists():
        partial = run_dir / ".tokenizer.partial"  # copied, then renamed: a kill never leaves half a tokenizer
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(tokens.path, partial)
        os.replace(partial, run_dir / "tokenizer")
    write_atomic(run_dir / "run.json", meta.to_json())
