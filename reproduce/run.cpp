#include "reproduce/run.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "presets/load.h"
#include "costmodel/profile.h"
#include "reproduce/csv.h"
#include "schedules/error.h"

namespace stagecraft::reproduce {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A preset name, or a file relative to the experiment's folder.
std::string resolve_name(const Spec& s, const std::string& name) {
  if (name.find('/') == std::string::npos && name.find(".json") == std::string::npos) return name;
  return (fs::path(s.dir) / name).string();
}

std::string need_string(const json& c, const std::string& key, const std::string& where) {
  if (!c.contains(key)) throw InputError(where + ": " + key + " is missing (a preset name or a JSON file)");
  if (!c[key].is_string()) throw InputError(where + ": " + key + " = " + c[key].dump() + " is invalid (must be a string)");
  return c[key].get<std::string>();
}

costmodel::ParallelPlan plan_of(const json& c, const costmodel::ClusterSpec& cluster, const std::string& where) {
  if (!c.contains("plan") || !c["plan"].is_object()) throw InputError(where + ": plan is missing or not an object");
  json p = c["plan"];
  if (!p.contains("dp")) {
    const int tp = p.value("tp", 1), pp = p.value("pp", 1);
    if (tp < 1 || pp < 1 || cluster.num_gpus() % (tp * pp) != 0)
      throw InputError(where + ": plan.dp not given and tp*pp = " + std::to_string(tp * pp) + " does not divide the " +
                       std::to_string(cluster.num_gpus()) + " GPUs of cluster '" + cluster.name + "'; give plan.dp");
    p["dp"] = cluster.num_gpus() / (tp * pp);
  }
  if (c.contains("global_batch")) {  // the microbatches follow from it, whatever dp and b the point has
    const json& g = c["global_batch"];
    const long dp = p.value("dp", 1L), b = p.value("microbatch_size", 1L);
    if (!g.is_number_integer() || g.get<long>() < 1 || dp < 1 || b < 1 || g.get<long>() % (dp * b) != 0)
      throw InputError(where + ": global_batch = " + g.dump() + " is invalid (must be a positive multiple of dp * microbatch_size = " +
                       std::to_string(dp * b) + ")");
    p["num_microbatches"] = g.get<long>() / (dp * b);
  }
  costmodel::ParallelPlan plan = costmodel::plan_from_json(p);
  costmodel::check_tp_overlap(plan);
  return plan;
}

}  // namespace

const Point* Results::find(const std::string& series, const std::string& x) const {
  for (const Point& p : points)
    if (p.series == series && p.x == x) return &p;
  return nullptr;
}

costmodel::Estimate estimate_config(const Spec& s, const json& c, const RunOptions& opt, const std::string& where) {
  try {
    for (auto it = c.begin(); it != c.end(); ++it)
      if (!std::set<std::string>{"model", "cluster", "nodes", "memory_margin", "global_batch", "plan", "profile"}.count(it.key()))
        throw InputError("unknown field '" + it.key() + "' (allowed: model, cluster, nodes, memory_margin, global_batch, plan, profile)");
    const costmodel::ModelSpec model = presets::load_model(resolve_name(s, need_string(c, "model", "config")));
    costmodel::ClusterSpec cluster = presets::load_cluster(resolve_name(s, need_string(c, "cluster", "config")));
    if (c.contains("nodes")) {
      if (!c["nodes"].is_number_integer()) throw InputError("nodes = " + c["nodes"].dump() + " is invalid (must be an integer)");
      costmodel::set_nodes(cluster, c["nodes"].get<int>(), "nodes");
    }
    if (c.contains("memory_margin")) {
      if (!c["memory_margin"].is_number()) throw InputError("memory_margin = " + c["memory_margin"].dump() + " is invalid (must be a number)");
      costmodel::set_memory_margin(cluster, c["memory_margin"].get<double>(), "memory_margin");
    }
    const costmodel::ParallelPlan plan = plan_of(c, cluster, "config");
    std::optional<costmodel::Profile> profile;
    if (c.contains("profile")) profile = costmodel::load_profile((fs::path(s.dir) / need_string(c, "profile", "config")).string());
    costmodel::EstimateOptions eo;
    eo.profile = profile ? &*profile : nullptr;
    costmodel::Estimate e = costmodel::estimate(model, cluster, plan, eo);
    if (s.engine == "sim") {
      if (!opt.simulate) throw InputError("engine = 'sim' needs a build with the simulator (STAGECRAFT_BUILD_SIM)");
      e = opt.simulate(e);
    }
    return e;
  } catch (const InputError& err) {
    throw InputError(where + ": " + err.what());
  }
}

