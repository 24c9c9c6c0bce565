#include "costmodel/specs.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "schedules/error.h"
#include "costmodel/gpus.h"
#include "costmodel/json_reader.h"
#include "costmodel/stack.h"
#include "schedules/json_read.h"

namespace stagecraft::costmodel {
namespace {

std::string num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

[[noreturn]] void bad(const std::string& what, const std::string& field, const std::string& value,
                      const std::string& allowed) {
  throw InputError(what + "." + field + " = " + value + " is invalid (" + allowed + ")");
}

void positive(const std::string& what, const char* field, double v) {
  if (!(v > 0) || !std::isfinite(v)) bad(what, field, num(v), "must be greater than 0");
}
void at_least_one(const std::string& what, const char* field, int v) {
  if (v < 1) bad(what, field, std::to_string(v), std::string(field) + " must be at least 1");
}
void non_negative(const std::string& what, const char* field, double v) {
  if (!(v >= 0) || !std::isfinite(v)) bad(what, field, num(v), "must be 0 or more");
}

// The fields that describe a model's experts (ModelSpec, "Mixture of experts"): on a dense model
// (num_experts 0 or absent) each is meaningless, whatever its value, and refused naming it.
const char* const kMoeOnlyFields[] = {"experts_per_token", "expert_ffn_hidden_size", "num_shared_experts", "dense_layers",
                                      "moe_layer_pattern", "moe_node_limit", "moe_capacity_factor", "moe_load_imbalance"};
const char* const kMoeOnly = "describes experts, and the model has none (num_experts 0): set num_experts > 0, or leave the field out";
void refuse_moe_fields_of_dense(const nlohmann::json& j, const std::string& what) {
  for (const char* f : kMoeOnlyFields)
    if (j.contains(f)) bad(what, f, j.at(f).dump(), kMoeOnly);
}

}  // namespace

std::string_view kind_name(ModelKind k) {
  switch (k) {
    case ModelKind::Gpt: return "gpt";
    case ModelKind::Bert: return "bert";
    case ModelKind::Llama: return "llama";
  }
  return "?";
}

ModelKind parse_kind(const std::string& s) {
  if (s == "gpt") return ModelKind::Gpt;
  if (s == "bert") return ModelKind::Bert;
  if (s == "llama") return ModelKind::Llama;
  bad("model", "kind", "\"" + s + "\"", "allowed: gpt, bert, llama");
}

int grad_bytes_per_param(const ModelSpec& m) { return m.bytes_per_grad > 0 ? m.bytes_per_grad : m.bytes_per_param; }
int master_bytes_per_param(const ModelSpec& m) {
  return m.bytes_per_master >= 0 ? m.bytes_per_master : m.bytes_per_param < 4 ? 4 : 0;
}
int moment_bytes_per_param(const ModelSpec& m) { return 2 * m.bytes_per_moment; }

std::string_view attention_kernel_name(AttentionKernel k) {
  return k == AttentionKernel::Fused ? "fused" : "materialized";
}

AttentionKernel parse_attention_kernel(const std::string& s, const std::string& field) {
  if (s == "materialized") return AttentionKernel::Materialized;
  if (s == "fused") return AttentionKernel::Fused;
  bad("model", field, "\"" + s + "\"", "allowed: materialized (scores kept, Korthikanti), fused (flash attention)");
}

std::string_view fp8_recipe_name(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::Delayed: return "delayed";
    case Fp8Recipe::Current: return "current";
    case Fp8Recipe::Blockwise: return "blockwise";
    case Fp8Recipe::Mxfp8: return "mxfp8";
  }
  return "?";
}

Fp8Recipe parse_fp8_recipe(const std::string& s, const std::string& field) {
  for (Fp8Recipe r : {Fp8Recipe::Delayed, Fp8Recipe::Current, Fp8Recipe::Blockwise, Fp8Recipe::Mxfp8})
    if (s == fp8_recipe_name(r)) return r;
  bad("model", field, "\"" + s + "\"", "allowed: delayed, current, blockwise, mxfp8");
}

namespace {
// One scale per tensor (delayed or current scaling), as against scales per block along one direction.
bool per_tensor_scaling(const ModelSpec& m) { return m.fp8_recipe == Fp8Recipe::Delayed || m.fp8_recipe == Fp8Recipe::Current; }
}  // namespace

bool fp8_keeps_second_copy(const ModelSpec& m, bool gpu_any_layout) { return !(per_tensor_scaling(m) && gpu_any_layout); }

double fp8_cast_bytes(const ModelSpec& m, bool gpu_any_layout, double cast_transpose) {
  const double cast = fp8_keeps_second_copy(m, gpu_any_layout) ? cast_transpose : cast_transpose - 1;  // no transpose written
  switch (m.fp8_recipe) {
    case Fp8Recipe::Delayed: return cast;
    case Fp8Recipe::Current: return cast + 2;                 // the amax pass reads the 16-bit tensor
    case Fp8Recipe::Blockwise: return cast + 2 * 4.0 / 128;   // an fp32 scale per 128, both copies
    case Fp8Recipe::Mxfp8: return cast + 2 * 1.0 / 32;        // an E8M0 byte per 32, both copies
  }
  return cast;
}

// Delayed and current scaling keep an FP8 weight and, where the GPU needs it, its FP8 transpose
// (1 or 2 bytes), made by one cast(-transpose) (read 2, write 1 or 2), current scaling after an
// amax pass (read 2 more). Blockwise: 128x128 blocks serve the weight and its transpose alike,
// one fp32 scale per 16,384 weights per copy. MXFP8: a row-wise and a column-wise copy, each with
// a scale byte per 32 weights.
double fp8_weight_copy_bytes(const ModelSpec& m, const ClusterSpec& c) {
  switch (m.fp8_recipe) {
    case Fp8Recipe::Blockwise: return 2 + 2 * 4.0 / 16384;
    case Fp8Recipe::Mxfp8: return 2 + 2 * 1.0 / 32;
    default: return fp8_keeps_second_copy(m, c.fp8_gemm_any_layout()) ? 2 : 1;
  }
}
double fp8_weight_gather_bytes(const ModelSpec& m, const ClusterSpec& c) {
  return per_tensor_scaling(m) ? 1.0 : fp8_weight_copy_bytes(m, c);
}
double fp8_weight_cast_bytes(const ModelSpec& m, const ClusterSpec& c) {
  const double written = fp8_keeps_second_copy(m, c.fp8_gemm_any_layout()) ? 2 : 1;
  switch (m.fp8_recipe) {
    case Fp8Recipe::Current: return 4 + written;
    case Fp8Recipe::Blockwise: return 4 + 2 * 4.0 / 16384;
    case Fp8Recipe::Mxfp8: return 4 + 2 * 1.0 / 32;
    default: return 2 + written;
  }
}

std::string_view recompute_name(RecomputePolicy p) {
  switch (p) {
    case RecomputePolicy::None: return "none";
    case RecomputePolicy::Full: return "full";
    case RecomputePolicy::Selective: return "selective";
  }
  return "?";
}

RecomputePolicy parse_recompute(const std::string& s) {
  if (s == "none") return RecomputePolicy::None;
  if (s == "full") return RecomputePolicy::Full;
  if (s == "selective") return RecomputePolicy::Selective;
  bad("plan", "recompute", "\"" + s + "\"", "allowed: none, full, selective");
}

int kv_heads(const ModelSpec& m) { return m.num_kv_heads > 0 ? m.num_kv_heads : m.num_heads; }

double kv_hidden_size(const ModelSpec& m) { return static_cast<double>(kv_heads(m)) * head_dim(m); }

double head_dim(const ModelSpec& m) {
  return m.head_dim > 0 ? m.head_dim : static_cast<double>(m.hidden_size) / m.num_heads;
}
double v_head_dim(const ModelSpec& m) { return m.v_head_dim > 0 ? m.v_head_dim : head_dim(m); }
double qk_head_dim(const ModelSpec& m) { return head_dim(m) + (m.kv_lora_rank > 0 ? m.qk_rope_head_dim : 0); }

