#!/usr/bin/env python3
"""FOLD3D Table II and Table III settings: the closed forms (Sec. III-C) beside the evaluator,
and the predicted time, GPU memory and extra host memory beside the paper's measurements.

Usage: python3 experiments/fold3d/tables.py [path/to/stagecraft]   (default build/bin/stagecraft)
Prints two markdown tables (docs/schedules.md, "fold3d-aiao").
"""
import json
import subprocess
import sys

EXE = sys.argv[1] if len(sys.argv) > 1 else "build/bin/stagecraft"
GIB = 2**30

# FOLD3D Table II: cluster, model, (DP, PP, TP), microbatches of 4 (batch / dp / 4), and the
# measured per-GPU throughput (TFLOP/s) of FOLD3D and Megatron, FOLD3D's GPU memory and extra
# CPU memory per host (GB).
SETTINGS = [
    ("fold3d-a100-128", "gpt3-18b", 8, 2, 8, 8, 95.8, 67.4, 27.3, 8.3),
    ("fold3d-a100-128", "gpt3-39b", 4, 4, 8, 16, 116.1, 88.3, 30.7, 12.9),
    ("fold3d-v100-64", "gpt3-18b", 4, 2, 8, 8, 43.5, 32.7, 27.1, 8.1),
    ("fold3d-v100-64", "gpt3-39b", 2, 4, 8, 16, 51.6, 41.2, 30.5, 12.9),
]

# FOLD3D Table III: the other models on the A100s, batch 256, Piper's (DP, PP, TP), the same
# columns (Megatron-SP as the baseline).
SETTINGS_III = [
    ("fold3d-a100-128", "fold3d-bert", 4, 4, 8, 16, 98.1, 77.8, 39.1, 17.3),
    ("fold3d-a100-128", "t-nlg", 8, 2, 8, 8, 96.9, 72.9, 25.7, 11.2),
    ("fold3d-a100-128", "cpm", 4, 4, 8, 16, 91.0, 70.9, 24.5, 8.1),
    ("fold3d-a100-128", "t5", 16, 2, 4, 4, 93.7, 74.9, 35.8, 14.2),
]


def estimate(cluster, model, dp, pp, tp, mb, *extra):
    cmd = [EXE, "estimate", "--model", model, "--cluster", cluster, "--dp", str(dp), "--pp", str(pp), "--tp", str(tp),
           "--microbatch-size", "4", "--microbatches", str(mb), "--sequence-parallel", "--json", *extra]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def table(settings):
    print("| cluster | model | (dp, pp, tp) | eq. (2) + step | AIAO ns=4, no offload | eq. (1) + step | 1F1B | "
          "AIAO, all offloaded | AIAO, offload decided | speedup predicted / measured | "
          "GPU mem decided / all offloaded / paper | host mem per node / paper |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for cluster, model, dp, pp, tp, mb, thr_f, thr_m, gmem, cmem in settings:
        try:
            row(cluster, model, dp, pp, tp, mb, thr_f, thr_m, gmem, cmem)
        except subprocess.CalledProcessError as e:
            why = e.stderr.strip().replace("stagecraft: error: ", "")
            print(f"| {cluster} | {model} | ({dp}, {pp}, {tp}) | refused: {why} |" + " |" * 8)


def row(cluster, model, dp, pp, tp, mb, thr_f, thr_m, gmem, cmem):
    a4 = estimate(cluster, model, dp, pp, tp, mb, "--schedule", "fold3d", "--segments", "4", "--param", "offload=false")
    f = a4["fold3d_model"]
    one = estimate(cluster, model, dp, pp, tp, mb, "--schedule", "1f1b", "--recompute", "full")
    full = estimate(cluster, model, dp, pp, tp, mb, "--schedule", "fold3d", "--param", "offload=true")
    auto = estimate(cluster, model, dp, pp, tp, mb, "--schedule", "fold3d")
    ns_full = full["plan"]["schedule_params"]["segments"]
    sp = auto["plan"]["schedule_params"]
    gpus_per_node = 8
    host = max(full["peak_host_bytes"]) * gpus_per_node / GIB
    print(f"| {cluster} | {model} | ({dp}, {pp}, {tp}) | {f['iteration_s'] + f['optimizer_s']:.3f} s | "
          f"{a4['iteration_time_s']:.3f} s | {f['megatron_iteration_s'] + f['optimizer_s']:.3f} s | "
          f"{one['iteration_time_s']:.3f} s | {full['iteration_time_s']:.3f} s (ns={ns_full}) | "
          f"{auto['iteration_time_s']:.3f} s (ns={sp['segments']}, {sp['offload_segments']} offloaded) | "
          f"{one['iteration_time_s'] / auto['iteration_time_s']:.2f}x / {thr_f / thr_m:.2f}x | "
          f"{max(auto['peak_memory_bytes']) / GIB:.1f} / {max(full['peak_memory_bytes']) / GIB:.1f} GiB / {gmem} GB | "
          f"{host:.1f} GiB / {cmem} GB |")


def main():
    print("Table II\n")
    table(SETTINGS)
    print("\nTable III\n")
    table(SETTINGS_III)


if __name__ == "__main__":
    main()
