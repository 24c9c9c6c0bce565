#include "configs/import.h"

#include <fstream>
#include <sstream>

#include "schedules/error.h"

namespace stagecraft::configs {

std::string_view format_name(Format f) {
  switch (f) {
    case Format::Megatron: return "megatron";
    case Format::Bridge: return "bridge";
    case Format::Torchtitan: return "torchtitan";
    case Format::Deepspeed: return "deepspeed";
    case Format::Hf: return "hf";
  }
  return "?";
}

Format parse_format(const std::string& s, const std::string& field) {
  for (Format f : {Format::Megatron, Format::Bridge, Format::Torchtitan, Format::Deepspeed, Format::Hf})
    if (s == format_name(f)) return f;
  throw InputError(field + " = '" + s + "' is invalid (allowed: megatron, bridge, torchtitan, deepspeed, hf)");
}

namespace {

bool has_line_starting(const std::string& text, const std::string& head) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t b = line.find_first_not_of(" \t");
    if (b != std::string::npos && line.compare(b, head.size(), head) == 0) return true;
  }
  return false;
}

}  // namespace

Format detect_format(const std::string& text, const std::string& where) {
  const size_t b = text.find_first_not_of(" \t\r\n");
  if (b != std::string::npos && text[b] == '{') {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded()) throw InputError(where + ": starts like JSON but does not parse (truncated?); give --format");
    if (j.contains("model_type") || j.contains("architectures")) return Format::Hf;
    for (const char* k : {"train_batch_size", "train_micro_batch_size_per_gpu", "zero_optimization", "gradient_accumulation_steps"})
      if (j.contains(k)) return Format::Deepspeed;
    if (j.contains("parallelism") || j.contains("activation_checkpoint")) return Format::Torchtitan;  // a dump of its config
    throw InputError(where + ": a JSON file with neither model_type/architectures (Hugging Face) nor train_batch_size/"
                     "zero_optimization (DeepSpeed); give --format");
  }
  if (has_line_starting(text, "[parallelism]") || has_line_starting(text, "[model]") || has_line_starting(text, "[training]"))
    return Format::Torchtitan;
  if (has_line_starting(text, "model:") || has_line_starting(text, "trainer:") || has_line_starting(text, "train:"))
    return Format::Bridge;
  if (text.find("--tensor-model-parallel-size") != std::string::npos || text.find("--num-layers") != std::string::npos ||
      text.find("pretrain_gpt") != std::string::npos || text.find("--micro-batch-size") != std::string::npos)
    return Format::Megatron;
  throw InputError(where + ": format not recognised (allowed: a Megatron-LM launch script or argument list, Megatron-Bridge/"
                   "NeMo YAML, torchtitan TOML, DeepSpeed JSON, Hugging Face config.json); give --format");
}

std::string read_config_text(const std::string& path, const std::string& what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(what + " '" + path + "' cannot be read (no such file?)");
  std::stringstream b;
  b << f.rdbuf();
  const std::string text = b.str();
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) throw InputError(what + " '" + path + "' is empty");
  return text;
}

Imported import_text(const std::string& text, Format f, const ImportOptions& o, const std::string& where) {
  switch (f) {
    case Format::Megatron: return import_megatron(text, o, where);
    case Format::Bridge: return import_bridge(text, o, where);
    case Format::Torchtitan: return import_torchtitan(text, o, where);
    case Format::Deepspeed: return import_deepspeed(text, o, where);
    case Format::Hf: {
      nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
      if (j.is_discarded() || !j.is_object()) throw InputError(where + ": not a JSON object (truncated?)");
      Imported in;
      in.format = Format::Hf;
      in.model = import_hf_model(j, in.report, where);
      return in;
    }
  }
  throw InputError(where + ": unknown format");
}

Imported import_file(const std::string& path, std::optional<Format> f, const ImportOptions& o) {
  const std::string text = read_config_text(path, "config");
  const std::string where = "'" + path + "'";
  Imported in = import_text(text, f ? *f : detect_format(text, where), o, where);
  if (in.has_plan && (in.world_size > 0 || o.gpus > 0 || in.dp > 0)) complete_plan(in, o.gpus, "--gpus");
  return in;
}

namespace {

// InputError: `what` (named by `a`) is not a multiple of (named by `b`).
[[noreturn]] void not_multiple(const std::string& a, long va, const std::string& b, long vb) {
  throw InputError(a + " = " + std::to_string(va) + " is not a multiple of " + b + " = " + std::to_string(vb) +
                   " (contradictory values; allowed: " + a + " a multiple of " + b + ")");
}

void complete_batch(Imported& in) {
  costmodel::ParallelPlan& p = in.plan;
  const FieldNames& n = in.names;
  if (in.global_batch > 0) {
    const long per_round = static_cast<long>(p.dp) * p.microbatch_size;
    if (in.global_batch % per_round != 0)
      not_multiple(n.global_batch, in.global_batch, n.microbatch + " * dp (" + std::to_string(p.microbatch_size) + " * " +
                   std::to_string(p.dp) + ")", per_round);
    p.num_microbatches = static_cast<int>(in.global_batch / per_round);
  } else if (in.grad_accumulation > 0) {
    p.num_microbatches = in.grad_accumulation;
  } else if (p.num_microbatches < 1) {
    p.num_microbatches = 1;
  }
}

}  // namespace

void complete_plan(Imported& in, int gpus, const std::string& gpus_from) {
  costmodel::ParallelPlan& p = in.plan;
  const FieldNames& n = in.names;
  for (const auto& [name, v] : {std::pair{n.tp, p.tp}, {n.pp, p.pp}, {n.cp, p.cp}, {n.microbatch, p.microbatch_size}})
    if (v < 1) throw InputError(name + " = " + std::to_string(v) + " is invalid (allowed: at least 1)");
  const int world = in.world_size > 0 ? in.world_size : gpus;
  if (in.dp > 0) {
    p.dp = in.dp;
    if (world > 0 && p.num_gpus() != world)
      throw InputError(n.world + " = " + std::to_string(world) + " is not " + n.dp + " * tp * pp * cp = " + std::to_string(p.num_gpus()) +
                       " (contradictory values; allowed: the world size the product of the degrees)");
  } else {
    if (world < 1) throw InputError(n.world + " is not given and the file's data-parallel degree is the rest of the world; give " + gpus_from);
    const int other = p.tp * p.pp * p.cp;
    if (world % other != 0)
      not_multiple(n.world, world, n.tp + " * " + n.pp + " * " + n.cp + " (" + std::to_string(p.tp) + " * " + std::to_string(p.pp) +
                   " * " + std::to_string(p.cp) + ")", other);
    p.dp = world / other;
  }
  if (in.dp_replicate > 1 && p.zero == 3) {
    if (p.dp % in.dp_replicate != 0) not_multiple("dp", p.dp, "the replicate degree", in.dp_replicate);
    p.shard_group = p.dp / in.dp_replicate;
  }
  if (in.model && !costmodel::tp_divides(*in.model, p.tp))
    throw InputError(n.tp + " = " + std::to_string(p.tp) + " does not divide " + n.heads + " = " + std::to_string(in.model->num_heads) +
                     " (or the query groups, the FFN width; contradictory values)");
  complete_batch(in);
  if (in.world_size == 0) in.world_size = p.num_gpus();
  costmodel::check(p);
}

}  // namespace stagecraft::configs
