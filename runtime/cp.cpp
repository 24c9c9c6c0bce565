#include "runtime/cp.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "schedules/error.h"

namespace stagecraft::runtime {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

CpContext& cp_context() {
  static CpContext c;
  return c;
}

torch::Tensor cp_positions(std::int64_t s, int rank, int size, torch::Device device) {
  if (size < 1 || rank < 0 || rank >= size || s % (2 * size) != 0)
    throw Error("runtime: cp_positions: sequence " + std::to_string(s) + " over cp " + std::to_string(size) + " (rank " +
                std::to_string(rank) + "); the sequence must split into 2 cp chunks");
  const std::int64_t chunk = s / (2 * size);
  auto opt = torch::TensorOptions().dtype(torch::kInt64).device(device);
  return torch::cat({torch::arange(rank * chunk, (rank + 1) * chunk, opt),
                     torch::arange((2 * size - 1 - rank) * chunk, (2 * size - rank) * chunk, opt)});
}

torch::Tensor cp_slice(const torch::Tensor& x, int rank, int size) {
  if (size == 1) return x;
  return x.index_select(1, cp_positions(x.size(1), rank, size, x.device())).contiguous();
}

namespace {

// One ring step's transfer of tensors to the next member while receiving the previous member's.
struct Exchange {
  std::vector<torch::Tensor> out, in;    // sent (kept alive until the wait) and received
  std::vector<compat::WorkPtr> works;
  bool started = false;

  void start(CpContext& cp, std::vector<torch::Tensor> send, int first_tag) {
    compat::Group& g = *cp.group;
    const int n = g.size();
    const int next = g.members[static_cast<size_t>((g.rank + 1) % n)], prev = g.members[static_cast<size_t>((g.rank + n - 1) % n)];
    out.clear(), in.clear(), works.clear();
    for (torch::Tensor& t : send) out.push_back(t.contiguous()), in.push_back(torch::empty_like(out.back()));
    compat::begin_p2p(g);
    std::vector<compat::WorkPtr> issued;
    for (size_t i = 0; i < out.size(); ++i) {
      issued.push_back(compat::send(g, out[i], next, first_tag + static_cast<int>(i)));
      issued.push_back(compat::recv(g, in[i], prev, first_tag + static_cast<int>(i)));
    }
    compat::WorkPtr whole = compat::end_p2p(g, issued);
    for (auto& w : issued)
      if (w) works.push_back(w);
    if (whole) works.push_back(whole);
    cp.sends += static_cast<long>(out.size());
    started = true;
  }
  std::vector<torch::Tensor> wait(const CpContext& cp) {
    for (auto& w : works) compat::wait(w, cp.timeout);
    started = false;
    return in;
  }
};

constexpr int kKvTag = 0;    // k, v: tags 0 and 1
constexpr int kGradTag = 2;  // their gradients: tags 2 and 3

// Scores of one block in fp32 with the causal mask of the global positions.
// q5: (b, g, a/g, sq, d); k: (b, g, sk, d) -> (b, g, a/g, sq, sk), masked entries -inf.
torch::Tensor block_scores(const torch::Tensor& q5, const torch::Tensor& k, const torch::Tensor& pos_q,
                           const torch::Tensor& pos_k, double scale) {
  torch::Tensor s = torch::matmul(q5, k.to(torch::kFloat32).unsqueeze(2).transpose(-2, -1)) * scale;
  torch::Tensor future = pos_q.unsqueeze(1) < pos_k.unsqueeze(0);  // (sq, sk): key after the query
  return s.masked_fill(future, -std::numeric_limits<float>::infinity());
}

// The running softmax state of the queries (fp32), updated block by block (online softmax,
// Milakov and Gimelshein 2018; FlashAttention's recurrence, Dao et al. 2022, Alg. 1).
struct Online {
  torch::Tensor m;    // (b, g, a/g, sq) running maximum of the scores
  torch::Tensor l;    // (b, g, a/g, sq) running sum of exp(score - m)
  torch::Tensor acc;  // (b, g, a/g, sq, d) running sum of exp(score - m) v

