// Layer profiling (`stagecraft profile`): times one transformer layer, the embedding and the
// head of the runtime's own decoders (GPT, LLaMA) over a grid of shapes, on the device the runtime
// uses (CPU threads, or a CUDA GPU timed with device events), with warm-up runs, repeated runs, the median kept and the spread
// recorded; and the activation bytes each saves for its backward. Torch-free interface.
#pragma once

#include <nlohmann/json.hpp>
#include <functional>
#include <vector>

#include "costmodel/profile.h"

namespace stagecraft::profiler {

struct LayerGridOptions {
  std::vector<int> hidden_sizes = {64};      // h
  std::vector<int> num_heads = {4};          // a (pairs with hidden sizes that it divides)
  std::vector<int> seq_lengths = {64};       // s
  std::vector<int> microbatch_sizes = {1, 2, 4};  // b
  std::vector<int> tp_degrees = {1};         // t: the layer is timed as one rank's shard (t dividing a)
  int vocab_size = 256;                      // V, for the embedding and the head
  std::string model_kind = "gpt";            // the runtime's decoders: gpt, or llama (RMSNorm, rotary,
                                             // SwiGLU, no biases; head size h/a even)
  std::string precision = "fp32";            // fp32, or bf16: layers under autocast as `train
                                             // --precision bf16` runs them (bf16 products, fp32
                                             // weights; each forward's bf16 casts of them are
                                             // among its kept bytes)
  std::string attention_kernel = "materialized";  // the attention core: materialized, or fused
                                             // (scaled_dot_product_attention; LibTorch 2.x)
  int num_kv_heads = 0;                      // key/value heads (grouped-query attention), dividing
                                             // every a of the grid; 0: a
  int warmup = 2;                            // untimed runs first
  int runs = 5;                              // timed runs; the median is kept
  int threads = 1;                           // torch intra-op threads
  std::string device = "cpu";                // cpu, or cuda / cuda:N (a CUDA build of LibTorch):
                                             // timed with device events, memory from the allocator
  std::function<void(long done, long total)> progress;  // after each shape of the grid; empty: none
};

// Every (h, a, t, s, b) of the grid with a dividing h and t dividing a: a transformer layer
// as one tp rank's shard (Megatron's split of attention heads and MLP columns), the embedding
// and the head as the runtime holds them (replicated), each recorded with tp = t. The shard's
// all-reduces are left out of the times: the collectives are measured on their own and the
// cost model adds them. Throws InputError for an empty or invalid grid.
std::vector<costmodel::LayerProfile> profile_layers(const LayerGridOptions& opt);

// The optimizer step's time per parameter (AdamW over one layer's parameters).
double profile_optimizer_s_per_param(const LayerGridOptions& opt);

// What the layers are measured on: device kind and model (the CPU's model name from
// /proc/cpuinfo), intra-op threads, LibTorch's version and the compiler that built this program.
nlohmann::json describe_device(const LayerGridOptions& opt);

}  // namespace stagecraft::profiler
