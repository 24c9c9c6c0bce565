// torchtitan's job TOML (and the same fields from a dump of its config). Sections, names and
// defaults as torchtitan/config/job_config.py defines them at pytorch/torchtitan
// 238fa9953e4aec2a62582121564273d7cbb1e9f1 (the last commit with TOML job files, before the
// Python config registry of 9810191).
#include <algorithm>
#include <array>
#include <cctype>

#include "configs/flag_reader.h"
#include "configs/import.h"
#include "configs/toml.h"
#include "presets/load.h"
#include "schedules/error.h"
#include "schedules/registry.h"

namespace stagecraft::configs {
namespace {

using costmodel::ModelSpec;
using costmodel::ParallelPlan;

// [model] name and flavor onto a stagecraft preset: the flavors of torchtitan's llama3 and
// deepseek_v3 model registries (torchtitan/models/*/__init__.py) with a preset of equal dims.
std::string preset_of(const std::string& name, const std::string& flavor) {
  static const std::vector<std::array<const char*, 3>> table = {
      {"llama3", "8B", "llama3-8b"}, {"llama3", "70B", "llama3-70b"}, {"llama3", "405B", "llama3.1-405b"},
      {"deepseek_v3", "671B", "deepseek-v3"}, {"qwen3", "30B-A3B", "qwen3-30b-a3b"}};
  for (const auto& row : table)
    if (name == row[0] && flavor == row[1]) return row[2];
  return "";
}

ModelSpec read_model(FlagReader& r, const ImportOptions& o) {
  const std::string name = r.text("model.name", "model (with model.flavor)").value_or("llama3");
  const std::string flavor = r.text("model.flavor", "model (with model.name)").value_or("debugmodel");
  r.ignore("model.hf_assets_path");
  r.ignore("model.tokenizer_path");
  if (std::optional<ModelSpec> hf = hf_model_option(o, r.report())) return *hf;
  const std::string preset = preset_of(name, flavor);
  if (preset.empty())
    throw InputError(r.where() + ": model.name = '" + name + "', model.flavor = '" + flavor +
                     "' is not a known model (allowed: llama3 8B, 70B, 405B; deepseek_v3 671B; qwen3 30B-A3B; or give --hf-config)");
  r.report().map("model", name + " " + flavor, "preset " + preset);
  return presets::load_model(preset);
}

void read_precision(FlagReader& r, ModelSpec& m) {
  const std::string param = r.text("training.mixed_precision_param", "weights' bytes").value_or("bfloat16");
  r.text("training.mixed_precision_reduce", "gradient bytes 4 (reduced in fp32)");
  m.bytes_per_param = m.bytes_per_activation = param == "float32" ? 4 : 2;
  m.bytes_per_grad = 4;
  if (!r.has("training.mixed_precision_param"))
    r.report().assume("training.mixed_precision_param", "bfloat16", "2-byte weights and activations, fp32 gradient reduction");
  m.attention_kernel = costmodel::AttentionKernel::Fused;
  m.dropout = false;
  r.report().assume("attention", "sdpa", "fused attention, no dropout (torchtitan's models)");
  std::vector<std::string> conv = r.list("model.converters", "fp8 when float8 or mx is among them").value_or(std::vector<std::string>{});
  for (const std::string& c : conv)
    if (c.find("float8") != std::string::npos || c.find("mx") != std::string::npos) m.fp8 = true;
  // torchao's float8 recipes (tensorwise: current scaling; rowwise: not one of stagecraft's) and MX.
  for (const char* k : {"quantize.linear.float8.recipe_name", "float8.recipe_name"}) {
    const std::optional<std::string> rec = r.text(k, "fp8_recipe (tensorwise: current)");
    if (rec && *rec == "tensorwise") m.fp8_recipe = costmodel::Fp8Recipe::Current;
    else if (rec) r.report().unmodelled(k, *rec, "priced as current (tensor-wise) scaling");
  }
  for (const std::string& c : conv)
    if (c.find("mx") != std::string::npos) m.fp8_recipe = costmodel::Fp8Recipe::Mxfp8;
  r.ignore("quantize.linear.mx.recipe_name");
}

std::string schedule_of(FlagReader& r, const std::string& name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const std::string& n : {lower, "schedule" + lower}) {
    try {
      return schedules::find_generator(n).name;
    } catch (const InputError&) {
    }
  }
  throw InputError(r.where() + ": parallelism.pipeline_parallel_schedule = '" + name +
                   "' is not modelled (allowed: 1F1B, Interleaved1F1B, GPipe, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV)");
}

void read_pipeline(FlagReader& r, ParallelPlan& p, int layers) {
  const std::string sched = r.text("parallelism.pipeline_parallel_schedule", "schedule").value_or("1F1B");
  p.schedule = p.pp > 1 ? schedule_of(r, sched) : "1f1b";
  const auto& g = schedules::find_generator(p.schedule);
  const bool multi = std::find(g.params.begin(), g.params.end(), "chunks") != g.params.end();
  if (r.has("parallelism.pipeline_parallel_layers_per_stage")) {
    const std::optional<int> lps = r.count("parallelism.pipeline_parallel_layers_per_stage", "chunks = layers / (pp * this)", 1);
    if (layers % (p.pp * *lps) != 0)
      throw InputError(r.where() + ": model layers = " + std::to_string(layers) + " is not a multiple of parallelism.pipeline_parallel_degree * "
                       "parallelism.pipeline_parallel_layers_per_stage = " + std::to_string(p.pp * *lps) + " (contradictory values)");
    if (multi) p.schedule_params["chunks"] = layers / (p.pp * *lps);
  } else if (multi && p.pp > 1) {
    p.schedule_params["chunks"] = 2;
    r.report().assume("parallelism.pipeline_parallel_layers_per_stage", "", "two stages per rank for a multi-stage schedule");
  }
  r.unmodelled("parallelism.pipeline_parallel_first_stage_less_layers", "stages balanced by layers (embedding and head not counted as layers)");
  r.unmodelled("parallelism.pipeline_parallel_last_stage_less_layers", "stages balanced by layers (embedding and head not counted as layers)");
}

void read_parallelism(FlagReader& r, Imported& in, int layers) {
  ParallelPlan& p = in.plan;
  const int rep = r.count("parallelism.data_parallel_replicate_degree", "dp = replicate * shard", 1);
  const int shard = r.integer("parallelism.data_parallel_shard_degree", "zero 3 (FSDP2) over the shard ranks; -1: the rest").value_or(-1);
  if (shard == 0 || shard < -1)
    throw InputError(r.where() + ": parallelism.data_parallel_shard_degree = " + std::to_string(shard) + " is invalid (allowed: -1, or at least 1)");
  p.tp = r.count("parallelism.tensor_parallel_degree", "tp; sequence parallel with it (torchtitan's TP shards the norms' activations)", 1);
  p.cp = r.count("parallelism.context_parallel_degree", "cp", 1);
  p.ep = r.count("parallelism.expert_parallel_degree", "ep", 1);
  if (const std::optional<int> etp = r.integer("parallelism.expert_tensor_parallel_degree", "etp")) p.etp = *etp == 1 && p.tp > 1 ? 1 : 0;
  p.sequence_parallel = p.tp > 1;
  if (shard != 1) p.zero = 3;
  in.dp = shard > 0 ? rep * shard : 0;
  in.dp_replicate = rep;
  p.pp = r.count("parallelism.pipeline_parallel_degree", "pp", 1);
  // "default": reshard unless pipelined (torchtitan/models/llama3/infra/parallelize.py at 238fa99).
  const std::optional<std::string> re = r.text("parallelism.fsdp_reshard_after_forward", "reshard_after_forward");
  if (!re) r.report().assume("parallelism.fsdp_reshard_after_forward", "default", "reshard after forward unless pp > 1");
  p.reshard_after_forward = re.value_or("default") == "always" || (re.value_or("default") == "default" && p.pp == 1);
  p.microbatch_size = r.count("parallelism.pipeline_parallel_microbatch_size", "microbatch_size with pp > 1", 1);
  read_pipeline(r, p, layers);
  r.unmodelled("parallelism.enable_async_tensor_parallel", "tp collectives blocking");
  r.unmodelled("parallelism.context_parallel_rotate_method", "key/value ring as Megatron-Core's");
  r.unmodelled("parallelism.expert_parallel_comm_backend", "priced as the standard all-to-all");
}

void read_training(FlagReader& r, Imported& in, ModelSpec& m) {
  ParallelPlan& p = in.plan;
  const int local = r.count("training.local_batch_size", "samples per dp rank per microbatch round", 8);
  if (!r.has("training.local_batch_size")) r.report().assume("training.local_batch_size", "8", "torchtitan's default");
  if (p.pp == 1) p.microbatch_size = local;
  if (local % p.microbatch_size != 0)
    throw InputError(r.where() + ": training.local_batch_size = " + std::to_string(local) + " is not a multiple of "
                     "parallelism.pipeline_parallel_microbatch_size = " + std::to_string(p.microbatch_size) + " (contradictory values)");
  const int global = r.integer("training.global_batch_size", "num_microbatches = global / (dp * microbatch)").value_or(-1);
  if (global == 0 || global < -1)
    throw InputError(r.where() + ": training.global_batch_size = " + std::to_string(global) + " is invalid (allowed: -1, or at least 1)");
  if (global > 0) in.global_batch = global;
  else in.grad_accumulation = local / p.microbatch_size;
  if (r.has("training.seq_len")) m.seq_length = r.count("training.seq_len", "seq_length", 1);
  const std::string mode = r.text("activation_checkpoint.mode", "recompute").value_or("selective");
  const std::string opt = r.text("activation_checkpoint.selective_ac_option", "with selective: op or every n-th layer").value_or("2");
  if (mode == "full" || (mode == "selective" && opt == "1")) p.recompute = costmodel::RecomputePolicy::Full;
  else if (mode == "selective" && opt == "op") p.recompute = costmodel::RecomputePolicy::Selective;
  else if (mode == "selective")
    r.report().unmodelled("activation_checkpoint.selective_ac_option", opt, "every " + opt + "-th layer recomputed: modelled as none");
  else if (mode != "none") r.report().unmodelled("activation_checkpoint.mode", mode, "modelled as none");
  if (mode == "selective" && opt == "op")
    r.report().unmodelled("selective_ac_option op", "", "modelled as the attention core recomputed (the op policy saves matmuls)");
  r.unmodelled("training.enable_cpu_offload", "no offload priced");
  r.unmodelled("compile.enable", "torch.compile's fusions not priced (stack pytorch-eager)");
}

bool ignorable(const std::string& key) {
  return in_list(key, {"training.dataset", "training.dataset_path", "training.max_norm", "training.steps", "training.gc_freq",
                       "training.gc_debug", "training.seed", "training.deterministic", "compile.components", "compile.backend"},
                 {"job.", "profiling.", "metrics.", "optimizer.", "lr_scheduler.", "checkpoint.", "validation.", "comm.",
                  "memory_estimation.", "fault_tolerance.", "experimental.", "float8.", "quantize.", "mx.", "training.dataloader.",
                  "activation_checkpoint.", "parallelism.module_fqns", "parallelism.pipeline_parallel_schedule_csv",
                  "parallelism.disable_loss_parallel", "parallelism.context_parallel_load_balancer"});
}

}  // namespace

