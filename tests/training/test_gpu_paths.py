"""The CUDA paths, checked on a CPU: device names, the precision `auto` resolves to (and bf16 on CPU), the fp32
generator head and sampling under autocast, the memory estimate, fp16 loss-scale back-offs, host reads in the real
loop, the prefetched batches, SDPA without a mask, the bench's learning-rate schedule and the study's timing.
CPU autocast in bf16 stands in for CUDA autocast."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from electra import bench
from electra.cli import main as cli_main
from electra.config import load_config
from electra.modeling.masking import sample_replacements
from electra.study.grid import calibration_step
from electra.training import precision as devices
from electra.training.batches import host_batch
from electra.training.loop import micro_batch_size, plan_step, prefetch_batches, pretrain, setup, step_batches
from electra.training.memory import MARGIN, estimate_peak_bytes, sampler_copies
from electra.training.optim import learning_rate
from electra.training.precision import DeviceError, choose_precision, cpu_native_bf16, resolve_device
from electra.training.prefetch import Prefetcher
from electra.training.step import Window, model_mask, train_step
from electra.utils.errors import InputError
from tests.helpers import masked, random_batch, run_python, tiny_model

CPU = torch.device("cpu")
FAST = ["train.batch_size=8", "train.eval_batches=1", "data.seq_len=32"]
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")


# -- devices --------------------------------------------------------------------------------------------------


def test_device_names_resolve_to_one_device():
    assert resolve_device("cpu") == CPU
    assert resolve_device(None) == (torch.device("cuda", 0) if torch.cuda.is_available() else CPU)
    with pytest.raises(DeviceError, match="not a device name"):
        resolve_device("gpu0")


def test_cuda_without_an_index_is_the_local_ranks_gpu(monkeypatch):
    # the facts of a 2-GPU machine: only these two functions are asked
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda", local_rank=1) == torch.device("cuda", 1)
    assert resolve_device("cuda:0", local_rank=1) == torch.device("cuda", 0)
    assert resolve_device(None, local_rank=1) == torch.device("cuda", 1)
    with pytest.raises(DeviceError, match="GPU 2 asked for, 2 visible"):
        resolve_device("cuda:2")


def test_one_gpu_for_every_rank_of_several_processes_is_refused(monkeypatch):
    """`--device cuda:0` under torchrun with several processes would put every rank on GPU 0."""
    import torch.distributed as dist

    from electra.training.loop import init_distributed

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    backends = []
    monkeypatch.setattr(dist, "init_process_group", lambda backend: backends.append(backend))
    for name, value in (("WORLD_SIZE", "2"), ("RANK", "1"), ("LOCAL_RANK", "1")):
        monkeypatch.setenv(name, value)
    assert init_distributed("cuda") == (1, 2, torch.device("cuda", 1)) and backends == ["nccl"]
    shared = r'`device="cuda:0"`: all 2 processes would share GPU 0; pass `device="cuda"`'  # Python's words
    with pytest.raises(DeviceError, match=shared):
        init_distributed("cuda:0")
    assert backends == ["nccl"]  # refused before the process group


@NO_CUDA
def test_asking_for_cuda_without_one_is_one_line_and_a_non_zero_exit(tmp_path, capsys):
    code = cli_main(["pretrain", "--config", "tiny", "--max-steps", "1", "--device", "cuda", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "--device cuda: no CUDA device is visible" in err
    assert not (tmp_path / "run.json").exists()  # no silent fall-back to a CPU run


# -- precision ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asked", "device", "facts", "picked"),
    [
        ("auto", "cuda", {"cuda_capability": (9, 0)}, "bf16"),  # H100/H200
        ("auto", "cuda", {"cuda_capability": (8, 0)}, "bf16"),  # A100
        ("auto", "cuda", {"cuda_capability": (7, 5)}, "fp16"),  # T4: bf16 only emulated
        ("auto", "cuda", {"cuda_capability": (7, 0)}, "fp16"),  # V100
        ("auto", "cpu", {"cpu_bf16": None}, "fp32"),  # e.g. Zen 3: bf16 emulated
        # native bf16 steps ELECTRA-Small ~1.9x faster, but bf16 held a 256-wide model on the token-frequency
        # plateau that fp32 left (docs/benchmarks.md, "bf16 on CPU"): auto stays fp32 on every CPU
        ("auto", "cpu", {"cpu_bf16": "amx_bf16"}, "fp32"),  # Xeon 4th gen.
        ("auto", "cpu", {"cpu_bf16": "avx512_bf16"}, "fp32"),  # Zen 4 / 5
        ("bf16", "cpu", {}, "bf16"),  # asked for: allowed on any CPU
        ("fp32", "cuda", {"cuda_capability": (9, 0)}, "fp32"),
    ],
)
def test_auto_picks_bf16_on_ampere_fp16_on_older_gpus_and_fp32_on_every_cpu(asked, device, facts, picked):
    chosen = choose_precision(asked, device, **facts)
    assert chosen.name == picked and chosen.reason


def test_compile_is_on_by_default_on_cuda_only():
    assert devices.resolve_compile(None, torch.device("cuda", 0)) and not devices.resolve_compile(None, CPU)
    assert devices.resolve_compile(True, CPU) and not devices.resolve_compile(False, torch.device("cuda", 0))


def test_tf32_is_enabled_for_fp32_matmuls_on_ampere_and_later(monkeypatch):
    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        for capability, enabled in (((7, 0), False), ((8, 0), True)):
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
            monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device, c=capability: c)
            assert devices.enable_tf32(torch.device("cuda", 0)) is enabled
            assert torch.backends.cuda.matmul.allow_tf32 is enabled and torch.backends.cudnn.allow_tf32 is enabled
        assert devices.enable_tf32(CPU) is False
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


def test_fp16_on_cpu_is_refused_in_one_line():
    with pytest.raises(InputError, match="fp16 needs a CUDA device"):
        choose_precision("fp16", "cpu")


def test_native_bf16_is_read_from_the_cpu_flags(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile\n")  # Xeon 4th gen.
    assert cpu_native_bf16.__wrapped__(cpuinfo) == "amx_bf16"
    cpuinfo.write_text("processor: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n")  # Zen 4 / 5
    assert cpu_native_bf16.__wrapped__(cpuinfo) == "avx512_bf16"
    cpuinfo.write_text("processor: 0\nflags\t\t: fpu avx2 fma\n")  # Zen 3
    assert cpu_native_bf16.__wrapped__(cpuinfo) is None


def test_run_json_records_the_precision_and_why(tmp_path):
    for asked in ("bf16", "auto"):
        run = tmp_path / asked
        pretrain(load_config("tiny", [*FAST, "train.max_steps=1", f"train.precision={asked}"]), run, device="cpu")
        meta = json.loads((run / "run.json").read_text())
        expected = devices.resolve_precision(asked, CPU)
        assert (meta["precision"], meta["precision_reason"]) == (expected.name, expected.reason)
        assert meta["compiled"] is False  # train.compile None: off on CPU
    assert json.loads((tmp_path / "bf16" / "run.json").read_text())["precision_reason"] == "asked for"


BF16_LOSS_RTOL = 2e-2
"""bf16 keeps 8 mantissa bits; over 4 steps of the tiny model (at the full learning rate) the per-step losses
stayed within 0.07% of fp32 here (AMX CPU); 2% leaves room for CPUs that round differently."""


def test_bf16_and_fp32_losses_agree_over_a_few_steps_on_cpu():
    cfg = load_config("tiny", ["model.dropout=0.0", "model.attention_dropout=0.0", "train.warmup_steps=0"])
    losses = {}
    for dtype in ("fp32", "bf16"):
        step = bench.make_pretrain_step("ours", cfg, 8, CPU, dtype, compile=False)
        losses[dtype] = torch.tensor([step(i).item() for i in range(4)])
    torch.testing.assert_close(losses["bf16"], losses["fp32"], rtol=BF16_LOSS_RTOL, atol=0)
    assert not torch.equal(losses["bf16"], losses["fp32"])  # bf16 did run


def test_the_losses_are_summed_in_fp32_under_bf16_autocast():
    """Per-token losses in bf16 summed over a batch would lose ~3 significant digits; their sums and the losses
    stay fp32 (and within bf16's rounding of the fp32 computation's)."""
    model = tiny_model(vocab_size=97).eval()
    ids, attention, types = random_batch(B=4, T=24)
    with torch.no_grad():
        reference = model(ids, attention, types, masked(ids, attention))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(ids, attention, types, masked(ids, attention))
    for name in ("loss", "mlm_loss", "disc_loss"):
        assert getattr(out, name).dtype == torch.float32, name
        torch.testing.assert_close(getattr(out, name), getattr(reference, name), rtol=0.05, atol=0)
    assert out.stats["mlm_loss_sum"].dtype == out.stats["disc_loss_sum"].dtype == torch.float32


# -- the generator head and sampling under autocast -----------------------------------------------------------


def test_generator_logits_and_samples_are_fp32_under_bf16_autocast():
    model = tiny_model(vocab_size=97).eval()
    ids, attention, types = random_batch(B=4, T=24)
    m = masked(ids, attention)
    gen, table = model.generator, model.embeddings.word_embeddings.weight
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        embedded = model.embeddings(m.input_ids, types)
        logits, _ = gen.at_slots(embedded, None, m, table)
        h = gen.electra(embedded, None)  # the same hidden states, (B, T, H) in bf16
    with torch.no_grad():
        h = h.gather(1, m.positions[..., None].expand(-1, -1, h.shape[-1]))  # (B, N, H)
        reference = gen.logits(h.float(), table)  # no autocast: fp32 throughout
    assert logits.dtype == torch.float32
    torch.testing.assert_close(logits, reference, rtol=0, atol=0)
    for sampler in ("inverse_cdf", "gumbel"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            sampled = sample_replacements(logits, m.targets, m.keys, 1.0, False, sampler)
        assert torch.equal(sampled, sample_replacements(reference, m.targets, m.keys, 1.0, False, sampler))


# -- memory estimate ------------------------------------------------------------------------------------------


def test_the_memory_estimate_counts_the_sampler_and_the_process_and_is_resolved():
    cfg = load_config("small")
    with pytest.raises(ValueError, match="resolved precision"):
        estimate_peak_bytes(cfg, 128, "auto")
    head = cfg.num_mask_slots * 128 * cfg.model.vocab_size * 4 * MARGIN["cuda"]  # one (b, N, V) fp32 tensor

    def more(overrides: list[str], precision: str = "fp32") -> float:
        changed = load_config("small", overrides)
        return (estimate_peak_bytes(changed, 128, precision) - estimate_peak_bytes(cfg, 128, precision)) / head

    # the sampler's temporaries: Gumbel noise and its logs, logits / T, the copy masking the correct token
    assert more(["objective.sampler=gumbel"]) == pytest.approx(2)
    assert more(["objective.temperature=2.0"]) == pytest.approx(1)
    assert more(["objective.disallow_correct=true"]) == pytest.approx(1)
    assert sampler_copies(cfg, "bf16") == sampler_copies(cfg, "fp32") + 1  # the fp32 copy of 16-bit logits
    # what the process holds beyond the step, on either device (the CPU's: the interpreter, torch, the data)
    # and on a CPU the larger margin for glibc's fragmentation across micro-batches
    tensors = estimate_peak_bytes(cfg, 8, "fp32", "meta") / MARGIN["cuda"]  # no device: the step's tensors alone
    assert estimate_peak_bytes(cfg, 8, "fp32", "cpu") == pytest.approx(0.75 * 2**30 + MARGIN["cpu"] * tensors)
    assert estimate_peak_bytes(cfg, 8, "fp32", "cuda") == pytest.approx(0.75 * 2**30 + MARGIN["cuda"] * tensors)
    assert MARGIN["cpu"] >= 1.75
    # a 6 GB card accumulates at batch 128 in bf16
    six = load_config("small", ["train.max_memory_gb=6"])
    micro = micro_batch_size(six, 128, "bf16", torch.device("cuda", 0))
    assert micro < 128 and 128 % micro == 0
    plan = plan_step(six, 128, CPU)  # `auto` is resolved before estimating, then the estimate is in its precision
    assert plan.micro_batch == micro_batch_size(six, 128, plan.precision.name, CPU)


@pytest.mark.slow
def test_a_cpu_run_under_a_memory_budget_peaks_within_it_and_under_its_estimate(tmp_path):
    """`pretrain --config small --batch-size 128 --max-memory-gb 1.5 --max-steps 1 --eval-every 1 --precision
    fp32` in a fresh process (the real shape: length 128, vocabulary 30,522; one evaluation, the checkpoint and the
    HF export): the process's peak resident memory stays under the budget (the estimate counts the interpreter on
    a CPU), under the estimate run.json records, and not absurdly far below it."""
    out = tmp_path / "run"
    child = (
        "import sys; from electra.cli import main; from electra.training.memory import process_peak_bytes; "
        "rc = main(sys.argv[1:]); print('peak', process_peak_bytes()); sys.exit(rc)"
    )
    args = ["pretrain", "--config", "small", "--batch-size", "128", "--max-memory-gb", "1.5", "--max-steps", "1"]
    args += ["--eval-every", "1", "--precision", "fp32", "--device", "cpu", "--quiet", "--out", str(out)]
    result = run_python("-c", child, *args, env={"OMP_NUM_THREADS": "1"}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    peak = int(result.stdout.split("peak")[-1]) / 2**30
    meta = json.loads((out / "run.json").read_text())
    assert meta["micro_batch"] < 128 and meta["memory_budget_gb"] == 1.5
    assert peak < 1.5 and meta["peak_memory_gb"] <= peak  # run.json's is at the save, before the export
    assert 0.5 * meta["memory_estimate_gb"] < peak <= meta["memory_estimate_gb"]


# -- fp16 loss-scale back-offs --------------------------------------------------------------------------------


def test_loss_scale_back_offs_are_counted_apart_from_non_finite_steps(tmp_path):
    cfg = load_config("tiny", ["model.dropout=0.0", "model.attention_dropout=0.0", "train.warmup_steps=0"])
    model = tiny_model(vocab_size=97)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3, fused=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127)  # scaled gradients overflow until the scale drops
    ids, attention, types = random_batch(B=4, T=24)
    batch = {"input_ids": ids, "attention_mask": attention, "token_type_ids": types}
    window = Window(CPU, 0, 0)
    outs = [
        train_step(
            model,
            opt,
            scaler,
            params,
            [batch],
            [masked(ids, attention)],
            1,
            torch.autocast("cpu", enabled=False),
            cfg.train.grad_clip,
        )
        for _ in range(12)
    ]
    for out in outs:
        window.add(out)
    skipped = sum(bool(o.skipped) for o in outs)
    assert 0 < skipped < 12  # backed off, then trained
    assert int(window.backoffs) == skipped and int(window.nonfinite) == 0
    from electra.training.checkpoint import RunMeta

    meta = RunMeta()
    window.settle_nonfinite(meta, 1, 12, tmp_path)  # limit 1: a back-off counted as non-finite would raise
    assert meta.scaler_backoffs == skipped and meta.nonfinite_skipped == 0


# -- host reads in the real loop ------------------------------------------------------------------------------

HOST_READS = {"item", "tolist", "__bool__", "__int__", "__float__", "numpy", "cpu"}
UPLOADS = {"tensor", "as_tensor"}  # a host value made into a tensor: on CUDA a blocking host-to-device copy


class HostReads(TorchFunctionMode):
    """Counts the torch calls that read a tensor back to the host or upload a host value."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_READS | UPLOADS:
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


