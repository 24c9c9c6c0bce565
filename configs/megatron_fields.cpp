// Megatron-Core's fields onto stagecraft's model and plan (docs/import.md has the table). Names
// and defaults: NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553,
// megatron/training/arguments.py and megatron/core/transformer/transformer_config.py.
#include <algorithm>
#include <cmath>

#include "configs/megatron_fields.h"
#include "costmodel/pipeline_split.h"
#include "schedules/error.h"

namespace stagecraft::configs {
namespace {

using costmodel::ModelSpec;
using costmodel::ParallelPlan;

std::string s(long v) { return std::to_string(v); }

void read_degrees(FlagReader& r, Imported& in) {
  ParallelPlan& p = in.plan;
  p.tp = r.count("tensor-model-parallel-size", "tp", 1);
  p.pp = r.count("pipeline-model-parallel-size", "pp", 1);
  p.cp = r.count("context-parallel-size", "cp", 1);
  p.ep = r.count("expert-model-parallel-size", "ep", 1);
  if (const std::optional<int> etp = r.integer("expert-tensor-parallel-size", "etp (1: whole experts; tp: the default)")) {
    if (*etp != 1 && *etp != p.tp)
      throw InputError(r.where() + ": " + r.name("expert-tensor-parallel-size") + " = " + s(*etp) + " with " +
                       r.name("tensor-model-parallel-size") + " = " + s(p.tp) + " is not modelled (allowed: 1, or tp)");
    p.etp = *etp == p.tp ? 0 : 1;
  }
  if (r.boolean("sequence-parallel", "sequence_parallel").value_or(false)) {
    // Megatron-LM turns it off at tp 1 with a warning (megatron/training/arguments.py,
    // "Disabling sequence parallelism because tensor model parallelism is disabled").
    if (p.tp > 1) p.sequence_parallel = true;
    else in.report.assume(r.name("sequence-parallel"), "true", "off: tp = 1, as Megatron-LM turns it off");
  }
  if (r.boolean("use-tp-pp-dp-mapping", "rank_order tp-pp-dp").value_or(false)) p.rank_order = "tp-pp-dp";
  p.microbatch_size = r.count("micro-batch-size", "microbatch_size", 1);
  if (r.has("global-batch-size")) in.global_batch = r.count("global-batch-size", "num_microbatches = global batch / (micro batch * dp)", 1);
  else in.report.assume("--global-batch-size", "", "micro batch * dp: one microbatch per iteration (Megatron-LM's default)");
}

// The virtual pipeline: chunks per rank from either flag (the layers known), and the group size.
void read_virtual_pipeline(FlagReader& r, Imported& in, int layers) {
  ParallelPlan& p = in.plan;
  int chunks = 1;
  chunks = r.count("num-virtual-stages-per-pipeline-rank", "chunks (interleaved-1f1b)", 1);
  if (r.has("num-layers-per-virtual-pipeline-stage")) {
    const std::optional<int> per = r.count("num-layers-per-virtual-pipeline-stage", "chunks = layers / (pp * this)", 1);
    if (layers % (p.pp * *per) != 0)
      throw InputError(r.where() + ": --num-layers = " + s(layers) + " is not a multiple of " + r.name("pipeline-model-parallel-size") +
                       " * " + r.name("num-layers-per-virtual-pipeline-stage") + " = " + s(static_cast<long>(p.pp) * *per) +
                       " (contradictory values)");
    chunks = layers / (p.pp * *per);
  }
  std::optional<int> group;
  for (const char* k : {"microbatch-group-size-per-vp-stage", "microbatch-group-size-per-virtual-pipeline-stage"})
    if (r.has(k)) group = r.count(k, "schedule param microbatch_group_size_per_vp_stage", 1);
  if (p.pp > 1 && chunks > 1) {
    p.schedule = "interleaved-1f1b";
    p.schedule_params["chunks"] = chunks;
    if (group) p.schedule_params["microbatch_group_size_per_vp_stage"] = *group;
  } else {
    p.schedule = "1f1b";
  }
}

// Megatron-Core's split of the layers over the stages (costmodel/pipeline_split.h): a layout,
// whose entries / pp are the chunks (Megatron-LM's arguments.py derives them from it;
// Megatron-Bridge sets both, which must then agree), or the embedding and loss counted as layers.
void read_pipeline_split(FlagReader& r, Imported& in, const ModelSpec& m) {
  ParallelPlan& p = in.plan;
  if (const std::optional<std::string> l = r.text("pipeline-model-parallel-layout", "pipeline_layout")) {
    const int stages = costmodel::layout_stage_count(*l);
    if (stages % p.pp != 0)
      throw InputError(r.where() + ": " + r.name("pipeline-model-parallel-layout") + " has " + s(stages) + " stages, not a multiple of " +
                       r.name("pipeline-model-parallel-size") + " = " + s(p.pp) + " (allowed: pp x virtual stages entries)");
    const int chunks = stages / p.pp, given = p.schedule == "interleaved-1f1b" ? p.schedule_params.value("chunks", 1) : 1;
    if (given != chunks && (r.has("num-virtual-stages-per-pipeline-rank") || r.has("num-layers-per-virtual-pipeline-stage")))
      throw InputError(r.where() + ": " + r.name("pipeline-model-parallel-layout") + " has " + s(chunks) +
                       " stages per pipeline rank; the virtual pipeline flags give " + s(given) + " (contradictory values)");
    p.pipeline_layout = *l;
    p.schedule = p.pp > 1 && chunks > 1 ? "interleaved-1f1b" : "1f1b";
    if (p.schedule == "interleaved-1f1b") p.schedule_params["chunks"] = chunks;
    else p.schedule_params.erase("chunks");
  }
  const std::optional<int> first = r.integer("decoder-first-pipeline-num-layers", "stage_layers (the first rank's layers)");
  const std::optional<int> last = r.integer("decoder-last-pipeline-num-layers", "stage_layers (the last rank's layers)");
  if ((first || last) && p.pipeline_layout.empty()) {
    const int chunks = p.schedule == "interleaved-1f1b" ? p.schedule_params.value("chunks", 1) : 1;
    p.stage_layers = costmodel::uneven_stage_layers(m, p.pp, chunks, first.value_or(-1), last.value_or(-1));
  }
  p.account_for_embedding = r.boolean("account-for-embedding-in-pipeline-split", "account_for_embedding_in_pipeline_split").value_or(false);
  p.account_for_loss = r.boolean("account-for-loss-in-pipeline-split", "account_for_loss_in_pipeline_split").value_or(false);
}

void read_precision(FlagReader& r, ModelSpec& m) {
  const bool bf16 = r.boolean("bf16", "16-bit weights and activations, fp32 gradients (bytes_per_grad 4)").value_or(false);
  const bool fp16 = r.boolean("fp16", "16-bit weights, activations and gradients").value_or(false);
  const bool bf16_grads = r.boolean("grad-reduce-in-bf16", "bytes_per_grad 2 (gradients kept and reduced in bf16)").value_or(false);
  if (bf16 || fp16) {
    m.bytes_per_param = m.bytes_per_activation = 2;
    m.bytes_per_grad = bf16 && !bf16_grads ? 4 : 2;
  } else {
    m.bytes_per_param = m.bytes_per_activation = m.bytes_per_grad = 4;
    r.report().assume("--bf16/--fp16", "", "fp32 training (Megatron-LM's default): 4-byte weights and activations");
  }
  if (const std::optional<std::string> f = r.text("fp8-format", "fp8 (the layers' linear products in FP8)")) m.fp8 = *f != "none";
  if (m.fp8 && !bf16 && !fp16) throw InputError(r.where() + ": --fp8-format with fp32 training (allowed: with --bf16 or --fp16)");
  // Megatron-LM's recipes onto stagecraft's (costmodel/specs.h Fp8Recipe): tensorwise is current scaling.
  if (const std::optional<std::string> rec = r.text("fp8-recipe", "fp8_recipe (tensorwise: current)")) {
    const std::string name = *rec == "tensorwise" ? "current" : *rec;
    m.fp8_recipe = costmodel::parse_fp8_recipe(name, r.name("fp8-recipe"));
  }
  r.unmodelled("fp8-param-gather", "the parameter gather stays 16-bit in the model");
  if (const std::optional<std::string> a = r.text("attention-backend", "attention_kernel"))
    m.attention_kernel = (*a == "unfused" || *a == "local") ? costmodel::AttentionKernel::Materialized : costmodel::AttentionKernel::Fused;
  else if (r.boolean("use-flash-attn", "attention_kernel fused").value_or(false)) m.attention_kernel = costmodel::AttentionKernel::Fused;
  else {
    m.attention_kernel = costmodel::AttentionKernel::Fused;
    r.report().assume("--attention-backend", "auto", "fused attention (Transformer Engine's flash or cuDNN kernel)");
  }
  const double att = r.number("attention-dropout", "dropout (with hidden-dropout)").value_or(0.1);
  const double hid = r.number("hidden-dropout", "dropout (with attention-dropout)").value_or(0.1);
  m.dropout = att > 0 || hid > 0;
}

// Megatron-Core's precision-aware optimizer (--use-precision-aware-optimizer; arguments.py
// --main-grads-dtype fp32|bf16, --main-params-dtype fp32|fp16, --exp-avg-dtype and
// --exp-avg-sq-dtype fp32|fp16|bf16|fp8): the gradients', the master's and the moments' bytes.
// Without it the dtypes have no effect, and are listed as such.
void read_optimizer_states(FlagReader& r, ModelSpec& m) {
  const char* keys[] = {"main-grads-dtype", "main-params-dtype", "exp-avg-dtype", "exp-avg-sq-dtype"};
  if (!r.boolean("use-precision-aware-optimizer", "the optimizer's states in the dtypes below").value_or(false)) {
    for (const char* k : keys) r.unmodelled(k, "no effect without --use-precision-aware-optimizer");
    return;
  }
  const auto bytes = [&](const char* k, int fallback) {
    const std::optional<std::string> v = r.text(k, "bytes of the optimizer's state");
    if (!v) return fallback;
    std::string t = v->substr(v->rfind('.') == std::string::npos ? 0 : v->rfind('.') + 1);  // torch.bfloat16
    if (t == "fp32" || t == "float32") return 4;
    if (t == "fp16" || t == "bf16" || t == "float16" || t == "bfloat16") return 2;
    if (t == "fp8" || t == "uint8") return 1;
    throw InputError(r.where() + ": " + r.name(k) + " = '" + *v + "' is invalid (allowed: fp32, fp16, bf16, fp8)");
  };
  if (r.has("main-grads-dtype") && m.bytes_per_param < 4) m.bytes_per_grad = bytes(keys[0], 4);
  if (r.has("main-params-dtype") && m.bytes_per_param < 4) m.bytes_per_master = bytes(keys[1], 4);  // fp16: a 16-bit master
  const int avg = bytes(keys[2], 4), sq = bytes(keys[3], 4);
  if (avg != sq)
    throw InputError(r.where() + ": " + r.name(keys[2]) + " and " + r.name(keys[3]) +
                     " differ (not modelled: both moments at one width; allowed: the same dtype)");
  m.bytes_per_moment = avg;
}

// --moe-layer-freq as a list of 0 (dense) and 1 (MoE) per layer: an integer N is Megatron-Core's
// [1 if i % N == 0 else 0 for i in range(layers)], else a Python list expression such as
// "([0]*3+[1]*58)" or "[0,1,1]" (megatron/training/arguments.py moe_freq_type).
std::vector<int> moe_layer_list(const std::string& v, int layers, const std::string& where) {
  std::vector<int> pattern;
  std::string t;
  for (char c : v)
    if (c != ' ' && c != '(' && c != ')') t += c;
  const auto bad = [&] {
    return InputError(where + ": --moe-layer-freq = '" + v + "' is invalid (allowed: an integer, or " + s(layers) +
                      " entries of 0 and 1 such as ([0]*3+[1]*58))");
  };
  if (!t.empty() && t[0] != '[') {
    size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(t, &used);
    } catch (const std::exception&) {
    }
    if (n < 1 || used != t.size()) throw bad();
    for (int i = 0; i < layers; ++i) pattern.push_back(i % n == 0 ? 1 : 0);
    return pattern;
  }
  size_t i = 0;
  while (i < t.size()) {
    if (t[i] == '+') { ++i; continue; }
    const size_t close = t.find(']', i);
    if (t[i] != '[' || close == std::string::npos) throw bad();
    std::vector<int> items;
    const std::string x = t.substr(i + 1, close - i - 1);
    for (size_t a = 0; a <= x.size();) {
      const size_t b = std::min(x.find(',', a), x.size());
      if (b > a) items.push_back(x.substr(a, b - a) == "1" ? 1 : x.substr(a, b - a) == "0" ? 0 : -1);
      a = b + 1;
    }
    i = close + 1;
    int times = 1;
    if (i < t.size() && t[i] == '*') {
      size_t used = 0;
      try {
        times = std::stoi(t.substr(i + 1), &used);
      } catch (const std::exception&) {
        throw bad();
      }
      i += 1 + used;
    }
    for (int k = 0; k < times; ++k) pattern.insert(pattern.end(), items.begin(), items.end());
  }
  if (static_cast<int>(pattern.size()) != layers || std::count(pattern.begin(), pattern.end(), -1) > 0) throw bad();
  return pattern;
}

// The shortest period of `v` (its length when it does not repeat).
size_t period_of(const std::vector<int>& v) {
  for (size_t period = 1; period < v.size(); ++period) {
    bool repeats = true;
    for (size_t k = period; k < v.size() && repeats; ++k) repeats = v[k] == v[k % period];
    if (repeats) return period;
  }
  return v.size();
}

// The list as stagecraft's dense_layers and moe_layer_pattern: a list that repeats a period at
// least twice is that period from layer 0 (Llama 4's [0, 1]); otherwise the leading 0s are the
// dense layers and the rest's period the pattern (empty when the rest is all MoE).
void set_layer_pattern(ModelSpec& m, const std::vector<int>& list) {
  m.moe_layer_pattern.clear();
  m.dense_layers = 0;
  const size_t whole = period_of(list);
  if (2 * whole <= list.size() && !std::all_of(list.begin(), list.end(), [](int x) { return x == 1; })) {
    m.moe_layer_pattern.assign(list.begin(), list.begin() + static_cast<long>(whole));
    return;
  }
  const auto first = std::find(list.begin(), list.end(), 1);
  m.dense_layers = static_cast<int>(first - list.begin());
  const std::vector<int> rest(first, list.end());
  if (std::all_of(rest.begin(), rest.end(), [](int x) { return x == 1; })) return;
  m.moe_layer_pattern.assign(rest.begin(), rest.begin() + static_cast<long>(period_of(rest)));
}

// --moe-token-dispatcher-type onto plan.moe_dispatcher (alltoall_seq, an older all-to-all, as alltoall).
void read_dispatcher(FlagReader& r, ParallelPlan& p) {
  const std::optional<std::string> d = r.text("moe-token-dispatcher-type", "moe_dispatcher");
  if (!d) return;
  if (*d != "alltoall" && *d != "allgather" && *d != "flex" && *d != "alltoall_seq")
    throw InputError(r.where() + ": " + r.name("moe-token-dispatcher-type") + " = '" + *d + "' is invalid (allowed: alltoall, allgather, flex)");
  p.moe_dispatcher = *d == "alltoall_seq" ? "alltoall" : *d;
}

void read_moe(FlagReader& r, ModelSpec& m) {
  const std::optional<int> e = r.integer("num-experts", "num_experts");
  if (!e) {
    r.ignore("moe-token-dispatcher-type");  // set in dense recipes too; no experts, nothing to dispatch
    return;
  }
  m.num_experts = *e;
  m.experts_per_token = r.count("moe-router-topk", "experts_per_token", 2);
  if (!r.has("moe-router-topk")) r.report().assume("--moe-router-topk", "2", "experts_per_token 2");
  const std::optional<int> fe = r.has("moe-ffn-hidden-size") ? std::optional<int>(r.count("moe-ffn-hidden-size", "expert_ffn_hidden_size", 1))
                                                             : std::nullopt;
  m.expert_ffn_hidden_size = fe.value_or(m.ffn_hidden_size);
  if (m.expert_ffn_hidden_size < 1) throw InputError(r.where() + ": --moe-ffn-hidden-size is missing (no --ffn-hidden-size to default to)");
  if (!fe) r.report().assume("--moe-ffn-hidden-size", s(m.ffn_hidden_size), "the dense --ffn-hidden-size");
  if (const std::optional<int> sh = r.integer("moe-shared-expert-intermediate-size", "num_shared_experts = this / expert width")) {
    if (*sh % m.expert_ffn_hidden_size != 0)
      throw InputError(r.where() + ": " + r.name("moe-shared-expert-intermediate-size") + " = " + s(*sh) + " is not a multiple of " +
                       r.name("moe-ffn-hidden-size") + " = " + s(m.expert_ffn_hidden_size) + " (not modelled: shared experts of another width)");
    m.num_shared_experts = *sh / m.expert_ffn_hidden_size;
  }
  if (const std::optional<std::string> f = r.text("moe-layer-freq", "dense_layers (the 0s before the first 1), moe_layer_pattern"))
    set_layer_pattern(m, moe_layer_list(*f, m.num_layers, r.where()));
  if (const std::optional<int> g = r.integer("moe-router-group-topk", "moe_node_limit (one router group per node assumed)")) m.moe_node_limit = *g;
  r.unmodelled("moe-router-num-groups", "groups taken as nodes (moe_node_limit from --moe-router-group-topk)");
  if (const std::optional<double> c = r.number("moe-expert-capacity-factor", "moe_capacity_factor")) m.moe_capacity_factor = *c;
  if (!r.boolean("moe-grouped-gemm", "the stack's grouped expert products (stack.h grouped_gemm_streams)").value_or(false))
    r.report().unmodelled("--moe-grouped-gemm", "absent",
                          "Megatron-LM then runs the experts one after another (SequentialMLP); priced as the stack's grouped products");
  r.unmodelled("moe-permute-fusion", "token permutation not priced");
  r.unmodelled("moe-shared-expert-overlap", "shared experts run in line with the routed ones");
}

void read_mla(FlagReader& r, ModelSpec& m) {
  if (!r.boolean("multi-latent-attention", "MLA").value_or(false)) return;
  m.q_lora_rank = r.integer("q-lora-rank", "q_lora_rank").value_or(0);
  m.kv_lora_rank = r.integer("kv-lora-rank", "kv_lora_rank").value_or(512);
  m.head_dim = r.integer("qk-head-dim", "head_dim").value_or(128);
  m.qk_rope_head_dim = r.integer("qk-pos-emb-head-dim", "qk_rope_head_dim").value_or(64);
  m.v_head_dim = r.integer("v-head-dim", "v_head_dim").value_or(128);
  for (const char* k : {"kv-lora-rank", "qk-head-dim", "qk-pos-emb-head-dim", "v-head-dim"})
    if (!r.has(k)) r.report().assume(std::string("--") + k, "", "Megatron-Core's MLA default (512, 128, 64, 128)");
  if (m.v_head_dim == m.head_dim) m.v_head_dim = 0;
  m.num_kv_heads = 0;
}

}  // namespace

