"""What a pretrained body's [CLS] vector and mean-pooled vector carry about SST-2, before any fine-tuning.

    python scripts/probe_features.py GLUE_DIR MODEL [MODEL ...]     (run folders, checkpoints or HF folders)

For each model: a logistic regression on the frozen vectors of 8000 SST-2 training sentences, scored on the dev
set (the linear information the body hands the head), the mean cosine between dev sentences' vectors
(anisotropy: 1 means every sentence gets the same direction) and their mean norm. docs/glue.md has what it showed.
"""

import csv
import sys
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from tokenizers import Tokenizer

from electra.training.checkpoint import load_discriminator

torch.set_num_threads(1)
GLUE = Path(sys.argv[1])


def read(p, n=None):
    rows = list(csv.DictReader(open(p), delimiter="\t", quoting=csv.QUOTE_NONE))
    return rows[:n] if n else rows


train, dev = read(GLUE / "SST-2" / "train.tsv", 8000), read(GLUE / "SST-2" / "dev.tsv")


def feats(body, tok, rows):
    cls, mean = [], []
    with torch.no_grad():
        for i in range(0, len(rows), 256):
            enc = tok.encode_batch([r["sentence"] for r in rows[i : i + 256]])
            L = min(128, max(len(e.ids) for e in enc))
            ids = torch.zeros(len(enc), L, dtype=torch.long)
            am = torch.zeros_like(ids)
            for j, e in enumerate(enc):
                x = e.ids[:L]
                ids[j, : len(x)] = torch.tensor(x)
                am[j, : len(x)] = 1
            h = body(ids, am)
            cls.append(h[:, 0])
            m = am[..., None].float()
            mean.append((h * m).sum(1) / m.sum(1))
    return torch.cat(cls).numpy(), torch.cat(mean).numpy()


for path in sys.argv[2:]:
    body, cfg, tokdir = load_discriminator(path)
    body.eval()
    tok = Tokenizer.from_file(str(tokdir / "tokenizer.json"))
    ytr = np.array([int(r["label"]) for r in train])
    ydv = np.array([int(r["label"]) for r in dev])
    (ctr, mtr), (cdv, mdv) = feats(body, tok, train), feats(body, tok, dev)
    out = [path]
    for name, a, b in (("cls", ctr, cdv), ("mean", mtr, mdv)):
        n = b / np.linalg.norm(b, axis=1, keepdims=True)
        cos = (n @ n.T)[np.triu_indices(len(n), 1)].mean()
        clf = LogisticRegression(max_iter=2000, C=1.0).fit((a - a.mean(0)) / (a.std(0) + 1e-6), ytr)
        acc = clf.score((b - a.mean(0)) / (a.std(0) + 1e-6), ydv)
        out.append(
            f"{name}: probe acc {100 * acc:.1f}, mean cosine {cos:.3f}, norm {np.linalg.norm(b, axis=1).mean():.1f}"
        )
    print(" | ".join(out), flush=True)
