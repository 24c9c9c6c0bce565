#!/usr/bin/env bash
# Regenerates the schedule pictures in docs/img/ that docs/schedules.md shows. Needs a build
# (./scripts/build.sh). Every picture comes from one `stagecraft schedule` command, printed
# here as it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/bin/stagecraft
mkdir -p docs/img
run() { echo "+ $*"; "$@"; }
for s in gpipe 1f1b chimera chimera-wave merak-early-recompute merak zb-h1 zb-h2 dualpipe dualpipev; do
  run $B schedule --schedule "$s" --stages 4 --microbatches 8 --unit-costs F=1,B=2,I=1,W=1,R=1 --svg "docs/img/$s.svg" > /dev/null
done
for s in interleaved-1f1b looped-bfs zb1p; do
  run $B schedule --schedule "$s" --stages 4 --microbatches 8 --chunks 2 --unit-costs F=1,B=2,I=1,W=1,R=1 --svg "docs/img/$s.svg" > /dev/null
done
run $B schedule --schedule zb-v --stages 4 --microbatches 8 --unit-costs F=1,B=2,I=1,W=1,R=1 --svg docs/img/zb-v.svg > /dev/null
run $B schedule --schedule hanayo --stages 4 --microbatches 4 --waves 2 --unit-costs F=1,B=2 --svg docs/img/hanayo.svg > /dev/null
run $B schedule --schedule hanayo --stages 4 --microbatches 8 --waves 2 --unit-costs F=1,B=2 --svg docs/img/hanayo-m8.svg > /dev/null
run $B schedule --schedule fold3d --stages 4 --microbatches 8 --segments 2 --unit-costs F=1,B=2,R=1 --svg docs/img/fold3d-aiao.svg > /dev/null
run $B compare --model gpt3-39b --cluster fold3d-a100-128 --tp 8 --pp 4 --microbatches 16 --sequence-parallel \
  --schedules 1f1b,interleaved-1f1b,merak,fold3d-aiao,zb-v --svg docs/img/compare-gpt3-39b-fold3d-a100-128.svg > /dev/null
