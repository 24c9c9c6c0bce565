// The three inputs of every estimate: the model, the cluster and the parallel plan. Each has
// JSON in and out (units in every field name) and a check that names the bad field, its value
// and what is allowed. Presets live as JSON files under presets/.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "schedules/lower.h"
#include "schedules/tp_overlap.h"

namespace stagecraft::costmodel {

enum class ModelKind {
  Gpt,    // decoder, GELU MLP (two matrices)
  Bert,   // encoder, GELU MLP; same per-layer arithmetic as Gpt
  Llama,  // decoder, gated SwiGLU MLP (three matrices), no biases
};

// How the attention core (scores, softmax, weighted values) runs; it decides what the core keeps
// for its backward (costmodel/memory.h).
enum class AttentionKernel {
  Materialized,  // scores and softmax as tensors (eager PyTorch, Megatron-LM without flash): the
                 // backward keeps the softmax output, its dropout mask and the dropout's output,
                 // 5as^2b bytes per layer (Korthikanti et al., MLSys 2023, Sec. 4.1)
  Fused,         // one kernel that never writes the s x s scores (FlashAttention, Dao et al.,
                 // NeurIPS 2022; PyTorch 2's scaled_dot_product_attention): the backward keeps the
                 // output and each row's softmax log-sum-exp (fp32) and recomputes the rest
};

// How FP8 (ModelSpec::fp8) scales its tensors (docs/costmodel.md "FP8 recipes"); each has its own
// cast traffic, and MXFP8 its own peak.
enum class Fp8Recipe {
  Delayed,    // one scale per tensor from the amax history of earlier steps (Transformer Engine's
              // DelayedScaling): the cast, transpose and amax in one pass
  Current,    // one scale per tensor from this tensor's amax (TE Float8CurrentScaling, torchao
              // tensorwise): an amax pass over the 16-bit tensor, then the cast
  Blockwise,  // a scale per 1x128 block of activations and gradients and per 128x128 block of
              // weights (DeepSeek-V3, arXiv 2412.19437, Sec. 3.3; TE Float8BlockScaling), fp32 scales
  Mxfp8,      // a power-of-two (E8M0) scale per 32 elements along the product's inner dimension
              // (OCP Microscaling Formats v1.0; TE MXFP8BlockScaling): Blackwell's block-scaled peak
};

struct ModelSpec {
  std::string name;               // preset name or "custom"
  ModelKind kind = ModelKind::Gpt;
  int num_layers = 0;             // transformer layers l
  int hidden_size = 0;            // h
  int num_heads = 0;              // a, query heads
  int num_kv_heads = 0;           // g, key/value heads (grouped-query attention, Ainslie et al.,
                                  // EMNLP 2023); 0 means g = a (multi-head attention)
  int ffn_hidden_size = 0;        // f (4h for GPT and BERT)
  int seq_length = 0;             // s, tokens per sample
  int vocab_size = 0;             // V
  int bytes_per_param = 2;        // bytes of one weight (2 for 16-bit training)
  int bytes_per_activation = 2;   // bytes of one activation element
  int bytes_per_grad = 0;         // bytes of one gradient as kept and reduced; 0: bytes_per_param.
                                  // 4 for bf16 as Megatron-LM trains it ("bfloat16 requires
                                  // gradient accumulation and all-reduce to be done in fp32",
                                  // megatron/training/arguments.py), 2 for fp16 with loss scaling
  int bytes_per_master = -1;      // the optimizer's copy of each weight: -1 the default, 4 (fp32) where
                                  // the weights are narrower, else none; 4; 2 (the 16 low bits beside
                                  // bf16 weights: Apex's and Transformer Engine's store_param_remainders,
                                  // NeMo's distributed Adam with an fp32 state and bf16 weights; or a
                                  // 16-bit master, Megatron-Core --main-params-dtype fp16); 0 (no
                                  // copy: NeMo's distributed Adam with its state in the weights' dtype)
  int bytes_per_moment = 4;       // each of Adam's two moments: 4 (fp32), 2 (bf16: Megatron-Core
                                  // --exp-avg-dtype/--exp-avg-sq-dtype bf16, DeepSeek-V3's recipe; Apex
                                  // dtype bf16), 1 (fp8)
  AttentionKernel attention_kernel = AttentionKernel::Materialized;  // what the core keeps
  bool dropout = true;            // hidden and attention dropout with p > 0: the layers keep their
                                  // masks (Korthikanti et al.); false: p = 0 or none (PyTorch's
                                  // dropout returns its input at p = 0), no mask is kept
  bool fp8 = false;               // the transformer layers' linear products in FP8 as Transformer
                                  // Engine runs them (docs/costmodel.md "FP8"): products at the FP8
                                  // rate, their inputs cast (and transposed) to FP8 and kept so,
                                  // FP8 copies of the weights; the attention core, the norms and
                                  // the head stay 16-bit. Needs 2-byte activations and a GPU with FP8
  Fp8Recipe fp8_recipe = Fp8Recipe::Delayed;  // with fp8: how tensors are scaled (Fp8Recipe)
  // Attention shapes other than h / a per head (Qwen3's 128-wide heads on h = 2048) and
  // multi-head latent attention (MLA; DeepSeek-V2, arXiv 2405.04434, Sec. 2.1.2-2.1.3): queries
  // through a low-rank latent, keys and values up-projected from a compressed latent shared by
  // the heads, a rotary part of the query and key heads apart (the key's shared by all heads).
  int head_dim = 0;               // d, query/key dims per head (without MLA's rotary part); 0: h / a
  int v_head_dim = 0;             // value dims per head; 0: d
  int q_lora_rank = 0;            // MLA: width of the queries' latent (down h -> q_lora, up q_lora ->
                                  // a(d + d_rope)); 0: queries projected from h directly
  int kv_lora_rank = 0;           // MLA: width of the keys' and values' latent (down h -> kv_lora + d_rope,
                                  // up kv_lora -> a(d + d_v)); 0: no MLA
  int qk_rope_head_dim = 0;       // MLA: the rotary dims d_rope of each query and key head
  int mtp_layers = 0;             // multi-token prediction modules (DeepSeek-V3, arXiv 2412.19437 Sec.
                                  // 2.2; Megatron-Core --mtp-num-layers), each a transformer layer (of
                                  // the last layer's kind), a (2h -> h) projection, two norms and the
                                  // shared head's logits and loss again, on the last pipeline stage
  int sliding_window = 0;         // > 0: windowed layers attend each query to at most this many keys
                                  // (itself and the ones before it; Mistral, gpt-oss); 0: none
  std::vector<int> sliding_window_pattern;  // layer i is windowed where pattern[i % P] is 1 (P its
                                  // length); empty: every layer (gpt-oss: [1, 0], alternate layers)
  double activation_clamp = 0;    // > 0: the gated MLP's two halves clamped to this before the
                                  // activation (gpt-oss: 7.0, its config's swiglu_limit); Megatron-Core
                                  // clamps them eagerly outside its fused activation
                                  // (MemoryTraffic::glu_clamp); 0: none
  double rope_mscale = 1;         // YaRN's concentration factor on RoPE's cos and sin (Megatron-Core
                                  // yarn_rotary_pos_embedding.py: 0.1 ln(factor) + 1 without an
                                  // mscale; gpt-oss 1.3466); != 1 runs RoPE unfused on the queries
                                  // and keys (rope_utils.py, MemoryTraffic::rope_unfused); 1: fused
  bool linear_bias = false;       // biases on the linear layers (Megatron-Core add_bias_linear; gpt-oss):
                                  // the routed experts' second bias is applied outside their products
                                  // (moe/experts.py TEGroupedMLP._apply_bias, MemoryTraffic::expert_bias)
  // Mixture of experts (docs/costmodel.md "Mixture of experts"; Shazeer et al., ICLR 2017; GShard,
  // Lepikhin et al., ICLR 2021; DeepSeekMoE, Dai et al., arXiv 2401.06066): the MLP of each MoE
  // layer is a router and E experts of which each token takes k, plus shared experts that every
  // token takes. FLOPs count the experts a token passes (active parameters), memory every expert.
  int num_experts = 0;            // E, routed experts of an MoE layer; 0: a dense model
  int experts_per_token = 0;      // k, routed experts each token is sent to (top-k)
  int expert_ffn_hidden_size = 0; // f_e, FFN width of one expert (routed or shared)
  int num_shared_experts = 0;     // experts of width f_e every token passes (DeepSeekMoE); 0: none
  int dense_layers = 0;           // the first layers keep a dense MLP of ffn_hidden_size (DeepSeek-V3: 3)
  std::vector<int> moe_layer_pattern;  // after the dense_layers, layer i is MoE where pattern[(i -
                                  // dense_layers) % P] is 1, dense where 0 (P its length; empty: every
                                  // layer MoE). Megatron-Core's --moe-layer-freq: N is [1, 0 x (N-1)],
                                  // a list its pattern; Llama 4 Maverick [0, 1] (interleave step 2)
  int moe_node_limit = 0;         // > 0: each token's experts sit on at most this many nodes and its
                                  // copy crosses the network once per node, then NVLink (DeepSeek-V3
                                  // Sec. 2.1.2 and 3.2.2: 4); 0: every (token, expert) copy travels
  double moe_capacity_factor = 0; // > 0: an expert takes at most this times its mean share of tokens
                                  // (the rest dropped; GShard), and the busiest rank that many; 0: dropless
  double moe_load_imbalance = 1;  // dropless: the busiest expert-parallel rank's tokens over the mean
                                  // (>= 1; 1 perfectly balanced), what its all-to-all and experts wait for
  std::string source;             // where the figures come from
};

struct ClusterSpec {
  std::string name;
  int nodes = 0;
  int gpus_per_node = 0;
  int gpus_used_per_node = 0;           // > 0: a job uses this many of each node's GPUs (an NVL72 rack's
                                        // 64 of 72, say); gpus_per_node and nics_per_node then hold
                                        // what the job uses, node_gpus and node_nics what is installed
  int node_gpus = 0;                    // GPUs installed per node when gpus_used_per_node > 0, else 0
  int node_nics = 0;                    // NICs installed per node when gpus_used_per_node > 0, else 0
  std::string gpu;                      // the catalog GPU it names (presets/gpus/); "" when
                                        // the cluster states every GPU field itself
  std::string gpu_name;
  double gpu_peak_flops_per_s = 0;      // dense 16-bit tensor peak of one GPU
  double gpu_memory_bytes = 0;          // memory of one GPU
  double gpu_memory_bandwidth_Bps = 0;  // HBM/GDDR bandwidth of one GPU (optimizer step)
  double achieved_efficiency = 0;       // fraction of peak that layer GEMMs reach, (0, 1]; used for
                                        // every FLOP unless the compute-by-shape fields are given
  // Compute by shape (shape.h); gpu_sms = 0 leaves it off.
  int gpu_sms = 0;                      // streaming multiprocessors: tiles computed at once
  int gemm_tile_m = 128;                // rows of the output tile one SM computes
  int gemm_tile_n = 256;                // columns of that tile
  double gemm_max_efficiency = 0;       // fraction of peak the largest 16-bit GEMMs measure, (0, 1]
  double memory_efficiency = 0;         // fraction of memory bandwidth streaming kernels reach, (0, 1]
  double gpu_fp8_peak_flops_per_s = 0;  // dense FP8 tensor peak of one GPU; 0: the GPU has no FP8
  double gemm_max_efficiency_fp8 = 0;   // fraction of that peak the largest FP8 products measure, (0, 1]
  double gpu_mxfp8_peak_flops_per_s = 0; // dense peak of FP8 products scaled per 32-element block in
                                        // hardware (MXFP8, Blackwell); 0: the GPU has no MXFP8
  double gpu_fp4_peak_flops_per_s = 0;  // dense FP4 peak (listed, not priced)
  double gpu_compute_capability = 0;    // CUDA compute capability (8.0 A100, 9.0 Hopper, 10.0 B200 and
                                        // GB200, 10.3 GB300); 0: not a CUDA GPU, or not stated
  // The SM clocks behind the compute-bound figures (shape.h, "Clocks"); 0 for both: kernels run
  // at the clock they were measured at.
  double gpu_boost_clock_mhz = 0;       // clock of the short benchmarks behind gemm_max_efficiency and
                                        // the stack's attention tables: the GPU's maximum boost
  double gpu_sustained_clock_mhz = 0;   // clock the SMs hold in training: at the board's power limit
                                        // with the tensor cores busy, <= gpu_boost_clock_mhz
  std::string clock_calibration;        // the named calibration behind the two clocks and its source,
                                        // printed by every estimate ("" when the clocks are not given)
  std::vector<std::pair<std::string, std::string>> gpu_assumed;  // (field, why) for the catalog
                                        // figures this cluster uses that are assumed, not measured
  std::string compute_source;           // where these figures come from
  std::string intra_node_link;          // "pcie", "nvlink" or "nvswitch"
  double intra_node_bandwidth_Bps = 0;  // per GPU, per direction
  double intra_node_latency_s = 0;
  int fast_group_size = 0;              // > 1: GPUs come in groups joined by a faster link
  std::string fast_group_link;          // e.g. "nvlink-bridge"
  double fast_group_bandwidth_Bps = 0;  // per GPU, per direction, inside a fast group
  double fast_group_latency_s = 0;
  std::string inter_node_link;          // names the network, e.g. "infiniband-hdr"
  double inter_node_bandwidth_Bps = 0;  // per NIC, per direction
  double inter_node_latency_s = 0;
  int nics_per_node = 1;
  int cores_per_node = 0;               // CPU clusters: the cores a node's ranks share, each rank's
                                        // compute on one core at a time and ranks beyond the cores
                                        // sharing them (priced by the simulator; sim/platform.h);
                                        // 0: every rank computes on a device of its own
  std::string inter_node_topology = "star";  // "star" or "fat-tree"
  double host_link_bandwidth_Bps = 0;   // GPU <-> host memory, per GPU, per direction (offload)
  // Bus-bandwidth efficiency per link kind: the fraction of a link's nominal bandwidth that
  // NCCL's collectives and transfers reach on it (nccl-tests bus bandwidth over the nominal
  // figure), in (0, 1]; 1 takes the nominal figure as achieved.
  double intra_node_bus_efficiency = 1;  // of intra_node_bandwidth_Bps
  double fast_group_bus_efficiency = 1;  // of fast_group_bandwidth_Bps
  double inter_node_bus_efficiency = 1;  // of inter_node_bandwidth_Bps (one NIC)
  std::string bus_efficiency_source;     // where these fractions come from
  // Fraction of gpu_memory_bytes a plan leaves free for what the model does not count: the
  // caching allocator's fragmentation (memory reserved but not allocated) and workspaces
  // (CUDA context, cuBLAS, NCCL buffers). A plan fits when every rank's peak is at most
  // usable_memory_bytes(). Default 0.15: GMLake (Guo et al., arXiv 2401.08156, 2024) removes on
  // average 15% (up to 33%) fragmentation from PyTorch's caching allocator over eight LLM
  // trainings on 80 GB A100s, so PyTorch loses at least that much; ZeRO (Rajbhandari et al.,
  // SC20, Sec. 3.2) saw out-of-memory "with over 30% of memory still available in some extreme
  // cases". In [0, 1).
  double memory_margin = 0.15;
  std::string source;

