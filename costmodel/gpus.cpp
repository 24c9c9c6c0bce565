#include "costmodel/gpus.h"

#include <algorithm>
#include <sstream>
#include <tuple>

#include "costmodel/json_reader.h"
#include "presets/catalog.h"
#include "schedules/error.h"
#include "schedules/json_read.h"

namespace stagecraft::costmodel {

const std::vector<std::string>& gpu_fields() {
  static const std::vector<std::string> f = {
      "gpu_name", "gpu_peak_flops_per_s", "gpu_fp8_peak_flops_per_s", "gpu_mxfp8_peak_flops_per_s", "gpu_fp4_peak_flops_per_s",
      "gpu_memory_bytes", "gpu_memory_bandwidth_Bps", "achieved_efficiency", "gpu_sms", "gemm_tile_m", "gemm_tile_n",
      "gemm_max_efficiency", "gemm_max_efficiency_fp8", "memory_efficiency", "gpu_boost_clock_mhz", "gpu_sustained_clock_mhz",
      "clock_calibration", "compute_source", "gpu_compute_capability"};
  return f;
}

std::vector<std::string> gpu_preset_names() { return presets::names("gpu"); }

nlohmann::json gpu_entry(const std::string& name, const std::string& field) {
  if (const presets::Entry* e = presets::find("gpu", name)) return schedules::parse_json(e->json, "GPU preset " + name);
  throw InputError(field + " = \"" + name + "\" is not a catalog GPU (allowed: " + presets::joined(gpu_preset_names()) +
                   "; `stagecraft presets` lists them)");
}

nlohmann::json apply_gpu(const nlohmann::json& cluster) {
  if (!cluster.is_object() || !cluster.contains("gpu")) return cluster;
  const nlohmann::json& g = cluster.at("gpu");
  if (!g.is_string()) throw InputError("cluster.gpu = " + g.dump() + " is invalid (expected the name of a catalog GPU)");
  const nlohmann::json entry = gpu_entry(g.get<std::string>());
  nlohmann::json out = nlohmann::json::object();
  for (const std::string& f : gpu_fields())
    if (entry.contains(f)) out[f] = entry.at(f);
  for (auto it = cluster.begin(); it != cluster.end(); ++it) out[it.key()] = it.value();
  return out;
}

std::vector<AssumedFigure> assumed_figures(const nlohmann::json& resolved) {
  std::vector<AssumedFigure> out;
  if (!resolved.is_object() || !resolved.contains("gpu") || !resolved.at("gpu").is_string()) return out;
  const nlohmann::json entry = gpu_entry(resolved.at("gpu").get<std::string>());
  if (!entry.contains("assumed")) return out;
  for (auto it = entry.at("assumed").begin(); it != entry.at("assumed").end(); ++it) {
    const std::string& f = it.key();
    const bool own = entry.contains(f) && resolved.contains(f) && resolved.at(f) != entry.at(f);
    if (!own) out.push_back({f, it.value().get<std::string>()});
  }
  return out;
}


std::vector<std::pair<std::string, std::string>> used_assumptions(const ClusterSpec& c, const ModelSpec& m) {
  static const std::vector<std::string> shape_only = {"gpu_sms", "gemm_tile_m", "gemm_tile_n", "gemm_max_efficiency",
                                                      "memory_efficiency", "gpu_boost_clock_mhz", "gpu_sustained_clock_mhz"};
  const bool by_shape = c.gpu_sms > 0;
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& a : c.gpu_assumed) {
    const bool shape_field = std::find(shape_only.begin(), shape_only.end(), a.first) != shape_only.end();
    if (a.first == "achieved_efficiency" && by_shape) continue;
    if (shape_field && !by_shape) continue;
    if (a.first == "gemm_max_efficiency_fp8" && !(m.fp8 && by_shape)) continue;
    if (a.first == "gpu_mxfp8_peak_flops_per_s" || a.first == "gpu_fp4_peak_flops_per_s") continue;
    out.push_back(a);
  }
  return out;
}

