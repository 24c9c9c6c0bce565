#!/usr/bin/env bash
# Reproduces docs/validation.md on this machine: a profile of the validation model's shapes,
# then the 13-configuration sweep and the 8-schedule ranking sweep, each predicted with the
# profiled and with the analytic cost model and measured with 2 local CPU ranks (Gloo).
# Usage: experiments/validation/run-cpu.sh [OUT_DIR]   (default out/validation; about 20 min)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-out/validation}
bin=build/bin/stagecraft
mkdir -p "$out"
"$bin" profile --hidden 128 --heads 4 --seq 64 --microbatch-size 1,2 --tp 1,2 --runs 15 --warmup 3 \
  --out "$out/profile.json" | tee "$out/profile.txt"
for sweep in cpu-sweep cpu-ranking; do
  "$bin" validate --sweep "experiments/validation/$sweep.json" --profile "$out/profile.json" \
    --out "$out/$sweep-profiled.csv" --summary "$out/$sweep-profiled.json" --work-dir "$out/work" | tee "$out/$sweep-profiled.txt"
  "$bin" validate --sweep "experiments/validation/$sweep.json" \
    --out "$out/$sweep-analytic.csv" --summary "$out/$sweep-analytic.json" --work-dir "$out/work" | tee "$out/$sweep-analytic.txt"
done
