"""Heads and their initialisation, export to transformers, layer-wise lr decay and the schedule, and that the loop
learns a learnable task."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from electra.config import FinetuneConfig
from electra.glue.features import collate, encode
from electra.glue.finetune import finetune, load_pretrained, predict, prepare
from electra.glue.heads import HEADS, GlueModel, build_model, export_hf
from electra.glue.loading import Example, load_task
from electra.glue.optim import depth_exponent, param_groups, set_learning_rates
from electra.glue.tasks import TASKS, resolve_tasks
from electra.modeling.electra import ElectraModel
from tests.glue_fixtures import make_run, make_tokenizer, write_custom_task
from tests.helpers import glue_model_config


def _model(head: str, num_outputs: int = 2, **sizes) -> GlueModel:
    cfg = glue_model_config(**sizes)
    return GlueModel(ElectraModel(cfg), cfg, head, num_outputs).eval()


def _batch(tmp_path):
    tok = make_tokenizer(tmp_path / "tok")
    ex = [
        Example("the film was wonderful .", "a dog ?", 1, "0"),
        Example("cat .", None, 0, "1"),
        Example("a man and a woman in the city at night .", "the river .", 0, "2"),
    ]
    f = encode(ex, tok, 64)
    return f, collate(f, np.arange(len(ex)))


def test_heads_compute_what_they_claim(tmp_path):
    f, b = _batch(tmp_path)
    args = (b["input_ids"], b["attention_mask"], b["token_type_ids"])
    for head in HEADS:
        model = _model(head)
        h = model.electra(*args)  # (B, T, H)
        c = model.classifier
        if head == "cls-linear":
            expected = c.out_proj(h[:, 0])
        elif head == "mean-mlp":
            m = b["attention_mask"][..., None].float()
            expected = c.out_proj(F.gelu(c.dense((h * m).sum(1) / m.sum(1))))
        else:
            expected = c.out_proj(F.gelu(c.dense(h[:, 0])))
        torch.testing.assert_close(model(*args), expected)
        # padding invariance: each example alone gives the logits it gets inside the padded batch
        for i in range(len(f)):
            alone = collate(f, np.array([i]))
            out = model(alone["input_ids"], alone["attention_mask"], alone["token_type_ids"])
            torch.testing.assert_close(out[0], model(*args)[i], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("task", ["rte", "stsb"])
def test_hf_head_exports_to_electra_for_sequence_classification(tmp_path, task):
    from transformers import ElectraForSequenceClassification

    f, b = _batch(tmp_path)
    model = _model("hf", TASKS[task].num_outputs)
    out = export_hf(model, TASKS[task], tmp_path / "hf", tmp_path / "tok")
    hf = ElectraForSequenceClassification.from_pretrained(out).eval()
    assert hf.config.num_labels == TASKS[task].num_outputs
    if task == "rte":
        assert hf.config.id2label == {0: "entailment", 1: "not_entailment"}
    else:
        assert hf.config.problem_type == "regression"
    ref = hf(input_ids=b["input_ids"], attention_mask=b["attention_mask"], token_type_ids=b["token_type_ids"]).logits
    torch.testing.assert_close(model(b["input_ids"], b["attention_mask"], b["token_type_ids"]), ref)
    with pytest.raises(ValueError, match="only the hf head"):
        export_hf(_model("cls-linear"), TASKS[task], tmp_path / "x")


def _expected_exponent(name: str, L: int, convention: str) -> int:
    """The three conventions written out (d^k; the head has k = 0)."""
    if name.startswith("classifier."):
        return 0
    emb = name.startswith(("electra.embeddings.", "electra.embeddings_project."))
    i = None if emb else int(name.split(".")[3])
    if convention == "paper":  # head lr, top layer lr*d, ..., layer 0 lr*d^L, embeddings lr*d^(L+1)
        return L + 1 if emb else L - i
    if convention == "original":  # OFF's code: one step lower (top layer d^2, embeddings d^(L+2))
        return L + 2 if emb else L + 1 - i
    return L - 1 if emb else L - 1 - i  # study: top layer lr, embeddings = layer 0 = lr*d^(L-1)


@pytest.mark.parametrize("convention", ["paper", "original", "study"])
def test_layerwise_lr_of_every_parameter_group(convention):
    model = _model("mean-mlp", layers=3)  # embedding 16 != hidden 32: embeddings_project exists
    assert any(n.startswith("electra.embeddings_project.") for n, _ in model.named_parameters())
    lr, d, L = 3e-4, 0.8, 3
    groups = param_groups(model, lr, d, L, convention, weight_decay=0.01)
    names = [n for g in groups for n in g["names"]]
    assert sorted(names) == sorted(n for n, _ in model.named_parameters())  # each parameter exactly once
    optimizer = torch.optim.AdamW(groups)
    for group in optimizer.param_groups:
        for name in group["names"]:
            assert group["lr"] == pytest.approx(lr * d ** _expected_exponent(name, L, convention), rel=1e-12)
            no_decay = "LayerNorm" in name or name.endswith("bias")
            assert group["weight_decay"] == (0.0 if no_decay else 0.01), name
    everything = param_groups(model, lr, d, L, convention, 0.01, decay_norm_and_bias=True)
    assert {g["weight_decay"] for g in everything} == {0.01}


def test_depth_conventions_for_electra_small():
    """L = 12, d = 0.8: the paper's intent, OFF's code (google-research/electra#51), the study."""
    rates = {}
    for c in ("paper", "original", "study"):
        rates[c] = {
            part: 0.8 ** depth_exponent(name, 12, c)
            for part, name in [
                ("head", "classifier.out_proj.weight"),
                ("top", "electra.encoder.layer.11.output.dense.weight"),
                ("layer0", "electra.encoder.layer.0.output.dense.weight"),
                ("emb", "electra.embeddings.word_embeddings.weight"),
                ("proj", "electra.embeddings_project.weight"),
            ]
        }
    assert rates["paper"] == pytest.approx({"head": 1, "top": 0.8, "layer0": 0.8**12, "emb": 0.8**13, "proj": 0.8**13})
    assert rates["original"] == pytest.approx(
        {"head": 1, "top": 0.64, "layer0": 0.8**13, "emb": 0.8**14, "proj": 0.8**14}
    )
    assert rates["study"] == pytest.approx({"head": 1, "top": 1, "layer0": 0.8**11, "emb": 0.8**11, "proj": 0.8**11})


@pytest.mark.parametrize("schedule", ["original", "study"])
def test_every_group_follows_the_schedule_from_its_own_peak(schedule):
    """original (OFF): decay from step 0 times the warmup ramp; study: warmup, then decay. Fractional warmup (OFF
    does not round num_train_steps * warmup_proportion)."""
    model = _model("cls-linear")
    optimizer = torch.optim.AdamW(param_groups(model, 1e-3, 0.8, 2, "original"))
    total, warmup = 100, 12.5
    expected = {
        "original": {0: 0.0, 5: 0.95 * 5 / 12.5, 12: 0.88 * 12 / 12.5, 13: 0.87, 55: 0.45, 99: 0.01},
        "study": {0: 0.0, 5: 5 / 12.5, 12: 12 / 12.5, 13: 87 / 87.5, 55: 45 / 87.5, 99: 1 / 87.5},
    }[schedule]
    for step, factor in expected.items():
        set_learning_rates(optimizer, step, total, warmup, schedule)
        for group in optimizer.param_groups:
            assert group["lr"] == pytest.approx(1e-3 * 0.8 ** group["depth"] * factor, rel=1e-12, abs=1e-18)


def test_head_initialisation():
    """glorot_uniform (OFF: tf.layers.dense without an initializer gets TF's Glorot uniform): U(-a, a) with
    a = sqrt(6 / (fan_in + fan_out)); normal: normal(0, initializer_range). Biases 0."""
    cfg = glue_model_config(hidden=256, layers=1)
    weights = {}
    for init in ("glorot_uniform", "normal"):
        torch.manual_seed(0)
        weights[init] = GlueModel(ElectraModel(cfg), cfg, "hf", 3, init).classifier
        assert all(float(lin.bias.detach().abs().max()) == 0 for lin in (weights[init].dense, weights[init].out_proj))
    for name, (fan_in, fan_out) in {"dense": (256, 256), "out_proj": (256, 3)}.items():
        a = (6 / (fan_in + fan_out)) ** 0.5
        w = getattr(weights["glorot_uniform"], name).weight.detach()
        assert float(w.abs().max()) <= a and float(w.std()) == pytest.approx(a / 3**0.5, rel=0.1)
        assert float(getattr(weights["normal"], name).weight.detach().std()) == pytest.approx(0.02, rel=0.1)


@pytest.mark.parametrize("head", HEADS)
def test_every_parameter_receives_a_gradient(tmp_path, head):
    f, b = _batch(tmp_path)
    model = _model(head).train()
    loss = F.cross_entropy(model(b["input_ids"], b["attention_mask"], b["token_type_ids"]), b["labels"])
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("run") / "run")