std::vector<Projection> attention_projections(const ModelSpec& m) {
  const double h = m.hidden_size, a = m.num_heads, d = head_dim(m), dv = v_head_dim(m);
  if (m.kv_lora_rank == 0)  // QKV (a d + 2 g d columns), the output projection (a d_v rows)
    return {{h, a * d + 2 * kv_hidden_size(m), true, false}, {a * dv, h, true, true}};
  // MLA (DeepSeek-V2 Sec. 2.1.2-2.1.3; DeepSeek-V3's configuration): the down projections are
  // replicated on the tp ranks (Megatron-Core's MLA), the up projections split by heads.
  const double dr = m.qk_rope_head_dim, dqk = d + dr;
  std::vector<Projection> out;
  if (m.q_lora_rank > 0) {
    out.push_back({h, static_cast<double>(m.q_lora_rank), false, false});
    out.push_back({static_cast<double>(m.q_lora_rank), a * dqk, true, false});
  } else {
    out.push_back({h, a * dqk, true, false});
  }
  out.push_back({h, m.kv_lora_rank + dr, false, false});
  out.push_back({static_cast<double>(m.kv_lora_rank), a * (d + dv), true, false});
  out.push_back({a * dv, h, true, true});
  return out;
}

double attention_pair_share(const ModelSpec& m) {
  const double s = m.seq_length, w = m.sliding_window;
  if (m.sliding_window <= 0 || w >= s) return 1.0;
  const double windowed = (2 * s * w - w * w) / (s * s);
  const std::vector<int>& p = m.sliding_window_pattern;
  if (p.empty()) return windowed;
  double share = 0;
  for (int l = 0; l < m.num_layers; ++l) share += p[static_cast<size_t>(l) % p.size()] != 0 ? windowed : 1.0;
  return share / m.num_layers;
}

bool is_moe(const ModelSpec& m) { return m.num_experts > 0; }
bool is_moe_layer(const ModelSpec& m, int layer) {
  if (!is_moe(m) || layer < m.dense_layers) return false;
  const std::vector<int>& p = m.moe_layer_pattern;
  return p.empty() || p[static_cast<size_t>(layer - m.dense_layers) % p.size()] != 0;
}
int moe_layers_in(const ModelSpec& m, int first, int n) {
  int count = 0;
  for (int l = first; l < first + n; ++l) count += is_moe_layer(m, l) ? 1 : 0;
  return count;
}
double moe_load_factor(const ModelSpec& m) { return m.moe_capacity_factor > 0 ? m.moe_capacity_factor : m.moe_load_imbalance; }
bool needs_sequence_parallel(const ModelSpec& m, int tp) { return is_moe(m) && tp > 1; }

int expert_tp(const ParallelPlan& p) { return p.etp > 0 ? p.etp : p.tp; }

namespace {
const char* const kRecomputeModules = "core_attn, layernorm, mla_up_proj, mlp, moe_act, shared_experts, moe";
const char* const kCudaGraphScopes = "attn, mlp, moe, moe_router, moe_preprocess, or full_iteration alone";

// A plan field listing names: sets each name's flag in `table`; an unknown name is refused naming
// the field and what it allows.
void set_named_flags(const std::vector<std::string>& names, std::initializer_list<std::pair<const char*, bool*>> table,
                     const char* field, const char* allowed) {
  for (const std::string& name : names) {
    bool* flag = nullptr;
    for (const auto& [key, f] : table)
      if (name == key) flag = f;
    if (!flag) bad("plan", field, "'" + name + "'", std::string("allowed: ") + allowed);
    *flag = true;
  }
}
}  // namespace

RecomputeModules recompute_modules_of(const ParallelPlan& p) {
  RecomputeModules r;
  if (p.recompute != RecomputePolicy::Selective) return r;
  if (p.recompute_modules.empty()) r.core_attn = true;
  set_named_flags(p.recompute_modules,
                  {{"core_attn", &r.core_attn}, {"layernorm", &r.layernorm}, {"mla_up_proj", &r.mla_up_proj},
                   {"mlp", &r.mlp}, {"moe_act", &r.moe_act}, {"shared_experts", &r.shared_experts}, {"moe", &r.moe}},
                  "recompute_modules", kRecomputeModules);
  return r;
}

CudaGraphScopes cuda_graph_scopes_of(const ParallelPlan& p) {
  CudaGraphScopes g;
  set_named_flags(p.cuda_graph_scope,
                  {{"attn", &g.attn}, {"mlp", &g.mlp}, {"moe", &g.moe}, {"moe_router", &g.moe_router},
                   {"moe_preprocess", &g.moe_preprocess}, {"full_iteration", &g.full_iteration}},
                  "cuda_graph_scope", kCudaGraphScopes);
  if (g.full_iteration && p.cuda_graph_scope.size() > 1)
    bad("plan", "cuda_graph_scope", std::to_string(p.cuda_graph_scope.size()) + " scopes with full_iteration",
        "full_iteration captures everything and stands alone (Megatron-Core --cuda-graph-impl local)");
  if (g.moe_preprocess && !g.moe_router)
    bad("plan", "cuda_graph_scope", "'moe_preprocess' without 'moe_router'",
        "moe_preprocess needs moe_router (Megatron-Core captures the preprocessing after a captured router)");
  return g;
}

int expert_ranks(const ParallelPlan& p) { return (expert_tp(p) == 1 ? p.tp : 1) * p.dp * p.cp; }

bool ep_divides(const ModelSpec& m, int ep) { return ep == 1 || (is_moe(m) && ep >= 1 && m.num_experts % ep == 0); }

bool cp_divides(const ModelSpec& m, int cp) {
  return cp == 1 || (m.seq_length % (2 * cp) == 0 && m.attention_kernel == AttentionKernel::Fused);
}

bool gathers_after_step(const ParallelPlan& p) { return p.zero == 1 || p.zero == 2; }

bool tp_divides(const ModelSpec& m, int t) {
  return t >= 1 && m.num_heads % t == 0 && kv_heads(m) % t == 0 && m.ffn_hidden_size % t == 0 &&
         (!is_moe(m) || m.expert_ffn_hidden_size % t == 0);
}

nlohmann::json to_json(const ModelSpec& m) {
  nlohmann::json j = {{"name", m.name},
          {"kind", std::string(kind_name(m.kind))},
          {"num_layers", m.num_layers},
          {"hidden_size", m.hidden_size},
          {"num_heads", m.num_heads},
          {"ffn_hidden_size", m.ffn_hidden_size},
          {"seq_length", m.seq_length},
          {"vocab_size", m.vocab_size},
          {"bytes_per_param", m.bytes_per_param},
          {"bytes_per_activation", m.bytes_per_activation},
          {"source", m.source}};
  if (m.num_kv_heads != 0) j["num_kv_heads"] = m.num_kv_heads;
  if (m.bytes_per_grad != 0) j["bytes_per_grad"] = m.bytes_per_grad;
  if (m.bytes_per_master >= 0) j["bytes_per_master"] = m.bytes_per_master;
  if (m.bytes_per_moment != 4) j["bytes_per_moment"] = m.bytes_per_moment;
  if (!m.dropout) j["dropout"] = false;
  if (m.fp8) j["fp8"] = true;
  if (m.fp8_recipe != Fp8Recipe::Delayed) j["fp8_recipe"] = fp8_recipe_name(m.fp8_recipe);
  if (m.attention_kernel != AttentionKernel::Materialized) j["attention_kernel"] = attention_kernel_name(m.attention_kernel);
  for (auto [key, v] : {std::pair{"head_dim", m.head_dim}, {"v_head_dim", m.v_head_dim}, {"q_lora_rank", m.q_lora_rank},
                        {"kv_lora_rank", m.kv_lora_rank}, {"qk_rope_head_dim", m.qk_rope_head_dim}})
    if (v != 0) j[key] = v;
  if (m.mtp_layers > 0) j["mtp_layers"] = m.mtp_layers;
  if (m.sliding_window > 0) j["sliding_window"] = m.sliding_window;
  if (!m.sliding_window_pattern.empty()) j["sliding_window_pattern"] = m.sliding_window_pattern;
  if (m.activation_clamp > 0) j["activation_clamp"] = m.activation_clamp;
  if (m.rope_mscale != 1) j["rope_mscale"] = m.rope_mscale;
  if (m.linear_bias) j["linear_bias"] = true;
  if (is_moe(m)) {
    j["num_experts"] = m.num_experts;
    j["experts_per_token"] = m.experts_per_token;
    j["expert_ffn_hidden_size"] = m.expert_ffn_hidden_size;
    j["num_shared_experts"] = m.num_shared_experts;
    j["dense_layers"] = m.dense_layers;
    if (!m.moe_layer_pattern.empty()) j["moe_layer_pattern"] = m.moe_layer_pattern;
    j["moe_node_limit"] = m.moe_node_limit;
    j["moe_capacity_factor"] = m.moe_capacity_factor;
    j["moe_load_imbalance"] = m.moe_load_imbalance;
  }
  return j;
}

