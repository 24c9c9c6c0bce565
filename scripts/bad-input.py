#!/usr/bin/env python3
"""The bad-input pass (issue 52): every subcommand given bad flags and bad files.

Each case is a command line and what is bad in it. A case passes when the program
  - exits 2 (bad input), or 1 where the failure is truly at run time (the case says why),
  - within 20 s,
  - with the last line of standard error one line of its own ("stagecraft: error: ..." or
    "stagecraft: failed: ...") naming the flag or field and the bad value,
  - leaving nothing behind: each case runs in a fresh empty folder, where every output path
    points, and that folder must be as it was (no output file, no *.tmp), as must the fixtures.
Prints one line per failing case and the summary
  bad-input: N cases, crashes X, hangs X, accepted X, unclear X, half-written X
and exits 1 when any count is not zero.

Usage: scripts/bad-input.py [--program build/bin/stagecraft] [--jobs N] [--list] [--verbose]
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 20


class Case:
    def __init__(self, args, names, what, code=2, setup=None):
        self.args = args      # the command line after the program, {fx} the fixtures' folder
        self.names = names    # what the error line must hold: the flag or field and the value
        self.what = what      # what is bad
        self.code = code      # 2 bad input; 1 a failure at run time (the `what` says why)
        self.setup = setup    # makes things in the case's own folder before it runs


CASES = []


MULTI = {"--param", "--slow-rank", "--slow-node", "--degraded-nic", "--late-rank", "--example-shape",
         "--hidden", "--heads", "--seq", "--microbatch-size", "--tp"}


def dedupe(args):
    """A flag the case gives again replaces the base command's (CLI11 refuses a flag twice)."""
    words = shlex.split(args)
    out = []
    for k, w in enumerate(words):
        if w is None:
            continue
        if w.startswith("--") and k + 1 < len(words) and w in words[k + 2:] and not (
                w in MULTI and not args.startswith("profile")) and not words[k + 1].startswith("--"):
            words[k + 1] = None
            continue
        out.append(w)
    return " ".join(shlex.quote(w) for w in out)


def case(args, names, what, code=2, setup=None, keep=False):
    if isinstance(names, str):
        names = [names]
    CASES.append(Case(args if keep else dedupe(args), names, what, code, setup))


# ---------------------------------------------------------------- fixtures

TINY = {"name": "tiny", "kind": "gpt", "num_layers": 4, "hidden_size": 64, "num_heads": 4,
        "ffn_hidden_size": 256, "seq_length": 64, "vocab_size": 256, "bytes_per_param": 4,
        "bytes_per_activation": 4, "dropout": False}
CLUSTER = {"name": "c2", "nodes": 1, "gpus_per_node": 2, "gpu": "local-cpu-core",
           "intra_node_link": "pcie", "intra_node_bandwidth_Bps": 2.5e9, "intra_node_latency_s": 0.0015,
           "inter_node_link": "none", "inter_node_bandwidth_Bps": 2.5e9, "inter_node_latency_s": 0.0015,
           "nics_per_node": 1, "inter_node_topology": "star", "host_link_bandwidth_Bps": 1e10}
PLAN = {"dp": 1, "tp": 1, "pp": 2, "microbatch_size": 1, "num_microbatches": 4, "schedule": "1f1b",
        "recompute": "none"}
SWEEP = {"format": "stagecraft-sweep", "cluster": "local-cpu-2", "steps": 3, "warmup": 1, "threads": 1,
         "configs": [{"name": "a", "model": "tiny", "schedule": "1f1b", "dp": 1, "tp": 1, "pp": 2,
                      "microbatch_size": 1, "num_microbatches": 4, "recompute": "none"}]}
WHATIF = {"slow": [{"rank": 0, "factor": 0.5}], "iterations": 2}

FIXTURES = {}  # file name -> text


def fixture(name, content):
    FIXTURES[name] = content if isinstance(content, str) else json.dumps(content)
    return "{fx}/" + name


def without(base, flag):
    """`base` without `flag` and its value (a case gives the flag itself)."""
    words = base.split()
    while flag in words:
        at = words.index(flag)
        del words[at:at + 2]
    return " ".join(words)


def mutated(base, field, value, drop=False):
    d = json.loads(json.dumps(base))
    if drop:
        d.pop(field)
    else:
        d[field] = value
    return d


fixture("model.json", TINY)
fixture("cluster.json", CLUSTER)
fixture("plan.json", PLAN)
fixture("empty.json", "")
fixture("trunc.json", '{"num_layers": 4, "hidden_size":')
fixture("array.json", "[1, 2, 3]")
fixture("text.txt", "not json at all\n")
fixture("garbage.bin", "".join(chr(c) for c in range(1, 256)) * 4)
fixture("nul.json", '{"a": 1}\0\0\0')
os_dir = "{fx}/dir"
MISSING = "{fx}/no-such-file.json"
FILE_AS_DIR = "{fx}/text.txt/out.json"  # a path under a regular file

# ---------------------------------------------------------------- flags, per subcommand

EST = "estimate --model tiny --cluster local-cpu-2 --pp 2 --microbatches 4"
SIM = "simulate --model tiny --cluster local-cpu-2 --pp 2 --microbatches 4 --iterations 1"
CMP = "compare --model tiny --cluster local-cpu-2 --pp 2 --microbatches 4 --schedules 1f1b"
PLN = "plan --model tiny --cluster local-cpu-2 --global-batch 8 --quiet --threads 1"
TRN = "train --model tiny --nproc 2 --pp 2 --microbatches 4 --steps 1 --log-every 0"
PRF = "profile --hidden 64 --heads 4 --seq 16 --microbatch-size 1 --tp 1 --nproc 0 --runs 1 --warmup 0 --quiet"
SCH = "schedule --schedule 1f1b --stages 2 --microbatches 4"
PAR = "partition --model tiny --pp 2"
CHK = "check-run {fx}/run.log --from {fx}/megatron.sh --cluster h100-ib-1024"

# The plan flags every configuration command shares: (flag, bad value, what is bad).
PLAN_FLAG_VALUES = [
    ("--tp", "0", "a degree below 1"),
    ("--tp", "nan", "NaN"), ("--tp", "x", "not a number"), ("--tp", "", "empty"),
    ("--pp", "-1", "negative"), ("--pp", "inf", "infinity"), ("--pp", "8", "more stages than layers"),
    ("--dp", "0", "zero"), ("--dp", "1.5", "a fraction"), ("--dp", "3", "dp*tp*pp above the GPUs"),
    ("--cp", "0", "zero"), ("--cp", "-2", "negative"),
    ("--ep", "0", "zero"), ("--etp", "-1", "negative"),
    ("--microbatch-size", "0", "zero"), ("--microbatch-size", "1e9", "absurdly large"),
    ("--microbatches", "0", "zero"), ("--microbatches", "-4", "negative"),
    ("--chunks", "0", "zero"),
    ("--schedule", "no-such-schedule", "unknown schedule"), ("--schedule", "", "empty schedule"),
    ("--recompute", "sometimes", "unknown recompute"), ("--recompute-modules", "spleen", "unknown module", ["--recompute-modules"]),
    ("--rank-order", "dp-dp-pp", "a repeated axis"), ("--rank-order", "tp-xx-pp", "unknown axis"),
    ("--stage-layers", "1,x", "not a number", ["--stage-layers", "'x'"]),
    ("--stage-layers", "1,1", "not adding up to the layers", ["stage_layers|schedule"]),
    ("--stage-layers", "-1,5", "negative layers", ["--stage-layers", "-1"]),
    ("--pipeline-layout", "Et*2|x|L", "an unknown layer character", ["pipeline_layout", "'x'"]),
    ("--pipeline-layout", "Et*4L", "one entry for two stages", ["pipeline_layout", "2 per pipeline"]),
    ("--pipeline-layout", "E((t|)*2)*2L", "nested parentheses", ["pipeline_layout", "nested"]),
    ("--pipeline-layout", "Et*9|t*9L", "more layers than the model's", ["pipeline_layout", "18 transformer layers"]),
    ("--tp-overlap", "sideways", "unknown tp overlap"),
    ("--zero", "4", "unknown ZeRO stage"), ("--zero", "-1", "negative"),
    ("--shard-group", "-1", "negative"),
    ("--grad-reduce-at", "never", "unknown place"),
    ("--grad-bucket-mb", "0", "zero bucket"), ("--grad-bucket-mb", "-inf", "minus infinity"),
    ("--moe-dispatcher", "carrier-pigeon", "unknown dispatcher"),
    ("--cuda-graph-scope", "everything", "unknown CUDA graph scope", ["cuda_graph_scope", "everything"]),
    ("--cuda-graph-scope", "full_iteration,attn", "full_iteration beside another scope", ["cuda_graph_scope", "full_iteration"]),
    ("--cuda-graph-scope", "moe_preprocess", "preprocessing without the router", ["cuda_graph_scope", "moe_router"]),
    ("--offload-layers", "-1", "negative"),
    ("--offload-layers", "1000", "more layers than a stage holds", ["offload_layers", "1000"]),
    ("--stack", "no-such-stack", "unknown stack"),
    ("--attention-kernel", "quantum", "unknown kernel"), ("--fp8-recipe", "tasty", "unknown recipe"),
    ("--seq-length", "0", "zero"), ("--seq-length", "abc", "not a number"),
    ("--waves", "0", "zero waves"), ("--segments", "zero", "not a parameter of 1f1b", ["--segments"]),
    ("--alpha1", "2", "not a parameter of 1f1b", ["--alpha1"]), ("--alpha1", "nan", "NaN", ["--alpha1"]),
    ("--param", "novalue", "no '='"), ("--param", "=3", "no key"),
    ("--model", "no-such-model", "unknown model preset"), ("--model", "", "empty model"),
]
CLUSTER_FLAG_VALUES = [
    ("--cluster", "no-such-cluster", "unknown cluster preset"), ("--cluster", "", "empty cluster"),
    ("--memory-margin", "1", "margin of 1"), ("--memory-margin", "-0.1", "negative margin"),
    ("--memory-margin", "nan", "NaN"),
    ("--nodes", "0", "zero nodes"), ("--nodes", "1e12", "absurd"),
    ("--gpus-used-per-node", "3", "more than the node has"), ("--gpus-used-per-node", "-1", "negative"),
]
for base, label in [(EST, "estimate"), (SIM, "simulate"), (CMP, "compare")]:
    for flag, value, what, *custom in PLAN_FLAG_VALUES + CLUSTER_FLAG_VALUES:
        if label == "compare" and flag in ("--schedule", "--segments", "--alpha1"):
            continue  # compare takes --schedules, and gives a parameter only to the schedules that take it
        names = custom[0] if custom else [flag] if value == "" else [flag, value]
        case(f"{without(base, flag)} {flag} {shlex.quote(value)}", names, f"{label} {flag} {value!r}: {what}")

