"""Where a collapsing ELECTRA discriminator loses rank: a step-by-step probe of one short pretraining run.

    OMP_NUM_THREADS=1 python scripts/collapse_probe.py --data CORPUS --out OUT [--preset cpu] [KEY=VALUE ...]

Builds the run as `electra pretrain` does (`setup`, `step_batches`, `train_step`, the config's optimizer and
learning-rate schedule; OUT/run is its run folder; the probes restore the RNG, so training is bit for bit the
same) and at steps 0, 10, ..., 300, then every 50 (before that step's update) records on a fixed batch of held-out
sequences (eval mode, the run's masking and sampling):
- effective rank (uncentred as `TokenStates`, and centred) and mean share of the discriminator's token states
  after the embedding LayerNorm and each attention / FFN LayerNorm, of the head's hidden layer, and of the
  generator's last layer;
- per block, before its LayerNorm: RMS norm, mean share and rank of the residual input and of the sublayer output
  (dense + dropout), their components along the common mean of their sum; LayerNorm gain and bias norms (and the
  bias's part of the output mean); output-dense bias norms; attention's constant W_o b_v + b_o;
- per head: attention entropy (nats, mean over queries; vs log of the number of keys), largest weight, and the
  mass on the query itself, its neighbours and the special tokens (a sink);
- discriminator logits (mean, std, AUC, recall), replaced fraction and its log-odds, the output bias, and the logit
  of the mean last-layer state;
- on that step's training batch: gradient norms per parameter group from the MLM loss alone and from the weighted
  disc loss alone (two autograd.grad calls on one forward), their cosine on the shared word table, and the
  combined (pre-clipping) gradient norm of every step trained;
- the generator's held-out cross-entropy at the [MASK] slots vs the token-frequency (unigram) one.
Output: OUT/probe.jsonl (a row per probe step; `train` rows as the loop logs them) and OUT/summary.txt.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from electra.config import load_config, temperature_at
from electra.modeling.electra import STAT_NAMES, attention_bias, metrics_from_stats, rotate
from electra.training.batches import batch_to_device, masked_batch
from electra.training.evaluation import TokenStates, roc_auc, token_log_frequencies
from electra.training.loop import setup, step_batches
from electra.training.optim import learning_rate, set_learning_rate
from electra.training.step import model_mask, train_step


def probe_steps(max_steps: int) -> list[int]:
    return sorted({*range(0, min(300, max_steps) + 1, 10), *range(300, max_steps + 1, 50), max_steps})


def entropy_rank(gram: torch.Tensor) -> float:
    s = torch.linalg.eigvalsh(gram).clamp(min=0).sqrt()
    p = s / s.sum()
    return float(torch.exp(-(p * p.clamp(min=1e-300).log()).sum()))


def states(h: torch.Tensor, keep: torch.Tensor) -> dict:
    """Effective rank (uncentred as TokenStates, and centred) and mean share of the states h[keep]."""
    ts = TokenStates()
    ts.add(h[keep])
    mean = ts.total / ts.count
    centred = ts.gram - ts.count * torch.outer(mean, mean)
    return {"rank": ts.effective_rank(), "crank": entropy_rank(centred), "share": ts.mean_share()}


def share(x: torch.Tensor) -> float:
    return float(x.mean(0).pow(2).sum() / x.pow(2).sum(1).mean())


def block(name: str, out, res: torch.Tensor, sub: torch.Tensor, keep: torch.Tensor, rec: dict) -> torch.Tensor:
    """LayerNorm(sub + res) as `Output.forward` in eval mode, recording what makes up its input and output."""
    y = out.LayerNorm(sub + res)
    r, s, o = res[keep].double(), sub[keep].double(), y[keep].double()
    u = (r + s).mean(0)
    u = u / u.norm()
    mo = o.mean(0)
    ln_b = out.LayerNorm.bias.double()
    rec[name] = {
        **states(y, keep),
        "sub_rank": states(sub, keep)["rank"],
        "res_rms": float(r.pow(2).sum(1).mean().sqrt()),
        "sub_rms": float(s.pow(2).sum(1).mean().sqrt()),
        "res_along_mean": float(r.mean(0) @ u),  # signed: the part of the common mean of the LN input from each
        "sub_along_mean": float(s.mean(0) @ u),
        "res_share": share(r),
        "sub_share": share(s),
        "pre_ln_share": share(r + s),
        "ln_gain_norm": float(out.LayerNorm.weight.norm()),
        "ln_bias_norm": float(ln_b.norm()),
        "out_mean_norm": float(mo.norm()),
        "ln_bias_along_out_mean": float(ln_b @ mo / mo.norm()),  # of |out_mean_norm|: the bias's part
        "dense_bias_norm": float(out.dense.bias.norm()),
    }
    return y


def attention_entropy(sa, x: torch.Tensor, mask, rope, keep: torch.Tensor, special: torch.Tensor) -> dict:
    """Per head, mean over queries: entropy (nats), largest weight, and the mass on the query itself, on its left and
    right neighbours and on special tokens ([CLS], [SEP]: a sink)."""
    B, T, H = x.shape
    shape = (B, T, sa.num_heads, H // sa.num_heads)
    q, k = (proj(x).view(shape).transpose(1, 2) for proj in (sa.query, sa.key))
    if rope is not None:
        q, k = rotate(q, rope), rotate(k, rope)
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-1, -2)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    p = scores.softmax(-1)
    ent = -(p * p.clamp(min=1e-30).log()).sum(-1)  # (B, nh, T)
    keys = torch.full((B, T), float(T)) if mask is None else mask[:, 0, 0, :].sum(-1, keepdim=True).expand(B, T)
    diag = p.diagonal(dim1=-2, dim2=-1)
    parts = {
        "entropy": ent,
        "max_weight": p.amax(-1),
        "self": diag,
        "prev": torch.cat([torch.zeros_like(diag[..., :1]), p.diagonal(-1, -2, -1)], -1),
        "next": torch.cat([p.diagonal(1, -2, -1), torch.zeros_like(diag[..., :1])], -1),
        "special": (p * special[:, None, None, :]).sum(-1),
    }
    rec = {k: [round(float(v[:, h][keep].mean()), 4) for h in range(sa.num_heads)] for k, v in parts.items()}
    return {**rec, "log_keys": float(keys.float().log()[keep].mean())}


@torch.no_grad()
def probe_heldout(model, batch: dict, masked, log_freq: torch.Tensor, special_ids: torch.Tensor) -> dict:
    model.eval()
    tt, mask = batch["token_type_ids"], attention_bias(batch["attention_mask"])
    _, ce, sampled, disc_input, labels = model.corrupt(batch["input_ids"], mask, tt, masked)
    keep, special = masked.disc_mask, torch.isin(disc_input, special_ids).float()
    rec: dict = {}
    gen_h = model.generator.electra(model.embeddings(masked.input_ids, tt), mask)
    rec["gen_last"] = states(gen_h, keep)
    slot = masked.weights > 0
    shown = slot & masked.is_masked
    rec["gen_ce"] = float(ce[shown].mean())
    rec["unigram_ce"] = float(-log_freq[masked.targets[shown]].mean())
    rec["sampled_correct"] = float((sampled == masked.targets)[slot].float().mean())

    d = model.discriminator.electra
    x = model.embeddings(disc_input, tt)
    ln = model.embeddings.LayerNorm
    rec["emb"] = {**states(x, keep), "ln_gain_norm": float(ln.weight.norm()), "ln_bias_norm": float(ln.bias.norm())}
    x = d.embeddings_project(x)
    rope = None if d.encoder.rotary is None else d.encoder.rotary(x.shape[1])
    for i, layer in enumerate(d.encoder.layer):
        att = layer.attention
        rec[f"L{i}.attn_heads"] = attention_entropy(att.self, x, mask, rope, keep, special)
        rec[f"L{i}.attn_const_norm"] = float(att.output.dense(att.self.value.bias).norm())  # W_o b_v + b_o
        x = block(f"L{i}.attn", att.output, x, att.output.dense(att.self(x, mask, rope)), keep, rec)
        x = block(f"L{i}.ffn", layer.output, x, layer.output.dense(layer.intermediate(x)), keep, rec)
    head = model.discriminator.discriminator_predictions
    logits = head(x)
    check = model.discriminator_logits(disc_input, batch["attention_mask"], tt)
    assert torch.allclose(logits, check, atol=1e-4), "the manual forward differs from the model's"
    z, y = logits[keep], labels[keep]
    frac = float(y.mean())
    rec["disc"] = {
        "logit_mean": float(z.mean()),
        "logit_std": float(z.std()),
        "logit_mean_replaced": float(z[y > 0].mean()),
        "logit_mean_original": float(z[y == 0].mean()),
        "auc": roc_auc(y.numpy(), z.numpy()),
        "recall": float(((z > 0) & (y > 0)).sum() / (y > 0).sum().clamp(min=1)),
        "replaced_fraction": frac,
        "prior_log_odds": math.log(frac / (1 - frac)),
        "out_bias": float(head.dense_prediction.bias),
        "logit_of_mean_state": float(head(x[keep].mean(0))),  # the logit the common mean state alone gets
        "head_hidden": states(torch.nn.functional.gelu(head.dense(x)), keep),
    }
    return rec


def group_of(name: str) -> str:
    if name == "embeddings.word_embeddings.weight":
        return "emb.word"
    if name.startswith("embeddings."):
        return "emb.type" if "token_type" in name else "emb.ln"
    parts = name.split(".")
    if name.startswith("discriminator.electra.encoder.layer."):
        return f"disc.L{parts[4]}"
    if name.startswith("discriminator.discriminator_predictions."):
        return "disc.head"
    return "disc.proj" if name.startswith("discriminator.") else "gen"


def probe_gradients(run, step: int) -> dict:
    """Gradient norms per group from the MLM loss alone and the weighted disc loss alone, on step `step`'s batch."""
    model, obj = run.raw_model, run.cfg.objective
    model.train()
    batches, masked = step_batches(run, step)
    b, m = batches[0], masked[0]
    out = model(b["input_ids"], model_mask(b), b["token_type_ids"], m)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    losses = {"mlm": obj.generator_weight * out.mlm_loss, "disc": obj.discriminator_weight * out.disc_loss}
    rec, word = {}, {}
    for i, (key, loss) in enumerate(losses.items()):
        grads = torch.autograd.grad(loss, params, retain_graph=i == 0, allow_unused=True)
        sq: dict[str, float] = {}
        for (name, _), g in zip(named, grads, strict=True):
            if g is not None:
                sq[group_of(name)] = sq.get(group_of(name), 0.0) + float(g.double().pow(2).sum())
                if name == "embeddings.word_embeddings.weight":
                    word[key] = g.double().flatten()
        rec[key] = {k: math.sqrt(v) for k, v in sorted(sq.items())}
        rec[key]["total"] = math.sqrt(sum(sq.values()))
        rec[key]["loss"] = float(loss.detach())
    rec["word_cos"] = float(word["mlm"] @ word["disc"] / (word["mlm"].norm() * word["disc"].norm()))
    rec["sum_total"] = math.sqrt(sum(rec[k]["total"] ** 2 for k in losses))  # ~ before clipping (ignores overlap)
    return rec


