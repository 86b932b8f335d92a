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

import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from electra.config import FinetuneConfig, PretrainConfig, load_config
from electra.glue.heads import GlueModel
from electra.glue.optim import build_optimizer as glue_optimizer
from electra.modeling.electra import ElectraModel
from electra.modeling.flops import finetune_step_flops, pretrain_step_flops
from electra.training.loop import keep_freed_memory_in_heap
from electra.training.memory import estimate_peak_bytes, process_peak_bytes
from electra.training.optim import clip_and_step
from electra.training.precision import DTYPES, autocast_for, enable_tf32
from electra.training.timing import make_pretrain_step, sync, synthetic_batch

PROBE_SIZE = {"cpu": 2048, "cuda": 8192}  # the largest square matmul the peak probe uses


# -- training steps ---------------------------------------------------------------------------------------------


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
    # the whole process, so with --impl both it is the larger of the two and more
    rss = process_peak_bytes() / 2**30
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


def bench_finetune(
    s: BenchSettings, num_labels: int = 2, head: str = "cls-linear", eval_batch_size: int | None = None
) -> dict:
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
        with autocast_for(dtype, device):
            loss = F.cross_entropy(forward(*batch).float(), labels)
        scaler.scale(loss).backward()
        clip_and_step(opt, scaler, list(model.parameters()), finetune_cfg.grad_clip)
        return loss.detach()

    def eval_step(i: int) -> Tensor:
        model.eval()
        with torch.inference_mode(), autocast_for(dtype, device):
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
