"""Is the discriminator's collapse ours? An independent ELECTRA built from transformers' RoFormer classes, trained by
a minimal loop written here on exactly the batches, masks and sampling noise of `electra pretrain`, with held-out
metrics computed as electra/training/evaluation.py computes them (one JSON line per evaluation in OUT/metrics.jsonl).

    .venv/bin/python scripts/reference_electra.py --data DATA --out OUT --seed 0 --steps 1500 --eval-every 50
    .venv/bin/python scripts/reference_electra.py --data DATA --out OUT --check   # parity with ours, dropout 0

Taken from the project: the config (`cpu` preset at 4 x 128 with a 4096 vocabulary), the examples
(`open_pretraining_data`), the masks (`mask_tokens`) and the generator's keyed sampling noise
(`sample_replacements`), and `roc_auc` / `TokenStates` for the metrics. Written here: the models (transformers'
RoFormerForMaskedLM generator, RoFormerModel discriminator + a Linear-GELU-Linear head, one shared embedding block),
the losses, OFF's Adam (no bias correction, decoupled decay), its schedule and the evaluation loop. Generator
logits are computed at the chosen slots only (the hidden states gathered there, then the MLM head).
Known differences from ours: transformers' init (normal 0.02; the head's Linears likewise) instead of OFF's
truncated normal + Glorot; torch's bernoulli dropout instead of our rand_like mask; word_embeddings has padding_idx.
`--check` builds our run (`setup`) with dropout 0 beside this one, copies our weights into it, and compares the
batches, the forward pass, 20 training steps and the evaluation.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import RoFormerConfig, RoFormerForMaskedLM, RoFormerModel

from electra.config import load_config
from electra.data.pretraining_data import open_pretraining_data
from electra.modeling.masking import sample_replacements
from electra.training.batches import batch_to_device, masked_batch
from electra.training.evaluation import TokenStates, roc_auc

SIZE = ["model.num_layers=4", "model.hidden_size=128", "model.num_heads=2", "model.intermediate_size=512"]
SIZE += ["model.embedding_size=128", "train.precision=fp32", "train.decay_steps=9148"]
NO_DECAY = ("LayerNorm", "layer_norm", "bias")


def build_models(m, pad_id: int) -> nn.ModuleDict:
    """gen (RoFormerForMaskedLM), disc (RoFormerModel) sharing gen's embeddings module, head (Linear-GELU-Linear)."""

    def config(size) -> RoFormerConfig:
        return RoFormerConfig(
            vocab_size=m.vocab_size,
            embedding_size=m.embedding_size,
            hidden_size=size.hidden_size,
            num_hidden_layers=size.num_layers,
            num_attention_heads=size.num_heads,
            intermediate_size=size.intermediate_size,
            max_position_embeddings=m.max_position_embeddings,
            type_vocab_size=m.type_vocab_size,
            hidden_dropout_prob=m.dropout,
            attention_probs_dropout_prob=m.attention_dropout,
            layer_norm_eps=m.layer_norm_eps,
            hidden_act="gelu",
            initializer_range=0.02,
            pad_token_id=pad_id,
        )

    gen, disc = RoFormerForMaskedLM(config(m.generator)), RoFormerModel(config(m.discriminator))
    d = m.discriminator
    disc.embeddings = gen.roformer.embeddings  # ELECTRA: one embedding block, the generator's object
    head = nn.Sequential(nn.Linear(d.hidden_size, d.hidden_size), nn.GELU(), nn.Linear(d.hidden_size, 1))
    for lin in (head[0], head[2]):  # as transformers' _init_weights would
        nn.init.normal_(lin.weight, std=0.02), nn.init.zeros_(lin.bias)
    shared = gen.roformer.embeddings
    assert disc.embeddings is shared and gen.cls.predictions.decoder.weight is shared.word_embeddings.weight
    assert not hasattr(disc, "embeddings_project") and hasattr(gen.roformer, "embeddings_project")
    return nn.ModuleDict({"gen": gen, "disc": disc, "head": head})


def batch_at(cfg, data, ids: np.ndarray, source: str, special: torch.Tensor):
    batch = batch_to_device(getattr(data, source).examples(ids), ids, torch.device("cpu"))
    return batch, masked_batch(cfg, data.tokens, batch, special)


def disc_pass(models: nn.ModuleDict, ids, am, tt):
    """(B, T, H) last-layer states and (B, T) replaced-token logits of the discriminator."""
    hd = models["disc"](ids, attention_mask=am, token_type_ids=tt).last_hidden_state
    return hd, models["head"](hd).squeeze(-1)


