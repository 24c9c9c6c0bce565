#include "graphs/graph.h"

#include <map>
#include <set>

#include "schedules/error.h"
#include "schedules/json_read.h"

namespace stagecraft::graphs {
namespace {

[[noreturn]] void bad(const std::string& what, const std::string& why) { throw InputError(what + " " + why); }

double number(const nlohmann::json& o, const char* key, double def, const std::string& what) {
  if (!o.contains(key)) return def;
  if (!o.at(key).is_number()) bad(what + "." + key + " = " + o.at(key).dump(), "is invalid (expected a number)");
  return o.at(key).get<double>();
}

std::string text(const nlohmann::json& o, const char* key, const std::string& def, const std::string& what) {
  if (!o.contains(key)) return def;
  if (!o.at(key).is_string()) bad(what + "." + key + " = " + o.at(key).dump(), "is invalid (expected a string)");
  return o.at(key).get<std::string>();
}

const std::set<std::string> kNodeFields = {"name", "kind", "inputs", "shape", "dtype", "param_bytes", "shares", "fwd_flops", "bwd_flops", "tp", "saved_bytes", "fwd_s", "bwd_s", "heads", "kernel", "causal", "dropout"};
const std::set<std::string> kTpRules = {"", "column", "row", "vocab", "replicated"};
const std::set<std::string> kGraphFields = {"format", "name", "nodes"};

// A node's kind: one stagecraft prices by its role (model_graph.cpp, tp.cpp), or an operator's
// name as the TorchScript importer writes it (ATen's, "aten::relu" -> "relu": lower-case letters,
// digits and '_'), priced from its FLOPs. Anything else is a typo or another tool's name.
const char* const kKinds = "input, embedding, linear, matmul, attention, layernorm, rmsnorm, add, gelu, swiglu, loss";
void check_kind(const std::string& kind, const std::string& what) {
  bool op = !kind.empty() && !(kind[0] >= '0' && kind[0] <= '9');
  for (char ch : kind) op = op && ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_');
  if (!op)
    bad(what + ".kind = '" + kind + "'",
        std::string("is invalid (allowed: ") + kKinds +
            ", or an ATen operator's name as the TorchScript importer writes it: lower-case letters, digits and '_', e.g. relu)");
}

}  // namespace

int Graph::index_of(const std::string& node_name) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name == node_name) return static_cast<int>(i);
  return -1;
}

std::vector<std::vector<int>> Graph::users() const {
  std::vector<std::vector<int>> u(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int in : nodes[i].inputs) u[static_cast<size_t>(in)].push_back(static_cast<int>(i));
  return u;
}

int dtype_bytes(const std::string& dtype, const std::string& what) {
  if (dtype == "fp32" || dtype == "int32") return 4;
  if (dtype == "fp16" || dtype == "bf16") return 2;
  if (dtype == "int64") return 8;
  if (dtype == "bool") return 1;
  bad(what + " = '" + dtype + "'", "is invalid (allowed: fp32, fp16, bf16, int64, int32, bool)");
}

double kept_bytes(const Node& n) { return n.saved_bytes < 0 ? output_bytes(n) : n.saved_bytes; }

double output_bytes(const Node& n) {
  double e = 1;
  for (std::int64_t d : n.shape) e *= static_cast<double>(d);
  return e * dtype_bytes(n.dtype, "node " + n.name + ".dtype");
}

