"""Held-out evaluation during pretraining: the generator's and the discriminator's numbers on held-out
examples, the token-frequency baseline they are read against, and the collapse watch.

Collapse (the study's finding): with a generator larger than recommended the discriminator can stop telling
replaced from original tokens; recall on replaced tokens falls to 0 and the AUC to 0.5. The watch flags a run
whose held-out metrics stay there for `train.collapse_patience` evaluations (the thresholds: training/health.py).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from pathlib import Path

import numpy as np
import torch

from electra.config import PretrainConfig
from electra.data.builders import ExampleSource
from electra.data.tokenizer import TokenizerInfo
from electra.modeling.electra import STAT_NAMES, ElectraForPretraining, MaskedLMForPretraining, metrics_from_stats
from electra.training.batches import batch_to_device, masked_batch
from electra.training.checkpoint import RunMeta
from electra.training.health import COLLAPSE_RANK, collapse_hint, is_collapsed, states_collapsed
from electra.training.trackers import write_metrics
from electra.utils.files import write_atomic

log = logging.getLogger("electra.pretrain")


FREQUENCY_SAMPLE_TOKENS = 1_000_000  # training tokens counted for the token-frequency baseline


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


def evaluate(
    model: ElectraForPretraining,
    source: ExampleSource,
    cfg: PretrainConfig,
    tokens: TokenizerInfo,
    device: torch.device,
    autocast,
    train: ExampleSource | None = None,
    chunk: int | None = None,
) -> dict[str, float]:
    """Metrics on a fixed held-out set (the same examples and masks at every evaluation), with disc AUC and
    what token frequencies alone score at the slots shown as [MASK] (compare `masked_accuracy` and `masked_loss`):
    `mlm_majority_rate`, the accuracy of always guessing the most frequent token there; `mlm_unigram_loss` (with
    `train`), the cross-entropy in nats of the training examples' token frequencies there: the plateau a masked LM
    sits on until it uses context; `mlm_unigram_entropy`, the entropy of those very slots' own frequencies, which no
    model fit on other text reaches (0.25 nats under `mlm_unigram_loss` with a 4096-token vocabulary and ~7,000
    slots: a lower bound, not the plateau).

    Runs under torch.inference_mode (no autograd graph: a 64-sequence graph of `base` is ~59 GiB) and `chunk`
    sequences at a time (the run's micro-batch, which --max-memory-gb chose; None: whole batches). Masks are keyed
    per example, so the chunks see exactly the slots the whole batch would.

    The generator samples at the objective's end point (objective.temperature, objective.uniform_replace_prob) at
    every evaluation, whatever the training schedules have reached: the discriminator is always scored on the task
    the recipe ends on, so a schedule's easier early replacements never flatter its curve."""
    was_training = model.training
    model.eval()
    special = torch.tensor(tokens.special_ids, device=device)
    size = min(cfg.train.batch_size, 64)
    totals = {k: 0.0 for k in STAT_NAMES}
    scores, labels, targets = [], [], []
    states = TokenStates()
    step = min(size, chunk or size)
    with torch.inference_mode(), at_schedule_ends(model):
        for start in range(0, cfg.train.eval_batches * size, step):  # the same examples as whole batches of `size`
            ids = np.arange(start, min(start + step, cfg.train.eval_batches * size), dtype=np.int64)
            batch = batch_to_device(source.examples(ids), ids, device)
            masked = masked_batch(cfg, tokens, batch, special)
            with autocast:
                out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], masked)
            for k, v in out.stats.items():
                totals[k] += v.item()
            scores.append(out.disc_logits.float()[out.disc_mask].cpu())
            labels.append(out.disc_labels[out.disc_mask].cpu())
            targets.append(masked.targets[(masked.weights > 0) & masked.is_masked].cpu())
            if out.disc_hidden is not None:
                states.add(out.disc_hidden[out.disc_mask])
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
    if states.count:
        metrics["disc_effective_rank"] = states.effective_rank()
        metrics["disc_mean_share"] = states.mean_share()
    return metrics


