// An output whose values are no longer needed but whose autograd node is: the first stage's
// embedding output, whose values live on as the layers' input (a detached leaf sharing its
// storage) and whose backward (the embedding's scatter into its rows) reads no output. Keeping
// the tensor would keep that storage alive after the leaf is offloaded to host memory; Megatron-
// LM frees it the same way (deallocate_output_tensor and custom_backward, schedules.py).
#pragma once

#include <torch/torch.h>

namespace stagecraft::runtime {

// Points `out` at a one-element placeholder, keeping its autograd node; the old storage goes
// when nothing else holds it.
void release_output_values(torch::Tensor& out);
// Backward from `out`'s gradient edge with `grad` (the shape the node recorded), without the
// shape check against the released tensor that Tensor::backward would make.
void backward_through(const torch::Tensor& out, const torch::Tensor& grad);

}  // namespace stagecraft::runtime
