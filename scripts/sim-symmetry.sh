#!/usr/bin/env bash
# The simulator's reductions against the full simulation (docs/sim.md, "Symmetry"): each row
# simulates one configuration twice, as `stagecraft simulate` runs it and with --no-symmetry,
# and prints a Markdown table: GPUs simulated, the iteration times, the largest differences in
# exposed communication (any kind, any rank) and peak memory, and both runs' wall times and
# peak resident memory. Usage: scripts/sim-symmetry.sh   (after ./scripts/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/bin/stagecraft
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A cluster with two GPUs per node (one NIC): tp 2 fills a node, so data-parallel groups span
# many nodes at a few dozen GPUs.
python3 - "$work/two-per-node.json" <<'PY'
import json, sys
c = json.load(open("presets/clusters/h100-ib-1024.json"))
c.update(name="h100-two-per-node", gpus_per_node=2, nics_per_node=1, nodes=2048)
json.dump(c, open(sys.argv[1], "w"))
PY
two="$work/two-per-node.json"
small="--model gpt3-7.5b --microbatches 8 --iterations 2"
big="--model gpt3-175b --cluster h100-ib-1024 --tp 8 --pp 16 --microbatches 64 --recompute full --iterations 1"
rows=(
  "64|$small --cluster $two --tp 2 --pp 2 --dp 16"
  "64|$small --cluster $two --tp 2 --pp 2 --dp 16 --schedule zb-v"
  "64|$small --cluster $two --tp 2 --pp 2 --dp 16 --schedule dualpipev"
  "64|$small --cluster $two --tp 2 --pp 2 --dp 16 --schedule chimera"
  "64|$small --cluster $two --tp 2 --pp 2 --dp 16 --overlap-grad-reduce --grad-bucket-mb 100"
  "64|$small --cluster $two --tp 2 --pp 2 --dp 16 --zero 1 --overlap-grad-reduce --overlap-param-gather --grad-bucket-mb 100"
  "64|$small --cluster $two --tp 2 --pp 1 --dp 32 --zero 3"
  "64|$small --cluster $two --tp 2 --pp 2 --dp 16 --schedule fold3d-aiao --preemptive-comm"
  "64|$small --cluster h100-ib-1024 --nodes 8 --tp 8 --pp 2 --dp 4 --tp-overlap merak --sequence-parallel --microbatch-size 2"
  "64|$small --cluster h100-ib-1024 --nodes 8 --tp 8 --pp 2 --dp 4 --tp-overlap oases --sequence-parallel --microbatch-size 2"
  "64|$small --cluster h100-ib-1024 --nodes 8 --tp 8 --pp 2 --dp 4 --tp-overlap cross-pass --sequence-parallel --microbatch-size 2"
  "64|$small --cluster h100-ib-1024 --nodes 8 --tp 8 --pp 2 --dp 4 --tp-overlap te --stack megatron-core-te --sequence-parallel --microbatch-size 2"
  "512|--model mixtral-8x7b --microbatches 8 --iterations 2 --cluster $two --nodes 256 --tp 2 --pp 2 --dp 128 --ep 8 --sequence-parallel"
  "512|$small --cluster h100-ib-1024 --nodes 64 --tp 8 --pp 2 --dp 32 --schedule interleaved-1f1b --chunks 2"
  "512|$small --cluster $two --nodes 256 --tp 2 --pp 4 --dp 64 --schedule zb-h1 --overlap-grad-reduce --grad-bucket-mb 100"
  "1024|$big --nodes 128 --dp 8 --tp-overlap oases --sequence-parallel --microbatch-size 2"
  "4096|$big --nodes 512 --dp 32"
  "4096|$small --cluster h100-ib-1024 --nodes 512 --tp 8 --pp 2 --dp 256 --schedule interleaved-1f1b --chunks 2"
  "2048|--model deepseek-v3 --cluster h100-ib-1024 --nodes 256 --tp 4 --pp 8 --dp 64 --ep 8 --sequence-parallel --microbatches 64 --recompute full --iterations 1"
)
echo "| GPUs | configuration | simulated GPUs | iteration (reduced / full) | difference | exposed comm, largest difference | peak memory difference | wall (reduced / full) | peak RSS (reduced / full) |"
echo "|---|---|---|---|---|---|---|---|---|"
for row in "${rows[@]}"; do
  gpus=${row%%|*}
  args=${row#*|}
  # shellcheck disable=SC2086
  /usr/bin/time -f "%e %M" -o "$work/a.t" $bin simulate $args --json > "$work/a.json"
  # shellcheck disable=SC2086
  /usr/bin/time -f "%e %M" -o "$work/b.t" $bin simulate $args --no-symmetry --json > "$work/b.json"
  python3 - "$work" "$gpus" "${args//$work\//}" <<'PY'
import json, sys
w, gpus, args = sys.argv[1:]
A, B = (json.load(open(f"{w}/{x}.json")) for x in "ab")
(ta, ma), (tb, mb) = (open(f"{w}/{x}.t").read().split()[-2:] for x in "ab")
sa, sb = A["simulation"], B["simulation"]
T = B["iteration_time_s"]
ex = max(abs(x - y) for k in ("pipeline", "data_parallel", "tensor_parallel")
         for x, y in zip(sa["exposed_comm_s"][k], sb["exposed_comm_s"][k]))
mem = max(abs(x - y) / y for x, y in zip(sa["peak_memory_bytes"], sb["peak_memory_bytes"]))
cfg = args.replace("--model ", "").replace("--cluster ", "").replace("two-per-node.json", "2 GPUs/node")
print(f"| {gpus} | `{cfg}` | {sa['symmetry']['simulated_gpus']} | {A['iteration_time_s']:.4f} / {T:.4f} s | "
      f"{100 * abs(A['iteration_time_s'] - T) / T:.4f}% | {ex * 1e3:.3f} ms | {100 * mem:.4f}% | "
      f"{float(ta):.2f} / {float(tb):.2f} s | {int(ma) // 1024} / {int(mb) // 1024} MB |")
PY
done