# Files the configuration commands read.
FILE_FLAGS = ["--model", "--cluster", "--plan", "--profile", "--gpu-calibration", "--from", "--hf-config"]
for base, label in [(EST, "estimate"), (SIM, "simulate")]:
    for flag in FILE_FLAGS:
        for path, what in [(MISSING, "a file that does not exist"), (os_dir, "a directory"),
                           ("{fx}/garbage.bin", "binary garbage"), ("{fx}/empty.json", "an empty file"),
                           ("{fx}/trunc.json", "truncated JSON")]:
            if flag in ("--model", "--cluster") and path in ("{fx}/garbage.bin",):
                continue  # a name that is not a .json file reads as a preset name: covered by unknown names
            if flag == "--from" and path in ("{fx}/empty.json", "{fx}/trunc.json"):
                continue  # --from files: below, with import
            if flag == "--hf-config" and path != MISSING and path != os_dir:
                args = f"{base} --from {{fx}}/ds.json {flag} {path}"
            elif flag == "--hf-config":
                args = f"{base} --from {{fx}}/ds.json {flag} {path}"
            else:
                args = f"{base} {flag} {path}"
            case(args, [f"{flag}|{path.split('/')[-1]}"], f"{label} {flag}: {what}")

# Output files of estimate, simulate and compare.
OUTPUTS = [(EST, "--trace"), (SIM, "--trace"), (CMP, "--svg"), (CMP, "--trace-dir")]
for base, flag in OUTPUTS:
    case(f"{base} {flag} {os_dir}" if flag != "--trace-dir" else f"{base} {flag} {{fx}}/text.txt",
         [flag], f"{base.split()[0]} {flag}: a directory (a file for --trace-dir)")
    case(f"{base} {flag} {FILE_AS_DIR}", [flag], f"{base.split()[0]} {flag}: a path under a regular file")
    case(f"{base} {flag} ''", [flag], f"{base.split()[0]} {flag}: empty")

# Conflicts and cross-flag checks.
case(f"{EST} --emit yaml", ["--emit", "yaml"], "estimate --emit: unknown framework")
case(f"{EST} --emit megatron --json", ["--emit", "--json"], "estimate --emit with --json")
case(f"{EST} --workload", ["--workload", "--json"], "estimate --workload without --json")
case(f"{EST} --no-reshard-after-forward", ["reshard", "zero"], "without --zero 3")
case(f"{EST} --shard-group 2", ["--shard-group", "--zero"], "--shard-group without --zero 3")
case(f"{EST} --overlap-param-gather", ["--overlap-param-gather"], "without --zero 1 or 2")
case(f"{EST} --fp8-param-gather", ["--fp8-param-gather"], "without --fp8")
case(f"{EST} --fp8", ["fp8"], "FP8 on a CPU cluster without FP8")
case(f"{EST} --schedule gpipe --waves 2", ["--waves"], "a parameter the schedule does not take")
case(f"{EST} --schedule 1f1b --chunks 2", ["--chunks"], "chunks for a schedule without them")
case(f"{EST} --from-format megatron", ["--from-format", "--from"], "--from-format without --from")
case(f"{EST} --hf-config {{fx}}/model.json", ["--hf-config", "--from"], "--hf-config without --from")
case(f"{EST} --stage-layers 1,2,1", ["--stage-layers"], "three stages for pp 2")
case(f"{EST} --account-for-embedding-in-pipeline-split", ["account_for_embedding_in_pipeline_split", "5"],
     "4 layers and the embedding over 2 stages")
case(f"{EST} --stage-layers 2,2 --pipeline-layout 'Et*2|t*2L'", ["pipeline_layout", "one way of splitting"],
     "two ways of splitting the layers")
case("estimate --cluster local-cpu-2", ["--model"], "no model and no --from")
case("estimate --model tiny", ["--cluster"], "no cluster and no --plan naming one")
case(f"{SIM} --tp-comm folded-twice", ["--tp-comm", "folded-twice"], "unknown tp-comm")
case(f"{SIM} --iterations 0", ["--iterations", "0"], "zero iterations")
case(f"{SIM} --iterations 1e9", ["--iterations"], "absurd iterations")
case(f"{SIM} --slow-rank 9:0.5", ["--slow-rank", "9"], "a rank beyond the GPUs")
case(f"{SIM} --slow-rank 0:1.5", ["--slow-rank", "1.5"], "a factor above 1")
case(f"{SIM} --slow-rank 0:0", ["--slow-rank", "0"], "a factor of 0")
case(f"{SIM} --slow-rank x:0.5", ["--slow-rank", "x"], "a rank that is not a number")
case(f"{SIM} --slow-rank 0.5", ["--slow-rank", "0.5"], "no colon")
case(f"{SIM} --slow-node 3:0.5", ["--slow-node", "3"], "a node beyond the cluster")
case(f"{SIM} --slow-node 0:nan", ["--slow-node", "nan"], "NaN factor")
case(f"{SIM} --slow-fraction 2:0.5", ["--slow-fraction", "2"], "a fraction above 1")
case(f"{SIM} --slow-fraction 0.5:-1", ["--slow-fraction", "-1"], "negative factor")
case(f"{SIM} --degraded-nic 0:5:0.5", ["--degraded-nic", "5"], "a NIC beyond the node's")
case(f"{SIM} --degraded-nic 0:1.5", ["--degraded-nic", "1.5"], "a factor above 1")
case(f"{SIM} --degraded-nic 0:0", ["--degraded-nic|NIC"], "the only NIC failed")
case(f"{SIM} --late-rank 0:-1", ["--late-rank", "-1"], "a negative delay")
case(f"{SIM} --late-rank 0:inf", ["--late-rank", "inf"], "an infinite delay")
case(f"{SIM} --jitter gauss:0.1", ["--jitter", "gauss"], "unknown distribution")
case(f"{SIM} --jitter normal:-0.1", ["--jitter", "-0.1"], "a negative cv")
case(f"{SIM} --jitter normal", ["--jitter", "normal"], "no cv")
case(f"{SIM} --seed -1", ["--seed", "-1"], "negative seed")
case(f"{SIM} --platform {os_dir}", ["--platform"], "platform a directory")
case(f"{SIM} --platform {MISSING}", ["--platform"], "platform missing")
case(f"{SIM} --platform {{fx}}/text.txt", ["--platform"], "platform not XML")
case(f"{SIM} --platform {{fx}}/bad.xml", ["--platform"], "platform XML without GPU hosts")
fixture("bad.xml", '<?xml version="1.0"?><!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">'
        '<platform version="4.1"><zone id="z" routing="Full"></zone></platform>')
