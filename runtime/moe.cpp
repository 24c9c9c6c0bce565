#include "runtime/moe.h"

#include <cstdint>
#include <numeric>
#include <string>

#include "schedules/error.h"

namespace stagecraft::runtime {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

std::int64_t total(const std::vector<std::int64_t>& v) { return std::accumulate(v.begin(), v.end(), std::int64_t{0}); }

std::vector<std::int64_t> to_vector(const torch::Tensor& t) {  // int64 tensor of any shape, flattened
  torch::Tensor c = t.to(torch::kCPU, torch::kInt64).contiguous();
  return std::vector<std::int64_t>(c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel());
}

// The raw exchange: (sum(send), h) rows in -> (sum(recv), h) rows out.
torch::Tensor exchange_rows(compat::Group& g, const torch::Tensor& x, const std::vector<std::int64_t>& send,
                            const std::vector<std::int64_t>& recv, std::chrono::milliseconds timeout) {
  if (static_cast<int>(send.size()) != g.size() || static_cast<int>(recv.size()) != g.size())
    throw Error("runtime: all-to-all over the " + g.name + " needs one split per member (" + std::to_string(g.size()) + ")");
  if (x.size(0) != total(send))
    throw Error("runtime: all-to-all input has " + std::to_string(x.size(0)) + " rows, the splits " + std::to_string(total(send)));
  std::vector<std::int64_t> shape = x.sizes().vec();
  shape[0] = total(recv);
  torch::Tensor out = torch::empty(shape, x.options());
  compat::all_to_all_rows(g, x.contiguous(), out, send, recv, timeout);
  return out;
}

// The all-to-all of token copies as an autograd function: its backward sends each row's
// gradient back where the row came from, the same all-to-all with the splits swapped.
struct AllToAllRows : torch::autograd::Function<AllToAllRows> {
  // x: (sum(send), h) -> (sum(recv), h)
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, compat::Group* g,
                               const std::vector<std::int64_t>& send, const std::vector<std::int64_t>& recv,
                               std::int64_t timeout_ms) {
    // The group outlives the graph (the run's groups live until the process ends); autograd's
    // saved data holds IValues, so its address is kept as an integer.
    ctx->saved_data["group"] = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(g));
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    ctx->saved_data["timeout_ms"] = timeout_ms;
    return exchange_rows(*g, x, send, recv, std::chrono::milliseconds(timeout_ms));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* g = reinterpret_cast<compat::Group*>(static_cast<std::intptr_t>(ctx->saved_data["group"].toInt()));
    const std::vector<std::int64_t> send = ctx->saved_data["send"].toIntVector(), recv = ctx->saved_data["recv"].toIntVector();
    torch::Tensor gx = exchange_rows(*g, grads[0], recv, send, std::chrono::milliseconds(ctx->saved_data["timeout_ms"].toInt()));
    return {gx, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// One expert's MLP (or the shared experts' joint one). x: (n, h) -> (n, h).
torch::Tensor expert_mlp(const torch::Tensor& x, const ExpertWeights& w, bool swiglu, LinearFn linear) {
  torch::Tensor u = swiglu ? torch::silu(linear(x, w.fc1_w)) * linear(x, w.up_w)  // (n, f_e) SwiGLU
                           : torch::gelu(linear(x, w.fc1_w));                    // (n, f_e)
  return linear(u, w.fc2_w);                                                       // (n, h)
}

// The inverse of a permutation: inv[perm[i]] = i. perm: (n) int64.
torch::Tensor inverse_permutation(const torch::Tensor& perm) {
  return torch::empty_like(perm).scatter_(0, perm, torch::arange(perm.numel(), perm.options()));
}

// Runs the local experts on rows grouped by expert: segment e of `rows` (sizes[e] rows) goes
// to experts[e]. rows: (sum(sizes), h) -> (sum(sizes), h).
torch::Tensor run_grouped(const torch::Tensor& rows, const std::vector<std::int64_t>& sizes, const MoeParams& p, bool swiglu,
                          LinearFn linear) {
  std::vector<torch::Tensor> outs;
  std::int64_t at = 0;
  for (size_t e = 0; e < sizes.size(); ++e) {
    outs.push_back(expert_mlp(rows.narrow(0, at, sizes[e]), p.experts[e], swiglu, linear));
    at += sizes[e];
  }
  return torch::cat(outs, 0);
}

// Received rows come ordered by source member, then by local expert; counts: (n, E/ep), row q
// the copies member q sent for each local expert. Returns the permutation that groups them by
// local expert (source order kept inside an expert) and the experts' row counts.
std::pair<torch::Tensor, std::vector<std::int64_t>> group_by_expert(const torch::Tensor& counts) {
  const std::vector<std::int64_t> c = to_vector(counts);
  const std::int64_t n = counts.size(0), local = counts.size(1);
  std::vector<std::int64_t> start(static_cast<size_t>(n * local));  // first row of (source, expert)
  std::int64_t at = 0;
  for (std::int64_t i = 0; i < n * local; ++i) start[static_cast<size_t>(i)] = at, at += c[static_cast<size_t>(i)];
  std::vector<std::int64_t> perm, sizes(static_cast<size_t>(local), 0);
  perm.reserve(static_cast<size_t>(at));
  for (std::int64_t e = 0; e < local; ++e)
    for (std::int64_t q = 0; q < n; ++q) {
      const size_t i = static_cast<size_t>(q * local + e);
      for (std::int64_t r = 0; r < c[i]; ++r) perm.push_back(start[i] + r);
      sizes[static_cast<size_t>(e)] += c[i];
    }
  return {torch::tensor(perm, torch::kInt64), sizes};
}

// The routed experts on the dispatched copies, with the experts split over the ep group:
// counts exchanged, copies dispatched, regrouped by local expert, computed, put back in arrival
// order and combined back to their ranks. copies: (N k, h) sorted by expert -> (N k, h).
torch::Tensor routed_parallel(const torch::Tensor& copies, const DispatchPlan& plan, const MoeParams& p, const MoeShape& shape,
                              LinearFn linear) {
  compat::Group& g = *shape.group;
  const std::int64_t local = shape.num_experts / shape.ep_size;
  torch::Tensor mine = torch::tensor(plan.per_expert, torch::kInt64).view({shape.ep_size, local}).to(copies.device());  // (ep, E/ep) by destination
  torch::Tensor counts = exchange_counts(g, mine, shape.timeout);  // (ep, E/ep) by source, for my experts
  const std::vector<std::int64_t> recv = to_vector(counts.sum(1));
  torch::Tensor arrived = all_to_all_rows(g, copies, plan.send, recv, shape.timeout);  // (R, h) by source, then expert
  auto [perm, sizes] = group_by_expert(counts);
  perm = perm.to(copies.device());
  torch::Tensor grouped = arrived.index_select(0, perm);                              // (R, h) by expert
  torch::Tensor done = run_grouped(grouped, sizes, p, shape.swiglu, linear);           // (R, h)
  done = done.index_select(0, inverse_permutation(perm));                              // (R, h) arrival order
  return all_to_all_rows(g, done, recv, plan.send, shape.timeout);                     // (N k, h) sorted order
}

}  // namespace

EpContext& ep_context() {
  static EpContext ctx;
  return ctx;
}

Routing route(const torch::Tensor& logits, int k) {
  torch::Tensor probs = torch::softmax(logits.to(torch::kFloat32), -1);  // (N, E)
  auto [top, idx] = probs.topk(k, -1, /*largest=*/true, /*sorted=*/true);  // (N, k) each
  return {top / top.sum(-1, /*keepdim=*/true), idx};
}

DispatchPlan plan_dispatch(const torch::Tensor& experts, int num_experts, int ep_size) {
  if (ep_size < 1 || num_experts % ep_size != 0)
    throw Error("runtime: " + std::to_string(num_experts) + " experts cannot be split over ep = " + std::to_string(ep_size));
  const std::int64_t k = experts.size(1);
  torch::Tensor flat = experts.reshape({-1});                                          // (N k)
  DispatchPlan d;
  d.order = std::get<1>(torch::sort(flat, /*stable=*/true, /*dim=*/0, /*descending=*/false));  // (N k)
  d.token = d.order.div(k, "floor");                                                   // (N k)
  d.per_expert = to_vector(torch::bincount(flat.cpu(), {}, num_experts));
  const int local = num_experts / ep_size;
  d.send.assign(static_cast<size_t>(ep_size), 0);
  for (int e = 0; e < num_experts; ++e) d.send[static_cast<size_t>(e / local)] += d.per_expert[static_cast<size_t>(e)];
  return d;
}

torch::Tensor all_to_all_rows(compat::Group& g, const torch::Tensor& x, const std::vector<std::int64_t>& send,
                              const std::vector<std::int64_t>& recv, std::chrono::milliseconds timeout) {
  return AllToAllRows::apply(x, &g, send, recv, static_cast<std::int64_t>(timeout.count()));
}

torch::Tensor exchange_counts(compat::Group& g, const torch::Tensor& counts, std::chrono::milliseconds timeout) {
  torch::NoGradGuard ng;
  const std::vector<std::int64_t> ones(static_cast<size_t>(g.size()), 1);
  return exchange_rows(g, counts.to(torch::kInt64).contiguous(), ones, ones, timeout);
}

torch::Tensor moe_mlp(const torch::Tensor& x, const MoeParams& p, const MoeShape& shape, LinearFn linear) {
  const std::int64_t b = x.size(0), s = x.size(1), h = x.size(2), n = b * s, k = shape.top_k;
  torch::Tensor flat = x.reshape({n, h});                                  // (N, h)
  Routing r = route(linear(flat, p.router_w), shape.top_k);               // (N, k) gates and experts
  DispatchPlan plan = plan_dispatch(r.experts, shape.num_experts, shape.ep_size);
  torch::Tensor copies = flat.index_select(0, plan.token.to(x.device()));  // (N k, h) sorted by expert
  torch::Tensor y;
  if (shape.ep_size > 1) {
    if (!shape.group || shape.group->size() != shape.ep_size)
      throw Error("runtime: an MoE layer split over ep = " + std::to_string(shape.ep_size) + " ranks has no expert-parallel group of that size");
    y = routed_parallel(copies, plan, p, shape, linear);                  // (N k, h) sorted order
  } else {
    y = run_grouped(copies, plan.per_expert, p, shape.swiglu, linear);     // (N k, h) sorted order
  }
  y = y.index_select(0, inverse_permutation(plan.order).to(x.device())).view({n, k, h});  // (N, k, h) copy order
  torch::Tensor out = (y * r.gates.to(y.scalar_type()).unsqueeze(-1)).sum(1);              // (N, h) gate-weighted sum
  if (p.shared.fc1_w.defined()) out = out + expert_mlp(flat, p.shared, shape.swiglu, linear);
  return out.view({b, s, h});
}

}  // namespace stagecraft::runtime
