// A thread-safe memo: values by key, each built by `make` outside the lock on its first request
// (a thread racing on the same key builds an equal value, which is dropped), kept until the memo
// goes, so the references it hands out stay valid. The caches the planner's threads share
// (Topology's answers, inner schedules, lowered schedules by shape) are each one of these.
#pragma once

#include <map>
#include <memory>
#include <mutex>

namespace stagecraft::costmodel {

template <class Key, class Value>
class SharedMemo {
 public:
  template <class Make>
  const Value& get(const Key& key, Make make) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto it = entries_.find(key); it != entries_.end()) return *it->second;
    }
    auto built = std::make_unique<const Value>(make());
    std::lock_guard<std::mutex> lock(mutex_);
    return *entries_.emplace(key, std::move(built)).first->second;
  }

 private:
  std::mutex mutex_;
  std::map<Key, std::unique_ptr<const Value>> entries_;
};

}  // namespace stagecraft::costmodel
