#!/usr/bin/env bash
# Regenerates the seed papers' figures: every experiment under experiments/ (results.csv and
# compare.csv beside each spec), docs/figures.md, and the PNGs in docs/figures/ drawn by the
# notebooks (notebooks/*.ipynb, executed with nbconvert into a temporary folder so the
# checked-in notebooks stay without outputs). docs/experiments.md says what an experiment is.
# Usage: scripts/figures.sh   (installs and builds as needed)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
if [ -f build/CMakeCache.txt ]; then
  cmake --build build --target stagecraft -j"$(nproc 2>/dev/null || echo 2)"
else
  ./scripts/build.sh
fi
build/bin/stagecraft experiment run experiments --report docs/figures.md
rm -f docs/figures/*.png
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for nb in notebooks/*.ipynb; do
  echo "figures.sh: executing $nb"
  STAGECRAFT_FIGURES_OUT="$PWD/docs/figures" jupyter nbconvert --to notebook --execute "$nb" --output-dir "$work" \
    --ExecutePreprocessor.timeout=600 2>"$work/log" || { cat "$work/log" >&2; exit 1; }
done
echo "figures.sh: $(ls docs/figures/*.png | wc -l) figures in docs/figures/, tables in docs/figures.md"
