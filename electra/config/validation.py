"""Refusing values no pretraining run can use, naming the key, before any work starts: plain ranges, then the
settings that depend on each other."""

from __future__ import annotations

import math
from typing import Any

from electra.config.schema import (
    ConfigError,
    DataConfig,
    ModelConfig,
    ObjectiveConfig,
    PretrainConfig,
    TrainConfig,
)


def validate(cfg: PretrainConfig) -> None:
    """Refuse values no run can use, naming the key, before any work starts: plain ranges first, then the
    settings that depend on each other (the world size is checked by the training loop's setup)."""
    for key, value, ok, requirement in _range_rules(cfg):
        if not ok:
            raise ConfigError(f"{key} must be {requirement}, got {value!r}")
    t = cfg.train
    if t.micro_batch_size is not None and t.batch_size % t.micro_batch_size:
        raise ConfigError(
            f"train.micro_batch_size {t.micro_batch_size} does not divide train.batch_size {t.batch_size}"
        )
    for ok, message in _dependency_rules(cfg):  # in order: each check may rely on the ones before it
        if not ok():
            raise ConfigError(message)


def _positive(x) -> bool:
    return x > 0 and math.isfinite(x)


def _fraction(x, low_open: bool = False, high_open: bool = True) -> bool:
    return (0 < x if low_open else 0 <= x) and (x < 1 if high_open else x <= 1)


def _range_rules(cfg: PretrainConfig) -> list[tuple[str, Any, bool, str]]:
    """(key, value, ok, what it must be) for every value with a range of its own, section by section in the order
    validate reports them (model, objective, data, train)."""
    return [
        *_model_ranges(cfg.model),
        *_objective_ranges(cfg.objective),
        *_data_ranges(cfg.data),
        *_train_ranges(cfg.train),
    ]


def _model_ranges(m: ModelConfig) -> list[tuple[str, Any, bool, str]]:
    """The model's sizes, dropouts and ids."""
    gen_sizes = (m.generator_hidden_size, m.generator_num_heads, m.generator_intermediate_size)
    return [
        *[
            (f"model.{k}", getattr(m, k), getattr(m, k) >= 1, ">= 1")
            for k in (
                "vocab_size",
                "embedding_size",
                "hidden_size",
                "num_layers",
                "num_heads",
                "intermediate_size",
                "max_position_embeddings",
                "type_vocab_size",
            )
        ],
        *[
            (f"model.generator_{k}", v, v is None or v >= 1, ">= 1 or null")
            for k, v in zip(("hidden_size", "num_heads", "intermediate_size"), gen_sizes, strict=True)
        ],
        ("model.generator_fraction", m.generator_fraction, _fraction(m.generator_fraction, True, False), "in (0, 1]"),
        ("model.dropout", m.dropout, _fraction(m.dropout), "in [0, 1)"),
        ("model.attention_dropout", m.attention_dropout, _fraction(m.attention_dropout), "in [0, 1)"),
        ("model.layer_norm_eps", m.layer_norm_eps, _positive(m.layer_norm_eps), "> 0"),
        ("model.initializer_range", m.initializer_range, _positive(m.initializer_range), "> 0"),
        ("model.pad_token_id", m.pad_token_id, 0 <= m.pad_token_id < m.vocab_size, "in [0, model.vocab_size)"),
    ]


def _objective_ranges(o: ObjectiveConfig) -> list[tuple[str, Any, bool, str]]:
    """The masking rates, the sampling temperature and replacement schedules, the loss weights."""
    return [
        ("objective.mask_prob", o.mask_prob, _fraction(o.mask_prob, True), "in (0, 1)"),
        ("objective.mask_token_prob", o.mask_token_prob, _fraction(o.mask_token_prob, False, False), "in [0, 1]"),
        ("objective.temperature", o.temperature, _positive(o.temperature), "> 0"),
        (
            "objective.temperature_start",
            o.temperature_start,
            o.temperature_start is None or _positive(o.temperature_start),
            "> 0 or null",
        ),
        ("objective.temperature_steps", o.temperature_steps, o.temperature_steps >= 0, ">= 0"),
        (
            "objective.uniform_replace_prob",
            o.uniform_replace_prob,
            _fraction(o.uniform_replace_prob, False, False),
            "in [0, 1]",
        ),
        (
            "objective.uniform_replace_start",
            o.uniform_replace_start,
            o.uniform_replace_start is None or _fraction(o.uniform_replace_start, False, False),
            "in [0, 1] or null",
        ),
        ("objective.uniform_replace_steps", o.uniform_replace_steps, o.uniform_replace_steps >= 0, ">= 0"),
        (
            "objective.generator_weight",
            o.generator_weight,
            o.generator_weight >= 0 and math.isfinite(o.generator_weight),
            ">= 0",
        ),
        (
            "objective.discriminator_weight",
            o.discriminator_weight,
            o.discriminator_weight >= 0 and math.isfinite(o.discriminator_weight),
            ">= 0",
        ),
    ]


