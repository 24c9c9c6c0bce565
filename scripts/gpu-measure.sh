#!/usr/bin/env bash
# On the GPU machine (docs/gpu.md): builds against the installed PyTorch's LibTorch, runs the
# runtime tests (Gloo, plus the device checks) and the store backend's (4 ranks sharing the
# GPU), then measures one NCCL rank training GPT 1.4B
# in bf16 (tokens/s, model FLOPs/s, allocator peak) and a layer profile on the GPU. Everything
# it measures goes under $OUT (default out/gpu). Needs .deps/gpu from scripts/gpu-deps.sh.
# Each step logs to $OUT/<step>.log and a failing step does not stop the later ones (device time
# is scarce); the exit status is that of the first failure. The most wanted figures come first
# (the bf16 run, its kinds, the closed loop), so that a call cut short at its limit still
# brings them back; the report at the end can be rerun on the files: its Python reads $OUT only.
# Usage: scripts/gpu-measure.sh [steps]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/gpu}
steps=${1:-12}
mkdir -p "$out"
status=0
# step NAME LIMIT_S CMD...: runs CMD with a time limit, its output in $out/NAME.log.
step() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "step $name: rc $rc, $((SECONDS - t0)) s"
  if [ "$rc" -ne 0 ]; then tail -40 "$out/$name.log"; [ "$status" -ne 0 ] || status=$rc; fi
  return "$rc"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.csv" 2>&1
python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch._C._GLIBCXX_USE_CXX11_ABI)' > "$out/torch-version.txt"
cat "$out/gpu.csv" "$out/torch-version.txt"
TARGETS="stagecraft test_runtime_train test_runtime_precision test_runtime_trace test_runtime_fast_paths test_runtime_lib" \
  step build 330 scripts/gpu-build.sh -DSTAGECRAFT_BUILD_BENCH=OFF -DSTAGECRAFT_WITH_CBC=OFF || exit "$status"
step ctest 150 ctest --test-dir build-gpu -j 6 -R 'RuntimePrecision|RuntimeTrain|RuntimeTrace|RuntimeFastPaths|RuntimeStoreBackend' --output-on-failure
tail -3 "$out/ctest.log"
bin=build-gpu/bin/stagecraft
# The GPU calibration (docs/gpu.md "Catalog against measured"): 25 s of back-to-back bf16
# GEMMs over five large shapes, the clock settled; then one estimate with the catalog's figures
# and one with the measured ones. GPU names the catalog entry of this machine's GPU.
gpu=${GPU:-h200}
step gpu-calibration 60 $bin profile --device cuda --gemm-calibration "$out/gpu-calibration.json" --gpu "$gpu" && \
  for src in catalog measured; do
    cal=(); [ "$src" = measured ] && cal=(--gpu-calibration "$out/gpu-calibration.json")
    $bin estimate --cluster h200-ib-1024 --nodes 1 --model gpt3-7.5b --dp 1 --tp 8 --pp 1 --microbatches 1 ${cal[@]+"${cal[@]}"} \
      > "$out/estimate-$src.txt" 2>&1
  done
# Warm-up is the first step (mean_iteration_time_s leaves it out); the data are real tokens.
step train-bf16 120 $bin train --model experiments/gpu/gpt-1.4b-bf16-fused.json --backend nccl --precision bf16 --microbatch-size 4 --microbatches 8 \
  --steps "$steps" --log-every 5 --json "$out/train-gpt-1.4b-bf16.json" --trace "$out/train-gpt-1.4b-bf16.trace.json"
# The same run with its products and attention cores timed by device events (train --op-times):
# where each millisecond goes, beside the prediction's split (estimate --json compute_by_kind_s).
step train-bf16-ops 120 $bin train --model experiments/gpu/gpt-1.4b-bf16-fused.json --backend nccl --precision bf16 --microbatch-size 4 \
  --microbatches 8 --steps 10 --log-every 5 --op-times --json "$out/train-gpt-1.4b-bf16-ops.json"
