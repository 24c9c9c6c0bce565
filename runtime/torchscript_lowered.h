// A TorchScript module's forward as one flat graph that both the importer (graph sizes for
// graphs/) and the runtime (training its subgraphs as pipeline stages) read: inlined, every
// attribute read lifted to a graph input (torch::jit::LowerGraph), so the parameters are
// inputs after the forward's arguments; and the graphs::Graph of its aten operators, with the
// jit value each graph node stands for. Includes torch; the runtime's sources only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/torch_pch.h"

#include <torch/csrc/jit/ir/ir.h>
#include <torch/script.h>

#include "graphs/graph.h"

namespace stagecraft::runtime {

struct LoweredScript {
  std::shared_ptr<torch::jit::Graph> graph;  // inputs: the forward's arguments, then the attributes
  std::vector<c10::IValue> attrs;            // values of the attribute inputs, in input order
                                             // (tensors are parameters and buffers)
  int num_args = 0;                          // the forward's arguments (after self)
  graphs::Graph nodes;                       // graph inputs first, then one node per aten operator
  std::vector<torch::jit::Value*> value_of;  // (nodes) the jit value each graph node stands for
  // The attribute a graph input is (index into attrs), or -1 for an argument or any other value.
  int param_index(const torch::jit::Value* v) const;
};

// Lowers and imports `module`, running it once on `example` (one tensor per argument) for the
// shapes. Throws InputError when it has no tensor operators or does not run on the example.
LoweredScript lower_script(const torch::jit::Module& module, const std::vector<torch::Tensor>& example, const std::string& name);

// Loads a saved module (torch::jit::load); InputError naming the file when it cannot.
torch::jit::Module load_script(const std::string& path);

// Example arguments of these shapes: seeded random fp32.
std::vector<torch::Tensor> example_inputs(const std::vector<std::vector<std::int64_t>>& shapes);

// LibTorch's message without its backtrace: the first line.
std::string first_line(const std::exception& e);

}  // namespace stagecraft::runtime
