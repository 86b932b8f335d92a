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
"""

import argparse
import json
import re
from pathlib import Path

from electra.report.results import Gate, task_stats
from electra.report.verdicts import compare

GATES = {
    "learned": Gate(True),
    "NEVER LEARNED": Gate(False),
    "COLLAPSED": Gate(False, collapsed=True),
    "not pretrained": Gate(None),
}


def side(spec: str) -> tuple[str, dict, Gate | None]:
    """`REPORT_DIR:MODEL` -> (model, its results.json entry, its learning-gate verdict)."""
    folder, _, model = spec.rpartition(":")
    folder = Path(folder)
    results = json.loads((folder / "results.json").read_text())
    settings = results["settings"]
    if model not in settings:
        raise SystemExit(f"{folder / 'results.json'}: no model {model!r} (it has {', '.join(settings)})")
    if "gates" in results:
        g = results["gates"][model]
        return model, settings[model], Gate(g["learned"], collapsed=g["collapsed"])
    return model, settings[model], summary_gate(folder / "report.md", model)


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
    p.add_argument("a", metavar="A_REPORT_DIR:MODEL")
    p.add_argument("b", metavar="B_REPORT_DIR:MODEL")
    p.add_argument("--tasks", default="sst2,mrpc,rte,wnli")
    args = p.parse_args()
    (a, ra, ga), (b, rb, gb) = side(args.a), side(args.b)
    tasks = args.tasks.split(",")
    for name, r in ((a, ra), (b, rb)):
        s = task_stats(r)
        print(
            f"{name}: "
            + ", ".join(f"{t} {s[t]['mean']:.1f} ± {s[t]['std']:.1f} (n {s[t]['n']})" for t in tasks if t in s)
        )
    c = compare(a, ra, b, rb, tasks, ga, gb)
    print(c.sentence(f"{a} better", f"{b} better"))


if __name__ == "__main__":
    main()