  // Bytes of one GPU a plan may use: gpu_memory_bytes less the margin.
  double usable_memory_bytes() const { return (1 - memory_margin) * gpu_memory_bytes; }

  int num_gpus() const { return nodes * gpus_per_node; }
  // Whether the GPU's FP8 products read their operands in any layout, so that per-tensor FP8
  // (delayed or current scaling) keeps no transposed FP8 copy of a weight or an input: compute
  // capability 10.x or 13 and later, as Transformer Engine decides it
  // (transformer_engine/pytorch/utils.py is_non_tn_fp8_gemm_supported; Hopper's FP8 products
  // take only the TN layout, so the weight gradient and the input gradient read transposes).
  bool fp8_gemm_any_layout() const {
    return (gpu_compute_capability >= 10 && gpu_compute_capability < 12) || gpu_compute_capability >= 13;
  }
  // Share of the measured compute rate a training step gets: sustained over boost clock (1 when
  // the clocks are not given). Memory-bound kernels keep their rate (the power limit lowers the
  // SM clock, not the memory clock).
  // Whether a node's ranks outnumber the cores they compute on (cores_per_node).
  bool ranks_share_cores() const { return cores_per_node > 0 && cores_per_node < gpus_per_node; }
  double sustained_clock_share() const {
    return gpu_boost_clock_mhz > 0 ? gpu_sustained_clock_mhz / gpu_boost_clock_mhz : 1;
  }
  // What a transfer or a collective gets from each link kind: nominal times efficiency. Every
  // engine (costmodel/topology.cpp, sim/platform.cpp) reads links through these.
  double intra_node_achieved_Bps() const { return intra_node_bandwidth_Bps * intra_node_bus_efficiency; }
  double fast_group_achieved_Bps() const { return fast_group_bandwidth_Bps * fast_group_bus_efficiency; }
  double inter_node_achieved_Bps() const { return inter_node_bandwidth_Bps * inter_node_bus_efficiency; }
};

// The modules selective recomputation discards after the forward and recomputes inside the
// backward (Megatron-Core's --recompute-modules, transformer_config.py; Megatron-LM 2b343d7):
// `core_attn` the attention core (Korthikanti et al., MLSys 2023); `layernorm` the norms' outputs
// (the QKV's and the MLP's inputs); `mla_up_proj` MLA's up projections' outputs (the queries,
// keys and values); `mlp` a dense layer's MLP block, its input kept; `moe_act` the experts'
// activation output, recomputed from the kept first product's output; `shared_experts` the shared
// experts' block; `moe` the whole MoE block, its dispatch and combine included.
struct RecomputeModules {
  bool core_attn = false;
  bool layernorm = false;
  bool mla_up_proj = false;
  bool mlp = false;
  bool moe_act = false;
  bool shared_experts = false;
  bool moe = false;
  bool any_beyond_core() const { return layernorm || mla_up_proj || mlp || moe_act || shared_experts || moe; }
};

// The parts of each layer captured in CUDA graphs and replayed with one launch each (Megatron-Core
// --cuda-graph-impl transformer_engine with --cuda-graph-scope attn, mlp, moe, moe_router,
// moe_preprocess; --cuda-graph-impl local with full_iteration: the whole forward and backward
// as one graph; Megatron-LM docs/user-guide/features/cuda_graph.md). What is captured costs the
// host one launch instead of one per kernel (costmodel/host.h).
struct CudaGraphScopes {
  bool attn = false;            // the attention block (norm, QKV, core, projection)
  bool mlp = false;             // a dense layer's MLP block
  bool moe = false;             // an MoE layer's whole MLP block (Megatron-Core: drop-and-pad only)
  bool moe_router = false;      // the router: gating product, top-k, auxiliary loss
  bool moe_preprocess = false;  // the dispatch's preprocessing: token counts, splits, permutation 1
  bool full_iteration = false;  // every layer's forward and backward: no per-op host work at all
};

enum class RecomputePolicy {
  None,       // keep every activation
  Full,       // keep each layer's input, recompute the layer before its backward
  Selective,  // recompute only the attention core (Korthikanti et al., MLSys 2023)
};

struct ParallelPlan {
  int dp = 1;                        // data-parallel degree
  int tp = 1;                        // tensor-parallel degree
  int pp = 1;                        // pipeline ranks
  int ep = 1;                        // expert-parallel degree: each MoE layer's experts split over ep
                                     // ranks of the dp x cp group (Megatron-Core's expert parallelism,
                                     // ep fastest: tp-cp-ep-dp-pp), tokens sent to them by all-to-all;
                                     // expert gradients reduced over dp x cp / ep (costmodel/moe.h)
  int etp = 0;                       // expert tensor-parallel degree: 0 the attention's tp (Megatron-Core's
                                     // default: every expert split t ways, its tokens gathered over tp), or
                                     // 1 (each expert whole on one rank; the ep ranks then come from the
                                     // tp x dp x cp ranks, tp fastest; Megatron-Core --expert-tensor-parallel-size 1)
  int offload_layers = 0;            // activations of this many of each stage's layers go to host memory in
                                     // the forward and come back before the backward, beside the compute
                                     // (Megatron-Core --cpu-offloading-num-layers; costmodel/plan_workload.h)
  std::string moe_dispatcher = "alltoall";  // how MoE layers move tokens (Megatron-Core
                                     // --moe-token-dispatcher-type; costmodel/moe.h): alltoall (token,
                                     // probability and count exchanges), allgather (every token of the
                                     // ep group gathered, reduce-scattered back), flex (DeepEP: a token
                                     // sent once per rank holding any of its experts)
  int cp = 1;                        // context-parallel degree: each sample's sequence split over cp
                                     // ranks, attention as a ring of key/value chunks (costmodel/cp.h)
  int microbatch_size = 1;           // b, samples per microbatch
  int num_microbatches = 1;          // m, microbatches per iteration (per data-parallel rank)
  std::string schedule = "1f1b";     // registered schedule name
  nlohmann::json schedule_params = nlohmann::json::object();  // e.g. {"chunks": 2}
  RecomputePolicy recompute = RecomputePolicy::None;
  std::vector<std::string> recompute_modules;  // selective: what is recomputed (Megatron-Core's
                                     // --recompute-modules; recompute_modules_of): core_attn, layernorm,
                                     // mla_up_proj, mlp, moe_act, shared_experts, moe; empty: core_attn
  std::vector<std::string> cuda_graph_scope;  // what runs as CUDA graphs (Megatron-Core
                                     // --cuda-graph-scope; cuda_graph_scopes_of): attn, mlp, moe,
                                     // moe_router, moe_preprocess, or full_iteration alone; empty: none
  std::string rank_order = "tp-dp-pp";  // fastest-varying first; any permutation of tp, dp, pp, or of
                                     // tp, cp, dp, pp (without cp: cp right after tp, topology.h)
  std::vector<int> stage_layers;     // layers per stage of one pipeline chain; empty = balanced
  std::string pipeline_layout;       // Megatron-Core's layout string (pipeline_split.h), e.g.
                                     // Et*3|(tt|)*29m|L; empty: none
  bool account_for_embedding = false;  // Megatron-Core: the embedding counts as a layer in the split
  bool account_for_loss = false;       // Megatron-Core: the loss counts as a layer in the split
  bool sequence_parallel = false;    // Megatron sequence parallelism: the activations outside the
                                     // tensor-parallel blocks split t ways too (Korthikanti et al.)
  schedules::TpOverlap tp_overlap = schedules::TpOverlap::Blocking;  // how tp collectives overlap
                                     // compute inside a stage action (schedules/tp_overlap.h)
  std::vector<schedules::TpOverlap> stage_tp_overlap;  // per stage of one pipeline chain (a
                                     // planner's choice); empty = tp_overlap everywhere
  bool overlap_grad_reduce = false;  // reduce gradients in buckets while the backward runs (PyTorch
                                     // DDP; Megatron-LM --overlap-grad-reduce); false: one reduction
                                     // per stage, where grad_reduce_at says
  schedules::GradReduceAt grad_reduce_at = schedules::GradReduceAt::Auto;  // without overlap_grad_reduce:
                                     // rank-end (Megatron-LM), stage-end (eager, per stage) or auto
                                     // (the schedule's system: eager for chimera, hanayo, looped-bfs)
  double grad_bucket_bytes = 25.0 * 1024 * 1024;  // bucket size when overlapping (DDP's bucket_cap_mb = 25)
  bool preemptive_comm = false;      // pipeline transfers preempt gradient reductions where they share
                                     // a node's network (FOLD3D Sec. V-A); docs/costmodel.md
  std::vector<int> layer_tp;         // tensor-parallel degree of each transformer layer (Oases Sec. V;
                                     // planner/layer_tp.h); empty = tp for every layer. Only
                                     // `plan --layer-tp` prices degrees below tp; estimate, simulate
                                     // and train refuse them (check_fit)
  bool overlap_param_gather = false; // with a distributed optimizer (zero >= 1): all-gather the updated
                                     // parameters bucket by bucket behind the next forward, which waits
                                     // for each bucket as it reaches its layers (Megatron-Core
                                     // --overlap-param-gather); false: the whole gather after the step
  bool fp8_param_gather = false;     // FP8 with zero 1 or 2: the compute weights are kept in FP8 only
                                     // (no 16-bit copy), each rank casts its updated shard from the fp32
                                     // master and the all-gather moves FP8 (Megatron-Core
                                     // --fp8-param-gather; Megatron-Bridge's current-scaling and MXFP8
                                     // recipes set it). Zero 3 always gathers FP8 (costmodel/fsdp.h)
  std::string stack = "megatron-lm"; // the kernel set that runs the plan (stack.h, presets/stacks)
  int zero = 0;                      // distributed optimizer over the dp group: 0 none, 1 optimizer
                                     // states sharded (ZeRO-1, Megatron's --use-distributed-optimizer),
                                     // 2 gradients sharded too (ZeRO-2), 3 parameters as well, each
                                     // layer gathered for its passes (ZeRO-3 as PyTorch's FSDP2 runs
                                     // it; costmodel/fsdp.h); docs/costmodel.md
  bool reshard_after_forward = true; // zero 3: free each gathered layer after its forward and gather it
                                     // again for its backward (FSDP2's default); false: keep it
                                     // gathered from the forward to the backward
  int shard_group = 0;               // zero 3: dp ranks each parameter is sharded over, a divisor of dp
                                     // (consecutive dp ranks); the dp / shard_group copies all-reduce
                                     // their shards' gradients once per iteration (hybrid sharding,
                                     // HSDP). 0: the whole dp group (FSDP)

