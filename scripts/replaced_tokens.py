"""What the generator puts in and what the discriminator catches, on the held-out set an ELECTRA run evaluates on.

    python scripts/replaced_tokens.py RUN [RUN ...]     (ELECTRA pretraining run folders or checkpoints)

For each run, on the same held-out sequences and masks as its evaluations (the corpus of its config): how often
the sample equals the original (it then counts as original), which tokens replace (the share among the 100 most
frequent training tokens), the discriminator's recall on replaced tokens split by what replaced them (a frequent
or a rarer token; the generator's own probability of its sample), its false-positive rate on originals, and a few
examples. docs/research-log.md section 0 has what it showed per budget.
"""

import sys
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from electra.data.pretraining_data import open_pretraining_data
from electra.modeling.electra import attention_bias
from electra.training.batches import batch_to_device, masked_batch
from electra.training.checkpoint import load_pretraining_model, resolve_checkpoint
from electra.training.evaluation import roc_auc, token_log_frequencies

torch.set_num_threads(1)
FREQUENT = 100


def inspect(path: str) -> None:
    model, cfg = load_pretraining_model(path)
    if cfg.objective.kind != "electra":
        print(f"{path}: {cfg.objective.kind}, not ELECTRA: nothing replaced")
        return
    data = open_pretraining_data(cfg.data, cfg.train.seed)
    tokens = data.tokens
    frequent = torch.zeros(tokens.vocab_size, dtype=torch.bool)
    log_freq = token_log_frequencies(data.train, tokens.vocab_size, tuple(tokens.special_ids))
    frequent[log_freq.topk(FREQUENT).indices] = True
    special = torch.tensor(tokens.special_ids)
    size = min(cfg.train.batch_size, 64)
    rows = {k: [] for k in ("orig", "sampled", "p", "logit", "replaced", "shown")}
    orig_logits, examples = [], []
    model.eval()
    with torch.inference_mode():
        for start in range(0, cfg.train.eval_batches * size, size):  # the held-out batches `evaluate` reads
            ids = np.arange(start, start + size, dtype=np.int64)
            batch = batch_to_device(data.eval.examples(ids), ids, torch.device("cpu"))
            masked = masked_batch(cfg, tokens, batch, special)
            mask = attention_bias(batch["attention_mask"])
            gen_logits, _, sampled, disc_input, labels = model.corrupt(
                batch["input_ids"], mask, batch["token_type_ids"], masked
            )
            logits = model.discriminator_logits(disc_input, batch["attention_mask"], batch["token_type_ids"])
            slot = masked.weights > 0
            replaced = labels.gather(1, masked.positions) > 0
            rows["orig"].append(masked.targets[slot])
            rows["sampled"].append(sampled[slot])
            rows["p"].append(gen_logits.softmax(-1).gather(-1, sampled[..., None])[..., 0][slot])
            rows["logit"].append(logits.gather(1, masked.positions)[slot])
            rows["replaced"].append(replaced[slot])
            rows["shown"].append(masked.is_masked[slot])
            untouched = (labels == 0) & masked.disc_mask
            untouched = untouched.scatter(1, masked.positions, False)  # originals never chosen as slots
            orig_logits.append(logits[untouched])
            if len(examples) < 4:
                b = int(replaced.any(1).float().argmax())
                examples.append((batch["input_ids"][b], disc_input[b], logits[b], labels[b]))
    r = {k: torch.cat(v) for k, v in rows.items()}
    originals = torch.cat(orig_logits)
    shown = r["shown"]
    rep = r["replaced"]
    caught = r["logit"] > 0
    print(f"== {resolve_checkpoint(Path(path))} ({model.cfg.vocab_size} tokens)")
    same = float((~rep[shown]).float().mean())
    print(f"   slots shown as [MASK]: {int(shown.sum())}; the sample equals the original at {same:.3f}")
    freq = frequent[r["sampled"]]
    share, share_orig = float(freq[rep].float().mean()), float(frequent[r["orig"]][rep].float().mean())
    print(
        f"   replaced tokens: {int(rep.sum())}; among the {FREQUENT} most frequent tokens: {share:.3f} "
        f"(of the originals they replaced: {share_orig:.3f})"
    )
    print(
        f"   recall on replaced tokens: {float(caught[rep].float().mean()):.3f}; false positives on untouched "
        f"originals: {float((originals > 0).float().mean()):.4f}"
    )
    y = torch.cat([torch.ones(int(rep.sum())), torch.zeros(len(originals))]).numpy()
    s = torch.cat([r["logit"][rep], originals]).numpy()
    print(f"   AUC replaced vs untouched originals: {roc_auc(y, s):.3f}")
    for name, sel in (("a frequent token", freq), ("a rarer token", ~freq)):
        n = int((rep & sel).sum())
        recall = float(caught[rep & sel].float().mean())
        print(f"   replaced by {name}: {n} ({n / max(1, int(rep.sum())):.2f}); recall {recall:.3f}")
    p = r["p"]
    for lo, hi in ((0.1, 1.01), (0.01, 0.1), (0.0, 0.01)):
        sel = rep & (p >= lo) & (p < hi)
        n = int(sel.sum())
        rec = float(caught[sel].float().mean()) if n else float("nan")
        print(f"   generator's probability of its sample in [{lo}, {min(hi, 1.0)}): {n} replaced, recall {rec:.3f}")
    tok = Tokenizer.from_file(str(tokens.path / "tokenizer.json")) if tokens.path is not None else None
    for original, corrupted, logits, labels in examples[:3]:
        words = []
        for o, c, lg, lb in zip(original.tolist(), corrupted.tolist(), logits.tolist(), labels.tolist(), strict=True):
            if c in tokens.special_ids and c != tokens.mask_id:
                continue
            piece = tok.id_to_token(c) if tok is not None else str(c)
            if lb > 0:
                was = tok.id_to_token(o) if tok is not None else str(o)
                piece = f"[{was}→{piece}{' CAUGHT' if lg > 0 else ''}]"
            elif lg > 0:
                piece = f"[{piece} FALSE ALARM]"
            words.append(piece)
        print("   e.g. " + " ".join(words))


for run in sys.argv[1:]:
    inspect(run)
