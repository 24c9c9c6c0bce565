#include "runtime/memory_counter.h"

#include <atomic>
#include <mutex>

#include "runtime/torch_pch.h"
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

namespace stagecraft::runtime {
namespace {

constexpr size_t kHeaderBytes = 64;  // c10's CPU alignment: the data after the header stays aligned
constexpr uint8_t kPriority = 100;   // above c10's default CPU allocator

// The header of a block: its requested size and its category; the data starts kHeaderBytes in.
struct Header {
  size_t bytes;
  std::atomic<std::uint8_t> category;
};
static_assert(sizeof(Header) <= kHeaderBytes, "the header must fit ahead of the aligned data");

std::atomic<std::int64_t> g_live{0};
std::atomic<std::int64_t> g_peak{0};
std::atomic<std::int64_t> g_cat[kMemCategories];
std::mutex g_peak_mutex;     // guards g_peak_cat, and g_peak's raises
MemBreakdown g_peak_cat{};   // per category at the peak's instant
std::atomic<bool> g_installed{false};
thread_local MemCategory t_category = MemCategory::Other;

MemBreakdown live_breakdown() {
  MemBreakdown b{};
  for (int i = 0; i < kMemCategories; ++i) b[static_cast<size_t>(i)] = g_cat[i].load(std::memory_order_relaxed);
  return b;
}

// Live bytes a GPU would hold: all but the host copies of offloaded checkpoints and the tensors
// only a Gloo send holds (memory_counter.h).
std::int64_t device_live() {
  auto cat = [](MemCategory c) { return g_cat[static_cast<int>(c)].load(std::memory_order_relaxed); };
  return g_live.load(std::memory_order_relaxed) - cat(MemCategory::OffloadHost) - cat(MemCategory::SendHeld);
}

// An allocation brought the device bytes to `live`: a new peak takes a snapshot of the categories.
void raise_peak(std::int64_t live) {
  if (live <= g_peak.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(g_peak_mutex);
  const std::int64_t now = device_live();  // other threads may have moved it
  if (now <= g_peak.load(std::memory_order_relaxed)) return;
  g_peak.store(now, std::memory_order_relaxed);
  g_peak_cat = live_breakdown();
}

Header* header_of(void* data) { return reinterpret_cast<Header*>(static_cast<char*>(data) - kHeaderBytes); }

// The data pointer is its own context (raw allocations need that); its block starts a header earlier.
void release(void* data) {
  if (!data) return;
  Header* h = header_of(data);
  const auto n = static_cast<std::int64_t>(h->bytes);
  g_cat[h->category.load(std::memory_order_relaxed)].fetch_sub(n, std::memory_order_relaxed);
  g_live.fetch_sub(n, std::memory_order_relaxed);
  h->~Header();
  c10::free_cpu(h);
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
    void* block = c10::alloc_cpu(n + kHeaderBytes);  // throws on failure
    auto* h = new (block) Header{n, {static_cast<std::uint8_t>(t_category)}};
    g_cat[static_cast<int>(t_category)].fetch_add(static_cast<std::int64_t>(n), std::memory_order_relaxed);
    g_live.fetch_add(static_cast<std::int64_t>(n), std::memory_order_relaxed);
    if (t_category != MemCategory::OffloadHost) raise_peak(device_live());
    void* data = reinterpret_cast<char*>(h) + kHeaderBytes;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
};

}  // namespace

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::Other: return "other";
    case MemCategory::Parameters: return "parameters";
    case MemCategory::Gradients: return "gradients";
    case MemCategory::OptimizerStates: return "optimizer_states";
    case MemCategory::Activations: return "activations";
    case MemCategory::Backward: return "backward_working";
    case MemCategory::Received: return "received";
    case MemCategory::OffloadHost: return "offload_host";
    case MemCategory::Communication: return "communication";
    case MemCategory::SendHeld: return "send_held";
    case MemCategory::Count: break;
  }
  return "?";
}

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

std::int64_t cpu_live_bytes() { return g_installed ? device_live() : -1; }

std::int64_t cpu_peak_bytes() { return g_installed ? g_peak.load(std::memory_order_relaxed) : -1; }

void reset_cpu_peak() {
  std::lock_guard<std::mutex> lock(g_peak_mutex);
  g_peak.store(device_live(), std::memory_order_relaxed);
  g_peak_cat = live_breakdown();
}

MemBreakdown cpu_live_breakdown() { return live_breakdown(); }

MemBreakdown cpu_peak_breakdown() {
  std::lock_guard<std::mutex> lock(g_peak_mutex);
  return g_peak_cat;
}

void tag_tensor(const at::Tensor& t, MemCategory c) {
  if (!t.defined() || !t.has_storage()) return;
  const c10::DataPtr& d = t.storage().data_ptr();
  if (d.get_deleter() != &release || !d.get()) return;
  Header* h = header_of(d.get());
  const auto to = static_cast<std::uint8_t>(c);
  const std::uint8_t from = h->category.exchange(to, std::memory_order_relaxed);
  if (from == to) return;
  const auto n = static_cast<std::int64_t>(h->bytes);
  g_cat[to].fetch_add(n, std::memory_order_relaxed);
  g_cat[from].fetch_sub(n, std::memory_order_relaxed);
}

MemoryScope::MemoryScope(MemCategory c) : previous_(t_category) { t_category = c; }
MemoryScope::~MemoryScope() { t_category = previous_; }

}  // namespace stagecraft::runtime
