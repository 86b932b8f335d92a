"""Compare a model of one committed report with a model of another, where the two studies' run folders are not
both at hand (so `electra report` cannot put them in one report): each side's per-task GLUE summary over seeds
and its learning-gate verdict from its report's results.json (from the Summary table of report.md for reports
written before results.json kept the gate), through
electra/report/verdicts.py's compare(), the test every report uses.

    python scripts/compare_reports.py A_REPORT_DIR:MODEL B_REPORT_DIR:MODEL [--tasks sst2,mrpc,rte,wnli]

e.g. a 4 x 128 ELECTRA pretrained on the fixed recipe against the masked LM and random weights of the earlier
study of the same shape, whose recipe the fix does not touch:

    python scripts/compare_reports.py runs/study-4x128-30m-T3/report:study-4x128-30m-T3/electra \\
        docs/results/wiki-cpu-budgets:study-4x128-30m/mlm

A model a study pretrained under several seeds (`--pretrain-seeds`) is named as its setting (`REPORT:electra`, its
runs in results.json's "pretrain_seeds"), and compared over its pretraining seeds as the report does. Sides joined
by `+` are one model's pretraining seeds from several reports: a study too long for one machine can run one
pretraining seed per study (`--set train.seed=K` and a folder of its own), each report committed as it finishes,
and be judged over all of them:

    python scripts/compare_reports.py r0:electra+r1:electra+r2:electra r0:mlm+r1:mlm+r2:mlm --tasks sst2,stsb
"""

import argparse
import json
import re
from pathlib import Path

from electra.report.results import Gate
from electra.report.seeds import nest
from electra.report.verdicts import compare_models

GATES = {
    "learned": Gate(True),
    "NEVER LEARNED": Gate(False),
    "COLLAPSED": Gate(False, collapsed=True),
    "not pretrained": Gate(None),
}


def sides(spec: str) -> tuple[str, list[dict], Gate | None]:
    """`REPORT_DIR:MODEL[+REPORT_DIR:MODEL...]` -> (the first model's name, the results.json entry of each
    pretraining seed of every part, the gate over all of them)."""
    parts = [side(part) for part in spec.split("+")]
    runs = [run for _, part_runs, _ in parts for run in part_runs]
    gates = [gate for _, _, gate in parts]
    return parts[0][0], runs, gates[0] if len(gates) == 1 else seeds_gate(gates)


def side(spec: str) -> tuple[str, list[dict], Gate | None]:
    """`REPORT_DIR:MODEL` -> (model, the results.json entry of each of its pretraining seeds, its learning-gate
    verdict)."""
    folder, _, model = spec.rpartition(":")
    folder = Path(folder)
    results = json.loads((folder / "results.json").read_text())
    settings, seeded = results["settings"], results.get("pretrain_seeds", {})
    runs = seeded[model]["runs"] if model in seeded else [model]
    if any(run not in settings for run in runs):
        raise SystemExit(f"{folder / 'results.json'}: no model {model!r} (it has {', '.join([*settings, *seeded])})")
    gates = [run_gate(results, folder, run) for run in runs]
    return model, [settings[run] for run in runs], gates[0] if len(gates) == 1 else seeds_gate(gates)


def run_gate(results: dict, folder: Path, run: str) -> Gate | None:
    if "gates" in results:
        g = results["gates"][run]
        return Gate(g["learned"], collapsed=g["collapsed"])
    return summary_gate(folder / "report.md", run)


def seeds_gate(gates: list[Gate | None]) -> Gate | None:
    """A model's gate over its pretraining seeds, as the report judges it: rejected if any seed's is."""
    rejected = [g for g in gates if g is not None and g.learned is False]
    if rejected:
        return Gate(False, collapsed=all(g.collapsed for g in rejected))
    return Gate(True) if all(g is not None and g.learned for g in gates) else None


def summary_gate(report: Path, model: str) -> Gate | None:
    """A model's gate as the Summary table of an older report.md words it."""
    gate = None
    for line in report.read_text().split("\n"):
        m = re.match(r"\| ([^|]+) \| [^|]+ \| (learned|NEVER LEARNED|COLLAPSED|not pretrained)", line)
        if m and m.group(1).strip() == model:
            gate = GATES[m.group(2)]
    return gate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", metavar="A_REPORT_DIR:MODEL[+...]")
    p.add_argument("b", metavar="B_REPORT_DIR:MODEL[+...]")
    p.add_argument("--tasks", default="sst2,mrpc,rte,wnli")
    args = p.parse_args()
    (a, ra, ga), (b, rb, gb) = sides(args.a), sides(args.b)
    tasks = args.tasks.split(",")
    for name, runs in ((a, ra), (b, rb)):
        nested = {t: nest(runs, t) for t in tasks}
        said = [_scores(t, n) for t, n in nested.items() if n is not None]
        print(f"{name}: " + ", ".join(said))
    c = compare_models(a, ra, b, rb, tasks, ga, gb)
    print(c.sentence(f"{a} better", f"{b} better"))


def _scores(task: str, n) -> str:
    """One task's mean ± std over seeds (n), or over pretraining seeds with several."""
    if len(n.means) == 1:
        return f"{task} {n.mean:.1f} ± {n.stds[0]:.1f} (n {n.ns[0]})"
    said = f"{task} {n.mean:.1f} ± {n.pretrain_std:.1f} ({len(n.means)} pretraining seeds × {min(n.ns)}"
    share = n.share.share if n.share is not None else None
    return said + (f"; the pretraining seed's share of the variance {share:.0%})" if share is not None else ")")


if __name__ == "__main__":
    main()
