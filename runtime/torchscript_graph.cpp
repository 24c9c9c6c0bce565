#include "runtime/torchscript_graph.h"

#include <map>

#include "runtime/torch_pch.h"

#include <torch/csrc/jit/passes/lower_graph.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/script.h>

#include "runtime/torchscript_lowered.h"
#include "schedules/error.h"

namespace stagecraft::runtime {
namespace {

using torch::jit::Node;
using torch::jit::Value;

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "fp32";
    case at::kHalf: return "fp16";
    case at::kBFloat16: return "bf16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kBool: return "bool";
    default: return "fp32";  // other element types counted as 4 bytes
  }
}

std::string kind_of(const std::string& op) {  // "aten::linear" -> "linear"
  static const std::map<std::string, std::string> k = {{"linear", "linear"}, {"matmul", "matmul"}, {"mm", "matmul"},
                                                       {"bmm", "matmul"}, {"addmm", "linear"}, {"layer_norm", "layernorm"},
                                                       {"embedding", "embedding"}};
  const std::string base = op.substr(op.find("::") + 2);
  auto it = k.find(base);
  return it == k.end() ? base : it->second;
}

// FLOPs of one run of the operator: contractions 2 x output x contracted size, else elementwise.
double flops_of(const std::string& op, const std::vector<at::Tensor>& in, const at::Tensor& out) {
  const double n = static_cast<double>(out.numel());
  if (op == "aten::linear" && in.size() >= 2) return 2 * n * static_cast<double>(in[1].size(-1));
  if ((op == "aten::matmul" || op == "aten::mm" || op == "aten::bmm") && !in.empty() && in[0].dim() >= 1)
    return 2 * n * static_cast<double>(in[0].size(-1));
  if (op == "aten::addmm" && in.size() >= 2) return 2 * n * static_cast<double>(in[1].size(-1));
  return n;
}

// Every tensor an aten operator makes, computed by one run of a copy of the graph that returns
// them all (so no shape functions are needed).
std::map<const Value*, at::Tensor> run_all(const LoweredScript& L, const std::vector<torch::Tensor>& example, const std::string& name) {
  std::shared_ptr<torch::jit::Graph> g = L.graph->copy();
  std::vector<Value*> tensors, originals;
  auto on = L.graph->nodes().begin();
  for (Node* n : g->nodes()) {
    Node* orig = *on;
    ++on;
    if (!n->kind().is_aten()) continue;
    for (size_t k = 0; k < n->outputs().size(); ++k)
      if (n->outputs()[k]->type()->kind() == c10::TypeKind::TensorType) {
        tensors.push_back(n->outputs()[k]);
        originals.push_back(orig->outputs()[k]);
      }
  }
  if (tensors.empty()) throw InputError("torchscript '" + name + "': its forward has no tensor operators");
  Node* tuple = g->insertNode(g->createTuple(tensors));
  while (!g->outputs().empty()) g->eraseOutput(0);
  g->registerOutput(tuple->output());
  torch::jit::Code code(g, "stagecraft_import");
  torch::jit::InterpreterState state(code);
  torch::jit::Stack stack(example.begin(), example.end());
  for (const auto& a : L.attrs) stack.push_back(a);
  try {
    torch::NoGradGuard ng;
    state.run(stack);
  } catch (const std::exception& e) {
    throw InputError("torchscript '" + name + "' does not run on the example input: " + first_line(e));
  }
  const auto values = stack.back().toTuple()->elements();
  std::map<const Value*, at::Tensor> seen;
  for (size_t i = 0; i < tensors.size(); ++i) seen[originals[i]] = values[i].toTensor();
  return seen;
}

// The graph inputs: the forward's arguments, shaped as the example.
void add_inputs(LoweredScript& L, const std::vector<torch::Tensor>& example, std::map<const Value*, at::Tensor>& seen) {
  for (int i = 0; i < L.num_args; ++i) {
    Value* v = L.graph->inputs()[static_cast<size_t>(i)];
    graphs::Node in;
    in.name = v->debugName();
    in.kind = "input";
    in.shape = example[static_cast<size_t>(i)].sizes().vec();
    in.dtype = dtype_name(example[static_cast<size_t>(i)].scalar_type());
    seen[v] = example[static_cast<size_t>(i)];
    L.value_of.push_back(v);
    L.nodes.nodes.push_back(in);
  }
}