  void add(const torch::Tensor& scores, const torch::Tensor& v) {
    torch::Tensor m_new = torch::maximum(m, std::get<0>(scores.max(-1)));
    torch::Tensor m_safe = m_new.masked_fill(m_new.isinf(), 0.0);  // a row with every key masked so far
    torch::Tensor alpha = torch::exp(m - m_safe);
    torch::Tensor p = torch::exp(scores - m_safe.unsqueeze(-1));
    l = l * alpha + p.sum(-1);
    acc = acc * alpha.unsqueeze(-1) + torch::matmul(p, v.to(torch::kFloat32).unsqueeze(2));
    m = m_new;
  }
};

struct RingAttention : torch::autograd::Function<RingAttention> {
  // q: (b, a, sq, d); k, v: (b, g, sk, d); positions: (sq) -> (b, a, sq, d)
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& positions, std::int64_t cp_ptr) {
    auto& cp = *reinterpret_cast<CpContext*>(static_cast<std::intptr_t>(cp_ptr));
    const int n = cp.group->size(), r = cp.group->rank;
    const std::int64_t b = q.size(0), a = q.size(1), sq = q.size(2), d = q.size(3), g = k.size(1), s = sq * n;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    torch::Tensor q5 = q.to(torch::kFloat32).reshape({b, g, a / g, sq, d});
    auto f32 = q5.options();
    Online st{torch::full({b, g, a / g, sq}, -std::numeric_limits<float>::infinity(), f32), torch::zeros({b, g, a / g, sq}, f32),
              torch::zeros({b, g, a / g, sq, d}, f32)};
    torch::Tensor kc = k, vc = v;
    Exchange ex;
    for (int j = 0; j < n; ++j) {
      if (j + 1 < n) ex.start(cp, {kc, vc}, kKvTag);  // the next block's chunk travels while this one computes
      const torch::Tensor pos_k = cp_positions(s, (r - j + n) % n, n, q.device());
      st.add(block_scores(q5, kc, positions, pos_k, scale), vc);
      if (j + 1 < n) {
        auto got = ex.wait(cp);
        kc = got[0], vc = got[1];
      }
    }
    torch::Tensor out = st.acc / st.l.unsqueeze(-1);   // (b, g, a/g, sq, d)
    torch::Tensor lse = st.m + torch::log(st.l);       // (b, g, a/g, sq)
    ctx->save_for_backward({q, k, v, positions, out, lse});
    ctx->saved_data["cp"] = cp_ptr;
    return out.reshape({b, a, sq, d}).to(q.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor q = saved[0], k = saved[1], v = saved[2], positions = saved[3], out = saved[4], lse = saved[5];
    auto& cp = *reinterpret_cast<CpContext*>(static_cast<std::intptr_t>(ctx->saved_data["cp"].toInt()));
    const int n = cp.group->size(), r = cp.group->rank;
    const std::int64_t b = q.size(0), a = q.size(1), sq = q.size(2), d = q.size(3), g = k.size(1), s = sq * n;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    torch::Tensor q5 = q.to(torch::kFloat32).reshape({b, g, a / g, sq, d});
    torch::Tensor dout = grads[0].to(torch::kFloat32).reshape({b, g, a / g, sq, d});
    torch::Tensor delta = (dout * out).sum(-1);  // (b, g, a/g, sq): rowsum(dO o O), FlashAttention-2's D
    torch::Tensor dq = torch::zeros_like(q5);
    torch::Tensor kc = k, vc = v;
    torch::Tensor dk = torch::zeros(k.sizes(), q5.options()), dv = torch::zeros(v.sizes(), q5.options());
    Exchange kv, dkv;
    for (int j = 0; j < n; ++j) {
      if (j + 1 < n) kv.start(cp, {kc, vc}, kKvTag);
      const torch::Tensor pos_k = cp_positions(s, (r - j + n) % n, n, q.device());
      torch::Tensor p = torch::exp(block_scores(q5, kc, positions, pos_k, scale) - lse.unsqueeze(-1));  // (b, g, a/g, sq, sk)
      torch::Tensor k5 = kc.to(torch::kFloat32).unsqueeze(2), v5 = vc.to(torch::kFloat32).unsqueeze(2);  // (b, g, 1, sk, d)
      torch::Tensor dv_blk = torch::matmul(p.transpose(-2, -1), dout).sum(2);                            // (b, g, sk, d)
      torch::Tensor ds = p * (torch::matmul(dout, v5.transpose(-2, -1)) - delta.unsqueeze(-1));         // (b, g, a/g, sq, sk)
      dq.add_(torch::matmul(ds, k5), scale);
      torch::Tensor dk_blk = torch::matmul(ds.transpose(-2, -1), q5).sum(2) * scale;                    // (b, g, sk, d)
      if (j > 0) {  // the gradients of the chunk held now, summed by the ranks it passed before
        auto got = dkv.wait(cp);
        dk = got[0], dv = got[1];
      }
      dk.add_(dk_blk), dv.add_(dv_blk);
      dkv.start(cp, {dk, dv}, kGradTag);  // on to the next rank; after n steps back at the chunk's owner
      if (j + 1 < n) {
        auto got = kv.wait(cp);
        kc = got[0], vc = got[1];
      }
    }
    auto own = dkv.wait(cp);
    return {dq.reshape({b, a, sq, d}).to(q.scalar_type()), own[0].to(k.scalar_type()), own[1].to(v.scalar_type()),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& positions, CpContext& ctx) {
  if (!ctx.group || ctx.group->size() < 2) throw Error("runtime: ring attention needs a context-parallel group of 2 or more ranks");
  if (q.size(1) % k.size(1) != 0 || k.sizes() != v.sizes() || q.size(2) != k.size(2) || positions.numel() != q.size(2))
    throw Error("runtime: ring attention shapes: q " + std::to_string(q.size(1)) + " heads of " + std::to_string(q.size(2)) +
                " tokens, k/v " + std::to_string(k.size(1)) + " heads of " + std::to_string(k.size(2)) + ", " +
                std::to_string(positions.numel()) + " positions");
  // The context outlives the graph (one per process); autograd's saved data holds IValues.
  return RingAttention::apply(q, k, v, positions, static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(&ctx)));
}

}  // namespace stagecraft::runtime