@contextlib.contextmanager
def at_schedule_ends(model: ElectraForPretraining | MaskedLMForPretraining):
    """The generator samples at the objective's end points (its temperature and uniform-replacement fraction) inside
    the block; what the training schedules had set comes back after it. The masked LM samples nothing."""
    if not isinstance(model, ElectraForPretraining):
        yield
        return
    # the buffers themselves, not the setters (which refuse what the objective cannot sample at): the end points
    # in, then exactly what was there back, whatever the objective says now (scripts/heldout_at_temperature.py)
    saved = model.temperature.clone(), model.uniform_replace.clone()
    model.temperature.fill_(model.objective.temperature)
    model.uniform_replace.fill_(model.objective.uniform_replace_prob)
    try:
        yield
    finally:
        model.temperature.copy_(saved[0])
        model.uniform_replace.copy_(saved[1])


class TokenStates:
    """Running second moments of token states (n, H), enough for their effective rank and the share of their
    squared norm held by their common mean, over any number of batches. A discriminator that collapsed to a
    constant answer maps every token to nearly one vector: effective rank near 1, mean share near 1."""

    def __init__(self):
        self.gram, self.total, self.count = None, None, 0

    def add(self, h: torch.Tensor) -> None:
        h = h.double().cpu()  # (n, H)
        gram, total = h.T @ h, h.sum(0)
        self.gram = gram if self.gram is None else self.gram + gram
        self.total = total if self.total is None else self.total + total
        self.count += len(h)

    def effective_rank(self) -> float:
        """exp of the entropy of the normalised singular values of the (n, H) matrix of states (Roy & Vetterli
        2007): H for states spread evenly over H directions, 1 for states all on one line."""
        singular = torch.linalg.eigvalsh(self.gram).clamp(min=0).sqrt()
        p = singular / singular.sum()
        return float(torch.exp(-(p * p.clamp(min=1e-300).log()).sum()))

    def mean_share(self) -> float:
        """|mean state|^2 / mean |state|^2: 1 when every state is the same vector, ~0 for states around 0."""
        mean = self.total / self.count
        return float(mean @ mean / (self.gram.trace() / self.count))


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


def meta_evals(run_dir: Path) -> list[dict]:
    """The held-out evaluation rows of a run's metrics.jsonl so far."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if "eval_disc_auc" in r]


def watch_collapse(
    model,
    data,
    cfg: PretrainConfig,
    tokens: TokenizerInfo,
    dev,
    autocast,
    meta: RunMeta,
    run_dir: Path,
    writers: list,
    step: int,
    chunk: int | None = None,
) -> None:
    """Evaluate on the held-out set (`chunk` sequences at a time: the run's micro-batch), log it, and update the
    collapse flag in `meta` and RUN/run.json."""
    metrics = evaluate(model, data.eval, cfg, tokens, dev, autocast, train=data.train, chunk=chunk)
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
                "fine-tuning from this checkpoint will be poor.",
                step,
                metrics["disc_recall"],
                metrics["disc_auc"],
                meta.collapse_streak,
            )
            flat, rank = states_collapsed(meta_evals(run_dir)), metrics.get("disc_effective_rank")
            if flat is not None:
                log.warning(
                    "its last-layer token states collapsed to effective rank %.1f by step %d (one answer for every "
                    "token); %s",
                    flat[1],
                    flat[0],
                    collapse_hint(cfg.objective),
                )
            elif rank is not None and rank > COLLAPSE_RANK:  # e.g. the cpu preset at 4 x 128, steps 500-1000
                log.warning(
                    "its last-layer token states are still spread (effective rank %.1f; a collapse is %g or less): "
                    "it may be learning slowly rather than collapsed, so look again at later evaluations",
                    rank,
                    COLLAPSE_RANK,
                )
            meta.collapse_first_step = meta.collapse_first_step or step
        meta.collapsed = True
    elif meta.collapse_streak == 0:
        meta.collapsed = False
    write_atomic(run_dir / "run.json", meta.to_json())
