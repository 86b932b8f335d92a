"""What a pretraining run reports: metrics lines (and TensorBoard / W&B, also for GLUE runs), held-out evaluation,
the collapse watch.

Collapse (the study's finding): with a generator larger than recommended the discriminator can stop telling
replaced from original tokens; recall on replaced tokens falls to 0 and the AUC to 0.5. The watch flags a run
whose held-out metrics stay there for `train.collapse_patience` evaluations: an AUC under 0.55, or a recall under
0.05 with an AUC that has not passed the report's gate (0.6).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from electra.checkpoint import RunMeta
from electra.config import PretrainConfig, to_dict
from electra.data import ExampleSource, TokenizerInfo
from electra.files import write_atomic
from electra.masking import mask_tokens
from electra.model import STAT_NAMES, ElectraForPretraining, metrics_from_stats
from electra.results import is_collapsed

log = logging.getLogger("electra.pretrain")

FREQUENCY_SAMPLE_TOKENS = 1_000_000  # training tokens counted for the token-frequency baseline


def host_batch(arrays: dict[str, np.ndarray], ids: np.ndarray, pin: bool) -> dict[str, torch.Tensor]:
    """Examples as CPU tensors (pinned when `pin`, so the copy to the GPU can be non-blocking), with their ids.
    `no_padding` (a host bool, read without touching the device) says whether the attention mask is all ones."""
    batch = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
    batch["example_ids"] = torch.from_numpy(ids)
    if pin:
        batch = {k: v.pin_memory() for k, v in batch.items()}
    batch["no_padding"] = bool(arrays["attention_mask"].all())
    return batch


def to_device(batch: dict, device: torch.device) -> dict:
    """The tensors of a `host_batch` on the device (non-blocking from pinned memory); other values as they are."""
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def batch_to_device(arrays: dict[str, np.ndarray], ids: np.ndarray, device: torch.device) -> dict:
    return to_device(host_batch(arrays, ids, pin=device.type == "cuda"), device)


def masked_batch(cfg: PretrainConfig, tokens: TokenizerInfo, batch: dict, special: torch.Tensor):
    return mask_tokens(
        batch["input_ids"], batch["attention_mask"], batch["example_ids"], cfg.train.seed, cfg.objective,
        cfg.num_mask_slots, tokens.mask_id, special, tokens.vocab_size,
    )  # fmt: skip


@torch.no_grad()
@functools.lru_cache(maxsize=4)
def token_log_frequencies(train: ExampleSource, vocab_size: int, special_ids: tuple[int, ...]) -> torch.Tensor:
    """(V,) log-frequencies of the tokens of the first ~1M tokens of training examples, counts + 1/2 (special
    tokens, never a masked target, excluded): the model a masked LM learns first, whose loss is the plateau."""
    n = max(1, FREQUENCY_SAMPLE_TOKENS // train.seq_len)
    counts = np.zeros(vocab_size)
    for start in range(0, n, 1024):
        ids = train.examples(np.arange(start, min(n, start + 1024), dtype=np.int64))["input_ids"]
        counts += np.bincount(ids.ravel(), minlength=vocab_size)[:vocab_size]
    counts += 0.5
    counts[list(special_ids)] = 0
    with np.errstate(divide="ignore"):  # special tokens: log 0 = -inf, never looked up
        return torch.from_numpy(np.log(counts / counts.sum()))


def evaluate(model: ElectraForPretraining, source: ExampleSource, cfg: PretrainConfig, tokens: TokenizerInfo,
             device: torch.device, autocast, train: ExampleSource | None = None) -> dict[str, float]:  # fmt: skip
    """Metrics on a fixed held-out set (the same examples and masks at every evaluation), with disc AUC and
    what token frequencies alone score at the slots shown as [MASK] (compare `masked_accuracy` and `masked_loss`):
    `mlm_majority_rate`, the accuracy of always guessing the most frequent token there; `mlm_unigram_loss` (with
    `train`), the cross-entropy in nats of the training examples' token frequencies there: the plateau a masked LM
    sits on until it uses context; `mlm_unigram_entropy`, the entropy of those very slots' own frequencies, which no
    model fit on other text reaches (0.25 nats under `mlm_unigram_loss` with a 4096-token vocabulary and ~7,000
    slots: a lower bound, not the plateau)."""
    was_training = model.training
    model.eval()
    special = torch.tensor(tokens.special_ids, device=device)
    size = min(cfg.train.batch_size, 64)
    totals = {k: 0.0 for k in STAT_NAMES}
    scores, labels, targets = [], [], []
    for b in range(cfg.train.eval_batches):
        ids = np.arange(b * size, (b + 1) * size, dtype=np.int64)
        batch = batch_to_device(source.examples(ids), ids, device)
        masked = masked_batch(cfg, tokens, batch, special)
        with autocast:
            out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], masked)
        for k, v in out.stats.items():
            totals[k] += v.item()
        scores.append(out.disc_logits.float()[out.disc_mask].cpu())
        labels.append(out.disc_labels[out.disc_mask].cpu())
        targets.append(masked.targets[(masked.weights > 0) & masked.is_masked].cpu())
    model.train(was_training)
    metrics = metrics_from_stats(totals)
    targets = torch.cat(targets)  # (slots shown as [MASK],)
    counts = torch.bincount(targets).double()
    p = counts[counts > 0] / counts.sum()
    metrics["mlm_majority_rate"] = float(p.max()) if len(p) else float("nan")
    metrics["mlm_unigram_entropy"] = float(-(p * p.log()).sum()) if len(p) else float("nan")
    if train is not None:
        log_freq = token_log_frequencies(train, tokens.vocab_size, tuple(tokens.special_ids))
        metrics["mlm_unigram_loss"] = float(-log_freq[targets].mean()) if len(targets) else float("nan")
    y, s = torch.cat(labels).numpy(), torch.cat(scores).numpy()
    metrics["disc_auc"] = roc_auc(y, s)
    return metrics


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve as the Mann-Whitney statistic with tied scores at their average rank (what
    sklearn's roc_auc_score computes, without needing scikit-learn: the loop runs on a bare GPU machine too).
    NaN when only one class is present."""
    y = np.asarray(labels) > 0
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, where, counts = np.unique(np.asarray(scores), return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2)[where]  # 1-based, ties averaged
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def watch_collapse(model, data, cfg: PretrainConfig, tokens: TokenizerInfo, dev, autocast, meta: RunMeta,
                   run_dir: Path, writers: list, step: int) -> None:  # fmt: skip
    """Evaluate on the held-out set, log it, and update the collapse flag in `meta` and RUN/run.json."""
    metrics = evaluate(model, data.eval, cfg, tokens, dev, autocast, train=data.train)
    write_metrics(run_dir, {"step": step, **{f"eval_{k}": v for k, v in metrics.items()}}, writers)
    if cfg.objective.kind != "electra":  # no discriminator to collapse
        write_atomic(run_dir / "run.json", meta.to_json())
        return
    meta.collapse_streak = meta.collapse_streak + 1 if is_collapsed(metrics) else 0
    if meta.collapse_streak >= cfg.train.collapse_patience:
        if not meta.collapsed:
            log.warning(
                "step %d: the discriminator does not tell replaced from original tokens (eval recall %.3f, AUC %.3f "
                "for %d evaluations). Early in a run this is the plateau where it predicts 'original' everywhere; "
                "later it is a collapse (the study saw it with generators larger than recommended). Either way, "
                "fine-tuning from this checkpoint will be poor.", step, metrics["disc_recall"],
                metrics["disc_auc"], meta.collapse_streak,
            )  # fmt: skip
            meta.collapse_first_step = meta.collapse_first_step or step
        meta.collapsed = True
    elif meta.collapse_streak == 0:
        meta.collapsed = False
    write_atomic(run_dir / "run.json", meta.to_json())


