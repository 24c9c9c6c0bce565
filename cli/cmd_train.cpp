// `stagecraft train`: its flags (the work is the runtime plugin's, run_train.cpp).
#include <memory>

#include "cli/commands.h"
#include "cli/runtime_commands.h"
#include "cli/runtime_plugin.h"
#include "schedules/error.h"

namespace stagecraft::cli {

void add_train_command(CLI::App& app, int argc, char** argv) {
  auto f = std::make_shared<TrainFlags>();
  CLI::App* c = app.add_subcommand("train", "train a GPT model or a TorchScript module for real with the LibTorch runtime (Gloo on CPU, NCCL on GPUs, or the store backend)");
  add_plan_flags(c, f->plan, true, /*with_cluster=*/false);
  c->add_option("--nproc", f->nproc, "start this many local ranks (default: one rank per process, placed by RANK/WORLD_SIZE, SLURM_* or OMPI_*; with --plan and no such variables, the plan's ranks)");
  c->add_option("--steps", f->run.steps, "optimizer steps to run (default 10)");
  c->add_option("--seed", f->run.seed, "seed of the weights and the synthetic data (default 1234)");
  c->add_option("--lr", f->run.lr, "AdamW learning rate (default 1e-3)");
  c->add_option("--adamw", f->run.adamw,
                "how AdamW's update runs: foreach (default; each operation over every parameter at once), loop (one parameter "
                "at a time) or fused (one kernel, at::_fused_adamw_: LibTorch 2.1+ on a GPU)");
  c->add_option("--backend", f->run.backend, "auto (nccl when each local rank has a GPU of its own, else gloo where this build has it, else store), gloo (CPU "
                  "tensors), nccl (each rank on a GPU of its own) or store (tensors through the job's TCP store: slow; the ranks "
                  "share the visible GPUs where the build has CUDA, else the CPU)");
  c->add_option("--precision", f->run.precision, "fp32 (default) or bf16 (autocast: bf16 matrix products, fp32 weights and optimizer)");
  c->add_flag("--tf32", f->run.tf32, "fp32 matrix products in TF32 on the GPU's tensor cores (GPU runs only; off by default, as in LibTorch)");
  CLI::Option* bf16_weights = c->add_option("--bf16-weights", f->run.bf16_weights,
                "with --precision bf16: kept (default; one bf16 copy of each weight, cast after each update and read by every "
                "microbatch, beside the fp32 main weights) or cast (autocast's cast at each use)");
  c->add_option("--timeout", f->run.timeout_s, "seconds before a silent peer is declared failed (default 60)");
  c->add_option("--trace", f->run.trace_path, "write a Chrome trace of every executed action to this file");
  c->add_option("--json", f->run.json_path, "write the JSON summary (losses, iteration times, per-rank times, memory)");
  c->add_option("--save", f->run.save_dir, "write a checkpoint (per-rank files, atomically) after the last step");
  c->add_option("--resume", f->run.resume_dir, "continue from a checkpoint written by --save");
  c->add_option("--log-every", f->run.log_every, "print the loss every this many steps (0: never; default 1)");
  c->add_option("--threads", f->run.threads, "intra-op CPU threads per rank (default 1)");
  c->add_flag("--op-times", f->run.op_times,
              "time the matrix products and attention cores inside each compute action (device events on a GPU) and "
              "print each rank's iteration by kind: products, attention core, other compute, optimizer, communication, idle");
  c->add_option("--example-shape", f->example_shape,
                "with --model FILE.pt (a TorchScript module whose forward(input, target) returns the loss): one microbatch's "
                "input shape, then its target's, comma-separated; the first dimension is the microbatch size");
  std::vector<std::string> args(argv, argv + argc);
  c->callback([f, args, bf16_weights] {
    // --bf16-weights says how bf16 keeps its weights: with fp32 it was ignored (issue 52).
    if (bf16_weights->count() > 0 && f->run.precision != "bf16")
      throw InputError("--bf16-weights = '" + f->run.bf16_weights + "' is invalid with --precision " + f->run.precision +
                       " (allowed: with --precision bf16)");
    int rc = runtime_plugin().train(*f, args);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace stagecraft::cli