case(f"{SIM} --whatif {MISSING}", ["--whatif"], "what-if missing")
case(f"{SIM} --whatif {os_dir}", ["--whatif"], "what-if a directory")
case(f"{SIM} --whatif {{fx}}/garbage.bin", ["--whatif"], "what-if garbage")
case(f"{CMP} --schedules 1f1b,nope", ["schedule", "nope"], "an unknown schedule in the list")
case(f"{CMP} --schedules ''", ["--schedules"], "empty schedules")
case(f"{CMP} --schedules ,,", ["--schedules"], "a list of nothing")
case(f"{CMP} --tp-overlaps blocking,sideways", ["--tp-overlaps", "sideways"], "unknown tp overlap")
case(f"{CMP} --engine quantum", ["--engine", "quantum"], "unknown engine")
# A tensor-parallel overlap mode other than blocking at tp 1 (nothing to overlap; issue 52).
for base, mode in [(EST, "merak"), (f"{EST} --stack megatron-core-te --sequence-parallel", "te"), (SIM, "oases"),
                   (f"{TRN} --json out.json", "cross-pass")]:
    case(f"{base} --tp-overlap {mode}", ["--tp-overlap", mode, "tp = 1"], f"{base.split()[0]} --tp-overlap {mode} at tp 1")
case(f"{CMP} --tp-overlaps blocking,merak", ["--tp-overlaps", "merak", "tp = 1"], "compare --tp-overlaps merak at tp 1")
case(f"{EST} --sequence-parallel", ["sequence_parallel", "tp = 1"], "estimate --sequence-parallel at tp 1 (issue 52)")
case(f"{TRN} --json out.json --sequence-parallel", ["sequence_parallel", "tp = 1"], "train --sequence-parallel at tp 1")
case(f"{PLN} --tp 1 --tp-overlaps merak,oases --out out.json", ["--tp-overlaps", "merak", "tp = 1"],
     "plan --tp-overlaps without blocking on tp 1 only")

# What-if files: each bad field named (simulate and plan read them alike).
WHATIF_BAD = [
    ({"slow": [{"rank": 0, "factor": 1.5}]}, "factor", "a factor above 1"),
    ({"slow": [{"rank": 0, "factor": 0}]}, "factor", "a factor of 0"),
    ({"slow": [{"rank": 99, "factor": 0.5}]}, "rank", "a rank beyond the GPUs"),
    ({"slow": [{"rank": -1, "factor": 0.5}]}, "rank", "a negative rank"),
    ({"slow": [{"rank": "zero", "factor": 0.5}]}, "rank", "a rank that is a string"),
    ({"slow": [{"node": 5, "factor": 0.5}]}, "node", "a node beyond the cluster"),
    ({"slow": [{"fraction": 1.5, "factor": 0.5}]}, "fraction", "a fraction above 1"),
    ({"slow": [{"factor": 0.5}]}, "slow", "neither rank, node nor fraction"),
    ({"slow": [{"rank": 0, "node": 0, "factor": 0.5}]}, "slow", "both rank and node"),
    ({"slow": [{"rank": 0}]}, "factor", "no factor"),
    ({"slow": {"rank": 0, "factor": 0.5}}, "slow", "an object where a list is meant"),
    ({"slow": [{"rank": 0, "factor": 0.5, "colour": "red"}]}, "colour", "an unknown field in an entry"),
    ({"nics": [{"node": 0, "nic": 3, "factor": 0.5}]}, "nic", "a NIC beyond the node's"),
    ({"nics": [{"node": 0, "factor": 2}]}, "factor", "a factor above 1"),
    ({"nics": [{"node": 9, "factor": 0.5}]}, "node", "a node beyond the cluster"),
    ({"late": [{"rank": 0, "delay_s": -1}]}, "delay_s", "a negative delay"),
    ({"late": [{"rank": 0}]}, "delay_s", "no delay"),
    ({"jitter": {"distribution": "gauss", "cv": 0.1}}, "distribution", "unknown distribution"),
    ({"jitter": {"distribution": "normal", "cv": -1}}, "cv", "a negative cv"),
    ({"jitter": {"distribution": "normal", "cv": "big"}}, "cv", "a cv that is a string"),
    ({"jitter": {"distribution": "normal", "cv": 0.1, "seed": -5}}, "seed", "a negative seed"),
    ({"iterations": 0}, "iterations", "zero iterations"),
    ({"iterations": 1000000}, "iterations", "absurd iterations"),
    ({"iterations": 2.5}, "iterations", "fractional iterations"),
    ({"slowness": []}, "slowness", "an unknown top-level field"),
    ([{"rank": 0}], "what-if", "an array, not an object"),
]
WHATIF_PLAN_BAD = [  # against the GPUs every plan of the search takes (2 GPUs, one node): before the search
    ({"nics": [{"node": 0, "factor": 0.5}]}, ["nics[0]", "NIC node", "between nodes"], "a NIC what-if inside one node"),
    ({"nics": [{"node": 0, "nic": 3, "factor": 0.5}]}, ["nics[0]", "3"], "a NIC beyond the node's"),
    ({"slow": [{"rank": 7, "factor": 0.5}]}, ["slow[0]", "7"], "a rank beyond the search's GPUs"),
    ({"late": [{"rank": 5, "delay_s": 1}]}, ["late[0]", "5"], "a late rank beyond the search's GPUs"),
]
for i, (doc, names, what) in enumerate(WHATIF_PLAN_BAD):
    path = fixture(f"whatif-plan-{i}.json", doc)
    case(f"{PLN} --pp 2 --tp 1 --whatif {path} --out out.json", names, f"plan --whatif: {what}")
case(f"{SIM} --degraded-nic 0:0.5", ["--degraded-nic", "between nodes"], "a NIC what-if on a plan inside one node")
for i, (doc, field, what) in enumerate(WHATIF_BAD):
    path = fixture(f"whatif-{i}.json", doc)
    case(f"{SIM} --whatif {path}", [field], f"simulate --whatif: {what}")
    if i % 3 == 1:  # plan reads the same format before its search
        case(f"{PLN} --pp 2 --tp 1 --whatif {path}", [field], f"plan --whatif: {what}")

# Model files: each field wrong (missing, wrong type, negative, absurd, unknown).
MODEL_REQUIRED = ["num_layers", "hidden_size", "num_heads", "seq_length", "vocab_size"]
MODEL_BAD = []
for f in MODEL_REQUIRED:
    MODEL_BAD.append((mutated(TINY, f, None, drop=True), [f], f"missing {f}"))
    MODEL_BAD.append((mutated(TINY, f, "64"), [f, "64"], f"{f} a string"))
    MODEL_BAD.append((mutated(TINY, f, -4), [f, "-4"], f"{f} negative"))
    MODEL_BAD.append((mutated(TINY, f, 0), [f, "0"], f"{f} zero"))
    MODEL_BAD.append((mutated(TINY, f, 1e30), [f], f"{f} beyond an int"))
    MODEL_BAD.append((mutated(TINY, f, 2.5), [f, "2.5"], f"{f} a fraction"))
for f, v, what in [("hidden_size", 65, "hidden not divisible by heads"), ("ffn_hidden_size", -1, "negative ffn"),
                   ("bytes_per_param", 3, "3 bytes per parameter"), ("bytes_per_activation", 0, "0 bytes"),
                   ("kind", "rnn", "unknown kind"), ("kind", 7, "kind a number"),
                   ("dropout", "yes", "dropout a string"), ("fp8", 1, "fp8 a number"),
                   ("attention_kernel", "quantum", "unknown attention kernel"),
                   ("fp8_recipe", "tasty", "unknown recipe"), ("num_kv_heads", 3, "kv heads not dividing heads"),
                   ("num_experts", -2, "negative experts"), ("experts_per_token", 3, "top-k without experts"),
                   ("sliding_window_pattern", "1,0", "pattern a string"), ("moe_layer_pattern", [1, "x"], "a string in the pattern"),
                   ("num_layer", 4, "unknown field (typo)"), ("name", 5, "name a number"),
                   ("moe_capacity_factor", 1.25, "a capacity factor on a dense model"),
                   ("moe_capacity_factor", -1, "a negative capacity factor on a dense model"),
                   ("moe_capacity_factor", 0, "any capacity factor on a dense model"),
                   ("moe_load_imbalance", 2.0, "a load imbalance on a dense model"),
                   ("moe_node_limit", 0, "a node limit on a dense model"),
                   ("dense_layers", 1, "dense layers on a dense model")]:
    MODEL_BAD.append((mutated(TINY, f, v), [f], what))
MODEL_BAD.append(([TINY], ["model"], "an array of models"))
for i, (doc, names, what) in enumerate(MODEL_BAD):
    path = fixture(f"model-{i}.json", doc)
    cmd = [f"{EST} --model {path} --json", f"{PLN} --model {path} --pp 2 --tp 1 --out out.json",
           f"{PAR} --model {path}", f"{TRN} --model {path} --json out.json"][i % 4]
    case(cmd.replace(" --model tiny", "", 1), names, f"model file: {what}")

