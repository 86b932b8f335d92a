"""Rewrite Table 3 of a committed report.md whose run folders are gone, from its committed numbers: each row of
ours keeps its parameters, FLOPs and pfs-days (the exact pfs-days recovered from its old score / score per
pfs-day), and electra/report/tables.py's efficiency_table() redoes the score per pfs-day over the tasks above
chance level in results.json. Fine-tuning caps and `train.max_steps` changes are in sweep.json and run.json, which
are not committed: the rewritten tables mark neither.

    python scripts/rewrite_table3.py docs/results/wiki-cpu

Every other line of the report stays as committed."""

import json
import re
import sys
from pathlib import Path

from electra.report.results import at_chance, task_mean
from electra.report.tables import efficiency_table

folder = Path(sys.argv[1])
text = (folder / "report.md").read_text()
glue = json.loads((folder / "results.json").read_text())["settings"]
head, rest = text.split("### Table 3: efficiency", 1)
end = "Scores that average different tasks are not comparable with each other.\n"
old, tail = rest.split(end, 1)
points, baseline, average = [], None, ""
for line in old.splitlines():
    cells = [c.strip() for c in line.strip("|").split("|")]
    if len(cells) != 8 or cells[1] != "ours":
        continue
    average = cells[7]
    if cells[0] == "no pretraining":
        baseline = float(cells[5])
        continue
    tasks = re.match(r"mean over (.+) \(dev, medians over seeds\)", average).group(1).split(", ")
    results, score = glue[cells[0]], float(cells[5])
    mean = task_mean(results, tasks)
    assert f"{mean:.2f}" == cells[5], (cells[0], mean, cells[5])
    above = [t for t in tasks if not at_chance(results, t)]
    points.append(
        {
            "name": cells[0],
            "params": float(cells[2].rstrip("M")) * 1e6,
            "flops": float(cells[3]),
            "pfs_days": mean / float(cells[6].split()[0].replace(",", "")),
            "score": mean,
            "above_chance": above,
            "above_chance_score": task_mean(results, above) if above else None,
            "finetune_cap": None,
            "max_steps_changes": [],
        }
    )
table = "\n".join(efficiency_table(points, baseline, average, tasks))
(folder / "report.md").write_text(head + table.rstrip("\n") + "\n" + tail)
