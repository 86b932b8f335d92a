"""`electra bench`: time one pretraining or fine-tuning step, and check that fast modes agree with fp32 eager.

    electra bench pretrain --preset small --batch-size 16 --seq-len 128 --device cpu --impl both
    electra bench finetune --preset small --batch-size 32 --seq-len 128 --device cpu
    electra bench check --device cuda      # bf16 vs fp32 and compiled vs eager losses agree

A pretraining step is what the training loop does: masking + forward + backward + gradient clipping + AdamW.
Timing is synchronised per step (the device is idle at both ends), after untimed warm-up steps; we quote the
median. The peak is measured, not looked up: a large square matmul in the same dtype on the same device, run
between the timed steps so that both see the same machine (shared machines drift). FLOPs are the analytic
matmul counts of `electra.modeling.flops` (formula in its docstring). `--impl hf` builds the step the popular PyTorch
reproductions use: transformers' ElectraForMaskedLM + ElectraForPreTraining sharing one embedding block, with
full-vocabulary generator logits at every position; `--impl both` alternates the two step by step.
"""

from __future__ import annotations

import contextlib
import resource
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from electra.config import FinetuneConfig, PretrainConfig, load_config, num_mask_slots
from electra.glue.heads import GlueModel
from electra.glue.optim import build_optimizer as glue_optimizer
from electra.modeling.electra import ElectraModel, build_model
from electra.modeling.flops import finetune_step_flops, pretrain_step_flops
from electra.modeling.masking import mask_tokens
from electra.training.loop import keep_freed_memory_in_heap
from electra.training.memory import estimate_peak_bytes
from electra.training.optim import build_optimizer, clip_and_step, learning_rate, set_learning_rate
from electra.training.precision import enable_tf32
from electra.training.step import train_step

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4  # the ids of tokenizers we train (electra.data.tokenizer)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PROBE_SIZE = {"cpu": 2048, "cuda": 8192}  # the largest square matmul the peak probe uses


def synthetic_batch(vocab_size: int, batch_size: int, seq_len: int, device: torch.device, seed: int = 0):
    """Full-length [CLS] A [SEP] B [SEP] sequences of random tokens (no padding, as OFF's packed examples)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(MASK + 1, vocab_size, (batch_size, seq_len), generator=g)
    half = seq_len // 2
    ids[:, 0], ids[:, half], ids[:, -1] = CLS, SEP, SEP
    types = (torch.arange(seq_len) > half).long().expand(batch_size, -1)
    return ids.to(device), torch.ones_like(ids).to(device), types.contiguous().to(device)


def autocast(device: torch.device, dtype: str):
    if dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[dtype])


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# -- training steps ---------------------------------------------------------------------------------------------


def hf_models(cfg: PretrainConfig) -> tuple[nn.Module, nn.Module]:
    """transformers' generator and discriminator sharing the embedding block, generator output tied to it."""
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

    from electra.modeling.convert_hf import hf_config

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
        with autocast(device, dtype):
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
    opt = build_optimizer(model, cfg.train, device)  # the recipe's, fused, as in `electra pretrain`
    params = [p for p in model.parameters() if p.requires_grad]

    def step(i: int) -> Tensor:
        set_learning_rate(opt, learning_rate(i, cfg.train))
        if compile_mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # a new iteration: CUDA graphs may reuse the last outputs
        example_ids = torch.arange(i * batch_size, (i + 1) * batch_size, device=device)
        if impl == "ours":
            seed, obj = cfg.train.seed, cfg.objective
            masked = [mask_tokens(b["input_ids"], b["attention_mask"], ids, seed, obj, slots, MASK, special,
                                   cfg.model.vocab_size)
                      for b, ids in zip(batches, example_ids.split(micro), strict=True)]  # fmt: skip
            out = train_step(compiled, opt, scaler, params, batches, masked, 1, autocast(device, dtype),
                             cfg.train.grad_clip)  # fmt: skip
            return out.loss
        loss = loss_fn(input_ids, attention_mask, token_type_ids, example_ids)
        scaler.scale(loss).backward()
        clip_and_step(opt, scaler, params, cfg.train.grad_clip)  # as `electra pretrain` ends a step: no host sync
        return loss.detach()

    step.model = model  # type: ignore[attr-defined]
    step.optimizer = opt  # type: ignore[attr-defined]
    step.settings = {"dtype": dtype, "compile": compile, "micro_batch": micro_batch or batch_size}  # type: ignore[attr-defined]
    return step