std::string clock_line(const ClusterSpec& c) {
  std::ostringstream o;
  if (c.gpu_sms == 0) {
    o << "none: a flat rate, achieved_efficiency " << c.achieved_efficiency << " of peak for every FLOP (clock included)";
    return o.str();
  }
  if (c.gpu_boost_clock_mhz == 0) {
    o << "none: compute-bound kernels at the clock of the measurements";
    if (!c.clock_calibration.empty()) o << " (" << c.clock_calibration << ")";
    return o.str();
  }
  std::ostringstream share;
  share.precision(3);
  share << c.sustained_clock_share();
  o << c.gpu_sustained_clock_mhz << " of " << c.gpu_boost_clock_mhz << " MHz, compute-bound kernels at " << share.str()
    << " of the measured rate; "
    << (c.clock_calibration.empty() ? "stated by cluster '" + c.name + "' (compute_source)" : c.clock_calibration);
  return o.str();
}


void apply_gpu_calibration(ClusterSpec& c, const nlohmann::json& j, const std::string& what) {
  Reader r(j, "gpu calibration " + what);
  const std::string gpu = r.req<std::string>("gpu");
  const double eff = r.req<double>("gemm_max_efficiency");
  const double fp8 = r.opt<double>("gemm_max_efficiency_fp8", 0.0);
  const double mem = r.opt<double>("memory_efficiency", 0.0);
  const double clock = r.opt<double>("sm_clock_mhz", 0.0);
  r.opt<double>("measured_tflops", 0.0);
  r.opt<nlohmann::json>("shapes", nlohmann::json());
  const std::string source = r.req<std::string>("source");
  r.done();
  const std::string w = "gpu calibration " + what + ": ";
  if (c.gpu.empty() || gpu != c.gpu)
    throw InputError(w + "gpu = \"" + gpu + "\" is invalid (cluster '" + c.name + "' " +
                     (c.gpu.empty() ? "names no catalog GPU" : "has " + c.gpu) + "; a calibration applies to the GPU it was measured on)");
  if (c.gpu_sms == 0)
    throw InputError(w + "cluster '" + c.name + "' prices compute at a flat rate (gpu_sms = 0); a calibration replaces "
                     "the efficiency of compute by shape");
  for (auto [field, v, given] : {std::tuple{"gemm_max_efficiency", eff, true}, {"gemm_max_efficiency_fp8", fp8, fp8 != 0},
                                 {"memory_efficiency", mem, mem != 0}})
    if (given && !(v > 0 && v <= 1)) {
      std::ostringstream o;
      o << v;
      throw InputError(w + field + " = " + o.str() + " is invalid (must be in (0, 1]: a share of the dense peak)");
    }
  c.gemm_max_efficiency = eff;
  if (fp8 > 0) c.gemm_max_efficiency_fp8 = fp8;
  if (mem > 0) c.memory_efficiency = mem;
  c.gpu_boost_clock_mhz = c.gpu_sustained_clock_mhz = 0;  // the measured rate is at the clock the GPU held
  std::ostringstream o;
  o << "measured, " << what << ": sustained GEMM rate";
  if (clock > 0) o << " at " << clock << " MHz";
  o << " (" << source << ")";
  c.clock_calibration = o.str();
  const std::vector<std::string> replaced = {"gemm_max_efficiency", "gpu_boost_clock_mhz", "gpu_sustained_clock_mhz",
                                             fp8 > 0 ? "gemm_max_efficiency_fp8" : "", mem > 0 ? "memory_efficiency" : ""};
  auto& a = c.gpu_assumed;
  a.erase(std::remove_if(a.begin(), a.end(), [&](const auto& x) { return std::count(replaced.begin(), replaced.end(), x.first) > 0; }),
          a.end());
}

}  // namespace stagecraft::costmodel
