#!/usr/bin/env bash
# Installs dependencies, builds (Release) and runs the main job: the baseline schedules
# compared on GPT-3 39B over 64 H100s (tp 8, pp 4, dp 2, 16 microbatches), with a Chrome
# trace per schedule under out/demo/ (open them in https://ui.perfetto.dev).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
# The program first (no LibTorch: a few minutes on 2 cores), its first result, then the runtime's
# plugin for the measured loop below; tests and benchmarks are left to scripts/test.sh.
./scripts/build.sh --target stagecraft
build/bin/stagecraft compare --model gpt3-39b --cluster h100-nvl-ib-64 --tp 8 --pp 4 --microbatches 16 \
  --schedules gpipe,1f1b,interleaved-1f1b,looped-bfs --trace-dir out/demo

# The loop the workbench is for (docs/runtime.md, docs/validation.md): profile this machine
# briefly (the tiny model's layer shape and the collectives over 2 local ranks, a few seconds),
# predict the run with that profile, then train it for real on 2 CPU ranks (pp 2, 1F1B) and
# print both. A shared 2-core machine drifts between faster and slower phases (step times of
# one run vary by 1.5x), so the demo pairs a profile with a run three times and reports each
# pair and the median error. Chrome traces of the last prediction and run land side by side
# in out/demo/.
if grep -q '^stagecraft_runtime_cli:' <(cmake --build build --target help 2>/dev/null | sed 's/^\.\.\. //'); then
  ./scripts/build.sh --target stagecraft_runtime_cli
  mkdir -p out/demo
  errors=()
  for round in 1 2 3; do
    build/bin/stagecraft profile --hidden 64 --heads 4 --seq 64 --microbatch-size 1 --vocab 256 \
      --runs 60 --warmup 10 --out out/demo/profile-local.json > out/demo/profile-local.log
    build/bin/stagecraft estimate --model tiny --cluster local-cpu-2 --pp 2 --microbatches 8 --schedule 1f1b \
      --profile out/demo/profile-local.json --json > out/demo/estimate-tiny.json
    build/bin/stagecraft estimate --model tiny --cluster local-cpu-2 --pp 2 --microbatches 8 --schedule 1f1b \
      --profile out/demo/profile-local.json --trace out/demo/estimate-tiny-trace.json > /dev/null
    build/bin/stagecraft train --model tiny --nproc 2 --pp 2 --microbatches 8 --schedule 1f1b --steps 40 \
      --log-every 40 --json out/demo/train-tiny.json --trace out/demo/train-tiny-trace.json
    measured=$(grep -o '"mean_iteration_time_s": [0-9.e+-]*' out/demo/train-tiny.json | head -1 | awk '{print $2}')
    predicted=$(grep -o '"iteration_time_s": [0-9.e+-]*' out/demo/estimate-tiny.json | head -1 | awk '{print $2}')
    errors+=("$(awk -v m="$measured" -v p="$predicted" 'BEGIN { printf "%.4f", p / m - 1 }')")
    [ "$round" = 1 ] && echo "tiny, 2 CPU ranks, pp 2, 1F1B, 8 microbatches, predicted from this machine's profile:"
    awk -v r="$round" -v m="$measured" -v p="$predicted" 'BEGIN { e = p / m - 1; a = e < 0 ? -e : e
      printf "round %d: measured %.1f ms per iteration, predicted %.1f ms (%+.1f%%): %s 5%%\n", r, m * 1e3, p * 1e3, 100 * e,
        a <= 0.05 ? "within" : "outside" }'
  done
  printf '%s\n' "${errors[@]}" | awk '{ a = $1 < 0 ? -$1 : $1; n += a <= 0.05 } END {
    printf "rounds within 5%% of the measurement: %d of %d\n", n, NR }'
  # The median of the absolute errors: a round off in either direction counts against it.
  printf '%s\n' "${errors[@]}" | awk '{ print ($1 < 0 ? -$1 : $1) }' | sort -g | sed -n 2p | awk '{
    printf "median absolute error of the three rounds: %.1f%% (%s 15%%)\n", 100 * $1, $1 <= 0.15 ? "within" : "outside" }'
  echo "traces: out/demo/estimate-tiny-trace.json (prediction), out/demo/train-tiny-trace.json (run)"
fi
