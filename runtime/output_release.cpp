#include "runtime/output_release.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/variable.h>

namespace stagecraft::runtime {

void release_output_values(torch::Tensor& out) {
  out.set_data(torch::empty({1}, out.options().requires_grad(false)));
}

void backward_through(const torch::Tensor& out, const torch::Tensor& grad) {
  torch::autograd::Engine::get_default_engine().execute({torch::autograd::impl::gradient_edge(out)}, {grad},
                                                         /*keep_graph=*/false, /*create_graph=*/false,
                                                         /*accumulate_grad=*/true);
}

}  // namespace stagecraft::runtime
