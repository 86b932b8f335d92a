"""Shared by the tests: where things are, the special token ids, tiny models and batches, running the CLI (in this
process or in a child), reading what a run left on disk, and dying at a chosen moment (the reliability tests).

The GLUE fixtures (GLUE folders, custom tasks, tokenizers, run folders) are built by tests/glue_fixtures.py.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import load_file

from electra.cli import main as cli_main  # noqa: F401 - `electra ARGS` in this process: the exit code (output: capsys)
from electra.config import ModelConfig, ObjectiveConfig, num_mask_slots
from electra.data.synthetic import CORPUS_SEED, decode, synthetic_documents
from electra.data.tokenizer import TokenizerInfo
from electra.modeling.electra import ElectraForPretraining
from electra.modeling.masking import mask_tokens
from electra.training.checkpoint import COMPLETE_MARKER, VERIFIED_BY, list_checkpoints
from electra.utils.faults import ENV as FAILPOINT_ENV
from electra.utils.files import (
    CHECKSUMS_FILE,
    checksums_text,
    sha256_file,
    write_atomic,
)

# -- where things are ------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
"""The repository root."""
SHARED_DATA = ROOT.parent / "shared" / "data"
"""Real data beside the repository (GLUE files, a Wikipedia sample): the `shared_data` fixture skips without it."""

# -- special tokens ---------------------------------------------------------------------------------------------

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4  # the ids of every tokenizer we train (electra.data.tokenizer)
SPECIAL = torch.tensor([PAD, CLS, SEP, MASK])
"""Never chosen for masking ([UNK] is an ordinary token)."""


def token_info(vocab_size: int) -> TokenizerInfo:
    """A tokenizer's description with our special ids, for data made up in a test."""
    return TokenizerInfo(vocab_size=vocab_size, pad_id=PAD, unk_id=UNK, cls_id=CLS, sep_id=SEP, mask_id=MASK)


# -- tiny models and batches ------------------------------------------------------------------------------------


def tiny_model_config(**overrides) -> ModelConfig:
    """2 layers, hidden 32, vocabulary 97, no dropout: for the model, objective and equivalence tests."""
    base = dict(
        vocab_size=97,
        embedding_size=24,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        intermediate_size=64,
        generator_fraction=0.5,
        max_position_embeddings=64,
        dropout=0.0,
        attention_dropout=0.0,
    )
    base.update(overrides)
    return ModelConfig(**base)


def glue_model_config(vocab_size: int = 256, hidden: int = 32, embedding: int = 16, layers: int = 2) -> ModelConfig:
    """The fine-tuning tests' model (the fixture run folders' too): 2 heads, positions up to 128, default dropout."""
    return ModelConfig(
        vocab_size=vocab_size,
        embedding_size=embedding,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=128,
        generator_fraction=0.5,
    )


def tiny_model(**overrides) -> ElectraForPretraining:
    return ElectraForPretraining(tiny_model_config(**overrides))


def random_batch(B=4, T=24, vocab=97, seed=0, pad_from=None):
    """[CLS] A [SEP] B [SEP] rows with type ids, optionally padded from per-row positions."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (B, T), generator=g)
    attention = torch.ones(B, T, dtype=torch.long)
    types = torch.zeros(B, T, dtype=torch.long)
    for row in range(B):
        end = T if pad_from is None else pad_from[row]
        ids[row, 0], ids[row, end // 2], ids[row, end - 1] = CLS, SEP, SEP
        types[row, end // 2 + 1 : end] = 1
        ids[row, end:], attention[row, end:] = PAD, 0
    return ids, attention, types


def masked(ids, attention, objective=None, seed=0):
    objective = objective or ObjectiveConfig()
    n = num_mask_slots(objective, ids.shape[1])
    return mask_tokens(ids, attention, torch.arange(ids.shape[0]), seed, objective, n, MASK, SPECIAL)


# -- the CLI in a child process ---------------------------------------------------------------------------------
# Most tests call the library, or `cli_main` in this process; a child process is for what needs one: a kill, a
# file size limit, torch.distributed, a fresh interpreter (imports, the offline hub cache).


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """os.environ as it is now (monkeypatched variables included), the repository on PYTHONPATH, one OpenMP thread
    (two shared cores: threads that wait on each other make a tiny run many times slower), and `extra`."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(extra or {})}