def test_finetuning_learns_a_learnable_task(tmp_path, run):
    """The signal-word task goes from chance to high dev accuracy in a few hundred steps, seed-deterministic."""
    specs, _ = resolve_tasks(str(write_custom_task(tmp_path, n_train=256, n_dev=64)), None)
    pre = load_pretrained(str(run))
    cfg = FinetuneConfig(lr=2e-3, layer_decay=0.8, batch_size=16, epochs=8)  # OFF's recipe otherwise
    prep = prepare(load_task(specs[0]), pre.tokenizer, cfg)
    first = finetune(prep, pre, cfg, seed=0, device=torch.device("cpu"), run_dir=tmp_path, progress=False)
    assert first["steps"] == 8 * 16 and first["warmup_steps"] == pytest.approx(12.8)
    assert first["metrics"]["accuracy"] >= 90 and first["metrics"]["mcc"] >= 80, first["metrics"]
    assert not first["chance"]["at_chance"] and first["loss_end"] < 0.5 * first["loss_start"]
    short = FinetuneConfig(lr=2e-3, batch_size=16, epochs=8, max_steps=5)
    again = [
        finetune(prep, pre, short, seed=3, device=torch.device("cpu"), run_dir=tmp_path, progress=False)
        for _ in range(2)
    ]
    assert again[0]["steps"] == 5 and again[0]["metrics"] == again[1]["metrics"]
    assert again[0]["loss_end"] == again[1]["loss_end"]