nlohmann::json to_json(const ClusterSpec& c) {
  nlohmann::json j = {{"name", c.name},
          {"nodes", c.nodes},
          {"gpus_per_node", c.gpus_per_node},
          {"gpu_name", c.gpu_name},
          {"gpu_peak_flops_per_s", c.gpu_peak_flops_per_s},
          {"gpu_memory_bytes", c.gpu_memory_bytes},
          {"gpu_memory_bandwidth_Bps", c.gpu_memory_bandwidth_Bps},
          {"achieved_efficiency", c.achieved_efficiency},
          {"gpu_sms", c.gpu_sms},
          {"gemm_tile_m", c.gemm_tile_m},
          {"gemm_tile_n", c.gemm_tile_n},
          {"gemm_max_efficiency", c.gemm_max_efficiency},
          {"memory_efficiency", c.memory_efficiency},
          {"gpu_fp8_peak_flops_per_s", c.gpu_fp8_peak_flops_per_s},
          {"gemm_max_efficiency_fp8", c.gemm_max_efficiency_fp8},
          {"gpu_compute_capability", c.gpu_compute_capability},
          {"gpu_boost_clock_mhz", c.gpu_boost_clock_mhz},
          {"gpu_sustained_clock_mhz", c.gpu_sustained_clock_mhz},
          {"compute_source", c.compute_source},
          {"intra_node_link", c.intra_node_link},
          {"intra_node_bandwidth_Bps", c.intra_node_bandwidth_Bps},
          {"intra_node_latency_s", c.intra_node_latency_s},
          {"fast_group_size", c.fast_group_size},
          {"fast_group_link", c.fast_group_link},
          {"fast_group_bandwidth_Bps", c.fast_group_bandwidth_Bps},
          {"fast_group_latency_s", c.fast_group_latency_s},
          {"inter_node_link", c.inter_node_link},
          {"inter_node_bandwidth_Bps", c.inter_node_bandwidth_Bps},
          {"inter_node_latency_s", c.inter_node_latency_s},
          {"nics_per_node", c.nics_per_node},
          {"inter_node_topology", c.inter_node_topology},
          {"host_link_bandwidth_Bps", c.host_link_bandwidth_Bps},
          {"intra_node_bus_efficiency", c.intra_node_bus_efficiency},
          {"fast_group_bus_efficiency", c.fast_group_bus_efficiency},
          {"inter_node_bus_efficiency", c.inter_node_bus_efficiency},
          {"bus_efficiency_source", c.bus_efficiency_source},
          {"memory_margin", c.memory_margin},
          {"source", c.source}};
  if (c.node_gpus > 0) {  // as the file says it: the installed node and what a job uses of it
    j["gpus_per_node"] = c.node_gpus;
    j["nics_per_node"] = c.node_nics;
    j["gpus_used_per_node"] = c.gpus_per_node;
  }
  if (!c.gpu.empty()) j["gpu"] = c.gpu;
  if (c.gpu_mxfp8_peak_flops_per_s > 0) j["gpu_mxfp8_peak_flops_per_s"] = c.gpu_mxfp8_peak_flops_per_s;
  if (c.gpu_fp4_peak_flops_per_s > 0) j["gpu_fp4_peak_flops_per_s"] = c.gpu_fp4_peak_flops_per_s;
  if (!c.clock_calibration.empty()) j["clock_calibration"] = c.clock_calibration;
  if (c.cores_per_node > 0) j["cores_per_node"] = c.cores_per_node;
  return j;
}

namespace {
std::vector<std::string> overlap_names(const std::vector<schedules::TpOverlap>& v) {
  std::vector<std::string> out;
  for (auto m : v) out.emplace_back(schedules::tp_overlap_name(m));
  return out;
}
}  // namespace

nlohmann::json to_json(const ParallelPlan& p) {
  nlohmann::json j = {{"dp", p.dp},
          {"tp", p.tp},
          {"pp", p.pp},
          {"microbatch_size", p.microbatch_size},
          {"num_microbatches", p.num_microbatches},
          {"schedule", p.schedule},
          {"schedule_params", p.schedule_params},
          {"recompute", std::string(recompute_name(p.recompute))},
          {"rank_order", p.rank_order},
          {"stage_layers", p.stage_layers},
          {"sequence_parallel", p.sequence_parallel},
          {"tp_overlap", std::string(schedules::tp_overlap_name(p.tp_overlap))},
          {"stage_tp_overlap", overlap_names(p.stage_tp_overlap)},
          {"grad_reduce_at", std::string(schedules::grad_reduce_at_name(p.grad_reduce_at))},
          {"overlap_grad_reduce", p.overlap_grad_reduce},
          {"grad_bucket_bytes", p.grad_bucket_bytes},
          {"preemptive_comm", p.preemptive_comm},
          {"overlap_param_gather", p.overlap_param_gather},
          {"stack", p.stack},
          {"zero", p.zero}};
  if (!p.layer_tp.empty()) j["layer_tp"] = p.layer_tp;
  if (!p.pipeline_layout.empty()) j["pipeline_layout"] = p.pipeline_layout;
  if (p.account_for_embedding) j["account_for_embedding_in_pipeline_split"] = true;
  if (p.account_for_loss) j["account_for_loss_in_pipeline_split"] = true;
  if (p.cp > 1) j["cp"] = p.cp;
  if (p.ep > 1) j["ep"] = p.ep;
  if (p.etp != 0) j["etp"] = p.etp;
  if (p.moe_dispatcher != "alltoall") j["moe_dispatcher"] = p.moe_dispatcher;
  if (p.offload_layers > 0) j["offload_layers"] = p.offload_layers;
  if (p.fp8_param_gather) j["fp8_param_gather"] = true;
  if (!p.recompute_modules.empty()) j["recompute_modules"] = p.recompute_modules;
  if (!p.cuda_graph_scope.empty()) j["cuda_graph_scope"] = p.cuda_graph_scope;
  if (p.zero == 3) {
    j["reshard_after_forward"] = p.reshard_after_forward;
    j["shard_group"] = p.shard_group;
  }
  return j;
}

ModelSpec model_from_json(const nlohmann::json& j) {
  Reader r(j, "model");
  ModelSpec m;
  m.name = r.opt<std::string>("name", "custom");
  m.kind = parse_kind(r.opt<std::string>("kind", "gpt"));
  m.num_layers = r.req<int>("num_layers");
  m.hidden_size = r.req<int>("hidden_size");
  m.num_heads = r.req<int>("num_heads");
  m.num_kv_heads = r.opt<int>("num_kv_heads", 0);
  m.ffn_hidden_size = r.opt<int>("ffn_hidden_size", 4 * m.hidden_size);
  m.seq_length = r.req<int>("seq_length");
  m.vocab_size = r.req<int>("vocab_size");
  m.bytes_per_param = r.opt<int>("bytes_per_param", 2);
  m.bytes_per_activation = r.opt<int>("bytes_per_activation", 2);
  m.bytes_per_grad = r.opt<int>("bytes_per_grad", 0);
  m.bytes_per_master = r.opt<int>("bytes_per_master", -1);
  m.bytes_per_moment = r.opt<int>("bytes_per_moment", 4);
  m.dropout = r.opt<bool>("dropout", true);
  m.fp8 = r.opt<bool>("fp8", false);
  m.fp8_recipe = parse_fp8_recipe(r.opt<std::string>("fp8_recipe", "delayed"));
  m.attention_kernel = parse_attention_kernel(r.opt<std::string>("attention_kernel", "materialized"));
  m.head_dim = r.opt<int>("head_dim", 0);
  m.v_head_dim = r.opt<int>("v_head_dim", 0);
  m.q_lora_rank = r.opt<int>("q_lora_rank", 0);
  m.kv_lora_rank = r.opt<int>("kv_lora_rank", 0);
  m.qk_rope_head_dim = r.opt<int>("qk_rope_head_dim", 0);
  m.mtp_layers = r.opt<int>("mtp_layers", 0);
  m.sliding_window = r.opt<int>("sliding_window", 0);
  m.sliding_window_pattern = r.opt<std::vector<int>>("sliding_window_pattern", {});
  m.activation_clamp = r.opt<double>("activation_clamp", 0.0);
  m.rope_mscale = r.opt<double>("rope_mscale", 1.0);
  m.linear_bias = r.opt<bool>("linear_bias", false);
  m.num_experts = r.opt<int>("num_experts", 0);
  m.experts_per_token = r.opt<int>("experts_per_token", 0);
  m.expert_ffn_hidden_size = r.opt<int>("expert_ffn_hidden_size", 0);
  m.num_shared_experts = r.opt<int>("num_shared_experts", 0);
  m.dense_layers = r.opt<int>("dense_layers", 0);
  m.moe_layer_pattern = r.opt<std::vector<int>>("moe_layer_pattern", {});
  m.moe_node_limit = r.opt<int>("moe_node_limit", 0);
  m.moe_capacity_factor = r.opt<double>("moe_capacity_factor", 0.0);
  m.moe_load_imbalance = r.opt<double>("moe_load_imbalance", 1.0);
  m.source = r.opt<std::string>("source", "");
  r.done();
  if (m.num_experts == 0) refuse_moe_fields_of_dense(j, "model '" + m.name + "'");
  check(m);
  return m;
}

