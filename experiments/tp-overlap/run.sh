#!/usr/bin/env bash
# Predictions for docs/tp-overlap.md: Merak Fig. 9c (sub-pipelined TMP against Megatron's
# blocking TMP, tp = GPUs from 8 to 64) and Oases Table V (the ablation Megatron, Merak,
# cross-pass, + fine-grained recomputation) with the analytic cost model.
# Usage: experiments/tp-overlap/run.sh [path to the stagecraft binary]
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build/bin/stagecraft}
here=experiments/tp-overlap

echo "== Merak Fig. 9c: 24 layers, tp = GPUs, microbatch 4, 8 microbatches =="
for t in 8 16 32 64; do
  h=$((t * 128))
  "$bin" compare --model "$here/merak-fig9c-h$h.json" --cluster "$here/merak-3090-$t.json" \
    --tp "$t" --pp 1 --dp 1 --microbatch-size 4 --microbatches 8 --schedules 1f1b --tp-overlaps blocking,merak
done

# Oases Table III: tp 4 (BERT-1.3B, LLaMA-7B) or 8 (LLaMA-65B) on 32 GPUs, pipeline off, the
# global batch (128, 32, 8) split over dp ranks as one microbatch each; recomputation on.
echo "== Oases Table V: Megatron (blocking), Merak, cross-pass, + fine-grained (oases) =="
for cluster in oases-3090-nvlink-32 oases-3090-32; do
  for spec in "bert-1.3b 4 16" "oases-llama-7b 4 4" "oases-llama-65b 8 2"; do
    set -- $spec
    "$bin" compare --model "$1" --cluster "$cluster" --tp "$2" --pp 1 --dp $((32 / $2)) --microbatch-size "$3" \
      --microbatches 1 --recompute full --schedules 1f1b --tp-overlaps blocking,merak,cross-pass,oases
  done
done
