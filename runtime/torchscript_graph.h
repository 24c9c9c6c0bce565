// TorchScript models as stagecraft graphs (graphs/graph.h; issue 14): a scripted or traced
// module loaded through LibTorch (torch::jit::load), its forward inlined and its attributes
// lifted to graph inputs (torch::jit::LowerGraph; runtime/torchscript_lowered.h), every aten
// operator a node; shapes and dtypes from a run of the graph on an example input, every
// intermediate tensor returned. Parameters are attributed to the operators that read them; a
// parameter read by a second operator is shared (tied weights).
// FLOPs by operator: 2 x output elements x the contracted size for linear, matmul, mm, bmm
// and addmm; one per output element for the other operators (elementwise work).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graphs/graph.h"

namespace stagecraft::runtime {

// The module's forward as a graph, run on example inputs of these shapes (its arguments after
// self; random fp32 values, seeded). Torch-free, for the command line. Throws InputError when
// the file cannot be loaded or the example does not run.
graphs::Graph import_torchscript(const std::string& path, const std::vector<std::vector<std::int64_t>>& example_shapes);

}  // namespace stagecraft::runtime
