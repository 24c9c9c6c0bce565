// The LibTorch training runtime, seen from the command line: options, the local launcher and
// the per-rank entry point. This header does not include torch, so the CLI compiles fast;
// only the runtime's own translation units do (docs/runtime.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "costmodel/specs.h"

namespace stagecraft::runtime {

// Numeric precision of the forward and backward (`--precision`).
enum class Precision {
  Fp32,  // parameters, activations and arithmetic in fp32
  Bf16,  // autocast: matrix products in bf16; parameters, norms, loss and AdamW in fp32
};
Precision parse_precision(const std::string& s);  // fp32 | bf16; InputError naming the value otherwise

// Where a bf16 matrix product gets its weight from (`--bf16-weights`, with --precision bf16).
enum class WeightCopies {
  Kept,  // one bf16 copy of each weight, cast when the weight last changed and read by every
         // microbatch until the next change: Megatron-LM's bf16 model parameters beside the
         // optimizer's fp32 main parameters and gradients (2 bytes more per weight)
  Cast,  // a cast at each use, as autocast does (each microbatch's forward and recomputation)
};
WeightCopies parse_weight_copies(const std::string& s);  // kept | cast; InputError naming the value otherwise

struct TrainOptions {
  costmodel::ModelSpec model;       // what to train (the tiny preset in tests)
  costmodel::ParallelPlan plan;     // dp, tp, pp, microbatches, schedule, recompute, stage layers
  int steps = 10;                   // optimizer steps to run in this invocation
  unsigned long long seed = 1234;   // weights and data derive from it
  double lr = 1e-3;                 // AdamW learning rate
  double weight_decay = 0.01;       // AdamW decoupled weight decay
  std::string adamw = "foreach";    // how AdamW's update runs: loop, foreach (multi-tensor) or fused (runtime/optim.h)
  std::string backend = "auto";     // auto (nccl when each local rank has a GPU, else gloo where built, else store), gloo,
                                    // nccl or store; nccl computes on the GPU local_rank % visible GPUs, gloo on the
                                    // CPU, store on that GPU where one is visible (ranks may share it), else the CPU
  std::string precision = "fp32";   // fp32, or bf16 (autocast: bf16 products, fp32 weights and AdamW)
  bool tf32 = false;                // fp32 matrix products on a GPU's tensor cores in TF32 (10-bit mantissa inputs)
  std::string bf16_weights = "kept";  // with bf16: kept (one bf16 copy per weight and update) or cast (at each use)
  double timeout_s = 60;            // a peer silent this long is declared failed
  std::string trace_path;           // Chrome trace of every executed action ("" = none)
  std::string json_path;            // JSON summary ("" = none)
  std::string save_dir;             // checkpoint after the last step ("" = none)
  std::string resume_dir;           // continue from this checkpoint ("" = fresh start)
  int log_every = 1;                // print the loss every this many steps (0 = never)
  bool op_times = false;            // time the model's matrix products and attention cores (runtime/op_times.h)
  int threads = 1;                  // intra-op threads per rank (torch::set_num_threads)
  std::string script_path;          // a TorchScript module to train instead of a GPT ("" = none):
                                    // forward(input, target) returns the loss (runtime/script_part.h)
  std::vector<std::vector<std::int64_t>> example_shapes;  // with script_path: one microbatch of the
                                    // input and of the target; the first dimension is b
  double script_flops_per_microbatch = 0;  // with script_path: the graph's forward and backward FLOPs
                                           // of one microbatch (set by prepare_script)
};

// Training a TorchScript module: imports and shards it (Merak's graph sharding, docs/graphs.md)
// and sets the model the plan splits (one layer per subgraph) and, where plan.stage_layers is
// empty, stages balanced by FLOPs. Nothing without script_path. InputError as the import gives.
void prepare_script(TrainOptions& o);

// Where this process sits: from the local launcher or from torchrun / srun / mpirun.
struct RankEnv {
  int rank = 0;                     // global rank
  int world = 1;                    // world size
  std::string master_addr = "127.0.0.1";  // host of the TCPStore (rank 0)
  int master_port = 0;              // its port; 0 = single process, no store server needed
  int local_rank = 0;               // rank on this machine (LOCAL_RANK, SLURM_LOCALID,
                                    // OMPI_COMM_WORLD_LOCAL_RANK; else the global rank): picks the GPU
};

// Reads RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun), SLURM_PROCID/SLURM_NTASKS or
// OMPI_COMM_WORLD_RANK/SIZE; none of them: a single process. Throws InputError when the
// variables are inconsistent.
RankEnv rank_env_from_environment();
// True when this process was started by launch_local (the child side of --nproc).
bool launched_locally();
// True when a launcher's variables name the world (RANK or WORLD_SIZE, SLURM_PROCID,
// OMPI_COMM_WORLD_RANK): this process is one rank of it.
bool world_from_environment();

// Everything checked before any rank starts: plan against the world size, tp against the
// heads, stages against the layers, the schedule's ops against what the executor runs,
// the backend against this build. Throws InputError naming the problem.
void preflight(const TrainOptions& opt, int world);

// Starts ranks 0..nproc-1 on localhost, waits for them, and returns 0 when all succeed. When one
// fails, the others get 2 * timeout_s + 10 s to exit by themselves before they are killed. Each
// rank is a fork of this process that returns `rank_main()` as its exit code, with the rank's
// environment set (RANK, WORLD_SIZE, MASTER_PORT, ...), when rank_main is given and this process
// runs one thread (LibTorch is loaded once, by the launcher: 0.9 s of start-up saved per rank on
// the development machine); otherwise, or without rank_main, each rank re-executes this program
// with the same arguments `argv` (a fork of a threaded process could hang in its thread pools).
int launch_local(int nproc, const std::vector<std::string>& argv, double timeout_s, const std::function<int()>& rank_main = {});
// Whether launch_local's ranks may be plain forks of the launcher: not in a build with CUDA,
// whose preflight may have initialised the driver (cudaGetDeviceCount), which a forked child
// can no longer use; such ranks re-execute the program.
bool fork_safe();

// Runs training as one rank. Returns the process exit code (0 success); never hangs past
// the timeout when a peer fails. Communication failures are reported naming the peer.
int run_rank(const TrainOptions& opt, const RankEnv& env);

}  // namespace stagecraft::runtime
