// A TorchScript model trained as pipeline stages (issue 14; docs/graphs.md): the module's
// forward(input, target) -> scalar loss, lowered (torchscript_lowered.h) and cut by Merak's
// graph sharding (graphs/shard.h) into a sequence of subgraphs, each compiled to a program of
// its own operators; a stage runs a contiguous run of them. The first subgraph reads the
// input (the part's `embed`), the last the target (its `loss`), every other one the single
// tensor the subgraph before it hands on. Parameters are the module's, copied into each stage
// that reads them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graphs/shard.h"
#include "runtime/part.h"
#include "runtime/torchscript_lowered.h"

namespace stagecraft::runtime {

// One subgraph compiled to run alone.
struct SubgraphProgram {
  enum class Source { Boundary, Input, Target, Param };
  struct Arg {
    Source source = Source::Boundary;  // where the program's input comes from
    int attr = -1;                     // Param: index into LoweredScript::attrs
  };
  std::shared_ptr<torch::jit::Graph> graph;  // the subgraph's operators and what they need
  std::shared_ptr<torch::jit::Code> code;    // compiled for the interpreter
  std::vector<Arg> args;                     // the graph's inputs, in order
  std::vector<std::int64_t> out_shape;       // what it returns for one microbatch (scalar loss: {})
};

class ScriptModel {
 public:
  // Loads, lowers and shards the module at `path` with one example microbatch per argument;
  // InputError when the module is not a forward(input, target) returning a scalar, or when a
  // subgraph reads anything but its predecessor's one output and its own graph input.
  ScriptModel(const std::string& path, const std::vector<std::vector<std::int64_t>>& example_shapes,
              const graphs::ShardOptions& so = {});
  const LoweredScript& lowered() const { return lowered_; }
  const graphs::Sharding& sharding() const { return sharding_; }
  const SubgraphProgram& program(int subgraph) const { return programs_.at(static_cast<size_t>(subgraph)); }
  const std::vector<torch::Tensor>& example() const { return example_; }  // the example microbatch
  int subgraphs() const { return static_cast<int>(programs_.size()); }
  // Refuses a parameter read by subgraphs of two different parts (tied weights across stages
  // need a gradient all-reduce between them, which the runtime does not do). `part_first` and
  // `part_count` list the parts' subgraph runs.
  void check_parts(const std::vector<int>& part_first, const std::vector<int>& part_count) const;
  bool trainable(int attr) const { return trainable_.at(static_cast<size_t>(attr)); }  // a parameter, not a buffer
  std::string attr_name(int attr) const;  // the lowered graph's name for the attribute

 private:
  SubgraphProgram compile(int subgraph) const;
  std::string path_;
  LoweredScript lowered_;
  graphs::Sharding sharding_;
  std::vector<SubgraphProgram> programs_;
  std::vector<bool> trainable_;
  std::vector<torch::Tensor> example_;  // input, target  // (attrs) the module's parameters (the rest: buffers, constants)
};

// Subgraphs [first, first + count) of a ScriptModel as one stage: `embed` runs the first on
// the input (first part only), `layers` the middle ones, `loss` the last (last part only).
class ScriptPart : public ModelPart {
 public:
  ScriptPart(const ScriptModel& model, int first, int count, bool embedding, bool head, torch::Device device = torch::kCPU);
  const PartShape& shape() const override { return shape_; }
  const torch::Device& device() const override { return device_; }
  torch::Tensor embed(const torch::Tensor& input) const override;
  torch::Tensor layers(const torch::Tensor& x, int from, int to) const override;
  torch::Tensor loss(const torch::Tensor& x, const torch::Tensor& target) const override;
  std::vector<std::int64_t> boundary_shape(bool input, std::int64_t b) const override;
  const std::vector<std::pair<std::string, torch::Tensor>>& named_parameters() const override { return params_; }

 private:
  torch::Tensor run(int subgraph, const torch::Tensor& boundary, const torch::Tensor& data) const;
  const ScriptModel& model_;
  int first_ = 0, count_ = 0;
  PartShape shape_;
  torch::Device device_;
  std::map<int, torch::Tensor> param_of_;  // attribute -> this part's copy (a leaf)
  std::vector<std::pair<std::string, torch::Tensor>> params_;
};

}  // namespace stagecraft::runtime
