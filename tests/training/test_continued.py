"""Continued pretraining (`electra pretrain --init SOURCE`, issue 48): a run that starts from a model you already
have. From a transformers ELECTRA pair built here (no network) and from a run of ours, the first step's losses are
the source's on that batch (computed here without the loop: with transformers for the pair), under a fresh optimizer
and schedule; a discriminator alone gets a fresh generator of the configured size; a contradicting shape and a
corpus of another tokenizer are refused in one line; run.json and the transformers export record the source; a
killed continued run resumes bit for bit; the refusals of `--resume` point to `--init`. All on CPU, tiny models."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from electra.config import load_config
from electra.data.pretraining_data import open_pretraining_data
from electra.modeling.electra import build_model, metrics_from_stats
from electra.modeling.flops import off_train_flops
from electra.modeling.masking import sample_replacements, scatter_replacements
from electra.training.batches import host_batch, masked_batch
from electra.training.checkpoint import list_checkpoints, load_model_checkpoint, read_config
from electra.training.continued import Init
from electra.training.loop import pretrain
from electra.training.optim import learning_rate
from electra.utils.files import read_checksums, sha256_file
from tests.helpers import KILLED, assert_same_state, cli_main, die_at, metric_rows, prepared_synthetic_corpus

VOCAB = 300
NO_DROPOUT = ["model.dropout=0.0", "model.attention_dropout=0.0"]
FAST = ["train.batch_size=8", "train.log_every=1", "train.eval_every=1000", "train.eval_batches=1"]
CONTINUE = [*FAST, "train.max_steps=3", "train.save_every=1", "train.warmup_steps=2"]
"""A continued run: 3 steps, a checkpoint after each, a 2-step warmup of its own (its first update has lr 0)."""
SHORT = [arg for setting in CONTINUE for arg in ("--set", setting)]
"""CONTINUE as flags: a refusal that failed to refuse runs 3 steps, not the default config's million."""


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, Path]:
    """Two prepared corpora of the built-in language, each with a byte-level BPE of its own (300 tokens)."""
    root = tmp_path_factory.mktemp("corpora")
    (root / "a").mkdir(), (root / "b").mkdir()
    return {
        "a": prepared_synthetic_corpus(root / "a", num_documents=40, vocab_size=VOCAB),
        "b": prepared_synthetic_corpus(root / "b", num_documents=50, vocab_size=VOCAB),
    }


@pytest.fixture(scope="module")
def base(tmp_path_factory, corpora) -> Path:
    """A finished 2-step `tiny` run on corpus a, without dropout (so that a step's losses can be recomputed)."""
    run = tmp_path_factory.mktemp("base") / "run"
    cfg = load_config(
        "tiny", [*FAST, *NO_DROPOUT, "train.max_steps=2", "train.save_every=2", f"data.path={corpora['a']}"]
    )
    pretrain(cfg, run, progress=False)
    return run


