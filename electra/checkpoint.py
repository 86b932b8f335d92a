"""Run folders and checkpoints: what a run leaves on disk and how any model is found again.

    RUN_DIR/config.yaml                     the resolved PretrainConfig
    RUN_DIR/tokenizer/tokenizer.json        a copy of the tokenizer (absent for the built-in synthetic data)
    RUN_DIR/metrics.jsonl                   one JSON object per log step
    RUN_DIR/checkpoints/step_00001000/      model.safetensors, config.yaml, and the training state

Every write goes to a temporary name first and is renamed into place, so a killed process never leaves a
half-written checkpoint that looks complete. Loading reads safetensors and JSON/YAML only: it never runs code.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import yaml
from safetensors.torch import load_file, save_file

from electra.config import ConfigError, ModelConfig, PretrainConfig, from_dict, to_dict
from electra.files import write_atomic
from electra.model import ElectraForPretraining, ElectraModel, MaskedLMForPretraining, build_model

log = logging.getLogger("electra.checkpoint")

CHECKPOINT_PREFIX = "step_"
COMPLETE_MARKER = "COMPLETE"  # written last: a folder without it is an interrupted save


class CheckpointError(ValueError):
    pass


@dataclass
class RunMeta:
    """Where a pretraining run stands: RUN/run.json and each checkpoint's state.json."""

    step: int = 0
    """Optimizer steps done."""
    samples: int = 0
    nonfinite_skipped: int = 0
    """Updates skipped because the loss or a gradient was not finite."""
    consecutive_nonfinite: int = 0
    collapsed: bool = False
    """The held-out discriminator metrics stayed at the collapse level for `collapse_patience` evaluations."""
    collapse_streak: int = 0
    collapse_first_step: int | None = None
    code_revision: str = "unknown"
    world_size: int = 1
    device: str = "unknown"
    train_seconds: float = 0.0
    """Wall-clock seconds spent in training steps, evaluation and saves, summed over resumed sessions."""
    stopped_by_signal: int | None = None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> RunMeta:
        raw = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})  # keys of older versions are dropped


def save_config(cfg: PretrainConfig, path: Path) -> None:
    write_atomic(path, yaml.safe_dump(to_dict(cfg), sort_keys=False))


def read_config(path: Path) -> PretrainConfig:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise CheckpointError(f"{path}: cannot read the config: {err}") from err
    try:
        return from_dict(raw, source=str(path))
    except ConfigError as err:
        raise CheckpointError(str(err)) from err


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"{CHECKPOINT_PREFIX}{step:08d}"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(CHECKPOINT_PREFIX)]
    return sorted((p for p in found if (p / COMPLETE_MARKER).exists()), key=lambda p: p.name)


def save_model_checkpoint(
    model: ElectraForPretraining, cfg: PretrainConfig, ckpt: Path, extra_files: dict[str, bytes] | None = None
) -> Path:
    """Write model weights, config and any extra files into `ckpt`, built in a temporary folder and renamed."""
    ckpt = Path(ckpt)
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=ckpt.parent, prefix=f".{ckpt.name}."))
    try:
        state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
        save_file(state, tmp / "model.safetensors")
        save_config(cfg, tmp / "config.yaml")
        for name, data in (extra_files or {}).items():
            (tmp / name).write_bytes(data)
        (tmp / COMPLETE_MARKER).write_text("")
        if ckpt.exists():
            shutil.rmtree(ckpt)
        os.replace(tmp, ckpt)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ckpt


def load_model_checkpoint(ckpt: Path) -> tuple[ElectraForPretraining, PretrainConfig]:
    ckpt = Path(ckpt)
    if not (ckpt / COMPLETE_MARKER).exists():
        raise CheckpointError(f"{ckpt}: incomplete checkpoint (interrupted save)")
    cfg = read_config(ckpt / "config.yaml")
    model = build_model(cfg)
    try:
        state = load_file(ckpt / "model.safetensors")
        model.load_state_dict(state)
    except Exception as err:  # corrupt file, or weights of another config
        raise CheckpointError(f"{ckpt / 'model.safetensors'}: cannot load: {err}") from err
    return model, cfg


