#include "runtime/store_comm.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "schedules/error.h"

namespace stagecraft::runtime {

namespace {

using Bytes = std::vector<std::uint8_t>;

// Between two looks at a key that is not there yet: short at first (a tensor-parallel all-reduce
// waits for a member a few microseconds behind), at most this long (a rank waiting for a pipeline
// stage's whole forward pass asks the store a few thousand times a second, not millions).
constexpr std::chrono::microseconds kFirstPause{5};
constexpr std::chrono::microseconds kLongestPause{500};

// What a message starts with: the tensor's element type and count, so that the receiver can
// refuse a message that does not fit its tensor instead of copying garbage.
struct WireHeader {
  std::uint32_t magic;
  std::int32_t dtype;  // c10::ScalarType
  std::int64_t numel;
};
constexpr std::uint32_t kMagic = 0x31435453;  // "STC1"

std::string seconds_text(std::chrono::milliseconds t) {
  return t.count() % 1000 == 0 ? std::to_string(t.count() / 1000) + " s" : std::to_string(t.count()) + " ms";
}

// A store call's failure (a lost connection to rank 0's store) as an Error naming what waited.
[[noreturn]] void store_failed(const std::string& what, const std::exception& e) {
  const auto* c10e = dynamic_cast<const c10::Error*>(&e);
  throw Error(what + ": the store failed (" + (c10e ? c10e->what_without_backtrace() : e.what()) + ")");
}

// A contiguous host copy of `t` (the tensor itself when it is one already).
at::Tensor to_host(const at::Tensor& t) { return t.detach().to(at::kCPU).contiguous(); }

// `host` (contiguous, on the CPU) as a message: header, then its raw bytes.
Bytes encode(const at::Tensor& host) {
  const WireHeader h{kMagic, static_cast<std::int32_t>(host.scalar_type()), host.numel()};
  const size_t n = static_cast<size_t>(host.numel()) * host.element_size();
  Bytes out(sizeof h + n);
  std::memcpy(out.data(), &h, sizeof h);
  if (n > 0) std::memcpy(out.data() + sizeof h, host.data_ptr(), n);
  return out;
}

// A message back as a 1-D host tensor.
at::Tensor decode(const Bytes& bytes, const std::string& what) {
  WireHeader h{};
  if (bytes.size() < sizeof h) throw Error(what + ": a message of " + std::to_string(bytes.size()) + " bytes has no header");
  std::memcpy(&h, bytes.data(), sizeof h);
  const auto dtype = static_cast<c10::ScalarType>(h.dtype);
  if (h.magic != kMagic || h.numel < 0 ||
      bytes.size() != sizeof h + static_cast<size_t>(h.numel) * c10::elementSize(dtype))
    throw Error(what + ": a message of " + std::to_string(bytes.size()) + " bytes is not a tensor of the store backend");
  at::Tensor t = at::empty({h.numel}, at::TensorOptions().dtype(dtype));  // (numel)
  if (h.numel > 0) std::memcpy(t.data_ptr(), bytes.data() + sizeof h, bytes.size() - sizeof h);
  return t;
}

std::string describe_tensor(const at::Tensor& t) {
  return std::to_string(t.numel()) + " " + c10::toString(t.scalar_type()) + " elements";
}

// The received `got` must fill `into` exactly: same element type, same count.
void check_fits(const at::Tensor& got, const at::Tensor& into, const std::string& what) {
  if (got.scalar_type() != into.scalar_type() || got.numel() != into.numel())
    throw Error(what + ": the message holds " + describe_tensor(got) + ", the receiving tensor " + describe_tensor(into));
}

// Copies the 1-D host tensor `got` into `into` (any device, any strides).
void copy_into(at::Tensor& into, const at::Tensor& got) {
  at::NoGradGuard no_grad;  // `into` may be part of a graph; filling it is not an operation of it
  into.copy_(got.view(into.sizes()));
}

// Waits until `key` is in the store and returns its value. Polls with check() instead of the
// store's blocking wait: that holds the store client's lock for the whole wait, and the other
// threads of this rank (the collectives of other groups, the gradient reducer) share the client.
Bytes fetch_key(c10d::Store& store, const std::string& key, std::chrono::milliseconds timeout, const std::atomic<bool>* stop,
                const std::string& what) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  auto pause = kFirstPause;
  for (;;) {
    try {
      if (store.check({key})) return store.get(key);
    } catch (const std::exception& e) {
      store_failed(what, e);
    }
    if (stop && stop->load()) throw Error(what + ": the group was shut down while waiting");
    if (Clock::now() >= deadline) throw Error(what + ": nothing arrived within " + seconds_text(timeout) + " (key " + key + ")");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, kLongestPause);
  }
}

