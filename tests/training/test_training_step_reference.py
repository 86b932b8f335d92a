"""One training step, rebuilt from transformers' ELECTRA and compared with ours: the inputs both models see, the
labels, every loss, and the gradient of every parameter.

The reference shares only the random decisions with our code: the positions, the [MASK] coins (`mask_tokens`) and
the sampled tokens (`sample_replacements` with the same keys, on the reference generator's own logits). It builds
the generator's input, the corrupted input, the labels and the losses itself, in plain Python, as OFF does
(run_pretraining.py _get_masked_lm_output, _get_fake_data, _get_discriminator_output): the MLM loss is the mean
cross-entropy over real slots, a sampled token equal to the original counts as original, and the discriminator
loss is the mean BCE over non-pad tokens, [CLS] and [SEP] included; total = 1 x MLM + 50 x discriminator.

With rotary positions the reference is transformers' RoFormer: RoFormerForMaskedLM as the generator, and
RoFormerModel under the replaced-token head that `to_hf` writes beside it (transformers has no RoFormer class
with that head).
"""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import ElectraForMaskedLM, ElectraForPreTraining, RoFormerForMaskedLM, RoFormerModel

from electra.config import ObjectiveConfig
from electra.modeling.convert_hf import DISC_HEAD_FILE, to_hf
from electra.modeling.electra import ElectraForPretraining
from electra.modeling.masking import sample_replacements
from tests.helpers import MASK, SPECIAL, masked, random_batch, tiny_model_config

TOL = dict(rtol=1e-5, atol=1e-5)
LIKELY = torch.arange(5, 13)  # the batch's tokens, which the generator is made to favour (see `models`)

OBJECTIVES = {
    "off": ObjectiveConfig(),
    "study": ObjectiveConfig(replace="masked", disc_on_special=False),
    "without_replacement": ObjectiveConfig(position_sampling="without_replacement"),
    "rotary": ObjectiveConfig(),  # OFF's objective on a model with rotary positions (RoFormer's)
}


class RoFormerDiscriminator(torch.nn.Module):
    """transformers' RoFormerModel, then the replaced-token head Linear(H, H) -> GELU -> Linear(H, 1) (OFF
    run_pretraining.py _get_discriminator_output) with the weights of the head file."""

    def __init__(self, folder):
        super().__init__()
        self.roformer = RoFormerModel.from_pretrained(folder)
        head = load_file(folder / DISC_HEAD_FILE)
        self.dense = torch.nn.Linear(*head["discriminator_predictions.dense.weight"].shape[::-1])
        self.dense_prediction = torch.nn.Linear(self.dense.out_features, 1)
        for name, value in head.items():
            self.get_parameter(name.removeprefix("discriminator_predictions.")).data.copy_(value)

    def forward(self, input_ids, attention_mask, token_type_ids):
        h = self.roformer(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return SimpleNamespace(logits=self.dense_prediction(F.gelu(self.dense(h.last_hidden_state))).squeeze(-1))


def models(objective: ObjectiveConfig, tmp_path, position: str = "learned"):
    """Ours, away from its init so that every weight matters, and the same weights in transformers."""
    torch.manual_seed(0)
    ours = ElectraForPretraining(tiny_model_config(position_embedding=position), objective)  # fp32, dropout 0
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(torch.randn_like(p) * 0.05)
        # the generator favours the tokens the batch is made of, so some samples equal the original token
        ours.generator.lm_head_bias[LIKELY] += 4.0
    to_hf(ours, tmp_path)
    if position == "rotary":
        disc = RoFormerDiscriminator(tmp_path / "discriminator").float().eval()
        gen = RoFormerForMaskedLM.from_pretrained(tmp_path / "generator").float().eval()
        assert gen.cls.predictions.decoder.weight is gen.roformer.embeddings.word_embeddings.weight
    else:
        disc = ElectraForPreTraining.from_pretrained(tmp_path / "discriminator").float().eval()
        gen = ElectraForMaskedLM.from_pretrained(tmp_path / "generator").float().eval()
        assert gen.generator_lm_head.weight is gen.electra.embeddings.word_embeddings.weight  # tied in the reference
    return ours.train(), disc, gen


HF_NAMES = {  # (our prefix, reference model, its prefix); the shared embeddings live in both models
    "learned": [
        ("embeddings.", "disc", "electra.embeddings."),
        ("embeddings.", "gen", "electra.embeddings."),
        ("generator.electra.", "gen", "electra."),
        ("generator.generator_predictions.", "gen", "generator_predictions."),
        ("generator.lm_head_bias", "gen", "generator_lm_head.bias"),
        ("discriminator.electra.", "disc", "electra."),
        ("discriminator.discriminator_predictions.", "disc", "discriminator_predictions."),
    ],
    "rotary": [
        ("embeddings.", "disc", "roformer.embeddings."),
        ("embeddings.", "gen", "roformer.embeddings."),
        ("generator.electra.", "gen", "roformer."),
        ("generator.generator_predictions.", "gen", "cls.predictions.transform."),
        ("generator.lm_head_bias", "gen", "cls.predictions.bias"),
        ("discriminator.electra.", "disc", "roformer."),
        ("discriminator.discriminator_predictions.", "disc", ""),
    ],
}


def hf_name(ours: str, position: str) -> list[tuple[str, str]]:
    """(model, parameter) in the reference for one of our parameters."""
    pairs = [
        (which, theirs + ours[len(prefix) :]) for prefix, which, theirs in HF_NAMES[position] if ours.startswith(prefix)
    ]
    assert pairs, f"no transformers counterpart for {ours}"
    return pairs


@pytest.mark.parametrize("variant", sorted(OBJECTIVES))
def test_training_step_equals_the_transformers_reference(variant, tmp_path):
    objective = OBJECTIVES[variant]
    position = "rotary" if variant == "rotary" else "learned"
    ours, disc, gen = models(objective, tmp_path, position)
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

    # (RoFormer's sinusoid table is fixed by design, not a weight we train: nothing to compare)
    theirs = {
        "disc": {n: p for n, p in disc.named_parameters() if not n.endswith("embed_positions.weight")},
        "gen": {n: p for n, p in gen.named_parameters() if not n.endswith("embed_positions.weight")},
    }
    used = set()
    for name, p in ours.named_parameters():
        pairs = hf_name(name, position)
        used.update(pairs)
        expected = sum(theirs[which][n].grad for which, n in pairs)  # the shared embeddings get both models' grads
        torch.testing.assert_close(p.grad, expected, **TOL, msg=f"gradient of {name}")
    # every transformers parameter has its counterpart (the tied output weight is the word table)
    assert used == {(which, n) for which, params in theirs.items() for n in params}
