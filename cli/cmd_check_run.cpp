// `stagecraft check-run LOG --from CONFIG --cluster C`: a real run's logged step times, throughput,
// utilisation and memory beside the prediction for the same configuration (configs/run_log.h).
#include <iostream>

#include "cli/commands.h"
#include "cli/common.h"
#include "configs/import.h"
#include "configs/run_log.h"
#include "schedules/error.h"
#include "workbench/route.h"

namespace stagecraft::cli {
namespace {

struct CheckRunOpts {
  std::string log;    // the training log
  PlanRequest plan;     // --from CONFIG and the flags that override it
  int warmup = 1;     // logged lines skipped at the start (warm-up, compilation)
  bool json = false;  // one JSON object
};

struct Row {
  std::string metric, measured, predicted;
  double m = 0, p = 0;  // the two numbers; error (p - m) / m
};

std::string error_cell(const Row& r) { return r.m > 0 ? fmt_num(100 * (r.p - r.m) / r.m, 1) + "%" : "-"; }

std::vector<Row> rows_of(const configs::Measured& me, const costmodel::Estimate& e, double tokens_per_iteration) {
  const double peak_tf = e.cluster.gpu_peak_flops_per_s / 1e12;
  const double pred_s = e.eval.iteration_time_s;
  std::vector<Row> rows;
  rows.push_back({"iteration time", fmt_seconds(me.iteration_s), fmt_seconds(pred_s), me.iteration_s, pred_s});
  rows.push_back({"tokens/s", fmt_num(tokens_per_iteration / me.iteration_s, 0), fmt_num(e.tokens_per_s, 0), tokens_per_iteration / me.iteration_s,
                  e.tokens_per_s});
  const double mfu_measured = e.mfu * pred_s / me.iteration_s;  // the same FLOPs over the measured time
  rows.push_back({"MFU (" + e.cluster.gpu_name + " dense 16-bit " + fmt_num(peak_tf, 0) + " TFLOP/s)", fmt_percent(mfu_measured), fmt_percent(e.mfu),
                  mfu_measured, e.mfu});
  if (me.tflops_per_gpu)
    rows.push_back({"TFLOP/s per GPU (the framework's count)", fmt_num(*me.tflops_per_gpu, 1), fmt_num(e.tflops_per_gpu, 1), *me.tflops_per_gpu,
                    e.tflops_per_gpu});
  if (me.peak_memory_bytes)
    rows.push_back({"peak memory per rank (" + me.memory_kind + ")", fmt_bytes(*me.peak_memory_bytes), fmt_bytes(e.max_memory_bytes),
                    *me.peak_memory_bytes, e.max_memory_bytes});
  return rows;
}

void run_check(const CheckRunOpts& o) {
  if (o.plan.from.empty() && o.plan.model.empty()) throw InputError("--from CONFIG is required (the run's config; or --model and the plan flags)");
  const Inputs in = workbench::resolve(o.plan, print_warning);
  const std::string text = configs::read_config_text(o.log, "log");
  const configs::RunLog log = configs::read_run_log(text, "log '" + o.log + "'");
  costmodel::EstimateOptions eo;
  eo.profile = in.profile_ptr();
  const costmodel::Estimate e = workbench::estimate_inputs(in, in.plan, eo);
  const double tokens = static_cast<double>(in.plan.global_batch()) * in.model.seq_length;
  const configs::Measured me = configs::measure(log, o.warmup, tokens, in.plan.num_gpus());
  if (log.world_size > 0 && log.world_size != in.plan.num_gpus())
    std::cerr << "stagecraft: warning: the log's world size " << log.world_size << " is not the prediction's " << in.plan.num_gpus()
              << " GPUs (give --nodes or the plan flags of the run)\n";
  const std::vector<Row> rows = rows_of(me, e, tokens);
  if (o.json) {
    nlohmann::json j = {{"log", o.log}, {"format", log.format}, {"samples_used", me.samples_used}, {"first_iteration", me.first_iteration}};
    for (const Row& r : rows) j["metrics"].push_back({{"metric", r.metric}, {"measured", r.m}, {"predicted", r.p},
                                                       {"error", r.m > 0 ? (r.p - r.m) / r.m : 0.0}});
    std::cout << j.dump(1) << "\n";
    return;
  }
  std::cout << wrap_text("run " + o.log + " (" + log.format + " log): " + std::to_string(me.samples_used) + " logged iterations from iteration " +
                             std::to_string(me.first_iteration) + ", " + std::to_string(o.warmup) + " skipped as warm-up",
                         kHelpWidth)
            << "\n"
            << wrap_text("prediction: model " + e.model.name + " on " + std::to_string(in.plan.num_gpus()) + " GPUs of " + e.cluster.name + ", dp " +
                             std::to_string(in.plan.dp) + ", tp " + std::to_string(in.plan.tp) + ", pp " + std::to_string(in.plan.pp) + ", schedule " +
                             e.schedule.name,
                         kHelpWidth)
            << "\n\n";
  std::vector<std::vector<std::string>> table;
  for (const Row& r : rows) table.push_back({r.metric, r.measured, r.predicted, error_cell(r)});
  std::cout << format_table({"metric", "measured", "predicted", "error"}, table);
}

}  // namespace

void add_check_run_command(CLI::App& app) {
  auto o = std::make_shared<CheckRunOpts>();
  CLI::App* c = app.add_subcommand("check-run", "a real run's log (Megatron-LM, NeMo, torchtitan) against the prediction for its config: "
                                                 "iteration time, tokens/s, MFU and peak memory, measured, predicted and the error");
  c->add_option("log", o->log, "the training log")->required();
  add_plan_flags(c, o->plan, true);
  c->add_option("--warmup", o->warmup, "logged iteration lines skipped at the start (default 1)");
  c->add_flag("--json", o->json, "print one JSON object");
  c->callback([o] { run_check(*o); });
}

}  // namespace stagecraft::cli
