"""Held-out evaluation (training/evaluation.py): no autograd graph, and the same numbers in any chunking."""

import contextlib
import math

import torch

from electra.config import load_config
from electra.data.pretraining_data import open_pretraining_data
from electra.modeling.electra import build_model
from electra.training.evaluation import evaluate


def _setup():
    cfg = load_config("tiny", ["train.batch_size=16", "train.eval_batches=3"])
    data = open_pretraining_data(cfg.data, cfg.train.seed)
    torch.manual_seed(0)
    model = build_model(cfg).train()
    return cfg, data, model


def test_evaluation_builds_no_graph_and_leaves_the_model_in_training_mode():
    cfg, data, model = _setup()
    seen = []
    forward = model.forward

    def recording(*args, **kwargs):
        out = forward(*args, **kwargs)
        seen.append((torch.is_grad_enabled(), out.disc_logits.requires_grad, model.training))
        return out

    model.forward = recording
    evaluate(model, data.eval, cfg, data.tokens, torch.device("cpu"), contextlib.nullcontext())
    assert seen and all(s == (False, False, False) for s in seen), seen
    assert model.training


def test_evaluation_in_chunks_of_the_micro_batch_gives_the_same_numbers():
    """16 sequences a held-out batch in passes of 16, 5 (5 + 5 + 5 + 1: a chunk never crosses a batch) and 4."""
    cfg, data, model = _setup()
    dev, amp = torch.device("cpu"), contextlib.nullcontext()
    whole = evaluate(model, data.eval, cfg, data.tokens, dev, amp, train=data.train)
    forward, rows = model.forward, []
    model.forward = lambda input_ids, *a, **k: rows.append(len(input_ids)) or forward(input_ids, *a, **k)
    for chunk in (5, 4):
        rows.clear()
        parts = evaluate(model, data.eval, cfg, data.tokens, dev, amp, train=data.train, chunk=chunk)
        assert rows == ([5, 5, 5, 1] if chunk == 5 else [4] * 4) * 3, rows  # the micro-batch bounds every pass
        assert parts.keys() == whole.keys()
        for k, v in whole.items():
            assert math.isclose(parts[k], v, rel_tol=1e-5, abs_tol=1e-7) or (math.isnan(v) and math.isnan(parts[k])), (
                chunk,
                k,
                parts[k],
                v,
            )
