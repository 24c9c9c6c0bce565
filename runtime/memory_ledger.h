// The bookkeeping behind the memory counters (memory_counter.h), apart from any allocator so that
// it can be tested without one: live bytes per category, the peak and the categories at its
// instant (Ledger), and blocks known by address (AddressBook: the CUDA caching allocator reports
// allocations and frees by address, memory_counter_cuda.cpp).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "runtime/memory_category.h"

namespace stagecraft::runtime {

// Live bytes per category and the peak of the bytes a device holds. Lock-free except when an
// allocation raises the peak (then the categories are copied under a lock).
class Ledger {
 public:
  // `host_shares_device`: the CPU, where host and device memory are one; then host copies of
  // offloaded checkpoints and tensors only a Gloo send holds are not device bytes
  // (memory_counter.h). A GPU's ledger counts every category it is told of.
  explicit Ledger(bool host_shares_device);
  void add(std::int64_t bytes, MemCategory c);     // an allocation; may raise the peak
  void remove(std::int64_t bytes, MemCategory c);  // a free
  void move(std::int64_t bytes, MemCategory from, MemCategory to);
  std::int64_t device_live() const;  // bytes the device holds now
  std::int64_t peak() const;         // the largest device_live() since the last reset
  void reset_peak();                 // the peak starts again from device_live()
  MemBreakdown live_breakdown() const;
  MemBreakdown peak_breakdown() const;  // per category at the peak's instant

 private:
  void raise_peak();
  bool host_shares_device_;
  std::atomic<std::int64_t> live_{0};
  std::atomic<std::int64_t> peak_{0};
  std::array<std::atomic<std::int64_t>, kMemCategories> cat_{};
  mutable std::mutex peak_mutex_;  // guards peak_cat_ and the peak's raises
  MemBreakdown peak_cat_{};
};

// Blocks by address, each with its size and category, booked into a Ledger. For allocators that
// report events (alloc, free) rather than hand out blocks with headers. Thread-safe; a leaf lock
// (callers may hold an allocator's lock, nothing is called back under it).
class AddressBook {
 public:
  explicit AddressBook(Ledger& ledger) : ledger_(ledger) {}
  void on_alloc(std::uintptr_t addr, std::int64_t bytes, MemCategory c);
  // A free of a block never seen (allocated before the book opened) is ignored.
  void on_free(std::uintptr_t addr);
  // Moves the block at `addr` to `c`; false when the book does not know it.
  bool retag(std::uintptr_t addr, MemCategory c);
  std::size_t blocks() const;

 private:
  struct Block {
    std::int64_t bytes;
    MemCategory category;
  };
  Ledger& ledger_;
  mutable std::mutex mutex_;
  std::unordered_map<std::uintptr_t, Block> blocks_;
};

// The category of the MemoryScope open on the calling thread (Other outside any).
MemCategory current_category();

}  // namespace stagecraft::runtime