@pytest.fixture(scope="module")
def pair(tmp_path_factory, corpora) -> Path:
    """A transformers ELECTRA pair as Google releases them (the generator's embeddings are the discriminator's),
    32 wide with a 16-wide generator, no dropout, corpus a's tokenizer beside the discriminator."""
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

    folder = tmp_path_factory.mktemp("pair")
    common = dict(
        vocab_size=VOCAB,
        embedding_size=16,
        num_hidden_layers=2,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    disc = ElectraForPreTraining(ElectraConfig(hidden_size=32, num_attention_heads=2, intermediate_size=64, **common))
    gen = ElectraForMaskedLM(ElectraConfig(hidden_size=16, num_attention_heads=1, intermediate_size=32, **common))
    gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
    disc.save_pretrained(folder / "discriminator")
    gen.save_pretrained(folder / "generator")
    shutil.copy(corpora["a"] / "tokenizer" / "tokenizer.json", folder / "discriminator" / "tokenizer.json")
    return folder


def train_rows(run: Path) -> list[dict]:
    return [r for r in metric_rows(run) if "mlm_loss" in r]


def first_batch(run: Path):
    """Step 0's batch of `run` and its masked slots, built as the loop builds them, from its saved config."""
    cfg = read_config(run / "config.yaml")
    data = open_pretraining_data(cfg.data, cfg.train.seed)
    ids = np.arange(cfg.train.batch_size)
    batch = host_batch(data.train.examples(ids), ids, pin=False)
    return cfg, batch, masked_batch(cfg, data.tokens, batch, torch.tensor(data.tokens.special_ids))


def losses_by_transformers(run: Path, pair: Path) -> tuple[float, float]:
    """(MLM loss, discriminator loss) of the transformers pair on `run`'s first batch: transformers computes both
    networks; the replacements are drawn with our keyed sampler from transformers' generator logits."""
    from transformers import ElectraForMaskedLM, ElectraForPreTraining

    cfg, b, m = first_batch(run)
    gen = ElectraForMaskedLM.from_pretrained(pair / "generator").eval()
    disc = ElectraForPreTraining.from_pretrained(pair / "discriminator").eval()
    with torch.no_grad():
        logits = gen(m.input_ids, b["attention_mask"], b["token_type_ids"]).logits  # (B, T, V)
        logits = logits.gather(1, m.positions[..., None].expand(-1, -1, logits.shape[-1]))  # (B, N, V)
        ce = F.cross_entropy(logits.transpose(1, 2), m.targets, reduction="none")  # (B, N)
        sampled = sample_replacements(
            logits, m.targets, m.keys, cfg.objective.temperature, sampler=cfg.objective.sampler
        )
        corrupted = scatter_replacements(b["input_ids"], m.positions, torch.where(m.weights > 0, sampled, m.targets))
        labels = (corrupted != b["input_ids"]).float()
        disc_logits = disc(corrupted, b["attention_mask"], b["token_type_ids"]).logits  # (B, T)
        bce = F.binary_cross_entropy_with_logits(disc_logits, labels, reduction="none")
    mlm = float((ce * m.weights).sum() / m.weights.sum())
    return mlm, float((bce * m.disc_mask).sum() / m.disc_mask.sum())


def losses_of(model, run: Path) -> tuple[float, float]:
    """(MLM loss, discriminator loss) of our `model` on `run`'s first batch."""
    _, b, m = first_batch(run)
    with torch.no_grad():
        stats = model.train()(b["input_ids"], b["attention_mask"], b["token_type_ids"], m).stats
    said = metrics_from_stats({k: float(v) for k, v in stats.items()})
    return said["mlm_loss"], said["disc_loss"]


def assert_fresh_adam(ckpt: Path) -> int:
    """The optimizer state after one update of a fresh Adam: m = (1 - b1) g, v = (1 - b2) g^2, so m^2 = 10 v in
    every entry (a state carried over from a source would break it). Returns the tensors checked."""
    state = torch.load(ckpt / "optimizer.pt", weights_only=True)["state"]
    for moments in state.values():
        m, v = moments["exp_avg"], moments["exp_avg_sq"]
        torch.testing.assert_close(m * m, 10 * v, rtol=1e-3, atol=1e-20)
    return len(state)


def test_a_transformers_pair_continues_from_its_weights_under_a_fresh_optimizer_and_schedule(pair, corpora, tmp_path):
    run = tmp_path / "cont"
    args = ["pretrain", "--init", str(pair / "discriminator"), "--init-generator", str(pair / "generator")]
    assert cli_main([*args, "--data", str(corpora["a"]), "--out", str(run), *SHORT, "--device", "cpu", "--quiet"]) == 0

    first = train_rows(run)[0]
    mlm, disc = losses_by_transformers(run, pair)
    assert first["mlm_loss"] == pytest.approx(mlm, rel=1e-5) and first["disc_loss"] == pytest.approx(disc, rel=1e-5)
    cfg = read_config(run / "config.yaml")
    torch.manual_seed(0)  # the same batch under the configured model from scratch: other losses
    assert losses_of(build_model(cfg), run)[0] != pytest.approx(mlm, rel=1e-3)
    # the model is the pair's shape, whatever the (default) config said; the schedule is its own, from step 0
    assert (cfg.model.hidden_size, cfg.model.generator.hidden_size, cfg.model.embedding_size) == (32, 16, 16)
    assert cfg.data.seq_len == 64  # capped to the pair's positions
    lrs = [r["lr"] for r in train_rows(run)]  # 5e-4 (OFF's) x warmup over 2 steps x decay over 3
    assert lrs == [learning_rate(s, cfg) for s in range(3)] == pytest.approx([0.0, 5e-4 / 3, 5e-4 / 3])
    assert assert_fresh_adam(list_checkpoints(run)[0]) > 20
    meta = json.loads((run / "run.json").read_text())
    assert meta["step"] == 3 and meta["sessions"][0]["start_step"] == 0
    init = meta["init"]
    assert init["source"] == str(pair / "discriminator") and init["generator"] == str(pair / "generator")
    assert init["path"] == str((pair / "discriminator").resolve()) and init["revision"] is None
    assert init["step"] is None and init["flops"] is None  # a model trained elsewhere: unknown
    assert init["sha256"] == sha256_file(pair / "discriminator" / "model.safetensors")
    assert init["generator_sha256"] == sha256_file(pair / "generator" / "model.safetensors")
    assert init["afresh"]["train.warmup_steps"] == 2 and init["afresh"]["train.lr"] == 5e-4
    assert init["afresh"]["objective.temperature_start"] is None  # no schedule: no schedule length said either
    assert "objective.temperature_steps" not in init["afresh"]


def test_our_own_run_continues_from_its_final_weights_and_the_source_is_recorded(base, corpora, tmp_path, caplog):
    run = tmp_path / "cont"
    cfg = load_config("tiny", [*CONTINUE, f"data.path={corpora['a']}", "train.lr=2e-3"])
    with caplog.at_level(logging.INFO, logger="electra"):
        pretrain(cfg, run, init=str(base), device="cpu", progress=False)
    source_ckpt = list_checkpoints(base)[-1]
    source, source_cfg = load_model_checkpoint(source_ckpt)
    first = train_rows(run)[0]
    assert (first["mlm_loss"], first["disc_loss"]) == pytest.approx(losses_of(source, run), rel=1e-6)
    assert [r["lr"] for r in train_rows(run)] == pytest.approx([0.0, 2e-3 / 3, 2e-3 / 3])  # from step 0
    assert_fresh_adam(list_checkpoints(run)[0])

    init = json.loads((run / "run.json").read_text())["init"]
    assert init["source"] == str(base) and init["path"] == str(source_ckpt.resolve()) and init["step"] == 2
    assert init["sha256"] == read_checksums(source_ckpt)["model.safetensors"]
    assert init["flops"] == off_train_flops(source_cfg, 2) > 0
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("starting from")]
    assert len(said) == 1 and "step 2;" in said[0] and "train.lr=0.002 (the source: 0.001)" in said[0]
    # its transformers export says where it started; transformers loads it as it is
    exported = json.loads((run / "hf" / "discriminator" / "config.json").read_text())["electra_init"]
    assert exported["sha256"] == init["sha256"] and exported["step"] == 2
    from transformers import ElectraForPreTraining

    assert ElectraForPreTraining.from_pretrained(run / "hf" / "discriminator").config.electra_init["step"] == 2

    # continued again: the FLOPs behind it are its own 3 steps plus its source's
    again = tmp_path / "again"
    pretrain(cfg, again, init=str(run), progress=False)
    chained = json.loads((again / "run.json").read_text())["init"]
    assert chained["flops"] == pytest.approx(off_train_flops(read_config(run / "config.yaml"), 3) + init["flops"])