@pytest.mark.parametrize("steps", [10, 16])
def test_a_runs_first_and_last_loss_average_different_steps(tmp_path, run, monkeypatch, steps):
    """loss_start / loss_end average the first and last 10 steps, at most half the run each: a 10-step run (the
    API example's) printed "loss 1.149 -> 1.149", one mean of the same 10 steps, though its loss moved."""
    from electra.glue import finetune as finetune_module

    seen, train_step = [], finetune_module.train_step

    def recorded(*args, **kwargs):  # each step's loss, as the loop sees it
        loss = train_step(*args, **kwargs)
        seen.append(float(loss))
        return loss

    monkeypatch.setattr(finetune_module, "train_step", recorded)
    specs, _ = resolve_tasks(str(write_custom_task(tmp_path)), None)
    pre = load_pretrained(str(run))
    cfg = FinetuneConfig(lr=2e-3, max_steps=steps, batch_size=8)
    r = finetune(prepare(load_task(specs[0]), pre.tokenizer, cfg), pre, cfg, 0, torch.device("cpu"), tmp_path, False)
    window = min(10, steps // 2)
    assert r["steps"] == len(seen) == steps
    assert r["loss_start"] == pytest.approx(np.mean(seen[:window]))
    assert r["loss_end"] == pytest.approx(np.mean(seen[-window:]))
    assert r["loss_start"] != r["loss_end"]


def test_a_non_finite_loss_stops_fine_tuning_naming_the_step(tmp_path, run):
    specs, _ = resolve_tasks(str(write_custom_task(tmp_path)), None)
    pre = load_pretrained(str(run))
    pre.body_state["embeddings.LayerNorm.weight"][0] = float("nan")  # every loss is NaN from the first step
    cfg = FinetuneConfig(max_steps=25, batch_size=8)
    prep = prepare(load_task(specs[0]), pre.tokenizer, cfg)
    with pytest.raises(FloatingPointError, match="loss is nan at step 0$"):
        finetune(prep, pre, cfg, seed=0, device=torch.device("cpu"), run_dir=tmp_path, progress=False)


def test_fine_tuning_turns_tf32_on_for_its_device_as_pretraining_does(tmp_path, run, monkeypatch):
    """TF32 for every fp32 path on Ampere and later (training/precision.py `enable_tf32`), fine-tuning's included."""
    from electra.training import precision as devices

    asked = []
    monkeypatch.setattr(devices, "enable_tf32", lambda device, on: asked.append((device, on)) or on)
    specs, _ = resolve_tasks(str(write_custom_task(tmp_path)), None)
    pre = load_pretrained(str(run))
    cfg = FinetuneConfig(max_steps=1, batch_size=8, tf32=False)  # finetune.tf32 reaches enable_tf32
    record = finetune(
        prepare(load_task(specs[0]), pre.tokenizer, cfg), pre, cfg, 0, torch.device("cpu"), tmp_path, False
    )
    assert asked == [(torch.device("cpu"), False)]
    assert record["tf32"] is False and record["precision"] == "fp32" and record["precision_reason"] == "asked for"


def test_predictions_come_back_in_example_order(tmp_path):
    f, _ = _batch(tmp_path)
    model = _model("cls-linear")
    cfg = FinetuneConfig(eval_batch_size=2)  # batches sorted by length: [2, 0], [1]
    out = predict(model, f, cfg, torch.device("cpu"))
    for i in range(len(f)):
        alone = collate(f, np.array([i]))
        ref = model(alone["input_ids"], alone["attention_mask"], alone["token_type_ids"])[0]
        np.testing.assert_allclose(out[i], ref.detach().numpy(), atol=1e-5)


def test_starting_points_give_the_same_model_and_the_same_run(tmp_path, run):
    """A run folder, its checkpoint, our HF export and a transformers ElectraForPreTraining folder are all
    accepted; the same weights give the same body and bit-identical fine-tuning results."""
    import shutil

    from transformers import ElectraConfig, ElectraForPreTraining

    from electra.modeling.convert_hf import hf_config, to_hf
    from electra.training.checkpoint import checkpoint_dir, load_pretraining_model

    model, cfg = load_pretraining_model(run)
    to_hf(model, tmp_path / "export", run / "tokenizer")
    hf = ElectraForPreTraining(ElectraConfig(**hf_config(cfg.model, "discriminator")))
    hf.save_pretrained(tmp_path / "google-style")
    shutil.copy(run / "tokenizer" / "tokenizer.json", tmp_path / "google-style" / "tokenizer.json")

    sources = [run, checkpoint_dir(run, 0), tmp_path / "export"]
    loaded = [load_pretrained(str(p)) for p in sources]
    for pre in loaded[1:]:
        assert pre.body_state.keys() == loaded[0].body_state.keys()
        assert all(torch.equal(pre.body_state[k], loaded[0].body_state[k]) for k in pre.body_state)
    google = load_pretrained(str(tmp_path / "google-style"))
    hf_state = hf.electra.state_dict()
    assert all(torch.equal(google.body_state[k], hf_state[k]) for k in google.body_state)

    specs, _ = resolve_tasks(str(write_custom_task(tmp_path)), None)
    cfg_ft = FinetuneConfig(max_steps=4, batch_size=8)
    data = load_task(specs[0])
    results = [
        finetune(prepare(data, pre.tokenizer, cfg_ft), pre, cfg_ft, 0, torch.device("cpu"), tmp_path, False)
        for pre in loaded
    ]
    assert all(r["metrics"] == results[0]["metrics"] and r["loss_end"] == results[0]["loss_end"] for r in results)


def test_stsb_target_scaling_and_swapped_pairs(tmp_path, run, monkeypatch):
    from electra.glue import finetune as finetune_module
    from tests.glue_fixtures import write_glue

    def zero_head(*args, **kwargs):  # outputs exactly 0: the first loss is the mean squared (scaled) target
        model = build_model(*args, **kwargs)
        for p in model.classifier.parameters():
            torch.nn.init.zeros_(p)
        return model

    monkeypatch.setattr(finetune_module, "build_model", zero_head)
    glue = write_glue(tmp_path / "glue")
    pre = load_pretrained(str(run))
    specs, _ = resolve_tasks("stsb,mrpc", glue)
    stsb, mrpc = (load_task(s) for s in specs)
    losses = {}
    for scale in (True, False):  # the first loss is measured before any update: same outputs, other targets
        cfg = FinetuneConfig(max_steps=1, scale_targets=scale)
        r = finetune(prepare(stsb, pre.tokenizer, cfg), pre, cfg, 0, torch.device("cpu"), tmp_path, False)
        losses[scale] = r["loss_start"]
    assert losses[False] / losses[True] == pytest.approx(5**2, rel=1e-5)  # OFF trains on score / 5
    swapped = prepare(mrpc, pre.tokenizer, FinetuneConfig())  # on by default (OFF double_unordered)
    assert len(swapped.train) == 2 * mrpc.n_train == 64
    pair = encode([Example(mrpc.train[0].text_b, mrpc.train[0].text_a, 0, "0")], pre.tokenizer, 128)
    assert swapped.train.input_ids[32].tolist() == pair.input_ids[0].tolist()  # B and A exchanged
    assert len(prepare(stsb, pre.tokenizer, FinetuneConfig(swap_pairs=False)).train) == 32
    rte = load_task(resolve_tasks("rte", glue)[0][0])
    assert len(prepare(rte, pre.tokenizer, FinetuneConfig()).train) == 32  # ordered pairs are never swapped
