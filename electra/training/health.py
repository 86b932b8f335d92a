"""The rules that say whether pretraining learned and whether the discriminator collapsed: the training loop's
collapse watch and the report's learning gate both read them."""

from __future__ import annotations

import math

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
(docs/results.md): 2.2-4 for collapsed discriminators, 30-90 for learning ones, at steps 250-3000."""
COLLAPSE_HINT = "--set objective.temperature_start=3 --set objective.temperature_steps=3000"
"""The one change most likely to help a discriminator whose states collapsed: easier replacements first (a sampling
temperature falling to 1), measured against warmup, generator lr, embedding sharing and the others (docs/results.md)."""


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
