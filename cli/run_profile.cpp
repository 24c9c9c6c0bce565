// `stagecraft profile` (layer and collective timings into a profile) and `stagecraft validate`
// (predicted against measured iteration times over a sweep), the plugin's side.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/progress.h"
#include "cli/runtime_commands.h"
#include "costmodel/profile.h"
#include "profiler/collectives.h"
#include "profiler/gemm_calibration.h"
#include "profiler/layers.h"
#include "profiler/validate.h"
#include "runtime/train.h"
#include "schedules/error.h"

namespace stagecraft::cli {
namespace {

constexpr double kNoisySpread = 0.20;  // the forward's (max - min) / median above which profile warns

void print_layers(const std::vector<costmodel::LayerProfile>& layers) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& l : layers)
    rows.push_back({l.kind, std::to_string(l.hidden_size), std::to_string(l.num_heads), std::to_string(l.tp),
                    std::to_string(l.seq_length),
                    std::to_string(l.microbatch_size), fmt_seconds(l.forward.median_s), fmt_seconds(l.backward.median_s),
                    fmt_seconds(l.backward_input.median_s), fmt_seconds(l.backward_weight.median_s),
                    fmt_num(100 * (l.forward.max_s - l.forward.min_s) / std::max(l.forward.median_s, 1e-12), 0) + "%",
                    fmt_bytes(l.activation_bytes)});
  std::cout << format_table({"layer", "h", "heads", "tp", "seq", "b", "forward", "backward", "  I", "  W", "F spread", "activations"},
                            rows);
  // A noisy machine (issue 52): the forward's spread (max - min over the median) above 20% on
  // any shape says the profile's medians, and every prediction from it, carry that noise.
  double worst = 0;
  for (const auto& l : layers) worst = std::max(worst, (l.forward.max_s - l.forward.min_s) / std::max(l.forward.median_s, 1e-12));
  if (worst > kNoisySpread)
    std::cout << wrap_text("warning: the forward's spread reaches " + fmt_num(100 * worst, 0) +
                               "% of its median: this machine is noisy (other work on its cores, frequency changes); "
                               "predictions from this profile carry that noise. Profile on a quiet machine, or with more "
                               "--runs, and compare rounds before trusting a difference under that spread.",
                           kHelpWidth)
              << "\n";
}

}  // namespace

void run_profile(const ProfileOpts& o, int argc, char** argv) {
  if (runtime::launched_locally()) {  // a child: measure collectives, rank 0 writes them
    auto rows = profiler::profile_collectives(runtime::rank_env_from_environment(), o.coll);
    if (!rows.empty()) {
      costmodel::Profile p;
      p.collectives = rows;
      write_file_atomic(o.out + ".collectives.tmp", costmodel::to_json(p).dump());
    }
    std::cout.flush();
    std::_Exit(0);
  }
  if (!o.gemm_calibration.empty()) {  // a GPU calibration instead of a profile
    check_output_file("--gemm-calibration", o.gemm_calibration);
    profiler::GemmCalibrationOptions go;
    go.device = o.grid.device;
    go.gpu = o.gpu;
    std::cout << "measuring sustained bf16 GEMMs on " << go.device << " (" << go.shapes.size() << " shapes, "
              << go.seconds_per_shape + 1 << " s each)...\n";
    const nlohmann::json cal = profiler::measure_gemm_calibration(go);
    for (const auto& sh : cal.at("shapes"))
      std::cout << "  " << sh.at("m") << " x " << sh.at("n") << " x " << sh.at("k") << ": "
                << fmt_num(sh.at("tflops").get<double>(), 1) << " TFLOP/s\n";
    write_file_atomic(o.gemm_calibration, cal.dump(1) + "\n");
    std::cout << "gemm_max_efficiency " << fmt_num(cal.at("gemm_max_efficiency").get<double>(), 3) << " written to "
              << o.gemm_calibration << " (use it with estimate --gpu-calibration)\n";
    return;
  }
  if (o.out.empty()) throw InputError("--out FILE is required (where the profile goes)");
  if (!o.gpu.empty()) throw InputError("--gpu = '" + o.gpu + "' is invalid without --gemm-calibration (allowed: absent when profiling layers)");
  check_output_file("--out", o.out);
  if (o.nproc == 1 || o.nproc < 0) throw InputError("--nproc " + std::to_string(o.nproc) + " is invalid (0: no collectives, or 2 or more ranks)");
  costmodel::Profile p;
  p.device = profiler::describe_device(o.grid);
  p.device["backend"] = o.coll.backend;
  p.device["ranks"] = o.nproc;
  std::cout << "profiling layers (" << o.grid.runs << " runs after " << o.grid.warmup << " warm-up, median kept)...\n";
  Progress progress(o.quiet);
  profiler::LayerGridOptions grid = o.grid;
  grid.progress = [&](long done, long total) { progress.report("profile: shapes", done, total); };
  p.layers = profiler::profile_layers(grid);
  p.optimizer_s_per_param = profiler::profile_optimizer_s_per_param(o.grid);
  print_layers(p.layers);
  if (o.nproc >= 2) {
    std::cout << "\nprofiling collectives among " << o.nproc << " local ranks (" << o.coll.backend << ")...\n";
    int rc = runtime::launch_local(o.nproc, std::vector<std::string>(argv, argv + argc), o.coll.timeout_s);
    if (rc != 0) throw Error("profile: the collective measurement failed (exit " + std::to_string(rc) + ")");
    std::string tmp = o.out + ".collectives.tmp";
    p.collectives = costmodel::load_profile(tmp).collectives;
    std::filesystem::remove(tmp);
    std::cout << profiler::collectives_table(p.collectives);
    if (!o.quiet) std::cerr << "profile: collectives done, " << progress.eta(1, 1) << "\n";
  }
  write_file_atomic(o.out, costmodel::to_json(p).dump(1) + "\n");
  std::cout << "\nprofile written to " << o.out << " (use it with --profile)\n";
}

