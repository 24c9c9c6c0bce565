#!/usr/bin/env python3
"""Hanayo Fig. 9: throughput of GPipe, DAPPLE (1F1B), Chimera (in its wave form) and Hanayo
(the best wave count) training the paper's BERT-style model on 8 GPUs of each of its four
clusters, with pipeline parallelism only (pp 8) and pp 4 x dp 2 (Hanayo Sec. 5.2).

The paper gives the clusters, the model, the two settings and the ordering it measured:
Chimera about 20% over GPipe and DAPPLE, Hanayo 8.2% to 30.4% over Chimera in the eight
settings; not the batch. Assumed here: each pipeline takes as many microbatches of one sample
as it has stages (m = P, the setting of Hanayo's bubble analysis, eq. (1)); no recomputation;
Hanayo's waves W from 1 up to the 2WP <= 64 layers the model has, the best one reported, as
the paper "explored all possible wave numbers and selected the best-performing one".

Usage: python3 experiments/hanayo-fig9/fig9.py [path/to/stagecraft]   (default build/bin/stagecraft)
Prints a Markdown table (docs/schedules.md, "hanayo").
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXE = sys.argv[1] if len(sys.argv) > 1 else "build/bin/stagecraft"
CLUSTERS = [("PC", "hanayo-pc-a100-8"), ("FC", "hanayo-fc-a100-8"), ("TACC", "hanayo-tacc-a100-32"),
            ("TC", "hanayo-tencent-v100-8")]
SETTINGS = [(8, 1), (4, 2)]  # (pp, dp)
MODEL, LAYERS = "bert-hanayo", 64


def tokens_per_s(cluster, pp, dp, schedule, *extra):
    cmd = [EXE, "estimate", "--model", MODEL, "--cluster", cluster, "--pp", str(pp), "--dp", str(dp),
           "--microbatch-size", "1", "--microbatches", str(pp), "--schedule", schedule, "--json", *extra]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout)["tokens_per_s"]


def main():
    print("| cluster | (pp, dp) | GPipe | DAPPLE | Chimera-wave | Hanayo (best W) | Chimera over DAPPLE | "
          "Hanayo over Chimera |")
    print("|---|---|---|---|---|---|---|---|")
    for label, cluster in CLUSTERS:
        for pp, dp in SETTINGS:
            g = tokens_per_s(cluster, pp, dp, "gpipe")
            d = tokens_per_s(cluster, pp, dp, "1f1b")
            c = tokens_per_s(cluster, pp, dp, "chimera-wave")
            waves = range(1, LAYERS // (2 * pp) + 1)
            h, w = max((tokens_per_s(cluster, pp, dp, "hanayo", "--waves", str(w)), w) for w in waves)
            print(f"| {label} | ({pp}, {dp}) | {g:,.0f} | {d:,.0f} | {c:,.0f} | {h:,.0f} (W={w}) | "
                  f"{100 * (c / d - 1):+.1f}% | {100 * (h / c - 1):+.1f}% |")


if __name__ == "__main__":
    main()
