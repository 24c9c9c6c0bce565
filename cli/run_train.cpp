// `stagecraft train`, the plugin's side: real training with the LibTorch runtime. With --nproc N
// it starts N local ranks; under torchrun, srun or mpirun each process is one rank and reads its
// place from the environment (docs/runtime.md).
#include <filesystem>
#include <iostream>

#include "cli/runtime_commands.h"
#include "presets/load.h"
#include "runtime/train.h"
#include "schedules/error.h"
#include "workbench/model.h"
#include "workbench/plan.h"

namespace stagecraft::cli {

namespace {

runtime::TrainOptions resolve_train(const TrainFlags& flags, int world) {
  runtime::TrainOptions o = flags.run;
  const TrainFlags& f = flags;
  // --from: the file's model and plan, dp and microbatches re-derived for this world's ranks.
  const workbench::FromConfig from = workbench::import_from(f.plan, nullptr, world, print_warning);
  o.plan = workbench::resolve_plan(f.plan, from, world, "ranks of the world (--nproc or WORLD_SIZE)");
  if (!is_torchscript(f.plan.model)) {
    if (!f.example_shape.empty()) throw InputError("--example-shape is for a TorchScript model (--model FILE.pt); --model is " + f.plan.model);
    o.model = workbench::model_of(f.plan, from);
    return o;
  }
  if (!f.plan.model_request.attention_kernel.empty() || f.plan.model_request.fp8 || f.plan.model_request.seq_length)
    throw InputError(std::string(f.plan.model_request.fp8 ? "--fp8" : f.plan.model_request.seq_length ? "--seq-length" : "--attention-kernel") +
                     " is for the built-in decoders; --model " +
                     f.plan.model + " is TorchScript and runs its own layers");
  o.script_path = f.plan.model;
  o.example_shapes = example_shapes(f.example_shape);
  if (o.example_shapes.size() != 2)
    throw InputError("--model " + f.plan.model + " is TorchScript: --example-shape is needed twice, for its forward's input and target (e.g. "
                     "--example-shape 4,8,16 --example-shape 4,8,16); got " + std::to_string(o.example_shapes.size()));
  if (!f.plan.microbatch_size) o.plan.microbatch_size = static_cast<int>(o.example_shapes[0][0]);
  runtime::prepare_script(o);
  return o;
}

// One rank: its place from the environment (the launcher's, torchrun's, srun's or mpirun's).
int rank_main(const TrainFlags& f) {
  runtime::RankEnv env = runtime::rank_env_from_environment();
  if (f.nproc > 0 && env.world != f.nproc)
    throw InputError("--nproc " + std::to_string(f.nproc) + " but WORLD_SIZE is " + std::to_string(env.world));
  return runtime::run_rank(resolve_train(f, env.world), env);
}

// The output paths, before any rank starts (issue 52: a bad --trace was found after training, and
// left its temporary file): each an InputError naming the flag.
void check_train_paths(const TrainFlags& f) {
  if (!f.run.json_path.empty()) check_output_file("--json", f.run.json_path);
  if (!f.run.trace_path.empty()) check_output_file("--trace", f.run.trace_path);
  if (!f.run.save_dir.empty()) check_output_dir("--save", f.run.save_dir);
  if (!f.run.resume_dir.empty() && !std::filesystem::is_directory(f.run.resume_dir))
    throw InputError("--resume = '" + f.run.resume_dir + "' is not a folder (allowed: a checkpoint folder written by --save)");
  // Its meta.json before any rank starts: the ranks found it missing after launch (exit 1).
  if (!f.run.resume_dir.empty() && !std::filesystem::is_regular_file(f.run.resume_dir + "/meta.json"))
    throw InputError("--resume = '" + f.run.resume_dir + "' holds no meta.json (allowed: a complete checkpoint folder written by --save)");
}

}  // namespace

int run_train(const TrainFlags& given, const std::vector<std::string>& argv) {
  TrainFlags f = given;
  check_train_paths(f);
  // A plan file, no --nproc and no launcher's environment (torchrun, srun, mpirun): one local rank
  // per rank of the plan, so that `plan --out p.json` then `train --plan p.json` trains as written.
  if (f.nproc == 0 && !f.plan.plan_file.empty() && !runtime::launched_locally() && !runtime::world_from_environment()) {
    const costmodel::ParallelPlan p = presets::load_plan_file(f.plan.plan_file);
    const bool ranks_overridden = f.plan.dp || f.plan.tp || f.plan.pp || f.plan.cp;
    if (!ranks_overridden && p.num_gpus() > 1) f.nproc = p.num_gpus();
  }
  if (f.nproc > 0 && !runtime::launched_locally()) {
    runtime::preflight(resolve_train(f, f.nproc), f.nproc);  // bad configs fail before any rank starts
    // A forked rank reports its errors as the program does (exit 2 or 1, one line).
    if (!runtime::fork_safe()) return runtime::launch_local(f.nproc, argv, f.run.timeout_s);
    return runtime::launch_local(f.nproc, argv, f.run.timeout_s, [&f] { return exit_code_of([&f] { return rank_main(f); }); });
  }
  return rank_main(f);
}

}  // namespace stagecraft::cli
