"""What a continued run starts from (`pretrain(init=SOURCE)`): a model you already have, read with where it came
from. SOURCE is one of

    a run of ours          a run folder (its final checkpoint; refused while the run trains), a checkpoint folder,
                           or the folder `electra import-hf` made (a step-0 checkpoint of weights only)
    our transformers export   OUT with discriminator/ + generator/, or OUT with masked_lm/ (the MLM baseline)
    a transformers pair    a discriminator folder or hub id ORG/NAME[@REV], with `generator` naming the generator's
    a discriminator alone  a transformers ElectraForPreTraining folder or hub id: the generator is made afresh
    a masked LM alone      a transformers ElectraForMaskedLM folder: continued as the MLM baseline

`Source.record()` is what run.json keeps of it: the source as given, the path read (a hub id: its cached snapshot,
and the revision), its step and the FLOPs already spent in it (None where unknown: a model from elsewhere), and the
sha256 of its weights. Only configs and digests are read here; the weights are read by `Source.load_into`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from electra.config import ModelConfig, PretrainConfig
from electra.data.prepare import tokenizer_sha256
from electra.data.tokenizer import find_tokenizer
from electra.modeling.convert_hf import (
    discriminator_into,
    from_hf,
    masked_lm_from_hf,
    model_config_from_hf,
    read_hf_config,
)
from electra.modeling.electra import ElectraForPretraining, MaskedLMForPretraining
from electra.modeling.flops import off_train_flops
from electra.modeling.hub import is_hub_id, resolve_model
from electra.training.checkpoint import (
    CheckpointError,
    checkpoint_step,
    load_model_checkpoint,
    read_config,
    resolve_checkpoint,
)
from electra.utils.files import read_checksums, sha256_file

SYNTHETIC = "the built-in synthetic corpus"
"""`Source.tokenizer` of a run trained on the built-in language, which has no tokenizer file."""

MASKED_LM_ARCHITECTURES = ("ElectraForMaskedLM", "RoFormerForMaskedLM")
DISCRIMINATOR_ARCHITECTURES = ("ElectraForPreTraining", "RoFormerModel")


@dataclass
class Source:
    """A model to start from, resolved (`open_source`)."""

    given: str
    """SOURCE as the user wrote it."""
    kind: str
    """run (ours), pair (two transformers folders: our export, or a released pair), discriminator, masked_lm."""
    path: Path
    """The checkpoint, discriminator or masked-LM folder read."""
    model: ModelConfig
    """The source's model; a discriminator alone's generator sizes are the defaults, for the run to set."""
    objective: str
    """What the source was trained as, and the run continues: electra or mlm."""
    sha256: str
    """Of its weights file (a pair: the discriminator's)."""
    tokenizer: str | None
    """The sha256 of its tokenizer (as prepared corpora record it), SYNTHETIC, or None: none came with it."""
    step: int | None = None
    """Its optimizer step; None: unknown (a model from elsewhere)."""
    flops: float | None = None
    """Training FLOPs already spent in it; None: unknown."""
    revision: str | None = None
    """A hub id's revision: the commit of its cached snapshot."""
    generator_given: str | None = None
    generator_path: Path | None = None
    generator_sha256: str | None = None
    fresh_generator: bool = False
    """A discriminator alone: the run makes its generator afresh, of the configured size."""
    trained_with: PretrainConfig | None = None
    """A run of ours: the config it trained with (for what the continued run sets afresh)."""

    def record(self) -> dict:
        """run.json's `init` (less what the run sets afresh)."""
        said = {
            "source": self.given,
            "path": str(self.path.resolve()),
            "revision": self.revision,
            "step": self.step,
            "sha256": self.sha256,
            "flops": self.flops,
        }
        if self.generator_path is not None:
            said.update(generator=self.generator_given, generator_path=str(self.generator_path.resolve()))
            said["generator_sha256"] = self.generator_sha256
        return said

    def load_into(self, model: ElectraForPretraining | MaskedLMForPretraining) -> list[str]:
        """Copy the source's weights into `model` (built with `continued_config`'s model); returns the names left as
        `model` was built (a discriminator alone: the generator's own weights)."""
        if self.kind == "discriminator":
            return discriminator_into(model, self.path)
        if self.kind == "run":
            source, _ = load_model_checkpoint(self.path)
        elif self.kind == "pair":
            source = from_hf(self.path, self.generator_path)
        else:
            source = masked_lm_from_hf(self.path)
        model.load_state_dict(source.state_dict())
        return []


def open_source(given: str | Path, generator: str | Path | None = None) -> Source:
    """SOURCE (and the generator beside a transformers discriminator) resolved, its record read; the weights are
    not read yet. CheckpointError / HFConversionError (ValueError) name what cannot be used."""
    path = resolve_model(given)  # a hub id: its cached snapshot (electra/modeling/hub.py)
    if not path.exists():
        raise CheckpointError(f"{path}: no such model folder")
    revision = path.name if is_hub_id(str(given)) and not Path(given).expanduser().exists() else None
    if generator is not None:
        gen_path = resolve_model(generator)
        if not gen_path.exists():
            raise CheckpointError(f"{gen_path}: no such model folder")
        return _pair(str(given), str(generator), path, gen_path, revision)
    if (path / "discriminator" / "config.json").exists() and (path / "generator" / "config.json").exists():
        return _pair(str(given), None, path / "discriminator", path / "generator", revision)
    if (path / "masked_lm" / "config.json").exists():
        return _transformers_alone(str(given), path / "masked_lm", revision)
    if (path / "config.json").exists():
        return _transformers_alone(str(given), path, revision)
    return _run(str(given), resolve_checkpoint(path))


def _weights_sha256(folder: Path) -> str:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return sha256_file(folder / name)
    raise CheckpointError(f"{folder}: no model.safetensors or pytorch_model.bin beside config.json")


def _tokenizer_of(folder: Path) -> str | None:
    found = find_tokenizer(folder)
    return None if found is None else tokenizer_sha256(found)


def _pair(given: str, gen_given: str | None, disc: Path, gen: Path, revision: str | None) -> Source:
    model = model_config_from_hf(read_hf_config(disc), read_hf_config(gen))
    return Source(
        given,
        "pair",
        disc,
        model,
        "electra",
        _weights_sha256(disc),
        _tokenizer_of(disc),
        revision=revision,
        generator_given=gen_given,
        generator_path=gen,
        generator_sha256=_weights_sha256(gen),
    )


def _transformers_alone(given: str, folder: Path, revision: str | None) -> Source:
    """A transformers discriminator (its generator made afresh) or masked LM (continued as the MLM baseline)."""
    config = read_hf_config(folder)
    arch = (config.get("architectures") or ["?"])[0]
    if arch in MASKED_LM_ARCHITECTURES:
        objective = "mlm"
    elif arch in DISCRIMINATOR_ARCHITECTURES:
        objective = "electra"
    else:
        raise CheckpointError(
            f"{folder}: a {arch}, not a discriminator with its replaced-token head ({DISCRIMINATOR_ARCHITECTURES[0]}) "
            f"nor a masked LM ({MASKED_LM_ARCHITECTURES[0]})"
        )
    kind = "masked_lm" if objective == "mlm" else "discriminator"
    model = model_config_from_hf(config, None)
    sha256, tokenizer = _weights_sha256(folder), _tokenizer_of(folder)
    return Source(
        given, kind, folder, model, objective, sha256, tokenizer, revision=revision, fresh_generator=kind != "masked_lm"
    )


def _run(given: str, ckpt: Path) -> Source:
    """A checkpoint of ours: its config, step, weights digest, the FLOPs spent to reach it, the tokenizer it
    trained with."""
    cfg = read_config(ckpt / "config.yaml")
    step = checkpoint_step(ckpt)
    state = _state(ckpt)
    sha256 = (read_checksums(ckpt) or {}).get("model.safetensors") or sha256_file(ckpt / "model.safetensors")
    objective = "mlm" if cfg.objective.kind == "mlm" else "electra"
    return Source(
        given,
        "run",
        ckpt,
        cfg.model,
        objective,
        sha256,
        _run_tokenizer(ckpt, cfg, state),
        step=step,
        flops=_flops_spent(ckpt, cfg, step, state),
        trained_with=cfg,
    )


def _state(ckpt: Path) -> dict | None:
    """The checkpoint's state.json (where its run stood); None for a checkpoint of weights only."""
    try:
        state = json.loads((ckpt / "state.json").read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{ckpt / 'state.json'}: cannot read ({' '.join(str(err).split())})") from err
    return state if isinstance(state, dict) else None


def _flops_spent(ckpt: Path, cfg: PretrainConfig, step: int, state: dict | None) -> float | None:
    """The training FLOPs behind checkpoint `ckpt` (the official accounting of its run's steps, plus what its own
    source had spent, if it continued one); 0 for a no-pretraining baseline; None where unknown: import-hf's
    weights-only checkpoint of a model trained elsewhere, or a chain that starts at one."""
    if state is None:
        baseline = step == 0 and (ckpt.parent.parent / "run.json").is_file()  # objective.kind=none's run
        return 0.0 if baseline else None
    own = off_train_flops(cfg, step) if step else 0.0
    earlier = state.get("init")
    if earlier is None:
        return own
    return None if earlier.get("flops") is None else own + earlier["flops"]


def _run_tokenizer(ckpt: Path, cfg: PretrainConfig, state: dict | None) -> str | None:
    """The tokenizer a checkpoint trained with: its corpus's digest as the run recorded it, SYNTHETIC for the
    built-in language, else the tokenizer folder beside it (RUN/tokenizer), if any."""
    digests = (state or {}).get("data_digests")
    if digests:
        return digests["tokenizer_sha256"]
    ours = state is not None or (ckpt.parent.parent / "run.json").is_file()  # not import-hf's
    if cfg.data.path is None and ours:
        return SYNTHETIC
    return _tokenizer_of(ckpt)
