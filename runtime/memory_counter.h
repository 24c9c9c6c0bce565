// Live bytes of CPU tensors, counted where LibTorch allocates them: an allocator that takes
// c10's CPU blocks (c10::alloc_cpu, 64-byte aligned) with a 64-byte header holding the block's
// size and category, so that counting costs a few atomic additions and no lock (a lock only
// when an allocation raises the peak), and can stay on in timed runs.
// Once installed (per process), every CPU tensor allocated afterwards is counted until freed;
// blocks allocated before stay with the default allocator, uncounted.
//
// Categories: each block is counted under the category of the MemoryScope open on the
// allocating thread (the executor opens one per action), and can be moved to another while it
// lives (tag_tensor: a parameter's gradient, a received input that becomes a saved checkpoint).
// The peak keeps the per-category bytes of its instant (offload_host among them, though not in
// the peak's sum).
#pragma once

#include <array>
#include <cstdint>

namespace at {
class Tensor;
}

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

// Installs the counter as LibTorch's CPU allocator; idempotent.
void install_cpu_memory_counter();
bool cpu_memory_counter_installed();
// Bytes in live counted CPU tensors now (their requested sizes, headers excluded), less the host
// copies of offloaded checkpoints (see cpu_peak_bytes), or -1 when the counter is not installed.
std::int64_t cpu_live_bytes();
// The largest device-equivalent bytes since the last reset_cpu_peak() (or the installation), or
// -1: live bytes less the host copies of offloaded checkpoints (MemCategory::OffloadHost), which
// on a GPU would not be in device memory (on the CPU they share one memory), and less the
// tensors only an unfinished Gloo send holds (MemCategory::SendHeld).
std::int64_t cpu_peak_bytes();
// Starts a new peak from the device-equivalent bytes live now.
void reset_cpu_peak();
// Live bytes per category now, and at the instant of the peak (all zero when not installed).
MemBreakdown cpu_live_breakdown();
MemBreakdown cpu_peak_breakdown();

// Counts the storage of `t` under `c` from now on, when the counter allocated it (else nothing).
// Call it from the thread that owns the tensor; the tensor must stay alive meanwhile.
void tag_tensor(const at::Tensor& t, MemCategory c);

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
