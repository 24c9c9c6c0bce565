#!/usr/bin/env bash
# Configures and builds stagecraft (Release, tests and benchmarks) into build/.
# Usage: scripts/build.sh [--target T]... [extra cmake -D options]
#   --target T: build only T and what it needs (e.g. stagecraft: the program without its runtime
#   plugin; stagecraft_runtime_cli: the plugin, bin/stagecraft-runtime.so); default: everything.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
targets=()
while [ "${1:-}" = "--target" ]; do
  targets+=(--target "$2")
  shift 2
done
cmake --preset release -DSTAGECRAFT_BUILD_TESTS=ON -DSTAGECRAFT_BUILD_BENCH=ON "$@" > /dev/null
cmake --build build -j"$jobs" "${targets[@]}"
