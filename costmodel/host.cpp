#include "costmodel/host.h"

#include <algorithm>
#include <cmath>

#include "costmodel/json_reader.h"
#include "schedules/error.h"

namespace stagecraft::costmodel {
namespace {

HostOps ops_from_json(const nlohmann::json& j, const std::string& what, HostOps o) {
  Reader r(j, what);
  o.python = r.opt<double>("python", o.python);
  o.per_expert = r.opt<double>("per_expert", o.per_expert);
  r.done();
  return o;
}

nlohmann::json ops_json(const HostOps& o) { return {{"python", o.python}, {"per_expert", o.per_expert}}; }

// Each block's pair of passes, by name, for reading, writing and checking alike.
template <typename H, typename F>
void each_block(H& h, F f) {
  f("attn_f", h.attn_f), f("attn_b", h.attn_b), f("mlp_f", h.mlp_f), f("mlp_b", h.mlp_b);
  f("router_f", h.router_f), f("router_b", h.router_b), f("preprocess_f", h.preprocess_f);
  f("preprocess_b", h.preprocess_b), f("experts_f", h.experts_f), f("experts_b", h.experts_b);
}

// Host seconds of one block's pass: one launch when it runs as a graph (the replay, issued from
// Python), else every kernel it issues.
double host_block_s(const HostCosts& h, const HostOps& o, bool graphed, double local_experts) {
  if (graphed) return o.python + o.per_expert > 0 ? h.python_op_s : 0.0;
  return o.python * h.python_op_s + o.per_expert * local_experts * h.launch_s;
}

}  // namespace

HostCosts host_costs_from_json(const nlohmann::json& j, HostCosts base) {
  Reader r(j, "stack.host");
  base.python_op_s = r.opt<double>("python_op_s", base.python_op_s);
  base.launch_s = r.opt<double>("launch_s", base.launch_s);
  each_block(base, [&](const char* name, HostOps& o) {
    if (j.contains(name)) o = ops_from_json(j.at(name), std::string("stack.host.") + name, o);
    r.opt<nlohmann::json>(name, nlohmann::json::object());
  });
  base.fp8_quantize_per_expert_f = r.opt<double>("fp8_quantize_per_expert_f", base.fp8_quantize_per_expert_f);
  base.fp8_quantize_per_expert_b = r.opt<double>("fp8_quantize_per_expert_b", base.fp8_quantize_per_expert_b);
  base.source = r.opt<std::string>("source", base.source);
  r.done();
  return base;
}

nlohmann::json to_json(const HostCosts& h) {
  nlohmann::json j = {{"python_op_s", h.python_op_s},
                      {"launch_s", h.launch_s},
                      {"fp8_quantize_per_expert_f", h.fp8_quantize_per_expert_f},
                      {"fp8_quantize_per_expert_b", h.fp8_quantize_per_expert_b},
                      {"source", h.source}};
  each_block(h, [&](const char* name, const HostOps& o) { j[name] = ops_json(o); });
  return j;
}

void check(const HostCosts& h, const std::string& stack) {
  auto at_least_zero = [&](const std::string& field, double v, const char* what) {
    if (!(v >= 0) || !std::isfinite(v))
      throw InputError("stack '" + stack + "': host." + field + " = " + std::to_string(v) + " is invalid (" + what +
                       ", 0 or more)");
  };
  at_least_zero("python_op_s", h.python_op_s, "seconds");
  at_least_zero("launch_s", h.launch_s, "seconds");
  each_block(h, [&](const char* name, const HostOps& o) {
    at_least_zero(std::string(name) + ".python", o.python, "a count");
    at_least_zero(std::string(name) + ".per_expert", o.per_expert, "a count");
  });
  at_least_zero("fp8_quantize_per_expert_f", h.fp8_quantize_per_expert_f, "a count");
  at_least_zero("fp8_quantize_per_expert_b", h.fp8_quantize_per_expert_b, "a count");
}

HostLayer host_layer(const HostCosts& h, const CudaGraphScopes& g, double local_experts, bool fp8_per_expert) {
  HostLayer out;
  if (h.python_op_s <= 0 || g.full_iteration) return out;  // full-iteration graphs: one launch an iteration
  const double e = local_experts;
  HostOps experts_f = h.experts_f, experts_b = h.experts_b;
  if (fp8_per_expert) {
    experts_f.per_expert += h.fp8_quantize_per_expert_f;
    experts_b.per_expert += h.fp8_quantize_per_expert_b;
  }
  const double attn_f = host_block_s(h, h.attn_f, g.attn, e), attn_b = host_block_s(h, h.attn_b, g.attn, e);
  out.dense_f_s = attn_f + host_block_s(h, h.mlp_f, g.mlp, e);
  out.dense_b_s = attn_b + host_block_s(h, h.mlp_b, g.mlp, e);
  // A graphed MoE block (drop-and-pad) needs no counts on the host: it does not synchronise.
  if (g.moe) {
    out.moe_head_f_s = attn_f + host_block_s(h, experts_f, true, e);
    out.moe_b_s = attn_b + host_block_s(h, experts_b, true, e);
    return out;
  }
  out.synchronises = true;
  out.moe_head_f_s =
      attn_f + host_block_s(h, h.router_f, g.moe_router, e) + host_block_s(h, h.preprocess_f, g.moe_preprocess, e);
  out.moe_tail_f_s = host_block_s(h, experts_f, false, e);
  out.moe_b_s = attn_b + host_block_s(h, h.router_b, g.moe_router, e) +
                host_block_s(h, h.preprocess_b, g.moe_preprocess, e) + host_block_s(h, experts_b, false, e);
  return out;
}

HostWait host_wait(const HostLayer& h, const GpuLayer& g) {
  HostWait w;
  w.dense_f_s = std::max(0.0, h.dense_f_s - (g.attn_f_s + g.mlp_f_s));
  w.dense_b_s = std::max(0.0, h.dense_b_s - (g.attn_b_s + g.mlp_b_s));
  if (h.synchronises) {
    // The synchronisation empties the GPU's queue: the tail's launches start with nothing queued,
    // and the host cannot bank the head's slack across it.
    w.moe_f_s = std::max(0.0, h.moe_head_f_s - g.attn_f_s) + std::max(0.0, h.moe_tail_f_s - g.moe_f_s);
  } else {
    w.moe_f_s = std::max(0.0, h.moe_head_f_s + h.moe_tail_f_s - (g.attn_f_s + g.moe_f_s));
  }
  w.moe_b_s = std::max(0.0, h.moe_b_s - (g.attn_b_s + g.moe_b_s));
  return w;
}

}  // namespace stagecraft::costmodel
