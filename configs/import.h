// Importing a training framework's configuration: Megatron-LM launch scripts and argument lists,
// Megatron-Bridge / NeMo YAML, torchtitan job TOML, DeepSpeed JSON and Hugging Face config.json,
// each mapped onto stagecraft's ModelSpec and ParallelPlan with a report of every field
// (configs/report.h). docs/import.md has the mapping table.
#pragma once

#include <optional>
#include <string>

#include "configs/report.h"
#include "costmodel/specs.h"

namespace stagecraft::configs {

enum class Format { Megatron, Bridge, Torchtitan, Deepspeed, Hf };

std::string_view format_name(Format f);  // "megatron", "bridge", "torchtitan", "deepspeed", "hf"
// InputError naming `field`, the value and the formats allowed.
Format parse_format(const std::string& s, const std::string& field);
// The format from the file's content (JSON with model_type or architectures: hf; JSON with
// train_batch_size, zero_optimization or train_micro_batch_size_per_gpu: deepspeed; TOML with
// [parallelism] or [model]: torchtitan; YAML with model:/trainer:: bridge; -- flags: megatron).
// InputError naming the file when none fits.
Format detect_format(const std::string& text, const std::string& where);

// The names the file gives the fields a contradiction names.
struct FieldNames {
  std::string tp = "tp", pp = "pp", cp = "cp", ep = "ep", dp = "dp";
  std::string world = "world size";       // what gives the number of GPUs
  std::string microbatch = "micro batch";  // samples per microbatch
  std::string global_batch = "global batch";
  std::string heads = "heads";
};

struct Imported {
  Format format = Format::Megatron;
  std::optional<costmodel::ModelSpec> model;  // none: the file defines no model (DeepSpeed)
  bool has_plan = false;                      // false: a model only (Hugging Face)
  costmodel::ParallelPlan plan;               // dp and num_microbatches set by complete_plan
  int dp = 0;                                 // data-parallel degree the file states; 0: the rest
                                              // of the world, world / (tp * pp * cp)
  int dp_replicate = 0;                       // > 1 with plan.zero 3: hybrid sharding, the dp ranks
                                              // in this many copies (shard_group = dp / it)
  int world_size = 0;                         // GPUs the file implies; 0: it does not say
  int nodes = 0;                              // nodes the launcher names; 0: it does not say
  int gpus_per_node = 0;                      // GPUs per node the launcher names; 0: not said
  long global_batch = 0;                      // samples per iteration; 0: not given
  int grad_accumulation = 0;                  // microbatch rounds per iteration when the file gives
                                              // them instead of a global batch; 0: not given
  FieldNames names;                           // for the errors of complete_plan
  ImportReport report;
};

struct ImportOptions {
  std::string hf_config;  // a Hugging Face config.json for the model (DeepSpeed, torchtitan)
  int gpus = 0;           // world size when the file leaves it open; 0: the file's
};

// Parses `text` in format f; `where` names the file in errors. The plan is left incomplete
// (complete_plan). Throws InputError naming the field on a malformed value or a contradiction.
Imported import_text(const std::string& text, Format f, const ImportOptions& o, const std::string& where);
// Reads `path` (InputError when missing or empty), detects the format when none is given, and
// completes the plan on the file's world size (or o.gpus) when it has one.
Imported import_file(const std::string& path, std::optional<Format> f, const ImportOptions& o);

// dp from the world size (the file's, else `gpus`; InputError when neither) over tp * pp * cp,
// num_microbatches from the global batch over dp * microbatch size (or the gradient accumulation),
// hybrid sharding's group; InputError naming both fields when they do not divide. Then
// costmodel::check of the plan and, with a model, the heads against tp.
void complete_plan(Imported& in, int gpus, const std::string& gpus_from);

// Parsers of each format (configs/<format>.cpp), for import_text.
Imported import_megatron(const std::string& text, const ImportOptions& o, const std::string& where);
Imported import_bridge(const std::string& text, const ImportOptions& o, const std::string& where);
Imported import_torchtitan(const std::string& text, const ImportOptions& o, const std::string& where);
Imported import_deepspeed(const std::string& text, const ImportOptions& o, const std::string& where);
// A Hugging Face config.json as a model; `report` gets its fields.
costmodel::ModelSpec import_hf_model(const nlohmann::json& j, ImportReport& report, const std::string& where);
// The model of --hf-config (o.hf_config), its fields added to `report`; none when not given.
std::optional<costmodel::ModelSpec> hf_model_option(const ImportOptions& o, ImportReport& report);

// The text of a file, InputError naming `what` when it cannot be read or is empty.
std::string read_config_text(const std::string& path, const std::string& what);

}  // namespace stagecraft::configs