// One graph node per aten operator that makes a tensor: its producers, shape, FLOPs, and the
// parameters it reads (owned by the first reader; a later reader shares them: tied weights).
void add_operators(LoweredScript& L, std::map<const Value*, at::Tensor>& seen) {
  std::map<const Value*, int> node_of;
  for (size_t k = 0; k < L.value_of.size(); ++k) node_of[L.value_of[k]] = static_cast<int>(k);
  std::map<int, std::string> param_owner;  // attribute -> the node that owns it
  int counter = 0;
  for (Node* n : L.graph->nodes()) {
    if (!n->kind().is_aten() || n->outputs().empty() || !seen.count(n->output(0))) continue;
    graphs::Node x;
    const std::string op = n->kind().toQualString();
    x.name = std::string(op.substr(op.find("::") + 2)) + "_" + std::to_string(counter++);
    x.kind = kind_of(op);
    std::vector<at::Tensor> ins;
    for (Value* v : n->inputs()) {
      const int a = L.param_index(v);
      if (node_of.count(v)) {
        x.inputs.push_back(node_of[v]);
        ins.push_back(seen[v]);
      } else if (a >= 0 && L.attrs[static_cast<size_t>(a)].isTensor()) {
        const at::Tensor p = L.attrs[static_cast<size_t>(a)].toTensor();
        ins.push_back(p);
        auto owner = param_owner.find(a);
        if (owner == param_owner.end()) {
          param_owner[a] = x.name;
          x.param_bytes += static_cast<double>(p.numel() * p.element_size());
        } else if (x.shares.empty()) {
          x.shares = owner->second;
        }
      } else {
        ins.push_back(seen.count(v) ? seen[v] : at::Tensor());
      }
    }
    const at::Tensor& y = seen[n->output(0)];
    x.shape = y.sizes().vec();
    if (x.shape.empty()) x.shape = {1};
    x.dtype = dtype_name(y.scalar_type());
    x.fwd_flops = flops_of(op, ins, y);
    node_of[n->output(0)] = static_cast<int>(L.nodes.nodes.size());
    L.value_of.push_back(n->output(0));
    L.nodes.nodes.push_back(x);
  }
}

}  // namespace

std::string first_line(const std::exception& e) {
  std::string m = e.what();
  return m.substr(0, m.find('\n'));
}

int LoweredScript::param_index(const torch::jit::Value* v) const {
  for (size_t i = static_cast<size_t>(num_args); i < graph->inputs().size(); ++i)
    if (graph->inputs()[i] == v) return static_cast<int>(i) - num_args;
  return -1;
}

LoweredScript lower_script(const torch::jit::Module& module, const std::vector<torch::Tensor>& example, const std::string& name) {
  LoweredScript L;
  std::shared_ptr<torch::jit::Graph> g;
  try {
    g = module.get_method("forward").graph()->copy();
    torch::jit::Inline(*g);
    auto lowered = torch::jit::LowerGraph(*g, module._ivalue());
    L.graph = lowered.first;
    L.attrs = lowered.second;
  } catch (const std::exception& e) {
    throw InputError("torchscript '" + name + "': its forward cannot be lowered: " + first_line(e));
  }
  L.num_args = static_cast<int>(L.graph->inputs().size() - L.attrs.size());
  if (static_cast<int>(example.size()) != L.num_args)
    throw InputError("torchscript '" + name + "': forward takes " + std::to_string(L.num_args) + " tensor arguments; the example has " +
                     std::to_string(example.size()) + " (one --example-shape per argument)");
  L.nodes.name = name;
  std::map<const Value*, at::Tensor> seen = run_all(L, example, name);
  add_inputs(L, example, seen);
  add_operators(L, seen);
  return L;
}

torch::jit::Module load_script(const std::string& path) {
  try {
    return torch::jit::load(path);
  } catch (const std::exception& e) {
    throw InputError("torchscript '" + path + "' cannot be loaded: " + first_line(e));
  }
}

std::vector<torch::Tensor> example_inputs(const std::vector<std::vector<std::int64_t>>& shapes) {
  torch::manual_seed(0);
  std::vector<torch::Tensor> example;
  for (const auto& s : shapes) example.push_back(torch::randn(s));
  return example;
}

graphs::Graph import_torchscript(const std::string& path, const std::vector<std::vector<std::int64_t>>& example_shapes) {
  return lower_script(load_script(path), example_inputs(example_shapes), path).nodes;
}

}  // namespace stagecraft::runtime
