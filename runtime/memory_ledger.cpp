#include "runtime/memory_ledger.h"

namespace stagecraft::runtime {
namespace {
thread_local MemCategory t_category = MemCategory::Other;
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

MemoryScope::MemoryScope(MemCategory c) : previous_(t_category) { t_category = c; }
MemoryScope::~MemoryScope() { t_category = previous_; }
MemCategory current_category() { return t_category; }

Ledger::Ledger(bool host_shares_device) : host_shares_device_(host_shares_device) {}

void Ledger::add(std::int64_t bytes, MemCategory c) {
  cat_[static_cast<size_t>(c)].fetch_add(bytes, std::memory_order_relaxed);
  live_.fetch_add(bytes, std::memory_order_relaxed);
  if (!host_shares_device_ || c != MemCategory::OffloadHost) raise_peak();
}

void Ledger::remove(std::int64_t bytes, MemCategory c) {
  cat_[static_cast<size_t>(c)].fetch_sub(bytes, std::memory_order_relaxed);
  live_.fetch_sub(bytes, std::memory_order_relaxed);
}

void Ledger::move(std::int64_t bytes, MemCategory from, MemCategory to) {
  if (from == to) return;
  cat_[static_cast<size_t>(to)].fetch_add(bytes, std::memory_order_relaxed);
  cat_[static_cast<size_t>(from)].fetch_sub(bytes, std::memory_order_relaxed);
}

std::int64_t Ledger::device_live() const {
  const std::int64_t live = live_.load(std::memory_order_relaxed);
  if (!host_shares_device_) return live;
  auto cat = [this](MemCategory c) { return cat_[static_cast<size_t>(c)].load(std::memory_order_relaxed); };
  return live - cat(MemCategory::OffloadHost) - cat(MemCategory::SendHeld);
}

std::int64_t Ledger::peak() const { return peak_.load(std::memory_order_relaxed); }

MemBreakdown Ledger::live_breakdown() const {
  MemBreakdown b{};
  for (size_t i = 0; i < b.size(); ++i) b[i] = cat_[i].load(std::memory_order_relaxed);
  return b;
}

void Ledger::raise_peak() {
  if (device_live() <= peak_.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(peak_mutex_);
  const std::int64_t now = device_live();  // other threads may have moved it
  if (now <= peak_.load(std::memory_order_relaxed)) return;
  peak_.store(now, std::memory_order_relaxed);
  peak_cat_ = live_breakdown();
}

void Ledger::reset_peak() {
  std::lock_guard<std::mutex> lock(peak_mutex_);
  peak_.store(device_live(), std::memory_order_relaxed);
  peak_cat_ = live_breakdown();
}

MemBreakdown Ledger::peak_breakdown() const {
  std::lock_guard<std::mutex> lock(peak_mutex_);
  return peak_cat_;
}

void AddressBook::on_alloc(std::uintptr_t addr, std::int64_t bytes, MemCategory c) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, fresh] = blocks_.insert({addr, Block{bytes, c}});
  if (!fresh) {  // a free this book missed: the old block is gone
    ledger_.remove(it->second.bytes, it->second.category);
    it->second = Block{bytes, c};
  }
  ledger_.add(bytes, c);
}

void AddressBook::on_free(std::uintptr_t addr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(addr);
  if (it == blocks_.end()) return;
  ledger_.remove(it->second.bytes, it->second.category);
  blocks_.erase(it);
}

bool AddressBook::retag(std::uintptr_t addr, MemCategory c) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(addr);
  if (it == blocks_.end()) return false;
  ledger_.move(it->second.bytes, it->second.category, c);
  it->second.category = c;
  return true;
}

std::size_t AddressBook::blocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return blocks_.size();
}

}  // namespace stagecraft::runtime
