#include "runtime/memory_counter_cuda.h"
#include "runtime/memory_counter.h"

#include <atomic>
#include <mutex>
#include <string>
#include <type_traits>

#include "runtime/torch_pch.h"
#include "schedules/error.h"

#if defined(STAGECRAFT_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace stagecraft::runtime {
namespace cuda_counter {
namespace {

std::atomic<int> g_device{-1};  // the GPU counted, -1 before installation

AddressBook& book() {
  static AddressBook b(ledger());
  return b;
}

}  // namespace

Ledger& ledger() {
  static Ledger l(/*host_shares_device=*/false);
  return l;
}

bool installed() { return g_device.load(std::memory_order_relaxed) >= 0; }

void retag(const at::Tensor& t, MemCategory c) {
  if (!installed()) return;
  book().retag(reinterpret_cast<std::uintptr_t>(t.storage().data_ptr().get()), c);
}

}  // namespace cuda_counter

void install_cuda_memory_counter(int index) {
#if defined(STAGECRAFT_WITH_CUDA)
  using cuda_counter::g_device;
  static std::mutex install_mutex;
  std::lock_guard<std::mutex> lock(install_mutex);
  const int counted = g_device.load();
  if (counted == index) return;
  if (counted >= 0)
    throw Error("runtime: the CUDA memory counter counts GPU " + std::to_string(counted) + "; it counts one GPU per process, not also GPU " +
                std::to_string(index));
  const torch::Device d(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  // The caching allocator sets up its devices at the first allocation; a tracker attached before
  // reaches none of them.
  (void)torch::empty({1}, torch::TensorOptions().device(d));
  static std::atomic<bool> attached{false};
  if (!attached.exchange(true)) {
    // Called under the allocator's per-device lock: no PyTorch call in here, and the book's lock
    // is a leaf (memory_ledger.h). Frees count when requested, as the allocator's statistics do.
    auto tracker = [](const auto& te) {
      using Entry = std::decay_t<decltype(te)>;
      if (static_cast<int>(te.device_) != g_device.load(std::memory_order_relaxed)) return;
      if (te.action_ == Entry::ALLOC)
        cuda_counter::book().on_alloc(static_cast<std::uintptr_t>(te.addr_), static_cast<std::int64_t>(te.size_), current_category());
      else if (te.action_ == Entry::FREE_REQUESTED)
        cuda_counter::book().on_free(static_cast<std::uintptr_t>(te.addr_));
    };
    try {
      c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(tracker);
    } catch (const c10::Error& e) {
      attached = false;
      throw Error(std::string("runtime: the CUDA allocator takes no trace tracker, so peak memory has no breakdown by category (") +
                  e.what_without_backtrace() + "); the native caching allocator has one (unset PYTORCH_CUDA_ALLOC_CONF's backend)");
    }
  }
  g_device = index;
  // An allocation must reach the book, else the breakdown would read zero without saying why.
  const std::int64_t before = cuda_counter::ledger().device_live();
  torch::Tensor probe = torch::empty({1024}, torch::TensorOptions().device(d).dtype(torch::kFloat32));
  if (cuda_counter::ledger().device_live() < before + static_cast<std::int64_t>(probe.nbytes())) {
    g_device = -1;
    throw Error("runtime: the CUDA caching allocator did not report an allocation of GPU " + std::to_string(index) +
                " to the memory counter; peak memory has no breakdown by category");
  }
#else
  throw Error("runtime: the CUDA memory counter (GPU " + std::to_string(index) + ") needs a LibTorch built with CUDA (docs/gpu.md)");
#endif
}

}  // namespace stagecraft::runtime
