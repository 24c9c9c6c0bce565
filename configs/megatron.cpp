// Megatron-LM launch scripts and argument lists. Flag names and defaults as
// megatron/training/arguments.py and the dataclasses it builds its flags from
// (megatron/core/transformer/transformer_config.py, model_parallel_config.py) define them at
// NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553; torchrun's from its launcher.
#include "configs/megatron_fields.h"
#include "configs/shell_args.h"
#include "schedules/error.h"

namespace stagecraft::configs {

namespace {

// torchrun's flags: the world's shape.
void read_launcher(FlagReader& r, Imported& in) {
  const std::optional<int> per_node = r.integer("nproc-per-node", "GPUs per node");
  const std::optional<int> nodes = r.integer("nnodes", "nodes");
  for (const char* k : {"node-rank", "master-addr", "master-port", "rdzv-id", "rdzv-backend", "rdzv-endpoint", "standalone"}) r.ignore(k);
  if (per_node) {
    in.gpus_per_node = *per_node;
    in.nodes = nodes.value_or(1);
    if (!nodes) in.report.assume("--nnodes", "1", "one node (torchrun's default)");
    in.world_size = in.gpus_per_node * in.nodes;
    in.names.world = "--nproc-per-node * --nnodes";
  } else if (nodes) {
    in.nodes = *nodes;
  }
}

}  // namespace

Imported import_megatron(const std::string& text, const ImportOptions& o, const std::string& where) {
  std::map<std::string, FlatField> fields;
  for (const ShellFlag& f : shell_flags(text, where)) fields[f.key] = {f.name, f.values};
  if (fields.empty()) throw InputError(where + ": no --flags found (allowed: a Megatron-LM launch script or argument list)");
  Imported in;
  in.format = Format::Megatron;
  FlagReader r(std::move(fields), in.report, where);
  in.names = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
              "--expert-model-parallel-size", "dp", "world size", "--micro-batch-size", "--global-batch-size",
              "--num-attention-heads"};
  read_launcher(r, in);
  map_megatron_fields(r, in, o);
  r.finish(megatron_ignorable);
  return in;
}

}  // namespace stagecraft::configs
