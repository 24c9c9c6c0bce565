// The store backend (runtime/store_comm.h, issue 37): ranks exchange tensors through the job's
// c10d store. In one process, members on threads over one HashStore, through compat's functions:
// receives posted before their sends, messages matched in order per peer and tag, collectives
// whose results are bit-identical on every member (bf16 summed in fp32), uneven all-to-all
// splits, failures that name the peer, and keys deleted once read; on CUDA tensors too where a GPU
// is visible. Then `stagecraft train --backend store`: tp 2 x pp 2 (point-to-point, sum and max
// all-reduces), dp 2 with the distributed optimizer (reduce-scatter ring, all-gather) and an MoE
// model with ep 2 (all-to-all) give a single process's losses within 1e-5; a bad --backend value
// exits 2 listing the allowed ones.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "runtime/compat.h"
#include "runtime/store_comm.h"
#include "schedules/error.h"
#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

namespace compat = runtime::compat;
using std::chrono::milliseconds;

// ---- in one process ---------------------------------------------------------------------

// Runs body(group, member) for `n` members at once, each on its own thread with its own store
// backend over `store` (as ranks over rank 0's TCPStore); a member's exception fails the test.
void on_members(int n, const c10::intrusive_ptr<c10d::Store>& store, milliseconds timeout,
                const std::function<void(compat::Group&, int)>& body) {
  compat::GroupOptions opt;
  opt.backend = "store";
  opt.timeout = timeout;
  std::vector<int> all;
  for (int r = 0; r < n; ++r) all.push_back(r);
  std::vector<std::string> errors(static_cast<size_t>(n));
  auto member = [&](int r) {
    try {
      compat::Group g = compat::make_group(store, "test group", all, r, opt);
      body(g, r);
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) threads.emplace_back(member, r);
  member(0);
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "member " << r;
}

std::vector<torch::Device> devices() {
  std::vector<torch::Device> d{torch::kCPU};
  if (torch::cuda::is_available()) d.emplace_back(torch::kCUDA, 0);  // members share the GPU, as ranks do
  return d;
}

TEST(RuntimeStoreBackend, ReceivesPostedFirstAndMatchedInOrder) {
  for (const torch::Device& d : devices()) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    on_members(2, store, milliseconds(20000), [&](compat::Group& g, int r) {
      const int peer = 1 - r;
      EXPECT_EQ(g.pg->getBackendName(), "store");
      // Both receive from each other before either sends: a receive that blocked when posted would
      // deadlock here. Two messages on tag 5 arrive in their order; tag 6's is matched apart.
      std::vector<torch::Tensor> in(3);
      std::vector<compat::WorkPtr> rx;
      for (int i = 0; i < 3; ++i) {
        in[static_cast<size_t>(i)] = torch::zeros({4}, torch::TensorOptions().device(d));
        rx.push_back(compat::recv(g, in[static_cast<size_t>(i)], peer, i == 2 ? 6 : 5));
      }
      EXPECT_FALSE(rx[0]->isCompleted());
      for (int i : {2, 0, 1}) {  // tag 6 first: tags are matched apart
        torch::Tensor out = torch::full({4}, static_cast<float>(10 * r + i), torch::TensorOptions().device(d));
        compat::WorkPtr tx = compat::send(g, out, peer, i == 2 ? 6 : 5);
        EXPECT_TRUE(tx->isCompleted());
      }
      for (int i = 0; i < 3; ++i) {
        compat::wait(rx[static_cast<size_t>(i)], milliseconds(20000));
        EXPECT_TRUE(rx[static_cast<size_t>(i)]->isCompleted());
        EXPECT_EQ(in[static_cast<size_t>(i)].device(), d);
        EXPECT_TRUE(in[static_cast<size_t>(i)].cpu().equal(torch::full({4}, static_cast<float>(10 * peer + i)))) << "message " << i;
      }
    });
  }
}