namespace {
// A cluster that names no catalog GPU states every figure its pricing needs: compute by shape
// (gpu_sms > 0) needs the tiles, both efficiencies and both clocks (0 for both: the measurements'
// clock is the training clock, said outright), FP8 its efficiency; a shape field without gpu_sms
// would be ignored. Refused naming the fields, never priced at a silent default (issue 49).
void require_gpu_fields(const nlohmann::json& j, const ClusterSpec& c) {
  if (j.contains("gpu")) return;
  static const char* shape_fields[] = {"gemm_tile_m", "gemm_tile_n", "gemm_max_efficiency", "memory_efficiency",
                                       "gpu_boost_clock_mhz", "gpu_sustained_clock_mhz"};
  std::vector<std::string> missing;
  if (!j.contains("gpu_sms")) {
    for (const char* f : shape_fields)
      if (j.contains(f)) missing.push_back(std::string("gpu_sms (") + f + " is given: compute by shape needs the SM count)");
    if (!missing.empty()) missing.resize(1);
  } else if (c.gpu_sms > 0) {
    for (const char* f : shape_fields)
      if (!j.contains(f)) missing.push_back(f);
    if (c.gpu_fp8_peak_flops_per_s > 0 && !j.contains("gemm_max_efficiency_fp8")) missing.push_back("gemm_max_efficiency_fp8");
  }
  if (missing.empty()) return;
  std::string names;
  for (const auto& f : missing) names += (names.empty() ? "cluster." : ", cluster.") + f;
  std::string gpus;
  for (const auto& n : gpu_preset_names()) gpus += (gpus.empty() ? "" : ", ") + n;
  throw InputError("cluster '" + c.name + "' names no catalog GPU and lacks " + names +
                   " (required to price its compute; name a catalog GPU with \"gpu\" (" + gpus +
                   ") and override only what differs, or give the fields: both clocks 0 state that the "
                   "efficiencies were measured at the training clock)");
}
}  // namespace

ClusterSpec cluster_from_json(const nlohmann::json& given) {
  const nlohmann::json j = apply_gpu(given);  // the catalog GPU's fields under the cluster's own
  Reader r(j, "cluster");
  ClusterSpec c;
  c.name = r.opt<std::string>("name", "custom");
  c.nodes = r.req<int>("nodes");
  c.gpus_per_node = r.req<int>("gpus_per_node");
  const int used_per_node = r.opt<int>("gpus_used_per_node", 0);
  c.gpu = r.opt<std::string>("gpu", "");
  c.gpu_name = r.opt<std::string>("gpu_name", "");
  c.gpu_peak_flops_per_s = r.req<double>("gpu_peak_flops_per_s");
  c.gpu_memory_bytes = r.req<double>("gpu_memory_bytes");
  c.gpu_memory_bandwidth_Bps = r.req<double>("gpu_memory_bandwidth_Bps");
  c.achieved_efficiency = r.req<double>("achieved_efficiency");
  c.gpu_sms = r.opt<int>("gpu_sms", 0);
  c.gemm_tile_m = r.opt<int>("gemm_tile_m", c.gemm_tile_m);
  c.gemm_tile_n = r.opt<int>("gemm_tile_n", c.gemm_tile_n);
  c.gemm_max_efficiency = r.opt<double>("gemm_max_efficiency", 0.0);
  c.memory_efficiency = r.opt<double>("memory_efficiency", 0.0);
  c.gpu_fp8_peak_flops_per_s = r.opt<double>("gpu_fp8_peak_flops_per_s", 0.0);
  c.gemm_max_efficiency_fp8 = r.opt<double>("gemm_max_efficiency_fp8", 0.0);
  c.gpu_compute_capability = r.opt<double>("gpu_compute_capability", 0.0);
  c.gpu_boost_clock_mhz = r.opt<double>("gpu_boost_clock_mhz", 0.0);
  c.gpu_sustained_clock_mhz = r.opt<double>("gpu_sustained_clock_mhz", 0.0);
  c.gpu_mxfp8_peak_flops_per_s = r.opt<double>("gpu_mxfp8_peak_flops_per_s", 0.0);
  c.gpu_fp4_peak_flops_per_s = r.opt<double>("gpu_fp4_peak_flops_per_s", 0.0);
  c.clock_calibration = r.opt<std::string>("clock_calibration", "");
  c.compute_source = r.opt<std::string>("compute_source", "");
  c.intra_node_link = r.opt<std::string>("intra_node_link", "pcie");
  c.intra_node_bandwidth_Bps = r.req<double>("intra_node_bandwidth_Bps");
  c.intra_node_latency_s = r.req<double>("intra_node_latency_s");
  c.fast_group_size = r.opt<int>("fast_group_size", 0);
  c.fast_group_link = r.opt<std::string>("fast_group_link", "");
  c.fast_group_bandwidth_Bps = r.opt<double>("fast_group_bandwidth_Bps", 0);
  c.fast_group_latency_s = r.opt<double>("fast_group_latency_s", 0);
  c.inter_node_link = r.opt<std::string>("inter_node_link", "");
  c.inter_node_bandwidth_Bps = r.req<double>("inter_node_bandwidth_Bps");
  c.inter_node_latency_s = r.req<double>("inter_node_latency_s");
  c.nics_per_node = r.req<int>("nics_per_node");  // required: one NIC where a node has eight changes the answer by half
  c.inter_node_topology = r.opt<std::string>("inter_node_topology", "star");
  c.cores_per_node = r.opt<int>("cores_per_node", 0);
  c.host_link_bandwidth_Bps = r.req<double>("host_link_bandwidth_Bps");
  c.intra_node_bus_efficiency = r.opt<double>("intra_node_bus_efficiency", 1.0);
  c.fast_group_bus_efficiency = r.opt<double>("fast_group_bus_efficiency", 1.0);
  c.inter_node_bus_efficiency = r.opt<double>("inter_node_bus_efficiency", 1.0);
  c.bus_efficiency_source = r.opt<std::string>("bus_efficiency_source", "");
  c.memory_margin = r.opt<double>("memory_margin", c.memory_margin);
  c.source = r.opt<std::string>("source", "");
  r.done();
  require_gpu_fields(j, c);
  if (used_per_node != 0 && c.gpus_per_node > 0 && c.nics_per_node > 0)
    set_gpus_used_per_node(c, used_per_node, "cluster.gpus_used_per_node");
  for (const AssumedFigure& a : assumed_figures(j)) c.gpu_assumed.emplace_back(a.field, a.note);
  if (!c.gpu.empty() && !given.contains("clock_calibration") && given.contains("gpu_sustained_clock_mhz") &&
      c.gpu_sustained_clock_mhz != gpu_entry(c.gpu).value("gpu_sustained_clock_mhz", 0.0))
    c.clock_calibration = "cluster '" + c.name + "' states its own clocks (see its compute_source)";
  check(c);
  return c;
}

