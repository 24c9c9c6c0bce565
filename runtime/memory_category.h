// What live bytes are for: the categories the memory counters (memory_counter.h) book each
// allocation under, and the scope that says which category a thread's allocations go to.
#pragma once

#include <array>
#include <cstdint>

namespace stagecraft::runtime {

enum class MemCategory : std::uint8_t {
  Other = 0,        // outside any scope: the batch, the loss, LibTorch's own
  Parameters,       // the model's weights
  Gradients,        // parameters' gradients (.grad), once their backward has produced them
  OptimizerStates,  // AdamW's moments
  Activations,      // what forwards and recomputations keep for the backward (and temporaries)
  Backward,         // a backward in progress: activation gradients, gradients not yet tagged
  Received,         // activations and gradients received from other stages, not yet consumed
  OffloadHost,      // host copies of offloaded checkpoints
  Communication,    // gradient buckets, reduction and collective buffers
  SendHeld,         // sent tensors nothing but their send holds: a stage's output after its
                    // backward, an input gradient once posted. On a GPU they go when the transfer
                    // completes; c10d's Gloo sends complete only when waited (the runtime waits
                    // them at OPTIMIZER), so on the CPU they stay till the step's end
  Count
};
constexpr int kMemCategories = static_cast<int>(MemCategory::Count);
using MemBreakdown = std::array<std::int64_t, kMemCategories>;  // bytes per category
const char* mem_category_name(MemCategory c);  // "parameters", "gradients", ...

// Allocations of this thread go to `c` while the scope is open (scopes nest).
class MemoryScope {
 public:
  explicit MemoryScope(MemCategory c);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  MemCategory previous_;
};

}  // namespace stagecraft::runtime
