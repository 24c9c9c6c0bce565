// What a command asks for, as plain data, before anything is loaded: the model, cluster and plan
// of one configuration (estimate, compare, simulate, check-run, train) and the space of a plan
// search (plan). The CLI binds its flags to these fields (cli/common.cpp, cli/cmd_plan.cpp);
// a test or another program fills them itself. Resolution (workbench/resolve.h,
// workbench/search.h) loads what they name and throws InputError naming the flag a field stands
// for, its value and what is allowed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stagecraft::workbench {

// Schedule parameters: named ones and generic KEY=VALUE pairs (--waves, --segments, --alpha1,
// --param).
struct ScheduleParams {
  std::optional<int> waves;        // hanayo: waves W
  std::string segments;            // fold3d-aiao: segment count, or "auto"
  std::string alpha1;              // merak: non-recomputed share of the first stage, or "auto"
  std::vector<std::string> extra;  // --param KEY=VALUE (VALUE read as JSON when it parses)
};

// What the model flags change in the model (--attention-kernel, --no-dropout, --fp8,
// --fp8-recipe, --seq-length): every command that takes a model preset applies them through
// apply_model_request (workbench/model.h).
struct ModelRequest {
  std::string attention_kernel;    // overrides the model's: materialized | fused ("" keeps it)
  bool no_dropout = false;         // the model trains without dropout (overrides its dropout)
  bool fp8 = false;                // the layers' linear products in FP8 (sets the model's fp8)
  std::string fp8_recipe;          // delayed | current | blockwise | mxfp8: FP8 with that recipe ("" keeps it)
  std::optional<int> seq_length;   // tokens per sample (overrides the model's seq_length)
  bool any() const { return !attention_kernel.empty() || no_dropout || fp8 || !fp8_recipe.empty() || seq_length.has_value(); }
};

