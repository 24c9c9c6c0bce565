#!/usr/bin/env python3
"""Predictions against published large-scale training runs (docs/validation.md).

Reads experiments/validation/published.json (collected from the papers, each entry citing its
table), keeps the runs whose configuration is fully published on hardware with a cluster file
here, runs `stagecraft estimate --json` for each, and prints a Markdown table with the MAPE of
the iteration time and the Spearman rank correlation of the per-GPU throughput. Nothing here
is fitted to the published figures.

Usage: experiments/validation/compare-published.py [path/to/stagecraft] [--runs FILE] [--constant-efficiency]
       [--as-2023] [--brackets] [extra estimate flags...]
--runs FILE reads another set of the same format (published-h100.json: the H100 runs of 2024-2025;
published-h100-cp-fp8.json: Llama 3.1 with context parallelism 2, BF16 and FP8; published-h100-moe.json:
mixture-of-experts runs, where a run's "skip" names what stagecraft cannot express and leaves it out;
published-fsdp.json: fully sharded data parallel runs of torchtitan).
--constant-efficiency turns compute by shape off (gpu_sms = 0: every FLOP at achieved_efficiency,
0.5), the model before it, for comparison. --as-2023 leaves out what the runs' recipes say beyond
what the A100-era model expressed (stack, fused attention, no dropout, the overlapped gather), to
show what each mechanism moves.

Each run's knobs become estimate flags: the stack (Megatron-Core with Transformer Engine: with
FlashAttention-2 where the recipe runs TE's flash backend, megatron-core-te-flash2, with cuDNN's
fused attention where it allows that backend, megatron-core-te), a fused attention core, --no-dropout where its dropout is 0, sequence parallelism, the distributed optimizer
(--zero 1) with its overlapped gradient reduction and parameter gather, and the gradient bucket
size the recipe states (else Megatron-Core's default of 40M parameters), and Transformer Engine's
tensor-parallel overlap (--tp-overlap te) where the recipe turns it on, context parallelism (--cp)
and FP8 (--fp8) where the run uses them. For mixture-of-experts runs the model's expert fields
(num_experts, experts_per_token, expert_ffn_hidden_size, num_shared_experts, dense_layers,
moe_node_limit, moe_capacity_factor, moe_load_imbalance) and attention shapes (head_dim, v_head_dim,
q_lora_rank, kv_lora_rank, qk_rope_head_dim) go into the model file as given, and the run's expert-
parallel degree "ep" becomes --ep; these runs also get a table of tokens/s per GPU.
Fully sharded runs ("zero": 3) get --zero 3 instead of the distributed optimizer's --zero 1,
--no-reshard-after-forward where "reshard_after_forward" is false and --shard-group where a
"shard_group" smaller than dp is given (HSDP); "attention": "sdpa-flash" (PyTorch's
scaled_dot_product_attention) runs on the pytorch-eager stack; a model's "bytes_per_grad" (FSDP's
reduce dtype) goes into the model file. --brackets also prices the skipped runs that carry a
"bracket" (the recompute policies bounding one stagecraft cannot express) at each bound, in a
table of its own, outside the MAPE.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PRESETS = os.path.join("..", "..", "presets", "clusters")
CLUSTERS = {"A100-SXM4-80GB": "dgx-a100-80gb.json",  # the GPU as published -> cluster file here
            "H100-SXM5-80GB": os.path.join(PRESETS, "h100-ib-1024.json"),
            "H100-HBM2e-96GB-500W": "grand-teton-h100-96gb.json",  # torchtitan's Grand Teton hosts
            "B200-SXM-180GB": os.path.join(PRESETS, "b200-ib-1024.json"),
            "GB200-NVL72-186GB": os.path.join(PRESETS, "gb200-nvl72-1152.json"),
            "GB300-NVL72-288GB": os.path.join(PRESETS, "gb300-nvl72-1152.json")}
NVL72 = ("GB200-NVL72-186GB", "GB300-NVL72-288GB")
# The precisions a run can state and the flags that price them ("fp8": per-tensor scaling).
PRECISIONS = {"bf16": [], "fp8": ["--fp8"]}
# The attention backend a recipe runs -> the kernel set it names (presets/stacks): TE's
# flash backend (NVTE_FUSED_ATTN=0) is FlashAttention-2, its fused backend cuDNN's attention.
STACKS = {"flash": "megatron-core-te-flash2", "cudnn-fused": "megatron-core-te", "sdpa-flash": "pytorch-eager"}
RUN_CLUSTERS = {"bloom-176b-384gpu": "jean-zay-a100-80gb.json"}  # runs on another machine than Selene
# Model fields passed through as given where a run states them (costmodel/specs.h, ModelSpec): the
# experts and the attention shapes other than h / a heads (Qwen3's head_dim, DeepSeek's MLA).
MOE_FIELDS = ("num_experts", "experts_per_token", "expert_ffn_hidden_size", "num_shared_experts", "dense_layers",
              "moe_node_limit", "moe_capacity_factor", "moe_load_imbalance", "moe_layer_pattern", "sliding_window",
              "sliding_window_pattern", "activation_clamp")
DEFAULTS = {}
SHOW_COMMANDS = False  # --show-commands DIR: print each row's estimate command to stderr, its files in DIR
STRICT = True  # the older sets: a refused row stops the run; the newer sets (with a split) list it
SPLIT = None  # --split dev|holdout: only the rows of that split (published-moe.json, published-blackwell.json)
SHAPE_FIELDS = ("head_dim", "v_head_dim", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim")
PRECISION_FIELDS = ("bytes_per_grad", "bytes_per_master", "bytes_per_moment")  # gradients' dtype (torchtitan reduces in fp32: 4); the optimizer's states
KERNEL_FIELDS = ("rope_mscale", "linear_bias")  # YaRN's unfused RoPE, the experts' biases (gpt-oss)


def usable(run):
    if run.get("skip"):  # a configuration stagecraft cannot express (the reason is in the file)
        return False
    if SPLIT and run.get("split") != SPLIT:
        return False
    if precision_flags(run) is None:  # a precision not priced yet (mxfp8, nvfp4)
        return False
    need = ["tp", "pp", "dp", "microbatch_size", "global_batch", "recompute"]
    if run["gpu"] not in CLUSTERS or any(run.get(k) is None for k in need):
        return False
    m = run["measured"]
    return m.get("iteration_time_s") is not None or m.get("tflops_per_gpu") is not None


def load_cluster(path):
    """A cluster file with the preset it "extends" resolved (the program's rule, presets/load.cpp)."""
    with open(path) as f:
        cluster = json.load(f)
    base = cluster.pop("extends", None)
    if base:
        merged = load_cluster(os.path.join(HERE, PRESETS, base + ".json"))
        merged.update(cluster)
        cluster = merged
    return cluster


def estimate(binary, run, extra, tmp):
    run = dict(run)
    for k in ("attention", "dropout", "distributed_optimizer", "fp8_param_gather"):
        if run.get(k) is None and k in DEFAULTS:
            run[k] = DEFAULTS[k]
    cluster = load_cluster(os.path.join(HERE, RUN_CLUSTERS.get(run["id"], CLUSTERS[run["gpu"]])))
    if run["gpu"] in NVL72:
        # How many of a rack's 72 GPUs the job uses: Megatron-Bridge's Slurm launcher places jobs of
        # 4-GPU trays in segments of all its trays up to 18, else the largest divisor of the tray
        # count up to 18 (scripts/performance/utils/executors.py at 6e16ebfa): 256 GPUs as 4 racks of 64.
        trays = run["gpus"] // 4
        segment = trays if trays <= 18 else max(d for d in range(1, 19) if trays % d == 0)
        cluster["gpus_used_per_node"] = 4 * segment
        cluster["nodes"] = trays // segment
    else:
        cluster["nodes"] = run["gpus"] // cluster["gpus_per_node"]
    if CONSTANT_EFFICIENCY:
        cluster["gpu_sms"] = 0
        cluster.pop("gpu_boost_clock_mhz", None)  # the clocks belong to compute by shape
        cluster.pop("gpu_sustained_clock_mhz", None)
    cluster["name"] = f"{cluster['name']}-{run['gpus']}"
    md = run["model"]
    model = {"name": run["id"], "kind": md.get("kind") if md.get("kind") in ("gpt", "llama") else "gpt",
             "num_layers": md["num_layers"], "hidden_size": md["hidden_size"],
             "num_heads": md["num_heads"], "ffn_hidden_size": md.get("ffn_hidden_size") or 4 * md["hidden_size"],
             "seq_length": md["seq_length"], "vocab_size": md["vocab_size"], "bytes_per_param": 2,
             "bytes_per_activation": 2, "source": run["source"] + ", " + run["where"]}
    if md.get("num_kv_heads"):
        model["num_kv_heads"] = md["num_kv_heads"]
    for k in MOE_FIELDS + SHAPE_FIELDS + PRECISION_FIELDS + KERNEL_FIELDS:
        if md.get(k) is not None:
            model[k] = md[k]
    model_features(md, model)
    split = run.get("pipeline_split") or {}
    if split.get("mtp_layers") is not None:  # the recipe's mtp_num_layers (the file's conventions)
        model["mtp_layers"] = split["mtp_layers"]
    paths = {}
    for name, obj in (("cluster", cluster), ("model", model)):
        paths[name] = os.path.join(tmp, f"{run['id']}-{name}.json")
        with open(paths[name], "w") as f:
            json.dump(obj, f)
    mb = run["global_batch"] // (run["dp"] * run["microbatch_size"])
    vs = run.get("virtual_stages") or 1
    cmd = [binary, "estimate", "--json", "--model", paths["model"], "--cluster", paths["cluster"],
           "--tp", str(run["tp"]), "--pp", str(run["pp"]), "--dp", str(run["dp"]),
           "--microbatch-size", str(run["microbatch_size"]), "--microbatches", str(mb)]
    cmd += recompute_flags(run) + moe_flags(run) + cuda_graph_flags(run)
    knobs = (run.get("recipe") or {}).get("knobs") or {}
    if knobs.get("cpu_offloading_num_layers"):  # Megatron-Core --cpu-offloading-num-layers
        cmd += ["--offload-layers", str(knobs["cpu_offloading_num_layers"])]
    cmd += ["--schedule", "interleaved-1f1b", "--chunks", str(vs)] if vs > 1 else ["--schedule", "1f1b"]
    cmd += pipeline_split_flags(run, knobs)
    if knobs.get("moe_a2a_overlap") or knobs.get("overlap_moe_expert_parallel_comm"):
        # Megatron-Core's combined 1F1B: each steady-state forward paired with a backward, the
        # expert all-to-alls of one behind the other's compute (schedules/registry.h a2a_overlap)
        cmd += ["--param", "a2a_overlap=true"]
    experts = (run.get("model") or {}).get("num_experts") or 0
    if run["tp"] > 1 and (run.get("sequence_parallel") or (run.get("sequence_parallel") is None and experts > 0)):
        # Megatron-Core requires sequence parallelism for experts under tensor parallelism (arguments.py)
        cmd.append("--sequence-parallel")
    if run.get("zero") == 3:  # FSDP: parameters sharded too, gathered per unit
        cmd += ["--zero", "3"]
        if run.get("reshard_after_forward") is False:
            cmd.append("--no-reshard-after-forward")
        if run.get("shard_group") and run["shard_group"] != run["dp"]:
            cmd += ["--shard-group", str(run["shard_group"])]
    elif run.get("distributed_optimizer"):
        cmd += ["--zero", "1"]
    if not AS_2023:
        if run.get("attention") in STACKS:
            stack = STACKS[run["attention"]]
            fields = ((run.get("recipe") or {}).get("workload_config") or {}).get("fields") or {}
            if fields.get("cutedsl_fused_grouped_mlp") and stack == "megatron-core-te":
                stack = "megatron-core-te-fused-mlp"  # Transformer Engine's fused grouped MLP (its stack's source)
            cmd += ["--attention-kernel", "fused", "--stack", stack]
        if run.get("dropout") is False:
            cmd.append("--no-dropout")
        if run.get("zero") != 3 and run.get("distributed_optimizer") and run.get("overlap_param_gather"):
            cmd.append("--overlap-param-gather")
        if run.get("tp_comm_overlap") and run.get("sequence_parallel") and run["tp"] > 1:
            cmd += ["--tp-overlap", "te"] + ([] if "--stack" in cmd else ["--stack", "megatron-core-te"])
    if (run.get("cp") or 1) > 1:
        cmd += ["--cp", str(run["cp"])]
    if (run.get("ep") or 1) > 1:
        cmd += ["--ep", str(run["ep"])]
        etp = run.get("expert_tensor_parallel")
        if etp is None and run["ep"] > 1 and (run["dp"] * (run.get("cp") or 1)) % run["ep"] != 0:
            etp = 1  # the sizes allow only whole experts: ep x etp must divide tp x dp x cp (Megatron-Core)
        if etp == 1 and run["tp"] > 1:  # whole experts (--etp 1)
            cmd += ["--etp", "1"]
    cmd += precision_flags(run)
    # FP8 compute weights only, gathered in FP8 (Megatron-Core --fp8-param-gather), where the set says
    # its recipes keep them so (its defaults' fp8_param_gather) and the optimizer is distributed.
    if run.get("fp8_param_gather") and "--fp8-recipe" in cmd and run.get("zero") != 3 and run.get("distributed_optimizer"):
        if cmd[cmd.index("--fp8-recipe") + 1] != "blockwise":  # the sub-channel presets leave it off
            cmd.append("--fp8-param-gather")
    if run.get("overlap_grad_reduce"):
        cmd.append("--overlap-grad-reduce")
        # Megatron-Core's bucket: max(40M, 1M x dp) parameters of 16-bit gradients (distributed_data_parallel.py)
        mb = run.get("grad_bucket_mb") or max(40e6, 1e6 * run["dp"] * (run.get("cp") or 1)) * 2 / 2**20
        cmd += ["--grad-bucket-mb", f"{mb:.1f}"]
    if SHOW_COMMANDS:  # each row's command, to reproduce or inspect it alone
        print(f"{run['id']}: {' '.join(cmd + extra)}", file=sys.stderr)
    out = subprocess.run(cmd + extra, capture_output=True, text=True)
    if out.returncode != 0:
        if out.returncode == 2 and not STRICT:  # the program refuses the configuration: listed, not priced
            return {"refused": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "exit 2"}
        raise SystemExit(f"{run['id']}: {' '.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout)


def model_features(md, model):
    """The newer sets' model fields: gpt-oss's alternating windows (layer_types), DeepSeek-V3's
    multi-token prediction module (mtp), Llama 4's interleaved experts."""
    if md.get("sliding_window") and "alternating" in str(md.get("layer_types", "")):
        model["sliding_window_pattern"] = [1, 0]  # layer 0 windowed, as gpt-oss's layer_types
    if md.get("mtp"):
        model["mtp_layers"] = md["mtp"] if isinstance(md["mtp"], int) and not isinstance(md["mtp"], bool) else 1
    if md.get("moe_load_imbalance") is None:
        model.pop("moe_load_imbalance", None)


def precision_flags(run):
    """The flags of a run's precision: "mxfp8" and "fp8" with a stated fp8_recipe that recipe,
    "fp8" alone (the older sets) --fp8 (delayed scaling), a named precision from PRECISIONS, any
    other (the older sets' prose about 16-bit mixed precision) none; None where the precision is
    one the program does not price (nvfp4)."""
    p = run.get("precision") or "bf16"
    if p == "mxfp8":
        return ["--fp8-recipe", "mxfp8"]
    if p == "fp8" and run.get("fp8_recipe"):  # the recipe where a row states it (the older sets do not)
        stated = run["fp8_recipe"].lower()
        for recipe in ("current", "delayed", "blockwise"):
            if stated.startswith(recipe):
                return ["--fp8-recipe", recipe]
    if p in PRECISIONS:
        return PRECISIONS[p]
    return None if p == "nvfp4" else []


def recompute_flags(run):
    """recompute: none | full | selective | modules (Megatron-Core's --recompute-modules)."""
    r = run.get("recompute") or "none"
    if r == "modules":
        mods = run.get("recompute_modules") or []
        return ["--recompute", "selective"] + (["--recompute-modules", ",".join(mods)] if mods else [])
    return ["--recompute", r]


def moe_flags(run):
    """The token dispatcher a run states (flex: DeepEP or HybridEP; none stated: alltoall,
    Megatron-Core's default)."""
    moe = run.get("moe") or {}
    if moe.get("token_dispatcher") == "flex" or moe.get("flex_backend"):
        return ["--moe-dispatcher", "flex"]
    if moe.get("token_dispatcher") == "allgather":
        return ["--moe-dispatcher", "allgather"]
    return []


GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess")  # what stagecraft prices (costmodel/host.h)


def pipeline_split_flags(run, knobs):
    """The recipe's split of the layers over the stages: its layout string (Megatron-Core
    --pipeline-model-parallel-layout: recipe.knobs.pp_layout, else pipeline_split.layout) or the
    embedding and loss counted as layers (pipeline_split); none: stagecraft's even split."""
    split = run.get("pipeline_split") or {}
    if knobs.get("pp_layout") or split.get("layout"):
        return ["--pipeline-layout", knobs.get("pp_layout") or split["layout"]]
    return ((["--account-for-embedding-in-pipeline-split"] if split.get("account_for_embedding") else []) +
            (["--account-for-loss-in-pipeline-split"] if split.get("account_for_loss") else []))


def cuda_graph_flags(run):
    """The CUDA graphs a run's recipe captures (Megatron-Core --cuda-graph-impl/--cuda-graph-scope;
    Megatron-Bridge's cuda_graph_impl "full_iteration" or "local" with scope full_iteration: the
    whole iteration; "transformer_engine": the listed per-layer scopes, Mamba's left out; NeMo 2.0's
    enable_cuda_graph: each whole layer). None stated: eager, every kernel issued from Python."""
    cg = run.get("cuda_graph") or {}
    knobs = (run.get("recipe") or {}).get("knobs") or {}
    impl = cg.get("impl") or knobs.get("cuda_graph_impl")
    scope = cg.get("scope") if cg else knobs.get("cuda_graph_scope")
    scope = scope or []
    nemo = knobs.get("cuda_graphs")
    if isinstance(nemo, str):  # "enable_cuda_graph = gpu in ['b200'] (...)": on for the GPUs it names
        nemo = run.get("gpu", "").split("-")[0].lower() in nemo.lower()
    if nemo:
        return ["--cuda-graph-scope", "attn,mlp,moe"]
    if impl == "full_iteration" or (impl == "local" and "full_iteration" in scope):
        return ["--cuda-graph-scope", "full_iteration"]
    if impl == "transformer_engine":
        kept = [x for x in scope if x in GRAPH_SCOPES]
        if "moe_preprocess" in kept and "moe_router" not in kept:
            kept.remove("moe_preprocess")
        return ["--cuda-graph-scope", ",".join(kept)] if kept else []
    return []


def by_group(rows, row_runs, errs):
    """MAPE, the signed mean error of the time and the worst row per GPU and per model, and the fit
    verdicts: what issue 48 asks the validation to show."""
    if not row_runs:
        return
    worst = max(range(len(rows)), key=lambda i: errs[i])
    print(f"  worst: {rows[worst][0]} ({100 * rows[worst][6]:+.1f}%)")
    fits = {}
    for r in rows:
        verdict = r[11] if isinstance(r[11], str) else ("fits" if r[11] else "does not fit")
        fits[verdict] = fits.get(verdict, 0) + 1
    print("  fit verdicts: " + ", ".join(f"{v} {n}" for v, n in sorted(fits.items())))
    for label, key in (("GPU", lambda run: run["gpu"]), ("model", lambda run: run["model"]["name"])):
        groups = {}
        for i, run in enumerate(row_runs):
            groups.setdefault(key(run), []).append(i)
        for g, idx in sorted(groups.items()):
            mape = 100 * sum(errs[i] for i in idx) / len(idx)
            signed = 100 * sum(rows[i][6] for i in idx) / len(idx)
            print(f"  {label} {g}: {len(idx)} runs, MAPE {mape:.1f}%, mean signed time error {signed:+.1f}%")


def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):  # average ranks over ties
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb)


