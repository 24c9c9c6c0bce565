// FOLD3D's preemptive communication (Li et al., FOLD3D, TPDS 2023, Sec. V-A) in the runtime:
// "when a PP.sync task arrives, FOLD3D pauses the DP.sync tasks in the same node". A thread
// of this rank runs its gradient all-reduces chunk by chunk, in the order they were queued
// (the order every member queues them, so the chunks meet), and before each chunk waits while
// a pipeline send of this rank is still in flight: a send is then never queued behind more
// than one chunk of a reduction.
//
// A send holds the chunks for at most `max_hold` after it was posted: c10d says when a send
// has completed, not whether it is transmitting, and a Gloo send whose receiver has not yet
// posted its receive stays incomplete without using the network. Held longer, it would stall
// the reduction for nothing, or for ever: its receiver may be waiting for that reduction's
// other members (a cycle through two dp groups and the pipeline). Receives do not hold chunks:
// c10d does not say when a posted receive starts to receive data (the paper's condition).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/compat.h"

namespace stagecraft::runtime {

struct PreemptOptions {
  std::int64_t chunk_bytes = 1 << 20;          // bytes of one chunk of an all-reduce
  std::chrono::microseconds max_hold{5000};    // longest a send holds the chunks after it was posted
  std::chrono::milliseconds timeout{60000};    // limit of every chunk's all-reduce
};

struct PreemptStats {
  long chunks = 0;        // chunks all-reduced
  long yields = 0;        // chunks that waited for a send
  long expired = 0;       // sends that stopped holding at max_hold, still incomplete
  double yield_s = 0;     // time chunks waited for sends
};

class PreemptiveReducer {
 public:
  // One queued all-reduce: wait() returns when every chunk is summed, or rethrows its error.
  class Job {
   public:
    void wait(std::chrono::milliseconds timeout);
   private:
    friend class PreemptiveReducer;
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::exception_ptr error_;
    compat::Group* group_ = nullptr;
    torch::Tensor flat_;  // (n) summed in place
  };

  explicit PreemptiveReducer(PreemptOptions opt);
  ~PreemptiveReducer();  // finishes the queued jobs, then stops the thread
  PreemptiveReducer(const PreemptiveReducer&) = delete;
  PreemptiveReducer& operator=(const PreemptiveReducer&) = delete;

  // Queues the in-place sum of `flat` (contiguous, 1-D) over `group`.
  std::shared_ptr<Job> submit(compat::Group& group, torch::Tensor flat);
  // A pipeline send of this rank, in flight until its work completes.
  void track_send(const compat::WorkPtr& w);
  PreemptStats stats() const;

 private:
  void loop();
  void run(Job& job);
  void yield_to_sends();

  PreemptOptions opt_;
  mutable std::mutex mu_;              // guards queue_, sends_, stats_, stop_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::pair<compat::WorkPtr, std::chrono::steady_clock::time_point>> sends_;  // (send, posted at)
  PreemptStats stats_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace stagecraft::runtime
