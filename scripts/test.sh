#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test. Exits non-zero on any failure, and when
# the suite leaves anything in its temporary folder (every test writes under its own scratch
# directory there and removes it: tests/helpers.h, docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
scratch=$(mktemp -d "${TMPDIR:-/tmp}/stagecraft-ctest.XXXXXX")
status=0
TEST_TMPDIR="$scratch/" TMPDIR="$scratch" ctest --test-dir build --output-on-failure -j"$(nproc 2>/dev/null || echo 2)" || status=$?
left=$(find "$scratch" -mindepth 1 -maxdepth 2 | head -20)
if [ -n "$left" ]; then
  echo "test.sh: the tests left files in their temporary folder $scratch:" >&2
  echo "$left" >&2
  status=1
fi
rm -rf "$scratch"
exit "$status"