ParallelPlan plan_from_json(const nlohmann::json& j) {
  Reader r(j, "plan");
  ParallelPlan p;
  p.dp = r.opt<int>("dp", 1);
  p.tp = r.opt<int>("tp", 1);
  p.pp = r.opt<int>("pp", 1);
  p.microbatch_size = r.opt<int>("microbatch_size", 1);
  p.num_microbatches = r.req<int>("num_microbatches");
  p.schedule = r.opt<std::string>("schedule", "1f1b");
  p.schedule_params = r.opt<nlohmann::json>("schedule_params", nlohmann::json::object());
  p.recompute = parse_recompute(r.opt<std::string>("recompute", "none"));
  p.recompute_modules = r.opt<std::vector<std::string>>("recompute_modules", {});
  p.cuda_graph_scope = r.opt<std::vector<std::string>>("cuda_graph_scope", {});
  p.rank_order = r.opt<std::string>("rank_order", "tp-dp-pp");
  p.stage_layers = r.opt<std::vector<int>>("stage_layers", {});
  p.pipeline_layout = r.opt<std::string>("pipeline_layout", "");
  p.account_for_embedding = r.opt<bool>("account_for_embedding_in_pipeline_split", false);
  p.account_for_loss = r.opt<bool>("account_for_loss_in_pipeline_split", false);
  p.sequence_parallel = r.opt<bool>("sequence_parallel", false);
  p.tp_overlap = schedules::parse_tp_overlap(r.opt<std::string>("tp_overlap", "blocking"), "plan.tp_overlap");
  auto per_stage = r.opt<std::vector<std::string>>("stage_tp_overlap", {});
  for (size_t i = 0; i < per_stage.size(); ++i)
    p.stage_tp_overlap.push_back(schedules::parse_tp_overlap(per_stage[i], "plan.stage_tp_overlap[" + std::to_string(i) + "]"));
  p.overlap_grad_reduce = r.opt<bool>("overlap_grad_reduce", false);
  p.grad_reduce_at = schedules::parse_grad_reduce_at(r.opt<std::string>("grad_reduce_at", "auto"), "plan.grad_reduce_at");
  p.grad_bucket_bytes = r.opt<double>("grad_bucket_bytes", p.grad_bucket_bytes);
  p.preemptive_comm = r.opt<bool>("preemptive_comm", false);
  p.overlap_param_gather = r.opt<bool>("overlap_param_gather", false);
  p.fp8_param_gather = r.opt<bool>("fp8_param_gather", false);
  p.stack = r.opt<std::string>("stack", p.stack);
  p.zero = r.opt<int>("zero", 0);
  p.cp = r.opt<int>("cp", 1);
  p.ep = r.opt<int>("ep", 1);
  p.etp = r.opt<int>("etp", 0);
  p.moe_dispatcher = r.opt<std::string>("moe_dispatcher", "alltoall");
  p.offload_layers = r.opt<int>("offload_layers", 0);
  p.reshard_after_forward = r.opt<bool>("reshard_after_forward", true);
  p.shard_group = r.opt<int>("shard_group", 0);
  p.layer_tp = r.opt<std::vector<int>>("layer_tp", {});
  r.done();
  check(p);
  return p;
}

namespace {
void check_attention_shape(const std::string& w, const ModelSpec& m) {
  for (auto [field, v] : {std::pair{"head_dim", m.head_dim}, {"v_head_dim", m.v_head_dim}, {"q_lora_rank", m.q_lora_rank},
                          {"kv_lora_rank", m.kv_lora_rank}, {"qk_rope_head_dim", m.qk_rope_head_dim}})
    if (v < 0) bad(w, field, std::to_string(v), "must be >= 0 (0: the default)");
  if (m.kv_lora_rank == 0 && (m.q_lora_rank > 0 || m.qk_rope_head_dim > 0))
    bad(w, m.q_lora_rank > 0 ? "q_lora_rank" : "qk_rope_head_dim",
        std::to_string(m.q_lora_rank > 0 ? m.q_lora_rank : m.qk_rope_head_dim),
        "belongs to multi-head latent attention: set kv_lora_rank > 0 as well, or leave it 0");
  if (m.kv_lora_rank > 0 && m.num_kv_heads != 0)
    bad(w, "num_kv_heads", std::to_string(m.num_kv_heads),
        "must be 0 with multi-head latent attention (kv_lora_rank > 0): every head has its keys and values");
}

void check_moe_pattern(const std::string& w, const ModelSpec& m) {
  const std::vector<int>& p = m.moe_layer_pattern;
  if (p.empty()) return;
  std::string text;
  for (int x : p) text += (text.empty() ? "[" : ", ") + std::to_string(x);
  text += "]";
  if (static_cast<int>(p.size()) > m.num_layers - m.dense_layers)
    bad(w, "moe_layer_pattern", text, "is longer than the layers after dense_layers (" +
        std::to_string(m.num_layers - m.dense_layers) + ")");
  for (int x : p)
    if (x != 0 && x != 1) bad(w, "moe_layer_pattern", text, "holds 0 (dense MLP) or 1 (experts) per layer");
  if (std::find(p.begin(), p.end(), 1) == p.end())
    bad(w, "moe_layer_pattern", text, "has no MoE layer (at least one 1; or num_experts 0 for a dense model)");
}

void check_window(const std::string& w, const ModelSpec& m) {
  if (m.mtp_layers < 0 || m.mtp_layers > 8)
    bad(w, "mtp_layers", std::to_string(m.mtp_layers), "must be in [0, 8] (0: no multi-token prediction)");
  if (m.sliding_window < 0) bad(w, "sliding_window", std::to_string(m.sliding_window), "must be >= 0 (0: full attention)");
  if (!(m.activation_clamp >= 0) || !std::isfinite(m.activation_clamp))
    bad(w, "activation_clamp", num(m.activation_clamp), "must be >= 0 (0: no clamp)");
  if (!(m.rope_mscale > 0) || !std::isfinite(m.rope_mscale))
    bad(w, "rope_mscale", num(m.rope_mscale), "must be > 0 (1: RoPE's cos and sin unscaled)");
  if (m.rope_mscale != 1 && m.kv_lora_rank > 0)
    bad(w, "rope_mscale", num(m.rope_mscale), "1 with multi-latent attention (its rotary part is priced as fused)");
  if (m.activation_clamp > 0 && m.kind != ModelKind::Llama)
    bad(w, "activation_clamp", num(m.activation_clamp), "clamps a gated MLP's halves: kind llama only (0: no clamp)");
  const std::vector<int>& p = m.sliding_window_pattern;
  if (p.empty()) return;
  if (m.sliding_window == 0)
    bad(w, "sliding_window_pattern", std::to_string(p.size()) + " entries", "needs sliding_window > 0");
  for (int x : p)
    if (x != 0 && x != 1)
      bad(w, "sliding_window_pattern", std::to_string(x), "holds 0 (full attention) or 1 (windowed) per layer");
  if (static_cast<int>(p.size()) > m.num_layers)
    bad(w, "sliding_window_pattern", std::to_string(p.size()) + " entries", "is longer than num_layers");
}

void check_moe(const std::string& w, const ModelSpec& m) {
  if (m.num_experts < 0) bad(w, "num_experts", std::to_string(m.num_experts), "must be >= 0 (0: a dense model)");
  if (!is_moe(m)) {
    for (auto [field, v] : {std::pair{"experts_per_token", m.experts_per_token}, {"expert_ffn_hidden_size", m.expert_ffn_hidden_size},
                            {"num_shared_experts", m.num_shared_experts}, {"dense_layers", m.dense_layers},
                            {"moe_node_limit", m.moe_node_limit}})
      if (v != 0) bad(w, field, std::to_string(v), kMoeOnly);
    if (!m.moe_layer_pattern.empty()) bad(w, "moe_layer_pattern", std::to_string(m.moe_layer_pattern.size()) + " entries", kMoeOnly);
    if (m.moe_capacity_factor != 0) bad(w, "moe_capacity_factor", num(m.moe_capacity_factor), kMoeOnly);
    if (m.moe_load_imbalance != 1) bad(w, "moe_load_imbalance", num(m.moe_load_imbalance), kMoeOnly);
    return;
  }
  if (m.experts_per_token < 1 || m.experts_per_token > m.num_experts)
    bad(w, "experts_per_token", std::to_string(m.experts_per_token),
        "must be in [1, num_experts = " + std::to_string(m.num_experts) + "]");
  positive(w, "expert_ffn_hidden_size", m.expert_ffn_hidden_size);
  if (m.num_shared_experts < 0) bad(w, "num_shared_experts", std::to_string(m.num_shared_experts), "must be >= 0");
  if (m.dense_layers < 0 || m.dense_layers >= m.num_layers)
    bad(w, "dense_layers", std::to_string(m.dense_layers),
        "must be in [0, num_layers = " + std::to_string(m.num_layers) + "): the leading layers with a dense MLP");
  check_moe_pattern(w, m);
  if (m.moe_node_limit < 0) bad(w, "moe_node_limit", std::to_string(m.moe_node_limit), "must be >= 0 (0: no limit)");
  if (m.moe_capacity_factor != 0 && !(m.moe_capacity_factor >= 1 && m.moe_capacity_factor <= 64))
    bad(w, "moe_capacity_factor", num(m.moe_capacity_factor), "must be 0 (dropless) or in [1, 64]");
  if (!(m.moe_load_imbalance >= 1 && m.moe_load_imbalance <= 64))
    bad(w, "moe_load_imbalance", num(m.moe_load_imbalance), "must be in [1, 64] (1: every rank gets its mean share)");
}
}  // namespace

