"""Loading a config: defaults, then a preset name or YAML file, then dotted `section.key=value` overrides; unknown
keys and wrong types fail with a message naming the key and the source. Also a saved config read back."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from electra.config.schema import PRESET_DIR, ConfigError, PretrainConfig
from electra.config.validation import validate


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_config(preset_or_path: str | Path | None = None, overrides: list[str] | None = None) -> PretrainConfig:
    """Defaults, then a preset name or YAML file, then `section.key=value` overrides."""
    cfg = load_layered(
        PretrainConfig(), PRESET_DIR, preset_or_path, overrides or [], prefix="", what=("config", "presets")
    )
    validate(cfg)
    return cfg


def keys_set(preset_or_path: str | Path | None, overrides: list[str] | None = None) -> tuple[set[str], set[str]]:
    """The dotted keys a preset (or YAML file) sets, and those `section.key=value` overrides set, as `load_config`
    reads them: so that a refusal can say where a value came from."""
    in_preset: set[str] = set()
    if preset_or_path is not None:
        path = Path(preset_or_path)
        if not path.suffix and (PRESET_DIR / f"{path}.yaml").exists():
            path = PRESET_DIR / f"{path}.yaml"
        raw = read_yaml(path) if path.is_file() else None
        stack = [("", raw if isinstance(raw, dict) else {})]
        while stack:
            prefix, node = stack.pop()
            for key, value in node.items():
                if isinstance(value, dict):
                    stack.append((f"{prefix}{key}.", value))
                else:
                    in_preset.add(f"{prefix}{key}")
    return in_preset, {item.partition("=")[0].strip() for item in overrides or []}


def load_layered(
    defaults: Any,
    folder: Path,
    name_or_path: str | Path | None,
    overrides: list[str],
    prefix: str,
    what: tuple[str, str],
) -> Any:
    """`defaults`, then a named preset of `folder` (`what`: what one is called, and several) or a YAML file, then
    `key=value` overrides (keys written with `prefix`, e.g. "finetune."), each merged strictly."""
    cfg = defaults
    if name_or_path is not None:
        path = Path(name_or_path)
        if not path.suffix and (folder / f"{path}.yaml").exists():
            path = folder / f"{path}.yaml"
        if not path.is_file():
            names = sorted(p.stem for p in folder.glob("*.yaml"))
            raise ConfigError(f"unknown {what[0]} {str(name_or_path)!r}: not a file, and {what[1]} are {names}")
        raw = read_yaml(path) or {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a mapping, got {type(raw).__name__}")
        cfg = merge(cfg, raw, source=str(path), prefix=prefix)
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key.startswith(prefix):
            raise ConfigError(f"override {item!r}: expected {f'{prefix}KEY=VALUE' if prefix else 'section.key=value'}")
        nested: dict[str, Any] = {}
        node = nested
        parts = key.removeprefix(prefix).split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = parse_override_value(item, value)
        cfg = merge(cfg, nested, source=f"override {item!r}", prefix=prefix)
    return cfg


def read_yaml(path: Path) -> Any:
    """A preset or recipe file's YAML; any unreadable file is a ConfigError naming it (and the line, for YAML)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read the config: {_one_line(err)}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: not valid YAML: {_one_line(err)}") from None
    except (ValueError, RecursionError) as err:  # a 5000-digit number, a date such as 2020-02-30, deep nesting
        raise ConfigError(f"{path}: not valid YAML: {_one_line(err)}") from None


def parse_override_value(item: str, value: str) -> Any:
    """The YAML value of one `key=value` override (empty: null)."""
    if not value.strip():
        return None
    try:
        return yaml.safe_load(value)
    except (yaml.YAMLError, ValueError, RecursionError) as err:
        raise ConfigError(f"override {item!r}: the value is not valid YAML: {_one_line(err)}") from None


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


KEY_ALIASES = {
    "learning_rate": "lr",
    "num_train_steps": "max_steps",
    "num_warmup_steps": "warmup_steps",
    "train_batch_size": "batch_size",
    "max_seq_length": "seq_len",
}
"""The names google-research/electra's configure_pretraining.py and configure_finetuning.py give our keys: a
misspelled key that is one of them is told the key it means ("did you mean 'train.lr'?")."""


def merge(obj: Any, raw: dict[str, Any], source: str, prefix: str = "") -> Any:
    """Return a copy of dataclass `obj` with the values of `raw` applied, type-checked."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: {prefix.rstrip('.') or 'config'} must be a mapping, got {raw!r}")
    hints = typing.get_type_hints(type(obj))
    fields = {f.name for f in dataclasses.fields(obj)}
    updates = {}
    for key, value in raw.items():
        name = f"{prefix}{key}"
        if key not in fields:
            alias = KEY_ALIASES.get(str(key))
            close = [alias] if alias in fields else difflib.get_close_matches(str(key), fields, n=1)
            hint = f"did you mean {prefix + close[0]!r}? " if close else ""
            raise ConfigError(f"{source}: unknown key {name!r}; {hint}valid keys here: {sorted(fields)}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            updates[key] = merge(current, value, source, prefix=f"{name}.")
        else:
            updates[key] = coerce(value, hints[key], name, source)
    return dataclasses.replace(obj, **updates)


def coerce(value: Any, tp: Any, name: str, source: str) -> Any:
    """Check `value` against a field type (int, float, bool, str, Literal, Optional, list); ints widen to float."""
    origin = typing.get_origin(tp)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{source}: {name} must be a list, got {value!r}")
        (item,) = typing.get_args(tp)
        return [coerce(v, item, f"{name}[{i}]", source) for i, v in enumerate(value)]
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, name, source)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0] if errors else f"{source}: {name} cannot be {value!r}")
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(f"{source}: {name} must be one of {list(choices)}, got {value!r}")
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():  # 1e6 in YAML
            return int(value)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "5e-4" as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    raise ConfigError(f"{source}: {name} must be {getattr(tp, '__name__', tp)}, got {value!r}")


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


# A saved config without one of these keys was written before the key existed, when the code did what the value
# here says (not what today's default says): reading it back must describe what that run computed.
BEFORE_THE_KEY_EXISTED = {("objective", "position_sampling"): "without_replacement"}


def from_dict(raw: dict[str, Any], source: str = "saved config") -> PretrainConfig:
    """A config saved with a run or checkpoint (see BEFORE_THE_KEY_EXISTED for keys it may lack)."""
    if isinstance(raw, dict):
        raw = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
        for (section, key), value in BEFORE_THE_KEY_EXISTED.items():
            if isinstance(raw.get(section), dict):
                raw[section].setdefault(key, value)
    cfg = merge(PretrainConfig(), raw, source)
    validate(cfg)
    return cfg