TEST(RuntimeStoreBackend, CollectivesAgreeBitForBit) {
  constexpr int n = 3;
  for (const torch::Device& d : devices()) {
    auto on = torch::TensorOptions().device(d);
    auto store = c10::make_intrusive<c10d::HashStore>();
    std::vector<torch::Tensor> sums(n), maxima(n);
    // bf16 values whose fp32 sum differs by order of addition once rounded: every member must
    // still get the same bits, those of the sum in member order.
    auto value = [](int r) { return (torch::linspace(-3, 3, 64) * std::pow(7.0, r) + 0.1 * r).to(torch::kBFloat16); };  // (64)
    auto peak = [](int r) { return torch::arange(8, torch::kFloat).mul((r % 2) ? 1.0 : -1.0).add(r); };  // (8)
    on_members(n, store, milliseconds(20000), [&](compat::Group& g, int r) {
      torch::Tensor s = value(r).to(d);  // (64) bf16
      std::vector<torch::Tensor> v{s};
      compat::wait(g.pg->allreduce(v), milliseconds(20000));
      sums[static_cast<size_t>(r)] = s.cpu();
      torch::Tensor m = peak(r).to(d);  // (8)
      compat::all_reduce_max_blocking(g, m, milliseconds(20000));
      maxima[static_cast<size_t>(r)] = m.cpu();
      // All-gather: member i's block at i*k.
      torch::Tensor gathered = torch::empty({n * 5}, on);
      compat::all_gather(g, torch::full({5}, static_cast<float>(r + 1), on), gathered, milliseconds(20000));
      for (int i = 0; i < n; ++i) EXPECT_TRUE(gathered.narrow(0, 5 * i, 5).cpu().equal(torch::full({5}, static_cast<float>(i + 1))));
      // Reduce-scatter (compat's ring of sends and receives on a backend other than NCCL).
      torch::Tensor mine = torch::arange(n * 4, torch::kFloat).mul(r + 1).to(d);  // (n*4)
      torch::Tensor block = torch::empty({4}, on);
      compat::reduce_scatter_sum(g, mine, block, milliseconds(20000));
      EXPECT_TRUE(block.cpu().equal(torch::arange(r * 4, r * 4 + 4, torch::kFloat) * (n * (n + 1) / 2)));
      // All-to-all with uneven splits, zero rows included: member r sends (dst + r) % 3 rows of
      // (2) to member dst, each row [r, dst].
      std::vector<std::int64_t> send, recv;
      std::vector<torch::Tensor> rows;
      for (int j = 0; j < n; ++j) {
        send.push_back((j + r) % 3);
        recv.push_back((r + j) % 3);
        rows.push_back(torch::tensor({static_cast<float>(r), static_cast<float>(j)}).repeat({send.back(), 1}));
      }
      torch::Tensor out = torch::full({recv[0] + recv[1] + recv[2], 2}, -1.0f, on);  // (rows, 2)
      compat::all_to_all_rows(g, torch::cat(rows).to(d), out, send, recv, milliseconds(20000));
      std::vector<torch::Tensor> want;
      for (int j = 0; j < n; ++j)
        want.push_back(torch::tensor({static_cast<float>(j), static_cast<float>(r)}).repeat({recv[static_cast<size_t>(j)], 1}));
      EXPECT_TRUE(out.cpu().equal(torch::cat(want))) << "member " << r;
    });
    torch::Tensor acc = value(0).to(torch::kFloat), top = peak(0);
    for (int r = 1; r < n; ++r) {
      acc.add_(value(r).to(torch::kFloat));
      top = torch::maximum(top, peak(r));
    }
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(sums[static_cast<size_t>(r)].equal(acc.to(torch::kBFloat16))) << d << " member " << r;
      EXPECT_TRUE(maxima[static_cast<size_t>(r)].equal(top)) << d << " member " << r;
    }
  }
}

TEST(RuntimeStoreBackend, FailuresNameThePeer) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::string timeout, mismatch;
  on_members(2, store, milliseconds(300), [&](compat::Group& g, int r) {
    torch::Tensor t = torch::zeros({3});
    if (r == 0) {  // nothing was sent on tag 9
      try {
        compat::wait(compat::recv(g, t, 1, 9), milliseconds(300));
      } catch (const Error& e) {
        timeout = e.what();
      }
    }
    // A float message into a double tensor is refused, naming both.
    torch::Tensor wrong = r == 0 ? torch::zeros({3}, torch::kDouble) : torch::ones({3});
    if (r == 1) compat::send(g, wrong, 0, 1);
    if (r == 0) {
      try {
        compat::wait(compat::recv(g, wrong, 1, 1), milliseconds(5000));
      } catch (const Error& e) {
        mismatch = e.what();
      }
    }
  });
  EXPECT_NE(timeout.find("from group rank 1 of the test group"), std::string::npos) << timeout;
  EXPECT_NE(timeout.find("within 300 ms"), std::string::npos) << timeout;
  EXPECT_NE(mismatch.find("3 Float elements, the receiving tensor 3 Double elements"), std::string::npos) << mismatch;
}

