// Live bytes of tensors, per category (memory_category.h), counted where LibTorch allocates them.
//
// CPU: an allocator that takes c10's CPU blocks (c10::alloc_cpu, 64-byte aligned) with a
// 64-byte header holding the block's size and category, so that counting costs a few atomic
// additions and no lock (a lock only when an allocation raises the peak), and can stay on in
// timed runs. Once installed (per process), every CPU tensor allocated afterwards is counted
// until freed; blocks allocated before stay with the default allocator, uncounted.
//
// CUDA: the caching allocator stays; a trace tracker attached to it (PyTorch 2.x) books each
// allocation and free of one GPU by address (memory_ledger.h), in the requested bytes the
// allocator reports; its own statistics (device.h) give the rounded block totals.
//
// Categories: each allocation is counted under the category of the MemoryScope open on the
// allocating thread (the executor opens one per action), and can be moved to another while it
// lives (tag_tensor: a parameter's gradient, a received input that becomes a saved checkpoint).
// The peak keeps the per-category bytes of its instant (offload_host among them, though not in
// the CPU peak's sum).
#pragma once

#include <cstdint>

#include "runtime/memory_category.h"

namespace at {
class Tensor;
}

namespace stagecraft::runtime {

enum class CountedDevice : std::uint8_t { Cpu, Cuda };

// Installs the counter as LibTorch's CPU allocator; idempotent.
void install_cpu_memory_counter();
// Attaches the counter to the CUDA caching allocator, counting GPU `index` (one per process;
// idempotent for the same GPU). Error where the build has no CUDA, the allocator backend has no
// trace hooks (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync), or another GPU is counted.
void install_cuda_memory_counter(int index);
bool memory_counter_installed(CountedDevice d);
// Bytes in live counted tensors now, or -1 when the counter is not installed. On the CPU, less
// the host copies of offloaded checkpoints (MemCategory::OffloadHost), which on a GPU would not
// be in device memory (on the CPU they share one memory), and less the tensors only an unfinished
// Gloo send holds (MemCategory::SendHeld).
std::int64_t counted_live_bytes(CountedDevice d);
// The largest counted_live_bytes since the last reset_counted_peak (or the installation), or -1.
std::int64_t counted_peak_bytes(CountedDevice d);
// Starts a new peak from the bytes live now.
void reset_counted_peak(CountedDevice d);
// Live bytes per category now, and at the instant of the peak (all zero when not installed).
MemBreakdown counted_live_breakdown(CountedDevice d);
MemBreakdown counted_peak_breakdown(CountedDevice d);

// Counts the storage of `t` under `c` from now on, when a counter counts it (else nothing).
// Call it from the thread that owns the tensor; the tensor must stay alive meanwhile.
void tag_tensor(const at::Tensor& t, MemCategory c);

}  // namespace stagecraft::runtime