// One configuration: the flags of `estimate`, `compare`, `simulate`, `check-run` and `train`.
struct PlanRequest {
  std::string from;               // --from: a framework's config (configs/import.h); the fields below override it
  std::string from_format;        // --from-format: megatron | bridge | torchtitan | deepspeed | hf (default: guessed)
  std::string hf_config;          // --hf-config: a Hugging Face config.json, the model of a --from file that has none
  std::string model;              // --model: preset name or JSON file (default with --from: the file's model)
  ModelRequest model_request;     // --attention-kernel, --no-dropout, --fp8, --fp8-recipe, --seq-length
  std::string stack;              // --stack: kernel set (presets/stacks; default: the plan's, else megatron-lm)
  bool overlap_param_gather = false;  // --overlap-param-gather: the distributed optimizer's gather behind the next forward
  bool fp8_param_gather = false;      // --fp8-param-gather: FP8 compute weights only, gathered in FP8
  std::string cluster;            // --cluster: preset name or JSON file
  std::string plan_file;          // --plan: optional JSON plan; fields given override its fields
  std::optional<int> dp, tp, pp;  // --dp, --tp, --pp; dp defaults to GPUs / (tp * pp * cp)
  std::optional<int> cp;          // --cp: context-parallel degree (default: the plan's, else 1)
  std::optional<int> ep;          // --ep: expert-parallel degree (default: the plan's, else 1)
  std::optional<int> etp;         // --etp: experts' tensor-parallel degree (0: tp; 1: whole experts)
  std::optional<std::string> moe_dispatcher;  // --moe-dispatcher: alltoall, allgather or flex
  std::vector<std::string> recompute_modules;  // --recompute-modules: selective recomputation's modules
  std::vector<std::string> cuda_graph_scope;   // --cuda-graph-scope: what runs as CUDA graphs
  std::optional<int> offload_layers;           // --offload-layers: layers a stage offloads to host memory
  std::optional<int> microbatch_size;          // --microbatch-size: samples per microbatch (default 1)
  std::optional<int> microbatches;             // --microbatches: per iteration (default 4 * pp)
  std::string schedule;           // --schedule: empty: the plan file's, else 1f1b
  std::optional<int> chunks;      // --chunks: stages per rank, for schedules that take it
  std::string recompute;          // --recompute: none | full | selective (default: the plan's, else none)
  std::string rank_order;         // --rank-order: e.g. tp-dp-pp
  std::string stage_layers;       // --stage-layers: comma-separated layers per stage
  std::string pipeline_layout;    // --pipeline-layout: Megatron-Core's layout string
  bool account_for_embedding = false;  // --account-for-embedding-in-pipeline-split
  bool account_for_loss = false;       // --account-for-loss-in-pipeline-split
  bool sequence_parallel = false; // --sequence-parallel: Megatron sequence parallelism
  std::string tp_overlap;         // --tp-overlap: blocking | merak | cross-pass | oases | te (default: the plan's, else blocking)
  std::optional<int> zero;        // --zero: distributed optimizer stage 0 | 1 | 2 | 3 (default: the plan's, else 0)
  std::optional<int> shard_group; // --shard-group: zero 3's dp ranks a parameter is sharded over (HSDP); 0 = all dp
  bool no_reshard_after_forward = false;  // --no-reshard-after-forward: zero 3 keeps each layer gathered
  bool overlap_grad_reduce = false;       // --overlap-grad-reduce: bucketed gradient reduction during the backward
  std::string grad_reduce_at;             // --grad-reduce-at: auto | rank-end | stage-end (default: the plan's, else auto)
  bool preemptive_comm = false;           // --preemptive-comm: pipeline transfers preempt gradient reductions
  std::optional<double> grad_bucket_mb;   // --grad-bucket-mb: bucket size in MiB (default: the plan's, else 25)
  ScheduleParams params;          // --waves, --segments, --alpha1, --param
  std::string profile;            // --profile: measured costs (stagecraft profile) instead of the analytic model
  std::optional<int> gpus_used_per_node;  // --gpus-used-per-node: GPUs a job uses of each node (64 of an NVL72's 72)
  std::string gpu_calibration;    // --gpu-calibration: measured GEMM efficiency in place of the catalog's
                                  // efficiency and clock (costmodel/gpus.h)
  std::optional<double> memory_margin;  // --memory-margin: overrides the cluster's memory_margin
  std::optional<int> nodes;             // --nodes: overrides the cluster's node count
};