void check(const ModelSpec& m) {
  const std::string w = "model '" + m.name + "'";
  positive(w, "num_layers", m.num_layers);
  positive(w, "hidden_size", m.hidden_size);
  positive(w, "num_heads", m.num_heads);
  positive(w, "ffn_hidden_size", m.ffn_hidden_size);
  positive(w, "seq_length", m.seq_length);
  positive(w, "vocab_size", m.vocab_size);
  if (m.hidden_size % m.num_heads != 0)
    bad(w, "hidden_size", std::to_string(m.hidden_size), "must be a multiple of num_heads = " + std::to_string(m.num_heads));
  if (m.num_kv_heads < 0 || (m.num_kv_heads > 0 && m.num_heads % m.num_kv_heads != 0))
    bad(w, "num_kv_heads", std::to_string(m.num_kv_heads),
        "must divide num_heads = " + std::to_string(m.num_heads) + " (each key/value head serves a group of query heads), or be 0 for multi-head attention");
  for (auto [field, v] : {std::pair{"bytes_per_param", m.bytes_per_param}, {"bytes_per_activation", m.bytes_per_activation}})
    if (v != 1 && v != 2 && v != 4) bad(w, field, std::to_string(v), "allowed: 1, 2, 4");
  if (m.bytes_per_grad != 0 && m.bytes_per_grad != 2 && m.bytes_per_grad != 4)
    bad(w, "bytes_per_grad", std::to_string(m.bytes_per_grad), "allowed: 0 (as bytes_per_param), 2, 4");
  if (m.bytes_per_master != -1 && m.bytes_per_master != 0 && m.bytes_per_master != 2 && m.bytes_per_master != 4)
    bad(w, "bytes_per_master", std::to_string(m.bytes_per_master), "allowed: -1 (4 where the weights are narrower, else none), 0, 2, 4");
  if (m.bytes_per_master == 2 && m.bytes_per_param != 2)
    bad(w, "bytes_per_master", "2", "a 2-byte master (16 low bits, or a 16-bit copy) needs 16-bit weights (bytes_per_param 2)");
  if (m.bytes_per_moment != 1 && m.bytes_per_moment != 2 && m.bytes_per_moment != 4)
    bad(w, "bytes_per_moment", std::to_string(m.bytes_per_moment), "allowed: 1, 2, 4");
  check_attention_shape(w, m);
  check_moe(w, m);
  if (!m.fp8 && m.fp8_recipe != Fp8Recipe::Delayed)
    bad(w, "fp8_recipe", std::string(fp8_recipe_name(m.fp8_recipe)) + " with fp8 = false",
        "a recipe applies to an FP8 model: set fp8 (--fp8-recipe does), or drop the recipe");
  check_window(w, m);
  if (m.fp8 && m.bytes_per_activation != 2)
    bad(w, "fp8", "true with bytes_per_activation = " + std::to_string(m.bytes_per_activation),
        "FP8 products take 16-bit (bf16) activations as Transformer Engine's do: bytes_per_activation = 2");
}

namespace {
// Both clocks or neither; the sustained one no higher than the boost; only where compute is
// priced by shape (a flat achieved_efficiency is measured end to end, clocks included).
void check_clocks(const std::string& w, const ClusterSpec& c) {
  const double boost = c.gpu_boost_clock_mhz, held = c.gpu_sustained_clock_mhz;
  if (boost == 0 && held == 0) return;
  if (c.gpu_sms == 0)
    bad(w, "gpu_boost_clock_mhz", num(boost), "clocks apply to compute by shape only: set gpu_sms, or leave both clocks 0");
  if (!(boost > 0)) bad(w, "gpu_boost_clock_mhz", num(boost), "must be > 0 when gpu_sustained_clock_mhz is given");
  if (!(held > 0 && held <= boost))
    bad(w, "gpu_sustained_clock_mhz", num(held), "must be in (0, gpu_boost_clock_mhz = " + num(boost) + "]");
}
}  // namespace

void check(const ClusterSpec& c) {
  const std::string w = "cluster '" + c.name + "'";
  positive(w, "nodes", c.nodes);
  positive(w, "gpus_per_node", c.gpus_per_node);
  positive(w, "gpu_peak_flops_per_s", c.gpu_peak_flops_per_s);
  positive(w, "gpu_memory_bytes", c.gpu_memory_bytes);
  positive(w, "gpu_memory_bandwidth_Bps", c.gpu_memory_bandwidth_Bps);
  if (!(c.achieved_efficiency > 0 && c.achieved_efficiency <= 1))
    bad(w, "achieved_efficiency", num(c.achieved_efficiency), "must be in (0, 1]");
  if (c.gpu_sms < 0) bad(w, "gpu_sms", std::to_string(c.gpu_sms), "must be 0 (compute by shape off) or more");
  if (c.gpu_sms > 0) {
    positive(w, "gemm_tile_m", c.gemm_tile_m);
    positive(w, "gemm_tile_n", c.gemm_tile_n);
    for (auto [field, v] : {std::pair{"gemm_max_efficiency", c.gemm_max_efficiency}, {"memory_efficiency", c.memory_efficiency}})
      if (!(v > 0 && v <= 1)) bad(w, field, num(v), "must be in (0, 1] when gpu_sms > 0");
  }
  check_clocks(w, c);
  non_negative(w, "gpu_fp8_peak_flops_per_s", c.gpu_fp8_peak_flops_per_s);
  non_negative(w, "gpu_mxfp8_peak_flops_per_s", c.gpu_mxfp8_peak_flops_per_s);
  non_negative(w, "gpu_fp4_peak_flops_per_s", c.gpu_fp4_peak_flops_per_s);
  non_negative(w, "gpu_compute_capability", c.gpu_compute_capability);
  if (c.gpu_fp8_peak_flops_per_s > 0 && c.gpu_sms > 0 && !(c.gemm_max_efficiency_fp8 > 0 && c.gemm_max_efficiency_fp8 <= 1))
    bad(w, "gemm_max_efficiency_fp8", num(c.gemm_max_efficiency_fp8), "must be in (0, 1] when gpu_fp8_peak_flops_per_s > 0");
  if (c.intra_node_link != "pcie" && c.intra_node_link != "nvlink" && c.intra_node_link != "nvswitch")
    bad(w, "intra_node_link", "\"" + c.intra_node_link + "\"", "allowed: pcie, nvlink, nvswitch");
  positive(w, "intra_node_bandwidth_Bps", c.intra_node_bandwidth_Bps);
  non_negative(w, "intra_node_latency_s", c.intra_node_latency_s);
  if (c.fast_group_size < 0) bad(w, "fast_group_size", std::to_string(c.fast_group_size), "must be 0 (none) or more");
  if (c.fast_group_size > 1) {
    if (c.gpus_per_node % c.fast_group_size != 0)
      bad(w, "fast_group_size", std::to_string(c.fast_group_size), "must divide gpus_per_node = " + std::to_string(c.gpus_per_node));
    positive(w, "fast_group_bandwidth_Bps", c.fast_group_bandwidth_Bps);
    non_negative(w, "fast_group_latency_s", c.fast_group_latency_s);
  }
  positive(w, "inter_node_bandwidth_Bps", c.inter_node_bandwidth_Bps);
  non_negative(w, "inter_node_latency_s", c.inter_node_latency_s);
  positive(w, "nics_per_node", c.nics_per_node);
  if (c.cores_per_node < 0)
    bad(w, "cores_per_node", std::to_string(c.cores_per_node), "must be >= 0 (0: a device per rank)");
  if (c.inter_node_topology != "star" && c.inter_node_topology != "fat-tree")
    bad(w, "inter_node_topology", "\"" + c.inter_node_topology + "\"", "allowed: star, fat-tree");
  positive(w, "host_link_bandwidth_Bps", c.host_link_bandwidth_Bps);
  for (auto [field, v] : {std::pair{"intra_node_bus_efficiency", c.intra_node_bus_efficiency},
                          {"fast_group_bus_efficiency", c.fast_group_bus_efficiency},
                          {"inter_node_bus_efficiency", c.inter_node_bus_efficiency}})
    if (!(v > 0 && v <= 1)) bad(w, field, num(v), "must be in (0, 1]");
  if (!(c.memory_margin >= 0 && c.memory_margin < 1))
    bad(w, "memory_margin", num(c.memory_margin), "must be in [0, 1): the fraction of GPU memory a plan leaves free");
}