  // The mode of model part (stage within a chain) `part`.
  schedules::TpOverlap overlap_of(int part) const {
    return stage_tp_overlap.empty() ? tp_overlap : stage_tp_overlap.at(static_cast<size_t>(part));
  }

  int num_gpus() const { return dp * tp * pp * cp; }
  long global_batch() const { return static_cast<long>(dp) * microbatch_size * num_microbatches; }
};

// Key/value heads g (a when num_kv_heads is 0) and the width of the key and of the value
// projection, g * h/a elements per token.
int kv_heads(const ModelSpec& m);
double kv_hidden_size(const ModelSpec& m);
// Per-head dims: d (head_dim, or h / a), d_v (v_head_dim, or d), and what the core's products
// see, d_qk = d + d_rope (MLA's rotary part; 0 without MLA).
double head_dim(const ModelSpec& m);
double v_head_dim(const ModelSpec& m);
double qk_head_dim(const ModelSpec& m);
// One weight matrix of the attention block, (in x out): split over the tensor-parallel ranks
// (column-parallel: out / t; row-parallel: in / t; Megatron-LM) or replicated on each (MLA's
// down projections, Megatron-Core's MLA). The QKV projection (or MLA's four projections) and the
// output projection, in the order a forward runs them.
struct Projection {
  double in = 0, out = 0;  // (in x out) elements
  bool split = true;       // false: every tp rank holds and computes it whole
  bool row = false;        // split by rows (its input sharded): the output projection
};
std::vector<Projection> attention_projections(const ModelSpec& m);
// The attention core's work over the full s x s count (the convention of the FLOPs here: 2 s^2
// pairs' worth for causal decoders too), in the mean over the model's layers: 1 for full
// attention; a windowed layer's queries attend min(i, w) keys, s w - w^2 / 2 of the causal s^2 / 2
// pairs, (2 s w - w^2) / s^2 of the count (w < s). One rule for the FLOPs and the fused kernels.
double attention_pair_share(const ModelSpec& m);
// Mixture of experts: whether the model has experts, and whether transformer layer `layer` (0
// first) is an MoE layer (the first dense_layers keep a dense MLP); MoE layers among layers
// [first, first + n).
bool is_moe(const ModelSpec& m);
bool is_moe_layer(const ModelSpec& m, int layer);
int moe_layers_in(const ModelSpec& m, int first, int n);
// The busiest expert-parallel rank's load over the mean: the capacity factor where tokens are
// dropped beyond it, else the stated imbalance (ModelSpec::moe_load_imbalance).
double moe_load_factor(const ModelSpec& m);

// Whether t tensor-parallel ranks split the model evenly: t divides the query heads, the
// key/value heads (Megatron-LM's query groups), the FFN width and the experts' width.
bool tp_divides(const ModelSpec& m, int t);
// Whether cp context-parallel ranks can split the model's sequences: 2cp divides the sequence
// (two chunks a rank, balancing the causal mask) and the core is fused (one kernel a chunk).
bool cp_divides(const ModelSpec& m, int cp);
// Whether ep expert-parallel ranks split the model's experts: ep divides E (0 experts: ep = 1).
bool ep_divides(const ModelSpec& m, int ep);
// Whether a plan of tp ranks over model m must run sequence parallelism: experts under tp > 1
// (Megatron-Core's rule; check_moe_plan and the planner's space).
bool needs_sequence_parallel(const ModelSpec& m, int tp);
// The experts' tensor-parallel degree: plan.etp, or tp where it is 0.
int expert_tp(const ParallelPlan& p);
// What selective recomputation recomputes: plan.recompute_modules, core_attn where it names none
// (Megatron-Core's default); nothing without selective recomputation.
RecomputeModules recompute_modules_of(const ParallelPlan& p);
// The plan's cuda_graph_scope as flags; throws InputError naming an unknown scope, full_iteration
// beside another scope, or moe_preprocess without moe_router (Megatron-Core captures the
// preprocessing only after a captured router).
CudaGraphScopes cuda_graph_scopes_of(const ParallelPlan& p);
// The ranks the expert-parallel and expert-data-parallel groups are cut from: dp x cp, or with
// etp 1 (and tp > 1) tp x dp x cp.
int expert_ranks(const ParallelPlan& p);
// Whether the plan's distributed optimizer reduce-scatters the gradients at the iteration's end
// and all-gathers the parameters after the step (zero 1 and 2; zero 3 does both around each
// layer's passes instead, costmodel/fsdp.h).
bool gathers_after_step(const ParallelPlan& p);

std::string_view kind_name(ModelKind k);
ModelKind parse_kind(const std::string& s);  // throws InputError
// Bytes of one gradient: bytes_per_grad, or bytes_per_param when it is 0.
int grad_bytes_per_param(const ModelSpec& m);
// Bytes of the optimizer's copy of one weight (bytes_per_master; its default: 4 where the weights
// are narrower, else 0) and of Adam's two moments together: the one rule for the optimizer's
// memory (memory.h static_bytes_per_param) and its step's traffic.
int master_bytes_per_param(const ModelSpec& m);
int moment_bytes_per_param(const ModelSpec& m);
std::string_view attention_kernel_name(AttentionKernel k);  // "materialized", "fused"
// `field` names where the value came from in the error (InputError).
AttentionKernel parse_attention_kernel(const std::string& s, const std::string& field = "attention_kernel");
std::string_view fp8_recipe_name(Fp8Recipe r);  // "delayed", "current", "blockwise", "mxfp8"
// `field` names where the value came from in the error (InputError).
Fp8Recipe parse_fp8_recipe(const std::string& s, const std::string& field = "fp8_recipe");
// Whether the model's FP8 recipe on a GPU (gpu_any_layout: ClusterSpec::fp8_gemm_any_layout) keeps a second FP8 copy of each quantised
// tensor (a transpose, or a column-wise copy): per-tensor scaling only where the GPU's FP8 products
// need the TN layout (ClusterSpec::fp8_gemm_any_layout); blockwise and MXFP8 always, since their
// scales run along one direction (Transformer Engine keeps row-wise and column-wise data).
bool fp8_keeps_second_copy(const ModelSpec& m, bool gpu_any_layout);
// Bytes of traffic per element of one FP8 cast of an activation or gradient (with its transpose,
// or its column-wise copy, where fp8_keeps_second_copy) under the model's recipe: the stack's
// fused cast-transpose (`cast_transpose`, 4: read 2, write 1 and 1), less the transpose's byte
// where there is none, plus an amax pass (current: read 2), or the scales of both copies
// (blockwise: 2 x 4 / 128; MXFP8: 2 x 1 / 32).
double fp8_cast_bytes(const ModelSpec& m, bool gpu_any_layout, double cast_transpose);
// Per linear weight and step under the model's recipe on the cluster's GPU: the FP8 copies kept
// (static bytes) and the traffic of making them from the 16-bit weight.
double fp8_weight_copy_bytes(const ModelSpec& m, const ClusterSpec& c);
double fp8_weight_cast_bytes(const ModelSpec& m, const ClusterSpec& c);
// Per FP8 weight, bytes an all-gather of FP8 compute weights moves (plan.fp8_param_gather): the
// FP8 data alone under per-tensor scaling (a transpose, where one is kept, is made after the
// gather), both scaled copies under blockwise and MXFP8 scaling (fp8_weight_copy_bytes).
double fp8_weight_gather_bytes(const ModelSpec& m, const ClusterSpec& c);
std::string_view recompute_name(RecomputePolicy p);
RecomputePolicy parse_recompute(const std::string& s);  // throws InputError

nlohmann::json to_json(const ModelSpec& m);
nlohmann::json to_json(const ClusterSpec& c);
nlohmann::json to_json(const ParallelPlan& p);
// Parsers check every field; the error names "<what>.<field>", the value and what is allowed.
ModelSpec model_from_json(const nlohmann::json& j);
ClusterSpec cluster_from_json(const nlohmann::json& j);
ParallelPlan plan_from_json(const nlohmann::json& j);

void check(const ModelSpec& m);
void check(const ClusterSpec& c);
void check(const ParallelPlan& p);
// Cross checks: tp*dp*pp at most the cluster's GPUs (a plan with fewer runs on the first ones,
// whole nodes first), tp divides the heads, enough layers for the stages, explicit stage
// layers adding up.
void check_fit(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p);
// The tensor-parallel overlap modes: two sub-batches need an even microbatch size (tp > 1).
void check_tp_overlap(const ParallelPlan& p);
// Whether overlap `mode` means anything at tp degree `tp`: blocking always, every other mode only
// where tp > 1 (at tp = 1 there is no tp collective to overlap; Megatron-LM refuses
// --tp-comm-overlap there too, sequence parallelism being off at tp = 1). The cost model prices
// such a mode at tp = 1 as blocking (so that an experiment may sweep tp under one mode); what a
// user asks for is refused: check_tp_overlap_applies, the planner's space, compare's --tp-overlaps.
bool tp_overlap_applies(schedules::TpOverlap mode, int tp);
// InputError naming plan.tp_overlap (or stage_tp_overlap[i]) and the mode when it does not apply
// at p.tp. The CLI's plans (estimate, compare, simulate, check-run, train) go through it.
void check_tp_overlap_applies(const ParallelPlan& p);
// InputError naming plan.sequence_parallel when it is set at tp = 1: it splits the tensor-parallel
// group's activations along the sequence, and tp = 1 has no group (Megatron-LM turns it off there;
// its importer does the same). The CLI's plans go through it, as through check_tp_overlap_applies.
void check_sequence_parallel_applies(const ParallelPlan& p);
// Experts (ModelSpec::num_experts) and the plan: ep divides E, tp divides the experts' width and
// runs with sequence parallelism and blocking collectives, no zero 3; ep = 1 without experts.
// Part of check_fit.
void check_moe_plan(const ModelSpec& m, const ParallelPlan& p);
// FP8 (ModelSpec::fp8) needs a cluster priced by shape whose GPU has FP8; InputError naming the
// field otherwise. Part of check_fit; the planner checks it once before its search.
void check_fp8(const ModelSpec& m, const ClusterSpec& c);

// The same cluster with `nodes` nodes (a preset scaled out or in; each node and the network keep
// their figures; the name says so). InputError naming `field` when nodes < 1.
void set_nodes(ClusterSpec& c, int nodes, const std::string& field);
// A job that uses `used` of each node's GPUs (ClusterSpec::gpus_used_per_node; an NVL72 rack of
// which a job takes 64): the node then has `used` GPUs and their share of its NICs, one at least
// (NICs serve the GPUs beside them, as a GB200 compute tray's four NICs its four GPUs); 0 or the
// node's size: all of them. InputError naming `field` outside [0, installed GPUs].
void set_gpus_used_per_node(ClusterSpec& c, int used, const std::string& field);
// The fraction of GPU memory a plan leaves free (ClusterSpec::memory_margin); InputError naming
// `field` outside [0, 1).
void set_memory_margin(ClusterSpec& c, double margin, const std::string& field);

}  // namespace stagecraft::costmodel