def forward(models: nn.ModuleDict, batch: dict, m) -> dict:
    """Generator at the slots, keyed sampling, discriminator on every token; losses as OFF (CE mean over real
    slots, BCE mean over non-pad tokens)."""
    gen, ids, am, tt = models["gen"], batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
    h = gen.roformer(m.input_ids, attention_mask=am, token_type_ids=tt).last_hidden_state
    h = h.gather(1, m.positions[..., None].expand(-1, -1, h.shape[-1]))  # (B, N, Hg)
    logits = gen.cls(h)  # (B, N, V)
    ce = F.cross_entropy(logits.flatten(0, 1), m.targets.flatten(), reduction="none").view(m.weights.shape)
    real = m.weights > 0
    sampled = sample_replacements(logits.detach(), m.targets, m.keys, 1.0)
    disc_input = ids.scatter(1, m.positions, torch.where(real, sampled, m.targets))
    labels = (disc_input != ids).float()
    hd, disc_logits = disc_pass(models, disc_input, am, tt)
    dm = am.bool()
    mlm = (ce * m.weights).sum() / m.weights.sum().clamp(min=1)
    bce = F.binary_cross_entropy_with_logits(disc_logits[dm], labels[dm])
    return dict(mlm=mlm, bce=bce, ce=ce, logits=logits, disc_logits=disc_logits, labels=labels, hd=hd, dm=dm)


class OffAdam:
    """google-research/electra optimization.py AdamWeightDecayOptimizer: no bias correction, decoupled decay."""

    def __init__(self, models: nn.Module, wd: float, b1: float, b2: float, eps: float):
        named = [(n, p) for n, p in models.named_parameters() if p.requires_grad]  # shared ones once
        self.params = [(p, 0.0 if any(k in n for k in NO_DECAY) else wd) for n, p in named]
        self.m = [torch.zeros_like(p) for p, _ in self.params]
        self.v = [torch.zeros_like(p) for p, _ in self.params]
        self.b1, self.b2, self.eps = b1, b2, eps

    @torch.no_grad()
    def step(self, lr: float) -> None:
        for (p, wd), m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue
            m.mul_(self.b1).add_(p.grad, alpha=1 - self.b1)
            v.mul_(self.b2).addcmul_(p.grad, p.grad, value=1 - self.b2)
            update = m / (v.sqrt() + self.eps)
            if wd:
                update += wd * p
            p.sub_(lr * update)
            p.grad = None


def off_lr(step: int, t) -> float:
    return t.lr * max(0.0, 1.0 - step / t.decay_steps) * min(1.0, step / t.warmup_steps)


def train_step(models, opt: OffAdam, batch, m, step: int, cfg) -> dict:
    out = forward(models, batch, m)
    loss = cfg.objective.generator_weight * out["mlm"] + cfg.objective.discriminator_weight * out["bce"]
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p, _ in opt.params], cfg.train.grad_clip)
    opt.step(off_lr(step, cfg.train))
    return out


@torch.no_grad()
def evaluate(models, cfg, data, special) -> dict:
    """As electra/training/evaluation.py: held-out examples 0..eval_batches*64, whole batches, eval mode."""
    models.eval()
    size, tot = min(cfg.train.batch_size, 64), dict.fromkeys(("ce", "w", "mc", "mn", "tp", "pos"), 0.0)
    scores, labels, states = [], [], TokenStates()
    for start in range(0, cfg.train.eval_batches * size, size):
        batch, m = batch_at(cfg, data, np.arange(start, start + size, dtype=np.int64), "eval", special)
        o = forward(models, batch, m)
        dm, shown = o["dm"], m.weights * m.is_masked.float()
        tot["ce"] += float((o["ce"] * m.weights).sum())
        tot["w"] += float(m.weights.sum())
        tot["mc"] += float(((o["logits"].argmax(-1) == m.targets).float() * shown).sum())
        tot["mn"] += float(shown.sum())
        tot["tp"] += float(((o["disc_logits"] > 0) & (o["labels"] > 0) & dm).sum())
        tot["pos"] += float(((o["labels"] > 0) & dm).sum())
        scores.append(o["disc_logits"][dm])
        labels.append(o["labels"][dm])
        states.add(o["hd"][dm])
    models.train()
    return {
        "eval_disc_auc": roc_auc(torch.cat(labels).numpy(), torch.cat(scores).numpy()),
        "eval_disc_recall": tot["tp"] / tot["pos"],
        "eval_disc_effective_rank": states.effective_rank(),
        "eval_disc_mean_share": states.mean_share(),
        "eval_mlm_loss": tot["ce"] / tot["w"],
        "eval_masked_accuracy": tot["mc"] / tot["mn"],
    }


def load(data_dir: str, seed: int, extra: list[str]):
    cfg = load_config("cpu", [*SIZE, f"data.path={data_dir}", f"train.seed={seed}", *extra])
    data = open_pretraining_data(cfg.data, cfg.train.seed)
    torch.manual_seed(seed)
    models = build_models(cfg.model, data.tokens.pad_id)  # vocab: the preset's 4096, which the tokenizer's must be
    assert cfg.model.vocab_size == data.tokens.vocab_size
    return cfg, data, models, torch.tensor(data.tokens.special_ids)