# The closed loop: the run's layer profiled under autocast, four configurations (microbatches of
# 4 and 2, full recomputation, a materialized core) measured beside their profiled and analytic
# predictions (scripts/closed-loop.sh, tested on the CPU with a small model).
step closed-loop 240 scripts/closed-loop.sh $bin "$out" cuda experiments/gpu/gpt-1.4b-bf16-fused.json 1536 16 1024 50257 h100-ib-1024 4
cat "$out/closed-loop.txt" 2>/dev/null
# The fast paths' effects, each against the --op-times run (kept bf16 weights, foreach AdamW): bf16
# weights cast at each use as autocast does, AdamW one parameter at a time, AdamW in one kernel.
for v in "cast:--bf16-weights cast" "loop:--adamw loop" "fused:--adamw fused"; do
  step "train-bf16-${v%%:*}" 60 $bin train --model experiments/gpu/gpt-1.4b-bf16-fused.json --backend nccl --precision bf16 \
    --microbatch-size 4 --microbatches 8 --steps 4 --log-every 5 --op-times ${v#*:} --json "$out/train-gpt-1.4b-bf16-${v%%:*}.json"
done
# The store backend (docs/runtime.md "The store backend"): several ranks on the one GPU, tensors
# through the job's TCP store. Its tests ran in the ctest step above (RuntimeStoreBackend:
# collectives on CUDA tensors; tp 2 x pp 2, dp 2 with ZeRO 1 and MoE ep 2 against one rank);
# here a 4-rank tp 2 x pp 2 run against one rank, both losses printed.
store_flags=(--model tests/data/models/runtime-tiny8.json --backend store --steps 3 --seed 7 --lr 3e-3 --microbatches 8 --log-every 0)
step store-1rank 30 $bin train "${store_flags[@]}" --schedule gpipe --json "$out/store-1rank.json"
step store-4ranks 60 $bin train "${store_flags[@]}" --nproc 4 --tp 2 --pp 2 --schedule 1f1b --json "$out/store-4ranks.json"
python3 - "$out" <<'PY' || echo "store backend: no losses to compare"
import json, sys
out = sys.argv[1]
one, four = (json.load(open(f"{out}/store-{n}.json")) for n in ("1rank", "4ranks"))
a, b = ([s["loss"] for s in r["steps"]] for r in (one, four))
print("store backend, losses of 1 rank:            ", " ".join(f"{x:.7f}" for x in a))
print("store backend, losses of tp 2 x pp 2 (4 ranks):", " ".join(f"{x:.7f}" for x in b))
print(f"largest relative difference {max(abs(x - y) / abs(x) for x, y in zip(a, b)):.2e}; "
      f"devices {one['ranks'][0]['device']} | {four['ranks'][0]['device']}; "
      f"{four['mean_iteration_time_s']*1e3:.1f} ms/step with 4 ranks, {one['mean_iteration_time_s']*1e3:.1f} with 1")
PY
step train-fp32 90 $bin train --model gpt-1.4b --attention-kernel fused --backend nccl --precision fp32 --microbatch-size 4 --microbatches 8 \
  --steps 4 --log-every 5 --json "$out/train-gpt-1.4b-fp32.json"
# fp32 with its products in TF32 on the tensor cores (train --tf32), against the plain fp32 run.
step train-fp32-tf32 60 $bin train --model gpt-1.4b --attention-kernel fused --backend nccl --precision fp32 --tf32 --microbatch-size 4 \
  --microbatches 8 --steps 4 --log-every 5 --json "$out/train-gpt-1.4b-fp32-tf32.json"
# The prediction for the bf16 run (analytic, H100 SXM figures; the model as trained: fused
# attention, fp32 gradients, experiments/gpu/gpt-1.4b-bf16-fused.json).
$bin estimate --model experiments/gpu/gpt-1.4b-bf16-fused.json --cluster h100-ib-1024 --dp 1 --tp 1 --pp 1 --microbatch-size 4 \
  --microbatches 8 --json > "$out/estimate-gpt-1.4b.json" 2> "$out/estimate.log" || echo "estimate failed"
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
peak = 989e12  # H100/H200 SXM dense bf16 (NVIDIA H100 and H200 datasheets: 1,979 TFLOP/s with sparsity)
if os.path.exists(f"{out}/estimate-gpt-1.4b.json"):
    e = json.load(open(f"{out}/estimate-gpt-1.4b.json"))
    print(f"predicted: {e['iteration_time_s']*1e3:.1f} ms/iteration, peak {e['max_memory_bytes']/2**30:.2f} GiB")
if os.path.exists(f"{out}/loop-profiled-b4-fused.json"):
    e = json.load(open(f"{out}/loop-profiled-b4-fused.json"))
    print(f"predicted with the bf16 profile: {e['iteration_time_s']*1e3:.1f} ms/iteration, peak {e['max_memory_bytes']/2**30:.2f} GiB")
# Measured by kind (train --op-times, rank 0, per iteration after warm-up) beside predicted
# (estimate's compute_by_kind_s of rank 0; the prediction has no idle time on one rank).
ops, est = f"{out}/train-gpt-1.4b-bf16-ops.json", f"{out}/estimate-gpt-1.4b.json"
if os.path.exists(ops) and os.path.exists(est):
    m = json.load(open(ops))['ranks'][0]['breakdown_s']
    k = (json.load(open(est)).get('compute_by_kind_s') or [{}])[0]
    pairs = [("products", m['gemm_s'], k.get('products_s', 0)), ("attention core", m['attention_core_s'], k.get('attention_core_s', 0)),
             ("other compute / memory-bound", m['other_compute_s'], k.get('memory_bound_s', 0) + k.get('communication_in_compute_s', 0)),
             ("optimizer", m['optimizer_s'], k.get('optimizer_s', 0)), ("communication and idle", m['communication_s'] + m['idle_s'], 0)]
    print("by kind, ms per iteration (measured | predicted):")
    for name, a, b in pairs:
        print(f"  {name}: {a*1e3:.1f} | {b*1e3:.1f}")
def summary(run, what):  # train-gpt-1.4b-<run>.json, or None after saying it is missing
    f = f"{out}/train-gpt-1.4b-{run}.json"
    if not os.path.exists(f):
        print(f"{what}: no summary")
        return None
    return json.load(open(f))
# Each fast path's effect: the iteration and the optimizer step, per iteration after warm-up.
base = f"{out}/train-gpt-1.4b-bf16-ops.json"
if os.path.exists(base):
    b0 = json.load(open(base))
    for v, what in (("cast", "bf16 weights cast at each use (vs kept)"), ("loop", "AdamW per parameter (vs foreach)"),
                    ("fused", "AdamW fused (vs foreach)")):
        s = summary(f"bf16-{v}", what)
        if s is None:
            continue
        print(f"{what}: {s['mean_iteration_time_s']*1e3:.1f} vs {b0['mean_iteration_time_s']*1e3:.1f} ms/iteration, optimizer "
              f"{s['ranks'][0]['breakdown_s']['optimizer_s']*1e3:.2f} vs {b0['ranks'][0]['breakdown_s']['optimizer_s']*1e3:.2f} ms, "
              f"peak {s['ranks'][0]['peak_memory_bytes']/2**30:.2f} vs {b0['ranks'][0]['peak_memory_bytes']/2**30:.2f} GiB")
for p in ("bf16", "fp32", "fp32-tf32"):
    s = summary(p, p)
    if s is None:
        continue
    print(f"{p}: {s['mean_iteration_time_s']*1e3:.1f} ms/iteration, {s['tokens_per_s']:.0f} tokens/s, "
          f"MFU {100*s['model_flops_per_s']/peak:.1f}%, HFU {100*s['hardware_flops_per_s']/peak:.1f}% of 989 TFLOP/s, "
          f"peak {s['ranks'][0]['peak_memory_bytes']/2**30:.1f} GiB ({s['ranks'][0]['device']})")
    # The counter's breakdown at its peak (requested bytes) against the allocator's rounded peak.
    r0 = s['ranks'][0]
    b = r0.get('peak_breakdown_bytes')
    if not b:
        print(f"{p}: no peak breakdown (see the train log)"); continue
    total = sum(v for k, v in b.items())
    print(f"{p}: breakdown at the counted peak, {total/2**30:.2f} GiB "
          f"({100*total/r0['peak_memory_bytes']:.1f}% of the allocator's peak): " +
          ", ".join(f"{k} {v/2**30:.2f}" for k, v in b.items() if v))
PY
exit "$status"
