#!/usr/bin/env bash
# Executes notebooks/PAPER.ipynb end to end with nbconvert (Debian's interpreter and packages:
# scripts/install-deps.sh) into a temporary folder, and checks it drew one PNG per experiment of
# the paper. Run from the repository root: tests/notebook_test.sh hanayo
set -euo pipefail
paper="$1"
command -v jupyter >/dev/null || { echo "notebook_test: jupyter is missing (run ./scripts/install-deps.sh)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
STAGECRAFT_FIGURES_OUT="$out/figures" jupyter nbconvert --to notebook --execute "notebooks/$paper.ipynb" \
  --output-dir "$out/nb" --ExecutePreprocessor.timeout=240 2>"$out/log" || { cat "$out/log" >&2; exit 1; }
want=$(find "experiments/$paper" -name spec.json | wc -l)
got=0
for spec in experiments/"$paper"/*/spec.json; do
  png="$out/figures/$paper-$(basename "$(dirname "$spec")").png"
  if [ ! -s "$png" ] || [ "$(stat -c %s "$png")" -lt 10000 ]; then
    echo "notebook_test: $png is missing or nearly empty" >&2
    exit 1
  fi
  got=$((got + 1))
done
echo "notebook_test: notebooks/$paper.ipynb drew $got of $want figures"
[ "$got" -eq "$want" ]