def test_a_discriminator_alone_gets_a_fresh_generator_of_the_configured_size(pair, corpora, tmp_path, caplog):
    """One step at lr 0 (the warmup's first): the checkpoint holds the start, the transformers discriminator's
    weights and a generator 1/4 as wide as it, as a fresh model of the run's config and seed draws it."""
    run = tmp_path / "alone"
    cfg = load_config(None, [*FAST, "train.max_steps=1", "train.warmup_steps=2", f"data.path={corpora['a']}"])
    with caplog.at_level(logging.INFO, logger="electra"):
        pretrain(cfg, run, init=pair / "discriminator", progress=False)
    saved = read_config(run / "config.yaml")
    assert saved.model.generator.hidden_size == 8 and saved.model.generator.num_heads == 1  # 0.25 x 32
    weights = load_file(list_checkpoints(run)[-1] / "model.safetensors")
    hf = load_file(pair / "discriminator" / "model.safetensors")
    layer = "electra.encoder.layer.1.output.dense.weight"
    assert torch.equal(weights[f"discriminator.{layer}"], hf[layer])
    assert torch.equal(weights["embeddings.word_embeddings.weight"], hf["electra.embeddings.word_embeddings.weight"])
    torch.manual_seed(saved.train.seed)
    fresh = build_model(saved).state_dict()
    generator = [k for k in weights if k.startswith("generator.")]
    assert len(generator) > 10 and all(torch.equal(weights[k], fresh[k]) for k in generator)
    assert weights["generator.electra.encoder.layer.0.intermediate.dense.weight"].shape == (32, 8)
    init = json.loads((run / "run.json").read_text())["init"]
    assert "generator" not in init and init["afresh"]["model.generator_hidden_size"] == 8
    assert any("a new generator" in r.getMessage() for r in caplog.records)


