"""Typed configuration: dataclasses are the schema and hold the defaults (ELECTRA-Small, OFF behaviour).

Presets in `electra/configs/*.yaml` hold only differences from these defaults. Overrides come last, as dotted
`section.key=value` strings. Unknown keys and wrong types fail with a message naming the key and the source.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from electra.utils.errors import InputError

PRESET_DIR = Path(__file__).parent / "configs"


class ConfigError(InputError):
    """A configuration that cannot be used, with the key and source that caused it."""


@dataclass
class EncoderSize:
    """The sizes of one transformer encoder stack (discriminator or generator)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int


@dataclass
class ModelConfig:
    """Discriminator, generator and shared embeddings (ELECTRA paper, Table 6). Defaults: ELECTRA-Small."""

    vocab_size: int = 30522
    """Vocabulary size; must match the tokenizer."""
    embedding_size: int = 128
    """Width of the shared word/position/type embeddings."""
    hidden_size: int = 256
    """Discriminator hidden size."""
    num_layers: int = 12
    """Transformer layers (the generator has as many)."""
    num_heads: int = 4
    intermediate_size: int = 1024
    generator_fraction: float = 0.25
    """Generator hidden size as a fraction of the discriminator's (paper: 1/4 for Small)."""
    generator_hidden_size: int | None = None
    """Explicit generator sizes (e.g. from an imported HF generator); None derives them from the fraction."""
    generator_num_heads: int | None = None
    generator_intermediate_size: int | None = None
    max_position_embeddings: int = 512
    position_embedding: Literal["learned", "rotary"] = "learned"
    """learned: a trained table added to the word embeddings (BERT, OFF); rotary: no table, queries and keys are
    rotated by their position in every attention layer (RoFormer, Su et al. 2021), as transformers' RoFormer
    computes it. Small CPU runs with learned positions stay on the token-frequency plateau (docs/research-log.md)."""
    type_vocab_size: int = 2
    dropout: float = 0.1
    """Dropout on hidden states (embeddings, attention output, FFN output)."""
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    """Standard deviation of the initial weights (see `init`)."""
    init: Literal["original", "normal"] = "original"
    """original: OFF's initialisers: weights truncated normal(0, initializer_range) cut at 2 std (OFF modeling.py
    create_initializer), except TF's default Glorot uniform where OFF gives no initializer (`embeddings_project`,
    the discriminator's output layer); normal: normal(0, initializer_range) everywhere (transformers). Biases 0."""
    pad_token_id: int = 0
    disc_output_bias: float = 0.0
    """Initial bias of the discriminator's output layer (0, as OFF). The log-odds of the replaced fraction (about
    -1.8 at mask_prob 0.15) starts it at the class prior, which the bias alone would take ~1000 Adam steps to
    reach (each step moves it by about the learning rate)."""
    embedding_sharing: Literal["full", "gradient_disentangled"] = "full"
    """full: generator and discriminator share the embedding block and both losses train it (OFF);
    gradient_disentangled: the discriminator reads the shared word table through a stop-gradient plus a table of
    its own that starts at 0, so only the generator's loss trains the shared table (DeBERTa-v3's GDES, He et al.
    2021, section 3.2); the discriminator's word table is the sum, which fine-tuning and export take."""

    @property
    def discriminator(self) -> EncoderSize:
        return EncoderSize(self.hidden_size, self.num_layers, self.num_heads, self.intermediate_size)

    @property
    def generator(self) -> EncoderSize:
        # OFF run_pretraining.py::get_generator_config: hidden scaled, FFN 4x, one head per 64 dims.
        hidden = self.generator_hidden_size or max(1, round(self.hidden_size * self.generator_fraction))
        heads = self.generator_num_heads or max(1, hidden // 64)
        return EncoderSize(hidden, self.num_layers, heads, self.generator_intermediate_size or 4 * hidden)


# BERT's split of the chosen positions (Devlin et al. 2019, section 3.1): [MASK], a random token, unchanged
BERT_MASK_PROB, BERT_RANDOM_PROB = 0.8, 0.1


@dataclass
class ObjectiveConfig:
    """The pretraining objective: replaced-token detection (ELECTRA paper section 2; defaults: OFF,
    google-research/electra) or BERT's masked language model at the same size, the baseline the paper compares with."""

    kind: Literal["electra", "mlm", "none"] = "electra"
    """electra: a small generator fills the masked slots and the discriminator detects the replaced tokens; mlm:
    one masked LM as large as the discriminator, trained on the masked slots only, with BERT's 80/10/10 split of
    the chosen positions ([MASK] / a random token / unchanged) whatever `mask_token_prob` says; none: no training,
    the initialised model written as a step-0 run (the no-pretraining baseline)."""
    masking: Literal["fixed", "bernoulli"] = "fixed"
    """fixed: OFF's N = int((p + 0.005) * T) slots per sequence; bernoulli: RC's i.i.d. per-token masking."""
    position_sampling: Literal["with_replacement", "without_replacement"] = "with_replacement"
    """How `fixed` masking draws its k positions among the candidates. with_replacement: as OFF
    (pretrain_helpers.mask, tf.random.categorical), so repeats leave fewer distinct positions (17.7 of 19 on a full
    128-token row); without_replacement: exactly k. Runs written before this option existed drew without
    replacement: their saved configs lack the key and read back as without_replacement (what they computed), so
    resuming one asks for `--set objective.position_sampling=without_replacement`."""
    repeated_draws: Literal["once", "original"] = "once"
    """What `with_replacement` does with a position two slots drew. once: it counts once (the repeat becomes an
    unused slot). original: as OFF's scatter_update (pretrain_helpers.py), both slots count in the MLM loss, and the
    discriminator sees the floor of the mean of the two sampled token ids there, usually an unrelated token (about 5%
    of corrupted positions at length 32, 7% at 128): a side effect in OFF, not part of the method. ELECTRA only."""
    mask_prob: float = 0.15
    mask_token_prob: float = 0.85
    """Of the chosen positions, the fraction shown as [MASK]; the rest keep the original (no random tokens)."""
    replace: Literal["all", "masked"] = "all"
    """Sampled tokens replace all chosen positions (OFF) or only the [MASK]ed ones (RC)."""
    temperature: float = 1.0
    """Sampling temperature for the generator (logits / T); with `temperature_start`, where the schedule ends."""
    temperature_start: float | None = None
    """Anneal the sampling temperature linearly from this value down to `temperature` over the first
    `temperature_steps` optimizer steps (a higher temperature draws easier, less plausible replacements); None:
    constant `temperature`, as OFF."""
    temperature_steps: int = 0
    uniform_replace_prob: float = 0.0
    """Replace this fraction of the generator's samples by tokens drawn uniformly from the vocabulary (easy
    replacements mixed in; 0 as OFF); with `uniform_replace_start`, where the schedule ends."""
    uniform_replace_start: float | None = None
    """Anneal the fraction of uniform replacements linearly from this value down to `uniform_replace_prob` over
    the first `uniform_replace_steps` optimizer steps (a curriculum of easy replacements); None: constant."""
    uniform_replace_steps: int = 0
    sampler: Literal["inverse_cdf", "gumbel"] = "inverse_cdf"
    """How a token is drawn from softmax(logits / T): both draw from the same distribution (see masking.py)."""
    disallow_correct: bool = False
    """Forbid sampling the original token (OFF option, default off)."""
    generator_weight: float = 1.0
    discriminator_weight: float = 50.0
    """lambda in the paper; OFF configure_pretraining.py disc_weight = 50.0."""
    disc_on_special: bool = True
    """Count [CLS]/[SEP] in the discriminator loss (OFF); RC excludes special tokens."""


@dataclass
class DataConfig:
    """Where batches come from. Without `path`, the built-in synthetic corpus is used."""

    path: str | None = None
    """A folder written by `electra data prepare`."""
    builder: Literal["static", "dynamic"] = "static"
    """static: OFF's packed [CLS] A [SEP] B [SEP] examples; dynamic: a random document window per draw (the study)."""
    seq_len: int = 128
    eval_fraction: float = 0.01
    """Fraction of documents held out for pretraining evaluation."""


@dataclass
class TrainConfig:
    """The optimisation loop. Defaults: OFF's recipe at ELECTRA-Small scale (configure_pretraining.py,
    model/optimization.py; the paper's Table 6)."""

    max_steps: int = 1_000_000
    batch_size: int = 128
    """Global batch size (sequences per optimizer step, across accumulation and ranks)."""
    micro_batch_size: int | None = None
    """Sequences per forward pass on one device; None means the whole per-rank batch."""
    max_memory_gb: float | None = None
    """Pick the micro-batch so that the estimated peak memory fits this budget (GB)."""
    optimizer: Literal["adam", "adamw"] = "adam"
    """adam: Adam without bias correction (OFF); adamw: AdamW with bias correction (the study)."""
    lr: float = 5e-4
    lr_width: int | None = None
    """With it, `lr` is the peak learning rate up to this hidden size, and above it the peak falls as one over the
    width: lr * lr_width / model.hidden_size (electra.training.optim.peak_lr). The `cpu` preset: 1e-3 up to 128
    wide, 5e-4 at 256, OFF's ELECTRA-Small value at its width. None: `lr` at any width (OFF)."""
    generator_lr_scale: float = 1.0
    """The generator's parameters train at lr times this (the shared embeddings at lr); 1 as OFF."""
    schedule: Literal["original", "study"] = "original"
    """original: linear decay from step 0 times a linear warmup (OFF); study: warmup then linear decay (RC)."""
    warmup_steps: int = 10_000
    decay_steps: int | None = None
    """Where the schedule reaches lr 0; None: at max_steps (OFF). Set past max_steps, a short run trains at the
    learning rates of the first steps of a longer one (e.g. 1000 steps of a 4000-step schedule), instead of
    decaying to 0 within its own length."""
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-6
    grad_clip: float = 1.0
    precision: Literal["fp32", "bf16", "fp16", "auto"] = "auto"
    """auto: bf16 on CUDA compute capability >= 8.0, fp16 with the loss scaler on 7.x; fp32 on a CPU, where bf16
    measurably held a model on the token-frequency plateau (electra.training.precision). The choice and its reason:
    RUN/run.json."""
    tf32: bool = True
    """fp32 matmuls in TF32 on CUDA compute capability >= 8.0 (false: full fp32). Whether it was on: RUN/run.json."""
    compile: bool | None = None
    """torch.compile the step; None: on with CUDA, off on CPU (measured slower there)."""
    seed: int = 0
    log_every: int = 100
    eval_every: int = 5000
    eval_batches: int = 20
    save_every: int = 10_000
    keep_last: int = 3
    max_nonfinite: int = 20
    """Stop after this many consecutive steps with non-finite loss or gradients (each skips its update). Checked
    at each log line and save, so a run may go on for up to `log_every` steps past the limit."""
    collapse_patience: int = 3
    """Evaluations in a row with collapsed discriminator metrics before the run is flagged."""
    stop_on_collapse: bool = False
    threads: int | Literal["auto"] = "auto"
    """CPU threads of this process: a number, or auto: the cores this process may use (its share of them beside
    the machine's other runs of ours) less those other work keeps busy when it starts (electra.utils.machine
    choose_threads; docs/benchmarks.md "Threads"). OMP_NUM_THREADS, when set, wins over auto."""


@dataclass
class PretrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    @classmethod
    def for_model(cls, model: ModelConfig) -> PretrainConfig:
        """Defaults around an existing model (e.g. imported weights), the length capped by its positions."""
        return cls(model=model, data=DataConfig(seq_len=min(DataConfig.seq_len, model.max_position_embeddings)))

    @property
    def num_mask_slots(self) -> int:
        """Static number of masked slots per sequence (OFF: max_predictions_per_seq)."""
        return num_mask_slots(self.objective, self.data.seq_len)


def annealed(step: int, start: float | None, end: float, steps: int) -> float:
    """A value annealed linearly from `start` to `end` over the first `steps` updates (0-based `step`); `end`
    from then on, and always when `start` is None."""
    if start is None or step >= steps:
        return end
    return end + (start - end) * (1.0 - step / steps)


def temperature_at(step: int, objective: ObjectiveConfig) -> float:
    """The sampling temperature for the update made at `step` (0-based), by objective.temperature_start/_steps."""
    return annealed(step, objective.temperature_start, objective.temperature, objective.temperature_steps)


def uniform_replace_at(step: int, objective: ObjectiveConfig) -> float:
    """The fraction of uniform replacements for the update made at `step`, by objective.uniform_replace_start."""
    o = objective
    return annealed(step, o.uniform_replace_start, o.uniform_replace_prob, o.uniform_replace_steps)


def sampling_at(step: int, objective: ObjectiveConfig) -> dict[str, float]:
    """What the generator sampled with at the update made at `step`, as metrics.jsonl's rows and run.json record it
    beside the lr: `temperature`, and `uniform_replace` where uniform replacements are mixed in (annealed or not);
    {} for the masked LM and for no pretraining, which sample nothing."""
    if objective.kind != "electra":
        return {}
    said = {"temperature": temperature_at(step, objective)}
    if objective.uniform_replace_start is not None or objective.uniform_replace_prob > 0:
        said["uniform_replace"] = uniform_replace_at(step, objective)
    return said


def schedule_warnings(cfg: PretrainConfig) -> list[str]:
    """A line for each sampling schedule longer than the run (objective.temperature_steps or uniform_replace_steps
    past train.max_steps): such a run trains to its end on easier replacements than the end point, while its
    held-out evaluations sample at the end point (training/evaluation.py), so it never trains on what it is scored
    on. Empty when every schedule ends within the run."""
    o, steps = cfg.objective, cfg.train.max_steps
    if o.kind != "electra":
        return []
    schedules = (  # (its length's key, its end point's key, what it anneals, where it starts, its length)
        ("temperature_steps", "temperature", "temperature", o.temperature_start, o.temperature_steps),
        (
            "uniform_replace_steps",
            "uniform_replace_prob",
            "a uniform-replacement share of",
            o.uniform_replace_start,
            o.uniform_replace_steps,
        ),
    )
    lines = []
    for length_key, end_key, what, start, length in schedules:
        if start is None or length <= steps:
            continue
        end, last = getattr(o, end_key), sampling_at(steps - 1, o)[end_key.removesuffix("_prob")]
        lines.append(
            f"objective.{length_key} {length:,} exceeds train.max_steps {steps:,}: the run's last step samples at "
            f"{what} {last:.3g}, its held-out evaluations at objective.{end_key} {end:g}, so it ends on easier "
            f"replacements than those it is scored on; objective.{length_key}={steps} ends the schedule with the run"
        )
    return lines


def masking_split(objective: ObjectiveConfig) -> tuple[float, float]:
    """(shown as [MASK], replaced by a random token) fractions of the chosen positions; the rest stay unchanged."""
    return (BERT_MASK_PROB, BERT_RANDOM_PROB) if objective.kind == "mlm" else (objective.mask_token_prob, 0.0)


def num_mask_slots(objective: ObjectiveConfig, seq_len: int) -> int:
    if objective.masking == "fixed":
        # OFF configure_pretraining.py: max_predictions_per_seq = int((mask_prob + 0.005) * max_seq_length)
        return int((objective.mask_prob + 0.005) * seq_len)
    # Bernoulli: the mean plus five standard deviations, so dropping overflow almost never happens.
    p = objective.mask_prob
    return min(seq_len, int(p * seq_len + 5 * (seq_len * p * (1 - p)) ** 0.5) + 1)


# ---------------------------------------------------------------------------------------------------------------
# Loading, overriding, validating


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_config(preset_or_path: str | Path | None = None, overrides: list[str] | None = None) -> PretrainConfig:
    """Defaults, then a preset name or YAML file, then `section.key=value` overrides."""
    cfg = _load(PretrainConfig(), PRESET_DIR, preset_or_path, overrides or [], prefix="", what=("config", "presets"))
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


def _load(
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


# ---------------------------------------------------------------------------------------------------------------
# GLUE fine-tuning (`electra glue`). Recipes in `electra/configs/finetune/*.yaml` hold only differences from these
# defaults, which are OFF's recipe for ELECTRA-Small (google-research/electra configure_finetuning.py,
# run_finetuning.py, model/optimization.py, finetune/classification/classification_tasks.py).

RECIPE_DIR = PRESET_DIR / "finetune"

HeadName = Literal["cls-linear", "mean-mlp", "hf"]
DepthConvention = Literal["paper", "original", "study"]


@dataclass
class FinetuneConfig:
    """One fine-tuning run of one task and seed. Defaults: OFF's recipe, with the paper's learning rate for Small."""

    head: HeadName = "cls-linear"
    """cls-linear: [CLS] -> dropout -> Linear (OFF: get_pooled_output() is the [CLS] state, modeling.py);
    mean-mlp: the study's mean-pooled MLP; hf: transformers' ElectraClassificationHead (exports to
    ElectraForSequenceClassification)."""
    head_init: Literal["glorot_uniform", "normal"] = "glorot_uniform"
    """Initial weights of the head's Linear layers. glorot_uniform: TF's default, which OFF's tf.layers.dense
    gets (classification_tasks.py passes no initializer); normal: normal(0, initializer_range), as transformers.
    Biases 0."""
    optimizer: Literal["adam", "adamw"] = "adam"
    """adam: Adam without bias correction, decoupled weight decay (OFF optimization.py AdamWeightDecayOptimizer,
    the pretraining optimizer); adamw: PyTorch AdamW, with bias correction. Both: betas (0.9, 0.999), eps 1e-6."""
    lr: float = 3e-4
    """Peak learning rate of the head. 3e-4: the paper's Table 7 for Small; OFF configure_finetuning.py's code
    default is 1e-4 (overridden there for Large only)."""
    schedule: Literal["original", "study"] = "original"
    """original: linear decay from step 0 to 0 at the last step, times a linear warmup (OFF optimization.py
    create_optimizer); study: linear warmup, then linear decay to 0 (transformers' get_linear_schedule_with_warmup)."""
    warmup_fraction: float = 0.1
    """Warmup length as a fraction of the run's steps (OFF warmup_proportion; not rounded, as OFF)."""
    layer_decay: float = 0.8
    """Layer-wise lr decay d: a parameter k layers below the head gets lr * d**k (OFF layerwise_lr_decay; 1: off)."""
    depth_convention: DepthConvention = "original"
    """How k is counted. original: OFF's code (optimization.py _get_layer_lrs: top layer lr*d**2, one step lower
    than the paper's intent, google-research/electra#51); paper: top layer lr*d; study: top layer lr, embeddings
    share layer 0's rate."""
    weight_decay: float = 0.01
    """Decoupled weight decay (OFF weight_decay_rate)."""
    decay_norm_and_bias: bool = False
    """Also decay LayerNorm parameters and biases (OFF excludes them: exclude_from_weight_decay)."""
    batch_size: int = 32
    """Training examples per optimizer step (OFF train_batch_size)."""
    epochs: int | None = None
    """None: the task's own (3; 10 for RTE and STS-B, OFF configure_finetuning.py)."""
    grad_clip: float = 1.0
    """Clip the global gradient norm (OFF optimization.py clip_by_global_norm)."""
    loss_reduction: Literal["sum", "mean"] = "sum"
    """sum: the batch's per-example losses are summed, as OFF (run_finetuning.py FinetuningModel reduce_sum), so
    clipping at 1.0 acts on a 32x larger gradient; mean: averaged, as PyTorch code usually does."""
    max_length: int = 128
    """Tokens per input, [CLS] A [SEP] B [SEP] with longest-first truncation (OFF max_seq_length)."""
    scale_targets: bool = True
    """Divide regression targets by the task's target_scale (STS-B: 5, OFF RegressionTask); predictions are scaled
    back."""
    swap_pairs: bool = True
    """Unordered-pair tasks (MRPC, STS-B): also train on every pair with its sentences swapped (OFF
    double_unordered, google-research/electra#98)."""
    precision: Literal["fp32", "bf16", "auto"] = "fp32"
    """fp32 (OFF); bf16 autocast; auto: as pretraining's (electra.training.precision), fp32 where that would be fp16."""
    tf32: bool = True
    """fp32 matmuls in TF32 on CUDA compute capability >= 8.0 (false: full fp32). Recorded in results.json."""
    max_steps: int | None = None
    """Cap on optimizer steps per run (smoke runs); the schedule is fit to the capped length."""
    eval_every_epoch: bool = False
    """Also evaluate on dev after every epoch (recorded in each run's history)."""
    eval_batch_size: int = 128
    threads: int | Literal["auto"] = "auto"
    """CPU threads of this process: a number, or auto: the cores this process may use (its share of them beside
    the machine's other runs of ours) less those other work keeps busy when it starts (electra.utils.machine
    choose_threads; docs/benchmarks.md "Threads"). OMP_NUM_THREADS, when set, wins over auto."""
    """Examples per evaluation forward pass (speed only)."""
    predict_test: bool = False
    """Write test predictions and the GLUE submission zip."""
    save_model: bool = False
    """Keep each fine-tuned model (the hf head: as a transformers ElectraForSequenceClassification folder)."""


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))


