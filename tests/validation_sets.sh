#!/usr/bin/env bash
# Every validation set of experiments/validation runs through compare-published.py with the
# program under test and prints its summary (docs/validation.md's commands as written): a moved
# preset folder or a renamed flag breaks it here, not in a reader's hands.
# Usage: tests/validation_sets.sh PROGRAM
set -euo pipefail
cd "$(dirname "$0")/.."
program=$1
for set in experiments/validation/published*.json; do
  # A set with development and held-out rows is reported per split (its rows that the program
  # refuses are listed); the older sets whole.
  splits=$(python3 -c 'import json, sys; print(" ".join(sorted({r["split"] for r in json.load(open(sys.argv[1]))["runs"] if "split" in r})) or "-")' "$set")
  for split in $splits; do
    flags=()
    [ "$split" != "-" ] && flags=(--split "$split")
    out=$(python3 experiments/validation/compare-published.py "$program" --runs "$set" "${flags[@]}")
    if ! grep -q '^runs: [0-9]*; MAPE of the iteration time' <<< "$out"; then
      echo "$set ($split): no summary line in compare-published.py's output" >&2
      exit 1
    fi
  done
done
echo "validation sets: every one priced"
