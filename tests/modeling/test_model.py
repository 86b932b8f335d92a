"""The pretraining model: gradients, the generator tie, padding invariance, and overfitting a fixed batch."""

import torch

from electra.config import ObjectiveConfig
from electra.modeling.electra import ElectraForPretraining, ElectraModel, metrics_from_stats
from tests.helpers import masked, random_batch, tiny_model, tiny_model_config


def test_every_parameter_gets_a_gradient_and_sampling_is_detached():
    model = tiny_model()
    ids, attention, types = random_batch(B=6, T=32, pad_from=[32, 30, 20, 32, 25, 16])
    out = model(ids, attention, types, masked(ids, attention))
    out.loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name

    # the discriminator loss alone reaches no generator-only parameter: sampling has no gradient
    model.zero_grad(set_to_none=True)
    out = model(ids, attention, types, masked(ids, attention))
    out.disc_loss.backward()
    for name, p in model.generator.named_parameters():
        assert p.grad is None or p.grad.abs().sum() == 0, name
    assert model.embeddings.word_embeddings.weight.grad.abs().sum() > 0  # shared: both losses reach it


def test_generator_output_is_the_shared_word_table_after_dtype_moves_and_reload():
    model = tiny_model()
    emb = model.embeddings.word_embeddings.weight
    params = dict(model.named_parameters())
    assert not any("lm_head.weight" in n for n in params)  # one Parameter, used twice
    model = model.to(torch.float64)
    ids, attention, types = random_batch()
    with torch.no_grad():
        model.embeddings.word_embeddings.weight.mul_(2)
        logits = model.generator_logits(ids, attention, types)
        h = model.generator.electra(model.embeddings(ids, types), attention[:, None, None, :].bool())
        by_hand = model.generator.generator_predictions(h) @ model.embeddings.word_embeddings.weight.T
    torch.testing.assert_close(logits, by_hand + model.generator.lm_head_bias, rtol=0, atol=1e-12)
    assert emb is not None
    clone = ElectraForPretraining(model.cfg).to(torch.float64)
    clone.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(clone.generator_logits(ids, attention, types), logits, rtol=0, atol=0)


def test_a_sequence_alone_equals_itself_inside_a_padded_batch():
    model = tiny_model().eval()
    ids, attention, types = random_batch(B=3, T=40, pad_from=[40, 17, 29])
    with torch.no_grad():
        batched = model.discriminator_logits(ids, attention, types)
        gen_batched = model.generator_logits(ids, attention, types)
        for row, length in enumerate([40, 17, 29]):
            alone = model.discriminator_logits(ids[row : row + 1, :length], None, types[row : row + 1, :length])
            torch.testing.assert_close(batched[row, :length], alone[0], rtol=1e-5, atol=1e-5)
            gen_alone = model.generator_logits(ids[row : row + 1, :length], None, types[row : row + 1, :length])
            torch.testing.assert_close(gen_batched[row, :length], gen_alone[0], rtol=1e-5, atol=1e-5)


def test_losses_are_normalised_sums_and_metrics_add_up():
    model = tiny_model()
    ids, attention, types = random_batch(B=4, T=32, pad_from=[32, 28, 32, 20])
    out = model(ids, attention, types, masked(ids, attention))
    s = out.stats
    torch.testing.assert_close(out.mlm_loss, s["mlm_loss_sum"] / s["mlm_count"])
    torch.testing.assert_close(out.disc_loss, s["disc_loss_sum"] / s["disc_count"])
    torch.testing.assert_close(out.loss, out.mlm_loss + 50.0 * out.disc_loss)
    assert s["disc_count"] == attention.sum()  # OFF: every non-pad token, [CLS]/[SEP] included
    rc = ElectraForPretraining(model.cfg, ObjectiveConfig(disc_on_special=False))
    rc.load_state_dict(model.state_dict())
    rc_out = rc(ids, attention, types, masked(ids, attention, ObjectiveConfig(disc_on_special=False)))
    assert rc_out.stats["disc_count"] == attention.sum() - 3 * 4  # [CLS] and two [SEP] per row excluded
    m = metrics_from_stats({k: v.item() for k, v in s.items()})
    assert 0 <= m["disc_recall"] <= 1 and m["replaced_fraction"] <= s["mlm_count"] / s["disc_count"] + 1e-6


def test_tiny_model_overfits_a_fixed_batch():
    torch.manual_seed(0)
    model = tiny_model(vocab_size=64, hidden_size=64, embedding_size=32, intermediate_size=128)
    ids, attention, types = random_batch(B=8, T=32, vocab=64, seed=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = None
    batch = masked(ids, attention)  # fixed: same positions every step
    for _ in range(300):
        out = model(ids, attention, types, batch)
        first = first or (out.mlm_loss.item(), out.disc_loss.item())
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    mlm, disc = out.mlm_loss.item(), out.disc_loss.item()
    assert first[0] > 4.0 and mlm < 0.5, (first, mlm)  # from ~ln(64) to memorised
    # once the generator is right its samples equal the originals, and the discriminator sees few replacements
    assert disc < 0.1 * first[1], (first, disc)


def test_discriminator_body_copy_matches_the_pretraining_model():
    model = tiny_model().eval()
    body = ElectraModel.from_pretraining(model).eval()
    ids, attention, types = random_batch(pad_from=[24, 20, 10, 24])
    with torch.no_grad():
        h = body(ids, attention, types)
        logits = model.discriminator.discriminator_predictions(h)
        torch.testing.assert_close(logits, model.discriminator_logits(ids, attention, types), rtol=0, atol=0)
    assert set(body.state_dict()) >= {"embeddings.word_embeddings.weight", "embeddings_project.weight"}
    assert body.state_dict()["encoder.layer.1.output.LayerNorm.bias"].shape == (tiny_model_config().hidden_size,)
