"""Held-out evaluation: no autograd graph, and chunks of the micro-batch that add up to the whole batches."""

import contextlib
import math

import torch

from electra.config import load_config
from electra.data.pretraining_data import open_pretraining_data
from electra.modeling.electra import ElectraForPretraining
from electra.training.evaluation import evaluate

CPU = torch.device("cpu")


def _setup():
    cfg = load_config(
        "tiny", ["model.dropout=0.0", "model.attention_dropout=0.0", "train.batch_size=16", "train.eval_batches=2"]
    )
    data = open_pretraining_data(cfg.data, cfg.train.seed)
    torch.manual_seed(0)
    model = ElectraForPretraining(cfg.model, cfg.objective)
    return cfg, data, model


def test_evaluation_builds_no_graph_and_chunks_equal_whole_batches(monkeypatch):
    cfg, data, model = _setup()
    seen = []
    forward = model.forward

    def spy(*args, **kwargs):
        out = forward(*args, **kwargs)
        seen.append((args[0].shape[0], out.loss.requires_grad, out.loss.grad_fn, torch.is_inference(out.loss)))
        return out

    monkeypatch.setattr(model, "forward", spy)
    whole = evaluate(model, data.eval, cfg, data.tokens, CPU, contextlib.nullcontext(), train=data.train)
    assert [s[0] for s in seen] == [16, 16]
    assert all(not grad and fn is None and inference for _, grad, fn, inference in seen)
    seen.clear()
    chunked = evaluate(model, data.eval, cfg, data.tokens, CPU, contextlib.nullcontext(), train=data.train, chunk=6)
    assert [s[0] for s in seen] == [6, 6, 6, 6, 6, 2]  # 32 examples, 6 at a time: the same examples
    assert whole.keys() == chunked.keys() and len(whole) > 10
    for k, v in whole.items():
        assert math.isclose(v, chunked[k], rel_tol=1e-5, abs_tol=1e-6) or (math.isnan(v) and math.isnan(chunked[k])), k
    assert model.training  # restored
