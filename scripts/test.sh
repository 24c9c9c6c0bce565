#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test; then the core programs of the suite (the
# schedule IR, the parsers, the cost model) again under AddressSanitizer and
# UndefinedBehaviorSanitizer (scripts/sanitize.sh; `scripts/sanitize.sh --all` for the whole
# suite) and each libFuzzer target for 3 seconds from its corpus (scripts/fuzz.sh), from the same
# clang build. Exits non-zero on any failure, and when the suite leaves anything in its temporary
# folder (every test writes under its own scratch directory there and removes it: tests/helpers.h,
# docs/testing.md). 20 minutes or less on a 2-core machine (docs/benchmarks.md).
# Usage: scripts/test.sh [--quick]   (--quick: the main build's tests only)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
# The tests, not the Google Benchmark programs (about a minute of the 2-core budget;
# `./scripts/build.sh` alone builds them too).
./scripts/build.sh -DSTAGECRAFT_BUILD_BENCH=OFF
stage() { echo "test.sh: $1 done at ${SECONDS} s" >&2; }  # each stage's end, for docs/benchmarks.md
stage "install and build"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/stagecraft-ctest.XXXXXX")
status=0
TEST_TMPDIR="$scratch/" TMPDIR="$scratch" ctest --test-dir build --output-on-failure -j"$(nproc 2>/dev/null || echo 2)" || status=$?
stage "Release suite"
if [ "${1:-}" != "--quick" ]; then
  TEST_TMPDIR="$scratch/" TMPDIR="$scratch" ./scripts/sanitize.sh || status=1
  stage "sanitizer stage"
  TMPDIR="$scratch" ./scripts/fuzz.sh --seconds 3 || status=1
  stage "fuzz"
fi
left=$(find "$scratch" -mindepth 1 -maxdepth 2 | head -20)
if [ -n "$left" ]; then
  echo "test.sh: the tests left files in their temporary folder $scratch:" >&2
  echo "$left" >&2
  status=1
fi
rm -rf "$scratch"
exit "$status"
