#!/usr/bin/env bash
# Builds stagecraft with clang's AddressSanitizer and UndefinedBehaviorSanitizer (the `sanitize`
# preset: no LibTorch runtime, the fuzz targets beside the tests, into build-sanitize/) and runs
# tests there; any sanitizer report fails the test that triggered it.
# Usage: scripts/sanitize.sh [--all]
#   default (CI, scripts/test.sh): the `core` programs only (the schedule IR, the parsers, the
#     cost model and the evaluator: tests/CMakeLists.txt marks them CORE), which build without the
#     program and the simulator, so that CI stays within its 20 minutes.
#   --all: every test program of the build but the runtime's (which run in the Release suite), and
#     but ExperimentsCheckedIn and five exhaustive sweeps of one to two minutes each here, which run
#     in the Release suite and no code the sanitized tests do not.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake --preset sanitize > /dev/null
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
if [ "${1:-}" = "--all" ]; then
  cmake --build build-sanitize -j"$jobs"
  heavy='^(ExperimentsCheckedIn\.|Planner\.BestEqualsTheExhaustiveOptimum$|Planner\.PruningNeverDropsAPlanThatFits$'
  heavy+='|PlannerCli\.WritesAPlanThatEstimateReads$|PlannerCli\.SweepsGpuCounts$|BubbleClosedForms\.GPipeAnd1F1BBubbleIsPMinus1OverM$)'
  ctest --test-dir build-sanitize --output-on-failure -j"$jobs" -E "$heavy"
elif [ -z "${1:-}" ]; then
  cmake --build build-sanitize -j"$jobs" --target stagecraft_core_tests
  ctest --test-dir build-sanitize --output-on-failure -j"$jobs" -L '^core$'
else
  echo "usage: scripts/sanitize.sh [--all]" >&2
  exit 2
fi
