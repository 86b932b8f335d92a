"""Equivalence with transformers' ELECTRA in fp32, both directions, and the import/export commands."""

import json

import pytest
import torch
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

from electra.modeling.convert_hf import HFConversionError, from_hf, to_hf
from electra.training.checkpoint import load_discriminator, load_pretraining_model
from tests.helpers import cli_main, random_batch, tiny_model

SHARED = dict(
    vocab_size=97,
    embedding_size=24,
    num_hidden_layers=2,
    max_position_embeddings=64,
    type_vocab_size=2,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory):
    """Random transformers models saved with save_pretrained; embeddings shared as in Google's checkpoints."""
    torch.manual_seed(0)
    disc = ElectraForPreTraining(ElectraConfig(hidden_size=32, num_attention_heads=4, intermediate_size=64, **SHARED))
    gen = ElectraForMaskedLM(ElectraConfig(hidden_size=16, num_attention_heads=2, intermediate_size=48, **SHARED))
    with torch.no_grad():  # move away from the init (zero biases, unit LayerNorms) so every weight matters
        for p in [*disc.parameters(), *gen.parameters()]:
            p.add_(torch.randn_like(p) * 0.05)
        gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
    root = tmp_path_factory.mktemp("hf")
    disc.save_pretrained(root / "d")
    gen.save_pretrained(root / "g")
    return disc.eval(), gen.eval(), root


def inputs():
    ids, attention, types = random_batch(B=3, T=20, pad_from=[20, 12, 7])
    return ids, attention, types


def assert_same_logits(ours, theirs, attention):
    valid = attention.bool()
    assert (ours - theirs)[valid].abs().max() < 1e-5


def test_from_hf_matches_transformers_logits(hf_pair):
    disc, gen, root = hf_pair
    model = from_hf(root / "d", root / "g")
    assert not model.training
    assert model.cfg.generator.hidden_size == 16 and model.cfg.generator.num_heads == 2
    ids, attention, types = inputs()
    with torch.no_grad():
        assert_same_logits(
            model.discriminator_logits(ids, attention, types), disc(ids, attention, types).logits, attention
        )
        assert_same_logits(model.generator_logits(ids, attention, types), gen(ids, attention, types).logits, attention)


