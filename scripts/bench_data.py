"""Benchmark the data pipeline: tokenizer training, corpus preparation and batch assembly (numbers: docs/data.md).

    .venv/bin/python scripts/bench_data.py                     # the shared Wikipedia sample, 3 repeats
    .venv/bin/python scripts/bench_data.py --corpus FILE_OR_DIR --repeats 5 --baseline

Timings are wall clock, end to end (preparation includes reading, worker start-up and writing the folder), and
the median of the repeats is reported with the min and max: on a shared machine single runs are noisy. Nothing is
asserted; the script prints a Markdown table and, with --json, writes the raw numbers.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from electra.config import DataConfig
from electra.data.prepare import prepare
from electra.data.pretraining_data import open_pretraining_data
from electra.data.synthetic import synthetic_corpus
from electra.data.tokenizer import load_tokenizer, train_tokenizer

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "corpus" / "wikipedia_en_sample.txt"


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the preparation workers), user + system."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(fn, repeats: int, cpu: list[float] | None = None) -> tuple[list[float], object]:
    """Wall seconds of each repeat (CPU seconds appended to `cpu`: robust to other load on the machine)."""
    times, result = [], None
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), cpu_seconds()
        result = fn()
        times.append(time.perf_counter() - start)
        if cpu is not None:
            cpu.append(cpu_seconds() - start_cpu)
    return times, result


def spread(times: list[float]) -> str:
    return f"{statistics.median(times):.2f} s (min {min(times):.2f}, max {max(times):.2f}, n={len(times)})"


def bench_assembly(data_dir: Path | None, builder: str, batch: int, seq_len: int, repeats: int) -> list[float]:
    """Tokens per second of `examples()` for consecutive global batches, one process."""
    data = open_pretraining_data(
        DataConfig(path=str(data_dir) if data_dir else None, builder=builder, seq_len=seq_len), seed=0
    )
    steps = 200
    data.train.examples(np.arange(batch))  # warm the page cache and numpy
    rates = []
    for r in range(repeats):
        start = time.perf_counter()
        for step in range(r * steps, (r + 1) * steps):
            data.train.examples(np.arange(step * batch, (step + 1) * batch))
        rates.append(steps * batch * seq_len / (time.perf_counter() - start))
    return rates


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help=".txt/.jsonl file or folder")
    p.add_argument("--kind", choices=["bpe", "wordpiece"], default="bpe")
    p.add_argument("--vocab-size", type=int, default=30522)
    p.add_argument("--tokenizer", type=Path, help="use this tokenizer instead of training one")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workers", type=int, default=None, help="preparation workers (default: prepare's)")
    p.add_argument("--baseline", action="store_true", help="also time plain HF encode_batch over every line")
    p.add_argument("--json", type=Path, help="write the raw numbers here")
    args = p.parse_args()
    if not args.corpus.exists():
        raise SystemExit(f"{args.corpus}: not found (pass --corpus)")
    results: dict = {
        "machine": f"{platform.node()}: {len(os.sched_getaffinity(0))} cores, {platform.processor() or '?'}",
        "corpus": str(args.corpus.name),
        "load_average_before": os.getloadavg(),
    }
    work = Path(tempfile.mkdtemp(prefix="bench_data_"))
    if args.tokenizer is None:
        times, path = timed(
            lambda: train_tokenizer(args.kind, args.vocab_size, [str(args.corpus)], work / "tok", show_progress=False),
            1,
        )
        results["tokenizer_train_s"] = times
        tok_dir = Path(path).parent
    else:
        tok_dir = args.tokenizer

    runs = itertools.count()
    results["prepare_cpu_s"] = cpu = []
    times, meta = timed(
        lambda: prepare([str(args.corpus)], tok_dir, work / f"prep{next(runs)}", args.workers, show_progress=False),
        args.repeats,
        cpu,
    )
    results["prepare_s"] = times
    results["num_tokens"] = meta["num_tokens"]
    results["bytes"] = meta["bytes"]
    results["prepare_tokens_per_s"] = [meta["num_tokens"] / t for t in times]
    data_dir = work / "prep0"

    if args.baseline:  # what the word cache buys: HF alone, on all cores, no file writing
        tok = load_tokenizer(tok_dir)
        with open(args.corpus, encoding="utf-8", errors="replace") as f:
            lines = [s.strip() for s in f if s.strip()]

        def plain():
            return sum(
                len(e.ids)
                for i in range(0, len(lines), 4096)
                for e in tok.encode_batch_fast(lines[i : i + 4096], add_special_tokens=False)
            )

        results["baseline_hf_encode_s"], _ = timed(plain, 1)

    for name, folder, batch, seq_len in (("wikipedia", data_dir, 128, 128), ("synthetic", None, 32, 64)):
        for builder in ("dynamic", "static"):
            results[f"assembly_{name}_{builder}_B{batch}_T{seq_len}_tokens_per_s"] = bench_assembly(
                folder, builder, batch, seq_len, args.repeats
            )
    synthetic_corpus.cache_clear()
    results["synthetic_corpus_generation_s"], _ = timed(synthetic_corpus, 1)
    results["load_average_after"] = os.getloadavg()

    print(
        f"machine: {results['machine']}; load average before {results['load_average_before']}, "
        f"after {results['load_average_after']}"
    )
    print(f"corpus: {args.corpus.name}, {results['bytes'] / 1e6:.1f} MB, {results['num_tokens']:,} tokens\n")
    print("| step | time | rate |\n|---|---|---|")
    if "tokenizer_train_s" in results:
        print(f"| train {args.kind} tokenizer ({args.vocab_size}) | {spread(results['tokenizer_train_s'])} | |")
    rates = results["prepare_tokens_per_s"]
    print(f"| prepare | {spread(results['prepare_s'])} | {statistics.median(rates) / 1e6:.2f}M tokens/s |")
    cpu_rate = results["num_tokens"] / statistics.median(cpu) / 1e6
    print(f"| prepare, CPU time (all processes) | {spread(cpu)} | {cpu_rate:.2f}M tokens per CPU-second |")
    if args.baseline:
        t = results["baseline_hf_encode_s"][0]
        rate = results["num_tokens"] / t / 1e6
        print(f"| plain HF encode_batch_fast, all cores, no cache | {t:.2f} s | {rate:.2f}M tokens/s |")
    for key, value in results.items():
        if key.startswith("assembly_"):
            name = key.removeprefix("assembly_").removesuffix("_tokens_per_s")
            rate = statistics.median(value) / 1e6
            print(f"| batch assembly, {name} | | {rate:.1f}M tokens/s (median of {len(value)}) |")
    print(f"| synthetic corpus generation | {results['synthetic_corpus_generation_s'][0]:.2f} s | |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
