#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan; the `sanitize` preset, build-sanitize/) and runs
# each one from its corpus in fuzz/corpus/<target>/ (read only: new inputs go to a scratch
# folder). Exits non-zero on the first crash, hang, leak or sanitizer report.
# Usage: scripts/fuzz.sh [--seconds N | --runs N]   (default: 5 seconds per target, as CI runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
limit=(-max_total_time=5)
case "${1:-}" in
  --seconds) limit=(-max_total_time="$2") ;;
  --runs) limit=(-runs="$2") ;;
  "") ;;
  *) echo "usage: scripts/fuzz.sh [--seconds N | --runs N]" >&2; exit 2 ;;
esac
jobs=$(nproc 2>/dev/null || echo 2)
targets=$(basename -a fuzz/corpus/*/)
cmake --preset sanitize > /dev/null
# shellcheck disable=SC2086
cmake --build build-sanitize -j"$jobs" --target $targets
scratch=$(mktemp -d "${TMPDIR:-/tmp}/stagecraft-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
for dir in fuzz/corpus/*/; do
  target=$(basename "$dir")
  mkdir -p "$scratch/$target"
  echo "fuzz: $target ${limit[*]}"
  # -timeout: an input taking over 10 s is a hang; -rss_limit_mb: the default 2 GB.
  rc=0
  (cd "$scratch" && "$OLDPWD/build-sanitize/bin/$target" "${limit[@]}" -timeout=10 -print_final_stats=1 \
      "$scratch/$target" "$OLDPWD/$dir" > "$scratch/$target.log" 2>&1) || rc=$?
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|Done|INFO: Done)" "$scratch/$target.log" || true
  if [ "$rc" -ne 0 ]; then
    tail -n 40 "$scratch/$target.log" >&2
    echo "fuzz: $target failed (exit $rc)" >&2
    exit 1
  fi
done
echo "fuzz: every target ran clean"
