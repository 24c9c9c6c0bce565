#!/usr/bin/env bash
# Installs dependencies, builds (Release) and runs the main job: the baseline schedules
# compared on GPT-3 39B over 64 H100s (tp 8, pp 4, dp 2, 16 microbatches), with a Chrome
# trace per schedule under out/demo/ (open them in https://ui.perfetto.dev).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
build/bin/stagecraft compare --model gpt3-39b --cluster h100-nvl-ib-64 --tp 8 --pp 4 --microbatches 16 \
  --schedules gpipe,1f1b,interleaved-1f1b,looped-bfs --trace-dir out/demo

# The runtime (docs/runtime.md): train the tiny model on 2 local CPU ranks (pp 2, 1F1B) and
# print the measured iteration time beside the evaluator's prediction for the same plan on
# the local-cpu-2 cluster preset (rough CPU figures).
if [ -x build/bin/stagecraft ] && build/bin/stagecraft train --help >/dev/null 2>&1; then
  build/bin/stagecraft train --model tiny --nproc 2 --pp 2 --microbatches 8 --schedule 1f1b --steps 40 \
    --log-every 10 --json out/demo/train-tiny.json --trace out/demo/train-tiny-trace.json
  measured=$(grep -o '"mean_iteration_time_s": [0-9.e+-]*' out/demo/train-tiny.json | head -1 | awk '{print $2}')
  predicted=$(build/bin/stagecraft estimate --model tiny --cluster local-cpu-2 --pp 2 --microbatches 8 \
    --schedule 1f1b --json | grep -o '"iteration_time_s": [0-9.e+-]*' | head -1 | awk '{print $2}')
  echo "tiny, 2 CPU ranks, pp 2, 1F1B, 8 microbatches: measured ${measured} s per iteration," \
       "evaluator predicts ${predicted} s (local-cpu-2, rough figures)"
fi
