"""Continued pretraining: a run that starts from a model you already have (`pretrain(init=SOURCE)`, `electra
pretrain --init SOURCE`), e.g. domain- or task-adaptive pretraining on new text (Gururangan et al. 2020).

Weights only: the run makes a fresh optimizer, learning-rate schedule (with its own warmup) and step counter, so
steps, FLOPs and the schedule count from 0. The model's shape comes from the source (electra/training/
init_source.py); a config value that contradicts it is refused in one line naming both values, and the corpus must
have been prepared with the source's tokenizer. What the run sets afresh (learning rate, warmup, steps, masking,
the temperature schedule, a new generator's size) is logged at the start and recorded in run.json's `init` beside
the source. Once started, a continued run resumes like any other: its own checkpoints, the source not read again.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from electra.config import ConfigError, PretrainConfig, validate
from electra.data.corpus import TOKENIZER_FILE, read_metadata
from electra.data.prepare import tokenizer_sha256
from electra.data.pretraining_data import PretrainingData
from electra.data.synthetic import synthetic_tokenizer_info
from electra.data.tokenizer import tokenizer_info
from electra.modeling.electra import ElectraForPretraining, MaskedLMForPretraining
from electra.training.checkpoint import CheckpointError, RunMeta
from electra.training.init_source import SYNTHETIC, Source, open_source
from electra.training.optim import peak_lr
from electra.utils.wording import argument

log = logging.getLogger("electra.pretrain")


@dataclass(frozen=True)
class Init:
    """What `pretrain(init=...)` starts from: SOURCE (init_source.py) and, for a transformers discriminator, the
    generator folder or hub id beside it."""

    source: str | Path
    generator: str | Path | None = None
    set_by: dict[str, str] | None = None
    """Config key -> what set it (`--config cpu`, `--set`), for refusals; None: the keys whose value differs from
    the dataclass defaults count as set, by "cfg"."""


SHAPE = {
    "embedding_size": "the source's embeddings are {} wide",
    "hidden_size": "the source's discriminator is {} wide",
    "num_layers": "the source has {} layers",
    "num_heads": "the source's discriminator has {} attention heads",
    "intermediate_size": "the source's feed-forward layers are {} wide",
    "max_position_embeddings": "the source has {} positions",
    "type_vocab_size": "the source has {} token types",
    "position_embedding": "the source's positions are {}",
    "embedding_sharing": "the source's embedding sharing is {}",
    "layer_norm_eps": "the source's layer-norm epsilon is {}",
    "pad_token_id": "the source's padding id is {}",
}
"""The model keys whose value the source fixes, and how its value reads in a refusal. The vocabulary is the
tokenizer's: `check_tokenizer` compares it."""
GENERATOR_KEYS = ("generator_fraction", "generator_hidden_size", "generator_num_heads", "generator_intermediate_size")
CHOSEN_MODEL_KEYS = ("dropout", "attention_dropout", "init", "initializer_range", "disc_output_bias")
"""Model keys a continued run may set: regularisation, and how weights it makes afresh (a new generator) start."""


def open_init(
    cfg: PretrainConfig, init: str | Path | Init, data: PretrainingData | None = None
) -> tuple[PretrainConfig, Source]:
    """The config of a run that starts from `init` (its model the source's) and the source, after the refusals:
    a config that contradicts the source's shape, a corpus of another tokenizer."""
    init = init if isinstance(init, Init) else Init(init)
    source = open_source(init.source, init.generator)
    cfg = continued_config(cfg, source, init.set_by)
    check_tokenizer(source, cfg, data)
    return cfg, source


