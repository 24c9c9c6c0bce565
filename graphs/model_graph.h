// The built-in model kinds as graphs (graph.h): GPT, BERT and LLaMA, operator by operator,
// with the FLOPs and parameters of costmodel/flops.h, so that a preset and its graph give the
// same costs (tests/test_graphs.cpp).
#pragma once

#include "costmodel/specs.h"
#include "graphs/graph.h"

namespace stagecraft::graphs {

// One microbatch of `microbatch_size` samples: inputs tokens (b, s), labels (b, s) and the
// attention mask (1, 1, s, s), read by every attention; the embedding; per layer the attention
// block (norm, QKV, attention core, output projection, residual add) and the MLP block (norm,
// up (and gate), activation, down, residual add); the final norm, the LM head (tied to the
// embedding for GPT and BERT) and the loss. Dense models with h / a per head: InputError for
// experts (ModelSpec::num_experts) and other head shapes (head_dim, MLA).
Graph model_graph(const costmodel::ModelSpec& m, int microbatch_size);

}  // namespace stagecraft::graphs
