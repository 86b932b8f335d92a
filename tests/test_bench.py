"""`electra bench`: the reported numbers are consistent with each other and with electra.modeling.flops, and the HF
baseline is the same model (parameters, tying) doing the FLOPs the formula says (full-vocabulary head)."""

import json

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from electra import bench
from electra.config import load_config
from electra.glue.heads import GlueModel
from electra.modeling.electra import ElectraForPretraining, ElectraModel
from electra.modeling.flops import finetune_step_flops, pretrain_step_flops
from electra.training import timing
from tests.helpers import cli_main, run_python

TINY = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--steps", "2", "--warmup", "1", "--device", "cpu"]


def _last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _check_row(row: dict, batch_size: int, seq_len: int) -> None:
    seconds = row["ms_per_step"] / 1000
    assert row["ms_min"] <= row["ms_per_step"] <= row["ms_max"]
    assert row["sequences_per_s"] == pytest.approx(batch_size / seconds)
    assert row["tokens_per_s"] == pytest.approx(batch_size * seq_len / seconds)
    assert row["achieved_tflops"] == pytest.approx(row["flops_per_step"] / seconds / 1e12)
    assert row["peak_fraction"] == pytest.approx(row["achieved_tflops"] / row["peak_tflops"])
    assert 0 < row["peak_tflops"] <= row["peak_tflops_max"]


def test_pretrain_both_reports_consistent_numbers(capsys):
    assert cli_main(["bench", "pretrain", *TINY, "--impl", "both"]) == 0
    out = _last_json(capsys)
    cfg = load_config("tiny", ["data.seq_len=32"])
    assert (out["impl"], out["hf"]["impl"], out["device"], out["dtype"]) == ("ours", "hf", "cpu", "fp32")
    assert out["flops_per_step"] == pretrain_step_flops(cfg, 4, 32)
    assert out["hf"]["flops_per_step"] == pretrain_step_flops(cfg, 4, 32, full_vocab_head=True)
    _check_row(out, 4, 32)
    _check_row(out["hf"], 4, 32)
    assert out["speedup_vs_hf_min"] <= out["speedup_vs_hf"]
    assert out["hours_per_1m_steps"] == pytest.approx(out["ms_per_step"] * 1e6 / 3.6e6)
    assert out["peak_memory_gb"] > 0


def test_finetune_reports_training_and_evaluation(capsys):
    assert cli_main(["bench", "finetune", *TINY, "--eval-batch-size", "8", "--num-labels", "3"]) == 0
    out = _last_json(capsys)
    cfg = load_config("tiny")
    assert out["flops_per_step"] == finetune_step_flops(cfg.model, 4, 32, 3)
    assert out["eval"]["flops_per_step"] == finetune_step_flops(cfg.model, 8, 32, 3, train=False)
    _check_row(out, 4, 32)
    _check_row(out["eval"], 8, 32)
    assert out["eval_sequences_per_s"] == out["eval"]["sequences_per_s"]


@pytest.mark.parametrize("head", ["cls-linear", "hf"])
def test_finetune_flops_formula_counts_the_glue_model(head):
    cfg = load_config("tiny", ["model.dropout=0.0", "model.attention_dropout=0.0"])
    model = GlueModel(ElectraModel(cfg.model), cfg.model, head, 3)
    ids, mask, types = bench.synthetic_batch(cfg.model.vocab_size, 4, 32, torch.device("cpu"))
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        model(ids, mask, types).sum().backward()
    assert counter.get_total_flops() == finetune_step_flops(cfg.model, 4, 32, 3, head=head)


def test_hf_baseline_is_the_same_model_with_a_full_vocabulary_head():
    transformers = pytest.importorskip("transformers")  # noqa: F841
    cfg = load_config("tiny", ["model.dropout=0.0", "model.attention_dropout=0.0", "data.seq_len=32"])
    gen, disc = timing.hf_models(cfg)
    pair = torch.nn.ModuleList([gen, disc])
    ours = ElectraForPretraining(cfg.model, cfg.objective)
    # one shared embedding block and a tied output layer: the same parameter count as ours
    assert gen.electra.embeddings is disc.electra.embeddings
    assert gen.generator_lm_head.weight is disc.electra.embeddings.word_embeddings.weight
    assert sum(p.numel() for p in pair.parameters()) == sum(p.numel() for p in ours.parameters())
    # and the FLOPs of one forward + backward are the formula's with the head at every position
    loss_fn = timing.hf_loss_fn(cfg, pair, torch.device("cpu"), "fp32")
    batch = bench.synthetic_batch(cfg.model.vocab_size, 4, 32, torch.device("cpu"))
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        loss_fn(*batch, torch.arange(4)).backward()
    assert counter.get_total_flops() == pretrain_step_flops(cfg, 4, 32, full_vocab_head=True)


def test_training_step_lowers_the_loss_on_a_fixed_batch():
    cfg = load_config(
        "tiny", ["model.dropout=0.0", "model.attention_dropout=0.0", "data.seq_len=32", "train.warmup_steps=0"]
    )  # step(0) at the full rate: the schedule's lr for step 0
    step = bench.make_pretrain_step("ours", cfg, 4, torch.device("cpu"), "fp32", compile=False)
    # the same example ids each step: the same masked batch, which AdamW at 5e-4 fits quickly
    losses = [step(0).item() for _ in range(15)]
    assert losses[-1] < 0.9 * losses[0]  # 41.5 -> 35.1 here


