"""Fine-tune one pretrained model on one task with one seed: the single explicit training loop of GLUE.

Each step: set every parameter group's layer-wise lr from the schedule, forward, per-example losses (summed over
the batch, as OFF, or averaged), backward, clip the global norm, update (Adam without bias correction, as OFF, or
AdamW). Dev evaluation at the end (optionally after every epoch) and test predictions on request. The recipe is a
FinetuneConfig (electra/config/finetune.py); what differs between tasks comes from their Task (electra/glue/tasks.py).
Returns the run's record; the sweep writes it (atomically) as the run's result file. RUN/metrics.jsonl gets the
training loss every LOG_EVERY steps and the final dev metrics (prefixed dev_), as do the run's trackers.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import Tensor
from tqdm.auto import tqdm

from electra.config import FinetuneConfig, ModelConfig
from electra.data.tokenizer import load_tokenizer
from electra.glue import metrics as M
from electra.glue.features import Features, collate, encode, eval_batches, train_batches
from electra.glue.heads import GlueModel, build_model, export_hf
from electra.glue.loading import TaskData, with_swapped_pairs
from electra.glue.optim import build_optimizer, set_learning_rates
from electra.glue.tasks import Task
from electra.training import precision as devices
from electra.training.checkpoint import load_discriminator, model_source
from electra.training.optim import clip_and_step, scheduled_lr
from electra.training.precision import Precision, resolve_precision
from electra.training.trackers import write_metrics
from electra.utils.files import write_atomic
from electra.utils.machine import describe_machine
from electra.utils.wording import argument, source_text


@dataclass
class Pretrained:
    """The starting point, loaded once per process and copied into every run."""

    path: str
    cfg: ModelConfig
    body_state: dict[str, Tensor]
    tokenizer: Tokenizer
    tokenizer_dir: Path | None
    source: dict
    """The checkpoint (or transformers folder) the weights came from: path, step, sha256
    (electra.training.checkpoint.model_source); every run's result.json records it."""


def load_pretrained(path: str, tokenizer_dir: str | None = None, expected: dict | None = None) -> Pretrained:
    """The model `path` names (a run folder: its final checkpoint, refused while it trains), with its tokenizer.
    `expected`: the source a sweep recorded; weights with another sha256 are refused (a checkpoint rewritten
    since, or another model under the same path)."""
    source = model_source(path)
    if expected is not None and source["sha256"] != expected["sha256"]:
        raise ValueError(
            f"{path}: its weights are {source_text(source)}, not the {source_text(expected)} this sweep's runs came "
            "from: refusing to mix two models in one sweep"
        )
    source = expected or source
    body, cfg, found = load_discriminator(source["path"])
    tok_dir = Path(tokenizer_dir) if tokenizer_dir else found
    if tok_dir is None:
        raise FileNotFoundError(
            f"{path}: no tokenizer found beside the model; pass a tokenizer folder ({argument('tokenizer')})"
        )
    tokenizer = load_tokenizer(tok_dir)
    if tokenizer.get_vocab_size() > cfg.vocab_size:
        n = tokenizer.get_vocab_size()
        raise ValueError(f"{tok_dir}: the tokenizer has {n} tokens, the model's vocabulary only {cfg.vocab_size}")
    return Pretrained(str(path), cfg, body.state_dict(), tokenizer, tok_dir, source)


@dataclass
class Prepared:
    """A task's splits tokenized once per process and shared by all its seeds."""

    data: TaskData
    train: Features
    dev: dict[str, Features]
    test: dict[str, Features]


def prepare(data: TaskData, tokenizer: Tokenizer, cfg: FinetuneConfig) -> Prepared:
    task = data.task
    train = data.train
    if cfg.swap_pairs and task.unordered:  # OFF double_unordered: MRPC and STS-B
        train = with_swapped_pairs(train)

    def enc(examples):
        return encode(examples, tokenizer, cfg.max_length, task.is_regression)

    dev = {k: enc(v) for k, v in data.dev.items()}
    return Prepared(data, enc(train), dev, {k: enc(v) for k, v in data.test.items()})


