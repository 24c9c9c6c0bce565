#include "runtime/script_part.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <unordered_map>

#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include "costmodel/estimate.h"
#include "graphs/estimate.h"
#include "graphs/partition.h"
#include "runtime/torchscript_graph.h"
#include "runtime/train.h"
#include "schedules/error.h"

namespace stagecraft::runtime {

using torch::jit::Node;
using torch::jit::Value;

namespace {

const char* kConvention = "the runtime trains a module whose forward(input, target) returns the scalar loss";

std::string node_desc(const graphs::Graph& g, int k) {
  return "node '" + g.nodes[static_cast<size_t>(k)].name + "' (" + g.nodes[static_cast<size_t>(k)].kind + ")";
}

}  // namespace

ScriptModel::ScriptModel(const std::string& path, const std::vector<std::vector<std::int64_t>>& example_shapes,
                         const graphs::ShardOptions& so)
    : path_(path) {
  torch::jit::Module module = load_script(path);
  example_ = example_inputs(example_shapes);
  lowered_ = lower_script(module, example_, path);
  if (lowered_.num_args != 2)
    throw InputError("torchscript '" + path + "': forward takes " + std::to_string(lowered_.num_args) + " arguments; " + kConvention);
  std::set<const void*> trainable;
  for (const at::Tensor& p : module.parameters()) trainable.insert(p.data_ptr());
  for (const c10::IValue& a : lowered_.attrs) trainable_.push_back(a.isTensor() && trainable.count(a.toTensor().data_ptr()) > 0);
  const auto& outs = lowered_.graph->outputs();
  const auto& vo = lowered_.value_of;
  auto it = outs.size() == 1 ? std::find(vo.begin(), vo.end(), outs[0]) : vo.end();
  if (it == vo.end() || graphs::output_bytes(lowered_.nodes.nodes[static_cast<size_t>(it - vo.begin())]) >
                            graphs::dtype_bytes(lowered_.nodes.nodes[static_cast<size_t>(it - vo.begin())].dtype, "loss"))
    throw InputError("torchscript '" + path + "': forward does not return one scalar tensor; " + kConvention);
  sharding_ = graphs::shard(lowered_.nodes, so);
  if (sharding_.subgraphs.size() < 2)
    throw InputError("torchscript '" + path + "': Merak's sharding gives " + std::to_string(sharding_.subgraphs.size()) +
                     " subgraph; the runtime needs at least 2 (one reading the input, one the target)");
  for (int i = 0; i < static_cast<int>(sharding_.subgraphs.size()); ++i) programs_.push_back(compile(i));
}

// The subgraph's own operators, with the constants, lists and sizes they need cloned in, as a
// graph whose inputs are what it reads from outside: the predecessor's output (or the input,
// or the target) and the parameters.
SubgraphProgram ScriptModel::compile(int i) const {
  const LoweredScript& L = lowered_;
  const graphs::Subgraph& sg = sharding_.subgraphs[static_cast<size_t>(i)];
  const int last = static_cast<int>(sharding_.subgraphs.size()) - 1;
  const std::string where = "torchscript '" + path_ + "': subgraph " + std::to_string(i);
  std::set<Node*> members, operators;
  for (int k : sg.nodes) members.insert(L.value_of[static_cast<size_t>(k)]->node());
  for (size_t k = static_cast<size_t>(L.num_args); k < L.value_of.size(); ++k) operators.insert(L.value_of[k]->node());
  SubgraphProgram prog;
  prog.graph = std::make_shared<torch::jit::Graph>();
  std::unordered_map<Value*, Value*> env;
  for (int k : sg.inputs) {
    SubgraphProgram::Arg a;
    const auto& prev_out = i > 0 ? sharding_.subgraphs[static_cast<size_t>(i - 1)].outputs : std::vector<int>{};
    if (k == 0 && i == 0) a.source = SubgraphProgram::Source::Input;
    else if (k == 1 && i == last) a.source = SubgraphProgram::Source::Target;
    else if (prev_out.size() == 1 && prev_out[0] == k) a.source = SubgraphProgram::Source::Boundary;
    else
      throw InputError(where + " reads " + node_desc(L.nodes, k) + ", which is not the one output of subgraph " + std::to_string(i - 1) +
                       (k < L.num_args ? " (a graph input: the first subgraph alone reads the input, the last alone the target)" : "") +
                       "; the runtime passes one tensor between stages");
    Value* v = L.value_of[static_cast<size_t>(k)];
    env[v] = prog.graph->addInput()->setType(v->type());
    prog.args.push_back(a);
  }
  for (Node* n : L.graph->nodes()) {
    const bool member = members.count(n) > 0;
    if (!member && operators.count(n)) continue;  // another subgraph's operator
    bool ok = true;
    for (Value* v : n->inputs()) ok = ok && (env.count(v) || (member && L.param_index(v) >= 0));
    if (!ok && member) throw InputError(where + ": operator " + n->kind().toQualString() + " reads a value its inputs do not provide");
    if (!ok) continue;  // a helper of another subgraph
    for (Value* v : n->inputs()) {
      if (env.count(v)) continue;
      env[v] = prog.graph->addInput()->setType(v->type());
      prog.args.push_back({SubgraphProgram::Source::Param, L.param_index(v)});
    }
    Node* c = nullptr;
    try {
      c = prog.graph->createClone(n, [&env](Value* v) { return env.at(v); });
    } catch (const std::out_of_range&) {
      if (member) throw InputError(where + ": operator " + n->kind().toQualString() + " uses a value from outside the subgraph");
      continue;
    }
    prog.graph->insertNode(c);
    for (size_t j = 0; j < n->outputs().size(); ++j) env[n->outputs()[j]] = c->outputs()[j];
  }
  Value* out = nullptr;
  if (i == last) {
    out = L.graph->outputs()[0];
  } else {
    if (sg.outputs.size() != 1)
      throw InputError(where + " hands on " + std::to_string(sg.outputs.size()) + " tensors; the runtime passes one tensor between stages");
    out = L.value_of[static_cast<size_t>(sg.outputs[0])];
    prog.out_shape = L.nodes.nodes[static_cast<size_t>(sg.outputs[0])].shape;
  }
  if (!env.count(out)) throw InputError(where + " does not compute what it hands on");
  prog.graph->registerOutput(env[out]);
  torch::jit::EliminateDeadCode(prog.graph);
  prog.code = std::make_shared<torch::jit::Code>(prog.graph, "stagecraft_subgraph_" + std::to_string(i));
  return prog;
}

std::string ScriptModel::attr_name(int attr) const {
  return lowered_.graph->inputs()[static_cast<size_t>(lowered_.num_args + attr)]->debugName();
}

void ScriptModel::check_parts(const std::vector<int>& part_first, const std::vector<int>& part_count) const {
  std::map<int, std::set<int>> parts_of;  // trainable attribute -> the parts reading it
  for (size_t p = 0; p < part_first.size(); ++p)
    for (int i = part_first[p]; i < part_first[p] + part_count[p]; ++i)
      for (const auto& a : program(i).args)
        if (a.source == SubgraphProgram::Source::Param && trainable_[static_cast<size_t>(a.attr)]) parts_of[a.attr].insert(static_cast<int>(p));
  for (const auto& [attr, parts] : parts_of)
    if (parts.size() > 1)
      throw InputError("runtime: parameter '" + attr_name(attr) + "' of '" + path_ + "' is read by model parts " +
                       std::to_string(*parts.begin()) + " and " + std::to_string(*parts.rbegin()) +
                       " (tied weights across stages), whose gradients the runtime does not sum; cut elsewhere (--stage-layers) or untie them");
}

ScriptPart::ScriptPart(const ScriptModel& model, int first, int count, bool embedding, bool head, torch::Device device)
    : model_(model), first_(first), count_(count), device_(device) {
  shape_ = {first, count - (embedding ? 1 : 0) - (head ? 1 : 0), embedding, head};
  if (shape_.num_layers < 0 || first < 0 || first + count > model.subgraphs())
    throw InputError("runtime: model part of subgraphs [" + std::to_string(first) + ", " + std::to_string(first + count) +
                     ") cannot start and end the model (it needs a subgraph for the input and one for the target)");
  for (int i = first; i < first + count; ++i)
    for (const auto& a : model.program(i).args) {
      if (a.source != SubgraphProgram::Source::Param || param_of_.count(a.attr)) continue;
      const c10::IValue& v = model.lowered().attrs[static_cast<size_t>(a.attr)];
      if (!v.isTensor()) continue;  // non-tensor attributes pass as they are
      torch::Tensor t = v.toTensor().detach().clone().to(device);
      if (model.trainable(a.attr)) {
        t.requires_grad_(true);
        params_.emplace_back("a" + std::to_string(a.attr) + "." + model.attr_name(a.attr), t);
      }
      param_of_[a.attr] = t;
    }
}

torch::Tensor ScriptPart::run(int subgraph, const torch::Tensor& boundary, const torch::Tensor& data) const {
  const SubgraphProgram& p = model_.program(subgraph);
  torch::jit::Stack stack;
  for (const auto& a : p.args) {
    switch (a.source) {
      case SubgraphProgram::Source::Boundary: stack.emplace_back(boundary); break;
      case SubgraphProgram::Source::Input:
      case SubgraphProgram::Source::Target: stack.emplace_back(data); break;
      case SubgraphProgram::Source::Param: {
        auto it = param_of_.find(a.attr);
        stack.push_back(it != param_of_.end() ? c10::IValue(it->second) : model_.lowered().attrs[static_cast<size_t>(a.attr)]);
      }
    }
  }
  torch::jit::InterpreterState state(*p.code);
  state.run(stack);
  return stack.back().toTensor();
}

torch::Tensor ScriptPart::embed(const torch::Tensor& input) const { return run(first_, torch::Tensor(), input); }

torch::Tensor ScriptPart::layers(const torch::Tensor& x, int from, int to) const {
  torch::Tensor h = x;
  const int base = first_ + (shape_.embedding ? 1 : 0);
  for (int k = from; k < to; ++k) h = run(base + k, h, torch::Tensor());
  return h;
}

torch::Tensor ScriptPart::loss(const torch::Tensor& x, const torch::Tensor& target) const {
  return run(first_ + count_ - 1, x, target);
}

// The example's shapes: the microbatch size is the example's first dimension (preflight).
std::vector<std::int64_t> ScriptPart::boundary_shape(bool input, std::int64_t /*b*/) const {
  return model_.program(input ? first_ - 1 : first_ + count_ - 1).out_shape;
}

namespace {

double median_s(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Forward and backward seconds of subgraph i on its input x (the previous subgraph's output).
std::pair<double, double> time_subgraph(const ScriptPart& whole, int i, int last, const torch::Tensor& x,
                                        const std::vector<torch::Tensor>& example, int repeats) {
  using Clock = std::chrono::steady_clock;
  auto call = [&](const torch::Tensor& in) {
    if (i == 0) return whole.embed(example[0]);
    if (i == last) return whole.loss(in, example[1]);
    return whole.layers(in, i - 1, i);
  };
  std::vector<double> f, b;
  for (int r = 0; r <= repeats; ++r) {  // run 0 warms up
    torch::Tensor in = i == 0 ? torch::Tensor() : x.detach().requires_grad_(true);
    auto t0 = Clock::now();
    torch::Tensor y = call(in);
    auto t1 = Clock::now();
    if (i == last) y.backward();
    else y.backward(torch::ones_like(y));
    auto t2 = Clock::now();
    if (r == 0) continue;
    f.push_back(std::chrono::duration<double>(t1 - t0).count());
    b.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  return {median_s(f), median_s(b)};
}

}  // namespace

graphs::Graph import_torchscript_measured(const std::string& path, const std::vector<std::vector<std::int64_t>>& example_shapes,
                                          int repeats) {
  if (repeats < 1) throw InputError("measure: repeats = " + std::to_string(repeats) + " is invalid (must be at least 1)");
  ScriptModel sm(path, example_shapes);
  graphs::Graph g = sm.lowered().nodes;
  const int last = sm.subgraphs() - 1;
  ScriptPart whole(sm, 0, sm.subgraphs(), true, true);
  torch::Tensor x;  // the input of subgraph i
  for (int i = 0; i <= last; ++i) {
    const auto [f_s, b_s] = time_subgraph(whole, i, last, x, sm.example(), repeats);
    const graphs::Subgraph& sg = sm.sharding().subgraphs[static_cast<size_t>(i)];
    double flops = 0, bwd = 0;
    for (int k : sg.nodes) flops += g.nodes[static_cast<size_t>(k)].fwd_flops, bwd += g.nodes[static_cast<size_t>(k)].backward_flops();
    for (int k : sg.nodes) {
      graphs::Node& n = g.nodes[static_cast<size_t>(k)];
      const bool first = k == sg.nodes.front();
      n.fwd_s = flops > 0 ? f_s * n.fwd_flops / flops : (first ? f_s : 0);
      n.bwd_s = bwd > 0 ? b_s * n.backward_flops() / bwd : (first ? b_s : 0);
    }
    if (i < last) {
      torch::NoGradGuard ng;
      x = i == 0 ? whole.embed(sm.example()[0]) : whole.layers(x, i - 1, i);
    }
  }
  return g;
}

void prepare_script(TrainOptions& o) {
  if (o.script_path.empty()) return;
  ScriptModel sm(o.script_path, o.example_shapes);
  const graphs::Sharding& sh = sm.sharding();
  o.model = graphs::model_of(sm.lowered().nodes);
  o.model.name = o.script_path;
  o.model.num_layers = sm.subgraphs();
  o.script_flops_per_microbatch = 0;
  for (const graphs::Subgraph& s : sh.subgraphs) o.script_flops_per_microbatch += s.fwd_flops + s.bwd_flops;
  if (!o.plan.stage_layers.empty()) return;
  graphs::PartitionOptions po;
  po.stages = costmodel::plan_schedule(o.plan).stages_per_chain();
  for (const graphs::StagePart& sp : graphs::partition(sh, po).stages) o.plan.stage_layers.push_back(sp.count);
}

}  // namespace stagecraft::runtime
