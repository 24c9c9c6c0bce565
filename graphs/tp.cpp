#include "graphs/tp.h"

#include <algorithm>
#include <functional>
#include <set>

#include "schedules/error.h"

namespace stagecraft::graphs {

costmodel::ParameterUse parameter_use(const Node& n) {
  if (n.kind == "embedding") return costmodel::ParameterUse::Table;
  if (n.kind == "linear" || (n.param_bytes > 0 && n.kind != "layernorm" && n.kind != "rmsnorm"))
    return costmodel::ParameterUse::Product;
  return costmodel::ParameterUse::NoParameters;  // attention cores, norms, activations, adds, the loss
}

namespace {

bool graph_inputs_only(const Graph& g, const Node& n) {
  for (int p : n.inputs)
    if (g.nodes[static_cast<size_t>(p)].kind != "input") return false;
  return true;
}

// Whether each node's output is split over the tp ranks (the rules above).
std::vector<bool> split_outputs(const Graph& g) {
  std::vector<bool> split(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.tp == "column") split[i] = true;
    else if (n.tp == "vocab") split[i] = !graph_inputs_only(g, n);
    else if (n.tp.empty() && n.kind != "input" && n.kind != "loss") {
      bool any = false, all = true;
      for (int p : n.inputs) {
        if (g.nodes[static_cast<size_t>(p)].kind == "input") continue;
        any = true;
        all = all && split[static_cast<size_t>(p)];
      }
      split[i] = any && all;
    }
  }
  return split;
}

double elements(const Node& n) {
  double e = 1;
  for (std::int64_t d : n.shape) e *= static_cast<double>(d);
  return e;
}

// The first input that is not a graph input (the tensor a linear or a loss reads).
const Node* data_input(const Graph& g, const Node& n) {
  for (int p : n.inputs)
    if (g.nodes[static_cast<size_t>(p)].kind != "input") return &g.nodes[static_cast<size_t>(p)];
  return nullptr;
}

// NodeWork (tp.h) of node k on one of t ranks; `d` divides what the node computes, `share(x)`
// the output of node x.
NodeWork node_work(const Graph& g, int k, int t, double d, const std::function<double(int)>& share,
                   const costmodel::KernelStack& stack) {
  const Node& n = g.nodes[static_cast<size_t>(k)];
  const costmodel::MemoryTraffic& tr = stack.traffic;
  NodeWork w;
  const double e = dtype_bytes(n.dtype, "node " + n.name + ".dtype");
  w.ctx.element_bytes = static_cast<int>(e);
  if (n.shape.size() >= 2) w.ctx.seq_length = static_cast<int>(n.shape[1]);
  const double out = elements(n) / share(k);
  auto by_flops = [&] {  // its backward split by what it has parameters for (workload.h)
    const double share = costmodel::weight_gradient_share(parameter_use(n));
    w.f.other_flops = n.fwd_flops / d;
    w.i.other_flops = (1 - share) * n.backward_flops() / d;
    w.w.other_flops = share * n.backward_flops() / d;
  };
  auto memory = [&](double fwd_bytes) {
    w.f.memory_bytes = fwd_bytes;
    w.i.memory_bytes = costmodel::backward_traffic_bytes(fwd_bytes);
  };
  const Node* in = data_input(g, n);
  if (n.kind == "linear") {
    if (!in || in->shape.empty() || n.shape.empty()) {
      by_flops();
      return w;
    }
    double kk = static_cast<double>(in->shape.back()), nn = static_cast<double>(n.shape.back());
    const double rows = elements(n) / nn;
    if (t > 1 && (n.tp == "column" || (n.tp == "vocab" && d > 1))) nn /= t;
    if (t > 1 && n.tp == "row") kk /= t;
    w.f.gemms = {{rows, nn, kk, 1}};
    w.i.gemms = {{rows, kk, nn, 1}};
    w.w.gemms = {{kk, nn, rows, 1}};
  } else if (n.kind == "attention") {
    if (n.heads < 1 || n.shape.size() != 3) {
      by_flops();
      return w;
    }
    const double b = static_cast<double>(n.shape[0]), s = static_cast<double>(n.shape[1]), h = static_cast<double>(n.shape[2]);
    w.ctx.head_dim = static_cast<int>(h / n.heads);
    w.ctx.causal = n.causal;
    const costmodel::CoreWork c =
        costmodel::attention_core_work(stack, b, s, n.heads / d, h / n.heads, n.kernel == "fused", n.causal, n.dropout, e);
    w.f = c.f;
    w.i = c.i;
  } else if (n.kind == "layernorm" || n.kind == "rmsnorm") {
    memory(out * e * tr.layer_norm);
  } else if (n.kind == "add") {
    memory(out * e * (n.dropout ? tr.bias_dropout_residual : tr.residual));
  } else if (n.kind == "gelu") {
    memory(out * e * tr.gelu);
  } else if (n.kind == "swiglu") {
    memory(out * e * tr.swiglu);
  } else if (n.kind == "loss" && in) {
    const double logits = elements(*in) / d, ein = dtype_bytes(in->dtype, "node " + in->name + ".dtype");
    w.f.memory_bytes = logits * ein * tr.cross_entropy;
    w.i.memory_bytes = logits * ein * tr.cross_entropy_backward;
  } else if (n.kind == "embedding") {
    // a gather of rows: priced as nothing, as the preset's embedding (costs.cpp)
  } else if (n.fwd_flops > 0) {
    by_flops();
  } else {
    double bytes = out * e;
    for (int p : n.inputs) {
      const Node& x = g.nodes[static_cast<size_t>(p)];
      if (x.kind != "input") bytes += elements(x) / share(p) * dtype_bytes(x.dtype, "node " + x.name + ".dtype");
    }
    memory(bytes);
  }
  return w;
}

}  // namespace