std::chrono::milliseconds or_default(std::chrono::milliseconds t, std::chrono::milliseconds fallback) {
  return t.count() > 0 ? t : fallback;  // c10d's kNoTimeout (0): the group's own limit
}

// A collective's handle (or a send's, complete at once): the group's thread finishes it.
class QueuedWork : public c10d::Work {
 public:
  QueuedWork(int rank, c10d::OpType type, std::string what, std::chrono::milliseconds timeout)
      : c10d::Work(rank, type), what_(std::move(what)), timeout_(timeout) {}

  void complete(std::exception_ptr error) { finish(std::move(error)); }

  bool wait(std::chrono::milliseconds timeout) override {
    const auto limit = or_default(timeout, timeout_);
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, limit, [&] { return completed_; }))
      throw Error(what_ + ": not complete within " + seconds_text(limit) +
                  " (a member has not reached it, or an earlier collective of the group is still waiting)");
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

 private:
  std::string what_;
  std::chrono::milliseconds timeout_;
};

// A posted receive: wait() fetches the message into the tensor, then deletes its key.
class RecvWork : public c10d::Work {
 public:
  RecvWork(int rank, compat::StorePtr store, std::string key, at::Tensor into, std::string what, std::chrono::milliseconds timeout)
      : c10d::Work(rank, c10d::OpType::RECV), store_(std::move(store)), key_(std::move(key)), into_(std::move(into)),
        what_(std::move(what)), timeout_(timeout) {}

  bool wait(std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> receiving(receiving_);  // one fetch, however many threads wait
    if (!isCompleted()) {
      try {
        receive(or_default(timeout, timeout_));
        finish();
      } catch (...) {
        finish(std::current_exception());
      }
    }
    if (std::exception_ptr e = exception()) std::rethrow_exception(e);
    return true;
  }

 private:
  void receive(std::chrono::milliseconds limit) {
    const at::Tensor got = decode(fetch_key(*store_, key_, limit, nullptr, what_), what_);  // (numel)
    check_fits(got, into_, what_);
    copy_into(into_, got);
    try {
      store_->deleteKey(key_);  // read once: the store keeps no message longer than needed
    } catch (const std::exception& e) {
      store_failed(what_, e);
    }
  }

  std::mutex receiving_;
  compat::StorePtr store_;
  std::string key_;
  at::Tensor into_;
  std::string what_;
  std::chrono::milliseconds timeout_;
};

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const std::string& what) {
  if (tensors.size() != 1)
    throw Error(what + ": " + std::to_string(tensors.size()) + " tensors in one call; the store backend takes one");
  return tensors.front();
}

std::string p2p_key(int src, int dst, int tag, std::int64_t n) {
  return "p2p/" + std::to_string(src) + "/" + std::to_string(dst) + "/" + std::to_string(tag) + "/" + std::to_string(n);
}
std::string collective_key(std::int64_t seq, int member) { return "c/" + std::to_string(seq) + "/" + std::to_string(member); }
std::string a2a_key(std::int64_t seq, int src, int dst) {
  return "a2a/" + std::to_string(seq) + "/" + std::to_string(src) + "/" + std::to_string(dst);
}

// The split sizes of an all-to-all: `splits`, or equal shares of `rows` when empty.
std::vector<int64_t> row_splits(const std::vector<int64_t>& splits, int64_t rows, int n, const std::string& what) {
  if (splits.empty()) {
    if (rows % n != 0) throw Error(what + ": " + std::to_string(rows) + " rows do not split equally over " + std::to_string(n) + " members");
    return std::vector<int64_t>(static_cast<size_t>(n), rows / n);
  }
  int64_t sum = 0;
  for (int64_t s : splits) sum += s;
  if (static_cast<int>(splits.size()) != n || sum != rows)
    throw Error(what + ": " + std::to_string(splits.size()) + " split sizes summing to " + std::to_string(sum) + " for " +
                std::to_string(n) + " members and " + std::to_string(rows) + " rows");
  return splits;
}

}  // namespace

StoreComm::StoreComm(compat::StorePtr store, int rank, int size, std::chrono::milliseconds timeout, std::string name)
    : compat::CommBase(rank, size), store_(std::move(store)), timeout_(timeout), name_(std::move(name)) {}

StoreComm::~StoreComm() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stopping_ = true;  // a collective still waiting gives up; the rest of the queue fails at once
  }
  queue_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void StoreComm::check_peer(int peer, const char* op) const {
  if (peer < 0 || peer >= members() || peer == me())
    throw Error("store backend: " + std::string(op) + " with group rank " + std::to_string(peer) + " in the " + name_ + " (" +
                std::to_string(members()) + " members, this one " + std::to_string(me()) + ")");
}