def run_python(
    *argv: str, env: Mapping[str, str] | None = None, check: bool = False, **kwargs
) -> subprocess.CompletedProcess:
    """`python ARGV` in a child with `child_env(env)`, from the repository root, its output captured as text;
    `check`: fail with the end of its stderr unless it exits 0. Other keywords go to subprocess.run."""
    done = subprocess.run(
        [sys.executable, *argv], env=child_env(env), cwd=ROOT, capture_output=True, text=True, **kwargs
    )
    if check and done.returncode != 0:
        raise AssertionError(f"python {' '.join(argv)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return done


def run_cli(
    *args: str, env: Mapping[str, str] | None = None, check: bool = False, **kwargs
) -> subprocess.CompletedProcess:
    """`python -m electra.cli ARGS` in a child process (see `run_python`)."""
    return run_python("-m", "electra.cli", *args, env=env, check=check, **kwargs)


def start_cli(*args: str, env: Mapping[str, str] | None = None, **kwargs) -> subprocess.Popen:
    """`python -m electra.cli ARGS` started in a child (to be killed, or waited on); its output is discarded
    unless `stdout`/`stderr` say otherwise. Other keywords go to subprocess.Popen."""
    streams = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, **kwargs}
    return subprocess.Popen(cli_command(*args), env=child_env(env), cwd=ROOT, **streams)


def child_pids(pid: int, marker: str = "") -> list[int]:
    """The pids of process `pid`'s children (Linux /proc) whose command line contains `marker`."""
    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    out = []
    for c in children:
        try:
            if marker in Path(f"/proc/{c}/cmdline").read_text():
                out.append(c)
        except OSError:  # ended meanwhile
            pass
    return out


