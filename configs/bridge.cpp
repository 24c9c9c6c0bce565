// Megatron-Bridge's ConfigContainer YAML (its override files and config dumps: sections model,
// train, ddp, optimizer, dataset, comm_overlap, dist, mixed_precision, tokenizer) and NeMo 1.x's
// launcher YAML (trainer, model with activations_checkpoint_* and optim). Each field is renamed
// to its Megatron-LM flag and read by the same code (configs/megatron_fields.h). Names as
// NVIDIA-NeMo/Megatron-Bridge 067f987df03b8355b03192d88d70f1709fedf51a writes them
// (src/megatron/bridge/training/config.py; tutorials/recipes/llama/conf/llama32_1b_pretrain.yaml).
#include <algorithm>

#include "configs/megatron_fields.h"
#include "configs/yaml.h"
#include "schedules/error.h"

namespace stagecraft::configs {
namespace {

// The last part of a dotted name renamed to its Megatron-LM flag (without dashes); "" for a
// field handled apart (precision, sharing of the embedding).
std::string megatron_key(const std::string& dotted) {
  const std::string last = dotted.substr(dotted.rfind('.') + 1);
  static const std::vector<std::pair<std::string, std::string>> renames = {
      {"virtual_pipeline_model_parallel_size", "num-virtual-stages-per-pipeline-rank"},
      {"gated_linear_unit", "swiglu"},
      {"num_moe_experts", "num-experts"},
      {"fp8", "fp8-format"},
      {"fp8_param", "fp8-param-gather"},
      {"encoder_seq_length", "seq-length"},
      {"overlap_p2p_comm", "overlap-p2p-communication"},
      {"bucket_size", "ddp-bucket-size"},
      {"activations_checkpoint_granularity", "recompute-granularity"},
      {"activations_checkpoint_method", "recompute-method"},
      {"activations_checkpoint_num_layers", "recompute-num-layers"},
      {"num_nodes", "nnodes"},
      {"devices", "nproc-per-node"}};
  for (const auto& [from, to] : renames)
    if (last == from) return to;
  std::string k = last;
  std::replace(k.begin(), k.end(), '_', '-');
  return k;
}

// mixed_precision as a recipe name (bf16_mixed, fp16_mixed, bf16_with_fp8_..., fp8_cs, ...) or
// trainer.precision (bf16, bf16-mixed, 16): the Megatron-LM flags it stands for.
std::vector<std::pair<std::string, std::string>> precision_flags(const std::string& v) {
  std::vector<std::pair<std::string, std::string>> f;
  const bool fp8 = v.find("fp8") != std::string::npos;
  if (v.find("fp16") != std::string::npos || v == "16" || v == "16-mixed") f.push_back({"fp16", "true"});
  else if (v.find("bf16") != std::string::npos || fp8) f.push_back({"bf16", "true"});
  if (fp8) f.push_back({"fp8-format", "hybrid"});
  // The recipe in Megatron-Bridge's precision names (bf16_with_fp8_current_scaling_mixed, fp8_cs,
  // bf16_with_mxfp8_mixed, bf16_with_fp8_subchannel_scaling_mixed, ..._delayed_scaling_...).
  if (v.find("mxfp8") != std::string::npos || v.find("fp8_mx") != std::string::npos) f.push_back({"fp8-recipe", "mxfp8"});
  else if (v.find("current") != std::string::npos || v.find("fp8_cs") != std::string::npos) f.push_back({"fp8-recipe", "tensorwise"});
  else if (v.find("subchannel") != std::string::npos || v.find("block") != std::string::npos) f.push_back({"fp8-recipe", "blockwise"});
  else if (v.find("delayed") != std::string::npos) f.push_back({"fp8-recipe", "delayed"});
  return f;
}

// Sections with no bearing on the cost model but the few fields read from them below.
bool whole_section_ignorable(const std::string& dotted) {
  static const std::vector<std::string> sections = {
      "checkpoint.", "logger.", "scheduler.", "rng.", "profiling.", "rerun_state_machine.", "ft.", "straggler.",
      "nvrx_straggler.", "env_vars.", "peft.", "inprocess_restart.", "exp_manager.", "run.", "model.data.",
      "model.nsys_profile.", "dataset.", "tokenizer.", "model.tokenizer.", "optimizer.", "model.optim."};
  return in_list(dotted, {}, sections);
}

// The fields those sections hold that the mapping reads.
bool is_read_anywhere(const std::string& key) {
  return key == "seq-length" || key == "vocab-size" || key == "use-distributed-optimizer" || key == "name";
}

// The YAML's fields keyed by their Megatron-LM flag; a field that two sections give (model's
// and dataset's seq_length) must agree.
std::map<std::string, FlatField> megatron_fields_of(const nlohmann::json& j, const std::string& where) {
  std::map<std::string, FlatField> out;
  auto put = [&](const std::string& key, const FlatField& f) {
    const auto it = out.find(key);
    if (it != out.end() && it->second.values != f.values)
      throw InputError(where + ": " + it->second.name + " = " + (it->second.values.empty() ? "" : it->second.values[0]) + " and " + f.name +
                       " = " + (f.values.empty() ? "" : f.values[0]) + " disagree (contradictory values)");
    if (it == out.end()) out[key] = f;
  };
  for (const auto& [dotted, f] : flatten(j)) {
    if (f.values.size() == 1 && f.values[0] == "null") {  // unset: the framework's default, listed as ignored
      put("ignored:" + dotted, f);
      continue;
    }
    const std::string last = dotted.substr(dotted.rfind('.') + 1);
    if (dotted == "mixed_precision" || last == "precision") {
      for (const auto& [k, v] : precision_flags(f.values.empty() ? "" : f.values[0])) put(k, {dotted, {v}});
    } else if (f.values.empty()) {
      put("ignored:" + dotted, f);  // an empty list or mapping: nothing to read
    } else if (last == "share_embeddings_and_output_weights") {
      put("untie-embeddings-and-output-weights", {dotted, {f.values.at(0) == "true" ? "false" : "true"}});
    } else if (last == "activation" || last == "activation_func") {
      put(f.values.at(0).find("swiglu") != std::string::npos || f.values.at(0).find("silu") != std::string::npos ? "swiglu" : "activation", {dotted, {"true"}});
    } else if (last == "num_query_groups") {
      put("num-query-groups", f);
      put("group-query-attention", {dotted, {"true"}});
    } else if (dotted == "model.optim.name" && f.values.at(0).find("distributed") != std::string::npos) {
      put("use-distributed-optimizer", {dotted, {"true"}});
    } else if (whole_section_ignorable(dotted) && !is_read_anywhere(megatron_key(dotted))) {
      put("ignored:" + dotted, f);  // paths, logging, schedules of the learning rate
    } else {
      put(megatron_key(dotted), f);
    }
  }
  return out;
}

bool bridge_ignorable(const std::string& key) {
  static const std::vector<std::string> names = {"train-iters", "eval-iters", "eval-interval", "save", "load", "save-interval",
                                                 "log-interval", "tensorboard-dir", "seed", "data-path", "lr", "min-lr",
                                                 "weight-decay", "lr-warmup-iters", "lr-decay-style", "name", "optim",
                                                 "params-dtype", "pipeline-dtype", "autocast-dtype", "should-pad-vocab",
                                                 "max-steps", "accelerator", "logger", "enable-checkpointing", "strategy",
                                                 "val-check-interval", "limit-val-batches", "log-every-n-steps", "target"};
  static const std::vector<std::string> model_fields = {  // TransformerConfig's with no bearing on time or memory
      "init-method-std", "layernorm-epsilon", "layernorm-zero-centered-gamma", "apply-residual-connection-post-layernorm",
      "bias-activation-fusion", "bias-dropout-fusion", "persist-layer-norm", "memory-efficient-layer-norm",
      "seq-len-interpolation-factor", "fp32-residual-connection", "apply-query-key-layer-scaling",
      "deallocate-pipeline-outputs", "async-tensor-model-parallel-allreduce", "gradient-accumulation-fusion",
      "barrier-with-l1-time", "perform-initialization", "init-model-with-meta-device", "enable-autocast",
      "variable-seq-lengths", "batch-p2p-comm", "batch-p2p-sync", "use-ring-exchange-p2p", "mcore-gpt",
      "megatron-amp-o2", "hidden-act", "rotary-interleaved"};
  return key.compare(0, 8, "ignored:") == 0 || key[0] == '-' || megatron_ignorable(key) || in_list(key, names) ||
         in_list(key, model_fields, {"tp-comm-", "timers"});
}

}  // namespace

Imported import_bridge(const std::string& text, const ImportOptions& o, const std::string& where) {
  const nlohmann::json j = parse_yaml(text, where);
  if (!j.is_object() || j.empty()) throw InputError(where + ": not a YAML mapping of sections (allowed: model:, train:, ... or trainer:)");
  Imported in;
  in.format = Format::Bridge;
  in.names = {"model.tensor_model_parallel_size", "model.pipeline_model_parallel_size", "model.context_parallel_size",
              "model.expert_model_parallel_size", "dp", "world size (--gpus, or trainer.num_nodes * trainer.devices)",
              "train.micro_batch_size", "train.global_batch_size", "model.num_attention_heads"};
  FlagReader r(megatron_fields_of(j, where), in.report, where);
  const std::optional<int> per_node = r.integer("nproc-per-node", "GPUs per node");
  const std::optional<int> nodes = r.integer("nnodes", "nodes");
  if (per_node && nodes) {
    in.gpus_per_node = *per_node;
    in.nodes = *nodes;
    in.world_size = *per_node * *nodes;
  }
  map_megatron_fields(r, in, o);
  r.finish(bridge_ignorable);
  return in;
}

}  // namespace stagecraft::configs
