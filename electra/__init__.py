"""ELECTRA pretraining and GLUE transfer on a small compute budget: the stage functions the `electra` commands
call, for notebooks and scripts (docs/api.md).

    import electra
    cfg = electra.load_config("tiny", ["train.max_steps=40"])
    electra.pretrain(cfg, "runs/tiny")
    electra.run_sweep(electra.SweepSpec(out="runs/glue", model="runs/tiny", tasks=["rte"], glue_dir="glue"))

Each name is imported on first use, so `import electra` itself loads neither torch nor the data libraries.
"""

from __future__ import annotations

import dataclasses
import importlib

API = {
    "train_tokenizer": "electra.data.tokenizer",
    "prepare": "electra.data.prepare",
    "load_config": "electra.config",
    "pretrain": "electra.training.loop",
    "load_finetune_config": "electra.config",
    "SweepSpec": "electra.glue.sweep",
    "run_sweep": "electra.glue.sweep",
    "write_report": "electra.report.write",
    "StudySpec": "electra.study.grid",
    "run_study": "electra.study.run",
    "export_run_to_hf": "electra.training.checkpoint",
    "import_run_from_hf": "electra.training.checkpoint",
    "from_hf": "electra.modeling.convert_hf",
    "to_hf": "electra.modeling.convert_hf",
}
"""Public name -> the module that defines it, in pipeline order."""

__all__ = list(API)


def __getattr__(name: str):
    if name not in API:
        raise AttributeError(f"module 'electra' has no attribute {name!r}")
    value = getattr(importlib.import_module(API[name]), name)
    if isinstance(value, type) and dataclasses.is_dataclass(value):  # SweepSpec, StudySpec: help() shows each field
        from electra.utils.fielddocs import document_fields

        document_fields(value)
    globals()[name] = value  # the next access is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *API})