def find_tokenizer(path: Path) -> Path | None:
    """The tokenizer folder that belongs to a run, checkpoint or HF folder, if any."""
    path = Path(path)
    for candidate in (path / "tokenizer", path.parent.parent / "tokenizer", path, path / "discriminator",
                      path / "masked_lm"):  # fmt: skip
        if (candidate / "tokenizer.json").exists() or (candidate / "vocab.txt").exists():
            return candidate
    return None


def resolve_checkpoint(path: Path) -> Path:
    """A run folder means its newest complete checkpoint; a checkpoint folder means itself."""
    path = Path(path)
    if (path / COMPLETE_MARKER).exists():
        return path
    ckpts = list_checkpoints(path)
    if not ckpts:
        raise CheckpointError(f"{path}: no complete checkpoint found (expected a run folder or a checkpoint)")
    return ckpts[-1]


def load_pretraining_model(path: str | Path) -> tuple[ElectraForPretraining | MaskedLMForPretraining, PretrainConfig]:
    """The pretraining model from a run folder, a checkpoint, or an HF export (discriminator/ + generator/, or
    masked_lm/ for the MLM baseline)."""
    path = Path(path)
    if (path / "discriminator" / "config.json").exists() and (path / "generator" / "config.json").exists():
        from electra.hf_compat import from_hf

        model = from_hf(path / "discriminator", path / "generator")
        return model, PretrainConfig.for_model(model.cfg)
    if (path / "masked_lm" / "config.json").exists():
        from electra.hf_compat import masked_lm_from_hf

        model = masked_lm_from_hf(path / "masked_lm")
        return model, dataclasses.replace(PretrainConfig.for_model(model.cfg), objective=model.objective)
    model, cfg = load_model_checkpoint(resolve_checkpoint(path))
    return model.eval(), cfg


