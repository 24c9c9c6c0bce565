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
