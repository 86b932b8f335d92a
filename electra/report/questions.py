"""The questions a report answers and its verdicts on them: did each pretraining help (against random weights of its
own study, corpus and shape), does ELECTRA beat MLM (within one study, at its one budget, so at equal FLOPs), and
for continued pretraining (`pretrain --init`), which continuation of one model did better (two settings of one
study that continued it: at equal continued FLOPs) and did continuing beat the model it started from (where that
run and its sweep are in the report).
Each is answered per task, with a pooled verdict only over the tasks that moved (electra/report/verdicts.py
`answer`). report.md, `electra study`'s last lines and the demo's read the same verdicts from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from electra.report.seeds import Model
from electra.report.verdicts import CONFIDENCE, MIN_SEEDS, Answer, answer

PRETRAINING = ("pretraining helped", "pretraining did NOT help")
OBJECTIVE = ("ELECTRA beats MLM", "ELECTRA does NOT beat MLM")


@dataclass
class Question:
    a: Model
    b: Model
    wins: tuple[str, str]
    """What is said when a is ahead at the stated confidence, and when b is."""
    answer: Answer


def baseline_for(m, models: list) -> Model | None:
    """The no-pretraining baseline model `m` is measured against: its own study's, else one pretrained on nothing but
    built from the same corpus (another study at another budget on the same prepared data), else the first; never
    random weights of another shape (a larger model's pretraining is not measured against a smaller model's random
    start), where both shapes are known. Works on models and on entries alike."""
    baselines = [
        b for b in models if b.baseline and _has_glue(b) and (None in (b.shape, m.shape) or b.shape == m.shape)
    ]
    same_study = [b for b in baselines if m.study is not None and b.study == m.study]
    same_data = [b for b in baselines if b.corpus is not None and b.corpus == m.corpus]
    return next(iter(same_study + same_data + baselines), None)


def _has_glue(m) -> bool:
    return (m.results if isinstance(m, Model) else m.glue) is not None


def electra_mlm_pairs(models: list[Model]) -> list[tuple[Model, Model]]:
    """(ELECTRA, MLM) pretrained and fine-tuned in one study: at its one budget, so at equal FLOPs (across
    studies they would not be). The objective is the pretraining run's, else the one its study recorded."""
    pretrained = [m for m in models if m.results and not m.baseline]
    electra = [m for m in pretrained if m.objective == "electra"]
    mlm = [m for m in pretrained if m.objective == "mlm"]
    return [(a, b) for a in electra for b in mlm if a.study == b.study]


def continuation_pairs(models: list[Model]) -> list[tuple[Model, Model]]:
    """(continued, other): two models of one study that continued the same model (run.json `init`, its weights'
    sha256), each pair once; and each continued model with the run it started from, where that is in the report."""
    pretrained = [m for m in models if m.results and not m.baseline]
    pairs = []
    for i, a in enumerate(pretrained):
        init = _init(a)
        if init is None:
            continue
        for b in pretrained[i + 1 :]:
            other = _init(b)
            if other is not None and a.study == b.study and other.get("sha256") == init.get("sha256"):
                pairs.append((a, b))
        pairs += [(a, b) for b in pretrained if b is not a and _started_from(init, b)]
    return pairs


def _init(m: Model) -> dict | None:
    """Where the model's pretraining started (run.json `init`), if it continued a model."""
    init = None if m.pretrain is None else m.pretrain.meta.get("init")
    return init if isinstance(init, dict) else None


def _started_from(init: dict, source: Model) -> bool:
    """Whether `init` names `source`'s run: its folder, or a checkpoint in it."""
    if source.pretrain is None or not init.get("path"):
        return False
    path, run = Path(init["path"]), source.pretrain.path.resolve()
    return path == run or path.parent.parent == run


def ask(a: Model, b: Model, tasks: list[str], wins: tuple[str, str]) -> Question:
    return Question(a, b, wins, answer(a.name, a.results, b.name, b.results, tasks, a.judge(), b.judge()))


