// Megatron-Core's fields, shared by the Megatron-LM flags (configs/megatron.cpp) and the
// Megatron-Bridge / NeMo YAML (configs/bridge.cpp), which names the same fields with underscores
// in sections: each read by its Megatron-LM flag name without the dashes (num-layers).
#pragma once

#include "configs/flag_reader.h"
#include "configs/import.h"

namespace stagecraft::configs {

// Fills in.model (from the flags, over o.hf_config's model when given) and in.plan from the
// fields of `r`; marks what it reads. `framework` names the source in notes ("Megatron-LM").
void map_megatron_fields(FlagReader& r, Imported& in, const ImportOptions& o);
// Fields with no bearing on the cost model (paths, optimizer hyper-parameters, logging).
bool megatron_ignorable(const std::string& key);

}  // namespace stagecraft::configs
