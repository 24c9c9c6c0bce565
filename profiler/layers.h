// Layer profiling (`stagecraft profile`): times one transformer layer, the embedding and the
// head of the runtime's own GPT implementation over a grid of shapes, on the device the runtime
// uses (CPU threads here), with warm-up runs, repeated runs, the median kept and the spread
// recorded; and the activation bytes each saves for its backward. Torch-free interface.
#pragma once

#include <vector>

#include "costmodel/profile.h"

namespace stagecraft::profiler {

struct LayerGridOptions {
  std::vector<int> hidden_sizes = {64};      // h
  std::vector<int> num_heads = {4};          // a (pairs with hidden sizes that it divides)
  std::vector<int> seq_lengths = {64};       // s
  std::vector<int> microbatch_sizes = {1, 2, 4};  // b
  int vocab_size = 256;                      // V, for the embedding and the head
  std::string model_kind = "gpt";            // only gpt runs in the runtime today
  int warmup = 2;                            // untimed runs first
  int runs = 5;                              // timed runs; the median is kept
  int threads = 1;                           // torch intra-op threads
};

// Every (h, a, s, b) of the grid with a dividing h: a transformer layer, the embedding and the
// head at tp = 1 (tensor-parallel degrees other than 1 are left to the cost model's FLOP
// scaling, which says so). Throws InputError for an empty or invalid grid.
std::vector<costmodel::LayerProfile> profile_layers(const LayerGridOptions& opt);

// The optimizer step's time per parameter (AdamW over one layer's parameters).
double profile_optimizer_s_per_param(const LayerGridOptions& opt);

}  // namespace stagecraft::profiler
