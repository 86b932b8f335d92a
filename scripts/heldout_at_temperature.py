"""The held-out evaluation of an ELECTRA run's checkpoints, with the generator sampling at a temperature of your
choice instead of the one the run's objective ends on.

    python scripts/heldout_at_temperature.py RUN [--temperature 1.0]     (a pretraining run folder)

A run whose recipe ends above temperature 1 (`objective.temperature`) is held out on its own, hotter and easier,
replacements (electra/training/evaluation.py samples at the objective's end point); this puts it on the same task
as runs ending at 1, on the same held-out sequences and masks. One JSON line per checkpoint: the discriminator's
AUC, recall and effective rank, and the generator's nats under token frequencies at the [MASK] slots.
"""

import argparse
import contextlib
import dataclasses
import json
from pathlib import Path

import torch

from electra.data.pretraining_data import open_pretraining_data
from electra.training.checkpoint import list_checkpoints, load_model_checkpoint
from electra.training.evaluation import evaluate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path)
    p.add_argument("--temperature", type=float, default=1.0)
    args = p.parse_args()
    checkpoints = list_checkpoints(args.run)
    if not checkpoints:
        raise SystemExit(f"{args.run}: no checkpoints")
    data, cpu = None, torch.device("cpu")
    for ckpt in checkpoints:
        model, cfg = load_model_checkpoint(ckpt)
        if cfg.objective.kind != "electra":
            raise SystemExit(f"{ckpt}: a {cfg.objective.kind} run has no generator samples to re-score")
        model.objective = dataclasses.replace(model.objective, temperature=args.temperature)
        if data is None:  # one run: one corpus for every checkpoint
            data = open_pretraining_data(cfg.data, cfg.train.seed)
        m = evaluate(model, data.eval, cfg, data.tokens, cpu, contextlib.nullcontext(), train=data.train)
        row = {
            "checkpoint": ckpt.name,
            "temperature": args.temperature,
            "disc_auc": round(m["disc_auc"], 4),
            "disc_recall": round(m["disc_recall"], 4),
            "disc_effective_rank": round(m["disc_effective_rank"], 2),
            "generator_nats_under_frequencies": round(m["mlm_unigram_loss"] - m["masked_loss"], 3),
        }
        print(json.dumps(row))


if __name__ == "__main__":
    main()
