"""`make demo`: the whole pipeline on the built-in synthetic language, offline, on a CPU, in a few minutes.

1. pretrain the tiny preset (generator + discriminator) on the synthetic corpus;
2. fine-tune the pretrained discriminator on the synthetic GLUE-shaped tasks over two seeds, and the same
   architecture from random initialisation as the no-pretraining baseline;
3. print the pretraining metrics and both reports side by side.

The synthetic language proves the wiring and shows what pretraining buys on data it was made for; it says nothing
about English GLUE scores (see docs/data.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from electra.checkpoint import checkpoint_dir, save_model_checkpoint
from electra.config import load_config
from electra.model import ElectraForPretraining
from electra.pretraining import pretrain

SEEDS = [0, 1]


def demo(out: str | Path, max_steps: int | None = None) -> int:
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    overrides = [f"train.max_steps={max_steps}"] if max_steps else []
    cfg = load_config("tiny", overrides)

    print(f"== 1/3 pretraining the tiny preset on the built-in synthetic corpus ({cfg.train.max_steps} steps)")
    meta = pretrain(cfg, out / "pretrain")
    rows = [json.loads(line) for line in (out / "pretrain" / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "mlm_loss" in r]
    eval_rows = [r for r in rows if "eval_disc_auc" in r]
    print_pretraining(train_rows, eval_rows)
    if meta.collapsed:
        print("   The discriminator does not yet tell replaced from original tokens (recall ~0): a run this short has\n"
              "   not left the early plateau. Expect fine-tuning near the random-initialisation baseline.")

    print("== 2/3 fine-tuning on the synthetic tasks: pretrained vs. random initialisation")
    from electra.data.synthetic_tasks import write_synthetic_tasks
    from electra.glue.sweep import SweepSpec, run_sweep

    tasks = [str(p) for p in write_synthetic_tasks(out / "tasks")]
    scratch = out / "scratch"
    resolved = load_config(out / "pretrain" / "config.yaml")
    save_model_checkpoint(
        ElectraForPretraining(resolved.model, resolved.objective), resolved, checkpoint_dir(scratch, 0)
    )
    shutil.copytree(out / "pretrain" / "tokenizer", scratch / "tokenizer")
    for name, model in (("pretrained", out / "pretrain"), ("scratch", scratch)):
        # `electra glue`'s defaults: OFF's recipe
        spec = SweepSpec(out=str(out / f"glue-{name}"), model=str(model), tasks=tasks, seeds=SEEDS, progress=False)
        if not run_sweep(spec).ok:
            return 1

    print("== 3/3 results (dev, mean over seeds)")
    print_comparison(out / "glue-pretrained" / "results.json", out / "glue-scratch" / "results.json")
    print(f"\nEverything is in {out}/: pretrain/ (run folder, checkpoints, hf/ export), glue-*/ (reports).")
    return 0


def print_pretraining(train_rows: list[dict], eval_rows: list[dict]) -> None:
    keys = ["mlm_loss", "mlm_accuracy", "sampled_accuracy", "disc_loss", "disc_accuracy", "disc_precision",
            "disc_recall"]  # fmt: skip
    print("   step " + " ".join(f"{k:>16}" for k in keys))
    shown = train_rows[:: max(1, len(train_rows) // 6)]
    for r in shown + [r for r in train_rows[-1:] if r is not shown[-1]]:
        print(f"   {r['step']:>4} " + " ".join(_fmt(r.get(k)) for k in keys))
    if eval_rows:
        last = eval_rows[-1]
        auc, recall, mlm = (_fmt(last[f"eval_{k}"]).strip() for k in ("disc_auc", "disc_recall", "mlm_accuracy"))
        print(f"   held-out at step {last['step']}: disc AUC {auc}, recall {recall}, MLM accuracy {mlm}")


def print_comparison(pretrained: Path, scratch: Path) -> None:
    a, b = json.loads(pretrained.read_text()), json.loads(scratch.read_text())
    print(f"   {'task':<18} {'metric':<10} {'pretrained':>12} {'scratch':>12}")
    for task, entry in a["tasks"].items():
        for metric, stats in entry["metrics"].items():
            other = b["tasks"].get(task, {}).get("metrics", {}).get(metric, {})
            print(f"   {task:<18} {metric:<10} {_pm(stats):>12} {_pm(other):>12}")


def _fmt(v) -> str:
    return f"{v:16.4f}" if isinstance(v, (int, float)) else f"{'-':>16}"


def _pm(stats: dict) -> str:
    if not stats or stats.get("mean") is None:
        return "-"
    return f"{stats['mean']:.1f}±{stats.get('std') or 0:.1f}"
