// torchtitan's job TOML for a plan (sections and names as configs/torchtitan.cpp reads them).
#include <algorithm>
#include <array>
#include <cctype>
#include <sstream>

#include "configs/emit.h"
#include "schedules/registry.h"

namespace stagecraft::configs {
namespace {

using costmodel::ModelSpec;
using costmodel::ParallelPlan;

// The torchtitan model and flavor of a stagecraft preset (configs/torchtitan.cpp's table).
std::pair<std::string, std::string> flavor_of(const std::string& preset) {
  static const std::vector<std::array<const char*, 3>> table = {
      {"llama3-8b", "llama3", "8B"}, {"llama3-70b", "llama3", "70B"}, {"llama3.1-405b", "llama3", "405B"},
      {"deepseek-v3", "deepseek_v3", "671B"}, {"qwen3-30b-a3b", "qwen3", "30B-A3B"}};
  for (const auto& row : table)
    if (preset == row[0]) return {row[1], row[2]};
  return {"", ""};
}

// PyTorch's class name of a schedule (torch.distributed.pipelining): the registry's names and
// "schedule<class>" aliases, as configs/torchtitan.cpp reads them back; "" when PyTorch has none.
std::string torch_schedule(const std::string& name) {
  for (const char* cls : {"1F1B", "Interleaved1F1B", "GPipe", "LoopedBFS", "ZBVZeroBubble", "InterleavedZeroBubble", "DualPipeV"}) {
    std::string lower;
    for (const char* c = cls; *c; ++c) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
    for (const std::string& n : {lower, "schedule" + lower}) {
      try {
        if (schedules::find_generator(n).name == name) return cls;
      } catch (const std::exception&) {
      }
    }
  }
  return "";
}

}  // namespace

std::string emit_torchtitan(const ModelSpec& m, const ParallelPlan& p, int /*gpus_per_node*/) {
  std::ostringstream out;
  out << "# torchtitan job for " << m.name << " on " << p.num_gpus() << " GPUs (NGPU=" << p.num_gpus()
      << "), written by stagecraft (plan --emit torchtitan)\n";
  std::vector<std::string> lost;
  for (const std::string& l : stagecraft_only_fields(p))
    if (l.compare(0, 11, "shard_group") != 0 && l.compare(0, 21, "reshard_after_forward") != 0) lost.push_back(l);
  const std::string sched = p.pp > 1 ? torch_schedule(p.schedule) : "1F1B";
  if (sched.empty()) lost.push_back("schedule " + p.schedule);
  if (p.zero == 1 || p.zero == 2) lost.push_back("zero " + std::to_string(p.zero) + " (torchtitan shards with FSDP2: zero 3, or none)");
  if (!p.sequence_parallel && p.tp > 1) lost.push_back("sequence_parallel false (torchtitan's tp shards the norms)");
  if (p.stack != "pytorch-eager") lost.push_back("stack " + p.stack);
  if (p.overlap_grad_reduce || p.overlap_param_gather) lost.push_back("overlap flags (FSDP2 overlaps its own collectives)");
  if (p.recompute == costmodel::RecomputePolicy::Selective) lost.push_back("recompute selective (written as the op policy)");
  if (!p.recompute_modules.empty()) lost.push_back("recompute_modules");
  if (!p.cuda_graph_scope.empty()) lost.push_back("cuda_graph_scope");
  if (p.moe_dispatcher != "alltoall") lost.push_back("moe_dispatcher " + p.moe_dispatcher);
  const auto [name, flavor] = flavor_of(m.name);
  if (name.empty()) lost.push_back("model " + m.name + " (no torchtitan flavor: give --hf-config on import)");
  for (const std::string& l : lost) out << "# not expressible in torchtitan: " << l << "\n";
  out << "\n[model]\nname = \"" << (name.empty() ? "llama3" : name) << "\"\nflavor = \"" << (flavor.empty() ? m.name : flavor) << "\"\n";
  if (m.fp8) out << "converters = [\"float8\"]\n";
  const int shard = p.zero == 3 ? (p.shard_group > 0 ? p.shard_group : p.dp) : 1;
  out << "\n[training]\nlocal_batch_size = " << p.microbatch_size * (p.pp > 1 ? p.num_microbatches : 1) << "\nglobal_batch_size = " << p.global_batch()
      << "\nseq_len = " << m.seq_length << "\nmixed_precision_param = \"" << (m.bytes_per_param == 4 ? "float32" : "bfloat16") << "\"\n";
  out << "\n[parallelism]\ndata_parallel_replicate_degree = " << p.dp / shard << "\ndata_parallel_shard_degree = " << shard
      << "\nfsdp_reshard_after_forward = \"" << (p.reshard_after_forward ? "always" : "never") << "\"\ntensor_parallel_degree = " << p.tp
      << "\npipeline_parallel_degree = " << p.pp << "\ncontext_parallel_degree = " << p.cp << "\nexpert_parallel_degree = " << p.ep << "\n";
  if (p.etp == 1) out << "expert_tensor_parallel_degree = 1\n";
  if (p.pp > 1) {
    out << "pipeline_parallel_schedule = \"" << (sched.empty() ? "1F1B" : sched) << "\"\npipeline_parallel_microbatch_size = " << p.microbatch_size << "\n";
    if (p.schedule_params.contains("chunks"))
      out << "pipeline_parallel_layers_per_stage = " << m.num_layers / (p.pp * p.schedule_params["chunks"].get<int>()) << "\n";
  }
  const char* mode = p.recompute == costmodel::RecomputePolicy::Full ? "full" : p.recompute == costmodel::RecomputePolicy::Selective ? "selective" : "none";
  out << "\n[activation_checkpoint]\nmode = \"" << mode << "\"\n";
  if (p.recompute == costmodel::RecomputePolicy::Selective) out << "selective_ac_option = \"op\"\n";
  return out.str();
}

}  // namespace stagecraft::configs
