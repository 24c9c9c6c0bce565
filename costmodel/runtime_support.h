// What `stagecraft train` (runtime/) executes, as rules on a plan: one place for the runtime's
// own preflight (runtime/plan.cpp) and for the planner's `plan --for-runtime`, which searches
// only plans the runtime then trains. Torch-free. Each check throws InputError naming the field,
// its value and what the runtime allows.
#pragma once

#include <string>

#include "costmodel/specs.h"
#include "schedules/schedule.h"

namespace stagecraft::costmodel {

// The plan's own fields against the runtime: FP8, context parallelism, fully sharded data
// parallelism, Transformer Engine's overlap and the sub-batches of the other overlap modes,
// sequence parallelism, and, for the built-in decoder (`builtin_decoder`; not a TorchScript
// model), its kind (decoders only) and its experts.
void check_runtime_plan(const ModelSpec& m, const ParallelPlan& p, bool builtin_decoder = true);
// The plan against its generated schedule: expert parallelism, ZeRO and preemptive
// communication need one pipeline chain and reductions within the iteration.
void check_runtime_schedule(const ParallelPlan& p, const schedules::Schedule& s);
// The vocabulary split over tp (the runtime's embedding and LM head, as Megatron-LM's); the
// runtime checks it after the model's own fit (tp dividing the heads).
void check_vocab_parallel(const ModelSpec& m, int tp);
// All three, the schedule generated from the plan: whether `train --plan` runs it.
bool runtime_runs(const ModelSpec& m, const ParallelPlan& p);
// The same checks on a plan and its (lowered) schedule: the first line of the reason `train`
// would refuse it with, or empty when it runs it. estimate and simulate print it as a note.
std::string runtime_refusal(const ModelSpec& m, const ParallelPlan& p, const schedules::Schedule& s);

}  // namespace stagecraft::costmodel