def finetune_precision(device: torch.device, precision: str) -> str:
    """ "bf16" or "fp32", as pretraining resolves `precision` (training.precision: `auto` is bf16 on CUDA >= 8.0,
    fp32 on a CPU), except that fine-tuning has no loss scaler, so where pretraining's `auto` would
    pick fp16 (CUDA 7.x) fine-tuning stays in fp32."""
    name = resolve_precision(precision, device).name
    return "fp32" if name == "fp16" else name


def target_scale(task: Task, cfg: FinetuneConfig) -> float:
    """What regression targets are divided by for training (STS-B: 5 with scale_targets, OFF); 1 otherwise."""
    return task.target_scale if task.is_regression and cfg.scale_targets else 1.0


def schedule_steps(n_train: int, task: Task, cfg: FinetuneConfig) -> int:
    """Optimizer steps of the whole schedule on `n_train` examples, before any `max_steps` cap. OFF
    preprocessing.py pads the training set to a multiple of the batch (padding examples carry no loss), so an epoch
    is ceil(n / batch) steps."""
    return (cfg.epochs or task.epochs) * math.ceil(n_train / cfg.batch_size)


def run_length(n_train: int, task: Task, cfg: FinetuneConfig) -> tuple[int, int, float]:
    """(epochs, optimizer steps, warmup steps) of a run on `n_train` examples: the schedule, cut at `max_steps`;
    OFF's warmup is num_train_steps * warmup_proportion, not rounded."""
    epochs = cfg.epochs or task.epochs
    total = schedule_steps(n_train, task, cfg)
    if cfg.max_steps is not None:
        total = min(total, cfg.max_steps)
    return epochs, total, cfg.warmup_fraction * total


def example_losses(out: Tensor, labels: Tensor, task: Task, scale: float) -> Tensor:
    """(B,) losses: squared error on target / scale (OFF RegressionTask), or cross-entropy (ClassificationTask)."""
    if task.is_regression:
        return (out.float().squeeze(-1) - labels / scale) ** 2
    return F.cross_entropy(out.float(), labels, reduction="none")


def train_step(
    model: GlueModel,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, Tensor],
    task: Task,
    cfg: FinetuneConfig,
    amp=None,
) -> Tensor:
    """Forward, backward, clip, update at the learning rates already set; returns the mean example loss (device)."""
    with amp or nullcontext():
        out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])  # (B, n)
    losses = example_losses(out, batch["labels"], task, target_scale(task, cfg))  # (B,)
    # OFF run_finetuning.py sums the batch's losses (reduce_sum): clipping at 1.0 then sees the summed gradient
    (losses.sum() if cfg.loss_reduction == "sum" else losses.mean()).backward()
    clip_and_step(optimizer, None, list(model.parameters()), cfg.grad_clip)  # as in pretraining: no host sync
    return losses.detach().mean()


LOG_EVERY = 10  # steps between reads of the training loss (for the progress bar and the non-finite check)
LOSS_WINDOW = 10
"""Steps averaged for a run's first and last loss (its record's loss_start and loss_end); at most half the run
each, so that a short run's two ends are different steps (10 steps of 10 made them the same mean)."""


