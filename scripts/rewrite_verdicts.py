"""Rewrite the verdict lines of a committed report.md whose run folders are gone, from its committed numbers:
results.json's per-model GLUE summaries and the gate column of its Summary table, with electra/report/verdicts.py's
compare(). The models compared (each with its baseline, ELECTRA with MLM) are read from the old verdict lines.

    python scripts/rewrite_verdicts.py docs/results/wiki-cpu

(docs/results/wiki-cpu's runs are not in the repository: `electra report` cannot draw it again, so only its verdict
lines are rewritten; every other line stays as committed.)"""

import json
import re
import sys
from pathlib import Path

from electra.report.results import Gate
from electra.report.verdicts import CONFIDENCE, MIN_SEEDS, compare

folder = Path(sys.argv[1])
text = (folder / "report.md").read_text()
glue = json.loads((folder / "results.json").read_text())["settings"]
lines = text.split("\n")
gates = {}
for line in lines:
    m = re.match(r"\| ([^|]+) \| [^|]+ \| (learned|NEVER LEARNED|COLLAPSED|not pretrained)", line)
    if m:
        name, head = m.group(1), m.group(2)
        gates[name] = {
            "learned": Gate(True),
            "NEVER LEARNED": Gate(False),
            "COLLAPSED": Gate(False, collapsed=True),
            "not pretrained": Gate(None),
        }[head]
tasks = re.search(r"## Summary: mean over (.+) \(each task's median over seeds\)", text).group(1).split(", ")
pair = re.compile(r"- (?:[^:]+: )?(\S+) [+-][\d.]+ points vs (\S+) on ")
out = []
for line in lines:
    if line.startswith("**Verdicts**"):
        line = (
            f"**Verdicts** at {CONFIDENCE:.0%} confidence (Welch's t-test on the difference of seed means, at "
            f"least {MIN_SEEDS} fine-tuning seeds a side, on tasks where the model that scores higher is above "
            "chance level; never for a pretraining the gate rejects; electra/report/verdicts.py):"
        )
    m = pair.match(line)
    if m:
        a, b = m.group(1), m.group(2)
        c = compare(a, glue[a], b, glue[b], tasks, gates[a], gates[b])
        mlm = "MLM" in line
        words = (
            ("ELECTRA beats MLM", "ELECTRA does NOT beat MLM")
            if mlm
            else ("pretraining helped", "pretraining did NOT help")
        )
        line = f"- {c.sentence(*words)}."
    out.append(line)
(folder / "report.md").write_text("\n".join(out))