std::int64_t StoreComm::next_message(std::map<std::pair<int, int>, std::int64_t>& counters, int peer, int tag) {
  std::lock_guard<std::mutex> lock(counters_mu_);
  return counters[{peer, tag}]++;
}

c10::intrusive_ptr<c10d::Work> StoreComm::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_peer(dst, "send");
  const std::string what = "store backend: send to group rank " + std::to_string(dst) + " of the " + name_;
  const at::Tensor host = to_host(single(tensors, what));  // waits for the tensor's producer on a GPU
  const std::string key = p2p_key(me(), dst, tag, next_message(sent_, dst, tag));
  try {
    store_->set(key, encode(host));
  } catch (const std::exception& e) {
    store_failed(what, e);
  }
  auto work = c10::make_intrusive<QueuedWork>(me(), c10d::OpType::SEND, what, timeout_);
  work->complete(nullptr);
  return work;
}

c10::intrusive_ptr<c10d::Work> StoreComm::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_peer(src, "recv");
  const std::int64_t n = next_message(received_, src, tag);
  const std::string what = "store backend: receive from group rank " + std::to_string(src) + " of the " + name_ + " (tag " +
                           std::to_string(tag) + ", message " + std::to_string(n) + ")";
  return c10::make_intrusive<RecvWork>(me(), store_, p2p_key(src, me(), tag, n), single(tensors, what), what, timeout_);
}

c10::intrusive_ptr<c10d::Work> StoreComm::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const at::Tensor t = single(tensors, "store backend: all-reduce in the " + name_);
  const c10d::ReduceOp::RedOpType op = opts.reduceOp;
  if (op != c10d::ReduceOp::SUM && op != c10d::ReduceOp::MAX)
    throw Error("store backend: all-reduce in the " + name_ + ": reduce op " + std::to_string(static_cast<int>(op)) +
                " (allowed: sum, max)");
  return enqueue(c10d::OpType::ALLREDUCE, "all-reduce", [this, t, op](std::int64_t seq) { run_allreduce(seq, t, op); });
}

c10::intrusive_ptr<c10d::Work> StoreComm::allgather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                                                    const c10d::AllgatherOptions& /*opts*/) {
  const std::string what = "store backend: all-gather in the " + name_;
  const at::Tensor t = single(in, what);
  if (out.size() != 1 || static_cast<int>(out.front().size()) != members())
    throw Error(what + ": the output is not one list of " + std::to_string(members()) + " tensors");
  return enqueue(c10d::OpType::ALLGATHER, "all-gather",
                 [this, t, outs = out.front()](std::int64_t seq) { run_allgather(seq, outs, t); });
}

c10::intrusive_ptr<c10d::Work> StoreComm::alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                                                        std::vector<int64_t>& in_splits, const c10d::AllToAllOptions& /*opts*/) {
  const std::string what = "store backend: all-to-all in the " + name_;
  if (in.dim() == 0 || out.dim() == 0 || in.sizes().slice(1) != out.sizes().slice(1))  // a row: (...) the other dimensions
    throw Error(what + ": input " + c10::str(in.sizes()) + " and output " + c10::str(out.sizes()) + ": rows differ in shape");
  std::vector<int64_t> in_rows = row_splits(in_splits, in.size(0), members(), what + " (send splits)");
  std::vector<int64_t> out_rows = row_splits(out_splits, out.size(0), members(), what + " (receive splits)");
  const auto mine = static_cast<size_t>(me());
  if (in_rows[mine] != out_rows[mine])
    throw Error(what + ": " + std::to_string(in_rows[mine]) + " rows to itself, but " + std::to_string(out_rows[mine]) + " expected");
  return enqueue(c10d::OpType::ALLTOALL_BASE, "all-to-all", [this, out, in, out_rows, in_rows](std::int64_t seq) {
    run_alltoall(seq, out, in, out_rows, in_rows);
  });
}

c10::intrusive_ptr<c10d::Work> StoreComm::enqueue(c10d::OpType type, const std::string& what,
                                                  std::function<void(std::int64_t)> body) {
  std::lock_guard<std::mutex> lock(queue_mu_);  // numbers in the order of the queue
  const std::int64_t seq = next_seq_++;
  auto work = c10::make_intrusive<QueuedWork>(me(), type, "store backend: " + what + " " + std::to_string(seq) + " of the " + name_,
                                              timeout_);
  queue_.push_back([work, seq, body = std::move(body)] {
    try {
      body(seq);
      work->complete(nullptr);
    } catch (...) {
      work->complete(std::current_exception());
    }
  });
  if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
  queue_cv_.notify_one();
  return work;
}