def loss_window(steps: int) -> int:
    """How many of a run's `steps` its first and last loss average: LOSS_WINDOW, at most half of them (1 for a
    one-step run, whose two ends are its one step)."""
    return max(1, min(LOSS_WINDOW, steps // 2))


def check_finite(losses: torch.Tensor, step: int, what: str) -> list[float]:
    """The losses of the last LOG_EVERY steps before `step`; an error naming the first non-finite one."""
    first = max(0, step - LOG_EVERY)
    recent = losses[first:step].tolist()
    for i, value in enumerate(recent):
        if not math.isfinite(value):
            raise FloatingPointError(f"{what}: loss is {value} at step {first + i}")
    return recent


def finetune(
    prep: Prepared,
    pre: Pretrained,
    cfg: FinetuneConfig,
    seed: int,
    device: torch.device,
    run_dir: Path,
    progress: bool = True,
    writers: list | tuple = (),
) -> dict:
    """One (task, seed) run from the pretrained body: train, evaluate on dev, predict test; returns its record.
    `writers`: open trackers (electra.training.trackers.open_loggers) that get what RUN/metrics.jsonl gets."""
    task = prep.data.task
    start = time.time()
    tf32 = devices.enable_tf32(device, cfg.tf32)  # fp32 matmuls in TF32 on Ampere and later, as in pretraining
    precision = resolve_precision(cfg.precision, device)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").unlink(missing_ok=True)  # a run always starts from step 0: no lines of an earlier try
    model = build_model(pre.body_state, pre.cfg, cfg.head, task, seed, cfg.head_init).to(device)
    optimizer = build_optimizer(model, cfg, pre.cfg.num_layers)
    n = len(prep.train)
    epochs, total, warmup = run_length(n, task, cfg)
    gen = torch.Generator().manual_seed(seed)  # data order: a function of the seed only
    amp = devices.autocast_for(finetune_precision(device, cfg.precision), device)
    scale = target_scale(task, cfg)

    history = []
    losses = torch.full((total,), float("nan"), device=device)  # per step, read every LOG_EVERY steps: no sync
    bar = _progress_bar(total, f"{task.name} seed {seed}", progress)
    step = 0
    for epoch in range(epochs):
        if step >= total:
            break
        model.train()
        for idx in train_batches(n, cfg.batch_size, gen):
            if step >= total:
                break
            batch = {k: v.to(device, non_blocking=True) for k, v in collate(prep.train, idx).items()}
            set_learning_rates(optimizer, step, total, warmup, cfg.schedule)
            losses[step] = train_step(model, optimizer, batch, task, cfg, amp)
            step += 1
            bar.update(1)
            if step % LOG_EVERY == 0 or step == total:
                recent = check_finite(losses, step, f"{task.name} seed {seed}")
                head_lr = scheduled_lr(cfg.lr, step - 1, total, warmup, cfg.schedule)
                bar.set_postfix(loss=f"{np.mean(recent):.4f}", lr=f"{head_lr:.2e}")
                # the mean loss of the last LOG_EVERY steps, and the head's learning rate at the last one
                write_metrics(run_dir, {"step": step, "loss": float(np.mean(recent)), "lr": head_lr}, writers)
        if cfg.eval_every_epoch:
            history.append({"epoch": epoch + 1, "step": step, "metrics": evaluate(model, prep, cfg, device, scale)[0]})
    bar.close()

    scores, extra, check = evaluate(model, prep, cfg, device, scale)
    write_metrics(run_dir, {"step": step, **{f"dev_{k}": v for k, v in {**scores, **extra}.items()}}, writers)
    record = _record(
        prep,
        seed,
        (scores, extra, check),
        steps=step,
        epochs=epochs,
        warmup=warmup,
        losses=losses[:step].tolist(),
        history=history,
        seconds=round(time.time() - start, 2),  # training and dev evaluation: the test predictions come after
        device=device,
        precision=precision,
        tf32=tf32,
        test_predictions=write_predictions(model, prep, cfg, device, scale, run_dir) if cfg.predict_test else {},
    )
    if cfg.save_model:
        save_finetuned(model, task, pre, run_dir / "model")
    return record


def _progress_bar(total: int, desc: str, progress: bool) -> tqdm:
    """The run's step bar: redrawn 10 times a second on a terminal, every 30 s into a log file."""
    every = 0.1 if sys.stderr.isatty() else 30.0  # a log file gets a line every 30 s, not 10 a second
    return tqdm(total=total, desc=desc, disable=not progress, leave=False, dynamic_ncols=True, mininterval=every)


def _record(
    prep: Prepared,
    seed: int,
    evaluation: tuple[dict, dict, M.ChanceCheck],
    *,
    steps: int,
    epochs: int,
    warmup: float,
    losses: list[float],
    history: list[dict],
    seconds: float,
    device: torch.device,
    precision: Precision,
    tf32: bool,
    test_predictions: dict,
) -> dict:
    """The run's record (its result file): the dev scores, what it trained on and for how long, the ends of its
    loss curve, and where and how it ran."""
    task = prep.data.task
    scores, extra, check = evaluation
    window = loss_window(steps)
    return {
        "task": task.name,
        "seed": seed,
        "main_metric": task.main_metric,
        "metrics": scores,
        "extra_metrics": extra,
        "n_train": prep.data.n_train,
        "n_eval": prep.data.n_eval,
        "n_eval_splits": {k: len(v) for k, v in prep.data.dev.items()},
        "steps": steps,
        "epochs": epochs,
        "warmup_steps": warmup,
        "loss_start": float(np.mean(losses[:window])) if losses else None,
        "loss_end": float(np.mean(losses[-window:])) if losses else None,
        "chance": dataclasses.asdict(check),
        "history": history,
        "seconds": seconds,
        "device": str(device),
        "machine": describe_machine(device),
        "precision": "fp32" if precision.name == "fp16" else precision.name,
        "precision_reason": precision.reason,
        "tf32": tf32,
        "test_predictions": test_predictions,
    }


@torch.no_grad()
def predict(model: GlueModel, feats: Features, cfg: FinetuneConfig, device: torch.device) -> np.ndarray:
    """(N, n_outputs) float32 model outputs in the original example order."""
    model.eval()
    out = np.zeros((len(feats), model.classifier.out_proj.out_features), dtype=np.float32)
    for idx in eval_batches(feats, cfg.eval_batch_size):
        batch = collate(feats, idx)
        with devices.autocast_for(finetune_precision(device, cfg.precision), device):
            y = model(*(batch[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids")))
        out[idx] = y.float().cpu().numpy()
    return out


def decide(outputs: np.ndarray, regression: bool, scale: float) -> np.ndarray:
    """Outputs -> predicted label ids (argmax), or scores in the task's own scale."""
    return outputs[:, 0] * scale if regression else outputs.argmax(-1)


def evaluate(model, prep: Prepared, cfg: FinetuneConfig, device, scale: float):
    """Dev metrics (0-100), MNLI's merged m+mm accuracy (the study's number), and the chance check."""
    task = prep.data.task
    scores, preds, golds = {}, [], []
    for suffix, feats in prep.dev.items():
        pred = decide(predict(model, feats, cfg, device), task.is_regression, scale)
        scores.update(M.compute(task.metrics, pred, feats.labels, suffix))
        preds.append(pred)
        golds.append(feats.labels)
    extra = {}
    if len(preds) > 1:
        extra = M.compute(task.metrics, np.concatenate(preds), np.concatenate(golds), "_merged")
    check = M.chance_check(preds[0], golds[0], prep.train.labels, task.is_regression, task.main_metric)
    return scores, extra, check


def write_predictions(model, prep: Prepared, cfg: FinetuneConfig, device, scale: float, run_dir: Path) -> dict:
    """`index<TAB>prediction` files in the GLUE server format (label strings; scores clipped to the task's
    prediction_range, STS-B [0, 5])."""
    task = prep.data.task
    written = {}
    for name, feats in prep.test.items():  # also other tasks' test sets (MNLI's model predicts AX): our labels
        pred = decide(predict(model, feats, cfg, device), task.is_regression, scale)
        if task.is_regression:
            lo, hi = task.prediction_range or (-np.inf, np.inf)
            values = [f"{v:.3f}" for v in np.clip(pred, lo, hi)]
        else:
            values = [task.labels[i] for i in pred]
        index = [e.index for e in prep.data.test[name]]
        lines = ["index\tprediction"] + [f"{i}\t{v}" for i, v in zip(index, values, strict=True)]
        file = run_dir / f"test_{name}"
        write_atomic(file, "\n".join(lines) + "\n")
        written[name] = file.name
    return written


def save_finetuned(model: GlueModel, task: Task, pre: Pretrained, out: Path) -> None:
    if model.head_name == "hf":
        export_hf(model, task, out, pre.tokenizer_dir)
        return
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, out / "model.safetensors")
    meta = {"task": task.name, "head": model.head_name, "labels": task.labels, "model": dataclasses.asdict(pre.cfg)}
    write_atomic(out / "glue_model.json", json.dumps(meta, indent=1))
