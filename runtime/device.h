// Where a rank's tensors live and how its work is timed: the CPU (host clock, resident set)
// or one CUDA GPU (device events on the current stream, the caching allocator's statistics,
// pinned host memory for offload, bf16 autocast). The CUDA parts are compiled only where the
// LibTorch found has CUDA (STAGECRAFT_WITH_CUDA, runtime/CMakeLists.txt); elsewhere asking for
// a GPU is an InputError. Like compat.h, this is the one place that knows the difference.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/memory_category.h"
#include "runtime/torch_pch.h"
#include "runtime/train.h"

namespace stagecraft::runtime {

// The device a rank computes on: the GPU `local_rank % visible GPUs` with NCCL, and with the
// store backend where this build has CUDA and a GPU is visible (several ranks may share it);
// else the CPU (Gloo exchanges CPU tensors only).
torch::Device device_for_backend(const std::string& backend, int local_rank);

// While alive, operations on `d` autocast to bf16 (when p is Bf16; else it does nothing).
class AutocastScope {
 public:
  AutocastScope(const torch::Device& d, Precision p);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  torch::Device device_;
  bool on_ = false;
  bool was_enabled_ = false;
};
// `t` cast to the dtype autocast runs matrix products in on its device, when autocast is on
// there (inside an AutocastScope); else `t` itself. For hand-written autograd functions.
torch::Tensor autocast_input(const torch::Tensor& t);
// Drops autocast's cached low-precision copies of the parameters (call before they change).
void clear_autocast_cache();
// `w` as a hand-written autograd function's matrix product reads it (outside autograd: the
// function returns w's gradient itself): under autocast its bf16 copy, kept or cast at this use
// as set_weight_copies says (a kept copy is made again once w's version counter moves: an
// optimizer step, a checkpoint load, a parameter all-gather); outside autocast `w` itself.
torch::Tensor autocast_weight(const torch::Tensor& w);
void set_weight_copies(WeightCopies w);  // for this process (one rank); Kept unless set
// fp32 matrix products (cuBLAS) in TF32 on a GPU's tensor cores, or not (LibTorch's default
// since 1.12: not); for this process.
void set_tf32(bool on);
// Forgets the kept copies of `params`: for writes autograd does not see (FSDP's unit gathers
// and releases write through an alias with a version counter of its own).
void drop_weight_copies(const std::vector<torch::Tensor>& params);
// Weights this process has cast to bf16 for matrix products so far (kept: once per weight and
// change; cast: at every use).
std::int64_t weight_casts();

// Blocks until every kernel queued on `d` has finished (no-op on the CPU).
void synchronize(const torch::Device& d);
// An uninitialised host tensor shaped like `t` to copy it out to: pinned when `d` is a GPU,
// so that the copy can run asynchronously.
torch::Tensor host_buffer_like(const torch::Tensor& t, const torch::Device& d);
// Peak bytes in tensors on `d` since the last reset: the caching allocator's statistics on a
// GPU, the counting allocator (memory_counter.h) on the CPU, -1 there when it is not installed.
std::int64_t device_peak_bytes(const torch::Device& d);
void reset_device_peak(const torch::Device& d);
// Bytes in tensors on `d` now, from the same sources (-1 on the CPU without the counter).
std::int64_t device_allocated_bytes(const torch::Device& d);
// The memory counter of `d` (memory_counter.h): the counting CPU allocator, or a trace tracker
// on GPU `d`'s caching allocator (Error where that allocator has none).
void install_memory_counter(const torch::Device& d);
bool memory_counter_installed(const torch::Device& d);
// Bytes per category at the counter's peak since the last reset_device_peak (zero when not
// installed). On a GPU they sum to requested bytes, under the allocator's rounded peak.
MemBreakdown device_peak_breakdown(const torch::Device& d);
// "cpu" -> the CPU, "cuda" -> GPU 0, "cuda:N" -> GPU N; InputError naming `what` when the name
// is not a device or this build or machine has no such GPU.
torch::Device parse_device(const std::string& name, const std::string& what);
// "cpu", or the GPU's name and memory, for reports.
std::string describe(const torch::Device& d);
// The memory one of `local_ranks` ranks of this machine has on `d`: a GPU's total memory over the
// ranks sharing it (the local ranks over the visible GPUs: one each with nccl, several with the
// store backend), or this machine's physical memory over every local rank (CPU tensors); `what`
// gets a few words saying which, for errors.
double memory_per_rank(const torch::Device& d, int local_ranks, std::string& what);

// Points in time of one iteration. On the CPU a mark is the host clock when it is taken; on a
// GPU it is an event recorded on the current stream, i.e. the moment the work queued before it
// finishes. resolve() waits for the device and turns every mark into seconds since `t0`.
class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Timeline(const torch::Device& d);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;
  void begin(Clock::time_point t0);  // drops the previous marks; a reference point now
  int mark();                        // index of a new mark
  void resolve();                    // after it, seconds() is valid for every mark so far
  double seconds(int mark) const;    // since t0
  double resolved_at_s() const;      // host clock at the end of resolve(), since t0

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace stagecraft::runtime