# Cluster files.
CLUSTER_BAD = []
for f in ["nodes", "gpus_per_node", "intra_node_bandwidth_Bps", "inter_node_latency_s", "nics_per_node",
          "host_link_bandwidth_Bps"]:
    CLUSTER_BAD.append((mutated(CLUSTER, f, None, drop=True), [f], f"missing {f}"))
    CLUSTER_BAD.append((mutated(CLUSTER, f, "2"), [f], f"{f} a string"))
    CLUSTER_BAD.append((mutated(CLUSTER, f, -1), [f, "-1"], f"{f} negative"))
for f, v, what in [("gpu", "no-such-gpu", "unknown catalog GPU"), ("gpu", 3, "gpu a number"),
                   ("nodes", 0, "zero nodes"), ("gpus_per_node", 0, "zero GPUs"),
                   ("intra_node_bandwidth_Bps", 0, "zero bandwidth"), ("inter_node_topology", "hypercube", "unknown topology"),
                   ("memory_margin", 1.5, "margin above 1"), ("gpu_peak_flops_per_s", -1e12, "negative peak"),
                   ("gpu_memory_bytes", 0, "zero memory"), ("intra_node_bus_efficiency", 2, "efficiency above 1"),
                   ("gpus_used_per_node", 5, "more used than the node has"), ("fast_group_size", -8, "negative group"),
                   ("extends", "no-such-cluster", "extends an unknown preset"), ("bandwidth", 1, "unknown field"),
                   ("cores_per_node", -2, "negative cores")]:
    CLUSTER_BAD.append((mutated(CLUSTER, f, v), [f], what))
for i, (doc, names, what) in enumerate(CLUSTER_BAD):
    path = fixture(f"cluster-{i}.json", doc)
    cmd = [f"{EST} --cluster {path} --trace t.json", f"{SIM} --cluster {path} --trace t.json",
           f"{PLN} --cluster {path} --out out.json", f"{CMP} --cluster {path} --svg s.svg"][i % 4]
    case(cmd.replace(" --cluster local-cpu-2", "", 1), names, f"cluster file: {what}")

# Plan files.
PLAN_BAD = [
    (mutated(PLAN, "num_microbatches", None, drop=True), ["num_microbatches"], "missing microbatches"),
    (mutated(PLAN, "num_microbatches", 0), ["num_microbatches", "0"], "zero microbatches"),
    (mutated(PLAN, "pp", "2"), ["pp"], "pp a string"),
    (mutated(PLAN, "pp", 1.5), ["pp", "1.5"], "pp a fraction"),
    (mutated(PLAN, "tp", -2), ["tp", "-2"], "negative tp"),
    (mutated(PLAN, "dp", 1e20), ["dp"], "dp beyond an int"),
    (mutated(PLAN, "schedule", "nope"), ["nope"], "unknown schedule"),
    (mutated(PLAN, "schedule", 3), ["schedule"], "schedule a number"),
    (mutated(PLAN, "recompute", "maybe"), ["recompute", "maybe"], "unknown recompute"),
    (mutated(PLAN, "rank_order", "tp-tp-pp"), ["rank_order"], "repeated axis"),
    (mutated(PLAN, "stage_layers", [1, 1]), ["stage_layers"], "stage layers not adding up"),
    (mutated(PLAN, "stage_layers", "2,2"), ["stage_layers"], "stage layers a string"),
    (mutated(PLAN, "tp_overlap", "sideways"), ["tp_overlap", "sideways"], "unknown overlap"),
    (mutated(PLAN, "grad_reduce_at", "later"), ["grad_reduce_at", "later"], "unknown place"),
    (mutated(PLAN, "grad_bucket_bytes", -1), ["grad_bucket_bytes"], "negative bucket"),
    (mutated(PLAN, "zero", 7), ["zero", "7"], "unknown ZeRO stage"),
    (mutated(PLAN, "moe_dispatcher", "pigeon"), ["moe_dispatcher", "pigeon"], "unknown dispatcher"),
    (mutated(PLAN, "stack", "no-such-stack"), ["no-such-stack"], "unknown stack"),
    (mutated(PLAN, "schedule_params", {"waves": 2}), ["waves"], "a parameter 1f1b does not take"),
    (mutated(PLAN, "schedule_params", [1]), ["schedule_params"], "params an array"),
    (mutated(PLAN, "sequence_parallel", "on"), ["sequence_parallel"], "bool a string"),
    (mutated(PLAN, "microbatchsize", 2), ["microbatchsize"], "unknown field (typo)"),
    (mutated(PLAN, "cp", 0), ["cp", "0"], "zero cp"),
    (mutated(PLAN, "offload_layers", -1), ["offload_layers", "-1"], "negative offload"),
    (mutated(PLAN, "layer_tp", [1, "x"]), ["layer_tp"], "a string in layer_tp"),
    (mutated(PLAN, "tp_overlap", "merak"), ["tp_overlap", "merak", "tp = 1"], "an overlap mode at tp 1"),
    (mutated(PLAN, "stage_tp_overlap", ["blocking", "oases"]), ["stage_tp_overlap[1]", "oases"], "a stage's overlap mode at tp 1"),
    (mutated(PLAN, "sequence_parallel", True), ["sequence_parallel", "tp = 1"], "sequence parallelism at tp 1"),
    ({"plan": "not an object"}, ["plan"], "unknown field with the wrong shape"),
]
for i, (doc, names, what) in enumerate(PLAN_BAD):
    path = fixture(f"plan-{i}.json", doc)
    base = [EST, SIM, TRN][i % 3].replace(" --pp 2 --microbatches 4", "")
    case(f"{base} --plan {path}" + (" --json out.json" if base.startswith("train") else ""), names, f"plan file: {what}")

# Profiles and GPU calibrations.
PROFILE_BAD = [
    ({"format": "something-else", "version": 1, "layers": []}, ["format"], "wrong format"),
    ({"format": "stagecraft-profile", "version": 99, "layers": []}, ["version", "99", "allowed: 1"], "unknown version"),
    ({"format": "stagecraft-profile", "layers": []}, ["version", "missing", "allowed: 1"], "no version"),
    ({"format": "stagecraft-profile", "version": "1", "layers": []}, ["version", '"1"'], "version a string"),
    ({"format": "stagecraft-profile", "version": 1, "layers": "none"}, ["layers"], "layers a string"),
    ({"format": "stagecraft-profile", "version": 1, "layers": [{"kind": "transformer"}]}, ["hidden_size"], "a layer without its shape"),
    ({"format": "stagecraft-profile", "version": 1, "layers": [{"kind": "warp-drive"}]}, ["kind|hidden_size"], "unknown layer kind"),
]
for i, (doc, names, what) in enumerate(PROFILE_BAD):
    path = fixture(f"profile-{i}.json", doc)
    case(f"{EST} --profile {path}", names, f"profile file: {what}")
    if "version" in names:  # the other commands read profiles through the same check
        case(f"{[PLN + ' --out out.json', CMP, SIM][i % 3]} --profile {path}", names, f"profile file: {what}")
CALIB_OK = {"gpu": "h100-sxm", "gemm_max_efficiency": 0.8, "source": "test"}
for i, (doc, names, what) in enumerate([
        (mutated(CALIB_OK, "gpu", "a100-40gb"), ["gpu", "a100-40gb"], "another GPU"),
        (mutated(CALIB_OK, "gemm_max_efficiency", 1.5), ["gemm_max_efficiency", "1.5"], "efficiency above 1"),
        (mutated(CALIB_OK, "gemm_max_efficiency", "high"), ["gemm_max_efficiency"], "efficiency a string"),
        (mutated(CALIB_OK, "source", None, drop=True), ["source"], "no source"),
        (mutated(CALIB_OK, "clock", 3), ["clock"], "unknown field")]):
    path = fixture(f"calib-{i}.json", doc)
    case(f"estimate --model gpt3-7.5b --cluster h100-ib-1024 --nodes 1 --tp 8 --microbatches 4 --gpu-calibration {path}",
         names, f"gpu calibration: {what}")