def continued_config(cfg: PretrainConfig, source: Source, set_by: dict[str, str] | None = None) -> PretrainConfig:
    """`cfg` with the source's model (its generator too, unless it has none: then the configured one) and
    objective; ConfigError in one line for a value set (`set_by`) that contradicts the source."""
    set_by = set_by if set_by is not None else _differs_from_defaults(cfg)
    objective = _objective(cfg, source, set_by)
    for key, phrase in SHAPE.items():
        asked, theirs = getattr(cfg.model, key), getattr(source.model, key)
        if f"model.{key}" in set_by and asked != theirs:
            raise _contradiction(f"model.{key}", asked, set_by, phrase.format(theirs), source)
    model = dataclasses.replace(
        source.model, **{k: getattr(cfg.model, k) for k in CHOSEN_MODEL_KEYS if f"model.{k}" in set_by}
    )
    generator = {k: getattr(cfg.model, k) for k in GENERATOR_KEYS}
    if source.fresh_generator:
        model = dataclasses.replace(model, **generator)
    elif objective.kind == "electra" and any(f"model.{k}" in set_by for k in GENERATOR_KEYS):
        asked, theirs = dataclasses.replace(source.model, **generator).generator, source.model.generator
        if asked != theirs:
            key = next(f"model.{k}" for k in GENERATOR_KEYS if f"model.{k}" in set_by)
            share = theirs.hidden_size / source.model.hidden_size
            phrase = f"the source's generator is {theirs.hidden_size} wide ({share:g} of the discriminator)"
            raise _contradiction(key, getattr(cfg.model, key.removeprefix("model.")), set_by, phrase, source)
    data = cfg.data
    if data.seq_len > model.max_position_embeddings:
        if "data.seq_len" in set_by:
            phrase = f"the source has {model.max_position_embeddings} positions"
            raise _contradiction("data.seq_len", data.seq_len, set_by, phrase, source)
        data = dataclasses.replace(data, seq_len=model.max_position_embeddings)
    continued = dataclasses.replace(cfg, model=model, objective=objective, data=data)
    validate(continued)
    return continued


def _objective(cfg: PretrainConfig, source: Source, set_by: dict[str, str]):
    """The source's objective: ELECTRA for a generator and discriminator, the masked LM for a masked LM."""
    kind = cfg.objective.kind
    if kind == "none":
        raise ConfigError(
            f"objective.kind=none writes an initialised model: it starts from nothing, not from "
            f"{argument('init', str(source.given))}"
        )
    if kind != source.objective and "objective.kind" in set_by:
        what = "a masked LM" if source.objective == "mlm" else "an ELECTRA generator and discriminator"
        raise _contradiction("objective.kind", kind, set_by, f"the source is {what}", source)
    return dataclasses.replace(cfg.objective, kind=source.objective)


def _contradiction(key: str, value, set_by: dict[str, str], phrase: str, source: Source) -> ConfigError:
    return ConfigError(
        f"{key}={value} ({set_by[key]}) but {phrase}: the model's shape comes from "
        f"{argument('init', str(source.given))}; leave {key} out"
    )


def _differs_from_defaults(cfg: PretrainConfig) -> dict[str, str]:
    default = _flat(PretrainConfig())
    return {key: "cfg" for key, value in _flat(cfg).items() if value != default[key]}


def _flat(cfg: PretrainConfig) -> dict:
    """section.key -> value."""
    return {
        f"{section}.{f.name}": getattr(getattr(cfg, section), f.name)
        for section in ("model", "objective", "data", "train")
        for f in dataclasses.fields(getattr(cfg, section))
    }


# -- the tokenizer comes with the model ----------------------------------------------------------------------------


def check_tokenizer(source: Source, cfg: PretrainConfig, data: PretrainingData | None = None) -> None:
    """Refuse, in one line naming both, a corpus prepared with another tokenizer than the source's (its token ids
    would mean other words), or one whose vocabulary is not the source's size. A source that came with no
    tokenizer is checked by its vocabulary's size alone, with a warning."""
    digest, vocab, corpus = corpus_tokenizer(cfg, data)
    init = argument("init", str(source.given))
    if source.tokenizer is not None and source.tokenizer != digest:
        raise ConfigError(
            f"{init} came with {_tokenizer_words(source.tokenizer)}, but {corpus} was prepared with "
            f"{_tokenizer_words(digest)}: its token ids would mean other words; prepare the text with the "
            f"source's tokenizer (electra data prepare --tokenizer {source.given} ...)"
        )
    if source.tokenizer is None:
        log.warning("no tokenizer came with %s: cannot check that %s was prepared with its tokenizer", init, corpus)
    if source.model.vocab_size != vocab:
        raise ConfigError(
            f"{init} has a vocabulary of {source.model.vocab_size:,} tokens, but {corpus}'s tokenizer "
            f"{vocab:,}: prepare the text with the source's tokenizer"
        )


