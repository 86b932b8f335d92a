#!/usr/bin/env bash
# The whole GPU check of docs/benchmarks.md in one run, from the source tree (no install step, no registry):
#
#   scripts/bench_gpu.sh [OUT_DIR]        # default OUT_DIR: runs/bench_gpu
#
#   1. check     fp32 vs bf16 and eager vs compiled losses agree over 10 training steps; no host-device sync
#   2. time      ELECTRA-Small, batch 128, length 128, bf16, torch.compile: the target is <= 10 ms per step;
#                its peak memory beside the --max-memory-gb estimate
#   3. vs_hf     eager ours vs the transformers baseline, alternating (needs transformers; skipped without it)
#   4. finetune  a GLUE step (batch 32) and evaluation throughput, bf16 eager
#   5. loop      the real loop: `electra pretrain` on a corpus prepared here (the built-in synthetic language,
#                WordPiece trained on it), LOOP_STEPS steps with data loading, masking, logging, evaluation
#                and a checkpoint; its ms/step (median of the log windows, and the whole loop's from
#                run.json's train_seconds) beside the synthetic step's, and its peak memory
#                (torch.cuda.max_memory_allocated) against the --max-memory-gb estimate
#   6. graphs    as 2 with CUDA graphs (torch.compile mode reduce-overhead); run last, skipped first
#
# Needs python3 with a CUDA build of torch, numpy, tokenizers, safetensors and pyyaml (which tokenizers brings
# through huggingface_hub); tests/test_bench.py runs the bench with everything else hidden. Every part has a
# time limit and the whole run stays under BUDGET seconds (570 by default: 10 minutes with room for Python
# start-up); later parts are skipped when the budget is spent. Each part writes OUT_DIR/NAME.log and its JSON
# result line to OUT_DIR/NAME.json; a summary is printed at the end. Exit status 1 when the check fails or a part
# errors. DEVICE, PRESET, BATCH, SEQ, STEPS, LOOP_STEPS and DTYPE override the defaults (e.g. DEVICE=cpu PRESET=tiny BATCH=4
# SEQ=32 STEPS=2 DTYPE=fp32 for a smoke test without a GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-runs/bench_gpu}
PY=${PYTHON:-python3}
BUDGET=${BUDGET:-570}
DEVICE=${DEVICE:-cuda}
PRESET=${PRESET:-small}
BATCH=${BATCH:-128}
SEQ=${SEQ:-128}
STEPS=${STEPS:-50}
DTYPE=${DTYPE:-bf16}
LOOP_STEPS=${LOOP_STEPS:-300}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT_DIR"
status=0

"$PY" - "$DEVICE" >"$OUT_DIR/env.json" <<'EOF' || { cat "$OUT_DIR/env.json"; echo "environment check failed"; exit 1; }
import json, platform, sys
import numpy, torch, yaml, tokenizers, safetensors  # noqa: F401  (what the package needs without an install step)
device = sys.argv[1]
if device == "cuda" and not torch.cuda.is_available():
    sys.exit(f"no CUDA device visible to torch {torch.__version__}")
try:
    import transformers
    hf = transformers.__version__
except ImportError:
    hf = None
info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "transformers": hf, "cpu_count": __import__("os").cpu_count()}
if device == "cuda":
    p = torch.cuda.get_device_properties(0)
    info.update(gpu=p.name, gpu_memory_gb=round(p.total_memory / 2**30, 1), capability=f"{p.major}.{p.minor}")
print(json.dumps(info))
EOF
echo "== env: $(cat "$OUT_DIR/env.json")"

part() {  # part NAME LIMIT_S ARGS...: `electra ARGS` under a time limit; keeps the log and the last JSON line
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - SECONDS))
  if ((left < 30)); then
    echo "== $name: skipped (time budget spent)"
    echo '{"skipped": "time budget spent"}' >"$OUT_DIR/$name.json"
    return
  fi
  ((limit > left)) && limit=$left
  echo "== $name (limit ${limit}s): electra $*"
  timeout "$limit" "$PY" -m electra.cli "$@" >"$OUT_DIR/$name.log" 2>&1
  local rc=$?
  if ! tail -n 1 "$OUT_DIR/$name.log" | grep '^{' >"$OUT_DIR/$name.json"; then
    echo "{\"error\": \"exit $rc\", \"log\": \"$OUT_DIR/$name.log\"}" >"$OUT_DIR/$name.json"
    tail -n 5 "$OUT_DIR/$name.log"
  fi
  ((rc != 0)) && status=1
  echo "   exit $rc, ${SECONDS}s elapsed"
}

common=(--preset "$PRESET" --seq-len "$SEQ" --device "$DEVICE")
part check 210 bench check "${common[@]}" --batch-size "$BATCH" --steps 10
part time 150 bench pretrain "${common[@]}" --batch-size "$BATCH" --steps "$STEPS" --dtype "$DTYPE" --compile
if "$PY" -c "import transformers" 2>/dev/null; then
  part vs_hf 60 bench pretrain "${common[@]}" --batch-size "$BATCH" --steps 10 --dtype "$DTYPE" --impl both
else
  echo '{"skipped": "transformers not installed"}' >"$OUT_DIR/vs_hf.json"
