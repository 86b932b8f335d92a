"""The no-pretraining baseline (objective.kind=none): the model a run of the same config starts from, written as a
step-0 run folder that `electra glue --model` fine-tunes and `electra report` measures models of its shape against.

The weights are exactly the first ones an ELECTRA run with the same config and seed trains from (the same seed
before the same constructor), so "pretraining vs none" compares one starting point with and without the training.
Its run.json says what wrote it, as a training run's does (the report's Table 1 reads it): the device the weights
were built on (this process's CPU), their precision (fp32: nothing was trained in another), the machine and the code
revision, in one session of 0 steps.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import torch

from electra.config import PretrainConfig
from electra.data.pretraining_data import PretrainingData, open_pretraining_data
from electra.modeling.electra import build_model
from electra.training.checkpoint import RunMeta, checkpoint_dir, list_checkpoints, save_model_checkpoint
from electra.training.resume import prepare_run_dir
from electra.utils.files import folder_lock, write_atomic
from electra.utils.machine import describe_machine
from electra.utils.revision import code_revision
from electra.utils.wording import argument

log = logging.getLogger("electra.pretrain")


def write_initialised_run(
    cfg: PretrainConfig, run_dir: str | Path, resume: str | None = None, data: PretrainingData | None = None
) -> RunMeta:
    """Write `cfg`'s freshly initialised model into `run_dir` as a finished step-0 run (config, tokenizer, the
    step-0 checkpoint, run.json); no training, no FLOPs. A folder that already holds this baseline is left as it
    is with resume="auto"; one that holds anything else's checkpoints is refused."""
    run_dir = Path(run_dir)
    with folder_lock(run_dir, "pretraining run"):
        if list_checkpoints(run_dir):
            if resume is None:
                raise ValueError(
                    f"{run_dir} already holds checkpoints: pass {argument('resume', 'auto')} to continue, or another "
                    f"{argument('run_dir')}"
                )
            meta = RunMeta.from_json((run_dir / "run.json").read_text())
            if meta.step != 0:
                raise ValueError(f"{run_dir} holds a run trained to step {meta.step}, not a no-pretraining baseline")
            return meta
        data = data if data is not None else open_pretraining_data(cfg.data, cfg.train.seed)
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=data.tokens.vocab_size))
        meta = initialised_meta()
        prepare_run_dir(run_dir, cfg, data.tokens, meta)
        torch.manual_seed(cfg.train.seed)  # as the training loop seeds rank 0 before it builds its model
        save_model_checkpoint(build_model(cfg), cfg, checkpoint_dir(run_dir, 0))
        meta.finished = True  # the step-0 checkpoint is the whole run
        write_atomic(run_dir / "run.json", meta.to_json())
    log.info(
        "objective.kind=none: wrote the initialised model as a step-0 run in %s (no training, 0 FLOPs): "
        "the no-pretraining baseline of its shape for `electra glue --model %s` and `electra report`",
        run_dir,
        run_dir,
    )
    return meta


def initialised_meta() -> RunMeta:
    """run.json of a step-0 run: built on this process's CPU in fp32, by this code, in one session of no steps."""
    cpu = torch.device("cpu")
    session = {
        "device": cpu.type,
        "machine": describe_machine(cpu),
        "threads": torch.get_num_threads(),
        "world_size": 1,
        "start_step": 0,
        "start_seconds": 0.0,
        "max_steps": 0,
    }
    return RunMeta(
        code_revision=code_revision(),
        device=cpu.type,
        sessions=[session],
        precision="fp32",
        precision_reason="no training: the initialised weights as built",
        tf32=False,
    )