CONSTANT_EFFICIENCY = False
AS_2023 = False


def brackets(binary, runs_file, extra):
    """Skipped runs whose only inexpressible knob is the recompute policy, priced at the two
    policies that bound it (less and more recomputation): is the published time between them?"""
    with open(runs_file) as f:
        runs = [r for r in json.load(f)["runs"] if r.get("skip") and r.get("bracket")]
    print()
    print("| run (skipped) | GPUs | published s | bound | predicted s | bound | predicted s | published within |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            lo_policy, hi_policy = run["bracket"]["recompute"]
            t = []
            for policy in (lo_policy, hi_policy):
                r = dict(run, recompute=policy)
                r.pop("skip")
                if not usable(r):
                    raise SystemExit(f"{run['id']}: bracket run not complete")
                t.append(estimate(binary, r, extra, tmp)["iteration_time_s"])
            t_pub = run["measured"]["iteration_time_s"]
            lo, hi = min(t), max(t)
            where = "yes" if lo <= t_pub <= hi else (f"no, {100 * (t_pub / hi - 1):+.1f}% beyond" if t_pub > hi
                                                        else f"no, {100 * (t_pub / lo - 1):+.1f}% below")
            print(f"| {run['id']} | {run['gpus']} | {t_pub:.2f} | {lo_policy} | {t[0]:.2f} | {hi_policy} | {t[1]:.2f} | {where} |")


def main():
    global CONSTANT_EFFICIENCY, AS_2023, SPLIT, DEFAULTS, STRICT, SHOW_COMMANDS
    args = sys.argv[1:]
    if "-h" in args or "--help" in args:
        print(__doc__)
        return
    binary = args.pop(0) if args and not args[0].startswith("--") else os.path.join(HERE, "..", "..", "build", "bin", "stagecraft")
    runs_file = os.path.join(HERE, "published.json")
    if "--split" in args:
        i = args.index("--split")
        SPLIT = args[i + 1]
        STRICT = False
        del args[i:i + 2]
    if "--runs" in args:
        i = args.index("--runs")
        runs_file = args[i + 1]
        del args[i:i + 2]
    extra = args
    if "--constant-efficiency" in extra:
        extra.remove("--constant-efficiency")
        CONSTANT_EFFICIENCY = True
    if "--as-2023" in extra:
        extra.remove("--as-2023")
        AS_2023 = True
    keep = None
    if "--show-commands" in extra:
        i = extra.index("--show-commands")
        keep = extra[i + 1]
        del extra[i:i + 2]
        os.makedirs(keep, exist_ok=True)
        SHOW_COMMANDS = True
    with_brackets = "--brackets" in extra
    if with_brackets:
        extra.remove("--brackets")
    with open(runs_file) as f:
        DEFAULTS = json.load(f).get("defaults", {})  # a set's stated defaults for fields its rows leave null
    with open(runs_file) as f:
        runs = [r for r in json.load(f)["runs"] if usable(r)]
    if AS_2023:  # what the A100-era model could not express at all
        runs = [r for r in runs if (r.get("cp") or 1) == 1 and r.get("precision", "bf16") != "fp8"]
    rows, errs, pub_tput, pred_tput, moe_rows, refused, row_runs = [], [], [], [], [], [], []
    with tempfile.TemporaryDirectory() as scratch:
        tmp = keep or scratch
        for run in runs:
            e = estimate(binary, run, extra, tmp)
            if "refused" in e:
                refused.append((run["id"], e["refused"]))
                continue
            hw = e["hardware_flops_per_iteration"]
            m = run["measured"]
            # Published iteration time, or the one the paper's TFLOP/s implies: Megatron SC21's
            # eq. (3) counts recomputation exactly as our hardware FLOPs do (flops.h).
            t_pub = m.get("iteration_time_s") or hw / (m["tflops_per_gpu"] * 1e12 * run["gpus"])
            t_pred = e["iteration_time_s"]
            err = t_pred / t_pub - 1
            errs.append(abs(err))
            pub_tput.append(hw / t_pub / run["gpus"] / 1e12)
            pred_tput.append(hw / t_pred / run["gpus"] / 1e12)
            row_runs.append(run)
            rows.append((run["id"], run["gpus"], f"{run['tp']}/{run['pp']}/{run['dp']}", run["recompute"],
                         t_pub, t_pred, err, pub_tput[-1], pred_tput[-1], e["mfu"], e["hfu"], e.get("fit", e["fits"])))
            if run["model"].get("num_experts"):  # tokens per second per GPU, as the MoE sources publish them
                tokens = run["global_batch"] * run["model"]["seq_length"] / run["gpus"]
                moe_rows.append((run["id"], run.get("ep") or 1, m.get("tokens_per_s_per_gpu") or tokens / t_pub,
                                 tokens / t_pred))
    print("| run | GPUs | tp/pp/dp | recompute | published s | predicted s | error | published TFLOP/s | "
          "predicted TFLOP/s | predicted MFU | predicted HFU | fits |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.2f} | {r[5]:.2f} | {100 * r[6]:+.1f}% | {r[7]:.0f} | "
              f"{r[8]:.0f} | {100 * r[9]:.1f}% | {100 * r[10]:.1f}% | {r[11] if isinstance(r[11], str) else ('yes' if r[11] else 'no')} |")
    if moe_rows:
        print()
        print("| run | ep | published tokens/s/GPU | predicted tokens/s/GPU | predicted / published |")
        print("|---|---|---|---|---|")
        for r in moe_rows:
            print(f"| {r[0]} | {r[1]} | {r[2]:.0f} | {r[3]:.0f} | {r[3] / r[2]:.2f} |")
    print()
    if not rows:
        print("runs: 0 (none of the set's runs is in this split or usable)")
        return
    signed = sum(pred_tput[i] / pub_tput[i] - 1 for i in range(len(rows))) / len(rows)
    print(f"runs: {len(rows)}; MAPE of the iteration time: {100 * sum(errs) / len(errs):.1f}%; "
          f"signed bias of TFLOP/s per GPU: {100 * signed:+.1f}%; "
          f"Spearman of TFLOP/s per GPU (hardware FLOPs): {spearman(pub_tput, pred_tput):.2f}")
    # Per source family (the id's prefix before the model), rank correlation within it.
    fams = {}
    for i, r in enumerate(rows):
        fams.setdefault(r[0].split("-")[0], []).append(i)
    for fam, idx in sorted(fams.items()):
        if len(idx) >= 3:
            rho = spearman([pub_tput[i] for i in idx], [pred_tput[i] for i in idx])
            mape = 100 * sum(errs[i] for i in idx) / len(idx)
            print(f"  source {fam}: {len(idx)} runs, MAPE {mape:.1f}%, Spearman {rho:.2f}")
    by_group(rows, row_runs, errs)
    for rid, why in refused:
        print(f"  refused by the program: {rid}: {why}")
    if with_brackets:
        brackets(binary, runs_file, extra)


if __name__ == "__main__":
    main()
