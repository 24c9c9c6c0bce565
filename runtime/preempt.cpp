#include "runtime/preempt.h"

#include <algorithm>

#include "runtime/device.h"
#include "schedules/error.h"

namespace stagecraft::runtime {

using Clock = std::chrono::steady_clock;

void PreemptiveReducer::Job::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return done_; }))
    throw Error("preemptive reduction: no result after " + std::to_string(timeout.count()) + " ms");
  if (error_) std::rethrow_exception(error_);
}

PreemptiveReducer::PreemptiveReducer(PreemptOptions opt) : opt_(opt) {
  if (opt_.chunk_bytes <= 0)
    throw InputError("preemptive reduction: chunk_bytes = " + std::to_string(opt_.chunk_bytes) + " is invalid (must be positive)");
  thread_ = std::thread([this] { loop(); });
}

PreemptiveReducer::~PreemptiveReducer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<PreemptiveReducer::Job> PreemptiveReducer::submit(compat::Group& group, torch::Tensor flat) {
  auto job = std::make_shared<Job>();
  job->group_ = &group;
  job->flat_ = std::move(flat);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(job);
  }
  cv_.notify_all();
  return job;
}

void PreemptiveReducer::track_send(const compat::WorkPtr& w) {
  if (!w) return;
  std::lock_guard<std::mutex> lock(mu_);
  sends_.emplace_back(w, Clock::now());
}

PreemptStats PreemptiveReducer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void PreemptiveReducer::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ with nothing left
      job = queue_.front();
      queue_.pop_front();
    }
    try {
      run(*job);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job->mu_);
      job->error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(job->mu_);
      job->done_ = true;
    }
    job->cv_.notify_all();
  }
}

// Chunk by chunk, each after the sends in flight.
void PreemptiveReducer::run(Job& job) {
  const std::int64_t n = job.flat_.numel();
  const std::int64_t per = std::max<std::int64_t>(1, opt_.chunk_bytes / std::max<std::int64_t>(1, job.flat_.element_size()));
  for (std::int64_t off = 0; off < n; off += per) {
    yield_to_sends();
    torch::Tensor chunk = job.flat_.narrow(0, off, std::min(per, n - off));  // contiguous: a slice of a 1-D tensor
    compat::wait(compat::all_reduce_sum(*job.group_, chunk), opt_.timeout);
    synchronize(chunk.device());  // on a GPU: summed before the job says done
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.chunks;
  }
}

void PreemptiveReducer::yield_to_sends() {
  const auto start = Clock::now();
  bool waited = false;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto now = Clock::now();
      auto done = [&](const auto& s) {
        if (s.first->isCompleted()) return true;
        if (now - s.second < opt_.max_hold) return false;
        ++stats_.expired;
        return true;
      };
      sends_.erase(std::remove_if(sends_.begin(), sends_.end(), done), sends_.end());
      if (sends_.empty()) {
        if (waited) {
          ++stats_.yields;
          stats_.yield_s += std::chrono::duration<double>(now - start).count();
        }
        return;
      }
    }
    waited = true;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace stagecraft::runtime
