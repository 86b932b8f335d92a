"""`make demo`: the study at toy scale, on a CPU, offline, in about ten minutes.

Pretrains the `tiny` preset four ways at one budget of training FLOPs (ELECTRA at OFF's sampling temperature 1,
ELECTRA at temperature 3, the MLM baseline, and none: random initialisation), fine-tunes each on four tasks over
three seeds, writes the report with its figures, says in plain words what helped, and ends by printing the report
folder.

By default everything is built in: the synthetic language (electra/data/synthetic.py) and its GLUE-shaped tasks
(electra/data/synthetic_tasks.py), made so that what pretraining can learn from the corpus (synonyms, agreement,
who did what) is what the tasks need. That shows the machinery and what pretraining buys on data made for it; it
says nothing about English GLUE.

`--corpus FILE` pretrains on your text instead, with the `cpu` preset (tiny's encoder with rotary positions, the recipe
that leaves the token-frequency plateau on real English within minutes; docs/results.md) after training a 4096-token
WordPiece tokenizer on it: ELECTRA (the preset's temperature, 3 falling to OFF's 1), MLM and no pretraining at the FLOPs
of REAL_TEXT_STEPS ELECTRA steps, fine-tuned with the `cpu` recipe; `--glue-dir DIR` fine-tunes on the GLUE tasks SST-2,
MRPC, RTE and WNLI found there, each with its full schedule (SST-2's three epochs are 6,315 steps: at this size a
pretrained start pays off over random weights only with it; capped at 800 steps it lands within the seeds' spread of
them, docs/results.md). `--finetune-steps N` caps every run for a quicker look.

Why temperature 3 beside OFF's 1: at this size the generator's samples at temperature 1 are too hard for the
two-layer discriminator, which barely learns to detect them (held-out AUC ~0.65 after 2000 steps on the built-in
language); sampling at temperature 3 draws easier replacements and the discriminator learns (AUC ~0.85). Both are
shown; the report's gate says which pretraining runs learned.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from electra.config import load_config
from electra.data.prepare import prepare
from electra.data.synthetic_tasks import write_synthetic_tasks
from electra.data.tokenizer import train_tokenizer
from electra.glue.tasks import resolve_tasks
from electra.modeling.flops import off_train_flops
from electra.report.questions import answer_lines, questions
from electra.report.results import collect, common_tasks
from electra.report.seeds import models
from electra.report.verdicts import CONFIDENCE
from electra.study.grid import StudySpec, vocabulary_size
from electra.study.run import run_study
from electra.utils.wording import plural

ELECTRA_STEPS = 2000  # the budget: the FLOPs of this many steps of the ELECTRA setting; MLM gets more, cheaper steps
SEEDS = [0, 1, 2]
SETTINGS = [
    "electra:",  # OFF's recipe: sampling temperature 1
    "electra-T3:objective.temperature=3",  # easier replacements: the discriminator learns at this size
    "mlm:objective.kind=mlm",  # BERT's masked LM at the discriminator's size
    "none:objective.kind=none",  # random initialisation: the no-pretraining baseline
]
GLUE_TASKS = ("sst2", "mrpc", "rte", "wnli")
# real text (--corpus): the cpu preset and recipe, its temperature schedule included (3 falling to 1 over 3000
# steps: without it a discriminator deeper than the preset's collapses, docs/results.md)
REAL_TEXT_STEPS = 2700  # ~3 minutes of the cpu preset's ELECTRA on one thread; MLM's equal FLOPs are 4497 steps
REAL_TEXT_SETTINGS = ["electra:", "mlm:objective.kind=mlm", "none:objective.kind=none"]
REAL_TEXT_COMMAND = "electra demo --corpus TEXT.txt --glue-dir GLUE_DIR --out runs/demo-text"
PRETRAIN = ["train.eval_every=500", "train.log_every=100", "train.save_every=1000", "train.eval_batches=8"]


def demo(
    out: str | Path,
    corpus: str | None = None,
    glue_dir: str | None = None,
    electra_steps: int | None = None,
    seeds: list[int] | None = None,
    finetune_steps: int | None = None,
    progress: bool = True,
) -> Path:
    """Run the toy study into `out` (replaced if it exists); returns the report folder. `finetune_steps` caps each
    fine-tuning run (for quick checks; by default every task runs its full recipe)."""
    real = corpus is not None
    base, recipe, settings = ("cpu", "cpu", REAL_TEXT_SETTINGS) if real else ("tiny", "off", SETTINGS)
    electra_steps = electra_steps or (REAL_TEXT_STEPS if real else ELECTRA_STEPS)
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    data = _prepare_corpus(corpus, out) if corpus else None
    tasks = _tasks(glue_dir, out)
    cfg = load_config(base, [*PRETRAIN, f"model.vocab_size={vocabulary_size(data)}"])
    budget = off_train_flops(cfg, electra_steps)
    which = "ELECTRA (the cpu preset's temperature schedule)" if real else "ELECTRA (temperature 1 and 3)"
    print(
        f"== the study at toy scale ({base} preset): {which}, MLM and no pretraining, each pretrained for "
        f"{budget:.3g} training FLOPs ({plural(electra_steps, 'ELECTRA step')}), fine-tuned over "
        f"{plural(len(seeds or SEEDS), 'seed')} on {', '.join(Path(t).name for t in tasks.split(','))}",
        flush=True,
    )
    spec = StudySpec(
        out=str(out / "study"),
        base=base,
        overrides=PRETRAIN,
        settings=settings,
        budget=f"flops={budget!r}",
        data=data,
        tasks=tasks,
        glue_dir=glue_dir,
        seeds=list(seeds or SEEDS),
        parallel=2,
        recipe=recipe,
        finetune_overrides=[f"finetune.max_steps={finetune_steps}"] if finetune_steps else [],
        description="`make demo`: the study at toy scale (electra/study/demo.py).",
        progress=progress,
    )
    report = run_study(spec)
    print_verdict(Path(spec.out))
    print("\nThe report (report.md), its figures and results.json are in this folder:")
    print(report)
    if not real:
        print("\nOn your text (e.g. an English Wikipedia dump) and GLUE's SST-2, MRPC, RTE and WNLI (docs/results.md):")
        print(f"   .venv/bin/{REAL_TEXT_COMMAND}")
    return report


def _prepare_corpus(corpus: str, out: Path) -> str:

    print(f"== a WordPiece tokenizer (4096 tokens) and a prepared corpus from {corpus}", flush=True)
    train_tokenizer("wordpiece", 4096, [corpus], out / "tokenizer", show_progress=False)
    prepare([corpus], out / "tokenizer", out / "data", show_progress=False)
    return str(out / "data")


def _tasks(glue_dir: str | None, out: Path) -> str:
    """The GLUE tasks of SST-2, MRPC, RTE and WNLI that `glue_dir` holds, or the built-in synthetic tasks."""
    if glue_dir is None:
        return ",".join(str(p) for p in write_synthetic_tasks(out / "tasks"))

    specs, _ = resolve_tasks(["all"], glue_dir)
    found = [s.task.name for s in specs if s.task.name in GLUE_TASKS]
    if not found:
        raise FileNotFoundError(f"{glue_dir}: none of {', '.join(GLUE_TASKS)} found (original GLUE TSV layout)")
    return ",".join(found)


def print_verdict(study: Path) -> None:
    print("\n".join(verdict_lines(study)))


def verdict_lines(study: Path) -> list[str]:
    """What the report allows one to say, in plain words: the report's own verdicts (electra/report/questions.py),
    per task and pooled over the tasks that moved: whether each pretraining beat no pretraining and whether ELECTRA
    beat MLM, only where Welch's t-test finds the difference at the stated confidence, with at least 3 seeds a side
    (pretraining seeds, where the study has several), on tasks where the model that scores higher is above chance
    level, and never for a pretraining the gate rejects; with the gate's word where a pretraining run did not learn
    (never learned, or collapsed)."""
    entries, _ = collect([study])
    tasks = common_tasks(entries)
    helped, beats = questions(models(entries), tasks)
    lines = [
        f"\n== verdict at {CONFIDENCE:.0%} confidence (each task's mean over seeds, on "
        f"{', '.join(Path(t).name for t in tasks)})"
    ]
    for q in helped:
        said = [f"   {q.a.name}: {line}" for line in answer_lines(q)]
        verdict = q.a.judge()
        if verdict.learned is False:  # the gate's own word: a collapse is not a run that never learned
            said[-1] += f"; its pretraining {verdict.word} (" + "; ".join(verdict.reasons) + ")"
        lines += said
    for q in beats:
        lines += [f"   at equal FLOPs: {line}" for line in answer_lines(q)]
    return lines
