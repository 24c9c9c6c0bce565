// The plan of a request: the --plan file's (or the --from file's) plan with the request's fields
// over it, dp and the microbatches defaulted, and the plan's own fields checked.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "costmodel/specs.h"
#include "workbench/from.h"
#include "workbench/request.h"

namespace stagecraft::workbench {

// The plan alone, from the plan file (or `from`'s plan) and the request; dp defaults to
// gpus / (tp * pp * cp), `gpus_from` saying whose GPUs they are ("GPUs of cluster 'x'"). Checks
// the plan's own fields (costmodel::check) but nothing that needs a model or a cluster.
costmodel::ParallelPlan resolve_plan(const PlanRequest& r, const FromConfig& from, int gpus, const std::string& gpus_from);

// The schedule parameters as a JSON object of generator parameters; InputError on a malformed pair.
nlohmann::json schedule_params_json(const ScheduleParams& p);
// Only the keys a generator reads (compare passes one set of parameters to every schedule).
nlohmann::json params_for(const std::string& schedule, const nlohmann::json& params);
// --grad-bucket-mb in bytes (MiB), refusing a size not above 0; estimate's and plan's one reading.
double grad_bucket_bytes_of(double mb);

}  // namespace stagecraft::workbench
