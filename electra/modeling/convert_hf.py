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
from electra.modeling.electra import (
    ElectraForPretraining,
    ElectraModel,
    MaskedLMForPretraining,
    build_model,
    with_discriminator_word_table,
)

log = logging.getLogger("electra.hf_compat")  # the name it had before the move: what users see

# (our prefix, HF prefix) per exported model and model family; checked in order, first match wins. Learned
# positions export as transformers' ELECTRA; rotary positions as its RoFormer (Su et al. 2021), whose module and
# parameter names are BERT's too, but under `roformer.` with the masked-LM head under `cls.predictions.`.
_HF_PREFIXES = {
    ("electra", "discriminator"): [
        ("embeddings.", "electra.embeddings."),
        ("discriminator.electra.", "electra."),
        ("discriminator.discriminator_predictions.", "discriminator_predictions."),
    ],
    ("electra", "generator"): [
        ("embeddings.", "electra.embeddings."),
        ("generator.electra.", "electra."),
        ("generator.generator_predictions.", "generator_predictions."),
        ("generator.lm_head_bias", "generator_lm_head.bias"),
    ],
    # the MLM baseline (objective.kind mlm): one ElectraForMaskedLM with the discriminator's sizes
    ("electra", "masked_lm"): [
        ("embeddings.", "electra.embeddings."),
        ("masked_lm.electra.", "electra."),
        ("masked_lm.generator_predictions.", "generator_predictions."),
        ("masked_lm.lm_head_bias", "generator_lm_head.bias"),
    ],
    # transformers has no RoFormer replaced-token-detection head: the discriminator exports as a RoFormerModel
    # and its head goes to a file of its own beside it (DISC_HEAD_FILE)
    ("roformer", "discriminator"): [("embeddings.", "embeddings."), ("discriminator.electra.", "")],
    ("roformer", "discriminator_head"): [("discriminator.discriminator_predictions.", "discriminator_predictions.")],
    ("roformer", "generator"): [
        ("embeddings.", "roformer.embeddings."),
        ("generator.electra.", "roformer."),
        ("generator.generator_predictions.", "cls.predictions.transform."),
        ("generator.lm_head_bias", "cls.predictions.bias"),
    ],
    ("roformer", "masked_lm"): [
        ("embeddings.", "roformer.embeddings."),
        ("masked_lm.electra.", "roformer."),
        ("masked_lm.generator_predictions.", "cls.predictions.transform."),
        ("masked_lm.lm_head_bias", "cls.predictions.bias"),
    ],
}
# the output layer's weights that are the word table (and, in RoFormer, the output bias) under another name
_TIED_HF_KEYS = {
    "electra": {"generator_lm_head.weight": "electra.embeddings.word_embeddings.weight"},
    "roformer": {
        "cls.predictions.decoder.weight": "roformer.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    },
}
_IGNORED_HF_KEYS = ("position_ids", "token_type_ids", "embed_positions.weight")  # stale buffers; RoFormer's fixed
# sinusoid table (computed again on load, as ours is)
DISC_HEAD_FILE = "discriminator_head.safetensors"
_ARCHITECTURES = {  # (family, is the discriminator) -> the transformers class it exports as
    ("electra", True): "ElectraForPreTraining",
    ("electra", False): "ElectraForMaskedLM",
    ("roformer", True): "RoFormerModel",
    ("roformer", False): "RoFormerForMaskedLM",
}
MODEL_TYPES = ("electra", "roformer")


def family(cfg: ModelConfig) -> str:
    """The transformers model family a config exports as: ELECTRA (learned positions) or RoFormer (rotary)."""
    return "roformer" if cfg.position_embedding == "rotary" else "electra"


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
    rotary = disc.get("model_type") == "roformer"
    if rotary and disc.get("rotary_value", False):
        raise HFConversionError("RoFormer with rotary_value=true is not supported (only queries and keys rotate)")
    if not rotary and disc.get("position_embedding_type", "absolute") != "absolute":
        raise HFConversionError("only absolute position embeddings are supported")
    cfg = ModelConfig(
        position_embedding="rotary" if rotary else "learned",
        vocab_size=disc["vocab_size"],
        embedding_size=disc.get("embedding_size") or disc["hidden_size"],
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
        for key in ("model_type", "vocab_size", "embedding_size", "num_hidden_layers", "max_position_embeddings"):
            if gen[key] != disc[key]:
                raise HFConversionError(f"generator {key}={gen[key]} differs from discriminator {disc[key]}")
        cfg.generator_fraction = gen["hidden_size"] / disc["hidden_size"]
        cfg.generator_hidden_size = gen["hidden_size"]
        cfg.generator_num_heads = gen["num_attention_heads"]
        cfg.generator_intermediate_size = gen["intermediate_size"]
    return cfg


def hf_config(cfg: ModelConfig, which: str) -> dict:
    """transformers `ElectraConfig` (or, with rotary positions, `RoFormerConfig`) fields for the discriminator,
    the generator, or the MLM baseline ("masked_lm", a masked LM of the discriminator's size)."""
    size = cfg.generator if which == "generator" else cfg.discriminator
    fam = family(cfg)
    arch = _ARCHITECTURES[fam, which == "discriminator"]
    positions = {"rotary_value": False} if fam == "roformer" else {"position_embedding_type": "absolute"}
    return dict(
        architectures=[arch],
        model_type=fam,
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
        tie_word_embeddings=True,
        **positions,
    )


def read_hf_config(path: str | Path) -> dict:
    """config.json of a transformers ELECTRA or RoFormer folder."""
    path = Path(path)
    config_file = path / "config.json"
    if not config_file.exists():
        raise HFConversionError(f"{path}: not a transformers model folder (no config.json)")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as err:
        raise HFConversionError(f"{config_file}: not valid JSON ({err})") from None
    if not isinstance(config, dict) or config.get("model_type") not in MODEL_TYPES:
        found = config.get("model_type") if isinstance(config, dict) else type(config).__name__
        raise HFConversionError(f"{config_file}: model_type is {found!r}, not 'electra' or 'roformer'")
    return config


def read_hf_dir(path: str | Path) -> tuple[dict, dict[str, Tensor]]:
    """config.json and the weights of a `save_pretrained` folder, never executing code from it."""
    path = Path(path)
    config = read_hf_config(path)
    if (path / "model.safetensors").exists():
        from safetensors.torch import load_file

        state = load_file(path / "model.safetensors")
    elif (path / "pytorch_model.bin").exists():
        try:  # weights_only: tensors and plain containers; a pickle that would run code is refused
            state = torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - UnpicklingError, a damaged zip, ...: one message naming the file
            raise HFConversionError(
                f"{path / 'pytorch_model.bin'}: cannot load as plain weights (refused or "
                f"damaged): {' '.join(str(err).split())[:300]}"
            ) from None
    else:
        raise HFConversionError(f"{path}: no model.safetensors or pytorch_model.bin")
    return config, {k: v for k, v in state.items() if not k.endswith(_IGNORED_HF_KEYS)}


def from_hf(
    discriminator_dir: str | Path, generator_dir: str | Path, objective: ObjectiveConfig | None = None
) -> ElectraForPretraining:
    """Our pretraining model from two transformers folders, in eval mode.

    The discriminator's embedding block becomes the shared one; the generator's own copy (identical in Google's
    released checkpoints, where the two share it) is checked and dropped with a warning if it differs. A RoFormer
    pair (rotary positions) also needs the discriminator head file that `to_hf` writes beside it.
    """
    disc_cfg, disc_state = read_hf_dir(discriminator_dir)
    gen_cfg, gen_state = read_hf_dir(generator_dir)
    model_cfg = model_config_from_hf(disc_cfg, gen_cfg)
    model = build_model(PretrainConfig(model=model_cfg, objective=objective or ObjectiveConfig()))
    fam = family(model_cfg)
    parts = [("discriminator", disc_state, discriminator_dir), ("generator", gen_state, generator_dir)]
    if fam == "roformer":
        parts.append(("discriminator_head", _roformer_head(discriminator_dir), discriminator_dir))
    return _load_parts(model, fam, parts)


def discriminator_into(model: ElectraForPretraining, discriminator_dir: str | Path) -> list[str]:
    """Load a transformers discriminator alone (ElectraForPreTraining; RoFormer: RoFormerModel + the head file
    beside it) into `model`'s shared embeddings and discriminator, whose sizes must be its own; the generator keeps
    the weights `model` was built with. Returns the names left as built (the generator's own), in eval mode."""
    _, state = read_hf_dir(discriminator_dir)
    fam = family(model.cfg)
    parts = [("discriminator", state, discriminator_dir)]
    if fam == "roformer":
        parts.append(("discriminator_head", _roformer_head(discriminator_dir), discriminator_dir))
    kept = [name for name in model.state_dict() if name.startswith("generator.")]
    _load_parts(model, fam, parts, kept)
    return kept


def _roformer_head(discriminator_dir: str | Path) -> dict[str, Tensor]:
    """The replaced-token-detection head `to_hf` writes beside a RoFormerModel (which has none of its own)."""
    head = Path(discriminator_dir) / DISC_HEAD_FILE
    if not head.exists():
        raise HFConversionError(
            f"{head}: missing (a RoFormerModel has no replaced-token-detection head; "
            "`electra export-hf` writes it beside the model)"
        )
    from safetensors.torch import load_file

    return load_file(head)


def masked_lm_from_hf(folder: str | Path) -> MaskedLMForPretraining:
    """The MLM baseline (objective.kind mlm) from a transformers ElectraForMaskedLM / RoFormerForMaskedLM folder,
    in eval mode."""
    cfg, state = read_hf_dir(folder)
    model_cfg = model_config_from_hf(cfg, None)
    model = build_model(PretrainConfig(model=model_cfg, objective=ObjectiveConfig(kind="mlm")))
    return _load_parts(model, family(model_cfg), [("masked_lm", state, folder)])


def _load_parts(model, fam: str, parts: list[tuple[str, dict[str, Tensor], str | Path]], kept: list[str] = ()):
    """Load the HF state dicts `parts` ((prefix set, state, folder) each) into `model`, checking every name and
    shape; the first part's copy of the shared embeddings wins, the tied output weights are re-tied. The names
    `kept` keep the weights `model` has."""
    ours = model.state_dict()
    loaded: dict[str, Tensor] = {name: ours[name] for name in kept}
    tied = _TIED_HF_KEYS[fam]
    for which, state, folder in parts:
        for key, value in state.items():
            if key in tied:
                if not torch.equal(value, state.get(tied[key], value)):
                    log.warning("%s: %s is not %s; re-tied to it", folder, key, tied[key])
                continue
            name = _rename(key, _HF_PREFIXES[fam, which], reverse=True)
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
    """The discriminator body (embeddings + encoder) of a transformers ELECTRA or RoFormer folder, for fine-tuning.

    Any architecture of the two works (ElectraForPreTraining, ElectraForSequenceClassification, a bare
    ElectraModel or RoFormerModel, RoFormerForMaskedLM, ...): its head, if any, is left out, since fine-tuning puts
    a new one on.
    """
    hf_cfg, state = read_hf_dir(hf_dir)
    cfg = model_config_from_hf(hf_cfg, None)
    body = ElectraModel(cfg)
    base = f"{family(cfg)}."  # the base-model prefix of every head-carrying architecture
    if not any(k.startswith(base) for k in state):  # a bare ElectraModel / RoFormerModel
        state = {f"{base}{k}": v for k, v in state.items()}
    renamed = {}
    for key, value in state.items():
        if key.startswith(base):  # heads are replaced by fine-tuning; ElectraModel's names are the base model's
            renamed[key.removeprefix(base)] = value
    result = body.load_state_dict(renamed, strict=False)
    if result.missing_keys:
        raise HFConversionError(f"{hf_dir}: weights missing: {result.missing_keys[:5]}")
    return body, cfg


STARTED_FROM_KEY = "electra_init"
"""The config.json field of an export of a continued run that says where its pretraining started (run.json's
`init`: the source as given, its path, revision, step, weights sha256 and FLOPs). transformers keeps an unknown
config field as an attribute of the config and otherwise ignores it: loading and the model are unchanged."""


def to_hf(
    model: ElectraForPretraining | MaskedLMForPretraining,
    out_dir: str | Path,
    tokenizer_dir: str | Path | None = None,
    started_from: dict | None = None,
) -> Path:
    """Write `out_dir/discriminator` and `out_dir/generator` (the MLM baseline: `out_dir/masked_lm`) that
    transformers loads with no missing keys: ElectraForPreTraining + ElectraForMaskedLM, or with rotary positions
    RoFormerModel (+ the discriminator head in DISC_HEAD_FILE beside it) + RoFormerForMaskedLM. `started_from`: a
    continued run's source, recorded in each config.json as STARTED_FROM_KEY."""
    import transformers

    out_dir = Path(out_dir)
    fam = family(model.cfg)
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    parts = ["masked_lm"] if isinstance(model, MaskedLMForPretraining) else ["discriminator", "generator"]
    for which in parts:
        arch = hf_config(model.cfg, which)
        config_cls = getattr(transformers, "RoFormerConfig" if fam == "roformer" else "ElectraConfig")
        provenance = {STARTED_FROM_KEY: started_from} if started_from is not None else {}
        hf_model = getattr(transformers, arch["architectures"][0])(config_cls(**arch, **provenance))
        delta = state.get("discriminator_word_delta") if which == "discriminator" else None
        hf_state = _renamed(with_discriminator_word_table(state, delta), fam, which)
        if which != "discriminator":
            for key, source in _TIED_HF_KEYS[fam].items():
                hf_state[key] = hf_state[source]  # the word table, or (RoFormer) the output bias
        result = hf_model.load_state_dict(hf_state, strict=False)
        unexpected = list(result.unexpected_keys)
        missing = [k for k in result.missing_keys if not k.endswith(_IGNORED_HF_KEYS)]
        if missing or unexpected:
            raise HFConversionError(f"{which}: missing {missing[:5]}, unexpected {unexpected[:5]}")
        if which != "discriminator":
            hf_model.tie_weights()
        save_quietly(hf_model, out_dir / which)
        if fam == "roformer" and which == "discriminator":
            from safetensors.torch import save_file

            save_file(_renamed(state, fam, "discriminator_head"), out_dir / which / DISC_HEAD_FILE)
        if tokenizer_dir is not None:
            save_hf_tokenizer(tokenizer_dir, out_dir / which)
    return out_dir


def _renamed(state: dict[str, Tensor], fam: str, which: str) -> dict[str, Tensor]:
    """Our weights that belong to one exported model, under transformers' names."""
    renamed = {}
    for key, value in state.items():
        name = _rename(key, _HF_PREFIXES[fam, which])
        if name is not None:
            renamed[name] = value
    return renamed


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
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    tok.save_pretrained(out_dir)
    shutil.copy(tokenizer_file, Path(out_dir) / "tokenizer.json")