def corpus_tokenizer(cfg: PretrainConfig, data: PretrainingData | None = None) -> tuple[str, int, str]:
    """(its tokenizer's sha256 or SYNTHETIC, its vocabulary size, how to name it) of the run's corpus."""
    if data is not None:
        path = data.tokens.path
        return (SYNTHETIC if path is None else tokenizer_sha256(path)), data.tokens.vocab_size, "the data given"
    if cfg.data.path is None:
        return SYNTHETIC, synthetic_tokenizer_info().vocab_size, SYNTHETIC
    folder = Path(cfg.data.path)
    vocab = tokenizer_info(folder / TOKENIZER_FILE).vocab_size
    return read_metadata(folder)["tokenizer_sha256"], vocab, f"the corpus {folder}"


def _tokenizer_words(digest: str) -> str:
    return "the built-in synthetic vocabulary" if digest == SYNTHETIC else f"the tokenizer of sha256 {digest[:12]}"


# -- the run's start -----------------------------------------------------------------------------------------------


def start_from(
    source: Source,
    cfg: PretrainConfig,
    model: ElectraForPretraining | MaskedLMForPretraining,
    meta: RunMeta,
    rank: int,
) -> None:
    """A fresh run (step 0): the source's weights into `model`, its record into `meta.init`, the start logged.
    A resumed one keeps its own weights: refused if it did not start from this source."""
    if meta.step > 0:
        check_same_source(meta, source)
        return
    made = source.load_into(model)
    meta.init = {**source.record(), "afresh": afresh(cfg, source)}
    if rank == 0:
        log.info("%s", start_line(source, meta.init["afresh"], len(made)))


def check_same_source(meta: RunMeta, source: Source) -> None:
    """A resumed run given `init` must have started from it (its weights' sha256): `init` is never applied again."""
    init = argument("init", str(source.given))
    if meta.init is None:
        raise CheckpointError(
            f"the run to resume started from scratch (step {meta.step:,}), not from {init}, which only a fresh run "
            f"takes: resume it without {argument('init')}, or start the continued run in another "
            f"{argument('run_dir')}"
        )
    if meta.init.get("sha256") != source.sha256:
        raise CheckpointError(
            f"the run to resume started from {meta.init.get('source')} (weights sha256 "
            f"{str(meta.init.get('sha256'))[:12]}), not from {init} (sha256 {source.sha256[:12]}): give the run's "
            f"own source, or start the continued run in another {argument('run_dir')}"
        )


def afresh(cfg: PretrainConfig, source: Source) -> dict:
    """What the continued run sets for itself (the source's weights aside): its schedule, masking and sampling,
    and the size of a generator it makes."""
    t, o = cfg.train, cfg.objective
    said = {
        "train.lr": peak_lr(cfg),
        "train.warmup_steps": t.warmup_steps,
        "train.schedule": t.schedule,
        "train.max_steps": t.max_steps,
        "train.decay_steps": t.decay_steps,
        "train.optimizer": t.optimizer,
        "train.batch_size": t.batch_size,
        "data.seq_len": cfg.data.seq_len,
        "objective.masking": o.masking,
        "objective.mask_prob": o.mask_prob,
        "objective.mask_token_prob": o.mask_token_prob,
    }
    if o.kind == "electra":
        said["objective.temperature"] = o.temperature
        said["objective.temperature_start"] = o.temperature_start
        if o.temperature_start is not None:  # the schedule's length means nothing without one
            said["objective.temperature_steps"] = o.temperature_steps
    if source.fresh_generator:
        said["model.generator_fraction"] = cfg.model.generator_fraction
        said["model.generator_hidden_size"] = cfg.model.generator.hidden_size
    return said


def start_line(source: Source, said: dict, made: int) -> str:
    """The log line a continued run starts with: the source, and what is set afresh (beside the source's own
    value, where it was a run of ours and differs)."""
    step = "its step unknown" if source.step is None else f"step {source.step:,}"
    spent = "FLOPs spent in it unknown" if source.flops is None else f"{source.flops:.3g} FLOPs spent in it"
    before = _trained_values(source)
    values = ", ".join(
        f"{k}={v}" + (f" (the source: {before[k]})" if k in before and before[k] != v else "") for k, v in said.items()
    )
    generator = f"; a new generator ({made} tensors) seeded by train.seed" if made else ""
    return (
        f"starting from {source.given} ({step}; weights sha256 {source.sha256[:12]}; {spent}): its weights only, a "
        f"fresh optimizer, learning-rate schedule and step counter{generator}; set afresh: {values}"
    )


def _trained_values(source: Source) -> dict:
    cfg = source.trained_with
    return {} if cfg is None else {**_flat(cfg), "train.lr": peak_lr(cfg)}