def test_the_loops_steps_read_nothing_back_and_upload_nothing(tmp_path):
    """Runs of 3 and 9 steps with the same log lines, evaluations and checkpoints make the same host reads: the
    steps between them make none (the special ids, the stop vote, the window's sums stay on the device)."""
    counts = {}
    for steps in (3, 9):
        every = [
            f"train.max_steps={steps}",
            f"train.log_every={steps}",
            f"train.save_every={steps}",
            f"train.eval_every={steps}",
        ]
        cfg = load_config("tiny", [*FAST, *every, "train.precision=fp32"])
        run = setup(cfg, tmp_path / str(steps), device="cpu")
        from electra.training.loop import train

        with HostReads() as reads:
            try:
                train(run)
            finally:
                run.lock.release()
        counts[steps] = sorted(reads.calls)
    assert counts[3] == counts[9]


# -- prefetched batches ---------------------------------------------------------------------------------------


def _same_batches(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k]) if isinstance(x[k], torch.Tensor) else x[k] == y[k], k


def test_the_prefetched_loop_yields_the_same_batches_resume_included(tmp_path):
    cfg = load_config("tiny", [*FAST, "train.max_steps=8", "train.micro_batch_size=4"])
    run = setup(cfg, tmp_path, device="cpu")
    try:
        for start in (0, 5):  # a fresh run, and one resumed at step 5
            with prefetch_batches(run, start) as prefetch:
                for step in range(start, 8):
                    got, got_masked = step_batches(run, step, prefetch.get(step))
                    want, want_masked = step_batches(run, step)
                    _same_batches(got, want)
                    for m, n in zip(got_masked, want_masked, strict=True):
                        assert torch.equal(m.input_ids, n.input_ids) and torch.equal(m.positions, n.positions)
    finally:
        run.lock.release()


