"""Conversion to and from transformers' ELECTRA (`ElectraForPreTraining` + `ElectraForMaskedLM`).

Our parameter names equal transformers' up to a prefix (see `_HF_PREFIXES`), so conversion is a renaming plus
the two facts transformers' files hide: the generator's output weight is the (shared) word table, and
`save_pretrained` in transformers 5 leaves that tied weight out of the file.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import torch
from torch import Tensor

from electra.config import ModelConfig, ObjectiveConfig, PretrainConfig
from electra.model import ElectraForPretraining, ElectraModel, MaskedLMForPretraining, build_model

log = logging.getLogger(__name__)

# (our prefix, HF prefix) per exported model; checked in order, first match wins.
_HF_PREFIXES = {
    "discriminator": [
        ("embeddings.", "electra.embeddings."),
        ("discriminator.electra.", "electra."),
        ("discriminator.discriminator_predictions.", "discriminator_predictions."),
    ],
    "generator": [
        ("embeddings.", "electra.embeddings."),
        ("generator.electra.", "electra."),
        ("generator.generator_predictions.", "generator_predictions."),
        ("generator.lm_head_bias", "generator_lm_head.bias"),
    ],
    # the MLM baseline (objective.kind mlm): one ElectraForMaskedLM with the discriminator's sizes
    "masked_lm": [
        ("embeddings.", "electra.embeddings."),
        ("masked_lm.electra.", "electra."),
        ("masked_lm.generator_predictions.", "generator_predictions."),
        ("masked_lm.lm_head_bias", "generator_lm_head.bias"),
    ],
}
_IGNORED_HF_KEYS = ("position_ids", "token_type_ids")  # stale buffers in older files


class HFConversionError(ValueError):
    pass


def _rename(key: str, pairs: list[tuple[str, str]], reverse: bool = False) -> str | None:
    for ours, theirs in pairs:
        src, dst = (theirs, ours) if reverse else (ours, theirs)
        if key.startswith(src):
            return dst + key[len(src) :]
    return None


def model_config_from_hf(disc: dict, gen: dict | None) -> ModelConfig:
    """Our ModelConfig from the two `config.json` dicts (the generator's sizes kept explicitly)."""
    if disc.get("hidden_act", "gelu") != "gelu":
        raise HFConversionError(f"hidden_act {disc['hidden_act']!r} is not supported (ELECTRA uses exact gelu)")
    if disc.get("position_embedding_type", "absolute") != "absolute":
        raise HFConversionError("only absolute position embeddings are supported")
    cfg = ModelConfig(
        vocab_size=disc["vocab_size"],
        embedding_size=disc["embedding_size"],
        hidden_size=disc["hidden_size"],
        num_layers=disc["num_hidden_layers"],
        num_heads=disc["num_attention_heads"],
        intermediate_size=disc["intermediate_size"],
        max_position_embeddings=disc["max_position_embeddings"],
        type_vocab_size=disc["type_vocab_size"],
        dropout=disc["hidden_dropout_prob"],
        attention_dropout=disc["attention_probs_dropout_prob"],
        layer_norm_eps=disc["layer_norm_eps"],
        initializer_range=disc.get("initializer_range", 0.02),
        pad_token_id=disc.get("pad_token_id", 0) or 0,
    )
    if gen is not None:
        for key in ("vocab_size", "embedding_size", "num_hidden_layers", "max_position_embeddings"):
            if gen[key] != disc[key]:
                raise HFConversionError(f"generator {key}={gen[key]} differs from discriminator {disc[key]}")
        cfg.generator_fraction = gen["hidden_size"] / disc["hidden_size"]
        cfg.generator_hidden_size = gen["hidden_size"]
        cfg.generator_num_heads = gen["num_attention_heads"]
        cfg.generator_intermediate_size = gen["intermediate_size"]
    return cfg


def hf_config(cfg: ModelConfig, which: str) -> dict:
    """transformers `ElectraConfig` fields for the discriminator, the generator, or the MLM baseline ("masked_lm",
    an ElectraForMaskedLM of the discriminator's size)."""
    size = cfg.generator if which == "generator" else cfg.discriminator
    arch = "ElectraForPreTraining" if which == "discriminator" else "ElectraForMaskedLM"
    return dict(
        architectures=[arch],
        model_type="electra",
        vocab_size=cfg.vocab_size,
        embedding_size=cfg.embedding_size,
        hidden_size=size.hidden_size,
        num_hidden_layers=size.num_layers,
        num_attention_heads=size.num_heads,
        intermediate_size=size.intermediate_size,
        hidden_act="gelu",
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.attention_dropout,
        max_position_embeddings=cfg.max_position_embeddings,
        type_vocab_size=cfg.type_vocab_size,
        initializer_range=cfg.initializer_range,
        layer_norm_eps=cfg.layer_norm_eps,
        pad_token_id=cfg.pad_token_id,
        position_embedding_type="absolute",
        tie_word_embeddings=True,
    )


def read_hf_dir(path: str | Path) -> tuple[dict, dict[str, Tensor]]:
    """config.json and the weights of a `save_pretrained` folder, never executing code from it."""
    path = Path(path)
    config_file = path / "config.json"
    if not config_file.exists():
        raise HFConversionError(f"{path}: not a transformers model folder (no config.json)")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as err:
        raise HFConversionError(f"{config_file}: not valid JSON ({err})") from None
    if not isinstance(config, dict) or config.get("model_type") != "electra":
        found = config.get("model_type") if isinstance(config, dict) else type(config).__name__
        raise HFConversionError(f"{config_file}: model_type is {found!r}, not 'electra'")
    if (path / "model.safetensors").exists():
        from safetensors.torch import load_file

        state = load_file(path / "model.safetensors")
    elif (path / "pytorch_model.bin").exists():
        try:  # weights_only: tensors and plain containers; a pickle that would run code is refused
            state = torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - UnpicklingError, a damaged zip, ...: one message naming the file
            raise HFConversionError(f"{path / 'pytorch_model.bin'}: cannot load as plain weights (refused or "
                                    f"damaged): {' '.join(str(err).split())[:300]}") from None  # fmt: skip
    else:
        raise HFConversionError(f"{path}: no model.safetensors or pytorch_model.bin")
    return config, {k: v for k, v in state.items() if not k.endswith(_IGNORED_HF_KEYS)}


def from_hf(
    discriminator_dir: str | Path, generator_dir: str | Path, objective: ObjectiveConfig | None = None
) -> ElectraForPretraining:
    """Our pretraining model from two transformers folders, in eval mode.

    The discriminator's embedding block becomes the shared one; the generator's own copy (identical in Google's
    released checkpoints, where the two share it) is checked and dropped with a warning if it differs.
    """
    disc_cfg, disc_state = read_hf_dir(discriminator_dir)
    gen_cfg, gen_state = read_hf_dir(generator_dir)
    model_cfg = model_config_from_hf(disc_cfg, gen_cfg)
    model = build_model(PretrainConfig(model=model_cfg, objective=objective or ObjectiveConfig()))
    parts = [("discriminator", disc_state, discriminator_dir), ("generator", gen_state, generator_dir)]
    return _load_parts(model, parts)


def masked_lm_from_hf(folder: str | Path) -> MaskedLMForPretraining:
    """The MLM baseline (objective.kind mlm) from a transformers ElectraForMaskedLM folder, in eval mode."""
    cfg, state = read_hf_dir(folder)
    model_cfg = model_config_from_hf(cfg, None)
    return _load_parts(build_model(PretrainConfig(model=model_cfg, objective=ObjectiveConfig(kind="mlm"))),
                       [("masked_lm", state, folder)])  # fmt: skip


def _load_parts(model, parts: list[tuple[str, dict[str, Tensor], str | Path]]):
    """Load the HF state dicts `parts` ((prefix set, state, folder) each) into `model`, checking every name and
    shape; the first part's copy of the shared embeddings wins, the tied output weight is re-tied."""
    ours = model.state_dict()
    loaded: dict[str, Tensor] = {}
    for which, state, folder in parts:
        for key, value in state.items():
            if key == "generator_lm_head.weight":
                if not torch.equal(value, state.get("electra.embeddings.word_embeddings.weight", value)):
                    log.warning("%s: generator_lm_head.weight is not the word table; re-tied to it", folder)
                continue
            name = _rename(key, _HF_PREFIXES[which], reverse=True)
            if name is None or name not in ours:
                raise HFConversionError(f"{folder}: unexpected weight {key!r}")
            if value.shape != ours[name].shape:
                raise HFConversionError(
                    f"{folder}: {key} has shape {tuple(value.shape)}, expected {tuple(ours[name].shape)}"
                )
            if name in loaded and not torch.equal(loaded[name], value):
                log.warning("%s: %s differs from the discriminator's; using the discriminator's (shared)", folder, key)
                continue
            loaded.setdefault(name, value)
    missing = sorted(set(ours) - set(loaded))
    if missing:
        raise HFConversionError(f"weights missing from {' / '.join(str(f) for _, _, f in parts)}: {missing[:5]}")
    model.load_state_dict(loaded)
    return model.eval()


def discriminator_body_from_hf(hf_dir: str | Path) -> tuple[ElectraModel, ModelConfig]:
    """The discriminator body (embeddings + encoder) of a transformers ELECTRA folder, for fine-tuning.

    Any ELECTRA architecture works (ElectraForPreTraining, ElectraForSequenceClassification, a bare
    ElectraModel): its head, if any, is left out, since fine-tuning puts a new one on.
    """
    hf_cfg, state = read_hf_dir(hf_dir)
    cfg = model_config_from_hf(hf_cfg, None)
    body = ElectraModel(cfg)
    if not any(k.startswith("electra.") for k in state):  # a bare ElectraModel: no base-model prefix
        state = {f"electra.{k}": v for k, v in state.items()}
    renamed = {}
    for key, value in state.items():
        name = _rename(key, _HF_PREFIXES["discriminator"], reverse=True) or ""
        if name.startswith(("embeddings.", "discriminator.electra.")):  # heads are replaced by fine-tuning
            renamed[name.removeprefix("discriminator.electra.")] = value
    result = body.load_state_dict(renamed, strict=False)
    if result.missing_keys:
        raise HFConversionError(f"{hf_dir}: weights missing: {result.missing_keys[:5]}")
    return body, cfg


def to_hf(model: ElectraForPretraining | MaskedLMForPretraining, out_dir: str | Path,
          tokenizer_dir: str | Path | None = None) -> Path:  # fmt: skip
    """Write `out_dir/discriminator` and `out_dir/generator` (the MLM baseline: `out_dir/masked_lm`) that
    transformers loads with no missing keys."""
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

    out_dir = Path(out_dir)
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    parts = [("discriminator", ElectraForPreTraining), ("generator", ElectraForMaskedLM)]
    if isinstance(model, MaskedLMForPretraining):
        parts = [("masked_lm", ElectraForMaskedLM)]
    for which, cls in parts:
        hf_model = cls(ElectraConfig(**hf_config(model.cfg, which)))
        hf_state = {}
        for key, value in state.items():
            name = _rename(key, _HF_PREFIXES[which])
            if name is not None:
                hf_state[name] = value
        if which != "discriminator":
            hf_state["generator_lm_head.weight"] = state["embeddings.word_embeddings.weight"]
        result = hf_model.load_state_dict(hf_state, strict=False)
        unexpected = list(result.unexpected_keys)
        missing = [k for k in result.missing_keys if not k.endswith(_IGNORED_HF_KEYS)]
        if missing or unexpected:
            raise HFConversionError(f"{which}: missing {missing[:5]}, unexpected {unexpected[:5]}")
        if which != "discriminator":
            hf_model.tie_weights()
        save_quietly(hf_model, out_dir / which)
        if tokenizer_dir is not None:
            save_hf_tokenizer(tokenizer_dir, out_dir / which)
    return out_dir


def save_quietly(hf_model, out_dir: str | Path) -> None:
    """`save_pretrained` without transformers' one-shard "Writing model shards" progress bar."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        hf_model.save_pretrained(out_dir)
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def save_hf_tokenizer(tokenizer_dir: str | Path, out_dir: str | Path) -> None:
    """Copy our tokenizer into an HF folder as a `PreTrainedTokenizerFast` (tokenizer.json + special tokens)."""
    from transformers import PreTrainedTokenizerFast

    tokenizer_file = Path(tokenizer_dir) / "tokenizer.json"
    if not tokenizer_file.exists():
        log.warning("%s has no tokenizer.json; the HF export has no tokenizer", tokenizer_dir)
        return
    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_file),
        pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
    )  # fmt: skip
    tok.save_pretrained(out_dir)
    shutil.copy(tokenizer_file, Path(out_dir) / "tokenizer.json")