def alive(pids: list[int], within: float) -> list[int]:
    """Those of `pids` still running after waiting up to `within` seconds for all of them to end."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.1)
    return [p for p in pids if Path(f"/proc/{p}").exists()]


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "electra.cli", *args]


def torchrun(nproc: int, port: int, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """`electra ARGS` in `nproc` processes under torch.distributed.run (gloo on a CPU), rendezvous on `port`."""
    launch = ["-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_port", str(port)]
    return run_python(*launch, "-m", "electra.cli", *args, **kwargs)


@contextlib.contextmanager
def spawned_gloo_rank(rank: int, world: int, init_file: str) -> Iterator[None]:
    """The body of a rank started by `torch.multiprocessing.start_processes`: a gloo process group for the block,
    destroyed after it; when the block succeeds the process then leaves through os._exit(0), as electra.cli does for
    torchrun ranks. A spawned child otherwise ends in the interpreter's finalization, where gloo threads still owned
    by objects only the garbage collector frees (DDP's reducer) can abort it: 'terminate called without an active
    exception', SIGABRT, which start_processes reports as the rank's failure (seen once in CI). An exception in the
    block propagates as before (start_processes reports it with its traceback)."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# -- what a run left on disk ------------------------------------------------------------------------------------

WALL_CLOCK_FIELDS = {"tokens_per_s"}
"""Measured time: differs between any two runs, so compared runs must agree on every other field."""


def metric_rows(run: Path) -> list[dict]:
    """metrics.jsonl without the wall-clock fields; every line must parse (no partial line)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in WALL_CLOCK_FIELDS} for row in rows]


def newest_weights(run: Path) -> dict[str, torch.Tensor]:
    """The weights of the run's newest checkpoint."""
    return load_file(list_checkpoints(run)[-1] / "model.safetensors")


def final_state(run: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """The newest checkpoint's weights and optimizer state."""
    ckpt = list_checkpoints(run)[-1]
    return load_file(ckpt / "model.safetensors"), torch.load(ckpt / "optimizer.pt", weights_only=True)


def assert_same_state(a: Path, b: Path) -> int:
    """Weights and optimizer state of the newest checkpoints of runs `a` and `b` are bit-identical; returns the
    number of tensors compared."""
    (wa, oa), (wb, ob) = final_state(a), final_state(b)
    assert wa.keys() == wb.keys()
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name
    assert oa["param_groups"] == ob["param_groups"]
    assert oa["state"].keys() == ob["state"].keys()
    compared = len(wa)
    for i, state in oa["state"].items():
        for key, value in state.items():
            other = ob["state"][i][key]
            assert torch.equal(value, other) if torch.is_tensor(value) else value == other, (i, key)
            compared += 1
    return compared


# -- dying at a chosen moment (electra.utils.faults) ------------------------------------------------------------------

KILLED = -signal.SIGKILL
"""The exit code of a child that a failpoint killed."""


def die_at(
    failpoint: str | None,
    target: Callable,
    *args,
    before: Callable[[], None] | None = None,
    timeout: float = 300,
    **kwargs,
) -> int:
    """Run `target(*args, **kwargs)` in a forked child armed with ELECTRA_FAILPOINT=`failpoint` (after `before()`,
    e.g. a monkeypatch that only the child sees); returns its exit code: KILLED when the failpoint killed it."""

    def child() -> None:
        if failpoint is not None:
            os.environ[FAILPOINT_ENV] = failpoint
        if before is not None:
            before()
        target(*args, **kwargs)

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()
        raise TimeoutError(f"{failpoint}: the child did not end within {timeout} s")
    return proc.exitcode


def prepared_synthetic_corpus(root: Path, num_documents: int, vocab_size: int) -> Path:
    """ROOT/data: `num_documents` of the built-in language written as ROOT/corpus.txt, a byte-level BPE of
    `vocab_size` trained on it (ROOT/tok), and the corpus prepared with it, as `electra data prepare` does."""
    from electra.data.prepare import prepare
    from electra.data.tokenizer import train_tokenizer
    from tests.helpers import write_synthetic_text

    text = write_synthetic_text(root / "corpus.txt", num_documents=num_documents)
    tok = train_tokenizer("bpe", vocab_size, [str(text)], root / "tok", show_progress=False).parent
    prepare([str(text)], tok, root / "data", workers=1, show_progress=False)
    return root / "data"


# -- GLUE results and studies made up in a test --------------------------------------------------------------------


def glue_results(
    scores: dict[str, list[float]],
    at_chance: tuple[str, ...] = (),
    metric: str | None = "accuracy",
    baseline: float = 50.0,
) -> dict:
    """results.json of a sweep whose seeds scored `scores[task]` (on `metric`; None: each task's metric as the
    paper reports it), `at_chance` tasks flagged, as electra/glue/report.py summarizes them."""
    from electra.glue.report import summarize
    from electra.report.results import TASK_METRIC

    records = []
    for task, values in scores.items():
        name = metric or TASK_METRIC[task]
        for seed, v in enumerate(values):
            chance = {
                "at_chance": task in at_chance,
                "metric": name,
                "value": v,
                "baseline": baseline,
                "margin": 5.0,
                "constant": False,
            }
            records.append(
                {
                    "task": task,
                    "seed": seed,
                    "metrics": {name: v},
                    "extra_metrics": {},
                    "n_train": 10,
                    "n_eval": 5,
                    "chance": chance,
                    "seconds": 2.0,
                }
            )
    return {k: v for k, v in summarize(records).items() if not k.startswith("_")}


def fake_study(
    root: Path,
    scores: dict[str, list[float] | dict[str, list[float]]],
    task: str = "rte",
    metric: str | None = "accuracy",
    data: str | None = None,
    kinds: dict[str, str] | None = None,
) -> Path:
    """A study folder with only study.json and each setting's GLUE results.json (its seeds scoring
    `scores[setting]` on `task`'s `metric`, or on each task of a dict task -> scores); the setting `none` is the
    no-pretraining baseline, the others ELECTRA unless `kinds` says; `data`: the study's prepared corpus.
    `fake_pretrain_run` adds a setting's pretraining run."""
    settings, kinds = [], kinds or {}
    for name, values in scores.items():
        settings.append(
            {
                "name": name,
                "kind": "none" if name == "none" else kinds.get(name, "electra"),
                "steps": 0,
                "pretrain": f"runs/{name}/pretrain",
                "glue": f"runs/{name}/glue",
            }
        )
        (root / "runs" / name / "glue").mkdir(parents=True)
        results = glue_results(values if isinstance(values, dict) else {task: values}, metric=metric)
        (root / "runs" / name / "glue" / "results.json").write_text(json.dumps(results))
    (root / "study.json").write_text(json.dumps({"settings": settings, "spec": {"data": data}}))
    return root


def fake_seeded_study(
    root: Path,
    scores: dict[str, list[dict[str, list[float]]]],
    kinds: dict[str, str] | None = None,
    at_chance: dict[str, tuple[str, ...]] | None = None,
) -> Path:
    """A study folder as `electra study --pretrain-seeds N` leaves it, less the runs: study.json with each setting
    NAME under its pretraining seeds NAME-p0, NAME-p1, ... (NAME alone for one; group NAME, pretrain_seed k) and
    each one's GLUE results.json, its fine-tuning seeds scoring `scores[NAME][k][task]` (the paper's metric per
    task); `none` is the baseline, the others ELECTRA unless `kinds` says; `at_chance`: NAME -> tasks flagged at
    chance level."""
    settings, kinds, at_chance = [], kinds or {}, at_chance or {}
    for group, seeds in scores.items():
        for k, per_task in enumerate(seeds):
            name = group if len(seeds) == 1 else f"{group}-p{k}"
            settings.append(
                {
                    "name": name,
                    "kind": "none" if group == "none" else kinds.get(group, "electra"),
                    "steps": 0,
                    "pretrain": f"runs/{name}/pretrain",
                    "glue": f"runs/{name}/glue",
                    "group": group,
                    "pretrain_seed": k,
                }
            )
            (root / "runs" / name / "glue").mkdir(parents=True)
            results = glue_results(per_task, at_chance=at_chance.get(group, ()), metric=None)
            (root / "runs" / name / "glue" / "results.json").write_text(json.dumps(results))
    spec = {"data": None, "pretrain_seeds": len(next(iter(scores.values())))}
    (root / "study.json").write_text(json.dumps({"settings": settings, "spec": spec}))
    return root


def fake_pretrain_run(run: Path, steps: int, evals: list[dict] = (), overrides: list[str] = ()) -> Path:
    """A pretraining run folder as the report reads it: config.yaml (the tiny preset), run.json at `steps` and
    metrics.jsonl holding the held-out evaluations `evals`; no checkpoint."""
    from electra.config import load_config
    from electra.training.checkpoint import save_config

    run.mkdir(parents=True, exist_ok=True)
    save_config(load_config("tiny", list(overrides)), run / "config.yaml")
    (run / "run.json").write_text(json.dumps({"step": steps}))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    return run


def without_seconds(results):
    """A results.json (or any JSON value) less its wall-clock `seconds` fields: what a resumed or repeated run must
    reproduce exactly (the time it took differs from run to run)."""
    if isinstance(results, dict):
        return {k: without_seconds(v) for k, v in results.items() if k != "seconds"}
    if isinstance(results, list):
        return [without_seconds(v) for v in results]
    return results


def reseal_checkpoint(ckpt: Path) -> None:
    """Record the files `ckpt` holds now as its good state (after a deliberate edit, e.g. weight surgery or a test
    that plants a NaN): SHA256SUMS is rewritten over every file but COMPLETE."""
    ckpt = Path(ckpt)
    names = sorted(p.name for p in ckpt.iterdir() if p.is_file() and p.name not in (CHECKSUMS_FILE, COMPLETE_MARKER))
    write_atomic(ckpt / CHECKSUMS_FILE, checksums_text({n: sha256_file(ckpt / n) for n in names}))
    write_atomic(ckpt / COMPLETE_MARKER, VERIFIED_BY)


def write_synthetic_text(path: str | Path, seed: int = CORPUS_SEED, num_documents: int = 100) -> Path:
    """The corpus as a .txt file (one sentence per line, a blank line between documents), for the real pipeline."""
    path = Path(path)
    docs = synthetic_documents(seed, num_documents)
    path.write_text("\n\n".join("\n".join(decode(line) for line in doc) for doc in docs) + "\n")
    return path
