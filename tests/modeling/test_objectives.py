"""The MLM baseline (objective.kind=mlm) and the replacement-difficulty levers (temperature schedule, uniform
replacements, generator learning-rate scale), each checked against an independent computation or a statistic."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode
from transformers import ElectraForMaskedLM

from electra.config import (
    BERT_MASK_PROB,
    BERT_RANDOM_PROB,
    ObjectiveConfig,
    PretrainConfig,
    load_config,
    temperature_at,
    uniform_replace_at,
)
from electra.modeling.convert_hf import masked_lm_from_hf, to_hf
from electra.modeling.electra import ElectraForPretraining, ElectraModel, MaskedLMForPretraining, build_model
from electra.modeling.flops import off_train_flops, parameter_count, pretrain_step_flops
from electra.modeling.masking import STREAM_RANDOM_TOKEN, STREAM_UNIFORM_MIX, keyed_uniform, mask_tokens, uniform_tokens
from electra.training.checkpoint import export_run_to_hf, load_discriminator, load_pretraining_model
from electra.training.loop import pretrain
from electra.training.optim import build_optimizer, set_learning_rate
from tests.helpers import MASK, SPECIAL, masked, random_batch, tiny_model_config

MLM = ObjectiveConfig(kind="mlm")
FAST = ["train.batch_size=8", "train.log_every=2", "train.eval_every=1000", "train.eval_batches=1"]


def test_build_model_follows_the_objective():
    cfg = PretrainConfig(model=tiny_model_config(), objective=MLM)
    model = build_model(cfg)
    assert isinstance(model, MaskedLMForPretraining)
    assert model.masked_lm.electra.encoder.layer[0].attention.self.query.out_features == cfg.model.hidden_size
    assert sum(p.numel() for p in model.parameters()) == parameter_count(cfg)
    assert isinstance(build_model(PretrainConfig(model=tiny_model_config())), ElectraForPretraining)


def test_bert_masking_splits_the_chosen_positions_80_10_10():
    ids, attention, _ = random_batch(B=512, T=64, vocab=97)
    m = mask_tokens(ids, attention, torch.arange(512), 0, MLM, 10, MASK, SPECIAL, vocab_size=97)
    real = m.weights > 0
    shown = m.input_ids.gather(1, m.positions)[real]
    n = int(real.sum())
    is_mask = shown == MASK
    changed = (shown != m.targets[real]) & ~is_mask
    unchanged = shown == m.targets[real]
    # binomial standard errors at n ~ 5000: about 0.6 and 0.4 points
    assert is_mask.float().mean() == pytest.approx(BERT_MASK_PROB, abs=0.025)
    # a random token can equal the original (1/97 of them): those count as unchanged
    assert changed.float().mean() == pytest.approx(BERT_RANDOM_PROB * 96 / 97, abs=0.015)
    assert unchanged.float().mean() == pytest.approx(1 - BERT_MASK_PROB - BERT_RANDOM_PROB * 96 / 97, abs=0.015)
    assert n > 4000
    # the input outside the chosen positions is untouched
    outside = torch.ones_like(ids, dtype=torch.bool).scatter(1, m.positions, ~real)
    assert torch.equal(m.input_ids[outside], ids[outside])
    # keyed: the same example ids give the same masks
    again = mask_tokens(ids, attention, torch.arange(512), 0, MLM, 10, MASK, SPECIAL, vocab_size=97)
    assert torch.equal(again.input_ids, m.input_ids)


def test_electra_masking_is_unchanged_by_the_mlm_option():
    ids, attention, _ = random_batch(B=64, T=32)
    a = masked(ids, attention)
    b = mask_tokens(ids, attention, torch.arange(64), 0, ObjectiveConfig(), a.positions.shape[1], MASK, SPECIAL, 97)
    assert torch.equal(a.input_ids, b.input_ids)  # no random tokens for ELECTRA (OFF: 85% [MASK], 15% kept)


def test_mlm_step_equals_transformers_masked_lm(tmp_path):
    """Our MLM loss and every gradient against transformers' ElectraForMaskedLM with the same weights, the [MASK]ed
    input built here from the same decisions, and the loss computed here at the real slots."""
    torch.manual_seed(0)
    ours = MaskedLMForPretraining(tiny_model_config(), MLM)
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    to_hf(ours, tmp_path)
    ref = ElectraForMaskedLM.from_pretrained(tmp_path / "masked_lm").float().train()
    assert ref.generator_lm_head.weight is ref.electra.embeddings.word_embeddings.weight
    ids, attention, types = random_batch(B=4, T=24, pad_from=[24, 20, 17, 24])
    n = 4
    m = mask_tokens(ids, attention, torch.arange(4), 0, MLM, n, MASK, SPECIAL, vocab_size=97)

    out = ours.train()(ids, attention, types, m)
    out.loss.backward()

    shown = ids.clone()  # the input as the reference sees it: the chosen decisions applied one by one
    losses = []
    for b in range(4):
        for s in range(n):
            if m.weights[b, s] > 0:
                shown[b, m.positions[b, s]] = m.input_ids[b, m.positions[b, s]]
    logits = ref(input_ids=shown, attention_mask=attention, token_type_ids=types).logits
    for b in range(4):
        for s in range(n):
            if m.weights[b, s] > 0:
                pos = m.positions[b, s]
                losses.append(F.cross_entropy(logits[b, pos][None], ids[b, pos][None]))
    loss = torch.stack(losses).mean()
    loss.backward()
    torch.testing.assert_close(out.loss, loss, rtol=1e-5, atol=1e-5)
    names = {
        "embeddings.": "electra.embeddings.",
        "masked_lm.electra.": "electra.",
        "masked_lm.generator_predictions.": "generator_predictions.",
        "masked_lm.lm_head_bias": "generator_lm_head.bias",
    }
    theirs = dict(ref.named_parameters())
    for name, p in ours.named_parameters():
        prefix = next(k for k in names if name.startswith(k))
        q = theirs[names[prefix] + name[len(prefix) :]]
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_mlm_flops_match_official_bert_small():
    # google-research/electra flops_computation.py prints 1.4187e18 for bert_small (1.45M steps, batch 128,
    # length 128): the paper's "1.4e18" for BERT-Small.
    total = off_train_flops(load_config("small", ["objective.kind=mlm"]), steps=1_450_000)
    assert total == pytest.approx(1.41874e18, rel=1e-5)
    # cheaper per step than ELECTRA: no generator stack and no second input embedding, which OFF counts as a
    # dense one-hot matmul (2 E V per token); so equal FLOPs buy the MLM 1.32x the steps
    electra, mlm = (off_train_flops(load_config("small", extra), 1) for extra in ([], ["objective.kind=mlm"]))
    assert electra / mlm == pytest.approx(1.3222, rel=1e-3)


def test_mlm_executed_flops_equal_what_pytorch_counts():
    cfg = load_config("tiny", ["objective.kind=mlm", "model.dropout=0.0", "model.attention_dropout=0.0"])
    model = build_model(cfg)
    ids, attention, types = random_batch(B=4, T=64, vocab=cfg.model.vocab_size)
    m = mask_tokens(
        ids,
        attention,
        torch.arange(4),
        0,
        cfg.objective,
        cfg.num_mask_slots,
        MASK,
        SPECIAL,
        vocab_size=cfg.model.vocab_size,
    )
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        model(ids, attention, types, m).loss.backward()
    assert counter.get_total_flops() == pretrain_step_flops(cfg, 4, 64)


def test_an_mlm_run_exports_imports_and_fine_tunes_from_its_encoder(tmp_path):
    run = tmp_path / "mlm"
    meta = pretrain(load_config("tiny", [*FAST, "objective.kind=mlm", "train.max_steps=4", "train.eval_every=4"]), run)
    assert meta.step == 4 and not meta.collapsed  # no discriminator: nothing to collapse
    rows = [line for line in (run / "metrics.jsonl").read_text().splitlines() if "eval_" in line]
    assert '"eval_disc_auc": null' in rows[-1] and '"eval_mlm_accuracy": ' in rows[-1]
    model, cfg = load_pretraining_model(run)
    assert isinstance(model, MaskedLMForPretraining) and cfg.objective.kind == "mlm"
    out = export_run_to_hf(run, tmp_path / "hf")
    ref = ElectraForMaskedLM.from_pretrained(out / "masked_lm")
    assert ref.config.hidden_size == cfg.model.hidden_size  # the discriminator's size, not a generator's
    back = masked_lm_from_hf(out / "masked_lm")
    for name, value in model.state_dict().items():
        assert torch.equal(back.state_dict()[name], value), name
    # fine-tuning takes the MLM encoder, from the run and from the export alike
    for source in (run, out):
        body, model_cfg, tokenizer = load_discriminator(source)
        assert isinstance(body, ElectraModel) and tokenizer is not None
        expected = ElectraModel.from_pretraining(model).state_dict()
        for name, value in body.state_dict().items():
            assert torch.equal(value, expected[name]), (source, name)


# -- replacement difficulty -------------------------------------------------------------------------------------


def test_temperature_schedule_anneals_linearly_to_the_final_temperature():
    obj = ObjectiveConfig(temperature=1.0, temperature_start=3.0, temperature_steps=100)
    assert [temperature_at(s, obj) for s in (0, 50, 99, 100, 5000)] == pytest.approx([3.0, 2.0, 1.02, 1.0, 1.0])
    assert temperature_at(0, ObjectiveConfig(temperature=2.0)) == 2.0  # no schedule: constant


def test_the_loop_samples_at_the_scheduled_temperature(tmp_path):
    """At temperature 1e4 the generator samples uniformly (sampled accuracy ~ 1/V); once the schedule has reached
    temperature 1, it samples its own distribution: the first logged window is the hot one, the second the cold."""
    import json

    overrides = [
        *FAST,
        "train.max_steps=30",
        "train.log_every=15",
        "train.lr=2e-3",
        "train.warmup_steps=5",
        "objective.temperature_start=1e4",
        "objective.temperature_steps=15",
    ]
    pretrain(load_config("tiny", overrides), tmp_path / "run")
    hot, cold = (json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[:2])
    vocab = load_pretraining_model(tmp_path / "run")[1].model.vocab_size
    assert hot["sampled_accuracy"] < 3 / vocab
    assert cold["sampled_accuracy"] > 4 * hot["sampled_accuracy"] and cold["sampled_accuracy"] > 0.02  # 0.030 vs 0.005


def test_uniform_replacements_replace_the_given_fraction_of_samples():
    torch.manual_seed(0)
    cfg = tiny_model_config()
    ids, attention, types = random_batch(B=256, T=32)
    m = masked(ids, attention)
    N = m.positions.shape[1]
    for p in (0.0, 0.3, 1.0):
        model = ElectraForPretraining(cfg, ObjectiveConfig(uniform_replace_prob=p)).eval()
        plain = ElectraForPretraining(cfg, ObjectiveConfig()).eval()
        plain.load_state_dict(model.state_dict())
        with torch.no_grad():
            got = model(ids, attention, types, m).disc_labels
            base = plain(ids, attention, types, m).disc_labels
        coin = keyed_uniform(m.keys, N, STREAM_UNIFORM_MIX) < p
        uniform = uniform_tokens(m.keys, N, cfg.vocab_size, STREAM_RANDOM_TOKEN)
        real = m.weights > 0
        expected = torch.where(coin & real, (uniform != m.targets).float(), base.gather(1, m.positions))
        assert torch.equal(got.gather(1, m.positions)[real], expected[real]), p
        assert (coin & real).float().sum() / real.sum() == pytest.approx(p, abs=0.02)


def test_generator_lr_scale_multiplies_only_the_generators_learning_rate():
    cfg = load_config("tiny", ["train.generator_lr_scale=0.1"])
    model = build_model(cfg)
    opt = build_optimizer(model, cfg, torch.device("cpu"))
    set_learning_rate(opt, 1e-3)
    lr_of = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    for name, p in model.named_parameters():
        assert lr_of[id(p)] == pytest.approx(1e-4 if name.startswith("generator.") else 1e-3), name
    assert len(build_optimizer(model, load_config("tiny"), torch.device("cpu")).param_groups) == 2  # as OFF


def test_uniform_replacement_schedule_anneals_linearly_and_the_loop_follows_it(tmp_path, monkeypatch):
    """objective.uniform_replace_start: the fraction the loop sets before each update is the schedule's, and the
    model replaces that fraction (set at run time as when built with it)."""
    obj = ObjectiveConfig(uniform_replace_prob=0.0, uniform_replace_start=0.5, uniform_replace_steps=100)
    assert [uniform_replace_at(s, obj) for s in (0, 50, 100, 900)] == pytest.approx([0.5, 0.25, 0.0, 0.0])
    assert uniform_replace_at(0, ObjectiveConfig(uniform_replace_prob=0.1)) == 0.1  # no schedule: constant
    seen = []
    setter = ElectraForPretraining.set_uniform_replace
    # what the loop sets before each update (the held-out evaluation, in eval mode, sets the end point and back)
    record = lambda m, p: (m.training and seen.append(p), setter(m, p))  # noqa: E731
    monkeypatch.setattr(ElectraForPretraining, "set_uniform_replace", record)
    overrides = [
        *FAST,
        "train.max_steps=12",
        "objective.uniform_replace_start=0.6",
        "objective.uniform_replace_steps=6",
    ]
    pretrain(load_config("tiny", overrides), tmp_path / "run")
    assert seen == pytest.approx([0.6, 0.5, 0.4, 0.3, 0.2, 0.1] + [0.0] * 6)
    cfg = tiny_model_config()
    ids, attention, types = random_batch(B=64, T=32)
    m = masked(ids, attention)
    built = ElectraForPretraining(cfg, ObjectiveConfig(uniform_replace_prob=0.3)).eval()
    scheduled = ElectraForPretraining(cfg, ObjectiveConfig(uniform_replace_start=0.9, uniform_replace_steps=5)).eval()
    scheduled.load_state_dict(built.state_dict())
    scheduled.set_uniform_replace(0.3)
    with torch.no_grad():
        assert torch.equal(built(ids, attention, types, m).disc_labels, scheduled(ids, attention, types, m).disc_labels)


def test_gradient_disentangled_sharing_keeps_the_discriminators_loss_out_of_the_shared_table():
    """DeBERTa-v3's GDES: the discriminator reads stop_gradient(shared table) + its own table (0 at the start), so
    at the start both models compute exactly what full sharing computes, the shared table's gradient is the
    generator's alone, and the discriminator's own table gets the discriminator's gradient."""
    torch.manual_seed(0)
    cfg = tiny_model_config()
    ids, attention, types = random_batch(B=8, T=32)
    m = masked(ids, attention)
    full = ElectraForPretraining(cfg).train(False)
    gdes = ElectraForPretraining(dataclasses.replace(cfg, embedding_sharing="gradient_disentangled")).train(False)
    gdes.load_state_dict({**full.state_dict(), "discriminator_word_delta": gdes.discriminator_word_delta}, strict=True)
    a, b = full(ids, attention, types, m), gdes(ids, attention, types, m)
    assert torch.equal(a.disc_logits, b.disc_logits) and torch.equal(a.loss, b.loss)
    table = gdes.embeddings.word_embeddings.weight
    from_disc = torch.autograd.grad(b.disc_loss, [table, gdes.discriminator_word_delta], allow_unused=True)
    assert from_disc[0] is None and from_disc[1].abs().sum() > 0
    from_mlm = torch.autograd.grad(gdes(ids, attention, types, m).mlm_loss, table)[0]
    full_mlm = torch.autograd.grad(full(ids, attention, types, m).mlm_loss, full.embeddings.word_embeddings.weight)[0]
    assert torch.allclose(from_mlm, full_mlm)
    # what fine-tuning and export take: the sum of the two tables
    gdes.discriminator_word_delta.data.normal_()
    body = ElectraModel.from_pretraining(gdes)
    assert torch.equal(body.embeddings.word_embeddings.weight, table + gdes.discriminator_word_delta)


