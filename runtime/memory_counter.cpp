#include "runtime/memory_counter.h"

#include <atomic>

#include "runtime/memory_counter_cuda.h"
#include "runtime/memory_ledger.h"
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

std::atomic<bool> g_installed{false};

Ledger& cpu_ledger() {
  static Ledger ledger(/*host_shares_device=*/true);
  return ledger;
}

Header* header_of(void* data) { return reinterpret_cast<Header*>(static_cast<char*>(data) - kHeaderBytes); }

// The data pointer is its own context (raw allocations need that); its block starts a header earlier.
void release(void* data) {
  if (!data) return;
  Header* h = header_of(data);
  cpu_ledger().remove(static_cast<std::int64_t>(h->bytes), static_cast<MemCategory>(h->category.load(std::memory_order_relaxed)));
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
    const MemCategory c = current_category();
    auto* h = new (block) Header{n, {static_cast<std::uint8_t>(c)}};
    cpu_ledger().add(static_cast<std::int64_t>(n), c);
    void* data = reinterpret_cast<char*>(h) + kHeaderBytes;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
};

void tag_cpu(const at::Tensor& t, MemCategory c) {
  const c10::DataPtr& d = t.storage().data_ptr();
  if (d.get_deleter() != &release || !d.get()) return;
  Header* h = header_of(d.get());
  const auto to = static_cast<std::uint8_t>(c);
  const std::uint8_t from = h->category.exchange(to, std::memory_order_relaxed);
  cpu_ledger().move(static_cast<std::int64_t>(h->bytes), static_cast<MemCategory>(from), c);
}

Ledger* installed_ledger(CountedDevice d) {
  if (d == CountedDevice::Cpu) return g_installed ? &cpu_ledger() : nullptr;
  return cuda_counter::installed() ? &cuda_counter::ledger() : nullptr;
}

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

bool memory_counter_installed(CountedDevice d) { return installed_ledger(d) != nullptr; }

std::int64_t counted_live_bytes(CountedDevice d) {
  const Ledger* l = installed_ledger(d);
  return l ? l->device_live() : -1;
}

std::int64_t counted_peak_bytes(CountedDevice d) {
  const Ledger* l = installed_ledger(d);
  return l ? l->peak() : -1;
}

void reset_counted_peak(CountedDevice d) {
  if (Ledger* l = installed_ledger(d)) l->reset_peak();
}

MemBreakdown counted_live_breakdown(CountedDevice d) {
  const Ledger* l = installed_ledger(d);
  return l ? l->live_breakdown() : MemBreakdown{};
}

MemBreakdown counted_peak_breakdown(CountedDevice d) {
  const Ledger* l = installed_ledger(d);
  return l ? l->peak_breakdown() : MemBreakdown{};
}

void tag_tensor(const at::Tensor& t, MemCategory c) {
  if (!t.defined() || !t.has_storage()) return;
  if (t.is_cuda()) return cuda_counter::retag(t, c);
  if (t.device().is_cpu()) tag_cpu(t, c);
}

}  // namespace stagecraft::runtime
