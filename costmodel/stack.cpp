#include "costmodel/stack.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <utility>

#include "costmodel/json_reader.h"
#include "presets/catalog.h"
#include "schedules/error.h"
#include "schedules/json_read.h"

namespace stagecraft::costmodel {
namespace {

// Every field of MemoryTraffic by its name in a stack file: the one list that reading, writing and
// checking use.
constexpr std::pair<const char*, double MemoryTraffic::*> kTrafficFields[] = {
    {"layer_norm", &MemoryTraffic::layer_norm},
    {"bias_dropout_residual", &MemoryTraffic::bias_dropout_residual},
    {"residual", &MemoryTraffic::residual},
    {"softmax", &MemoryTraffic::softmax},
    {"score_dropout", &MemoryTraffic::score_dropout},
    {"gelu", &MemoryTraffic::gelu},
    {"swiglu", &MemoryTraffic::swiglu},
    {"glu_clamp", &MemoryTraffic::glu_clamp},
    {"rope_unfused", &MemoryTraffic::rope_unfused},
    {"rope_unfused_backward", &MemoryTraffic::rope_unfused_backward},
    {"expert_bias", &MemoryTraffic::expert_bias},
    {"expert_bias_backward", &MemoryTraffic::expert_bias_backward},
    {"cross_entropy", &MemoryTraffic::cross_entropy},
    {"cross_entropy_backward", &MemoryTraffic::cross_entropy_backward},
    {"fp8_cast_transpose", &MemoryTraffic::fp8_cast_transpose},
};

// Fields not given keep `t`'s (the defaults, or the stack a stack extends).
MemoryTraffic traffic_from_json(const nlohmann::json& j, MemoryTraffic t) {
  Reader r(j, "stack.memory_traffic");
  for (const auto& [name, field] : kTrafficFields) t.*field = r.opt<double>(name, t.*field);
  r.done();
  return t;
}

nlohmann::json to_json(const MemoryTraffic& t) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, field] : kTrafficFields) j[name] = t.*field;
  return j;
}

FlashPoint point_from_json(const nlohmann::json& j, const std::string& what) {
  Reader r(j, what);
  FlashPoint p;
  p.gpu = r.req<std::string>("gpu");
  p.head_dim = r.req<int>("head_dim");
  p.seq_length = r.req<int>("seq_length");
  p.causal = r.req<bool>("causal");
  p.fwd_tflops = r.req<double>("fwd_tflops");
  p.bwd_tflops = r.req<double>("bwd_tflops");
  p.peak_tflops = r.req<double>("peak_tflops");
  r.done();
  return p;
}

bool gpu_matches(const std::string& gpu_name, const std::string& key) { return gpu_name.find(key) != std::string::npos; }

double measured(const FlashPoint* p, bool bwd) { return (bwd ? p->bwd_tflops : p->fwd_tflops) / p->peak_tflops; }

// Interpolates the points (one head dimension, one GPU, one causality) in log(s).
double along_seq(std::vector<const FlashPoint*> pts, int s, bool bwd) {
  std::sort(pts.begin(), pts.end(), [](const FlashPoint* a, const FlashPoint* b) { return a->seq_length < b->seq_length; });
  if (s <= pts.front()->seq_length) return measured(pts.front(), bwd);
  if (s >= pts.back()->seq_length) return measured(pts.back(), bwd);
  for (size_t i = 1; i < pts.size(); ++i)
    if (s <= pts[i]->seq_length) {
      const double x = (std::log(s) - std::log(pts[i - 1]->seq_length)) / (std::log(pts[i]->seq_length) - std::log(pts[i - 1]->seq_length));
      return measured(pts[i - 1], bwd) + x * (measured(pts[i], bwd) - measured(pts[i - 1], bwd));
    }
  return measured(pts.back(), bwd);
}

