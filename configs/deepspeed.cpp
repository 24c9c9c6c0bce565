// DeepSpeed's JSON config (https://www.deepspeed.ai/docs/config-json/): batch sizes, ZeRO, 16-bit
// training, activation checkpointing, pipeline, sequence (Ulysses) and tensor (AutoTP) parallel
// sizes. The model comes from --hf-config: DeepSpeed's JSON does not describe it.
#include "configs/flag_reader.h"
#include "configs/import.h"
#include "schedules/error.h"

namespace stagecraft::configs {
namespace {

using costmodel::ParallelPlan;

void read_batch(FlagReader& r, Imported& in) {
  ParallelPlan& p = in.plan;
  auto opt_count = [&r](const std::string& key, const std::string& note) {
    return r.has(key) ? std::optional<int>(r.count(key, note, 1)) : std::nullopt;
  };
  const std::optional<int> tbs = opt_count("train_batch_size", "global batch");
  const std::optional<int> mbs = opt_count("train_micro_batch_size_per_gpu", "microbatch_size");
  const std::optional<int> gas = opt_count("gradient_accumulation_steps", "num_microbatches");
  p.microbatch_size = mbs.value_or(1);
  if (!mbs && !(tbs && gas)) r.report().assume("train_micro_batch_size_per_gpu", "1", "microbatch_size 1");
  if (tbs) in.global_batch = *tbs;
  if (gas) in.grad_accumulation = *gas;
  if (tbs && gas) {  // all three: dp = train_batch_size / (micro * accumulation), DeepSpeed's identity
    const long per_dp = static_cast<long>(p.microbatch_size) * *gas;
    if (*tbs % per_dp != 0)
      throw InputError(r.where() + ": train_batch_size = " + std::to_string(*tbs) + " is not a multiple of train_micro_batch_size_per_gpu * "
                       "gradient_accumulation_steps = " + std::to_string(per_dp) + " (contradictory values)");
    in.dp = static_cast<int>(*tbs / per_dp);
  }
}

void read_zero(FlagReader& r, ParallelPlan& p) {
  p.zero = r.integer("zero_optimization.stage", "zero").value_or(0);
  if (p.zero < 0 || p.zero > 3) throw InputError(r.where() + ": zero_optimization.stage = " + std::to_string(p.zero) + " is invalid (allowed: 0 to 3)");
  if (r.boolean("zero_optimization.overlap_comm", "overlap_grad_reduce").value_or(false)) p.overlap_grad_reduce = true;
  if (const std::optional<double> b = r.number("zero_optimization.reduce_bucket_size", "grad_bucket_bytes = this * 4 (elements)")) p.grad_bucket_bytes = *b * 4;
  r.unmodelled("zero_optimization.offload_optimizer.device", "no offload priced");
  r.unmodelled("zero_optimization.offload_param.device", "no offload priced");
  r.unmodelled("zero_optimization.zero_hpz_partition_size", "ZeRO++'s secondary partition not priced");
  r.unmodelled("zero_optimization.zero_quantized_weights", "weights gathered in 16 bits");
  r.unmodelled("zero_optimization.zero_quantized_gradients", "gradients reduced in full width");
}

void read_parallel(FlagReader& r, ParallelPlan& p) {
  if (r.has("pipeline.stages")) p.pp = r.count("pipeline.stages", "pp (DeepSpeed takes it from PipelineModule's num_stages)", 1);
  if (r.has("sequence_parallel_size")) {
    const std::optional<int> sp = r.count("sequence_parallel_size", "cp", 1);
    p.cp = *sp;
    if (*sp > 1) r.report().unmodelled("sequence_parallel_size", std::to_string(*sp), "Ulysses' all-to-alls priced as a key/value ring");
  }
  if (r.has("tensor_parallel.autotp_size")) p.tp = r.count("tensor_parallel.autotp_size", "tp", 1);
  p.schedule = "1f1b";
  const bool ac = r.has("activation_checkpointing") || r.has("activation_checkpointing.partition_activations") ||
                  r.has("activation_checkpointing.number_checkpoints") || r.has("activation_checkpointing.cpu_checkpointing");
  if (ac) {
    p.recompute = costmodel::RecomputePolicy::Full;
    r.report().map("activation_checkpointing", "", "recompute full (the model's code checkpoints each layer)");
  }
  r.unmodelled("activation_checkpointing.partition_activations", "checkpoints kept whole on each tp rank");
  r.unmodelled("activation_checkpointing.cpu_checkpointing", "no offload priced");
}

void read_precision(FlagReader& r, costmodel::ModelSpec& m) {
  const bool bf16 = r.boolean("bf16.enabled", "2-byte weights and activations, fp32 gradient accumulation").value_or(false);
  const bool fp16 = r.boolean("fp16.enabled", "2-byte weights, activations and gradients").value_or(false);
  m.bytes_per_param = m.bytes_per_activation = bf16 || fp16 ? 2 : 4;
  const std::optional<std::string> acc = r.text("data_types.grad_accum_dtype", "bytes_per_grad (fp32: 4, bf16 or fp16: 2)");
  m.bytes_per_grad = fp16 || (acc && *acc != "fp32") ? 2 : 4;
  if (bf16 && !acc) r.report().assume("data_types.grad_accum_dtype", "fp32", "bytes_per_grad 4 (DeepSpeed's bf16 optimizer)");
  if (!bf16 && !fp16) r.report().assume("bf16.enabled/fp16.enabled", "false", "fp32 training");
}

bool ignorable(const std::string& key) {
  return in_list(key, {"_comment", "activation_checkpointing", "gradient_clipping", "steps_per_print", "wall_clock_breakdown", "prescale_gradients", "gradient_predivide_factor",
                       "zero_allow_untested_optimizer", "communication_data_type", "dump_state", "memory_breakdown"},
                 {"optimizer.", "scheduler.", "fp16.", "bf16.", "zero_optimization.", "activation_checkpointing.", "tensorboard.",
                  "wandb.", "csv_monitor.", "flops_profiler.", "comms_logger.", "pipeline.", "data_types.", "_stagecraft", "checkpoint.",
                  "aio.", "elasticity.", "autotuning.", "compression_training.", "data_efficiency."});
}

}  // namespace

Imported import_deepspeed(const std::string& text, const ImportOptions& o, const std::string& where) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw InputError(where + ": not a JSON object (truncated DeepSpeed config?)");
  Imported in;
  in.format = Format::Deepspeed;
  in.names = {"tensor_parallel.autotp_size", "pipeline.stages", "sequence_parallel_size", "ep",
              "train_batch_size / (train_micro_batch_size_per_gpu * gradient_accumulation_steps)", "world size (--gpus)",
              "train_micro_batch_size_per_gpu", "train_batch_size", "the model's heads"};
  FlagReader r(flatten(j), in.report, where);
  read_batch(r, in);
  read_zero(r, in.plan);
  read_parallel(r, in.plan);
  std::optional<costmodel::ModelSpec> m = hf_model_option(o, in.report);
  costmodel::ModelSpec scratch;
  read_precision(r, m ? *m : scratch);
  in.plan.stack = "pytorch-eager";
  in.report.assume("stack", "", "pytorch-eager (DeepSpeed runs the model's own PyTorch kernels)");
  r.finish(ignorable);
  if (m) costmodel::check(*m);
  in.model = m;
  in.has_plan = true;
  return in;
}

}  // namespace stagecraft::configs
