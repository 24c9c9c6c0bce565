// DeepSpeed's JSON config for a plan (keys as configs/deepspeed.cpp reads them). The model is not
// part of it: DeepSpeed takes the model from the training script (import with --hf-config).
#include "configs/emit.h"

namespace stagecraft::configs {

std::string emit_deepspeed(const costmodel::ModelSpec& m, const costmodel::ParallelPlan& p, int /*gpus_per_node*/) {
  nlohmann::json j;
  j["train_batch_size"] = p.global_batch();
  j["train_micro_batch_size_per_gpu"] = p.microbatch_size;
  j["gradient_accumulation_steps"] = p.num_microbatches;
  j["zero_optimization"] = {{"stage", p.zero}, {"overlap_comm", p.overlap_grad_reduce},
                            {"reduce_bucket_size", static_cast<long>(p.grad_bucket_bytes / 4)}};
  if (m.bytes_per_param == 2) j["bf16"] = {{"enabled", true}};
  if (m.bytes_per_param == 2 && costmodel::grad_bytes_per_param(m) == 2) j["data_types"] = {{"grad_accum_dtype", "bf16"}};
  if (p.recompute == costmodel::RecomputePolicy::Full)
    j["activation_checkpointing"] = {{"partition_activations", false}, {"contiguous_memory_optimization", false}};
  if (p.pp > 1) j["pipeline"] = {{"stages", p.pp}};
  if (p.cp > 1) j["sequence_parallel_size"] = p.cp;
  if (p.tp > 1) j["tensor_parallel"] = {{"autotp_size", p.tp}};
  std::vector<std::string> lost = stagecraft_only_fields(p);
  if (p.schedule != "1f1b") lost.push_back("schedule " + p.schedule + " (DeepSpeed's pipeline runs 1F1B)");
  if (p.recompute == costmodel::RecomputePolicy::Selective) lost.push_back("recompute selective");
  if (!p.recompute_modules.empty()) lost.push_back("recompute_modules");
  if (!p.cuda_graph_scope.empty()) lost.push_back("cuda_graph_scope");
  if (p.moe_dispatcher != "alltoall") lost.push_back("moe_dispatcher " + p.moe_dispatcher);
  if (p.ep > 1) lost.push_back("ep " + std::to_string(p.ep) + " (set in DeepSpeed-MoE's layer, not the config)");
  if (p.sequence_parallel) lost.push_back("sequence_parallel (Megatron's)");
  if (p.overlap_param_gather) lost.push_back("overlap_param_gather");
  if (p.stack != "pytorch-eager") lost.push_back("stack " + p.stack);
  if (m.fp8) lost.push_back("fp8 (Transformer Engine in the model's code)");
  if (!lost.empty()) j["_stagecraft_not_expressible"] = lost;
  j["_stagecraft_model"] = m.name + " on " + std::to_string(p.num_gpus()) + " GPUs (the model: the training script's; import with --hf-config)";
  return j.dump(2) + "\n";
}

}  // namespace stagecraft::configs