# -- timing -----------------------------------------------------------------------------------------------------


def matmul_probe(device: torch.device, dtype: str) -> Callable[[], float]:
    """A timed (n x n) @ (n x n) matmul in the benchmark's dtype: returns the TFLOP/s of one call.

    n doubles from 256 until a call takes 50 ms or n reaches PROBE_SIZE (2048 on CPU, 8192 on CUDA): large
    enough to saturate the device, short where the dtype is slow (bf16 on a CPU without bf16 units)."""
    n = 256
    while n < PROBE_SIZE[device.type]:
        a = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
        sync(device)
        t0 = time.perf_counter()
        a @ a
        sync(device)
        if time.perf_counter() - t0 > 0.05:
            break
        n *= 2
    a = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
    b = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
    repeats = 10 if device.type == "cuda" else 1  # a CUDA call is ~1 ms: time several

    def probe() -> float:
        sync(device)
        t0 = time.perf_counter()
        for _ in range(repeats):
            a @ b
        sync(device)
        return 2 * n**3 * repeats / (time.perf_counter() - t0) / 1e12

    probe.size = n  # type: ignore[attr-defined]
    return probe


def time_alternating(
    steps: dict[str, Callable[[int], Tensor]], n: int, warmup: int, device: torch.device, probe: Callable[[], float]
) -> tuple[dict[str, list[float]], list[float]]:
    """Seconds per step of each function, run in turn (A B A B ...), with one peak probe per round."""
    for i in range(warmup):
        for fn in steps.values():
            fn(i)
        probe()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)  # the steps' memory, not compilation's
    seconds: dict[str, list[float]] = {name: [] for name in steps}
    peaks = []
    for i in range(warmup, warmup + n):
        for name, fn in steps.items():
            sync(device)
            t0 = time.perf_counter()
            fn(i)
            sync(device)
            seconds[name].append(time.perf_counter() - t0)
        peaks.append(probe())
    return seconds, peaks


def peak_memory(device: torch.device) -> dict[str, float | str]:
    if device.type == "cuda":
        return {"peak_memory_gb": torch.cuda.max_memory_allocated(device) / 2**30, "peak_memory_kind": "allocated"}
    # ru_maxrss is in KiB on Linux: the whole process, so with --impl both it is the larger of the two and more
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return {"peak_memory_gb": rss, "peak_memory_kind": "process max RSS"}


def summarise(seconds: list[float], peaks: list[float], flops: int, batch_size: int, seq_len: int) -> dict:
    s = statistics.median(seconds)
    peak = statistics.median(peaks)
    achieved = flops / s / 1e12
    return {
        "ms_per_step": 1000 * s,
        "ms_min": 1000 * min(seconds),
        "ms_max": 1000 * max(seconds),
        "sequences_per_s": batch_size / s,
        "tokens_per_s": batch_size * seq_len / s,
        "flops_per_step": flops,
        "achieved_tflops": achieved,
        "peak_tflops": peak,
        "peak_tflops_max": max(peaks),
        "peak_fraction": achieved / peak,
    }


def environment(s: BenchSettings, device: torch.device, dtype: str, compile: bool) -> dict:
    env = {"device": device.type, "dtype": dtype, "compile": compile, "torch": torch.__version__}
    if compile:
        env["compile_mode"] = s.compile_mode or "default"
    env["malloc_tuned"] = s.malloc_tuned
    env["tf32"] = device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32  # fp32 matmuls in TF32
    if device.type == "cuda":
        env["device_name"] = torch.cuda.get_device_name(device)
    else:
        env["threads"] = torch.get_num_threads()
    return env


# -- commands ---------------------------------------------------------------------------------------------------


