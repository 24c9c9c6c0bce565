// `stagecraft profile` and `stagecraft validate`: their flags (the work is the runtime plugin's,
// run_profile.cpp).
#include <memory>

#include "cli/commands.h"
#include "cli/runtime_commands.h"
#include "cli/runtime_plugin.h"

namespace stagecraft::cli {

void add_profile_command(CLI::App& app, int argc, char** argv) {
  auto o = std::make_shared<ProfileOpts>();
  CLI::App* c = app.add_subcommand("profile", "measure layer and collective times on this machine into a profile");
  c->add_option("--hidden", o->grid.hidden_sizes, "hidden sizes h (default 64)")->delimiter(',');
  c->add_option("--heads", o->grid.num_heads, "attention heads (default 4)")->delimiter(',');
  c->add_option("--seq", o->grid.seq_lengths, "sequence lengths (default 64)")->delimiter(',');
  c->add_option("--microbatch-size", o->grid.microbatch_sizes, "microbatch sizes (default 1,2,4)")->delimiter(',');
  c->add_option("--tp", o->grid.tp_degrees, "tensor-parallel degrees; the layer is timed as one shard (default 1)")->delimiter(',');
  c->add_option("--model-kind", o->grid.model_kind, "the runtime decoder measured: gpt (default) or llama");
  c->add_option("--precision", o->grid.precision,
                "fp32 (default) or bf16: the layers under autocast, as `train --precision bf16` runs them");
  c->add_option("--attention-kernel", o->grid.attention_kernel,
                "its attention core: materialized (default; scores kept) or fused (flash attention, LibTorch 2.x)");
  c->add_option("--kv-heads", o->grid.num_kv_heads, "key/value heads of grouped-query attention, dividing every --heads (default: the heads)");
  c->add_option("--vocab", o->grid.vocab_size, "vocabulary of the embedding and head (default 256)");
  c->add_option("--warmup", o->grid.warmup, "untimed runs per measurement (default 2)");
  c->add_option("--runs", o->grid.runs, "timed runs per measurement; the median is kept (default 5)");
  c->add_option("--threads", o->grid.threads, "intra-op CPU threads (default 1)");
  c->add_option("--device", o->grid.device, "where the layers run: cpu (default), cuda or cuda:N (a CUDA build)");
  c->add_option("--nproc", o->nproc, "local ranks for the collectives (default 2; 0 skips them)");
  c->add_option("--backend", o->coll.backend, "collectives over gloo (default, CPU tensors), nccl (one GPU per rank) or store (the job's TCP store; a "
                  "shared GPU where the build has CUDA)");
  c->add_option("--max-bytes", o->coll.max_bytes, "largest collective message (default 4 MiB)");
  c->add_option("--out", o->out, "profile JSON to write (required unless --gemm-calibration)");
  c->add_option("--gemm-calibration", o->gemm_calibration,
                "instead of a profile: measure the sustained bf16 GEMM rate on --device cuda over a sweep of large shapes "
                "(seconds each, the clock settled) and write this GPU calibration file (estimate --gpu-calibration)");
  c->add_option("--gpu", o->gpu, "with --gemm-calibration: the catalog GPU measured (`stagecraft presets`), e.g. h100-sxm");
  c->add_flag("--quiet", o->quiet, "no progress lines (elapsed, estimated remaining) on standard error");
  c->callback([o, argc, argv] { runtime_plugin().profile(*o, argc, argv); });
}

void add_validate_command(CLI::App& app) {
  auto o = std::make_shared<ValidateOpts>();
  CLI::App* c = app.add_subcommand("validate", "predicted against measured iteration times over a sweep of configurations");
  c->add_option("--sweep", o->sweep, "sweep JSON (e.g. experiments/validation/cpu-sweep.json)")->required();
  c->add_option("--profile", o->profile, "profile JSON for the predictions (default: the analytic cost model)");
  c->add_option("--out", o->out, "CSV with one row per configuration")->required();
  c->add_option("--summary", o->summary, "JSON with Spearman, Kendall and MAPE per engine");
  c->add_option("--work-dir", o->work_dir, "scratch directory for the children's files (default out/validate-work)");
  c->add_flag("--no-sim", o->no_sim, "skip the simulator");
  c->add_flag("--quiet", o->quiet, "no elapsed and estimated remaining time on the measured lines");
  c->callback([o] { runtime_plugin().validate(*o); });
}

}  // namespace stagecraft::cli
