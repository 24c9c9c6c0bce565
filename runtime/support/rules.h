// What `stagecraft train` (runtime/) executes, as rules on a plan: one place for the runtime's
// own preflight (runtime/plan.cpp), its executor's assertions, the notes of estimate and simulate,
// and the planner's `plan --for-runtime`, which searches only plans the runtime then trains.
// Torch-free: its own library (stagecraft_runtime_support), built with or without LibTorch. Each check throws InputError naming the field,
// its value and what the runtime allows.
#pragma once

#include <string>

#include "costmodel/specs.h"
#include "schedules/schedule.h"

namespace stagecraft::runtime {

using costmodel::ModelSpec;
using costmodel::ParallelPlan;

// The plan's own fields against the runtime: FP8, context parallelism, fully sharded data
// parallelism, Transformer Engine's overlap and the sub-batches of the other overlap modes,
// sequence parallelism, and, for the built-in decoder (`builtin_decoder`; not a TorchScript
// model), its kind (decoders only) and its experts.
void check_runtime_plan(const ModelSpec& m, const ParallelPlan& p, bool builtin_decoder = true);
// The plan against its generated schedule: expert parallelism, ZeRO and preemptive
// communication need one pipeline chain and reductions within the iteration
// (check_reduction_schedule on the plan's ReductionPlan).
void check_runtime_schedule(const ParallelPlan& p, const schedules::Schedule& s);

// The plan's fields that decide how the runtime reduces gradients: what the runtime's executor
// (runtime/executor.h) knows of the plan, so that it asserts the rules below with them.
struct ReductionPlan {
  int ep = 1;                    // plan.ep: expert-parallel degree
  int zero = 0;                  // plan.zero: 0 none, 1-2 the distributed optimizer, 3 fully sharded
  bool preemptive_comm = false;  // plan.preemptive_comm: chunked all-reduces behind the sends
};
ReductionPlan reduction_plan(const ParallelPlan& p);
// Expert parallelism against the optimizer's reductions: neither the distributed optimizer nor
// preemptive communication runs over the experts' own group (check_runtime_plan applies it to
// an MoE model).
void check_expert_reductions(const ReductionPlan& p);
// The reductions against the (lowered) schedule: expert parallelism, ZeRO and preemptive
// communication need one pipeline chain and reductions within the iteration; preemptive
// communication does not chunk ZeRO's reduce-scatters; zero 3 does not run a split backward.
void check_reduction_schedule(const ReductionPlan& p, const schedules::Schedule& s);
// The vocabulary split over tp (the runtime's embedding and LM head, as Megatron-LM's); the
// runtime checks it after the model's own fit (tp dividing the heads).
void check_vocab_parallel(const ModelSpec& m, int tp);
// All three, the schedule generated from the plan: whether `train --plan` runs it.
bool runtime_runs(const ModelSpec& m, const ParallelPlan& p);
// The same checks on a plan and its (lowered) schedule: the first line of the reason `train`
// would refuse it with, or empty when it runs it. estimate and simulate print it as a note.
std::string runtime_refusal(const ModelSpec& m, const ParallelPlan& p, const schedules::Schedule& s);

// The memory every rank of `train` holds before any activation, at least: the runtime keeps fp32
// weights and gradients and AdamW's two fp32 moments (16 bytes a parameter; the optimizer's
// shards as plan.zero shards them), so memory::static_lower_bound_bytes of the model at 4-byte
// parameters and gradients. The built-in decoder's; activations, bf16 copies and buffers add to it.
double runtime_static_bytes(const ModelSpec& m, const ParallelPlan& p);
// Refuses, before any rank starts, a plan whose ranks cannot hold runtime_static_bytes in
// `per_rank_bytes` each; `memory` says what that memory is ("23.5 GiB of this machine's physical
// memory shared by 2 local ranks"). InputError naming the model, the predicted bytes, the memory and what lowers it.
void check_runtime_memory(const ModelSpec& m, const ParallelPlan& p, double per_rank_bytes, const std::string& memory);

}  // namespace stagecraft::runtime