fi
part finetune 60 bench finetune "${common[@]}" --batch-size 32 --steps 20 --dtype "$DTYPE"
# 5. the real loop, on 4000 documents of the built-in language prepared as `electra data prepare` does (its
# tokenizer's vocabulary is far below 30522: the generator head is smaller than on real text)
loop_data() {
  "$PY" -c "from electra.data.synthetic import write_synthetic_text as w; w('$OUT_DIR/corpus.txt', num_documents=4000)" &&
    "$PY" -m electra.cli tokenizer train --kind wordpiece --vocab-size 30522 --overwrite --out "$OUT_DIR/tok" "$OUT_DIR/corpus.txt" &&
    "$PY" -m electra.cli data prepare --tokenizer "$OUT_DIR/tok" --out "$OUT_DIR/data" "$OUT_DIR/corpus.txt"
} >"$OUT_DIR/loop_data.log" 2>&1
rm -rf "$OUT_DIR/loop_run" "$OUT_DIR/data"
if ((BUDGET - SECONDS < 60)); then
  echo '{"skipped": "time budget spent"}' >"$OUT_DIR/loop.json"
elif loop_data; then
  part loop 170 pretrain --config "$PRESET" --data "$OUT_DIR/data" --out "$OUT_DIR/loop_run" --device "$DEVICE" \
    --batch-size "$BATCH" --max-steps "$LOOP_STEPS" --log-every 50 --eval-every $((LOOP_STEPS / 2)) \
    --save-every $((LOOP_STEPS / 2)) --precision "$DTYPE" --set "data.seq_len=$SEQ"
  cp "$OUT_DIR/loop_run/run.json" "$OUT_DIR/loop.json" 2>/dev/null || true
else
  echo '{"error": "preparing the corpus failed", "log": "'"$OUT_DIR/loop_data.log"'"}' >"$OUT_DIR/loop.json"
  status=1
fi
# 6. CUDA graphs last: the part dropped when the budget runs out
part graphs 120 bench pretrain "${common[@]}" --batch-size "$BATCH" --steps "$STEPS" --dtype "$DTYPE" --compile \
  --compile-mode reduce-overhead

"$PY" - "$OUT_DIR" "$BATCH" "$SEQ" <<'EOF'
import json, sys
from pathlib import Path
out, batch, seq = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def load(name):
    try:
        return json.loads((out / f"{name}.json").read_text())
    except (OSError, ValueError):
        return {"error": "no result"}
env, check = load("env"), load("check")
print(f"\n== summary ({env.get('gpu', env.get('cpu_count'))}, torch {env.get('torch')})")
print(f"check: ok={check.get('ok')}  max_rel_diff={check.get('max_rel_diff')}  syncs={check.get('host_device_syncs')}")
print(f"{'part':10} {'ms/step':>9} {'tokens/s':>11} {'TFLOP/s':>8} {'peak':>7} {'of peak':>8} {'h/1M':>6} {'GB':>6}")
for name in ("time", "graphs", "vs_hf", "finetune"):
    r = load(name)
    rows = [(name, r)] + ([("  hf", r["hf"])] if "hf" in r else []) + ([("  eval", r["eval"])] if "eval" in r else [])
    for label, x in rows:
        if "ms_per_step" not in x:
            print(f"{label:10} {json.dumps(x)[:100]}")
            continue
        print(f"{label:10} {x['ms_per_step']:9.2f} {x['tokens_per_s']:11.0f} {x['achieved_tflops']:8.1f} "
              f"{x['peak_tflops']:7.1f} {x['peak_fraction']:8.3f} {x['ms_per_step'] / 3.6:6.2f} "
              f"{r.get('peak_memory_gb', float('nan')):6.2f}")
    if "speedup_vs_hf" in r:
        print(f"  speedup vs hf (median of per-step ratios): {r['speedup_vs_hf']:.2f}")
t = load("time")
if "memory_estimate_gb" in t:
    print(f"time peak memory {t.get('peak_memory_gb', float('nan')):.2f} GB vs the --max-memory-gb estimate "
          f"{t['memory_estimate_gb']:.2f} GB (batch {batch})")
loop = load("loop")
rows = []
try:
    rows = [json.loads(line) for line in (out / "loop_run" / "metrics.jsonl").read_text().splitlines()]
except (OSError, ValueError):
    pass
windows = [r for r in rows if "tokens_per_s" in r]
speeds = [r["tokens_per_s"] for r in windows][1:]  # the first window holds compilation
if speeds and "step" in loop:
    ms = sorted(1000 * batch * seq / s for s in speeds)[len(speeds) // 2]
    print(f"loop      {ms:9.2f} ms/step (median of {len(speeds)} log windows after the first; "
          f"precision {loop.get('precision')}, compiled {loop.get('compiled')}, {loop['step']} steps; the "
          "vocabulary is the synthetic corpus's tokenizer's, smaller than small's 30522)")
    # the whole loop: run.json's train_seconds runs from the first step to the last one, so it holds compilation,
    # logging and the halfway evaluation and checkpoint (the last ones come after it stops); the median does not
    first = windows[0]["step"] * batch * seq / windows[0]["tokens_per_s"]  # the first window's seconds
    whole = 1000 * loop["train_seconds"] / loop["step"]
    after = 1000 * (loop["train_seconds"] - first) / (loop["step"] - windows[0]["step"])
    print(f"loop      {whole:9.2f} ms/step over the whole loop (run.json train_seconds / steps: compilation, "
          f"logging, an evaluation and a checkpoint included); {after:.2f} ms/step after the first window")
    print(f"loop peak memory {loop.get('peak_memory_gb')} GB allocated vs the --max-memory-gb estimate "
          f"{loop.get('memory_estimate_gb')} GB for its micro-batch")
else:
    print(f"loop      {json.dumps(loop)[:200]}")
best = [load(n)["ms_per_step"] for n in ("time", "graphs") if "ms_per_step" in load(n)]
if best:
    print(f"target <= 10 ms/step: {'met' if min(best) <= 10 else 'missed'} (best {min(best):.2f} ms)")
EOF
exit $status