def load_finetune_config(recipe: str | Path | None = None, overrides: list[str] | None = None) -> FinetuneConfig:
    """Defaults (OFF), then a recipe name or YAML file, then `finetune.key=value` overrides; validated."""
    cfg = _load(FinetuneConfig(), RECIPE_DIR, recipe, overrides or [], prefix="finetune.", what=("recipe", "recipes"))
    validate_finetune(cfg)
    return cfg


def validate_finetune(cfg: FinetuneConfig) -> None:
    """Refuse values no run can use, naming the key, before any work starts."""
    checks = [
        (cfg.lr > 0, f"finetune.lr must be > 0, got {cfg.lr}"),
        (0 <= cfg.warmup_fraction < 1, f"finetune.warmup_fraction must be in [0, 1), got {cfg.warmup_fraction}"),
        (0 < cfg.layer_decay <= 1, f"finetune.layer_decay must be in (0, 1], got {cfg.layer_decay}"),
        (cfg.weight_decay >= 0, f"finetune.weight_decay must be >= 0, got {cfg.weight_decay}"),
        (cfg.batch_size >= 1, f"finetune.batch_size must be >= 1, got {cfg.batch_size}"),
        (cfg.eval_batch_size >= 1, f"finetune.eval_batch_size must be >= 1, got {cfg.eval_batch_size}"),
        (cfg.epochs is None or cfg.epochs >= 1, f"finetune.epochs must be >= 1 or null, got {cfg.epochs}"),
        (cfg.max_steps is None or cfg.max_steps >= 1, f"finetune.max_steps must be >= 1 or null, got {cfg.max_steps}"),
        (cfg.threads == "auto" or cfg.threads >= 1, f"finetune.threads must be >= 1 or auto, got {cfg.threads}"),
        (cfg.grad_clip > 0, f"finetune.grad_clip must be > 0, got {cfg.grad_clip}"),
        (cfg.max_length >= 5, f"finetune.max_length must be >= 5 ([CLS] A [SEP] B [SEP]), got {cfg.max_length}"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