def _data_ranges(d: DataConfig) -> list[tuple[str, Any, bool, str]]:
    """The sequence length and the held-out share."""
    return [
        ("data.seq_len", d.seq_len, d.seq_len >= 4, ">= 4 ([CLS] A [SEP] B [SEP] needs room)"),
        ("data.eval_fraction", d.eval_fraction, _fraction(d.eval_fraction), "in [0, 1)"),
    ]


def _train_ranges(t: TrainConfig) -> list[tuple[str, Any, bool, str]]:
    """Steps, batches, optimizer, cadences and checkpoint retention."""
    return [
        ("train.max_steps", t.max_steps, t.max_steps >= 1, ">= 1"),
        ("train.threads", t.threads, t.threads == "auto" or t.threads >= 1, ">= 1 or auto"),
        ("train.batch_size", t.batch_size, t.batch_size >= 1, ">= 1"),
        (
            "train.micro_batch_size",
            t.micro_batch_size,
            t.micro_batch_size is None or t.micro_batch_size >= 1,
            ">= 1 or null",
        ),
        ("train.max_memory_gb", t.max_memory_gb, t.max_memory_gb is None or _positive(t.max_memory_gb), "> 0 or null"),
        ("train.lr", t.lr, _positive(t.lr), "> 0"),
        ("train.lr_width", t.lr_width, t.lr_width is None or t.lr_width >= 1, ">= 1 (or null)"),
        ("train.generator_lr_scale", t.generator_lr_scale, _positive(t.generator_lr_scale), "> 0"),
        ("train.warmup_steps", t.warmup_steps, t.warmup_steps >= 0, ">= 0"),
        ("train.weight_decay", t.weight_decay, t.weight_decay >= 0 and math.isfinite(t.weight_decay), ">= 0"),
        ("train.beta1", t.beta1, _fraction(t.beta1), "in [0, 1)"),
        ("train.beta2", t.beta2, _fraction(t.beta2), "in [0, 1)"),
        ("train.eps", t.eps, _positive(t.eps), "> 0"),
        ("train.grad_clip", t.grad_clip, _positive(t.grad_clip), "> 0"),
        ("train.seed", t.seed, t.seed >= 0, ">= 0"),
        *[
            (f"train.{k}", getattr(t, k), getattr(t, k) >= 1, ">= 1")
            for k in ("log_every", "eval_every", "eval_batches", "save_every", "max_nonfinite", "collapse_patience")
        ],
        ("train.keep_last", t.keep_last, t.keep_last >= 0, ">= 0 (0 keeps every checkpoint)"),
        ("train.decay_steps", t.decay_steps, t.decay_steps is None or t.decay_steps >= 1, ">= 1 (or null)"),
    ]


def _dependency_rules(cfg: PretrainConfig) -> list[tuple[Any, str]]:
    """(check, message) for the settings that depend on each other, each check a function run in order."""
    m, o, d = cfg.model, cfg.objective, cfg.data
    with_replacement = o.masking == "fixed" and o.position_sampling == "with_replacement"
    return [
        (lambda: m.hidden_size % m.num_heads == 0, "model.hidden_size must be divisible by model.num_heads"),
        (
            lambda: m.generator.hidden_size % m.generator.num_heads == 0,
            "generator hidden size must divide by its heads (model.generator_fraction, model.generator_num_heads)",
        ),
        (
            lambda: (
                m.position_embedding != "rotary"
                or all((z.hidden_size // z.num_heads) % 2 == 0 for z in (m.discriminator, m.generator))
            ),
            "rotary positions rotate pairs of features: every head size (hidden / heads) must be even",
        ),
        (lambda: d.seq_len <= m.max_position_embeddings, "data.seq_len exceeds model.max_position_embeddings"),
        (lambda: cfg.num_mask_slots >= 1, "objective.mask_prob leaves no masked slot at this data.seq_len"),
        # a repeated draw's slot moves to a free position (masking.py): N of them must remain besides the k drawn
        (
            lambda: o.repeated_draws == "once" or (with_replacement and o.kind == "electra"),
            "objective.repeated_draws=original is OFF's ELECTRA masking: it needs objective.kind=electra, "
            "objective.masking=fixed and objective.position_sampling=with_replacement",
        ),
        (
            lambda: not with_replacement or 2 * cfg.num_mask_slots <= d.seq_len,
            "objective.mask_prob above ~0.49 needs objective.position_sampling=without_replacement",
        ),
    ]
