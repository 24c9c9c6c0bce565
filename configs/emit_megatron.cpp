// Megatron-LM's launch command for a plan (flag names as configs/megatron.cpp reads them).
#include <sstream>

#include "configs/emit.h"
#include "costmodel/pipeline_split.h"
#include "schedules/error.h"

namespace stagecraft::configs {
namespace {

using costmodel::ModelSpec;
using costmodel::ParallelPlan;

using Flags = std::vector<std::pair<std::string, std::string>>;

void model_flags(Flags& f, const ModelSpec& m, int tp) {
  const std::string n = std::to_string(m.num_layers);
  f.insert(f.end(), {{"--num-layers", n}, {"--hidden-size", std::to_string(m.hidden_size)},
                     {"--ffn-hidden-size", std::to_string(m.ffn_hidden_size)}, {"--num-attention-heads", std::to_string(m.num_heads)}});
  if (m.num_kv_heads > 0 && m.kv_lora_rank == 0) f.insert(f.end(), {{"--group-query-attention", ""}, {"--num-query-groups", std::to_string(m.num_kv_heads)}});
  if (m.head_dim > 0 && m.kv_lora_rank == 0) f.push_back({"--kv-channels", std::to_string(m.head_dim)});
  if (m.kind == costmodel::ModelKind::Llama) f.insert(f.end(), {{"--swiglu", ""}, {"--untie-embeddings-and-output-weights", ""}});
  f.insert(f.end(), {{"--seq-length", std::to_string(m.seq_length)}, {"--max-position-embeddings", std::to_string(m.seq_length)},
                     {"--vocab-size", std::to_string(m.vocab_size)},
                     {"--make-vocab-size-divisible-by", m.vocab_size % (128 * tp) == 0 ? "128" : "1"}});
  if (m.bytes_per_param == 2) f.push_back({"--bf16", ""});
  if (m.bytes_per_param == 2 && costmodel::grad_bytes_per_param(m) == 2) f.push_back({"--grad-reduce-in-bf16", ""});
  if (m.fp8) f.push_back({"--fp8-format", "hybrid"});
  if (m.fp8 && m.fp8_recipe != costmodel::Fp8Recipe::Delayed)
    f.push_back({"--fp8-recipe", m.fp8_recipe == costmodel::Fp8Recipe::Current ? "tensorwise" : std::string(costmodel::fp8_recipe_name(m.fp8_recipe))});
  if (m.mtp_layers > 0) f.push_back({"--mtp-num-layers", std::to_string(m.mtp_layers)});
  f.push_back({"--attention-backend", m.attention_kernel == costmodel::AttentionKernel::Fused ? "auto" : "unfused"});
  if (!m.dropout) f.insert(f.end(), {{"--attention-dropout", "0"}, {"--hidden-dropout", "0"}});
}

void moe_flags(Flags& f, const ModelSpec& m) {
  if (m.kv_lora_rank > 0) {
    f.insert(f.end(), {{"--multi-latent-attention", ""}, {"--kv-lora-rank", std::to_string(m.kv_lora_rank)},
                       {"--qk-head-dim", std::to_string(static_cast<int>(costmodel::head_dim(m)))},
                       {"--qk-pos-emb-head-dim", std::to_string(m.qk_rope_head_dim)},
                       {"--v-head-dim", std::to_string(static_cast<int>(costmodel::v_head_dim(m)))}});
    if (m.q_lora_rank > 0) f.push_back({"--q-lora-rank", std::to_string(m.q_lora_rank)});
  }
  if (m.num_experts == 0) return;
  f.insert(f.end(), {{"--num-experts", std::to_string(m.num_experts)}, {"--moe-router-topk", std::to_string(m.experts_per_token)},
                     {"--moe-ffn-hidden-size", std::to_string(m.expert_ffn_hidden_size)}});
  if (m.num_shared_experts > 0)
    f.push_back({"--moe-shared-expert-intermediate-size", std::to_string(m.num_shared_experts * m.expert_ffn_hidden_size)});
  if (m.dense_layers > 0 && m.moe_layer_pattern.empty())
    f.push_back({"--moe-layer-freq", "'([0]*" + std::to_string(m.dense_layers) + "+[1]*" + std::to_string(m.num_layers - m.dense_layers) + ")'"});
  if (!m.moe_layer_pattern.empty()) {  // every layer's 0 or 1
    std::string list;
    for (int l = 0; l < m.num_layers; ++l) list += std::string(l ? "," : "") + (costmodel::is_moe_layer(m, l) ? "1" : "0");
    f.push_back({"--moe-layer-freq", "'[" + list + "]'"});
  }
  if (m.moe_node_limit > 0) f.push_back({"--moe-router-group-topk", std::to_string(m.moe_node_limit)});
  if (m.moe_capacity_factor > 0) f.push_back({"--moe-expert-capacity-factor", std::to_string(m.moe_capacity_factor)});
}

void plan_flags(Flags& f, const ParallelPlan& p, const ModelSpec& m) {
  if (m.num_experts > 0) f.push_back({"--moe-token-dispatcher-type", p.moe_dispatcher});
  f.insert(f.end(), {{"--tensor-model-parallel-size", std::to_string(p.tp)}, {"--pipeline-model-parallel-size", std::to_string(p.pp)}});
  if (p.cp > 1) f.push_back({"--context-parallel-size", std::to_string(p.cp)});
  if (p.ep > 1) f.push_back({"--expert-model-parallel-size", std::to_string(p.ep)});
  if (p.etp == 1) f.push_back({"--expert-tensor-parallel-size", "1"});
  // A layout carries the virtual stages itself (Megatron-LM refuses both): the plan's, or its
  // stage_layers written as one (costmodel/pipeline_split.h layout_of).
  const std::string layout = !p.pipeline_layout.empty() ? p.pipeline_layout
                             : !p.stage_layers.empty()   ? costmodel::layout_of(p.stage_layers, m.mtp_layers)
                                                         : "";
  if (!layout.empty()) f.push_back({"--pipeline-model-parallel-layout", "'" + layout + "'"});
  if (p.account_for_embedding) f.push_back({"--account-for-embedding-in-pipeline-split", ""});
  if (p.account_for_loss) f.push_back({"--account-for-loss-in-pipeline-split", ""});
  if (p.schedule == "interleaved-1f1b" && p.pp > 1) {
    if (layout.empty())
      f.push_back({"--num-virtual-stages-per-pipeline-rank", p.schedule_params.value("chunks", nlohmann::json(2)).dump()});
    if (p.schedule_params.contains("microbatch_group_size_per_vp_stage"))
      f.push_back({"--microbatch-group-size-per-vp-stage", p.schedule_params["microbatch_group_size_per_vp_stage"].dump()});
  }
  if (p.sequence_parallel) f.push_back({"--sequence-parallel", ""});
  f.insert(f.end(), {{"--micro-batch-size", std::to_string(p.microbatch_size)}, {"--global-batch-size", std::to_string(p.global_batch())}});
  if (p.recompute == costmodel::RecomputePolicy::Full)
    f.insert(f.end(), {{"--recompute-granularity", "full"}, {"--recompute-method", "uniform"}, {"--recompute-num-layers", "1"}});
  if (p.recompute == costmodel::RecomputePolicy::Selective) f.push_back({"--recompute-granularity", "selective"});
  if (!p.recompute_modules.empty()) {
    std::string mods;
    for (const std::string& x : p.recompute_modules) mods += (mods.empty() ? "" : " ") + x;
    f.push_back({"--recompute-modules", mods});
  }
  if (!p.cuda_graph_scope.empty()) {
    const bool full = p.cuda_graph_scope.front() == "full_iteration";
    std::string scopes;
    for (const std::string& x : p.cuda_graph_scope) scopes += (scopes.empty() ? "" : " ") + x;
    f.insert(f.end(), {{"--cuda-graph-impl", full ? "local" : "transformer_engine"}, {"--cuda-graph-scope", scopes}});
  }
  if (p.zero == 1) f.push_back({"--use-distributed-optimizer", ""});
  if (p.zero >= 2) f.insert(f.end(), {{"--use-megatron-fsdp", ""}, {"--data-parallel-sharding-strategy", p.zero == 2 ? "optim_grads" : "optim_grads_params"}});
  if (p.overlap_grad_reduce) f.push_back({"--overlap-grad-reduce", ""});
  if (p.offload_layers > 0) {
    f.push_back({"--cpu-offloading", ""});
    f.push_back({"--cpu-offloading-num-layers", std::to_string(p.offload_layers)});
  }
  if (p.overlap_param_gather) f.push_back({"--overlap-param-gather", ""});
  if (p.tp_overlap == schedules::TpOverlap::Te) f.push_back({"--tp-comm-overlap", ""});
  if (p.rank_order == "tp-pp-dp") f.push_back({"--use-tp-pp-dp-mapping", ""});
  f.push_back({"--transformer-impl", p.stack == "megatron-lm" ? "local" : "transformer_engine"});
  if (p.grad_bucket_bytes != 25.0 * 1024 * 1024) f.push_back({"--ddp-bucket-size", std::to_string(static_cast<long>(p.grad_bucket_bytes / 4))});
}

}  // namespace

std::string emit_megatron(const ModelSpec& m, const ParallelPlan& p, int gpus_per_node) {
  std::ostringstream out;
  const int world = p.num_gpus();
  const int per_node = gpus_per_node > 0 && world % gpus_per_node == 0 ? gpus_per_node : world;
  out << "# Megatron-LM launch for " << m.name << " on " << world << " GPUs, written by stagecraft (plan --emit megatron)\n";
  std::vector<std::string> lost = stagecraft_only_fields(p);
  if (p.stack != "megatron-lm" && p.stack != "megatron-core-te") lost.push_back("stack " + p.stack + " (written as transformer_engine)");
  if (p.rank_order != "tp-dp-pp" && p.rank_order != "tp-cp-dp-pp" && p.rank_order != "tp-pp-dp") lost.push_back("rank_order " + p.rank_order);
  if (p.schedule != "1f1b" && p.schedule != "interleaved-1f1b") lost.push_back("schedule " + p.schedule + " (Megatron-LM runs 1F1B)");
  if (m.sliding_window > 0) lost.push_back("sliding_window " + std::to_string(m.sliding_window) + " (the model's layer spec)");
  if (m.activation_clamp > 0) lost.push_back("activation_clamp (TransformerConfig.activation_func_clamp_value, no flag)");
  if (p.offload_layers > 0) lost.push_back("offload_layers " + std::to_string(p.offload_layers));
  for (const std::string& l : lost) out << "# not expressible in Megatron-LM: " << l << "\n";
  Flags f;
  model_flags(f, m, p.tp);
  moe_flags(f, m);
  plan_flags(f, p, m);
  out << "torchrun --nproc-per-node " << per_node << " --nnodes " << world / per_node << " pretrain_gpt.py \\\n";
  for (size_t i = 0; i < f.size(); ++i)
    out << "  " << f[i].first << (f[i].second.empty() ? "" : " " + f[i].second) << (i + 1 < f.size() ? " \\\n" : "\n");
  return out.str();
}

std::vector<std::string> stagecraft_only_fields(const ParallelPlan& p) {
  std::vector<std::string> out;
  if (p.tp_overlap != schedules::TpOverlap::Blocking && p.tp_overlap != schedules::TpOverlap::Te)
    out.push_back("tp_overlap " + std::string(schedules::tp_overlap_name(p.tp_overlap)));
  if (!p.stage_tp_overlap.empty()) out.push_back("stage_tp_overlap (per stage)");
  if (!p.layer_tp.empty()) out.push_back("layer_tp (per layer)");
  if (p.preemptive_comm) out.push_back("preemptive_comm");
  if (p.grad_reduce_at != schedules::GradReduceAt::Auto) out.push_back("grad_reduce_at " + std::string(schedules::grad_reduce_at_name(p.grad_reduce_at)));
  if (p.zero == 3 && p.shard_group > 0) out.push_back("shard_group " + std::to_string(p.shard_group));
  if (p.zero == 3 && !p.reshard_after_forward) out.push_back("reshard_after_forward false");
  return out;
}

std::string emit(const std::string& format, const ModelSpec& m, const ParallelPlan& p, int gpus_per_node, const std::string& field) {
  if (format == "megatron") return emit_megatron(m, p, gpus_per_node);
  if (format == "torchtitan") return emit_torchtitan(m, p, gpus_per_node);
  if (format == "deepspeed") return emit_deepspeed(m, p, gpus_per_node);
  throw InputError(field + " = '" + format + "' is invalid (allowed: megatron, torchtitan, deepspeed)");
}

}  // namespace stagecraft::configs