def summarise(rows: list[dict], layers: int) -> str:
    cols = ("step", 5), ("genCE", 6), ("uniCE", 6), ("AUC", 5), ("zmean", 6), ("zstd", 5), ("bias", 6), ("zbar", 5)
    head = " ".join(f"{k:>{w}}" for k, w in cols) + f" {'head':>5}"
    head += (
        f" {'emb':>5} " + " ".join(f"{f'L{i}{s}':>5}" for i in range(layers) for s in "af") + f" {'shr':>5} {'gen':>5} "
    )
    head += f"{'H0':>5} {'Hl':>5} {'d/mW':>5} {'cosW':>5} {'d/mL0':>6} {'dL0':>6} {'dLl':>6}"
    lines = [
        "zbar: the logit of the mean last-layer state; head: rank of the disc head's hidden layer; "
        "effective rank (uncentred) after each LayerNorm (La: attention block, Lf: FFN block); shr: mean share at "
        "the last layer; H0/Hl: attention entropy (nats, mean of heads) in layer 0 / last; d/mW: |grad disc| / "
        "|grad mlm| on the word table; cosW: their cosine; d/mL0: |grad disc L0| / |grad mlm word|; dL0, dLl: disc "
        "gradient norm into layer 0 / the last layer",
        head,
    ]
    for r in rows:
        if "probe" not in r:
            continue
        p, g, last = r["probe"], r["grads"], layers - 1
        ranks = " ".join(f"{p[f'L{i}.{s}']['rank']:5.1f}" for i in range(layers) for s in ("attn", "ffn"))
        h0 = np.mean(p["L0.attn_heads"]["entropy"])
        hl = np.mean(p[f"L{last}.attn_heads"]["entropy"])
        lines.append(
            f"{r['step']:5d} {p['gen_ce']:6.2f} {p['unigram_ce']:6.2f} {p['disc']['auc']:5.3f} "
            f"{p['disc']['logit_mean']:6.2f} {p['disc']['logit_std']:5.2f} {p['disc']['out_bias']:6.2f} "
            f"{p['disc']['logit_of_mean_state']:5.2f} {p['disc']['head_hidden']['rank']:5.1f} "
            f"{p['emb']['rank']:5.1f} {ranks} {p[f'L{last}.ffn']['share']:5.2f} {p['gen_last']['rank']:5.1f} "
            f"{h0:5.2f} {hl:5.2f} {g['disc']['emb.word'] / g['mlm']['emb.word']:5.2f} {g['word_cos']:5.2f} "
            f"{g['disc']['disc.L0'] / g['mlm']['emb.word']:6.2f} {g['disc']['disc.L0']:6.3f} "
            f"{g['disc'][f'disc.L{last}']:6.3f}"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="a folder written by `electra data prepare`")
    ap.add_argument("--out", required=True, help="output folder (OUT/run is the run folder)")
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--probe-size", type=int, default=256, help="held-out sequences in the probe batch")
    ap.add_argument("overrides", nargs="*", help="config overrides KEY=VALUE, as `electra pretrain --set`")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(args.preset, [*args.overrides, f"data.path={args.data}"])
    run = setup(cfg, out / "run", device="cpu")
    try:
        cfg, t = run.cfg, run.cfg.train
        data, tokens = run.data, run.tokens
        log_freq = token_log_frequencies(data.train, tokens.vocab_size, tuple(tokens.special_ids)).float()
        ids = np.arange(args.probe_size, dtype=np.int64)
        batch = batch_to_device(data.eval.examples(ids), ids, run.device)
        masked = masked_batch(cfg, tokens, batch, run.special)
        params = list(run.raw_model.parameters())
        layers = cfg.model.num_layers
        wanted, rows = set(probe_steps(t.max_steps)), []
        window, norms = torch.zeros(len(STAT_NAMES)), []
        start = time.perf_counter()
        with open(out / "probe.jsonl", "w") as f:
            for step in range(t.max_steps + 1):
                if step in wanted:
                    rng = torch.get_rng_state()
                    row = {"step": step, "lr": learning_rate(step, cfg)}
                    row["probe"] = probe_heldout(run.raw_model, batch, masked, log_freq, run.special)
                    row["grads"] = probe_gradients(run, step)
                    row["seconds"] = round(time.perf_counter() - start, 1)
                    row["clip_norms"], norms = norms, []  # combined gradient norms (before clipping) since the last
                    torch.set_rng_state(rng)
                    run.raw_model.train()
                    rows.append(row)
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                if step == t.max_steps:
                    break
                set_learning_rate(run.optimizer, learning_rate(step, cfg))
                if cfg.objective.temperature_start is not None:
                    run.raw_model.set_temperature(temperature_at(step, cfg.objective))
                batches, m = step_batches(run, step)
                res = train_step(
                    run.model, run.optimizer, run.scaler, params, batches, m, run.world, run.autocast, t.grad_clip
                )
                window += res.stats
                norms.append(round(float(res.grad_norm), 3))
                if (step + 1) % t.log_every == 0:
                    train = metrics_from_stats(dict(zip(STAT_NAMES, window.tolist(), strict=True)))
                    f.write(json.dumps({"step": step + 1, "train": train}) + "\n")
                    window.zero_()
        text = summarise(rows, layers)
        text += f"\n{t.max_steps} steps with probes in {time.perf_counter() - start:.0f} s\n"
        (out / "summary.txt").write_text(text)
        print(text)
    finally:
        if run.lock is not None:
            run.lock.release()


if __name__ == "__main__":
    main()
