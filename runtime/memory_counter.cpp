#include "runtime/memory_counter.h"

#include <atomic>

#include "runtime/torch_pch.h"
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

namespace stagecraft::runtime {
namespace {

constexpr size_t kHeaderBytes = 64;  // c10's CPU alignment: the data after the header stays aligned
constexpr uint8_t kPriority = 100;   // above c10's default CPU allocator

std::atomic<std::int64_t> g_live{0};
std::atomic<std::int64_t> g_peak{0};
std::atomic<bool> g_installed{false};

void raise_peak(std::int64_t live) {
  std::int64_t p = g_peak.load(std::memory_order_relaxed);
  while (live > p && !g_peak.compare_exchange_weak(p, live, std::memory_order_relaxed)) {
  }
}

// The data pointer is its own context (raw allocations need that); its block starts a header earlier.
void release(void* data) {
  if (!data) return;
  char* block = static_cast<char*>(data) - kHeaderBytes;
  g_live.fetch_sub(static_cast<std::int64_t>(*reinterpret_cast<size_t*>(block)), std::memory_order_relaxed);
  c10::free_cpu(block);
}

class CountingAllocator final : public c10::Allocator {
 public:
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override { return make(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#else
  c10::DataPtr allocate(size_t n) const override { return make(n); }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

 private:
  static c10::DataPtr make(size_t n) {
    if (n == 0) return {nullptr, nullptr, &release, c10::Device(c10::DeviceType::CPU)};
    char* block = static_cast<char*>(c10::alloc_cpu(n + kHeaderBytes));  // throws on failure
    *reinterpret_cast<size_t*>(block) = n;
    raise_peak(g_live.fetch_add(static_cast<std::int64_t>(n), std::memory_order_relaxed) + static_cast<std::int64_t>(n));
    void* data = block + kHeaderBytes;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
};

}  // namespace

void install_cpu_memory_counter() {
  static CountingAllocator* counter = [] {
    auto* a = new CountingAllocator();  // lives as long as the process: freed blocks come back to it
    c10::SetCPUAllocator(a, kPriority);
    g_installed = true;
    return a;
  }();
  (void)counter;
}

bool cpu_memory_counter_installed() { return g_installed.load(); }

std::int64_t cpu_live_bytes() { return g_installed ? g_live.load(std::memory_order_relaxed) : -1; }

std::int64_t cpu_peak_bytes() { return g_installed ? g_peak.load(std::memory_order_relaxed) : -1; }

void reset_cpu_peak() { g_peak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed); }

}  // namespace stagecraft::runtime