# ---------------------------------------------------------------- plan
for entry in [
        ("--global-batch", "0", "zero batch"), ("--global-batch", "-8", "negative"), ("--global-batch", "nan", "NaN"),
        ("--gpus", "0", "zero GPUs"), ("--gpus", "3", "more GPUs than the cluster"), ("--gpus", "abc", "not a number"),
        ("--gpus", "64-32", "a range going down"), ("--gpus", "", "empty"),
        ("--tokens", "-1", "negative tokens"), ("--tokens", "inf", "infinite tokens"),
        ("--schedules", "nope", "unknown schedule", ["schedule", "nope"]), ("--schedules", "interleaved-1f1b:x", "chunks not a number"),
        ("--schedules", "hanayo:colour=2", "unknown parameter", ["schedules", "colour"]), ("--schedules", "", "empty list"),
        ("--microbatch-sizes", "0", "zero size"), ("--microbatch-sizes", "1,x", "not a number", ["--microbatch-sizes", '"x"']),
        ("--recompute", "none,sometimes", "unknown recompute", ["recompute", "sometimes"]), ("--zero", "5", "unknown ZeRO"),
        ("--shard-groups", "-1", "negative shard group"), ("--sequence-parallel", "maybe", "not on or off"),
        ("--tp-overlaps", "sideways", "unknown overlap"), ("--max-tp", "0", "zero"),
        ("--tp", "3", "not a divisor"), ("--tp", "0", "zero degree"), ("--pp", "x", "not a number"),
        ("--precisions", "fp4", "unknown precision"), ("--cp", "0", "zero cp"), ("--ep", "-1", "negative ep"),
        ("--etp", "x", "not a number"), ("--rank-orders", "tp-tp-pp", "repeated axis"),
        ("--top", "0", "zero plans"), ("--top", "-3", "negative"), ("--threads", "0", "zero threads"),
        ("--threads", "100000", "absurd threads"), ("--verify", "hardware", "unknown verification"),
        ("--grad-bucket-mb", "0", "zero bucket"), ("--grad-reduce-at", "never", "unknown place"),
        ("--emit", "yaml", "unknown framework"), ("--stack", "no-such-stack", "unknown stack"),
        ("--cuda-graph-scope", "everything", "unknown CUDA graph scope", ["cuda_graph_scope", "everything"]),
        ("--attention-kernel", "quantum", "unknown kernel"), ("--memory-margin", "2", "margin above 1"),
        ("--nodes", "-1", "negative nodes"), ("--cluster", "no-such-cluster", "unknown cluster"),
        ("--model", "no-such-model", "unknown model"), ("--fp8-recipe", "tasty", "unknown recipe")]:
    flag, value, what, *custom = entry
    names = custom[0] if custom else [flag] if value == "" else [flag, value]
    case(f"{PLN} {flag} {shlex.quote(value)} --out out.json", names, f"plan {flag} {value!r}: {what}")
case("plan --model tiny --global-batch 8 --quiet", ["--cluster"], "plan without its required --cluster")
case("plan --model tiny --cluster local-cpu-2 --quiet", ["--global-batch"], "plan without --global-batch")
case(f"{PLN} --out {os_dir}", ["--out"], "plan --out a directory")
case(f"{PLN} --out {FILE_AS_DIR}", ["--out"], "plan --out under a regular file")
case(f"{PLN} --out ''", ["--out"], "plan --out empty")
case(f"{PLN} --whatif {MISSING} --out out.json", ["--whatif"], "plan --whatif missing")
case(f"{PLN} --whatif {os_dir}", ["--whatif"], "plan --whatif a directory")
case(f"{PLN} --profile {MISSING}", ["--profile"], "plan --profile missing")
case(f"{PLN} --emit megatron --json", ["--emit", "--json"], "plan --emit with --json")
case(f"{PLN} --cp 2 --out out.json", ["--cp", "2"], "cp 2 with a materialized core",
     )
case(f"{PLN} --gpus 2 --global-batch 3 --tp 1 --pp 1 --microbatch-sizes 2 --out out.json", ["--global-batch"],
     "no plan divides the batch", code=2)

# ---------------------------------------------------------------- schedule
for entry in [
        ("--stages", "0", "zero stages"), ("--stages", "-2", "negative"), ("--stages", "1e9", "absurd"),
        ("--stages", "nan", "NaN"), ("--stages", "two", "a word"), ("--microbatches", "0", "zero"),
        ("--microbatches", "inf", "infinity"), ("--microbatches", "2.5", "a fraction"),
        ("--chunks", "0", "zero chunks"), ("--waves", "-1", "negative waves"),
        ("--format", "pdf", "unknown format"), ("--format", "", "empty format"),
        ("--unit-costs", "F=x", "a cost not a number", ["--unit-costs", "'x'"]), ("--unit-costs", "Q=1", "unknown action"),
        ("--unit-costs", "F=-1", "a negative cost", ["--unit-costs", "'-1'"]),
        ("--unit-costs", "F=nan", "NaN cost", ["--unit-costs", "'nan'"]),
        ("--unit-costs", "F", "no value"), ("--segments", "-3", "not a parameter of 1f1b", ["segments"]),
        ("--alpha1", "1.5", "not a parameter of 1f1b", ["alpha1"]), ("--param", "in_flight", "no '='"),
        ("--param", "colour=red", "a parameter the schedule does not take", ["colour"])]:
    flag, value, what, *custom = entry
    names = custom[0] if custom else [flag] if value == "" else [flag, value]
    case(f"{SCH} {flag} {shlex.quote(value)} --out out.txt", names, f"schedule {flag} {value!r}: {what}")
case("schedule --schedule no-such --stages 2 --microbatches 4", ["--schedule", "no-such"], "unknown schedule")
case("schedule --schedule '' --stages 2 --microbatches 4", ["--schedule"], "empty schedule name")
case("schedule --stages 2 --microbatches 4", ["--schedule", "--import"], "neither --schedule nor --import")
case(f"{SCH} --import {{fx}}/s.csv", ["--schedule", "--import"], "both --schedule and --import")
fixture("s.csv", "0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n")
case("schedule --schedule interleaved-1f1b --stages 4 --microbatches 3 --chunks 2", ["microbatches", "3"],
     "interleaved microbatches not a multiple of the stages")
case("schedule --schedule 1f1b --stages 1000 --microbatches 1000000", ["microbatches"], "beyond the action limit")
case(f"{SCH} --out {os_dir}", ["--out"], "schedule --out a directory")
case(f"{SCH} --out {FILE_AS_DIR}", ["--out"], "schedule --out under a regular file")
case(f"{SCH} --out ''", ["--out"], "schedule --out empty")
case(f"{SCH} --unit-costs F=1,B=2 --svg {os_dir}", ["--svg"], "schedule --svg a directory")
case(f"{SCH} --list --verbose --stages 0", ["--stages", "0"], "--list with a bad --stages")
case("schedule --verbose", ["--schedule"], "--verbose without --list (nor a schedule)")
for i, (text, names, what) in enumerate([
        ("0F0,0F1\n1X0,1B0\n", ["'X'"], "an unknown action"),
        ("0F0,0F0\n,1F0\n", ["0F0"], "an action twice"),
        ("", ["has no rows"], "an empty file"),
        ("0F-1\n", ["0F-1"], "a negative microbatch"),
        ("0F99999999999999999999\n", ["0F9999"], "a microbatch beyond an int"),
        ("\0\1\2\n", ["line 1"], "binary garbage"),
]):
    path = fixture(f"sched-{i}.csv", text)
    case(f"schedule --import {path} --format json --out out.json", names + ["sched-"] if False else names,
         f"schedule --import: {what}")
for i, (doc, names, what) in enumerate([
        ({"format": "stagecraft-schedule"}, ["schedule"], "a schedule JSON without actions"),
        ({"ranks": "two"}, ["ranks"], "ranks a string"),
        ([1, 2], ["schedule"], "an array"),
]):
    path = fixture(f"sched-{i}.json", doc)
    case(f"schedule --import {path} --out out.txt", names, f"schedule --import JSON: {what}")
case(f"schedule --import {MISSING}", ["--import|no-such-file.json"], "import a missing file")
case(f"schedule --import {os_dir}", ["--import|dir"], "import a directory")
case("schedule --import {fx}/text.txt", ["--import|text.txt"], "import a file that is neither .csv nor .json")

# ---------------------------------------------------------------- presets
case("presets --show no-such-preset", ["--show", "no-such-preset"], "unknown preset")
case("presets --show ''", ["--show"], "empty preset name")
case("presets --show tiny --show gpt3-175b", ["--show"], "--show twice", keep=True)
case("presets --bogus", ["--bogus"], "unknown flag")
case("presets extra-arg", ["extra-arg"], "unexpected argument")

# ---------------------------------------------------------------- partition
for flag, value, what in [
        ("--pp", "0", "zero stages"), ("--pp", "99", "more stages than subgraphs"), ("--pp", "nan", "NaN"),
        ("--microbatch-size", "0", "zero"), ("--max-subgraphs", "0", "zero"), ("--max-subgraphs", "-5", "negative"),
        ("--common-min-users", "-1", "negative"), ("--recompute", "selective", "not none or full"),
        ("--cluster", "no-such-cluster", "unknown cluster"), ("--example-shape", "2,x", "with a .json model")]:
    case(f"{PAR} {flag} {value} --graph-out g.json", [flag] if flag == "--example-shape" else [flag, value], f"partition {flag} {value!r}: {what}")
