// What the executor runs on each stage it holds: a model part (pipeline stage) as one rank
// holds it. Two kinds: the built-in decoder (GptPart, runtime/model.h) and a TorchScript
// model's run of subgraphs (ScriptPart, runtime/script_part.h). A part starts the model
// (`embed`, reading the microbatch's input), runs `layers` (the units recomputation fractions
// count), and may end it (`loss`, reading the microbatch's target).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/torch_pch.h"

namespace stagecraft::runtime {

struct PartShape {
  int first_layer = 0;   // global index of the part's first layer (unit)
  int num_layers = 0;    // layers in this part
  bool embedding = false;  // the part starts the model (GPT: token and position embedding)
  bool head = false;       // the part ends it (GPT: final norm, LM head, loss)
};

class ModelPart {
 public:
  virtual ~ModelPart() = default;
  virtual const PartShape& shape() const = 0;
  virtual const torch::Device& device() const = 0;
  // The microbatch's input (GPT: (b, s) tokens) to the first layer's input; embedding parts only.
  virtual torch::Tensor embed(const torch::Tensor& input) const = 0;
  // Layers [from, to) of the part on x; to = from gives x.
  virtual torch::Tensor layers(const torch::Tensor& x, int from, int to) const = 0;
  // The last layer's output and the microbatch's target to the scalar loss; head parts only.
  virtual torch::Tensor loss(const torch::Tensor& x, const torch::Tensor& target) const = 0;
  // Shape of the tensor the part receives from the previous stage (input = true) or of the
  // gradient it receives for its output (false), for microbatches of b samples.
  virtual std::vector<std::int64_t> boundary_shape(bool input, std::int64_t b) const = 0;
  // Every parameter with a stable name, in a fixed order.
  virtual const std::vector<std::pair<std::string, torch::Tensor>>& named_parameters() const = 0;
};

}  // namespace stagecraft::runtime