double metric_of(const Spec& s, const costmodel::Estimate& e, std::optional<int> rank, const std::string& where) {
  const json j = costmodel::to_json(e);
  if (!j.contains(s.metric)) throw InputError(where + ": metric = '" + s.metric + "' is not a field of the estimate (see stagecraft estimate --json)");
  const json& v = j[s.metric];
  if (v.is_number()) return v.get<double>() * s.scale;
  if (!v.is_array() || v.empty() || !v[0].is_number())
    throw InputError(where + ": metric = '" + s.metric + "' is not a number or a per-rank list of numbers");
  std::vector<double> a = v.get<std::vector<double>>();
  for (double& x : a) x *= s.scale;
  if (rank) {
    if (*rank >= static_cast<int>(a.size()))
      throw InputError(where + ": rank = " + std::to_string(*rank) + " is invalid (the plan has " + std::to_string(a.size()) + " ranks for " + s.metric + ")");
    return a[static_cast<size_t>(*rank)];
  }
  if (s.reduce == "max") return *std::max_element(a.begin(), a.end());
  if (s.reduce == "min") return *std::min_element(a.begin(), a.end());
  double mean = 0, var = 0;
  for (double x : a) mean += x / static_cast<double>(a.size());
  if (s.reduce == "mean") return mean;
  for (double x : a) var += (x - mean) * (x - mean) / static_cast<double>(a.size());
  return var;  // "variance": the population variance over the ranks, in unit squared
}

Results run(const Spec& s, const RunOptions& opt) {
  Results r;
  for (const Series& series : s.series)
    for (const XPoint& x : s.x) {
      const std::string where = s.dir + ": series '" + series.name + "', x '" + x.label + "'";
      const json config = point_config(s, x, series);
      Point p;
      p.series = series.name;
      p.x = x.label;
      if (series.best_of.empty()) {
        const costmodel::Estimate e = estimate_config(s, config, opt, where);
        p.predicted = metric_of(s, e, x.rank, where);
        p.fits = e.fits;
      } else {
        bool have = false;
        std::string first_error;
        for (const json& b : series.best_of) {
          json c = config;
          c.merge_patch(b);
          costmodel::Estimate e;
          try {
            e = estimate_config(s, c, opt, where + ", best_of " + b.dump());
          } catch (const InputError& err) {  // a candidate this point does not allow
            if (first_error.empty()) first_error = err.what();
            continue;
          }
          const double v = metric_of(s, e, x.rank, where);
          const bool better = s.goal == "max" ? v > p.predicted : v < p.predicted;
          // A plan that fits beats one that does not; among equals, the goal decides.
          if (!have || (e.fits && !p.fits) || (e.fits == p.fits && better)) {
            p.predicted = v;
            p.fits = e.fits;
            p.choice = b.dump();
            have = true;
          }
        }
        if (!have) throw InputError(where + ": no best_of candidate applies here; the first: " + first_error);
      }
      r.points.push_back(p);
    }
  return r;
}

std::string results_csv(const Spec& s, const Results& r) {
  std::vector<CsvRow> rows;
  char buf[32];
  for (const Point& p : r.points) {
    std::snprintf(buf, sizeof buf, "%.6g", p.predicted);
    rows.push_back({p.series, p.x, s.metric, buf, s.unit, p.fits ? "yes" : "no", p.choice});
  }
  return csv_table({"series", "x", "metric", "predicted", "unit", "fits", "choice"}, rows);
}

}  // namespace stagecraft::reproduce