Imported import_torchtitan(const std::string& text, const ImportOptions& o, const std::string& where) {
  nlohmann::json j = text.find_first_not_of(" \t\r\n") != std::string::npos && text[text.find_first_not_of(" \t\r\n")] == '{'
                         ? nlohmann::json::parse(text, nullptr, false) : parse_toml(text, where);
  if (j.is_discarded() || !j.is_object()) throw InputError(where + ": not a torchtitan job config (a JSON dump that does not parse?)");
  Imported in;
  in.format = Format::Torchtitan;
  in.names = {"parallelism.tensor_parallel_degree", "parallelism.pipeline_parallel_degree", "parallelism.context_parallel_degree",
              "parallelism.expert_parallel_degree", "data_parallel_replicate_degree * data_parallel_shard_degree", "world size (--gpus)",
              "microbatch size", "training.global_batch_size", "the model's heads"};
  FlagReader r(flatten(j), in.report, where);
  ModelSpec m = read_model(r, o);
  read_parallelism(r, in, m.num_layers);
  read_training(r, in, m);
  read_precision(r, m);
  in.plan.stack = "pytorch-eager";
  r.report().assume("stack", "", "pytorch-eager (torchtitan runs PyTorch's kernels)");
  r.finish(ignorable);
  costmodel::check(m);
  in.model = m;
  in.has_plan = true;
  return in;
}

}  // namespace stagecraft::configs
