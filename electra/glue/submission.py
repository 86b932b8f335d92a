"""Test-set predictions in the GLUE server format (gluebenchmark.com) and a zip ready to upload.

Each run with `--predict-test` leaves `test_<FILE>` beside its result; per task, the seed with the best dev score
(its main metric) is submitted. The server expects all eleven files; the ones not produced are reported.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

from electra.glue.tasks import GLUE_TASKS, TASKS
from electra.utils.files import write_atomic

SUBMISSION_FILES = (
    "CoLA.tsv",
    "SST-2.tsv",
    "MRPC.tsv",
    "STS-B.tsv",
    "QQP.tsv",
    "MNLI-m.tsv",
    "MNLI-mm.tsv",
    "QNLI.tsv",
    "RTE.tsv",
    "WNLI.tsv",
    "AX.tsv",
)


def write_submission(out: Path, records: list[dict], run_dir_of) -> tuple[Path | None, list[str]]:
    """Copy the chosen runs' prediction files into OUT/submission/ and zip them as OUT/glue_submission.zip.

    `run_dir_of(task, seed)` gives a run's folder. Returns the zip (None if nothing was predicted) and the
    server files still missing.
    """
    folder = out / "submission"
    chosen = {}
    for task in GLUE_TASKS:
        runs = [r for r in records if r["task"] == task and r.get("test_predictions")]
        if not runs:
            continue
        main = TASKS[task].main_metric
        best = max(runs, key=lambda r: (r["metrics"][main], -r["seed"]))  # ties: the lowest seed
        for name, file in best["test_predictions"].items():
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(run_dir_of(task, best["seed"]) / file, folder / name)
            chosen[name] = {"task": task, "seed": best["seed"], "dev": {main: best["metrics"][main]}}
    missing = [name for name in SUBMISSION_FILES if name not in chosen]
    if not chosen:
        return None, missing
    write_atomic(out / "submission.json", json.dumps({"files": chosen, "missing": missing}, indent=1) + "\n")
    zip_path = out / "glue_submission.zip"
    tmp = zip_path.with_name(f".{zip_path.name}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name in SUBMISSION_FILES:
            if name in chosen:
                z.write(folder / name, arcname=name)  # at the zip's root, as the server wants
    tmp.replace(zip_path)
    return zip_path, missing
