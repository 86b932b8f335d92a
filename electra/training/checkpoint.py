"""Run folders and checkpoints: what a run leaves on disk and how any model is found again.

    RUN_DIR/config.yaml                     the resolved PretrainConfig
    RUN_DIR/tokenizer/tokenizer.json        a copy of the tokenizer (absent for the built-in synthetic data)
    RUN_DIR/metrics.jsonl                   one JSON object per log step
    RUN_DIR/checkpoints/step_00001000/      model.safetensors, config.yaml, the training state (optimizer.pt,
                                            scaler.pt, rng.pt, state.json), SHA256SUMS, and COMPLETE

Every write goes to a temporary name first and is renamed into place, so a killed process never leaves a
half-written checkpoint that looks complete; a full disk leaves the previous checkpoint as it was. SHA256SUMS
records every file's sha256 before COMPLETE is written, and loading checks them, so a damaged or edited file is
an error naming it (resuming then falls back to the previous checkpoint). Loading reads safetensors, JSON/YAML and
`torch.load(weights_only=True)` files only: it never runs code from a checkpoint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes

from electra.config import ConfigError, ModelConfig, PretrainConfig, from_dict, to_dict
from electra.data.tokenizer import find_tokenizer
from electra.modeling.convert_hf import discriminator_body_from_hf, from_hf, masked_lm_from_hf, to_hf
from electra.modeling.electra import ElectraForPretraining, ElectraModel, MaskedLMForPretraining, build_model
from electra.modeling.hub import resolve_model
from electra.utils.errors import CorruptFileError, DiskFullError, InputError, is_disk_full
from electra.utils.faults import failpoint
from electra.utils.files import (
    CHECKSUMS_FILE,
    checksums_text,
    read_checksums,
    sha256_file,
    verify_digests,
    write_atomic,
)
from electra.utils.wording import argument

log = logging.getLogger("electra.checkpoint")

CHECKPOINT_PREFIX = "step_"
COMPLETE_MARKER = "COMPLETE"  # written last: a folder without it is an interrupted save
VERIFIED_BY = f"{CHECKSUMS_FILE}\n"
"""What COMPLETE says in a checkpoint with checksums (empty in those written before them)."""
MODEL_FILES = ("model.safetensors", "config.yaml")
TRAINING_FILES = (*MODEL_FILES, "optimizer.pt", "scaler.pt", "rng.pt", "state.json")
"""What resuming needs; a checkpoint made by import-hf holds the model files only."""


class CheckpointError(InputError):
    """A checkpoint or run folder that cannot be used; the message names the file."""


@dataclass
class RunMeta:
    """Where a pretraining run stands: RUN/run.json and each checkpoint's state.json."""

    step: int = 0
    """Optimizer steps done."""
    samples: int = 0
    nonfinite_skipped: int = 0
    """Updates skipped because the loss or a gradient was not finite."""
    consecutive_nonfinite: int = 0
    scaler_backoffs: int = 0
    """fp16 only: updates skipped while the GradScaler lowered its loss scale (not counted as non-finite)."""
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
    """The signal (SIGTERM 15, SIGINT 2) that stopped the last session, None when it ran to its end."""
    sessions: list[dict] = dataclasses.field(default_factory=list)
    """One entry per training session (a resumed run has several): device, machine (the CPU's model and threads,
    or the GPU's name on its host: electra.utils.machine), world_size, start_step and start_seconds (train_seconds
    when it started); a session ends where the next one starts."""
    precision: str = "unknown"
    """The autocast precision this session resolved train.precision to ..."""
    precision_reason: str = ""
    """... and why (electra.training.precision.choose_precision)."""
    tf32: bool | None = None
    """Whether fp32 matmuls ran in TF32 this session (train.tf32, on CUDA >= 8.0 only); None: not recorded."""
    compiled: bool = False
    """Whether this session ran the step under torch.compile."""
    peak_lr: float | None = None
    """The schedule's peak learning rate: train.lr, or less above train.lr_width (electra.training.optim.peak_lr)."""
    temperature: float | None = None
    """The generator's sampling temperature at the last step done (objective.temperature_start's schedule, or the
    constant objective.temperature; electra.config.sampling_at); None for the masked LM, which samples nothing ..."""
    uniform_replace: float | None = None
    """... and its share of uniform replacements there, where they are mixed in (None where they are not)."""
    peak_memory_gb: float | None = None
    """This session's peak so far (GiB). CUDA: torch.cuda.max_memory_allocated; CPU: the process's peak resident
    memory (getrusage ru_maxrss), which includes the interpreter, libraries and data (~0.5 GiB) ..."""
    memory_estimate_gb: float | None = None
    """... beside what --max-memory-gb's estimate (electra/training/memory.py) says for its micro-batch ..."""
    memory_budget_gb: float | None = None
    """... the budget (train.max_memory_gb; None: none) ..."""
    micro_batch: int | None = None
    """... and the micro-batch this session ran (chosen for the budget, or train.micro_batch_size)."""
    data_digests: dict | None = None
    """The corpus trained on: {"tokenizer_sha256", "tokens_sha256"} from its metadata.json (electra/data/corpus.py),
    None for the built-in synthetic corpus or a run older than the field. A resume with another corpus is refused."""
    init: dict | None = None
    """Where a continued run's pretraining started (`pretrain(init=...)`, electra/training/continued.py): the
    source as given, the path read, its hub revision, its step and weights' sha256, the FLOPs already spent in it
    (None where unknown) and what was set afresh; None for a run from scratch."""
    finished: bool = False
    """The run reached train.max_steps and its final checkpoint (and the transformers export) are on disk: written
    last, so that nothing reads a run as done in the moments between its final evaluation and its final save. A
    resumed session sets it back to False until it finishes in turn."""

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
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError, yaml.YAMLError) as err:  # ValueError: bad UTF-8, 5000 digits
        raise CheckpointError(f"{path}: cannot read the config: {' '.join(str(err).split())}") from err
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
    """Write model weights, config and any extra files into `ckpt`: built in a temporary folder (each file
    fsynced, then SHA256SUMS, then COMPLETE) and renamed into place. A full disk raises DiskFullError naming the
    file and the newest checkpoint still intact, and leaves nothing of this one behind."""
    ckpt = Path(ckpt)
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    files = {
        "model.safetensors": safetensors_bytes(state),
        "config.yaml": yaml.safe_dump(to_dict(cfg), sort_keys=False).encode(),
        **(extra_files or {}),
    }
    files[CHECKSUMS_FILE] = checksums_text({n: hashlib.sha256(d).hexdigest() for n, d in files.items()}).encode()
    files[COMPLETE_MARKER] = VERIFIED_BY.encode()  # last: marks the folder complete
    tmp = Path(tempfile.mkdtemp(dir=ckpt.parent, prefix=f".{ckpt.name}."))
    name = ""
    try:
        for name, data in files.items():
            failpoint(f"checkpoint.write:{name}")
            _write_synced(tmp / name, data)
        name = ""
        _fsync(tmp)
        if ckpt.exists():
            remove_dir(ckpt)
        os.replace(tmp, ckpt)
        _fsync(ckpt.parent)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_disk_full(err):
            intact = [p for p in list_checkpoints(ckpt.parent.parent) if p != ckpt]
            kept = f"the previous checkpoint {intact[-1]} is intact" if intact else "no earlier checkpoint exists"
            raise DiskFullError(err.errno, f"disk full while writing {ckpt / name} ({err.strerror}); {kept}") from err
        raise
    failpoint("checkpoint.commit")
    return ckpt


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync(folder: Path) -> None:
    """Make a folder's entries (new files, a rename) durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_dir(folder: Path) -> None:
    """Rename away, then delete: a kill during the deletion never leaves a half-deleted folder under its name."""
    doomed = folder.parent / f".{folder.name}.deleting-{os.getpid()}"
    os.replace(folder, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


_warned_unverified = False


def verify_checkpoint(ckpt: Path, required: tuple[str, ...] = MODEL_FILES) -> None:
    """Check `ckpt`'s files against its SHA256SUMS; CheckpointError naming the first missing, damaged or edited
    file. A checkpoint written before checksums existed (an empty COMPLETE) is read unverified, warned once."""
    global _warned_unverified
    ckpt = Path(ckpt)
    if not (ckpt / COMPLETE_MARKER).is_file():
        raise CheckpointError(f"{ckpt}: incomplete checkpoint (interrupted save)")
    try:
        digests = read_checksums(ckpt)
        if digests is not None:
            verify_digests(ckpt, digests, required)
            return
        if (ckpt / COMPLETE_MARKER).read_bytes():
            raise CheckpointError(f"{ckpt / CHECKSUMS_FILE}: missing; the checkpoint cannot be verified")
    except CorruptFileError as err:
        raise CheckpointError(str(err)) from None
    if not _warned_unverified:
        log.warning(
            "%s (and any other checkpoint written before checksums were recorded) has no %s: its files "
            "are not verified",
            ckpt,
            CHECKSUMS_FILE,
        )
        _warned_unverified = True
    for name in required:
        if not (ckpt / name).is_file():
            raise CheckpointError(f"{ckpt / name}: missing")


def weights_only(ckpt: Path) -> bool:
    """Whether `ckpt` holds a model's files and none of its training state (import-hf's step-0 checkpoint): a
    model to start from (`pretrain(init=...)`), with nothing to resume. A checkpoint that lists a training file
    it lacks is damaged, not this."""
    ckpt = Path(ckpt)
    try:
        listed = read_checksums(ckpt) or {}
    except CorruptFileError:
        return False
    training = [name for name in TRAINING_FILES if name not in MODEL_FILES]
    return (
        (ckpt / COMPLETE_MARKER).is_file()
        and all(name in listed for name in MODEL_FILES)
        and not any(name in listed or (ckpt / name).exists() for name in training)
    )


def load_model_checkpoint(ckpt: Path) -> tuple[ElectraForPretraining, PretrainConfig]:
    ckpt = Path(ckpt)
    verify_checkpoint(ckpt)
    cfg = read_config(ckpt / "config.yaml")
    model = build_model(cfg)
    try:
        state = load_file(ckpt / "model.safetensors")
        model.load_state_dict(state)
    except Exception as err:  # corrupt file, or weights of another config
        raise CheckpointError(f"{ckpt / 'model.safetensors'}: cannot load: {err}") from err
    return model, cfg


def resolve_checkpoint(path: Path) -> Path:
    """A checkpoint folder means itself; a run folder means its final checkpoint, and is refused while its
    pretraining has not finished (`check_finished`): a model named by its run is the model the run ends with."""
    path = Path(path)
    if (path / COMPLETE_MARKER).exists():
        return path
    ckpts = list_checkpoints(path)
    if not ckpts:
        raise CheckpointError(f"{path}: no complete checkpoint found (expected a run folder or a checkpoint)")
    check_finished(path, ckpts[-1])
    return ckpts[-1]


def checkpoint_step(ckpt: Path) -> int:
    """The optimizer step a checkpoint folder holds (its name: step_00009000)."""
    return int(Path(ckpt).name.removeprefix(CHECKPOINT_PREFIX))


def run_finished(run_dir: Path) -> bool | None:
    """Whether the pretraining run in `run_dir` finished (RunMeta.finished); None for a folder without run.json
    (a model imported from transformers: weights only, nothing to finish). A run.json written before the flag
    counts as finished when the checkpoint of its step is complete and that step is the config's last (or 0)."""
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: cannot read ({' '.join(str(err).split())})") from err
    if "finished" in raw:
        return bool(raw["finished"])
    step = raw.get("step", 0)
    last = read_config(Path(run_dir) / "config.yaml").train.max_steps if step else 0
    return step == last and (checkpoint_dir(run_dir, step) / COMPLETE_MARKER).exists()


