"""Is the masked-LM plateau ours? Train transformers' own ElectraForMaskedLM, at the size of a preset, on the same
prepared examples with a plain PyTorch loop, and print its held-out loss at [MASK] slots next to what the training
text's token frequencies score there (the plateau). Numbers: docs/research-log.md.

    .venv/bin/python scripts/plateau_reference.py --data runs/wiki4k --seq-len 128 --batch-size 16 --steps 1500

Nothing here comes from this project's model, masking or optimizer: BERT's masking (15% of the non-special tokens;
80% [MASK], 10% random, 10% kept) drawn with torch's generator, AdamW with linear warmup and decay, gradient
clipping at 1. Only the examples (`open_pretraining_data`) and the frequency baseline are the project's.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn.functional as F
from transformers import ElectraConfig, ElectraForMaskedLM

from electra.config import load_config
from electra.data.pretraining_data import open_pretraining_data
from electra.training.evaluation import token_log_frequencies


def bert_masking(
    ids: torch.Tensor, special: torch.Tensor, vocab_size: int, mask_id: int, g: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input, training labels, labels at the slots shown as [MASK] only); -100 where no loss is taken."""
    chosen = ~torch.isin(ids, special) & (torch.rand(ids.shape, generator=g) < 0.15)
    r = torch.rand(ids.shape, generator=g)
    shown_mask, shown_random = chosen & (r < 0.8), chosen & (r >= 0.8) & (r < 0.9)
    inputs = ids.masked_fill(shown_mask, mask_id)
    inputs[shown_random] = torch.randint(0, vocab_size, (int(shown_random.sum()),), generator=g)
    return inputs, ids.masked_fill(~chosen, -100), ids.masked_fill(~shown_mask, -100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a prepared corpus folder (electra data prepare)")
    ap.add_argument("--preset", default="tiny", help="the model size to copy (default tiny)")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--init-range", type=float, default=0.02, help="std of the initial weights")
    ap.add_argument("--eval-examples", type=int, default=512)
    args = ap.parse_args()

    torch.manual_seed(0)
    cfg = load_config(args.preset, [f"data.path={args.data}", f"data.seq_len={args.seq_len}"])
    data, m = open_pretraining_data(cfg.data, seed=0), cfg.model
    tok, vocab = data.tokens, data.tokens.vocab_size
    model = ElectraForMaskedLM(
        ElectraConfig(
            vocab_size=vocab,
            embedding_size=m.embedding_size,
            hidden_size=m.hidden_size,
            num_hidden_layers=m.num_layers,
            num_attention_heads=m.num_heads,
            intermediate_size=m.intermediate_size,
            max_position_embeddings=args.seq_len,
            initializer_range=args.init_range,
        )
    )
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / args.warmup) * max(0.0, 1 - s / args.steps)
    )
    special = torch.tensor(tok.special_ids)

    held_out = data.eval.examples(np.arange(args.eval_examples))
    eval_ids, eval_attention = torch.from_numpy(held_out["input_ids"]), torch.from_numpy(held_out["attention_mask"])
    eval_inputs, _, eval_targets = bert_masking(eval_ids, special, vocab, tok.mask_id, torch.Generator().manual_seed(2))
    log_freq = token_log_frequencies(data.train, vocab, tuple(tok.special_ids))
    slots = eval_targets[eval_targets != -100]
    print(f"token frequencies at the {len(slots)} held-out [MASK] slots: {-log_freq[slots].mean().item():.3f} nats")

    g = torch.Generator().manual_seed(1)
    for step in range(args.steps + 1):
        if step % max(1, args.steps // 6) == 0 or step == args.steps:
            model.eval()
            with torch.no_grad():
                total = sum(
                    F.cross_entropy(
                        model(
                            input_ids=eval_inputs[i : i + 64], attention_mask=eval_attention[i : i + 64]
                        ).logits.flatten(0, 1),
                        eval_targets[i : i + 64].flatten(),
                        reduction="sum",
                    ).item()
                    for i in range(0, len(eval_inputs), 64)
                )
            print(f"step {step}: held-out loss at [MASK] {total / len(slots):.3f} nats", flush=True)
            model.train()
        if step == args.steps:
            break
        batch = data.train.examples(np.arange(step * args.batch_size, (step + 1) * args.batch_size))
        inputs, labels, _ = bert_masking(torch.from_numpy(batch["input_ids"]), special, vocab, tok.mask_id, g)
        loss = model(input_ids=inputs, attention_mask=torch.from_numpy(batch["attention_mask"]), labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()


if __name__ == "__main__":
    main()
