"""Real English leaves the token-frequency plateau on a CPU: the `cpu` preset's masked LM on the Wikipedia sample
(WordPiece 4096 trained on it, documents held out for evaluation), and the same run with learned absolute
positions, which stays on the plateau (docs/research-log.md has the curves). Slow tier; skips without the sample.

The plateau: the loss at the held-out [MASK] slots that the training text's token frequencies score there
(`eval_mlm_unigram_loss`, ~6.57 nats here). A model that knows nothing about context sits on it.
"""

import json
from pathlib import Path

import pytest

from electra.config import load_config
from electra.training.loop import pretrain

# The first 1000 steps of the preset's own schedule (train.decay_steps keeps the schedule's length; a run whose
# learning rate decays to 0 within its own 1000 steps leaves the plateau later). At the preset's length of 32 the
# masked LM leaves the plateau between steps ~300 and ~600 and is 0.99-1.12 nats under the frequencies at step 1000
# in each of six seeds (docs/research-log.md); at length 128 when it left varied from step ~600 to past 1500 with the
# seed and the machine (0.01-0.93 nats under at step 1500), which is why the preset trains on short sequences.
STEPS = 1000
SHORT = [
    f"train.max_steps={STEPS}",
    f"train.decay_steps={load_config('cpu').train.max_steps}",
    f"train.eval_every={STEPS}",
    f"train.save_every={STEPS}",
    f"train.log_every={STEPS // 4}",
    "objective.kind=mlm",
]


@pytest.fixture(scope="module")
def wiki4k(tmp_path_factory) -> Path:
    from electra.data.prepare import prepare
    from electra.data.tokenizer import train_tokenizer
    from tests.helpers import SHARED_DATA

    text = SHARED_DATA / "corpus" / "wikipedia_en_sample.txt"
    if not text.exists():
        pytest.skip(f"the Wikipedia sample is not at {text}")
    root = tmp_path_factory.mktemp("wiki4k")
    train_tokenizer("wordpiece", 4096, [str(text)], root / "tok", show_progress=False)
    prepare([str(text)], root / "tok", root / "data", show_progress=False)
    return root / "data"


def held_out(overrides: list[str], data: Path, run: Path) -> dict:
    cfg = load_config("cpu", [*SHORT, f"data.path={data}", *overrides])
    pretrain(cfg, run)
    evals = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "eval_masked_loss" in r]
    assert evals[-1]["step"] == STEPS
    return evals[-1]


def under_frequencies(metrics: dict) -> float:
    """Nats by which the held-out [MASK] loss is below what token frequencies score at the same slots."""
    return metrics["eval_mlm_unigram_loss"] - metrics["eval_masked_loss"]


@pytest.mark.slow
def test_the_cpu_presets_masked_lm_leaves_the_plateau_on_english(wiki4k, tmp_path):
    metrics = held_out([], wiki4k, tmp_path / "run")
    # measured at step 1000 of the 9000-step schedule (AMD EPYC Zen 5, ~50 s): 1.05 nats under the frequencies
    # (6.57 nats), [MASK] accuracy 0.098 vs the most frequent token's 0.037; 0.99-1.12 over six training seeds
    assert under_frequencies(metrics) > 0.5, metrics
    assert metrics["eval_masked_accuracy"] > metrics["eval_mlm_majority_rate"] + 0.02, metrics


@pytest.mark.slow
def test_learned_positions_stay_on_the_plateau(wiki4k, tmp_path):
    """The same run with learned absolute positions (OFF's architecture) knows nothing about context yet: this
    documents the plateau, it does not guard a feature. Measured at step 1000: 0.004 nats *over* the frequencies
    (6.571 vs 6.567), [MASK] accuracy 0.043 (the most frequent token's rate: 0.037); 0.01 over in two other seeds."""
    metrics = held_out(["model.position_embedding=learned"], wiki4k, tmp_path / "run")
    assert abs(under_frequencies(metrics)) < 0.1, metrics
