// The memory counters' cost per allocation (docs/benchmarks.md, "Memory counters"): a CPU
// tensor allocated and freed through LibTorch's default allocator, then through the counting
// allocator (installed once, between the two: it cannot be removed), and the address book the
// CUDA trace tracker books into (runtime/memory_ledger.h), which runs under the caching
// allocator's lock on a GPU.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "runtime/memory_counter.h"
#include "runtime/memory_ledger.h"
#include "runtime/torch_pch.h"

namespace {

using stagecraft::runtime::AddressBook;
using stagecraft::runtime::Ledger;
using stagecraft::runtime::MemCategory;

void alloc_free(benchmark::State& state) {
  const int64_t elements = state.range(0) / 4;
  for (auto _ : state) {
    torch::Tensor t = torch::empty({elements});  // (bytes / 4) fp32, never written: the allocator alone
    benchmark::DoNotOptimize(t.data_ptr());
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_CpuAllocFreeUncounted(benchmark::State& state) {
  if (stagecraft::runtime::memory_counter_installed(stagecraft::runtime::CountedDevice::Cpu)) {
    state.SkipWithError("the counter is already installed");
    return;
  }
  alloc_free(state);
}

void BM_CpuAllocFreeCounted(benchmark::State& state) {
  stagecraft::runtime::install_cpu_memory_counter();
  stagecraft::runtime::MemoryScope scope(MemCategory::Activations);
  alloc_free(state);
}

// One alloc and one free per iteration, at addresses a 4096-block pool would hand out.
void BM_AddressBookAllocFree(benchmark::State& state) {
  Ledger ledger(false);
  AddressBook book(ledger);
  std::vector<std::uintptr_t> live;
  for (std::uintptr_t i = 0; i < static_cast<std::uintptr_t>(state.range(0)); ++i) {
    live.push_back(0x10000000 + i * 512);
    book.on_alloc(live.back(), 512, MemCategory::Activations);
  }
  std::uintptr_t next = 0x90000000;
  size_t victim = 0;
  for (auto _ : state) {
    book.on_free(live[victim]);
    live[victim] = next;
    book.on_alloc(next, 512, MemCategory::Backward);
    next += 512;
    victim = (victim + 7) % live.size();
  }
  state.SetItemsProcessed(state.iterations());
}

}  // namespace

// Registration order is run order: the uncounted run comes before the counter is installed.
BENCHMARK(BM_CpuAllocFreeUncounted)->Arg(1024)->Arg(1 << 20);
BENCHMARK(BM_CpuAllocFreeCounted)->Arg(1024)->Arg(1 << 20);
BENCHMARK(BM_AddressBookAllocFree)->Arg(4096);
BENCHMARK_MAIN();