def test_to_hf_round_trip_loads_with_no_missing_keys(tmp_path):
    model = tiny_model().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    to_hf(model, tmp_path)
    disc, info_d = ElectraForPreTraining.from_pretrained(tmp_path / "discriminator", output_loading_info=True)
    gen, info_g = ElectraForMaskedLM.from_pretrained(tmp_path / "generator", output_loading_info=True)
    for info in (info_d, info_g):
        assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert json.loads((tmp_path / "generator" / "config.json").read_text())["hidden_size"] == 16
    assert gen.generator_lm_head.weight.data_ptr() == gen.electra.embeddings.word_embeddings.weight.data_ptr()
    ids, attention, types = inputs()
    with torch.no_grad():
        assert_same_logits(
            disc.eval()(ids, attention, types).logits, model.discriminator_logits(ids, attention, types), attention
        )
        assert_same_logits(
            gen.eval()(ids, attention, types).logits, model.generator_logits(ids, attention, types), attention
        )
    back = from_hf(tmp_path / "discriminator", tmp_path / "generator")
    for (name, a), b in zip(model.state_dict().items(), back.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_cli_import_then_export_and_discriminator_loading(hf_pair, tmp_path):
    disc, gen, root = hf_pair
    run = tmp_path / "run"
    args = ["import-hf", "--discriminator", str(root / "d"), "--generator", str(root / "g"), "--out", str(run)]
    assert cli_main(args) == 0
    model, cfg = load_pretraining_model(run)
    assert cfg.model.vocab_size == 97
    assert cli_main(["export-hf", str(run), str(tmp_path / "out")]) == 0
    again = ElectraForPreTraining.from_pretrained(tmp_path / "out" / "discriminator").eval()
    ids, attention, types = inputs()
    with torch.no_grad():
        assert_same_logits(again(ids, attention, types).logits, disc(ids, attention, types).logits, attention)
        # the fine-tuning body, loaded straight from a transformers folder and from our run, agree
        body_hf, _, _ = load_discriminator(root / "d")
        body_run, _, _ = load_discriminator(run)
        torch.testing.assert_close(body_hf.eval()(ids, attention, types), body_run.eval()(ids, attention, types))
        torch.testing.assert_close(
            body_hf(ids, attention, types), disc.electra(ids, attention, types).last_hidden_state
        )


def test_not_a_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(HFConversionError, match="no config.json"):
        from_hf(tmp_path, tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(HFConversionError, match="not 'electra'"):
        from_hf(tmp_path, tmp_path)


# -- rotary positions: transformers' RoFormer ---------------------------------------------------------------------


def perturbed(model):
    """Away from the init so every weight matters (RoFormer's fixed sinusoid table stays what it is)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith("embed_positions.weight"):
                p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def test_rotary_model_exports_as_roformer_with_equal_outputs_and_imports_back(tmp_path):
    from transformers import RoFormerForMaskedLM, RoFormerModel

    from electra.modeling.convert_hf import DISC_HEAD_FILE
    from electra.modeling.electra import attention_bias

    torch.manual_seed(0)
    model = perturbed(tiny_model(position_embedding="rotary"))
    to_hf(model, tmp_path)
    gen, info_g = RoFormerForMaskedLM.from_pretrained(tmp_path / "generator", output_loading_info=True)
    disc, info_d = RoFormerModel.from_pretrained(tmp_path / "discriminator", output_loading_info=True)
    for info in (info_d, info_g):
        assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert (tmp_path / "discriminator" / DISC_HEAD_FILE).exists()
    ids, attention, types = inputs()
    with torch.no_grad():
        assert_same_logits(
            gen.eval()(ids, attention, types).logits, model.generator_logits(ids, attention, types), attention
        )
        ours_h = model.discriminator.electra(model.embeddings(ids, types), attention_bias(attention))
        theirs_h = disc.eval()(ids, attention_mask=attention, token_type_ids=types).last_hidden_state
        assert_same_logits(ours_h, theirs_h, attention)
    back = from_hf(tmp_path / "discriminator", tmp_path / "generator")
    assert back.cfg.position_embedding == "rotary"
    for (name, a), b in zip(model.state_dict().items(), back.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    body, cfg, _ = load_discriminator(tmp_path)  # fine-tuning starts from the RoFormerModel folder
    with torch.no_grad():
        assert_same_logits(body.eval()(ids, attention, types), ours_h, attention)
    (tmp_path / "discriminator" / DISC_HEAD_FILE).unlink()
    with pytest.raises(HFConversionError, match=DISC_HEAD_FILE):
        from_hf(tmp_path / "discriminator", tmp_path / "generator")


def test_rotary_mlm_baseline_exports_as_roformer_for_masked_lm(tmp_path):
    from transformers import RoFormerForMaskedLM

    from electra.modeling.convert_hf import masked_lm_from_hf
    from electra.modeling.electra import MaskedLMForPretraining
    from tests.helpers import tiny_model_config

    torch.manual_seed(1)
    model = perturbed(MaskedLMForPretraining(tiny_model_config(position_embedding="rotary")))
    to_hf(model, tmp_path)
    hf, info = RoFormerForMaskedLM.from_pretrained(tmp_path / "masked_lm", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ids, attention, types = inputs()
    with torch.no_grad():
        assert_same_logits(
            hf.eval()(ids, attention, types).logits, model.generator_logits(ids, attention, types), attention
        )
    back = masked_lm_from_hf(tmp_path / "masked_lm")
    for (name, a), b in zip(model.state_dict().items(), back.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_a_roformer_made_by_transformers_fine_tunes_as_our_body(tmp_path):
    """A RoFormer folder we did not write (transformers' own init, saved with save_pretrained) loads as the
    fine-tuning body with equal hidden states."""
    from transformers import RoFormerConfig, RoFormerForMaskedLM

    torch.manual_seed(2)
    hf = RoFormerForMaskedLM(RoFormerConfig(hidden_size=32, num_attention_heads=4, intermediate_size=64, **SHARED))
    perturbed(hf).save_pretrained(tmp_path)
    body, cfg, _ = load_discriminator(tmp_path)
    assert cfg.position_embedding == "rotary" and cfg.embedding_size == 24
    ids, attention, types = inputs()
    with torch.no_grad():
        theirs = hf.roformer(ids, attention_mask=attention, token_type_ids=types).last_hidden_state
        assert_same_logits(body.eval()(ids, attention, types), theirs, attention)