void check(const ParallelPlan& p) {
  const std::string w = "plan";
  at_least_one(w, "dp", p.dp);
  at_least_one(w, "tp", p.tp);
  at_least_one(w, "pp", p.pp);
  at_least_one(w, "cp", p.cp);
  at_least_one(w, "ep", p.ep);
  if (p.offload_layers < 0) bad(w, "offload_layers", std::to_string(p.offload_layers), "must be >= 0 (0: none)");
  if (!p.recompute_modules.empty() && p.recompute != RecomputePolicy::Selective)
    bad(w, "recompute_modules", std::to_string(p.recompute_modules.size()) + " modules",
        "apply to selective recomputation only (allowed: recompute = selective, or no modules)");
  recompute_modules_of(p);  // names checked
  cuda_graph_scopes_of(p);   // names and combinations checked
  if (p.moe_dispatcher != "alltoall" && p.moe_dispatcher != "allgather" && p.moe_dispatcher != "flex")
    bad(w, "moe_dispatcher", "'" + p.moe_dispatcher + "'", "allowed: alltoall, allgather, flex (DeepEP)");
  if (p.etp != 0 && p.etp != 1 && p.etp != p.tp)
    bad(w, "etp", std::to_string(p.etp), "allowed: 0 (the experts take tp = " + std::to_string(p.tp) + "), 1 (whole experts), or tp");
  if (expert_ranks(p) % p.ep != 0)
    bad(w, "ep", std::to_string(p.ep),
        expert_tp(p) == 1 && p.tp > 1
            ? "must divide tp x dp" + std::string(p.cp > 1 ? " x cp = " : " = ") + std::to_string(expert_ranks(p)) +
                  " (with whole experts, etp 1, the expert-parallel ranks come from the tp and data-parallel ranks)"
            : "must divide dp" + std::string(p.cp > 1 ? " x cp = " : " = ") + std::to_string(p.dp * p.cp) +
                  " (the expert-parallel ranks are data-parallel ranks that hold different experts; Megatron-Core)");
  at_least_one(w, "microbatch_size", p.microbatch_size);
  at_least_one(w, "num_microbatches", p.num_microbatches);
  if (!p.schedule_params.is_object()) bad(w, "schedule_params", p.schedule_params.dump(), "must be a JSON object");
  std::vector<std::string> parts;
  std::string cur;
  for (char ch : p.rank_order + "-") {
    if (ch == '-') {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  std::vector<std::string> sorted = parts;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != std::vector<std::string>{"dp", "pp", "tp"} && sorted != std::vector<std::string>{"cp", "dp", "pp", "tp"})
    bad(w, "rank_order", "\"" + p.rank_order + "\"",
        "a permutation of tp, dp, pp (or tp, cp, dp, pp) joined by '-', fastest first, e.g. tp-dp-pp or tp-cp-dp-pp");
  for (size_t i = 0; i < p.stage_layers.size(); ++i)
    if (p.stage_layers[i] < (i == 0 || i + 1 == p.stage_layers.size() ? 0 : 1))
      bad(w, ("stage_layers[" + std::to_string(i) + "]").c_str(), std::to_string(p.stage_layers[i]),
          "must be at least 1 (0 on the first and last stage, which hold the embedding and the head)");
  const int splits = (p.stage_layers.empty() ? 0 : 1) + (p.pipeline_layout.empty() ? 0 : 1) +
                     (p.account_for_embedding || p.account_for_loss ? 1 : 0);
  if (splits > 1)
    bad(w, "pipeline_layout", "\"" + p.pipeline_layout + "\"",
        "one way of splitting the layers: stage_layers, pipeline_layout, or account_for_embedding/loss_in_pipeline_split");
  positive(w, "grad_bucket_bytes", p.grad_bucket_bytes);
  for (size_t i = 0; i < p.layer_tp.size(); ++i) {
    const int d = p.layer_tp[i];
    if (d < 1 || p.tp % d != 0 || (d & (d - 1)) != 0)
      bad(w, ("layer_tp[" + std::to_string(i) + "]").c_str(), std::to_string(d),
          "must be a power of two dividing tp = " + std::to_string(p.tp));
  }
  if (p.zero < 0 || p.zero > 3)
    bad(w, "zero", std::to_string(p.zero),
        "allowed: 0 (no sharding), 1 (optimizer states), 2 (and gradients), 3 (and parameters, FSDP)");
  if (p.overlap_param_gather && !gathers_after_step(p))
    bad(w, "overlap_param_gather", "true with zero = " + std::to_string(p.zero),
        p.zero == 3 ? "zero 3 gathers each layer before its forward, behind the previous layer's compute; the "
                      "option is for zero 1 and 2, which gather all parameters after the step"
                    : "overlapping the parameter all-gather needs a distributed optimizer (zero 1 or 2), which gathers them");
  if (p.fp8_param_gather && (p.zero < 1 || p.zero > 2))
    bad(w, "fp8_param_gather", "true with zero = " + std::to_string(p.zero),
        p.zero == 3 ? "zero 3 gathers FP8 weights whenever the model is FP8; the option is for zero 1 and 2"
                    : "keeping only FP8 weights needs the distributed optimizer's fp32 master (zero 1 or 2)");
  if (p.shard_group != 0 && p.zero != 3)
    bad(w, "shard_group", std::to_string(p.shard_group) + " with zero = " + std::to_string(p.zero),
        "hybrid sharding shards parameters (zero 3); use 0 otherwise");
  if (p.shard_group < 0 || (p.shard_group > 0 && (p.dp * p.cp) % p.shard_group != 0))
    bad(w, "shard_group", std::to_string(p.shard_group),
        "must be 0 (the whole dp group) or a divisor of dp" + std::string(p.cp > 1 ? " x cp = " : " = ") +
            std::to_string(p.dp * p.cp));
  if (!p.reshard_after_forward && p.zero != 3)
    bad(w, "reshard_after_forward", "false with zero = " + std::to_string(p.zero),
        "only zero 3 gathers layers for their passes; leave it true otherwise");
  load_stack(p.stack);  // InputError naming the presets when unknown
  // Gradients summed over several microbatches cannot be sharded without a reduce-scatter
  // after every microbatch (DeepSpeed's ZeRO-2 does that, and refuses pipeline parallelism);
  // stagecraft reduces once per iteration, so it shards gradients only without accumulation.
  if (p.zero == 2 && p.num_microbatches > 1)
    bad(w, "zero", "2 with num_microbatches = " + std::to_string(p.num_microbatches),
        "zero 2 shards the gradients, which accumulating over several microbatches would need a reduce-scatter after "
        "every microbatch; use zero 1 (Megatron-LM's distributed optimizer) or num_microbatches = 1");
}

void check_fit(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p) {
  if (p.num_gpus() > c.num_gpus())
    throw InputError("plan: dp*tp*pp" + std::string(p.cp > 1 ? "*cp" : "") + " = " + std::to_string(p.dp) + "*" +
                     std::to_string(p.tp) + "*" + std::to_string(p.pp) + (p.cp > 1 ? "*" + std::to_string(p.cp) : "") +
                     " = " + std::to_string(p.num_gpus()) + " GPUs, but cluster '" + c.name + "' has " +
                     std::to_string(c.num_gpus()) + " (" + std::to_string(c.nodes) + " nodes x " +
                     std::to_string(c.gpus_per_node) + "); a plan uses at most the cluster's GPUs");
  if (m.num_heads % p.tp != 0)
    bad("plan", "tp", std::to_string(p.tp), "must divide the model's num_heads = " + std::to_string(m.num_heads));
  if (p.fp8_param_gather && !m.fp8)
    bad("plan", "fp8_param_gather", "true", "needs an FP8 model (model.fp8 = true, --fp8 or --fp8-recipe)");
  if (kv_heads(m) % p.tp != 0)
    bad("plan", "tp", std::to_string(p.tp),
        "must divide the model's num_kv_heads = " + std::to_string(kv_heads(m)) + " (each rank holds whole key/value heads, as Megatron-LM's query groups)");
  if (m.ffn_hidden_size % p.tp != 0)
    bad("plan", "tp", std::to_string(p.tp), "must divide the model's ffn_hidden_size = " + std::to_string(m.ffn_hidden_size));
  if (!p.layer_tp.empty() && static_cast<int>(p.layer_tp.size()) != m.num_layers)
    bad("plan", "layer_tp", std::to_string(p.layer_tp.size()) + " entries",
        "one degree per transformer layer: the model has " + std::to_string(m.num_layers));
  for (size_t i = 0; i < p.layer_tp.size(); ++i)
    if (p.layer_tp[i] != p.tp)
      bad("plan", ("layer_tp[" + std::to_string(i) + "]").c_str(), std::to_string(p.layer_tp[i]),
          "estimate, compare, simulate and train run every layer at tp = " + std::to_string(p.tp) +
              "; per-layer degrees are priced by `stagecraft plan --layer-tp` (Oases Sec. V) only, not yet executed");
  check_tp_overlap(p);
  check_fp8(m, c);
  if (!cp_divides(m, p.cp)) {
    if (m.attention_kernel != AttentionKernel::Fused)
      bad("plan", "cp", std::to_string(p.cp) + " with model '" + m.name + "' on materialized attention",
          "context parallelism runs a fused attention kernel per key/value chunk (Megatron-Core through Transformer "
          "Engine); give --attention-kernel fused, or cp = 1");
    bad("plan", "cp", std::to_string(p.cp),
        "2 cp must divide the model's seq_length = " + std::to_string(m.seq_length) +
            " (each rank takes two chunks of s / 2cp tokens, balancing the causal mask)");
  }
  check_moe_plan(m, p);
}

void check_moe_plan(const ModelSpec& m, const ParallelPlan& p) {
  if (!is_moe(m)) {
    if (p.ep > 1)
      bad("plan", "ep", std::to_string(p.ep), "expert parallelism needs a model with experts; model '" + m.name + "' has none (use ep = 1)");
    return;
  }
  if (!ep_divides(m, p.ep))
    bad("plan", "ep", std::to_string(p.ep), "must divide the model's num_experts = " + std::to_string(m.num_experts));
  if (m.expert_ffn_hidden_size % expert_tp(p) != 0)
    bad("plan", "tp", std::to_string(p.tp),
        "must divide the model's expert_ffn_hidden_size = " + std::to_string(m.expert_ffn_hidden_size) +
            " (each tp rank holds a slice of every expert it has)");
  if (needs_sequence_parallel(m, p.tp) && !p.sequence_parallel)
    bad("plan", "sequence_parallel", "false with tp = " + std::to_string(p.tp) + " and experts",
        "Megatron-Core runs experts under tensor parallelism only with sequence parallelism (arguments.py); add "
        "--sequence-parallel or use tp = 1");
  if (p.tp > 1 && (p.tp_overlap != schedules::TpOverlap::Blocking || !p.stage_tp_overlap.empty()))
    bad("plan", "tp_overlap", std::string(schedules::tp_overlap_name(p.tp_overlap)) + " with experts",
        "the experts' all-to-all is priced with blocking tp collectives only; use --tp-overlap blocking");
  if (p.zero == 3)
    bad("plan", "zero", "3 with experts", "sharding expert parameters (FSDP over the expert-data-parallel group) is not "
        "modelled; use zero 0, 1 or 2");
  if (!p.layer_tp.empty())
    bad("plan", "layer_tp", "given with experts", "per-layer tensor-parallel degrees are not modelled for MoE layers");
}

void check_fp8(const ModelSpec& m, const ClusterSpec& c) {
  if (m.fp8 && m.fp8_recipe == Fp8Recipe::Mxfp8 && !(c.gpu_mxfp8_peak_flops_per_s > 0))
    bad("model '" + m.name + "'", "fp8_recipe", "mxfp8",
        "cluster '" + c.name + "' (" + c.gpu_name + ") has no MXFP8 tensor cores (gpu_mxfp8_peak_flops_per_s = 0; "
        "Transformer Engine runs MXFP8 on Blackwell only); allowed here: delayed, current, blockwise");
  if (m.fp8 && !(c.gpu_fp8_peak_flops_per_s > 0 && c.gpu_sms > 0))
    bad("model '" + m.name + "'", "fp8", "true",
        "cluster '" + c.name + "' (" + c.gpu_name + ") " +
            (c.gpu_fp8_peak_flops_per_s > 0 ? "prices compute at a flat rate (gpu_sms = 0); FP8 is priced by shape"
                                             : "has no FP8 tensor cores (gpu_fp8_peak_flops_per_s = 0)") +
            "; allowed: a cluster of GPUs with FP8 (H100, H200) priced by shape, or drop --fp8");
}

void check_tp_overlap(const ParallelPlan& p) {
  if (p.tp == 1) return;
  std::vector<schedules::TpOverlap> modes = p.stage_tp_overlap;
  modes.insert(modes.begin(), p.tp_overlap);
  for (size_t i = 0; i < modes.size(); ++i)
    if (modes[i] == schedules::TpOverlap::Te && !p.sequence_parallel)
      bad("plan", i == 0 ? std::string("tp_overlap") : "stage_tp_overlap[" + std::to_string(i - 1) + "]", "te",
          "Transformer Engine's overlap needs sequence parallelism (Megatron-LM arguments.py: \"Tensor parallel "
          "communication/GEMM overlap can happen only when sequence parallelism is enabled\"); add --sequence-parallel");
  if (p.microbatch_size % 2 == 0) return;
  for (size_t i = 0; i < modes.size(); ++i) {
    if (schedules::tp_overlap_sub_batches(modes[i]) == 1) continue;
    const std::string field = i == 0 ? "tp_overlap" : "stage_tp_overlap[" + std::to_string(i - 1) + "]";
    bad("plan", "microbatch_size", std::to_string(p.microbatch_size),
        "must be even with " + field + " '" + std::string(schedules::tp_overlap_name(modes[i])) +
            "' (each microbatch splits into two sub-batches; Merak Sec. 5.3); use --tp-overlap blocking or an even size");
  }
}

bool tp_overlap_applies(schedules::TpOverlap mode, int tp) { return mode == schedules::TpOverlap::Blocking || tp > 1; }

void check_tp_overlap_applies(const ParallelPlan& p) {
  std::vector<schedules::TpOverlap> modes = p.stage_tp_overlap;
  modes.insert(modes.begin(), p.tp_overlap);
  for (size_t i = 0; i < modes.size(); ++i)
    if (!tp_overlap_applies(modes[i], p.tp))
      bad("plan", i == 0 ? std::string("tp_overlap") : "stage_tp_overlap[" + std::to_string(i - 1) + "]",
          std::string(schedules::tp_overlap_name(modes[i])) + " with tp = " + std::to_string(p.tp),
          "it overlaps tensor-parallel collectives, and tp = 1 has none; Megatron-LM refuses --tp-comm-overlap at tp 1 "
          "too; allowed: --tp-overlap blocking, or --tp above 1");
}

void check_sequence_parallel_applies(const ParallelPlan& p) {
  if (p.sequence_parallel && p.tp == 1)
    bad("plan", "sequence_parallel", "true with tp = 1",
        "it splits the tensor-parallel group's activations along the sequence, and tp = 1 has no group; Megatron-LM "
        "turns it off at tp 1; allowed: --tp above 1, or no --sequence-parallel");
}

void set_nodes(ClusterSpec& c, int nodes, const std::string& field) {
  if (nodes < 1) throw InputError(field + " = " + std::to_string(nodes) + " is invalid (must be at least 1)");
  if (nodes == c.nodes) return;
  c.name += " (" + std::to_string(nodes) + " nodes)";
  c.nodes = nodes;
}

void set_gpus_used_per_node(ClusterSpec& c, int used, const std::string& field) {
  const int gpus = c.node_gpus > 0 ? c.node_gpus : c.gpus_per_node, nics = c.node_nics > 0 ? c.node_nics : c.nics_per_node;
  if (used < 0 || used > gpus)
    throw InputError(field + " = " + std::to_string(used) + " is invalid (must be in [1, " + std::to_string(gpus) +
                     "], the GPUs of one node of cluster '" + c.name + "', or 0 for all of them)");
  if (used == 0 || used == gpus) {
    c.gpus_per_node = gpus;
    c.nics_per_node = nics;
    c.node_gpus = c.node_nics = 0;
    return;
  }
  c.node_gpus = gpus;
  c.node_nics = nics;
  c.gpus_per_node = used;
  c.nics_per_node = std::max(1, nics * used / gpus);
  if (c.fast_group_size > 1 && used % c.fast_group_size != 0)
    throw InputError(field + " = " + std::to_string(used) + " is invalid (must be a multiple of fast_group_size = " +
                     std::to_string(c.fast_group_size) + ")");
}

void set_memory_margin(ClusterSpec& c, double margin, const std::string& field) {
  if (!(margin >= 0 && margin < 1)) {
    std::ostringstream v;
    v << margin;
    throw InputError(field + " = " + v.str() + " is invalid (must be in [0, 1): the fraction of GPU memory left free)");
  }
  c.memory_margin = margin;
}

}  // namespace stagecraft::costmodel
