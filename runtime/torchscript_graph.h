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

// The import with each of Merak's subgraphs timed on this machine's CPU (the example microbatch:
// a warm-up run, then the median of `repeats`; forward with autograd recording, backward alone)
// and written onto its nodes as fwd_s and bwd_s, shared by their FLOPs (all on the first node
// when none has any), for the graph route to price the measured times (graphs/estimate.h).
// The module must be one the runtime trains: forward(input, target) returns the loss
// (runtime/script_part.h); InputError otherwise.
graphs::Graph import_torchscript_measured(const std::string& path, const std::vector<std::vector<std::int64_t>>& example_shapes,
                                          int repeats = 5);

}  // namespace stagecraft::runtime
