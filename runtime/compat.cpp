#include "runtime/compat.h"

#include <cmath>
#include <cstdlib>

#include "runtime/plan.h"
#include "runtime/store_comm.h"
#include "schedules/error.h"

#if defined(STAGECRAFT_WITH_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace stagecraft::runtime {

namespace {
// Ranks on this machine: LOCAL_WORLD_SIZE (torchrun and `--nproc`), OMPI_COMM_WORLD_LOCAL_SIZE,
// SLURM_NTASKS_PER_NODE; 1 when none is set.
int local_world_size() {
  for (const char* k : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"})
    if (const char* v = std::getenv(k)) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  return 1;
}
}  // namespace

std::string resolve_backend(const std::string& requested) {
  // auto: NCCL only when every rank on this machine has a GPU of its own (NCCL ranks cannot
  // share a device in one communicator; four ranks on one GPU hang), else Gloo where this build
  // has it, else the store backend (a PyTorch wheel without Gloo's headers, several ranks a GPU).
  if (requested == "auto") {
    if (compat::nccl_compiled() && compat::cuda_devices() >= local_world_size()) return "nccl";
    return compat::gloo_compiled() ? "gloo" : "store";
  }
  if (requested == "gloo" || requested == "store") return requested;
  if (requested != "nccl")
    throw InputError("--backend '" + requested + "' is invalid (allowed: " + std::string(compat::kBackendChoices) + ")");
  if (!compat::nccl_compiled())
    throw InputError("--backend nccl: this build's LibTorch (" TORCH_VERSION ") has no NCCL; build against a CUDA "
                     "LibTorch (docs/gpu.md) or use --backend gloo or --backend store");
  if (compat::cuda_devices() == 0) throw InputError("--backend nccl: no CUDA GPU is visible on this machine");
  return "nccl";
}

namespace compat {
namespace {

#if defined(STAGECRAFT_WITH_GLOO)
std::shared_ptr<::gloo::transport::Device> gloo_device(const std::string& master_addr) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (master_addr == "127.0.0.1" || master_addr == "localhost" || master_addr.empty())
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
#endif

c10::intrusive_ptr<CommBase> make_backend(const StorePtr& store, const std::string& name, int rank, int size,
                                          const GroupOptions& opt) {
  if (opt.backend == "store") return c10::make_intrusive<StoreComm>(store, rank, size, opt.timeout, name);
  if (opt.backend == "nccl") {
#if defined(STAGECRAFT_WITH_NCCL)
    auto o = c10d::ProcessGroupNCCL::Options::create();
    o->timeout = opt.timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, o);
#else
    throw InputError("backend nccl is not compiled into this build");
#endif
  }
#if defined(STAGECRAFT_WITH_GLOO)
  auto o = c10d::ProcessGroupGloo::Options::create(opt.timeout);
  o->devices.push_back(gloo_device(opt.master_addr));
  o->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, o);
#else
  (void)store, (void)rank, (void)size;
  throw InputError("backend gloo with more than one rank: this build's LibTorch (" TORCH_VERSION
                   ") was compiled without gloo's headers (a PyTorch wheel); use --backend nccl, or --backend store for "
                   "several ranks on one GPU (docs/gpu.md)");
#endif
}

int group_rank_of(const Group& g, int global) {
  for (int i = 0; i < g.size(); ++i)
    if (g.members[static_cast<size_t>(i)] == global) return i;
  throw Error("runtime: rank " + std::to_string(global) + " is not a member of the " + g.name);
}

}  // namespace

Group make_group(const StorePtr& store, const std::string& prefix, std::vector<int> members, int global_rank,
                 const GroupOptions& opt) {
  Group g;
  g.name = prefix;
  g.members = std::move(members);
  g.rank = group_rank_of(g, global_rank);
  if (g.size() > 1) g.pg = make_backend(c10::make_intrusive<c10d::PrefixStore>(prefix, store), prefix, g.rank, g.size(), opt);
  return g;
}

WorkPtr send(Group& g, torch::Tensor& t, int dst_global, int tag) {
  std::vector<torch::Tensor> v{t};
  return g.pg->send(v, group_rank_of(g, dst_global), tag);
}

WorkPtr recv(Group& g, torch::Tensor& t, int src_global, int tag) {
  std::vector<torch::Tensor> v{t};
  return g.pg->recv(v, group_rank_of(g, src_global), tag);
}

namespace {
bool coalesces(const Group& g) { return g.pg && g.pg->getBackendName() == "nccl"; }
}  // namespace

void begin_p2p(Group& g) {
  if (coalesces(g)) g.pg->startCoalescing();
}

WorkPtr end_p2p(Group& g, std::vector<WorkPtr>& issued) {
  if (!coalesces(g)) return {};
#if TORCH_VERSION_MAJOR >= 2
  (void)issued;
  return g.pg->endCoalescing();  // 2.x: one work for the group
#else
  g.pg->endCoalescing(issued);   // 1.13: the group's works get their completion events
  return {};
#endif
}

WorkPtr all_reduce_sum(Group& g, torch::Tensor& t) {
  if (!g.pg) return {};
  std::vector<torch::Tensor> v{t};
  return g.pg->allreduce(v);
}

bool all_reduce_widens(const Group& g, const torch::Tensor& t) {
  return g.pg && g.pg->getBackendName() != "nccl" && (t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf);
}