def check_finished(run_dir: Path, newest: Path) -> None:
    """Refuse, in one line, a run folder whose pretraining has not finished (still training, stopped by a signal,
    or killed): its newest checkpoint is not the model the run will end with. Naming a checkpoint is the way to
    use one of them anyway."""
    if run_finished(run_dir) is not False:
        return
    meta = RunMeta.from_json((Path(run_dir) / "run.json").read_text())
    total = read_config(Path(run_dir) / "config.yaml").train.max_steps
    raise CheckpointError(
        f"{run_dir}: pretraining is not finished (step {meta.step:,} of {total:,}; newest checkpoint "
        f"{checkpoint_step(newest):,}): name a checkpoint to use it anyway, {argument('model', str(newest))}, or "
        "let the run finish"
    )


def model_source(model: str | Path) -> dict:
    """What a model argument resolves to, for the record of every score fine-tuned from it: {"model": as given,
    "path": the checkpoint or transformers folder read, "step": the checkpoint's optimizer step (None for a
    transformers folder), "sha256": of its weights file}. A run folder resolves to its final checkpoint and is
    refused while its pretraining has not finished (`resolve_checkpoint`); a hub id to its cached snapshot."""
    path = Path(resolve_model(model))
    if not path.exists():
        raise CheckpointError(f"{path}: no such model folder")
    hf_dir = _transformers_folder(path)
    if hf_dir is not None:
        weights = next((hf_dir / n for n in ("model.safetensors", "pytorch_model.bin") if (hf_dir / n).is_file()), None)
        if weights is None:
            raise CheckpointError(f"{hf_dir}: no model.safetensors or pytorch_model.bin beside config.json")
        return {"model": str(model), "path": str(hf_dir.resolve()), "step": None, "sha256": sha256_file(weights)}
    ckpt = resolve_checkpoint(path)
    recorded = (read_checksums(ckpt) or {}).get("model.safetensors")  # verified when the model is loaded
    sha256 = recorded or sha256_file(ckpt / "model.safetensors")
    return {"model": str(model), "path": str(ckpt.resolve()), "step": checkpoint_step(ckpt), "sha256": sha256}


