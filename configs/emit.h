// A stagecraft plan (and its model) as a framework's configuration: Megatron-LM's launch command
// with its flags, a torchtitan job TOML, a DeepSpeed JSON. Importing what these write gives back
// the same plan (tests/test_import.cpp). What the framework cannot express is named in comments
// (Megatron-LM, torchtitan) or a "_stagecraft_not_expressible" list (DeepSpeed), never dropped.
#pragma once

#include <string>

#include "configs/import.h"

namespace stagecraft::configs {

// `gpus_per_node`: the launcher's GPUs per node (the cluster's; the world when smaller).
std::string emit_megatron(const costmodel::ModelSpec& m, const costmodel::ParallelPlan& p, int gpus_per_node);
std::string emit_torchtitan(const costmodel::ModelSpec& m, const costmodel::ParallelPlan& p, int gpus_per_node);
std::string emit_deepspeed(const costmodel::ModelSpec& m, const costmodel::ParallelPlan& p, int gpus_per_node);
// One of the above by format (megatron, torchtitan, deepspeed); InputError naming `field` otherwise.
std::string emit(const std::string& format, const costmodel::ModelSpec& m, const costmodel::ParallelPlan& p, int gpus_per_node,
                 const std::string& field);

// What no framework flag carries, shared by the emitters: the plan's fields stagecraft models but
// `framework` does not name, one line each ("schedule gpipe", "stage_layers 10,11,11,10").
std::vector<std::string> stagecraft_only_fields(const costmodel::ParallelPlan& p);

}  // namespace stagecraft::configs
