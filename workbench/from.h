// --from: a training framework's config (configs/import.h) as the model and plan of a request.
// The request's own fields override what the file gives (workbench/plan.h, workbench/model.h).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "costmodel/specs.h"
#include "workbench/request.h"

namespace stagecraft::workbench {

// A warning for the user (an unknown field of a --from file), without the program's prefix; the
// CLI prints it on standard error, a test may collect it. Empty: warnings are dropped.
using WarnFn = std::function<void(const std::string& text)>;

// What a --from file gave; all empty without --from.
struct FromConfig {
  std::optional<costmodel::ModelSpec> model;    // the file's model (none: it names none)
  std::optional<costmodel::ParallelPlan> plan;  // its plan, completed for the GPUs (none: it has none)
  long global_batch = 0;  // its global batch (0: none); dp and the microbatches follow from it unless
                          // --dp / --microbatches say
  int world = 0;          // its GPUs (0: not stated)
};

// Imports `r.from` (nothing without it): each unknown field of the file warned about through
// `warn`; the cluster's nodes set from the file's world size unless --nodes is given (`cluster`
// may be null: train has none); a plan whose file leaves the world open completed on `gpus` (the
// cluster's when 0). InputError naming the flag or field: --plan with --from, a bad file, a world
// the cluster's nodes cannot hold.
FromConfig import_from(const PlanRequest& r, costmodel::ClusterSpec* cluster, int gpus = 0, const WarnFn& warn = {});

}  // namespace stagecraft::workbench