void all_reduce_sum_blocking(Group& g, torch::Tensor& t, std::chrono::milliseconds timeout) {
  if (!g.pg) return;
  if (!all_reduce_widens(g, t)) return wait(all_reduce_sum(g, t), timeout);
  torch::Tensor wide = t.to(torch::kFloat32);
  wait(all_reduce_sum(g, wide), timeout);
  t.copy_(wide);
}

void all_reduce_max_blocking(Group& g, torch::Tensor& t, std::chrono::milliseconds timeout) {
  if (!g.pg) return;
  if (t.scalar_type() != torch::kFloat32)
    throw Error("all_reduce_max: the tensor is " + std::string(c10::toString(t.scalar_type())) + ", not float32");
  std::vector<torch::Tensor> v{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  wait(g.pg->allreduce(v, opts), timeout);
}

void wait(const WorkPtr& w, std::chrono::milliseconds timeout) {
  if (w) w->wait(timeout);
}

WorkPtr all_gather_async(Group& g, const torch::Tensor& in, torch::Tensor& out) {
  const int64_t k = in.numel();
  if (out.numel() != k * g.size()) throw Error("all_gather: output has " + std::to_string(out.numel()) + " elements, not n*k");
  if (!g.pg) {
    out.copy_(in.reshape(out.sizes()));
    return {};
  }
  std::vector<torch::Tensor> input{in.contiguous()};
  std::vector<std::vector<torch::Tensor>> output(1);
  torch::Tensor flat = out.view({-1});
  for (int i = 0; i < g.size(); ++i) output[0].push_back(flat.narrow(0, i * k, k));
  return g.pg->allgather(output, input);
}

void all_gather(Group& g, const torch::Tensor& in, torch::Tensor& out, std::chrono::milliseconds timeout) {
  wait(all_gather_async(g, in, out), timeout);
}

void reduce_scatter_sum(Group& g, const torch::Tensor& in, torch::Tensor& out, std::chrono::milliseconds timeout) {
  const int n = g.size();
  const int64_t k = out.numel();
  if (in.numel() != k * n) throw Error("reduce_scatter: input has " + std::to_string(in.numel()) + " elements, not n*k");
  torch::Tensor acc = in.contiguous().view({-1}).clone();  // (n*k) partial sums, block by block
  auto block = [&](int i) { return acc.narrow(0, ((i % n + n) % n) * k, k); };
  if (n > 1 && g.pg && g.pg->getBackendName() == "nccl") {
    std::vector<torch::Tensor> output{out};
    std::vector<std::vector<torch::Tensor>> input(1);
    for (int i = 0; i < n; ++i) input[0].push_back(block(i));
    wait(g.pg->reduce_scatter(output, input), timeout);
    return;
  }
  // Ring: in step s member r sends its partial block r-s-1 to r+1 and adds the block r-s-2
  // received from r-1; after n-1 steps block r holds every member's contribution.
  const int r = g.rank;
  const int next = g.members[static_cast<size_t>((r + 1) % n)], prev = g.members[static_cast<size_t>((r + n - 1) % n)];
  torch::Tensor incoming = torch::empty({k}, acc.options());  // (k)
  for (int s = 0; s + 1 < n; ++s) {
    torch::Tensor outgoing = block(r - s - 1).clone();  // (k)
    WorkPtr rx = recv(g, incoming, prev, s);
    WorkPtr tx = send(g, outgoing, next, s);
    wait(rx, timeout);
    wait(tx, timeout);
    block(r - s - 2).add_(incoming);
  }
  out.view({-1}).copy_(block(r));
}

void all_to_all_rows(Group& g, const torch::Tensor& in, torch::Tensor& out, const std::vector<std::int64_t>& send,
                     const std::vector<std::int64_t>& recv, std::chrono::milliseconds timeout) {
  if (!g.pg) {  // one member: what it sends to itself
    out.copy_(in);
    return;
  }
  if (all_reduce_widens(g, in)) {  // Gloo without bf16 / fp16
    torch::Tensor wide_out = torch::empty(out.sizes(), out.options().dtype(torch::kFloat32));
    all_to_all_rows(g, in.to(torch::kFloat32), wide_out, send, recv, timeout);
    out.copy_(wide_out);
    return;
  }
  torch::Tensor input = in.contiguous();
  std::vector<std::int64_t> in_splits = send, out_splits = recv;
  wait(g.pg->alltoall_base(out, input, out_splits, in_splits), timeout);
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool fused) {
  if (fused) {
#if TORCH_VERSION_MAJOR >= 2
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#else
    throw InputError("runtime: model attention_kernel 'fused' needs LibTorch 2.x (scaled_dot_product_attention); this build has " TORCH_VERSION);
#endif
  }
  const int64_t s = q.size(2);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));  // (b, a, s, s)
  auto mask = torch::ones({s, s}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(1);
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores, -1), v);  // (b, a, s, d)
}

bool fused_attention_available() { return TORCH_VERSION_MAJOR >= 2; }

bool gloo_compiled() {
#if defined(STAGECRAFT_WITH_GLOO)
  return true;
#else
  return false;
#endif
}

bool nccl_compiled() {
#if defined(STAGECRAFT_WITH_NCCL)
  return true;
#else
  return false;
#endif
}

int cuda_devices() { return static_cast<int>(torch::cuda::device_count()); }

}  // namespace compat
}  // namespace stagecraft::runtime