// Declared in configs/megatron_dims.cpp.
void read_megatron_dims(FlagReader& r, ModelSpec& m, int tp);
void read_megatron_recompute(FlagReader& r, ParallelPlan& p);
void read_megatron_cuda_graphs(FlagReader& r, ParallelPlan& p);
void read_megatron_overlap(FlagReader& r, Imported& in);

void map_megatron_fields(FlagReader& r, Imported& in, const ImportOptions& o) {
  ModelSpec m = hf_model_option(o, in.report).value_or(ModelSpec{});
  read_degrees(r, in);
  read_megatron_dims(r, m, in.plan.tp);
  read_precision(r, m);
  read_optimizer_states(r, m);
  read_moe(r, m);
  if (m.num_experts > 0) read_dispatcher(r, in.plan);
  read_mla(r, m);
  read_virtual_pipeline(r, in, m.num_layers);
  read_pipeline_split(r, in, m);
  read_megatron_recompute(r, in.plan);
  read_megatron_cuda_graphs(r, in.plan);
  read_megatron_overlap(r, in);
  if (r.has("mtp-num-layers")) m.mtp_layers = r.count("mtp-num-layers", "mtp_layers", 1);
  costmodel::check(m);
  in.model = m;
  in.has_plan = true;
}

}  // namespace stagecraft::configs
