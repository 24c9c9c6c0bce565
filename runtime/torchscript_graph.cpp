#include "runtime/torchscript_graph.h"

#include <map>

#include "runtime/torch_pch.h"

#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/script.h>

#include "schedules/error.h"

namespace stagecraft::runtime {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// LibTorch's message without its backtrace: the first line.
std::string first_line(const std::exception& e) {
  std::string m = e.what();
  return m.substr(0, m.find('\n'));
}

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

}  // namespace

namespace {

graphs::Graph import_module(const torch::jit::Module& module, const std::vector<torch::Tensor>& example, const std::string& name) {
  torch::jit::Module m = module.clone();
  m.eval();
  torch::jit::Module frozen = torch::jit::freeze_module(m);
  std::shared_ptr<torch::jit::Graph> g = frozen.get_method("forward").graph()->copy();
  torch::jit::Inline(*g);
  // Every tensor an aten operator makes becomes an output too, so one run gives every shape.
  std::vector<Value*> tensors;
  for (Node* n : g->nodes())
    if (n->kind().is_aten())
      for (Value* v : n->outputs())
        if (v->type()->kind() == c10::TypeKind::TensorType) tensors.push_back(v);
  if (tensors.empty()) throw InputError("torchscript '" + name + "': its forward has no tensor operators");
  Node* tuple = g->insertNode(g->createTuple(tensors));
  while (!g->outputs().empty()) g->eraseOutput(0);
  g->registerOutput(tuple->output());
  torch::jit::Code code(g, "stagecraft_import");
  torch::jit::InterpreterState state(code);
  torch::jit::Stack stack;
  stack.emplace_back(frozen._ivalue());
  for (const auto& t : example) stack.emplace_back(t);
  try {
    state.run(stack);
  } catch (const std::exception& e) {
    throw InputError("torchscript '" + name + "' does not run on the example input: " + first_line(e));
  }
  const auto values = stack.back().toTuple()->elements();
  std::map<const Value*, at::Tensor> seen;
  for (size_t i = 0; i < tensors.size(); ++i) seen[tensors[i]] = values[i].toTensor();

  graphs::Graph out;
  out.name = name;
  std::map<const Value*, int> node_of;          // value -> graph node producing it
  std::map<const void*, std::string> param_owner;  // parameter storage -> the node that owns it
  for (size_t i = 1; i < g->inputs().size(); ++i) {  // input 0 is self
    if (i - 1 >= example.size()) throw InputError("torchscript '" + name + "': the example has fewer inputs than forward takes");
    graphs::Node in;
    in.name = g->inputs()[i]->debugName();
    in.kind = "input";
    in.shape = example[i - 1].sizes().vec();
    in.dtype = dtype_name(example[i - 1].scalar_type());
    node_of[g->inputs()[i]] = static_cast<int>(out.nodes.size());
    seen[g->inputs()[i]] = example[i - 1];
    out.nodes.push_back(in);
  }
  int counter = 0;
  for (Node* n : g->nodes()) {
    if (!n->kind().is_aten() || n->outputs().empty() || !seen.count(n->output(0))) continue;
    graphs::Node x;
    const std::string op = n->kind().toQualString();
    x.name = std::string(op.substr(op.find("::") + 2)) + "_" + std::to_string(counter++);
    x.kind = kind_of(op);
    std::vector<at::Tensor> ins;
    for (Value* v : n->inputs()) {
      if (node_of.count(v)) {
        x.inputs.push_back(node_of[v]);
        ins.push_back(seen[v]);
      } else if (v->node()->kind() == c10::prim::Constant && v->type()->kind() == c10::TypeKind::TensorType) {
        const at::Tensor p = torch::jit::toIValue(v)->toTensor();  // a frozen parameter
        ins.push_back(p);
        auto owner = param_owner.find(p.data_ptr());
        if (owner == param_owner.end()) {
          param_owner[p.data_ptr()] = x.name;
          x.param_bytes += static_cast<double>(p.numel() * p.element_size());
        } else if (x.shares.empty()) {
          x.shares = owner->second;  // tied weights: a second reader of the same storage
        }
      } else {
        ins.push_back(at::Tensor());
      }
    }
    const at::Tensor& y = seen[n->output(0)];
    x.shape = y.sizes().vec();
    if (x.shape.empty()) x.shape = {1};
    x.dtype = dtype_name(y.scalar_type());
    x.fwd_flops = flops_of(op, ins, y);
    node_of[n->output(0)] = static_cast<int>(out.nodes.size());
    out.nodes.push_back(x);
  }
  return out;
}

}  // namespace

graphs::Graph import_torchscript(const std::string& path, const std::vector<std::vector<std::int64_t>>& example_shapes) {
  torch::manual_seed(0);
  std::vector<torch::Tensor> example;
  for (const auto& s : example_shapes) example.push_back(torch::randn(s));
  torch::jit::Module m;
  try {
    m = torch::jit::load(path);
  } catch (const std::exception& e) {
    throw InputError("torchscript '" + path + "' cannot be loaded: " + first_line(e));
  }
  return import_module(m, example, path);
}

}  // namespace stagecraft::runtime
