"""The rules that say whether pretraining learned and whether the discriminator collapsed: the training loop's
collapse watch reads them, and the learning gate (`learning_gate`) is judged here, low enough for both `electra
report` and the GLUE sweep's results.md to say the same word about a run.

The gate: a pretrained model counts as having learned only when its masked LM (ELECTRA's generator, or the MLM
baseline) knows more than token frequencies at the held-out slots shown as [MASK] (its accuracy there clearly
above always guessing the most frequent token, or its loss clearly below the best token-frequency model's) and,
for ELECTRA, when the held-out discriminator AUC is above GATE_AUC. A model that never left the plateau is not
evidence about its objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from electra.config import ObjectiveConfig
from electra.utils.wording import plural

GATE_MLM_MARGIN = 0.02
"""Held-out accuracy at the slots shown as [MASK] must exceed the most-frequent-token rate there by this much (2
points; the rate's standard error on the default held-out set of ~8k [MASK] slots is about 0.3 points). The
accuracy over all chosen slots would not do: the slots kept as the original token show the answer, so a model that
copies its input and otherwise guesses the commonest token already scores ~15% there."""
GATE_LOSS_MARGIN = 0.1
"""...or its held-out loss at those slots must be this many nats below the cross-entropy of the training text's token
frequencies there (`eval_mlm_unigram_loss`: the plateau a masked LM sits on before it uses context; runs logged
before that metric existed are held to the slots' own entropy, which is lower, so stricter). Either is evidence of
knowledge beyond frequencies; the accuracy alone misses it where the commonest token stays the best single guess at
most slots (the built-in language: a model 1.4 nats below the unigram loss still guesses "the" best), and the loss
alone would be fooled by nothing the accuracy is not."""
GATE_AUC = 0.6
"""...and, for ELECTRA, the held-out discriminator AUC must exceed this."""

COLLAPSE_FALL = 0.05  # an AUC that passed the gate and ended at least this far under its peak: collapsed (a
# wobble at the threshold, 0.603 -> 0.597, is not)
COLLAPSE_AUC = 0.55  # the collapse watch (training/evaluation.py): held-out disc AUC below this ...
COLLAPSE_RECALL = 0.05  # ... or recall on replaced tokens below this while the AUC is not above GATE_AUC, at
# `collapse_patience` evaluations in a row. A small discriminator whose AUC climbs past the gate can still predict
# 'original' for nearly every token at the 0.5 threshold (recall 0.03 at AUC 0.72: the `cpu` preset on English): it
# ranks replaced tokens higher, which is what it learns, and is not a collapse.


def is_collapsed(metrics: dict[str, float]) -> bool:
    """Held-out discriminator metrics (disc_recall, disc_auc) at the collapse level."""
    recall, auc = metrics["disc_recall"], metrics["disc_auc"]
    separates = auc > GATE_AUC  # NaN does not
    return (not auc >= COLLAPSE_AUC) or (not recall >= COLLAPSE_RECALL and not separates)  # NaN counts as collapsed


COLLAPSE_RANK = 5.0
"""The discriminator's held-out last-layer token states with an effective rank (training/evaluation.py TokenStates)
at or under this are nearly one vector: it gives the same answer for every token. Measured at 4 x 128 on English
(docs/research-log.md): 2.2-4 for collapsed discriminators, 30-90 for learning ones, at steps 250-3000."""
COLLAPSE_HINT = "--set objective.temperature_start=3 --set objective.temperature_steps=3000"
"""The one change most likely to help a discriminator whose states collapsed: easier replacements first (a sampling
temperature falling to 1), measured against warmup, generator lr, embedding sharing and the others
(docs/research-log.md)."""
SMALLER_GENERATOR = 0.125
"""What to try first where the schedule is on already: a generator 1/8 of the discriminator's width instead of 1/4,
the one lever that lifted the held-out AUC of a 4 x 128 run with the schedule (0.738 at step 3000 against the
preset's 0.701-0.713, three seeds; SST-2 unchanged, 83.1 +- 0.4 against 83.2 +- 0.5: docs/research-log.md, "The
discriminator's first minutes") ..."""
LONGER_WARMUP = 1000
"""... and then a longer warmup with it (1000 steps instead of the `cpu` preset's 200): without the schedule it
raised a collapsed 4 x 128 discriminator's AUC to 0.618 at step 1000 (2 seeds); with it, 0.694 at step 3000, not
better than the preset there (one seed): untried at other sizes."""


def collapse_hint(objective: ObjectiveConfig | None = None) -> str:
    """What to try for a discriminator whose states collapsed: the temperature schedule (COLLAPSE_HINT), or for a
    run that anneals its temperature already (`objective`, the run's), what comes after it: a smaller generator,
    a longer warmup with the schedule."""
    if objective is None or objective.temperature_start is None:
        return f"the flag most likely to help: {COLLAPSE_HINT}"
    o = objective
    return (
        f"it anneals its sampling temperature already ({o.temperature_start:g} to {o.temperature:g} over "
        f"{plural(o.temperature_steps, 'step')}); what to try next: a smaller generator (--set "
        f"model.generator_fraction={SMALLER_GENERATOR:g}), or a longer warmup with the schedule (--set "
        f"train.warmup_steps={LONGER_WARMUP})"
    )


def states_collapsed(evals: list[dict]) -> tuple[int, float] | None:
    """(step, effective rank) of the first held-out evaluation from which on the discriminator's last-layer states
    stayed collapsed (rank <= COLLAPSE_RANK at every later evaluation); None if they did not, or were not logged."""
    ranks = [(r["step"], r.get("eval_disc_effective_rank")) for r in evals]
    ranks = [(s, v) for s, v in ranks if isinstance(v, (int, float)) and math.isfinite(v)]
    first = None
    for step, rank in ranks:
        if rank <= COLLAPSE_RANK:
            first = first or (step, rank)
        else:
            first = None
    return first


# -- the learning gate ---------------------------------------------------------------------------------------------


@dataclass
class Gate:
    learned: bool | None
    """None: nothing to judge (random initialisation, or a model whose pretraining run is not at hand)."""
    reasons: list[str] = field(default_factory=list)
    collapsed: bool = False
    """The discriminator learned (an earlier held-out AUC passed the gate) and then fell back under it, 0.05 or more
    below that peak: a collapse, not a run that never learned."""

    @property
    def word(self) -> str:
        """The verdict in a word or two, for figure legends."""
        if self.learned is None:
            return "not judged"
        return "learned" if self.learned else ("collapsed" if self.collapsed else "never learned")

    def describe(self) -> str:
        if self.learned is None:
            return "; ".join(self.reasons) or "not pretrained"
        head = "learned" if self.learned else ("COLLAPSED" if self.collapsed else "NEVER LEARNED")
        return f"{head}: " + "; ".join(self.reasons)


def held_out(rows: list[dict]) -> list[dict]:
    """The held-out evaluation rows of a run's metrics.jsonl lines (those with eval_* keys): what the gate reads."""
    return [r for r in rows if any(k.startswith("eval_") for k in r)]


def learning_gate(kind: str, evals: list[dict], objective: ObjectiveConfig | None = None) -> Gate:
    """Did pretraining leave the plateau? Judged on the last of `evals`, the run's held-out evaluation rows
    (metrics.jsonl lines with eval_* keys), for objective.kind `kind`; `objective` (the run's) words the collapse
    hint for a run that anneals its temperature already (`collapse_hint`)."""
    if not evals:
        return Gate(False, ["no held-out evaluation was logged"])
    last = evals[-1]
    acc, rate = last.get("eval_masked_accuracy"), last.get("eval_mlm_majority_rate")
    # the training text's token frequencies at those slots (runs before it was logged: the slots' own entropy,
    # a lower bound, so a stricter test)
    loss, unigram, baseline = last.get("eval_masked_loss"), last.get("eval_mlm_unigram_loss"), "token frequencies"
    if unigram is None:
        unigram, baseline = last.get("eval_mlm_unigram_entropy"), "the slots' own entropy"
    reasons, ok = [], True
    if acc is None or rate is None:
        ok = False
        reasons.append("held-out accuracy at [MASK] slots or most-frequent-token rate missing")
    else:
        by_accuracy = acc >= rate + GATE_MLM_MARGIN
        by_loss = loss is not None and unigram is not None and loss <= unigram - GATE_LOSS_MARGIN
        ok &= by_accuracy or by_loss
        said = f"MLM at [MASK]: accuracy {acc:.3f} vs most-frequent-token {rate:.3f}"
        if loss is not None and unigram is not None:
            said += f", loss {loss:.3f} vs {baseline} {unigram:.3f} nats"
        reasons.append(said + (" (beyond frequencies)" if by_accuracy or by_loss else " (token frequencies only)"))
    if kind == "electra":
        auc = last.get("eval_disc_auc")
        good = auc is not None and math.isfinite(auc) and auc > GATE_AUC
        ok &= good
        reasons.append(
            f"discriminator AUC {auc if auc is None else round(auc, 3)} {'>' if good else 'not >'} {GATE_AUC}"
        )
        peak = _auc_peak(evals)
        if not good and peak is not None and (auc is None or not auc > peak[1] - COLLAPSE_FALL):
            reasons.append(f"it had reached {peak[1]:.3f} at step {peak[0]:,}: the discriminator collapsed")
            return Gate(False, reasons, collapsed=True)
        flat = states_collapsed(evals) if not good else None
        if flat is not None:
            reasons.append(
                f"its last-layer token states collapsed to effective rank {flat[1]:.1f} by step {flat[0]:,} and stayed "
                f"there: one answer for every token; {collapse_hint(objective)}"
            )
    return Gate(ok, reasons)


def _auc_peak(evals: list[dict]) -> tuple[int, float] | None:
    """(step, AUC) of the best held-out AUC before the last evaluation, if it passed the gate."""
    best = max(
        ((r["step"], r["eval_disc_auc"]) for r in evals[:-1] if _finite(r.get("eval_disc_auc"))),
        key=lambda p: p[1],
        default=None,
    )
    return best if best is not None and best[1] > GATE_AUC else None


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)