def test_check_agrees_on_cpu(capsys):
    """bf16 autocast vs fp32 on CPU, eager only here (the compiled modes are covered by test_compile.py)."""
    cfg = load_config("tiny", ["model.dropout=0.0", "model.attention_dropout=0.0", "data.seq_len=32"])
    losses = {}
    for dtype in ("fp32", "bf16"):
        step = bench.make_pretrain_step("ours", cfg, 4, torch.device("cpu"), dtype, compile=False)
        losses[dtype] = torch.tensor([step(i).item() for i in range(3)])
    assert torch.allclose(losses["bf16"], losses["fp32"], rtol=bench.BF16_RTOL)


def test_matmul_probe_and_allocator_tuning():
    probe = bench.matmul_probe(torch.device("cpu"), "fp32")
    assert probe() > 0
    assert isinstance(bench.keep_freed_memory_in_heap(), bool)


# Runs the CLI with the packages a bare GPU machine lacks hidden from the import system (scripts/bench_gpu.sh
# promises to need only torch, numpy, tokenizers, safetensors and what tokenizers brings: huggingface_hub, pyyaml).
BARE_MACHINE = """
import importlib.machinery, runpy, sys
HIDDEN = {"transformers", "sklearn", "scipy", "datasets", "matplotlib"}
class Finder(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        return None if name.split(".")[0] in HIDDEN else super().find_spec(name, path, target)
sys.meta_path = [Finder if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
if sys.argv[1] == "import":
    __import__(sys.argv[2])
else:
    sys.argv = ["electra", *sys.argv[1:]]
    runpy.run_module("electra.cli", run_name="__main__")
"""


@pytest.mark.slow
def test_bench_needs_none_of_the_packages_a_bare_gpu_machine_lacks():
    def run(*args: str):
        # check's compiled modes run eager here (torch.compile returns the function it is given): building inductor's
        # kernels in a fresh process took 2.5 minutes and imports none of the hidden packages; modeling/test_compile.py
        # compiles them
        return run_python("-c", BARE_MACHINE, *args, env={"TORCH_COMPILE_DISABLE": "1"})

    assert "No module named 'transformers'" in run("import", "transformers").stderr  # the hiding works
    for what in ("pretrain", "finetune", "check"):
        done = run("bench", what, *(TINY if what != "check" else TINY[:-4] + TINY[-2:]))  # check: no --warmup
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout.strip().splitlines()[-1])["device"] == "cpu"


def test_the_real_loop_needs_none_of_them_either(tmp_path):
    """scripts/bench_gpu.sh part 5 runs `electra pretrain` (held-out evaluation and a checkpoint included)."""
    args = [
        "pretrain",
        "--config",
        "tiny",
        "--max-steps",
        "2",
        "--batch-size",
        "4",
        "--eval-every",
        "2",
        "--set",
        "train.eval_batches=1",
        "--set",
        "data.seq_len=32",
        "--out",
        str(tmp_path / "run"),
    ]
    done = run_python("-c", BARE_MACHINE, *args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"eval_disc_auc"' in (tmp_path / "run" / "metrics.jsonl").read_text()


class SyntheticExamples:
    """The bench's synthetic sequences as a pretraining corpus: the loop trains on what the bench times."""

    seq_len = 32

    def examples(self, example_ids) -> dict:
        ids, mask, types = bench.synthetic_batch(64, len(example_ids), self.seq_len, torch.device("cpu"))
        return {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": types.numpy()}


def test_the_bench_step_calls_the_model_as_the_loop_does(tmp_path, monkeypatch):
    """Without padding, the loop passes no attention mask (SDPA's flash kernel takes none); the bench's and the
    study's synthetic batches (no padding) must not pass one either, or they time another kernel than the run's."""
    from electra.data.pretraining_data import PretrainingData
    from electra.training.loop import pretrain
    from tests.helpers import token_info

    masks = []
    forward = ElectraForPretraining.forward

    def recording(self, input_ids, attention_mask, *args, **kwargs):
        if self.training:  # the training step's calls, not the held-out evaluation's
            masks.append(attention_mask)
        return forward(self, input_ids, attention_mask, *args, **kwargs)

    monkeypatch.setattr(ElectraForPretraining, "forward", recording)
    cfg = load_config(
        "tiny",
        ["data.seq_len=32", "train.batch_size=4", "train.max_steps=1", "train.eval_batches=1", "model.vocab_size=64"],
    )
    data = PretrainingData(train=SyntheticExamples(), eval=SyntheticExamples(), tokens=token_info(vocab_size=64))
    pretrain(cfg, tmp_path, device="cpu", data=data, progress=False)
    loop, masks[:] = list(masks), []
    bench.make_pretrain_step("ours", cfg, 4, torch.device("cpu"), "fp32", compile=False, micro_batch=2)(0)
    assert len(loop) == 1 and len(masks) == 2
    assert all(m is None for m in loop + masks), [m is None for m in loop + masks]


def test_the_bench_turns_tf32_on_for_its_device_as_pretraining_does(monkeypatch):
    """The bench and the study's timing run the step with the matmul mode of the run (TF32 on Ampere and later)."""
    asked = []
    for module in (bench, timing):  # the step is built in training/timing.py, the fine-tuning step in bench.py
        monkeypatch.setattr(module, "enable_tf32", lambda device: asked.append(device) or False)
    cfg = load_config("tiny", ["data.seq_len=32"])
    timing.make_pretrain_step("ours", cfg, 4, torch.device("cpu"), "fp32", compile=False)
    settings = bench.BenchSettings(preset="tiny", batch_size=4, seq_len=32, device="cpu", steps=1, warmup=0)
    assert bench.bench_finetune(settings)["tf32"] is False
    assert asked == [torch.device("cpu")] * 2