// Read messages leave the store: after point-to-point traffic and several collectives each member
// keeps only the key of its last all-reduce or all-gather.
TEST(RuntimeStoreBackend, KeysDoNotPileUp) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  on_members(2, store, milliseconds(20000), [&](compat::Group& g, int r) {
    for (int i = 0; i < 4; ++i) {
      torch::Tensor t = torch::ones({16});
      compat::all_reduce_sum_blocking(g, t, milliseconds(20000));
      torch::Tensor in = torch::empty({16});
      compat::WorkPtr rx = compat::recv(g, in, 1 - r, 0);
      compat::send(g, t, 1 - r, 0);
      compat::wait(rx, milliseconds(20000));
      torch::Tensor out = torch::empty({2, 16});
      compat::all_to_all_rows(g, torch::ones({2, 16}), out, {1, 1}, {1, 1}, milliseconds(20000));
    }
  });
  EXPECT_EQ(store->getNumKeys(), 2);
}

// ---- stagecraft train --backend store -----------------------------------------------------

const std::string kDense = data_path("models/runtime-tiny8.json");
const std::string kMoeModel = data_path("models/runtime-tiny8-moe.json");
constexpr int kStoreSteps = 4;
constexpr int kGlobalBatch = 8;  // microbatches x dp in every run

std::string store_flags(const std::string& model, int dp) {
  return "--model " + model + " --steps " + std::to_string(kStoreSteps) + " --seed 7 --lr 3e-3 --timeout 60 --microbatches " +
         std::to_string(kGlobalBatch / dp);
}

// `args` over the store backend gives the single process's losses of `model` within 1e-5.
void expect_single_process_losses(const std::string& model, const std::string& args) {
  const TrainRun& one = train_once(store_flags(model, 1) + " --schedule gpipe");
  const std::vector<double> ref = one.cli.exit_code == 0 ? losses(one.summary) : std::vector<double>{};
  ASSERT_EQ(ref.size(), static_cast<size_t>(kStoreSteps));
  TrainRun r = train(args + " --backend store");
  ASSERT_EQ(r.cli.exit_code, 0) << args << "\n" << r.cli.err;
  const std::vector<double> got = losses(r.summary);
  ASSERT_EQ(got.size(), ref.size()) << args;
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5 * std::fabs(ref[i])) << args << " step " << i;
  EXPECT_LT(ref.back(), ref.front());  // it trains: a run that learned nothing would not match by chance
}

// Pipeline sends and receives, tensor-parallel sum all-reduces, and the vocabulary-parallel
// loss's max all-reduce.
TEST(RuntimeStoreBackend, TensorAndPipelineParallelEqualSingleProcess) {
  expect_single_process_losses(kDense, store_flags(kDense, 1) + " --nproc 4 --tp 2 --pp 2 --schedule 1f1b");
}

// Gradients reduce-scattered (compat's ring) and parameters all-gathered.
TEST(RuntimeStoreBackend, ShardedOptimizerEqualsSingleProcess) {
  expect_single_process_losses(kDense, store_flags(kDense, 2) + " --nproc 2 --dp 2 --zero 1");
}

// Tokens dispatched to the experts' ranks and back (all-to-all with uneven splits).
TEST(RuntimeStoreBackend, ExpertParallelEqualsSingleProcess) {
  expect_single_process_losses(kMoeModel, store_flags(kMoeModel, 2) + " --nproc 2 --dp 2 --ep 2 --schedule 1f1b");
}

TEST(RuntimeStoreBackend, BadBackendRefusedListingStore) {
  TrainRun r = train("--model tiny --steps 1 --nproc 2 --pp 2 --backend shm");
  EXPECT_EQ(r.cli.exit_code, 2) << r.cli.err;
  for (const char* want : {"--backend 'shm'", "allowed: auto, gloo, nccl, store"})
    EXPECT_NE(r.cli.err.find(want), std::string::npos) << want << "\n" << r.cli.err;
  EXPECT_EQ(r.cli.err.find("rank 0"), std::string::npos) << "a rank started\n" << r.cli.err;
}

}  // namespace
}  // namespace stagecraft::test
