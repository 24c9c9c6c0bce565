#!/usr/bin/env bash
# Runs every command of README.md's "Use" section, top to bottom, as written (issue 52): a
# command that fails stops the run and names itself. Needs ./scripts/test.sh's build (the demo's
# build lacks the test program one example names). Commands of a CUDA build (build-gpu/) are
# listed as skipped on a machine without one. Prints each command's seconds and the total.
# Usage: scripts/readme-use.sh [--list]   (--list: print the commands, run nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
list=false
[ "${1:-}" = "--list" ] && list=true
# The sh block under "## Use", continuation lines joined, comments dropped.
commands=$(awk '/^## Use/{use=1; next} use && /^## /{exit} use && /^```sh/{block=1; next}
                block && /^```/{block=0; next} block' README.md |
           sed -e ':a' -e '/\\$/N; s/\\\n[[:space:]]*/ /; ta' | grep -v '^[[:space:]]*#' | grep -v '^[[:space:]]*$')
if $list; then
  printf '%s\n' "$commands"
  exit 0
fi
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { print b - a }'; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
mkdir -p out
total_start=$(date +%s.%N)
n=0
while IFS= read -r cmd; do
  n=$((n + 1))
  case "$cmd" in
    build-gpu/*)
      if [ ! -x build-gpu/bin/stagecraft ]; then
        printf '%3d  skipped (needs the CUDA build, scripts/gpu-build.sh): %.60s\n' "$n" "$cmd"
        continue
      fi ;;
  esac
  start=$(date +%s.%N)
  if ! bash -c "$cmd" > "$log" 2>&1; then
    echo "README Use section, command $n failed: $cmd" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  printf '%3d  %6.1f s  %.80s\n' "$n" "$(since "$start")" "$cmd"
done <<< "$commands"
printf 'README Use section: %d commands in %.1f s\n' "$n" "$(since "$total_start")"
