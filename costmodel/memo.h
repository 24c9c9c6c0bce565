// A thread-safe memo: values by key, each built once by `make`, outside the memo's lock, on its
// first request (a thread asking for a key under construction waits for it), kept until the memo
// goes, so the references it hands out stay valid. The caches the planner's threads share
// (Topology's answers, inner schedules, lowered schedules by shape, a wave's evaluators) are each
// one of these.
#pragma once

#include <map>
#include <memory>
#include <mutex>

namespace stagecraft::costmodel {

template <class Key, class Value>
class SharedMemo {
 public:
  // The value of `key`, built by make() (returning a Value) when first asked for. If make throws,
  // the exception reaches this caller and the next request builds again.
  template <class Make>
  const Value& get(const Key& key, Make make) {
    Slot* slot = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::unique_ptr<Slot>& s = entries_[key];
      if (!s) s = std::make_unique<Slot>();
      slot = s.get();
    }
    std::call_once(slot->once, [&] { slot->value = std::make_unique<const Value>(make()); });
    return *slot->value;
  }
  // Keys requested so far (built, or being built).
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }

 private:
  struct Slot {
    std::once_flag once;
    std::unique_ptr<const Value> value;
  };
  mutable std::mutex mutex_;
  std::map<Key, std::unique_ptr<Slot>> entries_;
};

}  // namespace stagecraft::costmodel
