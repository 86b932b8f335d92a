"""The schema of a pretraining run: dataclasses that hold the defaults (ELECTRA-Small, OFF behaviour), and what
follows from them (the sampling schedule at a step, the masking split, the mask slots of a sequence)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from electra.utils.errors import InputError

PRESET_DIR = Path(__file__).parent.parent / "configs"


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
