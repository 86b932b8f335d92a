"""One training step, rebuilt from transformers' ELECTRA and compared with ours: the inputs both models see, the
labels, every loss, and the gradient of every parameter.

The reference shares only the random decisions with our code: the positions, the [MASK] coins (`mask_tokens`) and
the sampled tokens (`sample_replacements` with the same keys, on the reference generator's own logits). It builds
the generator's input, the corrupted input, the labels and the losses itself, in plain Python, as OFF does
(run_pretraining.py _get_masked_lm_output, _get_fake_data, _get_discriminator_output): the MLM loss is the mean
cross-entropy over real slots, a sampled token equal to the original counts as original, and the discriminator
loss is the mean BCE over non-pad tokens, [CLS] and [SEP] included; total = 1 x MLM + 50 x discriminator.
"""

import pytest
import torch
import torch.nn.functional as F
from transformers import ElectraForMaskedLM, ElectraForPreTraining

from electra.config import ObjectiveConfig
from electra.hf_compat import to_hf
from electra.masking import sample_replacements
from electra.model import ElectraForPretraining
from tests.helpers import MASK, SPECIAL, masked, random_batch, tiny_model_config

TOL = dict(rtol=1e-5, atol=1e-5)
LIKELY = torch.arange(5, 13)  # the batch's tokens, which the generator is made to favour (see `models`)

OBJECTIVES = {
    "off": ObjectiveConfig(),
    "study": ObjectiveConfig(replace="masked", disc_on_special=False),
    "without_replacement": ObjectiveConfig(position_sampling="without_replacement"),
}


def models(objective: ObjectiveConfig, tmp_path):
    """Ours, away from its init so that every weight matters, and the same weights in transformers."""
    torch.manual_seed(0)
    ours = ElectraForPretraining(tiny_model_config(), objective)  # fp32, dropout 0
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(torch.randn_like(p) * 0.05)
        # the generator favours the tokens the batch is made of, so some samples equal the original token
        ours.generator.lm_head_bias[LIKELY] += 4.0
    to_hf(ours, tmp_path)
    disc = ElectraForPreTraining.from_pretrained(tmp_path / "discriminator").float().eval()
    gen = ElectraForMaskedLM.from_pretrained(tmp_path / "generator").float().eval()
    assert gen.generator_lm_head.weight is gen.electra.embeddings.word_embeddings.weight  # tied in the reference
    return ours.train(), disc, gen


def hf_name(ours: str) -> list[tuple[str, str]]:
    """(model, parameter) in transformers for one of our parameters; the shared embeddings live in both."""
    if ours.startswith("embeddings."):
        return [("disc", "electra." + ours), ("gen", "electra." + ours)]
    for prefix, which, theirs in [
        ("generator.electra.", "gen", "electra."),
        ("generator.generator_predictions.", "gen", "generator_predictions."),
        ("generator.lm_head_bias", "gen", "generator_lm_head.bias"),
        ("discriminator.electra.", "disc", "electra."),
        ("discriminator.discriminator_predictions.", "disc", "discriminator_predictions."),
    ]:
        if ours.startswith(prefix):
            return [(which, theirs + ours[len(prefix) :])]
    raise AssertionError(f"no transformers counterpart for {ours}")


@pytest.mark.parametrize("variant", sorted(OBJECTIVES))
def test_training_step_equals_the_transformers_reference(variant, tmp_path):
    objective = OBJECTIVES[variant]
    ours, disc, gen = models(objective, tmp_path)
    ids, attention, types = random_batch(B=6, T=48, vocab=13, pad_from=[48, 40, 33, 48, 21, 45])
    m = masked(ids, attention, objective)  # the shared random decisions
    B, N = m.positions.shape

    # -- ours: the training forward, with the token ids each model is fed captured on the way in
    fed = []
    hook = ours.embeddings.register_forward_pre_hook(lambda module, args: fed.append(args[0].clone()))
    out = ours(ids, attention, types, m)
    hook.remove()
    out.loss.backward()
    gen_fed, disc_fed = fed

    # -- the reference, from the decisions and the original ids only
    real = [(b, s) for b in range(B) for s in range(N) if m.weights[b, s] == 1]
    gen_input = ids.clone()
    for b, s in real:
        if m.is_masked[b, s]:
            gen_input[b, m.positions[b, s]] = MASK
    gen_logits = gen(input_ids=gen_input, attention_mask=attention, token_type_ids=types).logits  # (B, T, V)
    rows = torch.tensor([b for b, _ in real])
    cols = torch.tensor([int(m.positions[b, s]) for b, s in real])
    mlm_loss = F.cross_entropy(gen_logits[rows, cols], ids[rows, cols])  # mean over the real slots

    slot_logits = gen_logits[torch.arange(B)[:, None], m.positions].detach()  # (B, N, V)
    sampled = sample_replacements(slot_logits, ids.gather(1, m.positions), m.keys)
    disc_input = ids.clone()
    for b, s in real:
        if objective.replace == "all" or m.is_masked[b, s]:
            disc_input[b, m.positions[b, s]] = sampled[b, s]
    labels = torch.zeros(B, ids.shape[1])
    for b in range(B):
        for t in range(ids.shape[1]):
            labels[b, t] = float(disc_input[b, t] != ids[b, t])  # a correct sample counts as original
    disc_logits = disc(input_ids=disc_input, attention_mask=attention, token_type_ids=types).logits  # (B, T)
    counted = attention.bool()
    if not objective.disc_on_special:
        counted &= ~torch.isin(ids, SPECIAL)
    disc_loss = F.binary_cross_entropy_with_logits(disc_logits[counted], labels[counted])
    loss = 1.0 * mlm_loss + 50.0 * disc_loss
    loss.backward()

    # the batch exercises every kind of slot: [MASK]ed and kept, replaced and sampled equal to the original
    assert 0 < sum(bool(m.is_masked[b, s]) for b, s in real) < len(real)
    replaced = [labels[b, m.positions[b, s]] for b, s in real if objective.replace == "all" or m.is_masked[b, s]]
    assert 0 < sum(replaced) < len(replaced)

    # -- the same step
    assert torch.equal(gen_fed, gen_input), "the generator's input"
    assert torch.equal(disc_fed, disc_input), "the corrupted input"
    assert torch.equal(out.disc_labels, labels), "the labels"
    assert torch.equal(out.disc_mask, counted), "the tokens the discriminator loss counts"
    torch.testing.assert_close(out.mlm_loss, mlm_loss, **TOL, msg="MLM loss")
    torch.testing.assert_close(out.disc_logits[counted], disc_logits[counted], **TOL, msg="discriminator logits")
    torch.testing.assert_close(out.disc_loss, disc_loss, **TOL, msg="discriminator loss")
    torch.testing.assert_close(out.loss, loss, **TOL, msg="total loss")

    theirs = {"disc": dict(disc.named_parameters()), "gen": dict(gen.named_parameters())}
    used = set()
    for name, p in ours.named_parameters():
        pairs = hf_name(name)
        used.update(pairs)
        expected = sum(theirs[which][n].grad for which, n in pairs)  # the shared embeddings get both models' grads
        torch.testing.assert_close(p.grad, expected, **TOL, msg=f"gradient of {name}")
    # every transformers parameter has its counterpart (the tied generator_lm_head.weight is the word table)
    assert used == {(which, n) for which, params in theirs.items() for n in params}