def test_a_prefetch_error_is_raised_at_its_step_and_close_stops_the_thread():
    def load(step):
        if step == 2:
            raise OSError("disk gone")
        return step

    prefetch = Prefetcher(load, range(10), depth=1)
    assert [prefetch.get(0), prefetch.get(1)] == [0, 1]
    with pytest.raises(OSError, match="disk gone"):
        prefetch.get(2)
    prefetch.close()
    endless = Prefetcher(lambda s: s, iter(int, 1), depth=1)  # blocked on a full queue
    endless.close()
    assert not endless._thread.is_alive()


# -- SDPA without a mask --------------------------------------------------------------------------------------


def test_a_batch_without_padding_gets_no_mask_and_the_same_attention(tmp_path, monkeypatch):
    cfg = load_config("tiny", [*FAST, "train.max_steps=1"])
    run = setup(cfg, tmp_path, device="cpu")
    try:
        (full,), _ = step_batches(run, 0)
    finally:
        run.lock.release()
    assert full["no_padding"] == bool(full["attention_mask"].all())

    rows = {"input_ids": np.ones((2, 4), np.int64), "attention_mask": np.ones((2, 4), np.int64)}
    assert host_batch(rows, np.arange(2), pin=False)["no_padding"] is True
    rows["attention_mask"][1, 3] = 0
    assert host_batch(rows, np.arange(2), pin=False)["no_padding"] is False

    padded = {"attention_mask": torch.tensor([[1, 1, 0]]), "no_padding": False}
    assert model_mask(padded) is padded["attention_mask"] and model_mask({**padded, "no_padding": True}) is None

    # through `train_step`: every attention call of a batch without padding gets no mask (SDPA may pick flash), of
    # a padded batch the mask; 2 layers x (generator, discriminator) calls each
    masks = []
    sdpa = F.scaled_dot_product_attention

    def spy(*args, attn_mask=None, **kwargs):
        masks.append(attn_mask)
        return sdpa(*args, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    model = tiny_model().train()
    params = list(model.parameters())
    optimizer = torch.optim.SGD(params, lr=0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    for pad_from, no_padding in ((None, True), ([24, 24, 20], False)):
        ids, attention, types = random_batch(B=3, T=24, pad_from=pad_from)
        batch = {
            "input_ids": ids,
            "attention_mask": attention.bool(),
            "token_type_ids": types,
            "no_padding": no_padding,
        }
        masks.clear()
        train_step(
            model, optimizer, scaler, params, [batch], [masked(ids, attention)], 1, contextlib.nullcontext(), 1.0
        )
        assert len(masks) == 4
        assert all(m is None for m in masks) if no_padding else all(m is not None and not m.all() for m in masks)

    # and the attention without a mask is the one with the all-ones mask
    model.eval()
    ids, attention, types = random_batch(B=3, T=24)
    with torch.no_grad():
        torch.testing.assert_close(
            model.discriminator_logits(ids, None, types), model.discriminator_logits(ids, attention, types)
        )


# -- the bench's schedule and the study's timing -------------------------------------------------------------


def test_the_bench_step_runs_at_the_schedules_learning_rate():
    cfg = load_config("tiny", ["data.seq_len=32"])
    step = bench.make_pretrain_step("ours", cfg, 4, CPU, "fp32", compile=False)
    opt_groups = []
    for i in (0, 3, 50):
        step(i)
        opt_groups.append(step.optimizer.param_groups[0]["lr"])
    assert opt_groups == [learning_rate(i, cfg) for i in (0, 3, 50)]


def test_the_study_times_the_step_the_run_will_execute():
    cfg = load_config("tiny", [*FAST, "train.precision=bf16", "train.micro_batch_size=2"])
    step = calibration_step(cfg, "cpu")
    assert step.settings == {"dtype": "bf16", "compile": False, "micro_batch": 2}
    step(0)  # and it runs: 4 micro-batches of 2


def test_accumulated_bench_step_equals_the_whole_batch():
    cfg = load_config("tiny", ["data.seq_len=32", "model.dropout=0.0", "model.attention_dropout=0.0"])
    whole = bench.make_pretrain_step("ours", cfg, 4, CPU, "fp32", compile=False)
    parts = bench.make_pretrain_step("ours", cfg, 4, CPU, "fp32", compile=False, micro_batch=2)
    a, b = [whole(i).item() for i in range(3)], [parts(i).item() for i in range(3)]
    np.testing.assert_allclose(a, b, rtol=1e-5)


# -- resume onto this rank's device ---------------------------------------------------------------------------


@NO_CUDA
def test_a_checkpoint_saved_on_cuda_0_resumes_on_this_ranks_device(tmp_path, monkeypatch):
    """Rewrites a checkpoint's optimizer state as a GPU run saves it (storages tagged cuda:0): without a
    map_location, torch.load would put it on cuda:0 in every rank, and here, without CUDA, fail to load it."""
    import torch.serialization

    from electra.training.checkpoint import list_checkpoints
    from tests.helpers import reseal_checkpoint

    args = [*FAST, "train.save_every=2", "train.log_every=2"]
    pretrain(load_config("tiny", [*args, "train.max_steps=2"]), tmp_path, device="cpu")
    (ckpt,) = list_checkpoints(tmp_path)
    state = torch.load(ckpt / "optimizer.pt", weights_only=True)
    with monkeypatch.context() as m:
        m.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        torch.save(state, ckpt / "optimizer.pt")
    with pytest.raises(RuntimeError, match="CUDA"):
        torch.load(ckpt / "optimizer.pt", weights_only=True)  # the file is as a GPU run leaves it
    reseal_checkpoint(ckpt)
    meta = pretrain(load_config("tiny", [*args, "train.max_steps=3"]), tmp_path, resume="auto", device="cpu")
    assert meta.step == 3
    assert json.loads((list_checkpoints(tmp_path)[-1] / "state.json").read_text())["step"] == 3


def test_glue_fine_tuning_runs_bf16_on_cpu_when_asked_and_auto_as_pretraining():
    from electra.glue.finetune import finetune_precision

    def autocast_for(device, precision):
        return devices.autocast_for(finetune_precision(device, precision), device)

    with autocast_for(CPU, "bf16"), torch.no_grad():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with autocast_for(CPU, "auto"), torch.no_grad():  # as pretraining's auto: fp32 on a CPU
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    with autocast_for(CPU, "fp32"), torch.no_grad():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_the_loops_auc_equals_sklearns_ties_included():
    from sklearn.metrics import roc_auc_score

    from electra.training.evaluation import roc_auc

    rng = np.random.default_rng(0)
    for n in (2, 50, 3000):
        y = rng.integers(0, 2, n).astype(float)
        y[:2] = [0, 1]
        s = rng.integers(0, 7, n).astype(np.float32)  # many ties
        assert roc_auc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert np.isnan(roc_auc(np.ones(4), np.arange(4.0)))
