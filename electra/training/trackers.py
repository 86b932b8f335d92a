"""Where metrics go: RUN/metrics.jsonl always, and TensorBoard or Weights & Biases when asked for."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

from electra.config import PretrainConfig, to_dict
from electra.utils.files import write_atomic

TRACKERS = ("tensorboard", "wandb")
"""Experiment trackers a run can also log to, beside its metrics.jsonl."""


def open_loggers(
    names: Sequence[str],
    run_dir: Path,
    cfg: PretrainConfig | dict,
    name: str | None = None,
    group: str | None = None,
    tensorboard_dir: Path | None = None,
    resumed_at: int | None = None,
) -> list:
    """One writer per tracker in `names`: TensorBoard event files in `tensorboard_dir` (default RUN/tensorboard),
    tagged with the metrics' names; a W&B run under RUN/wandb, offline unless WANDB_MODE says otherwise, with `cfg`
    as its config, called `name` (default: the run folder's name) in `group`.

    `resumed_at`: the step a pretraining run starts from (0 when fresh). An interrupted session may have logged
    past it, and those steps are logged again, so TensorBoard purges its events after that step (SummaryWriter's
    purge_step, as metrics.jsonl is trimmed), and W&B continues the folder's own W&B run (its id kept in
    RUN/wandb/run_id) instead of starting a second one."""
    check_trackers(names)
    config = cfg if isinstance(cfg, dict) else to_dict(cfg)
    writers: list = []
    try:
        for tracker in names:
            if tracker == "tensorboard":
                writers.append(_TensorBoard(Path(tensorboard_dir or run_dir / "tensorboard"), resumed_at))
            else:
                writers.append(_WandB(Path(run_dir), config, name or Path(run_dir).name, group, resumed_at))
    except BaseException:
        for w in writers:
            w.close()
        raise
    return writers


def check_trackers(names: Sequence[str]) -> None:
    """Refuse an unknown tracker, or one whose package is not installed, before any work starts."""
    import importlib.util

    for name in names:
        if name not in TRACKERS:
            raise ValueError(f"unknown tracker {name!r}: expected one of {list(TRACKERS)}")
        if importlib.util.find_spec(name) is None:
            raise ValueError(f"--{name} needs the {name} package: pip install 'electra[{name}]'")


def tracked_values(row: dict) -> dict[str, int | float]:
    """What a tracker records of a metrics row: its finite numbers (metrics.jsonl keeps the others, as null)."""
    return {
        k: v
        for k, v in row.items()
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


class _TensorBoard:
    def __init__(self, folder: Path, resumed_at: int | None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(folder), purge_step=None if resumed_at is None else resumed_at + 1)

    def log(self, row: dict) -> None:
        for k, v in tracked_values(row).items():
            self.writer.add_scalar(k, v, row["step"])

    def close(self) -> None:
        self.writer.close()


class _WandB:
    def __init__(self, run_dir: Path, config: dict, name: str, group: str | None, resumed_at: int | None):
        import wandb

        run_dir.mkdir(parents=True, exist_ok=True)
        id_file, run_id = run_dir / "wandb" / "run_id", None
        if resumed_at is not None and id_file.is_file():
            run_id = id_file.read_text().strip() or None
        self.run = wandb.init(
            dir=str(run_dir),
            config=config,
            name=name,
            group=group,
            id=run_id,
            resume="allow" if run_id else None,
            mode=os.environ.get("WANDB_MODE", "offline"),
        )
        if resumed_at is not None and run_id is None:
            write_atomic(id_file, self.run.id + "\n")

    def log(self, row: dict) -> None:
        self.run.log(tracked_values(row), step=row["step"])

    def close(self) -> None:
        self.run.finish()


def write_metrics(run_dir: Path, row: dict, writers: list) -> None:
    """Append one JSON line (undefined values such as precision with no positive prediction become null)."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write(json.dumps(clean) + "\n")
    for w in writers:
        w.log(row)