def copy_ours_into(ours: nn.Module, models: nn.ModuleDict) -> None:
    """Our parameter names -> these modules' (both follow transformers' names below the prefixes)."""
    rules = [("embeddings.", "gen.roformer.embeddings."), ("generator.electra.", "gen.roformer."),
             ("generator.generator_predictions.", "gen.cls.predictions.transform."),
             ("generator.lm_head_bias", "gen.cls.predictions.decoder.bias"), ("discriminator.electra.", "disc."),
             ("discriminator.discriminator_predictions.dense.", "head.0."),
             ("discriminator.discriminator_predictions.dense_prediction.", "head.2.")]  # fmt: skip
    mine, done = dict(models.named_parameters(remove_duplicate=False)), set()
    with torch.no_grad():
        for name, p in ours.named_parameters():
            src, dst = next((s, d) for s, d in rules if name.startswith(s))
            mine[dst + name[len(src) :]].copy_(p)
            done.add(id(mine[dst + name[len(src) :]]))
    assert all(id(p) in done for p in models.parameters() if p.requires_grad)


def check(args) -> None:
    from electra.training.loop import setup, step_batches
    from electra.training.optim import learning_rate, set_learning_rate
    from electra.training.step import train_step as our_step

    off = ["model.dropout=0.0", "model.attention_dropout=0.0", "train.max_steps=20"]
    cfg, data, models, special = load(args.data, args.seed, off)
    run = setup(cfg, Path(args.out) / "ours-check", device="cpu")
    copy_ours_into(run.raw_model, models)
    opt = OffAdam(models, cfg.train.weight_decay, cfg.train.beta1, cfg.train.beta2, cfg.train.eps)
    params = list(run.raw_model.parameters())
    for step in range(20):
        (b0,), (m0,) = step_batches(run, step)
        b1, m1 = batch_at(cfg, data, np.arange(step * 64, step * 64 + 64, dtype=np.int64), "train", special)
        for k in ("input_ids", "attention_mask", "token_type_ids"):
            assert torch.equal(b0[k], b1[k]), (step, k)
        for k in ("input_ids", "positions", "weights", "targets", "is_masked", "keys", "disc_mask"):
            assert torch.equal(getattr(m0, k), getattr(m1, k)), (step, k)
        if step in (0, 7):
            print(f"step {step}: batch and masks identical; pads {int((b0['attention_mask'] == 0).sum())}, real slots "
                  f"{int(m0.weights.sum())}, first row positions {m0.positions[0].tolist()}")  # fmt: skip
        if step == 0:  # the same weights, eval mode: the discriminator on the clean batch, the generator at the slots
            models.eval(), run.raw_model.eval()
            with torch.no_grad():
                inputs = b0["input_ids"], b0["attention_mask"], b0["token_type_ids"]
                d = run.raw_model.discriminator_logits(*inputs) - disc_pass(models, *inputs)[1]
                g = run.raw_model.generator_logits(m0.input_ids, *inputs[1:])
                g = g.gather(1, m0.positions[..., None].expand(-1, -1, g.shape[-1])) - forward(models, b1, m1)["logits"]
                print(f"eval-mode max |diff|: disc logits {d.abs().max():.2e}, generator logits {g.abs().max():.2e}")
            models.train(), run.raw_model.train()
        set_learning_rate(run.optimizer, learning_rate(step, cfg))
        ours = our_step(run.model, run.optimizer, run.scaler, params, [b0], [m0], 1, run.autocast, 1.0)
        o = train_step(models, opt, b1, m1, step, cfg)
        mine = (o["mlm"] + 50 * o["bce"]).item()
        print(f"train step {step}: loss ours {float(ours.loss):.6f} ref {mine:.6f} lr {off_lr(step, cfg.train):.2e}")
    a = evaluate(models, cfg, data, special)
    from electra.training.evaluation import evaluate as our_eval

    b = our_eval(run.raw_model, run.data.eval, cfg, run.tokens, run.device, run.autocast, chunk=64)
    for k in ("disc_auc", "disc_recall", "disc_effective_rank", "disc_mean_share", "mlm_loss", "masked_accuracy"):
        print(f"eval after 20 steps {k}: ours {b[k]:.6f} ref {a['eval_' + k]:.6f}")
    run.lock.release()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a prepared corpus folder (electra data prepare)")
    ap.add_argument("--out", required=True, help="output folder (metrics.jsonl)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--check", action="store_true", help="compare with our run's batches, forward and 20 steps")
    args = ap.parse_args()
    if args.check:
        return check(args)
    cfg, data, models, special = load(args.data, args.seed, [f"train.max_steps={args.steps}"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").write_text("")
    t = cfg.train
    opt = OffAdam(models, t.weight_decay, t.beta1, t.beta2, t.eps)
    models.train()
    start, window = time.perf_counter(), []
    for step in range(args.steps):
        ids = np.arange(step * t.batch_size, (step + 1) * t.batch_size, dtype=np.int64)
        o = train_step(models, opt, *batch_at(cfg, data, ids, "train", special), step, cfg)
        window.append((o["mlm"].item(), o["bce"].item()))
        done = step + 1
        if done % args.eval_every == 0 or done == args.steps:
            row = {"step": done, **evaluate(models, cfg, data, special)}
            (row["train_mlm_loss"], row["train_disc_loss"]), window = np.mean(window, 0).tolist(), []
            row["seconds"] = round(time.perf_counter() - start, 1)
            with open(out / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
