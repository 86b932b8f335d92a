"""Typed configuration: dataclasses are the schema and hold the defaults (ELECTRA-Small, OFF behaviour).

Presets in `electra/configs/*.yaml` hold only differences from these defaults. Overrides come last, as dotted
`section.key=value` strings. Unknown keys and wrong types fail with a message naming the key and the source.

    schema.py      the pretraining dataclasses, and the sampling schedule and masking they define
    loading.py     defaults, then a preset or YAML file, then overrides; a saved config read back
    validation.py  values no run can use, refused before any work starts
    finetune.py    GLUE fine-tuning's dataclass, its recipes and their checks
"""

from electra.config.finetune import (
    RECIPE_DIR,
    DepthConvention,
    FinetuneConfig,
    HeadName,
    load_finetune_config,
    recipe_names,
    validate_finetune,
)
from electra.config.loading import (
    KEY_ALIASES,
    coerce,
    from_dict,
    keys_set,
    load_config,
    merge,
    parse_override_value,
    preset_names,
    read_yaml,
    to_dict,
)
from electra.config.schema import (
    BERT_MASK_PROB,
    BERT_RANDOM_PROB,
    PRESET_DIR,
    ConfigError,
    DataConfig,
    EncoderSize,
    ModelConfig,
    ObjectiveConfig,
    PretrainConfig,
    TrainConfig,
    annealed,
    masking_split,
    num_mask_slots,
    sampling_at,
    schedule_warnings,
    temperature_at,
    uniform_replace_at,
)
from electra.config.validation import validate

__all__ = [
    "BERT_MASK_PROB",
    "BERT_RANDOM_PROB",
    "KEY_ALIASES",
    "PRESET_DIR",
    "RECIPE_DIR",
    "ConfigError",
    "DataConfig",
    "DepthConvention",
    "EncoderSize",
    "FinetuneConfig",
    "HeadName",
    "ModelConfig",
    "ObjectiveConfig",
    "PretrainConfig",
    "TrainConfig",
    "annealed",
    "coerce",
    "from_dict",
    "keys_set",
    "load_config",
    "load_finetune_config",
    "masking_split",
    "merge",
    "num_mask_slots",
    "parse_override_value",
    "preset_names",
    "read_yaml",
    "recipe_names",
    "sampling_at",
    "schedule_warnings",
    "temperature_at",
    "to_dict",
    "uniform_replace_at",
    "validate",
    "validate_finetune",
]