case("partition --pp 2", ["--model"], "partition without --model")
case(f"partition --model {MISSING}", ["--model"], "a missing model file")
case(f"partition --model {{fx}}/missing.pt --example-shape 2,8", ["--model|missing.pt"], "a missing TorchScript module")
case(f"partition --model {{fx}}/text.pt --example-shape 2,8", ["--model|text.pt"], "a .pt that is not a module")
fixture("text.pt", "not a zip archive\n")
case(f"partition --model {{fx}}/text.pt --example-shape 2,-8", ["--example-shape", "-8"], "a negative dimension")
case(f"partition --model {{fx}}/text.pt", ["--example-shape"], "a module without --example-shape")
case(f"{PAR} --measure", ["--measure"], "--measure without a TorchScript module")
case(f"{PAR} --graph-out {os_dir}", ["--graph-out"], "--graph-out a directory")
case(f"{PAR} --graph-out {FILE_AS_DIR}", ["--graph-out"], "--graph-out under a file")
for i, (doc, names, what) in enumerate([
        ({"format": "stagecraft-graph", "nodes": "none"}, ["nodes"], "nodes a string"),
        ({"format": "stagecraft-graph", "nodes": [{"name": "a", "kind": "matmul", "inputs": ["zz"]}]}, ["zz|nodes[0]"], "an input that is no node"),
        ({"format": "stagecraft-graph", "version": 99, "nodes": []}, ["version|nodes"], "unknown version"),
        ({"format": "stagecraft-graph", "version": 2, "nodes": [{"name": "x", "kind": "input", "shape": [1, 8]}]},
         ["version", "not a known field"], "a field the format does not have"),
        ({"format": "stagecraft-graph", "nodes": [{"name": "x", "kind": "input", "shape": [1, 8]},
                                                  {"name": "y", "kind": "warp-drive", "inputs": ["x"], "shape": [1, 8]}]},
         ["nodes[1]", "kind", "warp-drive"], "an unknown node kind"),
        ({"format": "stagecraft-graph", "nodes": [{"name": "x", "kind": "input", "shape": [1, 8]},
                                                  {"name": "y", "kind": "Linear", "inputs": ["x"], "shape": [1, 8]}]},
         ["kind", "Linear"], "a node kind in another tool's spelling"),
]):
    path = fixture(f"graph-{i}.json", doc)
    case(f"partition --model {path} --pp 1", names, f"graph file: {what}")

# ---------------------------------------------------------------- import
fixture("megatron.sh", "torchrun pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 "
        "--seq-length 64 --max-position-embeddings 64 --micro-batch-size 1 --global-batch-size 8 "
        "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --vocab-size 256\n")
fixture("run.log", " iteration        2/      10 | elapsed time per iteration (ms): 1000.0 |\n")
fixture("ds.json", {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1}})
IMPORT_BAD = [
    ("garbage.bin", None, ["garbage.bin"], "binary garbage"),
    ("empty.json", None, ["empty.json"], "an empty file"),
    ("text.txt", None, ["text.txt"], "prose"),
    ("trunc.json", None, ["trunc.json"], "truncated JSON"),
    ("mt-tp.sh", "torchrun pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64 "
     "--micro-batch-size 1 --global-batch-size 8 --tensor-model-parallel-size 3 --vocab-size 256\n",
     ["tensor-model-parallel-size", "3"], "tp not dividing the heads"),
    ("mt-neg.sh", "torchrun pretrain_gpt.py --num-layers -4 --hidden-size 64 --num-attention-heads 4 --seq-length 64\n",
     ["num-layers", "-4"], "negative layers"),
    ("mt-word.sh", "torchrun pretrain_gpt.py --num-layers four --hidden-size 64 --num-attention-heads 4\n",
     ["num-layers", "four"], "a word for a number"),
    ("mt-batch.sh", "torchrun pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64 "
     "--micro-batch-size 3 --global-batch-size 8 --vocab-size 256\n", ["global-batch-size", "8"],
     "global batch not a multiple of the microbatch"),
    ("ds-bad.json", json.dumps({"train_batch_size": "eight", "train_micro_batch_size_per_gpu": 1}),
     ["train_batch_size"], "DeepSpeed batch a string"),
    ("ds-stage.json", json.dumps({"train_batch_size": 8, "zero_optimization": {"stage": 7}}), ["stage", "7"],
     "unknown ZeRO stage"),
    ("hf-bad.json", json.dumps({"model_type": "llama", "num_hidden_layers": -2, "hidden_size": 64,
                                "num_attention_heads": 4, "vocab_size": 256}), ["num_hidden_layers", "-2"],
     "negative layers"),
    ("hf-type.json", json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": "big",
                                 "num_attention_heads": 4, "vocab_size": 256}), ["hidden_size"], "hidden a string"),
    ("tt-bad.toml", "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[parallelism]\ntensor_parallel_degree = \"two\"\n", ["tensor_parallel_degree"], "degree a string"),
    ("tt-syntax.toml", "[model\nname = llama3\n", ["tt-syntax.toml"], "broken TOML"),
    ("br-bad.yaml", "trainer:\n  num_nodes: -1\n", ["br-bad.yaml"], "negative nodes"),
    ("br-syntax.yaml", "model: [unclosed\n", ["br-syntax.yaml"], "broken YAML"),
]
for name, content, names, what in IMPORT_BAD:
    if content is not None:
        fixture(name, content)
    case(f"import {{fx}}/{name} --gpus 8 --out-model m.json --out-plan p.json", names, f"import: {what}")
    case(f"{EST} --from {{fx}}/{name}", names, f"estimate --from: {what}")
fixture("mt-tpov.sh", "torchrun pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64 "
        "--micro-batch-size 1 --global-batch-size 8 --tensor-model-parallel-size 1 --vocab-size 256 --tp-comm-overlap "
        "--sequence-parallel\n")
case("estimate --cluster local-cpu-2 --from {fx}/mt-tpov.sh", ["tp_overlap", "te", "tp = 1"],
     "estimate --from: --tp-comm-overlap at tp 1 (Megatron-LM refuses it too)")
case(f"import {MISSING}", ["no-such-file.json"], "import a missing file")
case(f"import {os_dir}", ["dir"], "import a directory")
case("import", ["file"], "import without its file")
case("import {fx}/megatron.sh --gpus 2 --format fortran", ["--format", "fortran"], "unknown format")
case("import {fx}/megatron.sh --gpus 2 --format deepspeed", ["deepspeed|megatron.sh"], "the wrong format")
case("import {fx}/megatron.sh --gpus 2 --gpus 0", ["--gpus", "0"], "zero GPUs")
case("import {fx}/megatron.sh --gpus 2 --gpus -8", ["--gpus", "-8"], "negative GPUs")
case("import {fx}/megatron.sh --gpus 2 --cluster no-such-cluster --out-cluster c.json", ["--cluster", "no-such-cluster"], "unknown cluster")
case("import {fx}/megatron.sh --gpus 2 --out-cluster c.json", ["--out-cluster", "--cluster"], "--out-cluster without --cluster")
case(f"import {{fx}}/megatron.sh --gpus 2 --out-model {os_dir}", ["--out-model"], "--out-model a directory")
case(f"import {{fx}}/megatron.sh --gpus 2 --out-plan {FILE_AS_DIR}", ["--out-plan"], "--out-plan under a file")
case(f"import {{fx}}/megatron.sh --gpus 2 --out-model m.json --out-plan {os_dir}", ["--out-plan"],
     "one output bad: the other not written either")
case(f"import {{fx}}/ds.json --hf-config {MISSING}", ["--hf-config"], "a missing HF config")
case(f"import {{fx}}/ds.json --hf-config {{fx}}/text.txt", ["--hf-config"], "an HF config that is prose")

# ---------------------------------------------------------------- check-run
case(f"check-run {MISSING} --from {{fx}}/megatron.sh --cluster local-cpu-2", ["no-such-file.json"], "a missing log")
case(f"check-run {os_dir} --from {{fx}}/megatron.sh --cluster local-cpu-2", ["dir"], "a log that is a directory")
case("check-run {fx}/garbage.bin --from {fx}/megatron.sh --cluster local-cpu-2", ["garbage.bin"], "a log of garbage")
case("check-run {fx}/empty.json --from {fx}/megatron.sh --cluster local-cpu-2", ["empty.json"], "an empty log")
case("check-run {fx}/run.log --from {fx}/megatron.sh --cluster local-cpu-2 --warmup -1", ["--warmup", "-1"], "negative warmup")
case("check-run {fx}/run.log --from {fx}/megatron.sh --cluster local-cpu-2 --warmup 5", ["--warmup", "5"],
     "a warmup skipping every logged line")
case("check-run {fx}/run.log --cluster local-cpu-2", ["--from"], "check-run without --from")
case("check-run {fx}/run.log --from {fx}/megatron.sh --cluster no-such", ["--cluster", "no-such"], "unknown cluster")
case("check-run --from {fx}/megatron.sh --cluster local-cpu-2", ["log"], "no log")