Graph from_json(const nlohmann::json& j, const std::string& what) {
  if (!j.is_object()) bad(what, "is not a JSON object");
  if (j.value("format", "") != "stagecraft-graph")
    bad(what + ".format = " + (j.contains("format") ? j["format"].dump() : std::string("(missing)")), "is invalid (allowed: \"stagecraft-graph\")");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!kGraphFields.count(it.key())) bad(what + "." + it.key(), "is not a known field (allowed: format, name, nodes)");
  Graph g;
  g.name = text(j, "name", "graph", what);
  if (!j.contains("nodes") || !j["nodes"].is_array() || j["nodes"].empty()) bad(what + ".nodes", "must be a non-empty array of nodes");
  std::map<std::string, int> seen;
  for (size_t i = 0; i < j["nodes"].size(); ++i) {
    const nlohmann::json& o = j["nodes"][i];
    const std::string w = what + ".nodes[" + std::to_string(i) + "]";
    if (!o.is_object()) bad(w, "is not a JSON object");
    for (auto it = o.begin(); it != o.end(); ++it)
      if (!kNodeFields.count(it.key())) bad(w + "." + it.key(), "is not a known field (allowed: name, kind, inputs, shape, dtype, param_bytes, shares, fwd_flops, bwd_flops, tp, saved_bytes, fwd_s, bwd_s, heads, kernel, causal, dropout)");
    Node n;
    n.name = text(o, "name", "", w);
    if (n.name.empty()) bad(w + ".name", "is missing");
    if (seen.count(n.name)) bad(w + ".name = '" + n.name + "'", "is invalid (a node of that name comes before it)");
    n.kind = text(o, "kind", "", w + " ('" + n.name + "')");
    if (n.kind.empty()) bad(w + ".kind", "is missing");
    check_kind(n.kind, w + " ('" + n.name + "')");
    if (o.contains("inputs")) {
      if (!o["inputs"].is_array()) bad(w + ".inputs", "must be an array of node names");
      for (const auto& in : o["inputs"]) {
        if (!in.is_string()) bad(w + ".inputs = " + o["inputs"].dump(), "is invalid (expected node names)");
        auto f = seen.find(in.get<std::string>());
        if (f == seen.end())
          bad(w + ".inputs: '" + in.get<std::string>() + "'", "is not a node before '" + n.name + "' (nodes must be in topological order)");
        n.inputs.push_back(f->second);
      }
    }
    if (o.contains("shape")) {
      if (!o["shape"].is_array()) bad(w + ".shape", "must be an array of positive integers");
      for (size_t k = 0; k < o["shape"].size(); ++k) {
        int d = schedules::json_int(o["shape"][k], w + ".shape[" + std::to_string(k) + "]");
        if (d < 1) bad(w + ".shape[" + std::to_string(k) + "] = " + std::to_string(d), "is invalid (must be at least 1)");
        n.shape.push_back(d);
      }
    }
    n.dtype = text(o, "dtype", "fp16", w);
    dtype_bytes(n.dtype, w + ".dtype");
    n.param_bytes = number(o, "param_bytes", 0, w);
    n.fwd_flops = number(o, "fwd_flops", 0, w);
    n.bwd_flops = number(o, "bwd_flops", -1, w);
    if (n.param_bytes < 0) bad(w + ".param_bytes = " + std::to_string(n.param_bytes), "is invalid (must be at least 0)");
    if (n.fwd_flops < 0) bad(w + ".fwd_flops = " + std::to_string(n.fwd_flops), "is invalid (must be at least 0)");
    n.shares = text(o, "shares", "", w);
    if (!n.shares.empty() && !seen.count(n.shares) && n.shares != n.name)
      bad(w + ".shares = '" + n.shares + "'", "is not a node before '" + n.name + "'");
    n.tp = text(o, "tp", "", w);
    n.saved_bytes = number(o, "saved_bytes", -1, w);
    n.fwd_s = number(o, "fwd_s", -1, w);
    n.bwd_s = number(o, "bwd_s", -1, w);
    for (const char* k : {"fwd_s", "bwd_s"})
      if (o.contains(k) && o.at(k).get<double>() < 0)
        bad(w + "." + k + " = " + o.at(k).dump(), "is invalid (must be at least 0; absent: priced from the FLOPs)");
    if (o.contains("saved_bytes") && n.saved_bytes < 0)
      bad(w + ".saved_bytes = " + std::to_string(n.saved_bytes), "is invalid (must be at least 0; absent: the output's bytes)");
    if (!kTpRules.count(n.tp)) bad(w + ".tp = '" + n.tp + "'", "is invalid (allowed: column, row, vocab, replicated, or absent)");
    if (o.contains("heads")) {
      n.heads = schedules::json_int(o["heads"], w + ".heads");
      if (n.heads < 1) bad(w + ".heads = " + std::to_string(n.heads), "is invalid (must be at least 1; absent: not given)");
    }
    n.kernel = text(o, "kernel", "materialized", w);
    if (n.kernel != "materialized" && n.kernel != "fused") bad(w + ".kernel = '" + n.kernel + "'", "is invalid (allowed: materialized, fused)");
    for (const char* k : {"causal", "dropout"})
      if (o.contains(k) && !o.at(k).is_boolean()) bad(w + "." + k + " = " + o.at(k).dump(), "is invalid (expected true or false)");
    n.causal = o.value("causal", true);
    n.dropout = o.value("dropout", false);
    seen[n.name] = static_cast<int>(g.nodes.size());
    g.nodes.push_back(std::move(n));
  }
  return g;
}

Graph load_graph(const std::string& path) { return from_json(schedules::read_json_file(path, "graph file"), "graph '" + path + "'"); }

nlohmann::json to_json(const Graph& g) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const Node& n : g.nodes) {
    nlohmann::json o = {{"name", n.name}, {"kind", n.kind}};
    nlohmann::json in = nlohmann::json::array();
    for (int i : n.inputs) in.push_back(g.nodes[static_cast<size_t>(i)].name);
    if (!in.empty()) o["inputs"] = in;
    if (!n.shape.empty()) o["shape"] = n.shape;
    o["dtype"] = n.dtype;
    if (n.param_bytes > 0) o["param_bytes"] = n.param_bytes;
    if (!n.shares.empty()) o["shares"] = n.shares;
    if (n.fwd_flops > 0) o["fwd_flops"] = n.fwd_flops;
    if (n.bwd_flops >= 0) o["bwd_flops"] = n.bwd_flops;
    if (!n.tp.empty()) o["tp"] = n.tp;
    if (n.saved_bytes >= 0) o["saved_bytes"] = n.saved_bytes;
    if (n.fwd_s >= 0) o["fwd_s"] = n.fwd_s;
    if (n.bwd_s >= 0) o["bwd_s"] = n.bwd_s;
    if (n.heads > 0) o["heads"] = n.heads;
    if (n.kernel != "materialized") o["kernel"] = n.kernel;
    if (!n.causal) o["causal"] = false;
    if (n.dropout) o["dropout"] = true;
    nodes.push_back(o);
  }
  return {{"format", "stagecraft-graph"}, {"name", g.name}, {"nodes", nodes}};
}

}  // namespace stagecraft::graphs