TRACKERS = ("tensorboard", "wandb")
"""Experiment trackers a run can also log to, beside its metrics.jsonl."""


def open_loggers(names: Sequence[str], run_dir: Path, cfg: PretrainConfig | dict, name: str | None = None,
                 group: str | None = None, tensorboard_dir: Path | None = None,
                 resumed_at: int | None = None) -> list:  # fmt: skip
    """One writer per tracker in `names`: TensorBoard event files in `tensorboard_dir` (default RUN/tensorboard),
    tagged with the metrics' names; a W&B run under RUN/wandb, offline unless WANDB_MODE says otherwise, with `cfg`
    as its config, called `name` (default: the run folder's name) in `group`.

    `resumed_at`: the step a pretraining run starts from (0 when fresh). An interrupted session may have logged
    past it, and those steps are logged again, so TensorBoard purges its events after that step (SummaryWriter's
    purge_step, as metrics.jsonl is trimmed), and W&B continues the folder's own W&B run (its id kept in
    RUN/wandb/run_id) instead of starting a second one."""
    check_trackers(names)
    config = cfg if isinstance(cfg, dict) else to_dict(cfg)
    writers: list = []
    try:
        for tracker in names:
            if tracker == "tensorboard":
                writers.append(_TensorBoard(Path(tensorboard_dir or run_dir / "tensorboard"), resumed_at))
            else:
                writers.append(_WandB(Path(run_dir), config, name or Path(run_dir).name, group, resumed_at))
    except BaseException:
        for w in writers:
            w.close()
        raise
    return writers


def check_trackers(names: Sequence[str]) -> None:
    """Refuse an unknown tracker, or one whose package is not installed, before any work starts."""
    import importlib.util

    for name in names:
        if name not in TRACKERS:
            raise ValueError(f"unknown tracker {name!r}: expected one of {list(TRACKERS)}")
        if importlib.util.find_spec(name) is None:
            raise ValueError(f"--{name} needs the {name} package: pip install 'electra[{name}]'")


def tracked_values(row: dict) -> dict[str, int | float]:
    """What a tracker records of a metrics row: its finite numbers (metrics.jsonl keeps the others, as null)."""
    return {k: v for k, v in row.items() if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v)}  # fmt: skip


class _TensorBoard:
    def __init__(self, folder: Path, resumed_at: int | None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(folder), purge_step=None if resumed_at is None else resumed_at + 1)

    def log(self, row: dict) -> None:
        for k, v in tracked_values(row).items():
            self.writer.add_scalar(k, v, row["step"])

    def close(self) -> None:
        self.writer.close()


class _WandB:
    def __init__(self, run_dir: Path, config: dict, name: str, group: str | None, resumed_at: int | None):
        import wandb

        run_dir.mkdir(parents=True, exist_ok=True)
        id_file, run_id = run_dir / "wandb" / "run_id", None
        if resumed_at is not None and id_file.is_file():
            run_id = id_file.read_text().strip() or None
        self.run = wandb.init(dir=str(run_dir), config=config, name=name, group=group, id=run_id,
                              resume="allow" if run_id else None,
                              mode=os.environ.get("WANDB_MODE", "offline"))  # fmt: skip
        if resumed_at is not None and run_id is None:
            write_atomic(id_file, self.run.id + "\n")

    def log(self, row: dict) -> None:
        self.run.log(tracked_values(row), step=row["step"])

    def close(self) -> None:
        self.run.finish()


def write_metrics(run_dir: Path, row: dict, writers: list) -> None:
    """Append one JSON line (undefined values such as precision with no positive prediction become null)."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write(json.dumps(clean) + "\n")
    for w in writers:
        w.log(row)