# ---------------------------------------------------------------- experiment
def experiment_spec(metric="iteration_time", engine="eval", model="tiny"):
    """An experiment spec (reproduce/spec.h) of one point and one series, with one field to spoil."""
    return {"paper": "hanayo", "figure": "f", "title": "t", "metric": metric, "engine": engine,
            "base": {"model": model, "cluster": "local-cpu-2", "plan": {"num_microbatches": 4}},
            "x": {"label": "x", "points": [{"x": "1", "set": {}}]}, "series": [{"name": "s", "set": {}}]}


PAPER_CSV = "figure,series,x,quantity,value,source,note\n"
fixture("exp/bad-json/spec.json", "{ not json")
fixture("exp/bad-json/paper.csv", PAPER_CSV)
fixture("exp/bad-metric/spec.json", experiment_spec(metric="happiness"))
fixture("exp/bad-metric/paper.csv", PAPER_CSV)
fixture("exp/no-paper/spec.json", experiment_spec())
fixture("exp/bad-engine/spec.json", experiment_spec(engine="abacus"))
fixture("exp/bad-engine/paper.csv", PAPER_CSV)
fixture("exp/bad-model/spec.json", experiment_spec(model="no-such-model"))
fixture("exp/bad-model/paper.csv", PAPER_CSV)
for name, names, what in [("bad-json", ["spec.json"], "a spec that is not JSON"),
                          ("bad-metric", ["metric", "happiness"], "an unknown metric"),
                          ("no-paper", ["paper.csv"], "no paper.csv"),
                          ("bad-engine", ["engine", "abacus"], "an unknown engine"),
                          ("bad-model", ["no-such-model"], "an unknown model")]:
    case(f"experiment run {{fx}}/exp/{name} --report r.md --out-dir o", names, f"experiment: {what}")
case(f"experiment run {MISSING}", ["no-such-file.json"], "a missing folder")
case("experiment run {fx}/dir", ["dir"], "a folder without experiments")
case("experiment run", ["paths"], "no folder")
case("experiment", ["subcommand"], "no subcommand")
case("experiment fly", ["subcommand|fly"], "unknown subcommand")
case(f"experiment run {{fx}}/exp/bad-metric --report {os_dir}", ["--report"], "--report a directory")

# ---------------------------------------------------------------- validate
VALIDATE = "validate --out v.csv --no-sim --quiet --work-dir w"
SWEEP_BAD = [
    (mutated(SWEEP, "format", "stagecraft-sweep-2"), ["format"], "wrong format"),
    (mutated(SWEEP, "configs", []), ["configs"], "no configurations"),
    (mutated(SWEEP, "configs", "all"), ["configs"], "configs a string"),
    (mutated(SWEEP, "steps", "ten"), ["steps", "ten"], "steps a string"),
    (mutated(SWEEP, "steps", 1), ["steps", "1"], "steps not above warmup"),
    (mutated(SWEEP, "steps", 1e12), ["steps"], "steps beyond an int"),
    (mutated(SWEEP, "warmup", -1), ["warmup", "-1"], "negative warmup"),
    (mutated(SWEEP, "threads", 0), ["threads", "0"], "zero threads"),
    (mutated(SWEEP, "threads", "many"), ["threads", "many"], "threads a string"),
    (mutated(SWEEP, "rounds", 0), ["rounds", "0"], "zero rounds"),
    (mutated(SWEEP, "rounds", 2.5), ["rounds", "2.5"], "fractional rounds"),
    (mutated(SWEEP, "cluster", "no-such-cluster"), ["cluster", "no-such-cluster"], "unknown cluster"),
    (mutated(SWEEP, "cluster", 7), ["cluster", "7"], "cluster a number"),
    (mutated(SWEEP, "stepz", 3), ["stepz"], "unknown field (typo)"),
    (mutated(SWEEP, "configs", [mutated(SWEEP["configs"][0], "model", "no-such-model")]), ["no-such-model"], "unknown model"),
    (mutated(SWEEP, "configs", [mutated(SWEEP["configs"][0], "pp", 0)]), ["pp", "0"], "pp 0"),
    (mutated(SWEEP, "configs", [mutated(SWEEP["configs"][0], "schedule", "nope")]), ["nope"], "unknown schedule"),
    (mutated(SWEEP, "configs", [mutated(SWEEP["configs"][0], "precision", "fp4")]), ["precision", "fp4"], "unknown precision"),
    (mutated(SWEEP, "configs", [mutated(SWEEP["configs"][0], "name", 5)]), ["name", "5"], "name a number"),
    (mutated(SWEEP, "configs", [mutated(SWEEP["configs"][0], "dp", 8)]), ["dp"], "more ranks than the cluster"),
    (mutated(SWEEP, "configs", ["tiny"]), ["configs[0]"], "a configuration that is a string"),
    (mutated(SWEEP, "configs", [mutated(SWEEP["configs"][0], "model", {"num_layers": 2})]), ["hidden_size"],
     "an inline model without its fields"),
    ([SWEEP], ["sweep"], "an array"),
]
for i, (doc, names, what) in enumerate(SWEEP_BAD):
    path = fixture(f"sweep-{i}.json", doc)
    case(f"{VALIDATE} --sweep {path}", names, f"validate sweep: {what}")
case(f"{VALIDATE} --sweep {MISSING}", ["--sweep"], "a missing sweep")
case(f"{VALIDATE} --sweep {os_dir}", ["--sweep"], "a sweep that is a directory")
case(f"{VALIDATE} --sweep {{fx}}/garbage.bin", ["--sweep"], "a sweep of garbage")
case("validate --sweep {fx}/sweep.json --quiet", ["--out"], "validate without --out")
fixture("sweep.json", SWEEP)
case("validate --out v.csv --quiet", ["--sweep"], "validate without --sweep")
case("validate --sweep {fx}/sweep.json --out {fx}/dir --quiet", ["--out"], "--out a directory")
case(f"validate --sweep {{fx}}/sweep.json --out {FILE_AS_DIR} --quiet", ["--out"], "--out under a file")
case("validate --sweep {fx}/sweep.json --out v.csv --summary {fx}/dir --quiet", ["--summary"], "--summary a directory")
case("validate --sweep {fx}/sweep.json --out v.csv --work-dir {fx}/text.txt --quiet", ["--work-dir"], "--work-dir a file")
case(f"validate --sweep {{fx}}/sweep.json --out v.csv --profile {MISSING} --quiet", ["--profile"], "a missing profile")
case("validate --sweep {fx}/sweep.json --out v.csv --profile {fx}/profile-0.json --quiet", ["format"], "a bad profile")

# ---------------------------------------------------------------- train (refused before launching ranks)
for flag, value, what in [
        ("--nproc", "0", "zero ranks"), ("--nproc", "3", "ranks not the plan's world"), ("--nproc", "-1", "negative"),
        ("--nproc", "100000", "absurd"), ("--steps", "0", "zero steps"), ("--steps", "nan", "NaN"),
        ("--lr", "-1", "negative learning rate"), ("--lr", "nan", "NaN"), ("--lr", "inf", "infinity"),
        ("--adamw", "sgd", "unknown update"), ("--backend", "carrier-pigeon", "unknown backend"),
        ("--backend", "nccl", "nccl without GPUs"), ("--precision", "fp4", "unknown precision"),
        ("--precision", "", "empty precision"), ("--bf16-weights", "maybe", "unknown kind"),
        ("--timeout", "0", "zero timeout"), ("--timeout", "-5", "negative timeout"),
        ("--log-every", "-1", "negative"), ("--threads", "0", "zero threads"), ("--seed", "x", "not a number"),
        ("--tp", "3", "tp not dividing the heads"), ("--schedule", "nope", "unknown schedule"),
        ("--recompute", "maybe", "unknown recompute"), ("--zero", "9", "unknown ZeRO"),
("--model", "no-such-model", "unknown model"),
("--stack", "no-such-stack", "unknown stack"),
        ("--example-shape", "2,8", "example shapes without a .pt"), ("--attention-kernel", "quantum", "unknown kernel"),
        ("--model", "gpt3-175b", "a model far beyond this machine's memory, refused before the ranks start")]:
    names = [flag] if value == "" or flag == "--example-shape" else [flag, value]
    if flag == "--model" and value == "gpt3-175b":
        names = ["gpt3-175b", "needs at least", "GiB", "a rank has"]
    if flag == "--tp" and value == "3":
        names = ["tp"]
    case(f"{TRN} {flag} {shlex.quote(value)} --json out.json --trace t.json", names, f"train {flag} {value!r}: {what}")
case(f"{TRN} --fp8", ["--fp8"], "train with FP8 (the runtime has none)")
case("train --model gpt3-175b --steps 1 --json out.json", ["gpt3-175b", "needs at least", "a rank has"],
     "one process with a model far beyond this machine's memory")