def questions(models: list[Model], tasks: list[str]) -> tuple[list[Question], list[Question]]:
    """Each pretrained model against its baseline, each ELECTRA against the MLM of its study, and each continued
    model against the other continuations of its model in its study and against that model."""
    pretrained = [m for m in models if m.results and not m.baseline]
    helped = [(m, baseline_for(m, models)) for m in pretrained]
    helped = [ask(m, b, tasks, PRETRAINING) for m, b in helped if b is not None]
    beats = [ask(a, b, tasks, OBJECTIVE) for a, b in electra_mlm_pairs(models)]
    beats += [ask(a, b, tasks, continued(a, b)) for a, b in continuation_pairs(models)]
    return helped, beats


def continued(a: Model, b: Model) -> tuple[str, str]:
    """What is said of continuation `a` against `b`, another continuation of its model or the model itself."""
    return f"{a.name} beats {b.name}", f"{a.name} does NOT beat {b.name}"


def answer_lines(q: Question) -> list[str]:
    """The verdicts in words: one line per task (a task at chance level for the model that scores higher there
    is said to be left out), then the pooled verdict over the tasks that moved, or why none is given."""
    a_wins, b_wins = q.wins
    ans, lines = q.answer, []
    for c in ans.per_task:
        if c.at_chance and not c.tasks:
            lines.append(
                f"{c.a} vs {c.b} on {', '.join(c.at_chance)}: at chance level for the model that scores higher "
                "there: no verdict, and left out of any pooled one"
            )
        else:
            lines.append(c.sentence(a_wins, b_wins))
    left_out = f"; {', '.join(ans.left_out)} left out at chance level" if ans.left_out else ""
    if ans.pooled is not None:
        lines.append(f"pooled over the tasks that moved{left_out}: {ans.pooled.sentence(a_wins, b_wins)}")
    elif ans.withheld:
        lines.append(f"no pooled verdict over {', '.join(ans.moved)}{left_out}: {ans.withheld}")
    return lines


def verdict_section(grouped: list[Model], tasks: list[str]) -> list[str]:
    """report.md's verdicts: what the numbers allow one to say, per task, and a word on a baseline that beats
    pretraining. Each pretrained model is compared with its baseline, ELECTRA with MLM only within one study
    (at its one budget: across budgets the comparison would not be at equal FLOPs)."""
    helped, beats = questions(grouped, tasks)
    if not tasks or not (helped or beats):
        return []
    seeded = any(m.seeded for m in grouped)
    over = (
        f"; for models pretrained under several seeds, Welch's t over pretraining-seed means, at least {MIN_SEEDS} "
        "pretraining seeds a side"
        if seeded
        else ""
    )
    lines = [
        "",
        f"**Verdicts** at {CONFIDENCE:.0%} confidence (Welch's t-test on the difference of seed means, "
        f"at least {MIN_SEEDS} fine-tuning seeds a side{over}, on tasks where the model that scores higher is above "
        "chance level; never for a pretraining the gate rejects; per task, and pooled only over the tasks that "
        "moved where they agree; electra/report/verdicts.py):",
        "",
    ]
    beaten = []
    for q in [*helped, *beats]:
        lines += [f"- {line}." for line in answer_lines(q)]
        if q in helped and any(c.b_better for c in q.answer.verdicts):
            beaten.append(q.a.name)
    if beaten:
        lines += [
            "",
            f"**The no-pretraining baseline beats {', '.join(beaten)}.** Random weights fine-tune better than "
            "these pretrained ones on the tasks said above: at this budget pretraining has not yet learned what the "
            "tasks need, or has moved the weights somewhere fine-tuning finds harder to leave (see the gate column "
            "and the training dynamics). These numbers are evidence against this budget, not against the "
            "objective.",
        ]
    return lines
