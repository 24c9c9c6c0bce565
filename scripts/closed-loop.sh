#!/usr/bin/env bash
# The closed loop (docs/gpu.md, "The closed loop"): trains one bf16 model on one rank in four
# configurations (microbatches of 4 and 2, full recomputation, a materialized attention core),
# profiles its layer on the same device under the same autocast, and prints each configuration's
# measured iteration beside its profiled and analytic predictions, with their errors.
# scripts/gpu-measure.sh calls it on the GPU; on the CPU it runs the same steps on a small model
# (the usage below), which is how it is tested before a GPU minute is spent on it.
# Usage: scripts/closed-loop.sh BIN OUT DEVICE MODEL HIDDEN HEADS SEQ VOCAB CLUSTER [STEPS [CORE]]
#   DEVICE: cuda (one NCCL rank) or cpu (one Gloo rank); MODEL a model file whose attention
#   kernel is fused; HIDDEN HEADS SEQ VOCAB its shape (for the profile); CLUSTER what the
#   analytic prediction prices with; CORE the attention core of the first three configurations
#   (fused, the default; materialized where LibTorch is 1.13). Results: OUT/loop-*.json and
#   OUT/closed-loop.txt.
# CPU example: scripts/closed-loop.sh build/bin/stagecraft out/loop cpu experiments/memory/tiny-bf16.json \
#   64 4 64 256 experiments/memory/local-cpu-4.json 4 materialized
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 9 ] || { sed -n 2,14p "$0"; exit 2; }
bin=$1 out=$2 device=$3 model=$4 hidden=$5 heads=$6 seq=$7 vocab=$8 cluster=$9 steps=${10:-6} core=${11:-fused}
backend=gloo
[ "$device" = cuda ] && backend=nccl
mkdir -p "$out"
status=0
run() {  # run NAME CMD...: CMD's output in $out/NAME.log; a failure is reported and remembered
  local name=$1; shift
  "$@" > "$out/$name.log" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ]; then echo "closed loop: $name failed (rc $rc):"; tail -5 "$out/$name.log"; status=1; fi
}
# name, microbatch size, recomputation, attention core
configs=("b4-$core 4 none $core" "b2-$core 2 none $core" "b4-full 4 full $core" "b4-materialized 4 none materialized")
for k in $(printf '%s\n' "$core" materialized | sort -u); do
  sizes=4
  [ "$k" = "$core" ] && sizes=2,4
  run "loop-profile-$k" "$bin" profile --device "$device" --precision bf16 --attention-kernel "$k" --nproc 0 --hidden "$hidden" \
    --heads "$heads" --seq "$seq" --microbatch-size "$sizes" --vocab "$vocab" --runs 10 --warmup 3 --out "$out/loop-profile-$k.json"
done
for c in "${configs[@]}"; do
  read -r name b rc k <<< "$c"
  common=(--model "$model" --microbatch-size "$b" --microbatches 8 --recompute "$rc" --attention-kernel "$k")
  run "loop-train-$name" "$bin" train "${common[@]}" --backend "$backend" --precision bf16 --steps "$steps" --log-every 0 \
    --json "$out/loop-train-$name.json"
  for route in analytic profiled; do
    extra=()
    [ "$route" = profiled ] && extra=(--profile "$out/loop-profile-$k.json")
    if ! "$bin" estimate "${common[@]}" --cluster "$cluster" --dp 1 --tp 1 --pp 1 "${extra[@]}" --json \
        > "$out/loop-$route-$name.json" 2> "$out/loop-$route-$name.log"; then
      echo "closed loop: $route estimate of $name failed:"; tail -3 "$out/loop-$route-$name.log"; status=1
    fi
  done
done
python3 - "$out" "${configs[@]}" <<'PY' | tee "$out/closed-loop.txt"
import json, os, sys
out = sys.argv[1]
def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None
print("configuration | measured ms | profiled ms (error) | analytic ms (error) | measured peak MiB | profiled peak MiB (error)")
for c in sys.argv[2:]:
    name = c.split()[0]
    t = load(f"{out}/loop-train-{name}.json")
    if t is None:
        print(f"{name} | no measurement"); continue
    m = t["mean_iteration_time_s"] * 1e3
    cells = [name, f"{m:.1f}"]
    for route in ("profiled", "analytic"):
        e = load(f"{out}/loop-{route}-{name}.json")
        if e is None:
            cells.append("none"); continue
        p = e["iteration_time_s"] * 1e3
        cells.append(f"{p:.1f} ({100 * (p - m) / m:+.1f}%)")
    peak = t["ranks"][0]["peak_memory_bytes"] / 2**20
    cells.append(f"{peak:.1f}")
    e = load(f"{out}/loop-profiled-{name}.json")
    if e is not None:
        q = e["max_memory_bytes"] / 2**20
        cells.append(f"{q:.1f} ({100 * (q - peak) / peak:+.1f}%)")
    print(" | ".join(cells))
PY
exit "$status"
