#include "planner/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace stagecraft::planner {

int search_threads(int requested) {
  if (requested > 0) return requested;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

void run_units(size_t units, int threads, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::exception_ptr first;
  size_t first_unit = units;
  auto work = [&] {
    for (size_t i = next++; i < units; i = next++) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (i < first_unit) first_unit = i, first = std::current_exception();
      }
    }
  };
  const size_t helpers = std::min(units, static_cast<size_t>(std::max(1, threads))) - (units > 0 ? 1 : 0);
  std::vector<std::thread> pool;
  pool.reserve(helpers);
  for (size_t t = 0; t < helpers; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace stagecraft::planner
