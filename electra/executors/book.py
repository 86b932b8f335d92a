"""OUT/slurm/jobs.json: which SLURM job does each run, so that every run is submitted once.

    {"jobs": {"glue/rte/0": "812_0", ...},
     "intents": {"TOKEN": {"keys": ["glue/rte/0", ...], "name": "electra-out-glue", "since": 1733600000.0}}}

An intent is recorded before sbatch and replaced by the job ids once sbatch has answered; every job carries its
intent's token as its comment (sbatch --comment). A command killed between the two leaves the intent behind, and
the next one finds those jobs in the queue by their comment (`reconcile`) instead of submitting them again. The
book is read, changed and written only under the folder's lock (electra/executors/follow.py), so two commands
following one folder never submit a run twice. A jobs.json written before intents (a flat {key: id}) is read as
the jobs alone.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from electra.executors.queue import QueuedJob
from electra.utils.files import write_json


class JobBook:
    def __init__(self, folder: Path):
        self.path = Path(folder) / "jobs.json"
        raw = json.loads(self.path.read_text()) if self.path.exists() else {}
        if raw and not isinstance(raw.get("jobs"), dict):  # before intents: {key: id}
            raw = {"jobs": raw}
        self.jobs: dict[str, str] = dict(raw.get("jobs", {}))
        self.intents: dict[str, dict] = dict(raw.get("intents", {}))

    def save(self) -> None:
        write_json(self.path, {"jobs": self.jobs, "intents": self.intents})

    def intend(self, token: str, keys: list[str], name: str) -> None:
        """Record, before sbatch, that the jobs for `keys` (in array order) are being submitted as `token`."""
        self.intents[token] = {"keys": list(keys), "name": name, "since": time.time()}
        self.save()

    def record(self, token: str, ids: dict[str, str]) -> None:
        """The job ids sbatch gave the intent `token`: the intent is done."""
        self.jobs.update(ids)
        self.intents.pop(token, None)
        self.save()

    def reconcile(self, queue: dict[str, QueuedJob]) -> dict[str, str]:
        """Intents left by a command killed around sbatch, resolved from the queue: the jobs whose comment is an
        intent's token take their keys (array element i: the intent's i-th key). An intent with no job in the queue
        was never submitted, or its jobs already left (their results, or their absence, tell). Returns the ids found."""
        found: dict[str, str] = {}
        for token, intent in list(self.intents.items()):
            for job in queue.values():
                if job.comment != token:
                    continue
                _, sep, index = job.id.partition("_")
                position = int(index) if sep and index.isdigit() else 0
                if position < len(intent["keys"]):
                    found[intent["keys"][position]] = job.id
            del self.intents[token]
            self.jobs.update(found)
            self.save()
        return found
