"""GLUE fine-tuning's config (`electra glue`): OFF's recipe for ELECTRA-Small as defaults; recipes in
`electra/configs/finetune/*.yaml` hold only differences from them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from electra.config.loading import load_layered
from electra.config.schema import PRESET_DIR, ConfigError

# OFF's recipe: google-research/electra configure_finetuning.py, run_finetuning.py, model/optimization.py,
# finetune/classification/classification_tasks.py
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
    """Examples per evaluation forward pass (speed only)."""
    threads: int | Literal["auto"] = "auto"
    """CPU threads of this process: a number, or auto: the cores this process may use (its share of them beside
    the machine's other runs of ours) less those other work keeps busy when it starts (electra.utils.machine
    choose_threads; docs/benchmarks.md "Threads"). OMP_NUM_THREADS, when set, wins over auto."""
    predict_test: bool = False
    """Write test predictions and the GLUE submission zip."""
    save_model: bool = False
    """Keep each fine-tuned model (the hf head: as a transformers ElectraForSequenceClassification folder)."""


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))


def load_finetune_config(recipe: str | Path | None = None, overrides: list[str] | None = None) -> FinetuneConfig:
    """Defaults (OFF), then a recipe name or YAML file, then `finetune.key=value` overrides; validated."""
    cfg = load_layered(
        FinetuneConfig(), RECIPE_DIR, recipe, overrides or [], prefix="finetune.", what=("recipe", "recipes")
    )
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
