#!/usr/bin/env bash
# Builds stagecraft with clang's AddressSanitizer and UndefinedBehaviorSanitizer (the `sanitize`
# preset: no LibTorch runtime, the fuzz targets beside the tests, into build-sanitize/) and runs
# the test suite there; any sanitizer report
# fails the test that triggered it. The runtime's tests run in the normal build (scripts/test.sh),
# and so does ExperimentsCheckedIn (every checked-in experiment, 20 s there, 5 min here; the
# experiment library's own tests run here on small specs).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake --preset sanitize > /dev/null
cmake --build build-sanitize -j"$jobs"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Left to the Release suite, which runs them too: the checked-in experiments, and the five
# exhaustive sweeps that take a minute or two each here (planner searches, the closed-form
# bubble grid) and run no code the sanitized tests before them do not.
heavy='^(ExperimentsCheckedIn\.|Planner\.BestEqualsTheExhaustiveOptimum$|Planner\.PruningNeverDropsAPlanThatFits$'
heavy+='|PlannerCli\.WritesAPlanThatEstimateReads$|PlannerCli\.SweepsGpuCounts$|BubbleClosedForms\.GPipeAnd1F1BBubbleIsPMinus1OverM$)'
ctest --test-dir build-sanitize --output-on-failure -j"$jobs" -E "$heavy"
