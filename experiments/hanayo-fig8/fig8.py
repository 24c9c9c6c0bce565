#!/usr/bin/env python3
"""Hanayo Fig. 8: the distribution of per-GPU peak memory of GPipe, DAPPLE (1F1B), Chimera and
Hanayo on 32 GPUs of TACC Lonestar6 (A100 40GB), for the paper's BERT and GPT models
(docs/memory.md "Hanayo Fig. 8").

Predicted at the paper's scale with `stagecraft compare --json` (analytic cost model), and at
CPU scale both predicted and measured (`stagecraft train`, counting allocator) on a tiny model
of 16 layers, pp 4.

The paper gives the models, the cluster, the (pp, dp) pairs (8, 4), (16, 2), (32, 1) and batch
sizes 4 and 8 (Sec. 5.3), not how a batch is cut. Assumed here: the batch size is the samples
one pipeline takes per iteration, as microbatches of one sample (with it, batch 4 on 8 GPUs
"already reaches Lonestar6's 40GB memory limit" for GPipe and DAPPLE, as Sec. 5.4 says);
Chimera is measured in its wave form, Chimera-wave, as the paper does (Sec. 3.2); Hanayo with W = 2 waves (1 where the model has fewer than 2WP layers: BERT at pp 32), no recomputation, mixed-precision Adam (16 bytes per
parameter). The paper's statistic is the variance of the per-GPU peaks (GB^2), averaged over
the settings: GPipe 1.33, DAPPLE 16.85, Chimera 2.86, Hanayo 1.44 (Sec. 5.1).

Usage: experiments/hanayo-fig8/fig8.py [path/to/stagecraft] [--no-measure]
Writes experiments/hanayo-fig8/{predicted.csv,cpu.csv} and prints Markdown tables.
"""
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCHEMES = [("GPipe", "gpipe"), ("DAPPLE", "1f1b"), ("Chimera", "chimera-wave"), ("Hanayo", "hanayo")]
LAYERS = {"bert-hanayo": 64, "gpt-hanayo": 128}
GB = 1e9  # the paper's unit


def run(cmd):
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr}")
    return out.stdout


def predicted(bin_):
    rows = []
    for model in ["bert-hanayo", "gpt-hanayo"]:
        for pp, dp in [(8, 4), (16, 2), (32, 1)]:
            for b in [4, 8]:
                for label, schedule in SCHEMES:
                    # W = 2 where the model has the 2WP layers it needs, else 1
                    extra = ["--waves", str(min(2, LAYERS[model] // (2 * pp)))] if schedule == "hanayo" else []
                    cmd = [bin_, "estimate", "--model", model, "--cluster", "hanayo-tacc-a100-32", "--pp", str(pp),
                           "--dp", str(dp), "--microbatch-size", "1", "--microbatches", str(b), "--schedule",
                           schedule, "--json"] + extra
                    e = json.loads(run(cmd))
                    peaks = [x / GB for x in e["peak_memory_bytes"]]  # one per pipeline rank; dp copies alike
                    rows.append({"model": model, "pp": pp, "dp": dp, "batch": b, "scheme": label,
                                 "max_gb": max(peaks), "mean_gb": statistics.mean(peaks),
                                 "variance_gb2": statistics.pvariance(peaks), "fits": e["fits"],
                                 "peaks_gb": " ".join(f"{p:.2f}" for p in peaks)})
    return rows


def measured(bin_):
    """Tiny model, 16 layers, pp 4 (Hanayo W = 2 needs 2WP = 16 layers): measured and predicted."""
    model = os.path.join(HERE, "tiny-16.json")
    cluster = os.path.join(ROOT, "experiments/memory/local-cpu-4.json")
    profile = os.path.join(ROOT, "experiments/memory/profile-tiny-cpu.json")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, schedule in SCHEMES:
            extra = ["--waves", "2"] if schedule == "hanayo" else []
            flags = ["--model", model, "--pp", "4", "--microbatches", "4", "--schedule", schedule] + extra
            out = os.path.join(tmp, "train.json")
            run([bin_, "train"] + flags + ["--nproc", "4", "--steps", "2", "--log-every", "0", "--json", out])
            ranks = sorted(json.load(open(out))["ranks"], key=lambda r: r["pp"])
            meas = [r["peak_memory_bytes"] for r in ranks]
            e = json.loads(run([bin_, "estimate"] + flags + ["--cluster", cluster, "--profile", profile, "--json"]))
            pred = e["peak_memory_bytes"]
            rows.append({"scheme": label, "measured_bytes": " ".join(str(int(m)) for m in meas),
                         "predicted_bytes": " ".join(str(int(p)) for p in pred),
                         "largest_error_pct": max(abs(p - m) / m for p, m in zip(pred, meas)) * 100,
                         "measured_variance_mb2": statistics.pvariance([m / 1e6 for m in meas]),
                         "predicted_variance_mb2": statistics.pvariance([p / 1e6 for p in pred])})
    return rows


def write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    bin_ = os.path.abspath(args[0]) if args else os.path.join(ROOT, "build/bin/stagecraft")
    rows = predicted(bin_)
    write(os.path.join(HERE, "predicted.csv"), rows)
    print("| scheme | mean variance (GB^2) | paper | settings that do not fit (40 GB less 15%) | largest peak (GB) |")
    print("|---|---|---|---|---|")
    paper = {"GPipe": 1.33, "DAPPLE": 16.85, "Chimera": 2.86, "Hanayo": 1.44}
    for label, _ in SCHEMES:
        mine = [r for r in rows if r["scheme"] == label]
        print(f"| {label} | {statistics.mean(r['variance_gb2'] for r in mine):.2f} | {paper[label]} | "
              f"{sum(not r['fits'] for r in mine)} of {len(mine)} | {max(r['max_gb'] for r in mine):.1f} |")
    if "--no-measure" in sys.argv:
        return
    cpu = measured(bin_)
    write(os.path.join(HERE, "cpu.csv"), cpu)
    print("\n| scheme (tiny-16, pp 4, CPU) | measured per rank (bytes) | predicted | largest error | variance measured / predicted (MB^2) |")
    print("|---|---|---|---|---|")
    for r in cpu:
        print(f"| {r['scheme']} | {r['measured_bytes']} | {r['predicted_bytes']} | {r['largest_error_pct']:.1f}% | "
              f"{r['measured_variance_mb2']:.3f} / {r['predicted_variance_mb2']:.3f} |")


if __name__ == "__main__":
    main()
