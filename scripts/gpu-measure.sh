#!/usr/bin/env bash
# On the GPU machine (docs/gpu.md): builds against the installed PyTorch's LibTorch, runs the
# runtime tests (Gloo, plus the device checks), then measures one NCCL rank training GPT 1.4B
# in bf16 (tokens/s, model FLOPs/s, allocator peak) and a layer profile on the GPU. Everything
# it measures goes under $OUT (default out/gpu). Needs .deps/gpu from scripts/gpu-deps.sh.
# Usage: scripts/gpu-measure.sh [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/gpu}
steps=${1:-30}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.csv" || true
python3 -c 'import torch; print(torch.__version__, torch.version.cuda)' > "$out/torch-version.txt"
scripts/gpu-build.sh -DSTAGECRAFT_BUILD_BENCH=OFF > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
ctest --test-dir build-gpu -R 'RuntimePrecision|RuntimeTrain|RuntimeTrace' --output-on-failure > "$out/ctest.log" 2>&1 \
  || { tail -60 "$out/ctest.log"; exit 1; }
tail -3 "$out/ctest.log"
bin=build-gpu/bin/stagecraft
# Warm-up is the first step (mean_iteration_time_s leaves it out); the data are real tokens.
$bin train --model gpt-1.4b --backend nccl --precision bf16 --microbatch-size 4 --microbatches 8 \
  --steps "$steps" --log-every 5 --json "$out/train-gpt-1.4b-bf16.json" --trace "$out/train-gpt-1.4b-bf16.trace.json"
$bin train --model gpt-1.4b --backend nccl --precision fp32 --microbatch-size 4 --microbatches 8 \
  --steps 10 --log-every 5 --json "$out/train-gpt-1.4b-fp32.json"
$bin profile --device cuda --nproc 0 --hidden 1024,2048 --heads 16 --seq 1024 --microbatch-size 1,2,4 \
  --runs 20 --warmup 5 --out "$out/profile-cuda.json"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
peak = 989e12  # H100 SXM dense bf16 (../shared/reference/facts.md)
for p in ("bf16", "fp32"):
    s = json.load(open(f"{out}/train-gpt-1.4b-{p}.json"))
    print(f"{p}: {s['mean_iteration_time_s']*1e3:.1f} ms/iteration, {s['tokens_per_s']:.0f} tokens/s, "
          f"MFU {100*s['model_flops_per_s']/peak:.1f}%, HFU {100*s['hardware_flops_per_s']/peak:.1f}% of 989 TFLOP/s, "
          f"peak {s['ranks'][0]['peak_memory_bytes']/2**30:.1f} GiB ({s['ranks'][0]['device']})")
PY