@dataclass
class BenchSettings:
    """What every benchmark shares: the model (a preset plus overrides), the batch, the device and the timing."""

    preset: str = "small"
    overrides: list[str] = field(default_factory=list)
    batch_size: int = 16
    seq_len: int = 128
    device: str = "cuda" if torch.cuda.is_available() else "cpu"
    steps: int = 10
    """Timed steps (for `check`: steps compared)."""
    warmup: int | None = None
    """Untimed steps; None: 2, or 3 when compiled."""
    dtype: str = "fp32"
    compile: bool = False
    compile_mode: str | None = None
    malloc_tuning: bool = True
    """On CPU, keep freed memory in the heap (see electra.training.loop.keep_freed_memory_in_heap)."""
    malloc_tuned: bool = False
    """Whether that setting took effect (filled in by the benchmark)."""

    def config(self, *extra: str) -> PretrainConfig:
        return load_config(self.preset, [*self.overrides, f"data.seq_len={self.seq_len}", *extra])

    def prepare(self) -> torch.device:
        if self.malloc_tuning and self.device == "cpu":
            self.malloc_tuned = keep_freed_memory_in_heap()
        return torch.device(self.device)

    @property
    def warmup_steps(self) -> int:
        return self.warmup if self.warmup is not None else (3 if self.compile else 2)


def bench_pretrain(s: BenchSettings, impl: str = "ours") -> dict:
    """Time our training step (`impl="ours"`), the transformers-built one (`"hf"`), or both in turn."""
    device = s.prepare()
    cfg = s.config()
    impls = ["ours", "hf"] if impl == "both" else [impl]
    warmup = s.warmup_steps
    steps = {i: make_pretrain_step(i, cfg, s.batch_size, device, s.dtype, s.compile, s.compile_mode) for i in impls}
    probe = matmul_probe(device, s.dtype)
    seconds, peaks = time_alternating(steps, s.steps, warmup, device, probe)
    B, T = s.batch_size, cfg.data.seq_len
    rows = {}
    for name in impls:
        flops = pretrain_step_flops(cfg, B, T, full_vocab_head=name == "hf")
        rows[name] = {"impl": name, **summarise(seconds[name], peaks, flops, B, T)}
    out = dict(rows[impls[0]])
    if impl == "both":
        ratios = [h / o for h, o in zip(seconds["hf"], seconds["ours"], strict=True)]
        out["hf"] = rows["hf"]
        out["speedup_vs_hf"] = statistics.median(ratios)  # median of the per-round ratios hf / ours
        out["speedup_vs_hf_min"] = min(ratios)
    out["hours_per_1m_steps"] = out["ms_per_step"] / 3.6  # 1e6 steps x ms / (3.6e6 ms per hour)
    out.update(preset=s.preset, batch_size=B, seq_len=T, steps=s.steps, warmup=warmup, probe_size=probe.size)
    out.update(**peak_memory(device), **environment(s, device, s.dtype, s.compile))
    out["memory_estimate_gb"] = estimate_peak_bytes(cfg, B, s.dtype, device.type) / 2**30  # --max-memory-gb's
    out["flops_formula"] = "3 x forward matmuls (electra.modeling.flops.pretrain_step_flops)"
    return out


def bench_finetune(s: BenchSettings, num_labels: int = 2, head: str = "cls-linear",
                   eval_batch_size: int | None = None) -> dict:  # fmt: skip
    """Time a GLUE classification step (the optimizer `electra glue` uses) and evaluation throughput."""
    device, dtype = s.prepare(), s.dtype
    enable_tf32(device)  # as `electra glue` fine-tunes
    cfg = s.config()
    B, T, eval_B = s.batch_size, cfg.data.seq_len, eval_batch_size or 4 * s.batch_size
    torch.manual_seed(cfg.train.seed)
    model = GlueModel(ElectraModel(cfg.model), cfg.model, head, num_labels).to(device)
    forward = torch.compile(model, dynamic=False, mode=s.compile_mode) if s.compile else model
    finetune_cfg = FinetuneConfig()  # `electra glue`'s default optimizer: OFF's Adam, layer-wise lr decay, fused
    opt = glue_optimizer(model, finetune_cfg, cfg.model.num_layers)
    batch = synthetic_batch(cfg.model.vocab_size, B, T, device)
    labels = torch.randint(num_labels, (B,), device=device)
    eval_batch = synthetic_batch(cfg.model.vocab_size, eval_B, T, device, seed=1)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == "fp16")

    def glue_step(i: int) -> Tensor:
        model.train()
        with autocast(device, dtype):
            loss = F.cross_entropy(forward(*batch).float(), labels)
        scaler.scale(loss).backward()
        clip_and_step(opt, scaler, list(model.parameters()), finetune_cfg.grad_clip)
        return loss.detach()

    def eval_step(i: int) -> Tensor:
        model.eval()
        with torch.inference_mode(), autocast(device, dtype):
            return forward(*eval_batch).argmax(-1)

    warmup = s.warmup_steps
    fns = {"train": glue_step, "eval": eval_step}
    probe = matmul_probe(device, dtype)
    seconds, peaks = time_alternating(fns, s.steps, warmup, device, probe)
    train_flops = finetune_step_flops(cfg.model, B, T, num_labels, head=head)
    eval_flops = finetune_step_flops(cfg.model, eval_B, T, num_labels, train=False, head=head)
    out = {"impl": "ours", "head": head, **summarise(seconds["train"], peaks, train_flops, B, T)}
    evaluation = summarise(seconds["eval"], peaks, eval_flops, eval_B, T)
    out["eval"] = {"batch_size": eval_B, **evaluation}
    out["eval_sequences_per_s"] = evaluation["sequences_per_s"]
    out.update(preset=s.preset, batch_size=B, seq_len=T, steps=s.steps, warmup=warmup, probe_size=probe.size)
    out.update(**peak_memory(device), **environment(s, device, dtype, s.compile))
    out["flops_formula"] = "train 3 x, eval 1 x forward matmuls (electra.modeling.flops.finetune_step_flops)"
    return out