// A plan search: the flags of `plan` (docs/planner.md) but those that only choose how its
// answer is printed (--json, --wide, --emit, --quiet).
struct SearchRequest {
  std::string from;                   // --from: a framework's config: model, nodes, global batch (docs/import.md)
  std::string from_format;            // --from-format: its format (default: guessed)
  std::string hf_config;              // --hf-config: the model of a --from file without one
  std::string model;                  // --model: preset name, model JSON or graph JSON
  std::string cluster;                // --cluster: preset name or JSON file
  std::string gpus;                   // --gpus: GPUs the plans use, whole nodes; several: one search each; empty = the whole cluster
  double tokens = 0;                  // --tokens: tokens to train, for the time to train and GPU-hours
  long global_batch = 0;              // --global-batch: sequences per iteration (0: the --from file's)
  std::string schedules = "1f1b,interleaved-1f1b:2,interleaved-1f1b:4,zb-h1";  // --schedules: NAME or NAME:CHUNKS
  std::string microbatch_sizes = "1,2,4,8";  // --microbatch-sizes: b values tried
  std::string recompute = "none,selective,full";  // --recompute: policies tried
  std::string zero = "0,1,3";         // --zero: ZeRO stages tried where dp > 1
  std::string shard_groups = "0";     // --shard-groups: zero 3's shard groups tried (0: the whole dp group)
  bool no_reshard_after_forward = false;  // --no-reshard-after-forward: zero 3 keeps layers gathered
  std::string sequence_parallel = "off,on";  // --sequence-parallel: tried where tp > 1
  std::string tp_overlaps = "blocking";  // --tp-overlaps: tensor-parallel overlap modes tried where tp > 1
  bool no_overlap = false;            // --no-overlap-grad-reduce: reduce gradients after the backward
  bool no_overlap_param_gather = false;  // --no-overlap-param-gather: gather parameters after the step
  std::string stack;                  // --stack: kernel set (default megatron-lm)
  std::vector<std::string> cuda_graph_scope;  // --cuda-graph-scope: every plan's CUDA graphs
  ModelRequest model_request;         // --attention-kernel, --no-dropout, --fp8, --fp8-recipe, --seq-length
  int max_tp = 0;                     // --max-tp: largest tp tried; 0 = one node's GPUs
  std::string tp;                     // --tp: tp values tried; empty = every divisor up to max_tp
  std::string pp;                     // --pp: pp values tried; empty = every divisor
  std::string cp = "1";               // --cp: context-parallel degrees tried
  std::string ep;                     // --ep: expert-parallel degrees tried; empty = the planner's (expert_degrees)
  std::string etp = "0";              // --etp: experts' tensor-parallel degrees tried (0: tp, 1: whole experts)
  std::string precisions = "bf16";    // --precisions: bf16, fp8, fp8-RECIPE
  std::string rank_orders = "tp-dp-pp";  // --rank-orders: rank orders tried
  int top = 10;                       // --top: plans kept, fastest first
  int threads = 0;                    // --threads: threads the search runs on; 0: every core
  std::string out;                    // --out: the plan file the best plan goes to (empty: none)
  std::string verify;                 // --verify: "sim" re-runs the top plans on the simulator
  std::string whatif;                 // --whatif: what-if file, the top plans ranked again under it (docs/whatif.md)
  bool layer_tp = false;              // --layer-tp: Oases' per-layer tp degrees (ILP) for the top plans with pp = 1
  bool for_runtime = false;           // --for-runtime: only plans `stagecraft train` runs
  std::optional<double> grad_bucket_mb;  // --grad-bucket-mb: every plan's gradient bucket size in MiB (default 25)
  std::string grad_reduce_at;         // --grad-reduce-at: every plan's reduction start without overlap (default auto)
  bool preemptive_comm = false;       // --preemptive-comm: every plan's pipeline transfers preempt its reductions
  std::string profile;                // --profile: measured costs instead of the analytic ones
  std::optional<double> memory_margin;  // --memory-margin: overrides the cluster's memory_margin
  std::optional<int> nodes;           // --nodes: overrides the cluster's node count
  std::optional<int> gpus_used_per_node;  // --gpus-used-per-node: GPUs a job uses of each node
};

// One configuration on the SimGrid simulator (`simulate`, docs/sim.md), with its what-ifs
// (docs/whatif.md) given as a file, as flags, or both (the flags' entries after the file's).
struct SimulateRequest {
  PlanRequest plan;                      // the configuration
  std::string platform;                  // --platform: SimGrid XML platform file; empty = built from the cluster
  std::string tp_comm = "explicit";      // --tp-comm: explicit | folded
  int iterations = 3;                    // --iterations: simulated; the last one reported
  bool iterations_given = false;         // --iterations was given (a what-if reads it as its samples)
  bool no_symmetry = false;              // --no-symmetry: simulate every data-parallel replica (sim/symmetry.h)
  bool record = false;                   // keep the spans for a trace (--trace)
  std::string whatif;                    // --whatif: JSON what-if file
  std::vector<std::string> slow_rank;    // --slow-rank RANK:FACTOR
  std::vector<std::string> slow_node;    // --slow-node NODE:FACTOR
  std::string slow_fraction;             // --slow-fraction FRACTION:FACTOR
  std::vector<std::string> degraded_nic; // --degraded-nic NODE:FACTOR or NODE:NIC:FACTOR
  std::vector<std::string> late_rank;    // --late-rank RANK:SECONDS
  std::string jitter;                    // --jitter DIST:CV
  std::uint64_t seed = 1;                // --seed: --slow-fraction's choice and --jitter's draws
};

}  // namespace stagecraft::workbench