def test_gradient_disentangled_sharing_exports_the_discriminators_own_table(tmp_path):
    from transformers import ElectraForPreTraining

    cfg = dataclasses.replace(tiny_model_config(), embedding_sharing="gradient_disentangled")
    model = ElectraForPretraining(cfg)
    model.discriminator_word_delta.data.normal_()
    to_hf(model, tmp_path / "hf")
    disc = ElectraForPreTraining.from_pretrained(tmp_path / "hf" / "discriminator")
    gen = ElectraForMaskedLM.from_pretrained(tmp_path / "hf" / "generator")
    shared = model.embeddings.word_embeddings.weight
    assert torch.equal(disc.electra.embeddings.word_embeddings.weight, shared + model.discriminator_word_delta)
    assert torch.equal(gen.electra.embeddings.word_embeddings.weight, shared)


def test_the_discriminators_output_bias_starts_where_the_config_says():
    cfg = tiny_model_config()
    assert (ElectraForPretraining(cfg).discriminator.discriminator_predictions.dense_prediction.bias == 0).all()
    prior = ElectraForPretraining(dataclasses.replace(cfg, disc_output_bias=-1.8))
    assert prior.discriminator.discriminator_predictions.dense_prediction.bias.item() == pytest.approx(-1.8)


def test_the_masked_lm_trains_under_a_preset_with_sampling_schedules(tmp_path):
    """The cpu preset anneals ELECTRA's sampling temperature; its masked LM (objective.kind=mlm) samples nothing and
    must train under the same preset (it once stopped at step 0: no set_temperature on the masked LM)."""
    overrides = [*FAST, "train.max_steps=3", "objective.kind=mlm", "objective.temperature_start=3"]
    overrides += ["objective.temperature_steps=10", "objective.uniform_replace_start=0.5"]
    assert pretrain(load_config("tiny", overrides), tmp_path / "run").step == 3