std::vector<TpSubgraph> tp_subgraphs(const Graph& g, const Sharding& sh, int t, const costmodel::KernelStack* stack) {
  if (t < 1) throw InputError("tp = " + std::to_string(t) + " is invalid (must be at least 1)");
  const std::vector<bool> split = split_outputs(g);
  const double T = t;
  auto share = [&](int k) { return split[static_cast<size_t>(k)] && t > 1 ? T : 1.0; };  // a split output's divisor
  std::set<int> reduced;  // inputs whose gradient is already all-reduced (Megatron's f, once per tensor)
  std::vector<TpSubgraph> out;
  for (size_t id = 0; id < sh.subgraphs.size(); ++id) {
    const Subgraph& sg = sh.subgraphs[id];
    TpSubgraph ts;
    for (int k : sg.nodes) {
      const Node& n = g.nodes[static_cast<size_t>(k)];
      bool reads_split = false;
      for (int p : n.inputs) reads_split = reads_split || split[static_cast<size_t>(p)];
      const bool divided = !n.tp.empty() ? n.tp != "replicated" : split[static_cast<size_t>(k)] || (n.kind == "loss" && reads_split);
      const double d = divided && t > 1 ? T : 1;
      if (n.fwd_s >= 0) ts.fwd_s += n.fwd_s / d;
      else ts.fwd_flops += n.fwd_flops / d;
      if (stack && (n.fwd_s < 0 || n.bwd_s < 0) && n.kind != "input") {
        NodeWork w = node_work(g, k, t, d, share, *stack);
        if (n.fwd_s >= 0) w.f = {};  // measured: its seconds, not its kernels
        if (n.bwd_s >= 0) w.i = w.w = {};
        ts.work.push_back(std::move(w));
      }
      ts.end = ts.end || n.kind == "embedding" || n.kind == "loss";
      if (n.bwd_s >= 0) {
        ts.bwd_s += n.bwd_s / d;
        ts.bwd_w_s += costmodel::weight_gradient_share(parameter_use(n)) * n.bwd_s / d;
      }
      else ts.bwd_flops += n.backward_flops() / d;
      double params = n.param_bytes;
      if (!n.shares.empty()) {
        const int owner = g.index_of(n.shares);
        if (owner >= 0 && sh.subgraph_of[static_cast<size_t>(owner)] != static_cast<int>(id)) params += g.nodes[static_cast<size_t>(owner)].param_bytes;
      }
      ts.param_bytes += params / d;
      ts.act_bytes += kept_bytes(n) / share(k);
      if (t == 1) continue;
      if (n.tp == "column" && !n.shape.empty() && n.shape.back() % t != 0)  // (a vocabulary is padded, as Megatron-LM pads it)
        throw InputError("graph node '" + n.name + "' (tp " + n.tp + "): its output's last dimension " + std::to_string(n.shape.back()) +
                         " is not divisible by tp = " + std::to_string(t));
      if (n.tp == "row" || (n.tp == "vocab" && !split[static_cast<size_t>(k)])) ts.fwd_allreduce_bytes.push_back(output_bytes(n));
      if (n.tp == "column" || (n.tp == "vocab" && split[static_cast<size_t>(k)]))
        for (int p : n.inputs)
          if (!split[static_cast<size_t>(p)] && g.nodes[static_cast<size_t>(p)].kind != "input" && reduced.insert(p).second)
            ts.bwd_allreduce_bytes.push_back(output_bytes(g.nodes[static_cast<size_t>(p)]));
      if (n.kind == "loss")
        for (int p : n.inputs) {
          const Node& in = g.nodes[static_cast<size_t>(p)];
          if (!split[static_cast<size_t>(p)] || in.shape.empty()) continue;
          double rows = 1;
          for (size_t a = 0; a + 1 < in.shape.size(); ++a) rows *= static_cast<double>(in.shape[a]);
          ts.fwd_allreduce_bytes.push_back(4 * rows);  // the rows' maxima, fp32
          ts.fwd_allreduce_bytes.push_back(8 * rows);  // exponent sums and target logits
        }
    }
    for (int o : sg.outputs)
      if (std::find(sh.common.begin(), sh.common.end(), o) == sh.common.end())
        ts.boundary_bytes += output_bytes(g.nodes[static_cast<size_t>(o)]) / share(o);
    out.push_back(ts);
  }
  return out;
}

}  // namespace stagecraft::graphs