def load_discriminator(path: str | Path) -> tuple[ElectraModel, ModelConfig, Path | None]:
    """The body for fine-tuning (ELECTRA's discriminator, or the MLM baseline's encoder), from any of: a run
    folder, a checkpoint, our HF export, or a transformers ELECTRA folder (e.g. a saved
    google/electra-small-discriminator). Returns the tokenizer folder that came with it, if any."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such model folder")
    hf_dir = next((path / sub for sub in ("discriminator", "masked_lm") if (path / sub / "config.json").exists()), path)
    if (hf_dir / "config.json").exists():
        from electra.hf_compat import discriminator_body_from_hf

        body, cfg = discriminator_body_from_hf(hf_dir)
        return body, cfg, find_tokenizer(hf_dir)
    ckpt = resolve_checkpoint(path)
    model, cfg = load_model_checkpoint(ckpt)
    return ElectraModel.from_pretraining(model), cfg.model, find_tokenizer(ckpt)


# -- training state (the pretraining loop's checkpoints) ----------------------------------------------------------

# Settings that may change when a run is resumed: they do not alter what the run computes.
RESUMABLE_CHANGES = {
    "data.path", "train.log_every", "train.eval_every", "train.eval_batches", "train.save_every", "train.keep_last",
    "train.max_nonfinite", "train.collapse_patience", "train.stop_on_collapse", "train.compile",
    "train.micro_batch_size", "train.max_memory_gb",
    "train.max_steps",  # extending a run is allowed: the schedule then stretches from the resumed step on
}  # fmt: skip


def config_differences(saved: PretrainConfig, current: PretrainConfig) -> list[str]:
    """`key: saved -> current` for every setting that differs and would change what a resumed run computes."""
    a, b = _flatten(to_dict(saved)), _flatten(to_dict(current))
    return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)
            and k not in RESUMABLE_CHANGES]  # fmt: skip


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
        shutil.rmtree(old, ignore_errors=True)


def save_training_state(run_dir, cfg, model, optimizer, scaler, meta: RunMeta, rank: int, world: int) -> None:
    """A complete checkpoint of the training state (rank 0 writes; every rank's RNG state is gathered)."""

    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state()
    states = [None] * world
    if world > 1:
        dist.all_gather_object(states, rng)
    else:
        states = [rng]
    if rank == 0:
        extra = {}
        for name, obj in (("optimizer.pt", optimizer.state_dict()), ("scaler.pt", scaler.state_dict()),
                          ("rng.pt", {f"rank{r}": s for r, s in enumerate(states)})):  # fmt: skip
            buf = io.BytesIO()
            torch.save(obj, buf)
            extra[name] = buf.getvalue()
        extra["state.json"] = meta.to_json().encode()
        save_model_checkpoint(model, cfg, checkpoint_dir(run_dir, meta.step), extra)
        prune_checkpoints(run_dir, cfg.train.keep_last)
        write_atomic(run_dir / "run.json", meta.to_json())
    if world > 1:
        dist.barrier()


def restore_training_state(path: Path, cfg, model, optimizer, scaler, rank: int, world: int) -> RunMeta | None:
    """Load the newest valid checkpoint (skipping corrupt ones with a warning); None if there is none."""
    candidates = [path] if (path / COMPLETE_MARKER).exists() else list_checkpoints(path)[::-1]
    for ckpt in candidates:
        try:
            saved = read_config(ckpt / "config.yaml")
        except CheckpointError as err:
            log.warning("skipping unreadable checkpoint %s: %s", ckpt, err)
            continue
        if saved.train.max_steps != cfg.train.max_steps:
            log.warning("max_steps %d -> %d: the learning-rate schedule changes from the resumed step on",
                        saved.train.max_steps, cfg.train.max_steps)  # fmt: skip
        diff = config_differences(saved, cfg)
        if diff:
            raise CheckpointError(
                f"{ckpt} was written with another config; refusing to resume. Differences: {'; '.join(diff[:6])}"
            )
        try:
            model.load_state_dict(load_file(ckpt / "model.safetensors"))
            optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
            scaler.load_state_dict(torch.load(ckpt / "scaler.pt", weights_only=True))
            rng = torch.load(ckpt / "rng.pt", weights_only=True)
            meta = RunMeta.from_json((ckpt / "state.json").read_text())
        except Exception as err:  # noqa: BLE001 - any unreadable file means: try the previous checkpoint
            log.warning("skipping unreadable checkpoint %s: %s", ckpt, err)
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
        return meta
    return None


# -- transformers folders <-> run folders ----------------------------------------------------------------------


def export_run_to_hf(run: str | Path, out: str | Path) -> Path:
    """A run's newest checkpoint (or a checkpoint folder) as OUT/discriminator + OUT/generator for transformers."""
    from electra.hf_compat import to_hf

    ckpt = resolve_checkpoint(Path(run))
    model, _ = load_model_checkpoint(ckpt)
    return to_hf(model, out, find_tokenizer(ckpt))


def import_run_from_hf(discriminator: str | Path, generator: str | Path, out: str | Path) -> Path:
    """A run folder holding one step-0 checkpoint made from two transformers ELECTRA folders (and the tokenizer
    found beside the discriminator, if any). Returns the checkpoint folder."""
    from electra.hf_compat import from_hf

    model = from_hf(discriminator, generator)
    cfg = PretrainConfig.for_model(model.cfg)
    out = Path(out)
    save_config(cfg, out / "config.yaml")
    tok = find_tokenizer(Path(discriminator))
    if tok is not None:
        (out / "tokenizer").mkdir(parents=True, exist_ok=True)
        for name in ("tokenizer.json", "vocab.txt"):
            if (tok / name).exists():
                shutil.copy(tok / name, out / "tokenizer" / name)
    return save_model_checkpoint(model, cfg, checkpoint_dir(out, 0))