// The fraction of peak of one pass from `pts`: the asked causality where measured (else the
// other), the nearest measured head dimension (ties: the larger), averaged over GPUs.
double one_pass(const std::vector<const FlashPoint*>& pts, int d, int s, bool causal, bool bwd) {
  std::vector<const FlashPoint*> have, same;
  for (const FlashPoint* p : pts)
    if ((bwd ? p->bwd_tflops : p->fwd_tflops) > 0) have.push_back(p);
  if (have.empty()) return 0;
  for (const FlashPoint* p : have)
    if (p->causal == causal) same.push_back(p);
  if (same.empty()) same = have;
  int best_d = same.front()->head_dim;
  for (const FlashPoint* p : same)
    if (std::abs(p->head_dim - d) < std::abs(best_d - d) || (std::abs(p->head_dim - d) == std::abs(best_d - d) && p->head_dim > best_d))
      best_d = p->head_dim;
  std::map<std::string, std::vector<const FlashPoint*>> by_gpu;
  for (const FlashPoint* p : same)
    if (p->head_dim == best_d) by_gpu[p->gpu].push_back(p);
  double sum = 0;
  for (const auto& [g, v] : by_gpu) sum += along_seq(v, s, bwd);
  return sum / static_cast<double>(by_gpu.size());
}

}  // namespace

FlashEfficiency flash_efficiency(const KernelStack& k, const std::string& gpu_name, int d, int s, bool causal) {
  FlashEfficiency out;
  if (k.flash.empty()) return out;
  std::vector<const FlashPoint*> gpu_pts;
  for (const FlashPoint& p : k.flash)
    if (gpu_matches(gpu_name, p.gpu)) gpu_pts.push_back(&p);
  out.exact_gpu = !gpu_pts.empty();
  if (gpu_pts.empty()) {
    for (const FlashPoint& p : k.flash) gpu_pts.push_back(&p);
    out.note = "stack '" + k.name + "' has no " + k.flash_kernel + " measurement on GPU '" + gpu_name +
               "': its measured fractions of peak on the GPUs it has are used";
  }
  out.fwd = one_pass(gpu_pts, d, s, causal, false);
  out.bwd = one_pass(gpu_pts, d, s, causal, true);
  if (out.bwd <= 0) out.bwd = out.fwd;  // no backward measured at all: its forward's fraction
  return out;
}

nlohmann::json to_json(const KernelStack& k) {
  nlohmann::json flash = nlohmann::json::array();
  for (const FlashPoint& p : k.flash)
    flash.push_back({{"gpu", p.gpu},
                     {"head_dim", p.head_dim},
                     {"seq_length", p.seq_length},
                     {"causal", p.causal},
                     {"fwd_tflops", p.fwd_tflops},
                     {"bwd_tflops", p.bwd_tflops},
                     {"peak_tflops", p.peak_tflops}});
  return {{"name", k.name},
          {"memory_traffic", to_json(k.traffic)},
          {"flash_kernel", k.flash_kernel},
          {"flash", flash},
          {"tp_overlap_comm_sms", k.tp_overlap_comm_sms},
          {"grouped_gemm_streams", k.grouped_gemm_streams},
          {"fused_grouped_mlp", k.fused_grouped_mlp},
          {"host", to_json(k.host)},
          {"source", k.source}};
}