def _transformers_folder(path: Path) -> Path | None:
    """The transformers folder holding the discriminator (or the masked LM) under `path`, if `path` is one."""
    for candidate in (path / "discriminator", path / "masked_lm", path):
        if (candidate / "config.json").exists():
            return candidate
    return None


def load_pretraining_model(path: str | Path) -> tuple[ElectraForPretraining | MaskedLMForPretraining, PretrainConfig]:
    """The pretraining model from a run folder, a checkpoint, or an HF export (discriminator/ + generator/, or
    masked_lm/ for the MLM baseline)."""
    path = Path(path)
    if (path / "discriminator" / "config.json").exists() and (path / "generator" / "config.json").exists():
        model = from_hf(path / "discriminator", path / "generator")
        return model, PretrainConfig.for_model(model.cfg)
    if (path / "masked_lm" / "config.json").exists():
        model = masked_lm_from_hf(path / "masked_lm")
        return model, dataclasses.replace(PretrainConfig.for_model(model.cfg), objective=model.objective)
    model, cfg = load_model_checkpoint(resolve_checkpoint(path))
    return model.eval(), cfg


def load_discriminator(path: str | Path) -> tuple[ElectraModel, ModelConfig, Path | None]:
    """The body for fine-tuning (ELECTRA's discriminator, or the MLM baseline's encoder), from any of: a run
    folder, a checkpoint, our HF export, or a transformers ELECTRA folder (e.g. a saved
    google/electra-small-discriminator). Returns the tokenizer folder that came with it, if any."""
    path = resolve_model(path)  # a hub model id: its folder in the local Hugging Face cache (electra/modeling/hub.py)
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such model folder")
    hf_dir = _transformers_folder(path)
    if hf_dir is not None:
        body, cfg = discriminator_body_from_hf(hf_dir)
        return body, cfg, find_tokenizer(hf_dir)
    ckpt = resolve_checkpoint(path)
    model, cfg = load_model_checkpoint(ckpt)
    return ElectraModel.from_pretraining(model), cfg.model, find_tokenizer(ckpt)


# -- transformers folders <-> run folders ----------------------------------------------------------------------


def export_run_to_hf(run: str | Path, out: str | Path) -> Path:
    """A run's newest checkpoint (or a checkpoint folder) as OUT/discriminator + OUT/generator for transformers."""

    ckpt = resolve_checkpoint(Path(run))
    model, _ = load_model_checkpoint(ckpt)
    return to_hf(model, out, find_tokenizer(ckpt), started_from(ckpt))


def started_from(ckpt: Path) -> dict | None:
    """Where the run of checkpoint `ckpt` started, if it continued a model (its state.json's `init`)."""
    try:
        return json.loads((Path(ckpt) / "state.json").read_text()).get("init")
    except (OSError, ValueError, AttributeError):
        return None


def import_run_from_hf(discriminator: str | Path, generator: str | Path, out: str | Path) -> Path:
    """A run folder holding one step-0 checkpoint made from two transformers ELECTRA folders (and the tokenizer
    found beside the discriminator, if any). Returns the checkpoint folder."""
    discriminator, generator = resolve_model(discriminator), resolve_model(generator)  # hub ids: cached folders

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
