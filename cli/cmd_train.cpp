// `stagecraft train`: real training with the LibTorch runtime. With --nproc N it starts N
// local ranks (this same program); under torchrun, srun or mpirun each process is one rank
// and reads its place from the environment (docs/runtime.md).
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/runtime_plugin.h"
#include "costmodel/presets.h"
#include "runtime/train.h"
#include "schedules/error.h"

namespace stagecraft::cli {

namespace {

struct TrainFlags {
  PlanFlags plan;                  // model and cluster-independent plan flags
  int nproc = 0;                   // local ranks to start; 0 = this process is one rank
  runtime::TrainOptions run;       // steps, seed, lr, backend, outputs
  std::vector<std::string> example_shape;  // a TorchScript model: its input's and target's shapes
};

runtime::TrainOptions resolve_train(const TrainFlags& f, int world) {
  runtime::TrainOptions o = f.run;
  o.plan = resolve_plan(f.plan, world, "ranks of the world (--nproc or WORLD_SIZE)");
  if (!is_torchscript(f.plan.model)) {
    if (!f.example_shape.empty()) throw InputError("--example-shape is for a TorchScript model (--model FILE.pt); --model is " + f.plan.model);
    o.model = load_model_flags(f.plan);
    return o;
  }
  if (!f.plan.attention_kernel.empty())
    throw InputError("--attention-kernel is for the built-in decoders; --model " + f.plan.model + " is TorchScript and runs its own attention");
  o.script_path = f.plan.model;
  o.example_shapes = example_shapes(f.example_shape);
  if (o.example_shapes.size() != 2)
    throw InputError("--model " + f.plan.model + " is TorchScript: --example-shape is needed twice, for its forward's input and target (e.g. "
                     "--example-shape 4,8,16 --example-shape 4,8,16); got " + std::to_string(o.example_shapes.size()));
  if (!f.plan.microbatch_size) o.plan.microbatch_size = static_cast<int>(o.example_shapes[0][0]);
  runtime::prepare_script(o);
  return o;
}

int train(const TrainFlags& f, const std::vector<std::string>& argv) {
  if (f.nproc > 0 && !runtime::launched_locally()) {
    runtime::preflight(resolve_train(f, f.nproc), f.nproc);  // bad configs fail before any rank starts
    return runtime::launch_local(f.nproc, argv, f.run.timeout_s);
  }
  runtime::RankEnv env = runtime::rank_env_from_environment();
  if (f.nproc > 0 && env.world != f.nproc)
    throw InputError("--nproc " + std::to_string(f.nproc) + " but WORLD_SIZE is " + std::to_string(env.world));
  return runtime::run_rank(resolve_train(f, env.world), env);
}

}  // namespace

void add_train_command(CLI::App& app, int argc, char** argv) {
  auto f = std::make_shared<TrainFlags>();
  CLI::App* c = app.add_subcommand("train", runtime_command_description("train"));
  add_plan_flags(c, f->plan, true, /*with_cluster=*/false);
  c->add_option("--nproc", f->nproc, "start this many local ranks (default: one rank per process, placed by RANK/WORLD_SIZE, SLURM_* or OMPI_*)");
  c->add_option("--steps", f->run.steps, "optimizer steps to run (default 10)");
  c->add_option("--seed", f->run.seed, "seed of the weights and the synthetic data (default 1234)");
  c->add_option("--lr", f->run.lr, "AdamW learning rate (default 1e-3)");
  c->add_option("--backend", f->run.backend, "auto (nccl when each local rank has a GPU of its own, else gloo), gloo (CPU tensors) or nccl (each rank on a GPU)");
  c->add_option("--precision", f->run.precision, "fp32 (default) or bf16 (autocast: bf16 matrix products, fp32 weights and optimizer)");
  c->add_option("--timeout", f->run.timeout_s, "seconds before a silent peer is declared failed (default 60)");
  c->add_option("--trace", f->run.trace_path, "write a Chrome trace of every executed action to this file");
  c->add_option("--json", f->run.json_path, "write the JSON summary (losses, iteration times, per-rank times, memory)");
  c->add_option("--save", f->run.save_dir, "write a checkpoint (per-rank files, atomically) after the last step");
  c->add_option("--resume", f->run.resume_dir, "continue from a checkpoint written by --save");
  c->add_option("--log-every", f->run.log_every, "print the loss every this many steps (0: never; default 1)");
  c->add_option("--threads", f->run.threads, "intra-op CPU threads per rank (default 1)");
  c->add_option("--example-shape", f->example_shape,
                "with --model FILE.pt (a TorchScript module whose forward(input, target) returns the loss): one microbatch's "
                "input shape, then its target's, comma-separated; the first dimension is the microbatch size");
  std::vector<std::string> args(argv, argv + argc);
  c->callback([f, args] {
    int rc = train(*f, args);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace stagecraft::cli
