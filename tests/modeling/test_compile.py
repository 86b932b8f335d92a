"""torch.compile(dynamic=False) captures the whole training forward (masking included) and its backward as one
graph each: no graph breaks, so nothing falls back to Python between kernels on a GPU.
"""

import os
import shutil

import pytest
import torch

from electra.config import load_config
from electra.modeling.electra import build_model
from electra.modeling.masking import mask_tokens
from electra.training.timing import synthetic_batch
from tests.helpers import MASK, SPECIAL

NO_DROPOUT = ["model.dropout=0.0", "model.attention_dropout=0.0"]  # compiled dropout draws other random numbers


def _setup(overrides=NO_DROPOUT):
    cfg = load_config("tiny", list(overrides))
    torch.manual_seed(0)
    model = build_model(cfg).train()

    def loss_fn(input_ids, attention_mask, token_type_ids, example_ids):  # masking + the model's forward
        masked = mask_tokens(
            input_ids, attention_mask, example_ids, cfg.train.seed, cfg.objective, cfg.num_mask_slots, MASK, SPECIAL
        )
        return model(input_ids, attention_mask, token_type_ids, masked).loss

    ids, mask, types = synthetic_batch(cfg.model.vocab_size, 4, cfg.data.seq_len, torch.device("cpu"))
    mask[1, -9:] = 0  # one padded row, so the attention mask is exercised
    return model, loss_fn, (ids, mask, types, torch.arange(4))


def _loss_and_grads(model, fn, batch):
    model.zero_grad(set_to_none=True)
    loss = fn(*batch)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize(
    "overrides",
    [NO_DROPOUT, [], [*NO_DROPOUT, "model.position_embedding=rotary"]],
    ids=["no-dropout", "dropout", "rotary"],
)
def test_training_forward_has_no_graph_breaks(overrides):
    torch._dynamo.reset()
    model, loss_fn, batch = _setup(overrides)
    explanation = torch._dynamo.explain(loss_fn)(*batch)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


@pytest.mark.slow
def test_fullgraph_forward_and_backward_equal_eager():
    """fullgraph=True raises on any graph break; AOTAutograd traces the backward as one graph too. aot_eager runs
    those graphs with eager kernels, so the numbers must equal eager's (inductor's C++ build takes minutes on a
    2-core CPU; `electra bench check` compares inductor with eager on the GPU)."""
    torch._dynamo.reset()
    model, loss_fn, batch = _setup()
    compiled = torch.compile(loss_fn, fullgraph=True, dynamic=False, backend="aot_eager")
    loss_c, grads_c = _loss_and_grads(model, compiled, batch)
    loss_e, grads_e = _loss_and_grads(model, loss_fn, batch)
    torch.testing.assert_close(loss_c, loss_e)
    for gc, ge in zip(grads_c, grads_e, strict=True):
        torch.testing.assert_close(gc, ge)


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("ELECTRA_TEST_INDUCTOR"),
    reason="inductor's C++ kernels take ~4 min to build on a 2-core CPU; set ELECTRA_TEST_INDUCTOR=1 to run",
)
@pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="no C compiler for inductor")
def test_inductor_matches_eager():
    torch._dynamo.reset()
    model, loss_fn, batch = _setup([*NO_DROPOUT, "model.num_layers=1"])
    compiled = torch.compile(loss_fn, fullgraph=True, dynamic=False)
    loss_c, grads_c = _loss_and_grads(model, compiled, batch)
    loss_e, grads_e = _loss_and_grads(model, loss_fn, batch)
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-5, atol=1e-5)
    for gc, ge in zip(grads_c, grads_e, strict=True):
        torch.testing.assert_close(gc, ge, rtol=1e-4, atol=1e-5)
