#include "planner/bounds.h"

#include "costmodel/fsdp.h"
#include "costmodel/memory.h"

namespace stagecraft::planner {

double memory_lower_bound_bytes(const costmodel::ModelSpec& m, const costmodel::ParallelPlan& p) {
  namespace mem = costmodel::memory;
  const double params = m.num_layers * mem::layer_params_per_rank(m, p.tp) + mem::embedding_params_per_rank(m, p.tp) +
                        mem::head_params_per_rank(m, p.tp);  // one tp rank's share of one model copy
  return params / p.pp * mem::static_bytes_per_param(m, p.zero, costmodel::shard_degree(p));
}

}  // namespace stagecraft::planner
