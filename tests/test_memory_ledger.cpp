// The memory counters' bookkeeping (runtime/memory_ledger.h): peaks with their categories, the
// CPU rule that host copies and send-held tensors are not device bytes, and blocks booked by
// address as the CUDA caching allocator's trace reports them (alloc, retag, free, a free never
// seen, an address reused without its free).
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "runtime/memory_ledger.h"

namespace stagecraft::runtime {
namespace {

std::int64_t at(const MemBreakdown& b, MemCategory c) { return b[static_cast<size_t>(c)]; }

TEST(MemoryLedger, PeakKeepsTheCategoriesOfItsInstant) {
  Ledger l(/*host_shares_device=*/false);
  l.add(100, MemCategory::Parameters);
  l.add(50, MemCategory::Activations);
  l.add(30, MemCategory::Backward);  // peak: 180
  l.remove(50, MemCategory::Activations);
  l.add(20, MemCategory::Gradients);  // 150, under the peak
  EXPECT_EQ(l.device_live(), 150);
  EXPECT_EQ(l.peak(), 180);
  const MemBreakdown p = l.peak_breakdown();
  EXPECT_EQ(at(p, MemCategory::Parameters), 100);
  EXPECT_EQ(at(p, MemCategory::Activations), 50);
  EXPECT_EQ(at(p, MemCategory::Backward), 30);
  EXPECT_EQ(at(p, MemCategory::Gradients), 0);
  l.reset_peak();
  EXPECT_EQ(l.peak(), 150);
  EXPECT_EQ(at(l.peak_breakdown(), MemCategory::Gradients), 20);
}

TEST(MemoryLedger, HostCopiesAndSendHeldAreDeviceBytesOnlyOnAGpu) {
  Ledger cpu(/*host_shares_device=*/true), gpu(/*host_shares_device=*/false);
  for (Ledger* l : {&cpu, &gpu}) {
    l->add(100, MemCategory::Activations);
    l->add(40, MemCategory::OffloadHost);
    l->add(10, MemCategory::Communication);
    l->move(10, MemCategory::Communication, MemCategory::SendHeld);
  }
  EXPECT_EQ(cpu.device_live(), 100);
  EXPECT_EQ(cpu.peak(), 110);  // the buffer raised it while it was communication, the host copy did not
  EXPECT_EQ(gpu.device_live(), 150);
  EXPECT_EQ(gpu.peak(), 150);
  EXPECT_EQ(at(cpu.live_breakdown(), MemCategory::SendHeld), 10);
  EXPECT_EQ(at(cpu.live_breakdown(), MemCategory::Communication), 0);
}

TEST(MemoryLedger, AddressBookFollowsAllocatorEvents) {
  Ledger l(false);
  AddressBook book(l);
  book.on_alloc(0x1000, 512, MemCategory::Activations);
  book.on_alloc(0x2000, 1024, MemCategory::Backward);
  EXPECT_TRUE(book.retag(0x2000, MemCategory::Gradients));
  EXPECT_FALSE(book.retag(0x3000, MemCategory::Gradients));  // not booked: nothing moves
  book.on_free(0x1000);
  book.on_free(0x9000);  // allocated before the book opened: ignored
  EXPECT_EQ(l.device_live(), 1024);
  EXPECT_EQ(at(l.live_breakdown(), MemCategory::Gradients), 1024);
  EXPECT_EQ(at(l.live_breakdown(), MemCategory::Backward), 0);
  EXPECT_EQ(at(l.live_breakdown(), MemCategory::Activations), 0);
  // An address handed out again without its free seen: the old block is gone, not doubled.
  book.on_alloc(0x2000, 256, MemCategory::Received);
  EXPECT_EQ(l.device_live(), 256);
  EXPECT_EQ(at(l.live_breakdown(), MemCategory::Gradients), 0);
  EXPECT_EQ(book.blocks(), 1u);
  EXPECT_EQ(l.peak(), 1536);
}

TEST(MemoryLedger, ScopesSetTheCategoryPerThread) {
  EXPECT_EQ(current_category(), MemCategory::Other);
  MemoryScope outer(MemCategory::Activations);
  MemCategory seen_elsewhere = MemCategory::Count;
  std::thread([&] { seen_elsewhere = current_category(); }).join();
  EXPECT_EQ(seen_elsewhere, MemCategory::Other);
  {
    MemoryScope inner(MemCategory::Backward);
    EXPECT_EQ(current_category(), MemCategory::Backward);
  }
  EXPECT_EQ(current_category(), MemCategory::Activations);
}

TEST(MemoryLedger, ConcurrentEventsBalance) {
  Ledger l(false);
  AddressBook book(l);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (std::uintptr_t i = 0; i < 1000; ++i) {
        const std::uintptr_t addr = (static_cast<std::uintptr_t>(t) << 20) + i * 64;
        book.on_alloc(addr, 64, MemCategory::Activations);
        if (i % 2 == 0) book.retag(addr, MemCategory::Gradients);
        book.on_free(addr);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(l.device_live(), 0);
  EXPECT_EQ(book.blocks(), 0u);
  for (std::int64_t b : l.live_breakdown()) EXPECT_EQ(b, 0);
  EXPECT_GE(l.peak(), 64);
  EXPECT_LE(l.peak(), 4 * 64);
}

}  // namespace
}  // namespace stagecraft::runtime