KernelStack stack_from_json(const nlohmann::json& j) {
  Reader r(j, "stack");
  // A stack may extend another (a preset name or a file): it starts from that stack's figures
  // and replaces the ones it gives (memory_traffic field by field, flash as a whole).
  const std::string base = r.opt<std::string>("extends", "");
  KernelStack k = base.empty() ? KernelStack{} : load_stack(base);
  k.name = r.req<std::string>("name");
  if (j.contains("memory_traffic")) k.traffic = traffic_from_json(j.at("memory_traffic"), k.traffic);
  r.opt<nlohmann::json>("memory_traffic", nlohmann::json::object());
  k.flash_kernel = r.opt<std::string>("flash_kernel", k.flash_kernel);
  if (j.contains("flash")) {
    const nlohmann::json flash = r.opt<nlohmann::json>("flash", nlohmann::json::array());
    if (!flash.is_array()) throw InputError("stack.flash = " + flash.dump() + " is invalid (expected an array of measured points)");
    k.flash.clear();
    for (size_t i = 0; i < flash.size(); ++i) k.flash.push_back(point_from_json(flash[i], "stack.flash[" + std::to_string(i) + "]"));
  }
  k.tp_overlap_comm_sms = r.opt<int>("tp_overlap_comm_sms", k.tp_overlap_comm_sms);
  k.grouped_gemm_streams = r.opt<int>("grouped_gemm_streams", k.grouped_gemm_streams);
  k.fused_grouped_mlp = r.opt<bool>("fused_grouped_mlp", k.fused_grouped_mlp);
  // The host's costs belong to the framework, not the kernels: a stack may name another's.
  if (j.contains("host")) {
    const nlohmann::json& h = j.at("host");
    k.host = h.is_string() ? load_stack(h.get<std::string>()).host : host_costs_from_json(h, k.host);
  }
  r.opt<nlohmann::json>("host", nlohmann::json::object());
  const std::string own = r.opt<std::string>("source", "");
  k.source = base.empty() ? own : own + " Extends '" + base + "': " + k.source;
  r.done();
  check(k);
  return k;
}

void check(const KernelStack& k) {
  auto bad = [&](const std::string& field, double v, const std::string& allowed) {
    throw InputError("stack '" + k.name + "': " + field + " = " + std::to_string(v) + " is invalid (" + allowed + ")");
  };
  for (const auto& [name, field] : kTrafficFields) {
    const double v = k.traffic.*field;
    if (!(v >= 0) || !std::isfinite(v)) bad(std::string("memory_traffic.") + name, v, "bytes per element, 0 or more");
  }
  for (size_t i = 0; i < k.flash.size(); ++i) {
    const FlashPoint& p = k.flash[i];
    const std::string f = "flash[" + std::to_string(i) + "].";
    if (p.head_dim < 1) bad(f + "head_dim", p.head_dim, "at least 1");
    if (p.seq_length < 1) bad(f + "seq_length", p.seq_length, "at least 1");
    if (!(p.peak_tflops > 0)) bad(f + "peak_tflops", p.peak_tflops, "greater than 0");
    if (!(p.fwd_tflops > 0) || p.fwd_tflops > p.peak_tflops) bad(f + "fwd_tflops", p.fwd_tflops, "in (0, peak_tflops]");
    if (!(p.bwd_tflops >= 0) || p.bwd_tflops > p.peak_tflops) bad(f + "bwd_tflops", p.bwd_tflops, "in [0, peak_tflops]; 0: not measured");
  }
  if (k.tp_overlap_comm_sms < 0) bad("tp_overlap_comm_sms", k.tp_overlap_comm_sms, "0 or more");
  if (k.grouped_gemm_streams < 0) bad("grouped_gemm_streams", k.grouped_gemm_streams, "0 (one grouped kernel) or more");
  check(k.host, k.name);
}

std::vector<std::string> stack_preset_names() { return presets::names("stack"); }

const KernelStack& load_stack(const std::string& name) {
  static std::recursive_mutex mu;  // a stack that extends another loads it under the same lock
  static std::map<std::string, KernelStack> cache;
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (auto it = cache.find(name); it != cache.end()) return it->second;
  if (const presets::Entry* e = presets::find("stack", name))
    return cache.emplace(name, stack_from_json(schedules::parse_json(e->json, "stack preset " + name))).first->second;
  if (name.size() > 5 && name.substr(name.size() - 5) == ".json")
    return cache.emplace(name, stack_from_json(schedules::read_json_file(name, "stack file"))).first->second;
  throw InputError("stack '" + name + "' is not a preset (presets: " + presets::joined(stack_preset_names()) +
                   ") nor a .json file");
}

}  // namespace stagecraft::costmodel
