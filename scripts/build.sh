#!/usr/bin/env bash
# Configures and builds stagecraft (Release, tests and benchmarks) into build/.
# Usage: scripts/build.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake --preset release -DSTAGECRAFT_BUILD_TESTS=ON -DSTAGECRAFT_BUILD_BENCH=ON "$@"
cmake --build build -j"$jobs"