case(f"{TRN} --tf32", ["--tf32"], "TF32 on the CPU")
case(f"{TRN} --cuda-graph-scope attn", ["cuda_graph_scope"], "train with CUDA graphs (the runtime captures none)")
case(f"{TRN} --bf16-weights cast", ["--bf16-weights", "--precision"], "--bf16-weights without bf16")
case(f"{TRN} --json {os_dir}", ["--json"], "train --json a directory")
case(f"{TRN} --json {FILE_AS_DIR}", ["--json"], "train --json under a file")
case(f"{TRN} --trace {os_dir}", ["--trace"], "train --trace a directory")
case(f"{TRN} --trace ''", ["--trace"], "train --trace empty")
case(f"{TRN} --save {{fx}}/text.txt", ["--save"], "train --save a file")
case(f"{TRN} --save {FILE_AS_DIR}", ["--save"], "train --save under a file")
case(f"{TRN} --resume {MISSING}", ["--resume"], "a missing checkpoint")
case(f"{TRN} --resume {{fx}}/text.txt", ["--resume"], "a checkpoint that is a file")
case(f"{TRN} --resume {{fx}}/dir", ["--resume"], "an empty checkpoint folder")
case(f"{TRN} --model {{fx}}/text.pt --example-shape 2,8 --example-shape 2,8", ["text.pt"], "a .pt that is not a module")
case(f"{TRN} --model {{fx}}/text.pt", ["--example-shape"], "a module without example shapes")
case(f"{TRN} --model {{fx}}/text.pt --example-shape 2,x --example-shape 2,8", ["--example-shape", "x"], "a shape not numbers")

# ---------------------------------------------------------------- profile
for flag, value, what in [
        ("--hidden", "0", "zero hidden"), ("--hidden", "nan", "NaN"), ("--heads", "3", "heads not dividing hidden"),
        ("--heads", "-4", "negative heads"), ("--seq", "0", "zero sequence"), ("--microbatch-size", "0", "zero"),
        ("--tp", "3", "tp not dividing the heads"), ("--tp", "0", "zero tp"), ("--model-kind", "rnn", "unknown kind"),
        ("--precision", "fp4", "unknown precision"), ("--attention-kernel", "quantum", "unknown kernel"),
        ("--kv-heads", "3", "kv heads not dividing heads"), ("--vocab", "0", "zero vocab"), ("--warmup", "-1", "negative"),
        ("--runs", "0", "zero runs"), ("--threads", "0", "zero threads"), ("--device", "tpu", "unknown device"),
        ("--device", "cuda:x", "a GPU index that is no number"), ("--nproc", "-1", "negative ranks"),
("--max-bytes", "0", "zero bytes"),
        ("--max-bytes", "1e15", "absurd bytes"), ("--gpu", "no-such-gpu", "unknown GPU")]:
    names = [flag[2:]] if (flag, value) in (("--heads", "3"), ("--tp", "3")) else [flag, value]  # the grid's check
    case(f"{PRF} {flag} {value} --out out.json", names, f"profile {flag} {value!r}: {what}")
case(f"{PRF.replace(' --quiet', '')}", ["--out"], "profile without --out")
case(f"{PRF} --out {os_dir}", ["--out"], "profile --out a directory")
case(f"{PRF} --out {FILE_AS_DIR}", ["--out"], "profile --out under a file")
case(f"{PRF} --out out.json --summary {os_dir}", ["--summary"], "profile --summary a directory")
case("profile --gemm-calibration g.json --device cpu --gpu h100-sxm --quiet", ["--device"], "a GEMM calibration on the CPU")
case("profile --gemm-calibration g.json --device cuda --quiet", ["--gpu|--device"], "a GEMM calibration without CUDA")
case("profile --gemm-calibration {fx}/dir --device cuda --gpu h100-sxm --quiet", ["--gemm-calibration"],
     "a calibration into a directory")

# ---------------------------------------------------------------- the program
case("", ["subcommand"], "no subcommand")
case("fly", ["subcommand"], "an unknown subcommand")
case(f"{EST} --tp", ["--tp"], "a flag without its value")
case(f"{EST} --tpp 2", ["--tpp"], "a misspelt flag")
case(f"{EST} --tp 1 --tp 2", ["--tp"], "a flag given twice", keep=True)
case(f"{EST} extra", ["extra"], "an unexpected argument")


# ---------------------------------------------------------------- running

def snapshot(folder):
    seen = set()
    for d, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = os.path.join(d, name)
            seen.add((os.path.relpath(p, folder), os.path.getsize(p) if os.path.isfile(p) else -1))
    return seen


def names_it(name, line):
    """The line names `name`: one of its '|' alternatives; a flag --foo-bar also as its field
    foo_bar (a plan file's field or the flag's own words)."""
    line = line.lower()
    for alt in name.lower().split("|"):
        forms = [alt] + ([alt[2:], alt[2:].replace("-", "_")] if alt.startswith("--") else [])
        if any(f in line for f in forms):
            return True
    return False


def run_case(i, c, program, fx, work):
    """One case: (kind of failure or None, a line saying what happened)."""
    folder = os.path.join(work, f"case{i:03d}")
    os.makedirs(folder)
    if c.setup:
        c.setup(folder)
    before = snapshot(folder)
    argv = [program] + [a.replace("{fx}", fx) for a in shlex.split(c.args)]
    start = time.monotonic()
    try:
        p = subprocess.run(argv, cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=TIMEOUT_S, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        return "hang", f"hang (over {TIMEOUT_S} s)"
    took = time.monotonic() - start
    err = p.stderr.decode("utf-8", "replace")
    lines = [l for l in err.splitlines() if l.strip()]
    last = lines[-1] if lines else ""
    after = snapshot(folder)
    if p.returncode < 0:
        return "crash", f"crash: signal {signal.Signals(-p.returncode).name}; {last[:200]}"
    if p.returncode not in (0, 1, 2) or "terminate called" in err or "std::" in last:
        return "crash", f"crash: exit {p.returncode}; {last[:200]}"
    if after != before:
        new = sorted(n for n, _ in after - before)
        return "half-written", f"half-written: exit {p.returncode}, left {new[:4]}; {last[:150]}"
    if p.returncode == 0:
        return "accepted", "accepted: exit 0"
    prefix = "stagecraft: error: " if p.returncode == 2 else "stagecraft: failed: "
    names = [n.replace("{fx}", fx) for n in c.names]
    missing = [n for n in names if not names_it(n, last)]
    if p.returncode != c.code or not last.startswith(prefix) or missing:
        why = f"exit {p.returncode} (expected {c.code})" if p.returncode != c.code else (
            "not one error line" if not last.startswith(prefix) else f"does not name {missing}")
        return "unclear", f"unclear: {why}; stderr's last line: {last[:300]}"
    return None, f"ok ({took:.1f} s): {last[:160]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--program", default=os.environ.get("STAGECRAFT", os.path.join(ROOT, "build/bin/stagecraft")))
    ap.add_argument("--jobs", type=int, default=max(2, os.cpu_count() or 2))
    ap.add_argument("--list", action="store_true", help="print the cases, run nothing")
    ap.add_argument("--verbose", action="store_true", help="print every case, passing or not")
    ap.add_argument("--only", default="", help="run the cases whose command line contains this")
    a = ap.parse_args()
    cases = [(i, c) for i, c in enumerate(CASES) if a.only in c.args]
    if a.list:
        for i, c in cases:
            print(f"{i:3d}  exit {c.code}  {c.what}: stagecraft {c.args}")
        return 0
    program = os.path.abspath(a.program)
    if not os.access(program, os.X_OK):
        print(f"bad-input: no program at {program} (build it, or give --program)", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="stagecraft-bad-input-")
    try:
        fx = os.path.join(work, "fx")
        for name, text in FIXTURES.items():
            path = os.path.join(fx, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text)
        os.makedirs(os.path.join(fx, "dir"))
        fixtures = snapshot(fx)
        counts = {k: 0 for k in ("crash", "hang", "accepted", "unclear", "half-written")}
        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
            results = list(pool.map(lambda ic: run_case(ic[0], ic[1], program, fx, work), cases))
        for (i, c), (kind, line) in zip(cases, results):
            if kind:
                counts[kind] += 1
            if kind or a.verbose:
                print(f"case {i} ({c.what}): stagecraft {c.args}\n    {line}")
        if snapshot(fx) != fixtures:
            counts["half-written"] += 1
            print("the fixtures' folder changed: " + str(sorted(n for n, _ in snapshot(fx) ^ fixtures)[:6]))
        print(f"bad-input: {len(cases)} cases, crashes {counts['crash']}, hangs {counts['hang']}, "
              f"accepted {counts['accepted']}, unclear {counts['unclear']}, half-written {counts['half-written']} "
              f"({time.monotonic() - start:.0f} s)")
        return 1 if any(counts.values()) else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