def refusal(capsys, *argv: str) -> str:
    """`electra ARGV` refused: exit 2 and one line on stderr, returned."""
    assert cli_main(list(argv)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_shape_that_contradicts_the_source_is_refused_in_one_line_naming_both(base, pair, corpora, tmp_path, capsys):
    out = tmp_path / "refused"
    common = ["--data", str(corpora["a"]), "--out", str(out), *SHORT]
    ours = ["pretrain", "--init", str(base), *common]
    line = refusal(capsys, *ours, "--config", "tiny", "--set", "model.hidden_size=128")
    assert line == (
        f"electra pretrain: error: model.hidden_size=128 (--set) but the source's discriminator is 64 wide: the "
        f"model's shape comes from --init {base}; leave model.hidden_size out"
    )
    line = refusal(capsys, *ours, "--config", "cpu")
    expected = "model.position_embedding=rotary (--config cpu) but the source's positions are learned"
    assert line.startswith(f"electra pretrain: error: {expected}")
    theirs = ["pretrain", "--init", str(pair / "discriminator"), "--init-generator", str(pair / "generator"), *common]
    line = refusal(capsys, *theirs, "--set", "model.generator_fraction=0.25")
    expected = "model.generator_fraction=0.25 (--set) but the source's generator is 16 wide (0.5 of the discriminator)"
    assert expected in line
    assert not out.exists()  # refused before anything is written


def test_a_corpus_of_another_tokenizer_is_refused_in_one_line_naming_both(base, pair, corpora, tmp_path, capsys):
    out = tmp_path / "refused"
    theirs = json.loads((corpora["a"] / "metadata.json").read_text())["tokenizer_sha256"]
    other = json.loads((corpora["b"] / "metadata.json").read_text())["tokenizer_sha256"]
    assert theirs != other
    for source, config in ((str(base), ["--config", "tiny"]), (str(pair / "discriminator"), [])):
        argv = ["pretrain", *config, "--init", source, "--data", str(corpora["b"]), "--out", str(out), *SHORT]
        line = refusal(capsys, *argv)
        assert f"--init {source} came with the tokenizer of sha256 {theirs[:12]}" in line
        assert f"the corpus {corpora['b']} was prepared with the tokenizer of sha256 {other[:12]}" in line
        assert f"electra data prepare --tokenizer {source}" in line
    assert not out.exists()


def test_a_killed_continued_run_resumes_bit_for_bit_without_reading_its_source_again(base, corpora, tmp_path):
    cfg = load_config("tiny", [*CONTINUE, "train.max_steps=4", f"data.path={corpora['a']}"])
    pretrain(cfg, tmp_path / "straight", init=str(base), device="cpu", progress=False)
    killed = tmp_path / "killed"
    assert die_at("checkpoint.commit@2", pretrain, cfg, killed, init=str(base), device="cpu", progress=False) == KILLED
    assert list_checkpoints(killed)[-1].name == "step_00000002"
    pretrain(cfg, killed, resume="auto", init=str(base), device="cpu", progress=False)
    assert metric_rows(killed) == metric_rows(tmp_path / "straight")
    assert assert_same_state(killed, tmp_path / "straight") > 0
    init = [json.loads((run / "run.json").read_text())["init"] for run in (killed, tmp_path / "straight")]
    assert init[0] == init[1]

    # resumed with another source, or a run from scratch resumed with one: refused, nothing applied
    scratch = tmp_path / "scratch"
    pretrain(load_config("tiny", [*CONTINUE, *NO_DROPOUT, "train.max_steps=1", f"data.path={corpora['a']}"]), scratch)
    with pytest.raises(ValueError, match="started from scratch .* resume it without `init`"):
        pretrain(cfg, scratch, resume="auto", init=str(base), progress=False)
    with pytest.raises(ValueError, match=f'started from {base} .*, not from `init="{scratch}"`'):
        pretrain(cfg, killed, resume="auto", init=str(scratch), progress=False)


def test_resume_on_another_corpus_names_init_and_says_another_out_starts_from_scratch(base, corpora, tmp_path, capsys):
    ckpt = list_checkpoints(base)[-1]
    argv = ["pretrain", "--config", "tiny", "--set", NO_DROPOUT[0], "--set", NO_DROPOUT[1], "--data", str(corpora["b"])]
    line = refusal(capsys, *argv, "--out", str(tmp_path / "new"), "--resume", str(ckpt), *SHORT)
    assert "refusing to resume on another corpus" in line
    assert f"to continue pretraining its model on this text, --init {ckpt} with another --out and no --resume" in line
    assert "(another --out without --init starts from scratch)" in line


def test_import_hfs_weights_only_checkpoint_is_said_to_be_one_and_init_starts_from_it(pair, corpora, tmp_path, capsys):
    imported = tmp_path / "imported"
    hf = ["--discriminator", str(pair / "discriminator"), "--generator", str(pair / "generator")]
    assert cli_main(["import-hf", *hf, "--out", str(imported)]) == 0
    capsys.readouterr()
    ckpt = list_checkpoints(imported)[0]
    line = refusal(capsys, "pretrain", "--data", str(corpora["a"]), "--out", str(imported), "--resume", "auto", *SHORT)
    assert line == (
        f"electra pretrain: error: {ckpt} holds a model's weights only (as `electra import-hf` writes them), no "
        f"training state to resume: to continue pretraining from it, pass --init {ckpt} (a fresh optimizer and "
        "schedule) with another --out and no --resume"
    )
    run = tmp_path / "cont"
    argv = ["pretrain", "--init", str(imported), "--data", str(corpora["a"]), "--out", str(run), *SHORT]
    assert cli_main([*argv, "--set", "train.max_steps=1"]) == 0
    init = json.loads((run / "run.json").read_text())["init"]
    assert init["step"] == 0 and init["flops"] is None  # trained elsewhere: the FLOPs behind it unknown
    assert init["sha256"] == read_checksums(ckpt)["model.safetensors"]


def test_data_prepare_takes_the_tokenizer_of_a_run_its_checkpoint_or_its_export(base, corpora, tmp_path, capsys):
    theirs = json.loads((corpora["a"] / "metadata.json").read_text())["tokenizer_sha256"]
    text = corpora["a"].parent / "corpus.txt"
    for i, source in enumerate([base, list_checkpoints(base)[-1], base / "hf"]):
        out = tmp_path / f"prepared{i}"
        argv = ["data", "prepare", "--tokenizer", str(source), "--out", str(out), str(text), "--workers", "1"]
        assert cli_main([*argv, "--quiet"]) == 0, capsys.readouterr().err
        assert json.loads((out / "metadata.json").read_text())["tokenizer_sha256"] == theirs, source


def test_a_hub_id_is_read_from_the_offline_cache_and_its_revision_recorded(pair, corpora, tmp_path, monkeypatch):
    import huggingface_hub.constants

    from tests.modeling.test_hub_models import cache_snapshot

    cache = tmp_path / "hub-cache"
    snapshots = {w: cache_snapshot(cache, f"tiny-org/electra-{w}", pair / w) for w in ("discriminator", "generator")}
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)  # no local folder of that name
    cfg = load_config(None, [*FAST, "train.max_steps=1", f"data.path={corpora['a']}"])
    init = Init("tiny-org/electra-discriminator", "tiny-org/electra-generator")
    pretrain(cfg, tmp_path / "run", init=init, progress=False)
    said = json.loads((tmp_path / "run" / "run.json").read_text())["init"]
    assert said["source"] == "tiny-org/electra-discriminator" and said["revision"] == snapshots["discriminator"].name
    assert said["sha256"] == sha256_file(pair / "discriminator" / "model.safetensors")