void run_validate(const ValidateOpts& o) {
  check_input_file("--sweep", o.sweep);
  check_output_file("--out", o.out);
  if (!o.summary.empty()) check_output_file("--summary", o.summary);
  if (!o.work_dir.empty()) check_output_dir("--work-dir", o.work_dir);
  profiler::Sweep s = profiler::load_sweep(o.sweep);
  if (!o.profile.empty()) costmodel::load_profile(o.profile);  // bad profile: exit 2 before any run
  profiler::ValidateOptions vo;
  vo.program = program_path();
  vo.profile = o.profile;
  vo.work_dir = o.work_dir;
  Progress progress(o.quiet);
  if (!o.quiet) vo.eta = [&](long done, long total) { return progress.tick(done, total); };
#ifdef STAGECRAFT_HAVE_SIM
  vo.simulate = !o.no_sim;
#else
  vo.simulate = false;
#endif
  std::cout << wrap_text("validating " + std::to_string(s.configs.size()) + " configurations (" + std::to_string(s.steps) +
                             " steps each, median after " + std::to_string(s.warmup) + "): " +
                             std::to_string(s.configs.size() * static_cast<size_t>(s.rounds)) + " training runs in " +
                             std::to_string(s.rounds) + " rounds, minutes on a small machine; fewer \"rounds\" or \"steps\" " +
                             "in the sweep make it faster",
                         kHelpWidth)
            << "\n";
  // Rows are written as they complete (their last round), so an interrupted or failing sweep
  // keeps what it measured; an interrupt says how many.
  size_t written = 0;
  vo.on_rows = [&](const std::vector<profiler::ValidationRow>& done) {
    write_file_atomic(o.out, profiler::validation_csv(done));
    written = done.size();
  };
  std::vector<profiler::ValidationRow> rows;
  try {
    rows = profiler::run_validation(s, vo, std::cout);
  } catch (const Error& e) {
    if (std::string(e.what()) != "validate: interrupted") throw;
    throw Error(written ? "validate: interrupted; the " + std::to_string(written) +
                              (written == 1 ? " row completed is in " : " rows completed are in ") + o.out
                        : "validate: interrupted before any row completed its last round; nothing written to " + o.out);
  }
  write_file_atomic(o.out, profiler::validation_csv(rows));
  nlohmann::json sum = profiler::validation_summary(rows, vo.simulate);
  sum["cost_model"] = o.profile.empty() ? "analytic" : "profiled: " + o.profile;
  if (!o.summary.empty()) write_file_atomic(o.summary, sum.dump(2) + "\n");
  std::vector<std::vector<std::string>> t;
  for (const char* e : {"evaluator", "simulator"})
    if (sum.contains(e))
      t.push_back({e, sum[e]["spearman"].is_null() ? "-" : fmt_num(sum[e]["spearman"].get<double>(), 3),
                   sum[e]["kendall_tau_b"].is_null() ? "-" : fmt_num(sum[e]["kendall_tau_b"].get<double>(), 3),
                   sum[e]["mape"].is_null() ? "-" : fmt_num(100 * sum[e]["mape"].get<double>(), 1) + "%"});
  std::cout << "\n" << format_table({"engine", "Spearman", "Kendall tau-b", "MAPE"}, t);
  if (sum.contains("memory"))
    std::cout << "peak memory (largest rank), evaluator against measured: MAPE "
              << fmt_num(100 * sum["memory"]["mape"].get<double>(), 1) << "%, largest error "
              << fmt_num(100 * sum["memory"]["largest_error"].get<double>(), 1) << "%\n";
  long failed = 0;
  for (const auto& r : rows) failed += !r.failed.empty();
  if (failed) std::cout << failed << " of " << rows.size() << " rows failed in an engine or the run (the CSV's failed column)\n";
  std::cout << "rows in " << o.out << "\n";
}

}  // namespace stagecraft::cli
