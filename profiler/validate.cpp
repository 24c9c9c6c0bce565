#include "profiler/validate.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "costmodel/json_reader.h"
#include "costmodel/profile.h"
#include "presets/load.h"
#include "stats/stats.h"
#include "schedules/error.h"
#include "schedules/json_read.h"
#include "schedules/registry.h"

namespace stagecraft::profiler {
namespace {

nlohmann::json read_json(const std::string& path, const std::string& what) {
  std::ifstream f(path);
  if (!f) throw Error(what + ": '" + path + "' was not written");
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {  // syntax, or a number out of range
    throw Error(what + ": '" + path + "' is not valid JSON: " + e.what());
  }
}

std::string plan_flags(const SweepConfig& c, const std::string& model_path) {
  const auto& p = c.plan;
  std::ostringstream o;
  o << " --model " << model_path << " --dp " << p.dp << " --tp " << p.tp << " --pp " << p.pp << " --microbatch-size "
    << p.microbatch_size << " --microbatches " << p.num_microbatches << " --schedule " << p.schedule << " --recompute "
    << costmodel::recompute_name(p.recompute);
  for (auto it = p.schedule_params.begin(); it != p.schedule_params.end(); ++it)
    o << " --param " << it.key() << "=" << (it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
  return o.str();
}

volatile std::sig_atomic_t g_interrupted = 0;  // SIGINT or SIGTERM arrived during run_validation
extern "C" void on_interrupt(int) { g_interrupted = 1; }

// Runs a child command with standard output to `out_path` and standard error to
// `out_path`.err; returns its exit code. An interrupt (of this program, or of the child by the
// terminal) stops the validation: Error, after which the work folder is removed.
int run(const std::string& cmd, const std::string& out_path) {
  int status = std::system((cmd + " >" + out_path + " 2>" + out_path + ".err").c_str());
  const bool child_interrupted = WIFSIGNALED(status) && (WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGTERM);
  if (g_interrupted || child_interrupted) throw Error("validate: interrupted");  // the caller says what was written
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The children's folder of one validation: fresh inside work_dir, removed with everything in it
// when the validation ends in any way (and work_dir too when this run created it and it is empty);
// SIGINT and SIGTERM handled meanwhile so that an interrupt ends it through here.
class WorkDir {
 public:
  explicit WorkDir(const std::string& parent) : parent_(parent) {
    namespace fs = std::filesystem;
    created_parent_ = !fs::exists(parent_);
    fs::create_directories(parent_);
    std::string tmpl = parent_ + "/validate-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw Error("validate: cannot create a work folder in " + parent_ + ": " + std::strerror(errno));
    path_ = tmpl;
    g_interrupted = 0;
    old_int_ = std::signal(SIGINT, on_interrupt);
    old_term_ = std::signal(SIGTERM, on_interrupt);
  }
  ~WorkDir() {
    std::signal(SIGINT, old_int_);
    std::signal(SIGTERM, old_term_);
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    if (created_parent_ && std::filesystem::is_empty(parent_, ec)) std::filesystem::remove(parent_, ec);
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string parent_, path_;
  bool created_parent_ = false;
  void (*old_int_)(int) = SIG_DFL;
  void (*old_term_)(int) = SIG_DFL;
};

std::string tail_of(const std::string& path) {
  std::ifstream f(path);
  std::stringstream b;
  b << f.rdbuf();
  std::string s = b.str();
  return s.size() > 600 ? s.substr(s.size() - 600) : s;
}

// One training run of the configuration: the iteration times of its steps after the warm-up,
// and the peak memory of its largest rank.
struct Measured {
  std::vector<double> steps_s;  // iteration times after the warm-up
  double peak_memory_bytes = 0;  // the largest rank's peak
};

Measured measure(const Sweep& s, const SweepConfig& c, const ValidateOptions& o, const std::string& model_path,
                 const std::string& base) {
  std::string json = base + ".train.json", log = base + ".train.out";
  int world = c.plan.dp * c.plan.tp * c.plan.pp;
  std::string cmd = o.program + " train --nproc " + std::to_string(world) + plan_flags(c, model_path) + " --precision " + c.precision + " --steps " +
                    std::to_string(s.steps) + " --threads " + std::to_string(s.threads) + " --log-every 0 --json " + json;
  int rc = run(cmd, log);
  if (rc != 0)
    throw Error("validate: training '" + c.name + "' failed (exit " + std::to_string(rc) + "): " + tail_of(log + ".err"));
  nlohmann::json j = read_json(json, "validate: training '" + c.name + "'");
  Measured m;
  for (const auto& step : j.at("steps"))
    if (step.at("step").get<int>() >= s.warmup) m.steps_s.push_back(step.at("iteration_time_s").get<double>());
  if (m.steps_s.empty()) throw InputError("sweep: steps = " + std::to_string(s.steps) + " leaves nothing after warmup = " + std::to_string(s.warmup));
  for (const auto& r : j.at("ranks")) m.peak_memory_bytes = std::max(m.peak_memory_bytes, r.at("peak_memory_bytes").get<double>());
  for (const std::string& f : {json, log, log + ".err"}) std::remove(f.c_str());
  return m;
}

// The model as the children are told it: its file or preset name, or a file written for an
// inline model.
std::string model_arg(const SweepConfig& c, const std::string& base) {
  if (!c.model_arg.empty()) return c.model_arg;
  std::string path = base + ".model.json";
  std::ofstream(path) << costmodel::to_json(c.model).dump(2);
  return path;
}

// An engine's report (iteration_time_s, peak_memory_bytes per rank, ...): `stagecraft estimate`
// (the evaluator) or `stagecraft simulate`, with the sweep's cluster and the profile if any.
nlohmann::json predict(const char* command, const Sweep& s, const SweepConfig& c, const ValidateOptions& o,
                       const std::string& model_path, const std::string& base) {
  std::string json = base + "." + command + ".json";
  std::string cmd = o.program + " " + command + " --cluster " + s.cluster + plan_flags(c, model_path) + " --json" +
                    (o.profile.empty() ? "" : " --profile " + o.profile);
  std::string what = std::string("validate: ") + command + " of '" + c.name + "'";
  int rc = run(cmd, json);
  if (rc != 0) throw Error(what + " failed (exit " + std::to_string(rc) + "): " + tail_of(json + ".err"));
  nlohmann::json report = read_json(json, what);
  for (const std::string& f : {json, json + ".err"}) std::remove(f.c_str());
  return report;
}

// (predicted - measured) / measured; 0 when either is missing (not positive).
double relative_error(double predicted, double measured) {
  return predicted > 0 && measured > 0 ? (predicted - measured) / measured : 0.0;
}

double largest(const nlohmann::json& per_rank) {
  double x = 0;
  for (const auto& v : per_rank) x = std::max(x, v.get<double>());
  return x;
}

}  // namespace

namespace {

// One configuration of a sweep: its model (a preset, a file beside the sweep, or inline), its
// precision and its plan, each checked, and the plan checked against the model and the sweep's
// cluster, so that a bad row is refused before any run (issue 52).
SweepConfig sweep_config(const nlohmann::json& e, size_t i, const std::string& path, const costmodel::ClusterSpec& cluster) {
  const std::string at = "sweep configs[" + std::to_string(i) + "]";
  if (!e.is_object()) throw InputError(at + " = " + e.dump() + " is invalid (expected a JSON object)");
  SweepConfig c;
  const nlohmann::json name = e.value("name", nlohmann::json("config " + std::to_string(i)));
  if (!name.is_string()) throw InputError(at + ".name = " + name.dump() + " is invalid (expected a string)");
  c.name = name.get<std::string>();
  const std::string where = at + " ('" + c.name + "')";
  const auto& m = e.contains("model") ? e["model"] : nlohmann::json("tiny");
  try {
    if (m.is_string()) {
      // A model file is named relative to the sweep file.
      std::string model = m.get<std::string>();
      if (model.size() > 5 && model.substr(model.size() - 5) == ".json" && !std::filesystem::path(model).is_absolute())
        model = (std::filesystem::path(path).parent_path() / model).string();
      c.model = presets::load_model(model);
      c.model_arg = model;
    } else {
      c.model = costmodel::model_from_json(m);
    }
    nlohmann::json plan = e;
    for (const char* k : {"name", "model", "precision"}) plan.erase(k);
    const nlohmann::json prec = e.value("precision", nlohmann::json("fp32"));
    c.precision = prec.is_string() ? prec.get<std::string>() : prec.dump();
    costmodel::check_precision_name(c.precision, "precision");
    c.plan = costmodel::plan_from_json(plan);
    schedules::find_generator(c.plan.schedule);  // InputError naming the registered schedules
    costmodel::check_fit(c.model, cluster, c.plan);
  } catch (const InputError& err) {
    throw InputError(where + ": " + err.what());
  }
  return c;
}

}  // namespace

Sweep load_sweep(const std::string& path) {
  const nlohmann::json j = schedules::read_json_file(path, "sweep file");
  costmodel::Reader r(j, "sweep");
  Sweep s;
  const std::string format = r.req<std::string>("format");
  s.cluster = r.opt<std::string>("cluster", s.cluster);
  s.steps = r.opt<int>("steps", s.steps);
  s.warmup = r.opt<int>("warmup", s.warmup);
  s.threads = r.opt<int>("threads", s.threads);
  s.rounds = r.opt<int>("rounds", s.rounds);
  r.opt<std::string>("why", "");
  const nlohmann::json configs = r.req<nlohmann::json>("configs");
  r.done();
  if (format != "stagecraft-sweep") throw InputError("sweep.format = \"" + format + "\" is invalid (allowed: \"stagecraft-sweep\")");
  // A cluster file is named relative to the sweep file, as its model files are.
  if (s.cluster.size() > 5 && s.cluster.substr(s.cluster.size() - 5) == ".json" && !std::filesystem::path(s.cluster).is_absolute())
    s.cluster = (std::filesystem::path(path).parent_path() / s.cluster).string();
  for (auto [field, v, lo, hi] : {std::tuple{"steps", s.steps, 1, 100000}, {"warmup", s.warmup, 0, 100000},
                                  {"threads", s.threads, 1, 1024}, {"rounds", s.rounds, 1, 1000}})
    if (v < lo || v > hi)
      throw InputError(std::string("sweep.") + field + " = " + std::to_string(v) + " is invalid (allowed: an integer from " +
                       std::to_string(lo) + " to " + std::to_string(hi) + ")");
  if (s.steps <= s.warmup) throw InputError("sweep.steps = " + std::to_string(s.steps) + " must exceed warmup = " + std::to_string(s.warmup));
  if (!configs.is_array() || configs.empty())
    throw InputError("sweep.configs = " + configs.dump().substr(0, 60) + " is invalid (allowed: a non-empty array of configurations)");
  costmodel::ClusterSpec cluster;
  try {
    cluster = presets::load_cluster(s.cluster);
  } catch (const InputError& err) {
    throw InputError("sweep.cluster = '" + s.cluster + "': " + err.what());
  }
  for (size_t i = 0; i < configs.size(); ++i) s.configs.push_back(sweep_config(configs[i], i, path, cluster));
  return s;
}

namespace {

// The predictions of row i (evaluator, then simulator): what a child reports, or the row's
// `failed` when one cannot price it (the rest of the sweep goes on).
void predict_row(const Sweep& s, const ValidateOptions& o, const std::string& model, const std::string& base, ValidationRow& row) {
  try {
    // The evaluator's prediction comes from `simulate`'s report too, but ask `estimate` so the
    // evaluator is judged on its own.
    const nlohmann::json est = predict("estimate", s, row.config, o, model, base);
    row.evaluator_s = est.at("iteration_time_s").get<double>();
    row.evaluator_memory_bytes = largest(est.at("peak_memory_bytes"));
    // What the estimate settled (merak's alpha1, FOLD3D's segments and forward/backward ratio
    // when "auto" or absent) is what the simulator and the runtime are given: every engine and
    // the measurement see the same schedule (train alone would take the generators' defaults).
    row.config.plan.schedule_params = est.at("plan").at("schedule_params");
  } catch (const Error& e) {
    if (g_interrupted) throw;
    row.failed = e.what();
    return;
  }
  if (!o.simulate) return;
  try {
    row.simulator_s = predict("simulate", s, row.config, o, model, base).at("iteration_time_s").get<double>();
  } catch (const Error& e) {
    if (g_interrupted) throw;
    row.failed = e.what();  // the evaluator's numbers and the measurement stay
  }
}

}  // namespace

std::vector<ValidationRow> run_validation(const Sweep& s, const ValidateOptions& o, std::ostream& log) {
  WorkDir work(o.work_dir);
  const size_t n = s.configs.size();
  std::vector<ValidationRow> rows(n);
  auto base = [&](size_t i) { return work.path() + "/cfg" + std::to_string(i); };
  for (size_t i = 0; i < n; ++i) {
    rows[i].config = s.configs[i];
    predict_row(s, o, model_arg(s.configs[i], base(i)), base(i), rows[i]);
    if (!rows[i].failed.empty()) log << "  " << rows[i].config.name << ": " << rows[i].failed << "\n";
  }
  // Measurements round-robin over the sweep, so that a slow or fast spell of a shared machine
  // spreads over every configuration instead of landing on one; the steps of all rounds pooled.
  // A row the evaluator could not price is not run (its schedule was never settled).
  std::vector<std::vector<double>> steps(n);
  std::vector<ValidationRow> done;
  for (int round = 0; round < s.rounds; ++round)
    for (size_t i = 0; i < n; ++i) {
      const SweepConfig& c = rows[i].config;  // with the schedule parameters the estimate settled
      const bool last = round + 1 == s.rounds;
      if (rows[i].evaluator_s > 0) {
        try {
          const Measured got = measure(s, c, o, model_arg(c, base(i)), base(i));
          steps[i].insert(steps[i].end(), got.steps_s.begin(), got.steps_s.end());
          rows[i].measured_memory_bytes = got.peak_memory_bytes;  // deterministic: the same every round
          log << "  round " << (round + 1) << "/" << s.rounds << " [" << (i + 1) << "/" << n << "] " << c.name << ": median "
              << stats::median(got.steps_s) << " s";
        } catch (const Error& e) {
          if (g_interrupted) throw;
          rows[i].failed = e.what();
          rows[i].evaluator_s = 0;  // not measured: left out of every engine's summary
          log << "  " << c.name << ": " << e.what();
        }
        if (last && !steps[i].empty()) {
          rows[i].measured_s = stats::median(steps[i]);
          const double mib = 1024.0 * 1024.0;
          log << ";\n    over " << steps[i].size() << " steps " << rows[i].measured_s << " s, evaluator " << rows[i].evaluator_s
              << " s" << (o.simulate ? ", simulator " + std::to_string(rows[i].simulator_s) + " s" : "") << "; peak memory "
              << rows[i].measured_memory_bytes / mib << " MiB, evaluator " << rows[i].evaluator_memory_bytes / mib << " MiB";
        }
        if (o.eta) log << " (" << o.eta(static_cast<long>(round * n + i + 1), static_cast<long>(s.rounds * n)) << ")";
        log << "\n";
        log.flush();
      }
      if (last) {
        done.push_back(rows[i]);
        if (o.on_rows) o.on_rows(done);
      }
    }
  return rows;
}

namespace {
// A CSV field on one line: line breaks become spaces; quoted (quotes doubled) when it holds a
// comma or a quote.
std::string csv_field(const std::string& v) {
  std::string one_line;
  for (char ch : v) one_line += (ch == '\n' || ch == '\r') ? ' ' : ch;
  while (!one_line.empty() && one_line.back() == ' ') one_line.pop_back();
  if (one_line.find_first_of(",\"") == std::string::npos) return one_line;
  std::string q = "\"";
  for (char ch : one_line) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}
}  // namespace

std::string validation_csv(const std::vector<ValidationRow>& rows) {
  std::ostringstream o;
  o << "name,schedule,dp,tp,pp,microbatch_size,num_microbatches,recompute,model,predicted_evaluator_s,predicted_simulator_s,"
       "measured_s,error_evaluator,error_simulator,predicted_memory_bytes,measured_memory_bytes,error_memory,failed\n";
  for (const auto& r : rows) {
    const auto& p = r.config.plan;
    auto err = [&](double pred) { return relative_error(pred, r.measured_s); };
    const double mem_err = relative_error(r.evaluator_memory_bytes, r.measured_memory_bytes);
    char buf[640];
    std::snprintf(buf, sizeof buf, "%s,%s,%d,%d,%d,%d,%d,%s,%s,%.6g,%.6g,%.6g,%.4f,%.4f,%.0f,%.0f,%.4f\n", r.config.name.c_str(),
                  p.schedule.c_str(), p.dp, p.tp, p.pp, p.microbatch_size, p.num_microbatches,
                  std::string(costmodel::recompute_name(p.recompute)).c_str(), r.config.model.name.c_str(), r.evaluator_s,
                  r.simulator_s, r.measured_s, err(r.evaluator_s), err(r.simulator_s), r.evaluator_memory_bytes,
                  r.measured_memory_bytes, mem_err);
    o << std::string(buf, std::strlen(buf) - 1) << "," << csv_field(r.failed) << "\n";
  }
  return o.str();
}

nlohmann::json validation_summary(const std::vector<ValidationRow>& rows, bool simulated) {
  std::vector<double> measured, ev, sim, mem_measured, mem_ev;
  double worst_mem = 0;  // the largest memory error, signed
  std::vector<double> sim_measured;
  for (const auto& r : rows) {
    if (r.measured_s <= 0 || r.evaluator_s <= 0) continue;  // a row an engine or the run could not do
    measured.push_back(r.measured_s);
    ev.push_back(r.evaluator_s);
    if (r.simulator_s > 0) {
      sim.push_back(r.simulator_s);
      sim_measured.push_back(r.measured_s);
    }
    if (r.measured_memory_bytes <= 0) continue;
    mem_measured.push_back(r.measured_memory_bytes);
    mem_ev.push_back(r.evaluator_memory_bytes);
    const double e = relative_error(r.evaluator_memory_bytes, r.measured_memory_bytes);
    if (std::abs(e) > std::abs(worst_mem)) worst_mem = e;
  }
  auto engine = [&](const std::vector<double>& pred, const std::vector<double>& meas) {
    if (pred.empty()) throw Error("validate: no configuration of the sweep was both predicted and measured");
    nlohmann::json e = {{"spearman", nullptr}, {"kendall_tau_b", nullptr}, {"mape", nullptr}, {"rows", pred.size()}};
    if (pred.size() >= 2) {  // the statistics need two rows (stats/stats.h); null otherwise
      e["spearman"] = stats::spearman(pred, meas);
      e["kendall_tau_b"] = stats::kendall_tau_b(pred, meas);
      e["mape"] = stats::mape(pred, meas);
    }
    return e;
  };
  nlohmann::json j = {{"configurations", rows.size()}, {"evaluator", engine(ev, measured)}};
  if (mem_measured.size() >= 2)
    j["memory"] = {{"mape", stats::mape(mem_ev, mem_measured)}, {"largest_error", worst_mem}};
  if (simulated && !sim.empty()) j["simulator"] = engine(sim, sim_measured);
  return j;
}

}  // namespace stagecraft::profiler