# Agreement bounds for `check`: relative difference of the per-step losses of two modes.
COMPILED_RTOL = 1e-3  # same arithmetic in fp32, different kernels and fusion order
COMPILED_BF16_RTOL = 2e-2  # fused kernels round bf16 intermediates at different places
BF16_RTOL = 5e-2  # bf16 keeps 8 mantissa bits (0.4% per rounding); averaged losses stay within a few %


def host_device_sync(step: Callable[[int], Tensor], i: int, device: torch.device) -> str | None:
    """Run one training step with CUDA's sync debug mode raising on any host-device synchronisation
    (`.item()`, boolean indexing, blocking copies): the error's first line, or None when the step has none."""
    if device.type != "cuda":
        return None
    torch.cuda.set_sync_debug_mode("error")
    try:
        step(i)
    except RuntimeError as err:
        frames = traceback.extract_tb(err.__traceback__)[-2:]  # where in the step: forward, backward, optimizer
        where = "; ".join(f"{Path(f.filename).name}:{f.lineno} {f.line}" for f in frames)
        return f"{str(err).splitlines()[0]} at {where}"
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return None


def bench_check(s: BenchSettings) -> dict:
    """Train the same model on the same batches in four modes, without dropout (its RNG differs when compiled);
    on CUDA also check that a step makes no host-device synchronisation. `ok` says whether all agree."""
    cfg = s.config("model.dropout=0.0", "model.attention_dropout=0.0")
    device = torch.device(s.device)
    losses, syncs = {}, {}
    for dtype in ("fp32", "bf16"):
        for compile in (False, True):
            mode = dtype + ("_compiled" if compile else "")
            step = make_pretrain_step("ours", cfg, s.batch_size, device, dtype, compile)
            losses[mode] = [step(i).item() for i in range(s.steps)]
            syncs[mode] = host_device_sync(step, s.steps, device)

    def max_rel_diff(a: str, b: str) -> float:
        return max(abs(x - y) / abs(y) for x, y in zip(losses[a], losses[b], strict=True))

    checks = {
        "compiled_vs_eager_fp32": (max_rel_diff("fp32_compiled", "fp32"), COMPILED_RTOL),
        "compiled_vs_eager_bf16": (max_rel_diff("bf16_compiled", "bf16"), COMPILED_BF16_RTOL),
        "bf16_vs_fp32": (max_rel_diff("bf16", "fp32"), BF16_RTOL),
    }
    out = {
        # compiled steps, as training runs on a GPU, must not sync; eager syncs are reported (some are PyTorch's own)
        "ok": all(diff <= tol for diff, tol in checks.values()) and not any(syncs[m] for m in syncs if "compiled" in m),
        "max_rel_diff": {name: diff for name, (diff, _) in checks.items()},
        "host_device_syncs": syncs,
        "tolerance": {name: tol for name, (_, tol) in checks.items()},
        "losses": losses,
        **environment(s, device, "fp32+bf16", True),
    }
    return out
