"""One pretraining step on a fixed synthetic batch, set up as `electra pretrain` runs it, to be timed: by the
study's plan (seconds per step under a seconds budget) and by `electra bench` (ours against transformers')."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from electra.config import PretrainConfig, num_mask_slots
from electra.modeling.convert_hf import hf_config
from electra.modeling.electra import build_model
from electra.modeling.masking import mask_tokens
from electra.training.optim import build_optimizer, clip_and_step, learning_rate, set_learning_rate
from electra.training.precision import autocast_for, enable_tf32
from electra.training.step import train_step

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4  # the ids of tokenizers we train (electra.data.tokenizer)


def synthetic_batch(vocab_size: int, batch_size: int, seq_len: int, device: torch.device, seed: int = 0):
    """Full-length [CLS] A [SEP] B [SEP] sequences of random tokens (no padding, as OFF's packed examples)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(MASK + 1, vocab_size, (batch_size, seq_len), generator=g)
    half = seq_len // 2
    ids[:, 0], ids[:, half], ids[:, -1] = CLS, SEP, SEP
    types = (torch.arange(seq_len) > half).long().expand(batch_size, -1)
    return ids.to(device), torch.ones_like(ids).to(device), types.contiguous().to(device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def hf_models(cfg: PretrainConfig) -> tuple[nn.Module, nn.Module]:
    """transformers' generator and discriminator sharing the embedding block, generator output tied to it."""
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

    disc = ElectraForPreTraining(ElectraConfig(**hf_config(cfg.model, "discriminator")))
    gen = ElectraForMaskedLM(ElectraConfig(**hf_config(cfg.model, "generator")))
    gen.electra.embeddings = disc.electra.embeddings
    gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
    return gen, disc


def hf_loss_fn(cfg: PretrainConfig, models: nn.ModuleList, device: torch.device, dtype: str):
    """The step of richarddwang/electra_pytorch (the most faithful popular reproduction) on our masking.

    The generator computes (B, T, V) logits at every position; the masked rows are picked by boolean indexing,
    then cross-entropy and Gumbel-max sampling (torch's RNG) run on those rows; the discriminator's BCE runs on
    the non-pad tokens. Same masking, loss weights and optimizer as ours, so the difference is the model step.
    """
    gen, disc = models
    special = torch.tensor([PAD, CLS, SEP, MASK], device=device)
    slots = num_mask_slots(cfg.objective, cfg.data.seq_len)
    obj = cfg.objective

    def loss_fn(input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor, example_ids: Tensor) -> Tensor:
        masked = mask_tokens(input_ids, attention_mask, example_ids, cfg.train.seed, obj, slots, MASK, special)
        is_mlm = torch.zeros_like(input_ids, dtype=torch.bool).scatter(1, masked.positions, masked.weights > 0)
        with autocast_for(dtype, device):
            gen_logits = gen(masked.input_ids, attention_mask, token_type_ids).logits  # (B, T, V)
            mlm_logits = gen_logits[is_mlm]  # (n_masked, V)
            mlm_loss = F.cross_entropy(mlm_logits.float(), input_ids[is_mlm])
            with torch.no_grad():
                u = torch.rand_like(mlm_logits, dtype=torch.float32)
                sampled = (mlm_logits.float() - torch.log(-torch.log(u))).argmax(-1)
                disc_input = input_ids.clone()
                disc_input[is_mlm] = sampled
                labels = (disc_input != input_ids).float()  # a correct sample counts as original
            disc_logits = disc(disc_input, attention_mask, token_type_ids).logits  # (B, T)
            keep = attention_mask.bool()
            disc_loss = F.binary_cross_entropy_with_logits(disc_logits[keep].float(), labels[keep])
        return obj.generator_weight * mlm_loss + obj.discriminator_weight * disc_loss

    return loss_fn


def make_pretrain_step(
    impl: str,
    cfg: PretrainConfig,
    batch_size: int,
    device: torch.device,
    dtype: str,
    compile: bool,
    compile_mode: str | None = None,
    micro_batch: int | None = None,
) -> Callable[[int], Tensor]:
    """A function doing one full training step on a fixed synthetic batch (masking varies with the step); returns
    the step's loss. `ours` is `train_step` (electra.training.step), the loop's step, over micro-batches of
    `micro_batch` sequences (default: the whole batch). Step i runs at the schedule's learning rate for step i, as
    in the loop (so `bench check` compares warm-up steps, not full-rate steps from random weights). fp32 matmuls
    run in TF32 on Ampere and later, as in `electra pretrain` (electra/training/precision.py `enable_tf32`)."""
    enable_tf32(device)
    torch.manual_seed(cfg.train.seed)
    input_ids, attention_mask, token_type_ids = synthetic_batch(
        cfg.model.vocab_size, batch_size, cfg.data.seq_len, device
    )
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == "fp16")
    if impl == "ours":
        model = build_model(cfg).to(device).train()
        compiled = torch.compile(model, dynamic=False, mode=compile_mode) if compile else model
        special = torch.tensor([PAD, CLS, SEP, MASK], device=device)
        slots = num_mask_slots(cfg.objective, cfg.data.seq_len)
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        micro = micro_batch or batch_size
        if batch_size % micro:
            raise ValueError(f"micro-batch {micro} does not divide the batch {batch_size}")
        batches = [{k: v[i : i + micro] for k, v in batch.items()} for i in range(0, batch_size, micro)]
        for b in batches:  # flagged as the loop's host batches are: no mask for the model, SDPA's flash kernel
            b["no_padding"] = bool(b["attention_mask"].all())  # read once here, not in the timed step
    else:
        model = nn.ModuleList(hf_models(cfg)).to(device).train()
        loss_fn = hf_loss_fn(cfg, model, device, dtype)
        if compile:
            loss_fn = torch.compile(loss_fn, dynamic=False, mode=compile_mode)
    opt = build_optimizer(model, cfg, device)  # the recipe's, fused, as in `electra pretrain`
    params = [p for p in model.parameters() if p.requires_grad]

    def step(i: int) -> Tensor:
        set_learning_rate(opt, learning_rate(i, cfg))
        if compile_mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # a new iteration: CUDA graphs may reuse the last outputs
        example_ids = torch.arange(i * batch_size, (i + 1) * batch_size, device=device)
        if impl == "ours":
            seed, obj = cfg.train.seed, cfg.objective
            masked = [
                mask_tokens(
                    b["input_ids"], b["attention_mask"], ids, seed, obj, slots, MASK, special, cfg.model.vocab_size
                )
                for b, ids in zip(batches, example_ids.split(micro), strict=True)
            ]
            out = train_step(
                compiled, opt, scaler, params, batches, masked, 1, autocast_for(dtype, device), cfg.train.grad_clip
            )
            return out.loss
        loss = loss_fn(input_ids, attention_mask, token_type_ids, example_ids)
        scaler.scale(loss).backward()
        clip_and_step(opt, scaler, params, cfg.train.grad_clip)  # as `electra pretrain` ends a step: no host sync
        return loss.detach()

    step.model = model  # type: ignore[attr-defined]
    step.optimizer = opt  # type: ignore[attr-defined]
    step.settings = {"dtype": dtype, "compile": compile, "micro_batch": micro_batch or batch_size}  # type: ignore[attr-defined]
    return step