void StoreComm::worker_loop() {
  at::NoGradGuard no_grad;  // grad mode is per thread; the collectives' copies are no graph's operations
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return stopping_.load() || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

std::vector<std::uint8_t> StoreComm::fetch(const std::string& key, const std::string& what) {
  return fetch_key(*store_, key, timeout_, &stopping_, what);
}

std::vector<at::Tensor> StoreComm::exchange(std::int64_t seq, const at::Tensor& host, const std::string& what) {
  const std::string mine = collective_key(seq, me());
  std::vector<at::Tensor> values(static_cast<size_t>(members()));
  try {
    store_->set(mine, encode(host));
  } catch (const std::exception& e) {
    store_failed(what, e);
  }
  for (int r = 0; r < members(); ++r)
    values[static_cast<size_t>(r)] =
        r == me() ? host.view({-1}) : decode(fetch(collective_key(seq, r), what + ": member " + std::to_string(r)), what);
  // Every member has now published `seq`, so each has read all values of this member's previous
  // collective (a member's thread runs them in order): that key can go.
  try {
    if (!previous_key_.empty()) store_->deleteKey(previous_key_);
  } catch (const std::exception& e) {
    store_failed(what, e);
  }
  previous_key_ = mine;
  return values;
}

void StoreComm::run_allreduce(std::int64_t seq, at::Tensor t, c10d::ReduceOp::RedOpType op) {
  const std::string what = "store backend: all-reduce " + std::to_string(seq) + " of the " + name_;
  const std::vector<at::Tensor> values = exchange(seq, to_host(t), what);  // member r's (numel)
  const bool narrow_float = t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
  const at::ScalarType acc_type = narrow_float ? at::kFloat : t.scalar_type();
  at::Tensor acc;  // (numel) the running sum or maximum, in group-rank order on every member
  for (size_t r = 0; r < values.size(); ++r) {
    check_fits(values[r], t, what + ": member " + std::to_string(r));
    const at::Tensor x = values[r].to(acc_type);
    if (r == 0) acc = x.clone();
    else if (op == c10d::ReduceOp::SUM) acc.add_(x);
    else acc = at::maximum(acc, x);
  }
  copy_into(t, acc);  // rounds a bf16 or fp16 sum once
}

void StoreComm::run_allgather(std::int64_t seq, std::vector<at::Tensor> out, at::Tensor in) {
  const std::string what = "store backend: all-gather " + std::to_string(seq) + " of the " + name_;
  const std::vector<at::Tensor> values = exchange(seq, to_host(in), what);
  for (size_t r = 0; r < values.size(); ++r) {
    check_fits(values[r], out[r], what + ": member " + std::to_string(r));
    copy_into(out[r], values[r]);
  }
}

void StoreComm::run_alltoall(std::int64_t seq, at::Tensor out, at::Tensor in, std::vector<int64_t> out_rows,
                             std::vector<int64_t> in_rows) {
  const std::string what = "store backend: all-to-all " + std::to_string(seq) + " of the " + name_;
  const at::Tensor host = to_host(in);  // (rows, ...)
  at::Tensor own;                       // the rows this member keeps
  int64_t off = 0;
  for (int dst = 0; dst < members(); ++dst) {
    const at::Tensor piece = host.narrow(0, off, in_rows[static_cast<size_t>(dst)]);  // contiguous: whole rows
    off += in_rows[static_cast<size_t>(dst)];
    if (dst == me()) {
      own = piece.reshape({-1});
      continue;
    }
    try {
      store_->set(a2a_key(seq, me(), dst), encode(piece));
    } catch (const std::exception& e) {
      store_failed(what, e);
    }
  }
  off = 0;
  for (int src = 0; src < members(); ++src) {
    at::Tensor into = out.narrow(0, off, out_rows[static_cast<size_t>(src)]);
    off += out_rows[static_cast<size_t>(src)];
    const std::string from = what + ": rows from member " + std::to_string(src);
    if (src == me()) {
      copy_into(into, own);
      continue;
    }
    const std::string key = a2a_key(seq, src, me());
    const at::Tensor got = decode(fetch(key, from), from);
    check_fits(got, into, from);
    copy_into(into, got);
    try {
      store_->deleteKey(key);  // only this member reads it
    } catch (const std::exception& e) {
      store_failed(from, e);
    }
  }
}

}  // namespace stagecraft::runtime
