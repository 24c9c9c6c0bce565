// Mixture-of-experts layers and expert parallelism in the runtime (runtime/moe.h,
// docs/runtime.md "Mixture of experts"). In one process: the routing convention (Mixtral's
// renormalised top-k), the dispatch plan's counts and order, an MoE MLP equal to a per-token
// reference (values and gradients, GELU and SwiGLU experts with a shared expert), and the
// expert-parallel all-to-alls over a real two-member Gloo group (two threads) equal to the experts
// computed on one rank, including splits of zero rows. Then `stagecraft train`: the losses of
// ep 2, ep 4, dp 4 x ep 2 and pipelines with ep 2 (1F1B, ZB-H1, DualPipeV) equal a single
// process's within 1e-5, and
// differ from the dense model's; the combinations the runtime does not run exit 2 naming the
// field.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iomanip>
#include <thread>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "presets/load.h"
#include "costmodel/specs.h"
#include "runtime/model.h"
#include "runtime/moe.h"
#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

using runtime::ExpertWeights;
using runtime::MoeParams;
using runtime::MoeShape;

// ---- in one process ---------------------------------------------------------------------

TEST(RuntimeMoe, RoutingRenormalisesTheTopK) {
  torch::Tensor logits = torch::tensor({{0.0, 1.0, 2.0, 3.0}, {3.0, 0.5, 0.0, 2.0}});  // (N 2, E 4)
  runtime::Routing r = runtime::route(logits, 2);
  EXPECT_TRUE(r.experts.equal(torch::tensor({{3, 2}, {0, 3}}, torch::kInt64)));
  torch::Tensor p = torch::softmax(logits, -1);
  // Mixtral: the two largest probabilities, divided by their sum.
  const double a = p[0][3].item<double>(), b = p[0][2].item<double>();
  EXPECT_NEAR(r.gates[0][0].item<double>(), a / (a + b), 1e-6);
  EXPECT_NEAR(r.gates[0][1].item<double>(), b / (a + b), 1e-6);
  EXPECT_TRUE(r.gates.sum(-1).allclose(torch::ones({2})));
}

TEST(RuntimeMoe, DispatchPlanCountsAndOrder) {
  torch::Tensor experts = torch::tensor({{2, 0}, {3, 2}, {1, 2}}, torch::kInt64);  // (N 3, k 2)
  runtime::DispatchPlan d = runtime::plan_dispatch(experts, 4, 2);
  EXPECT_EQ(d.per_expert, (std::vector<std::int64_t>{1, 1, 3, 1}));
  EXPECT_EQ(d.send, (std::vector<std::int64_t>{2, 4}));  // experts 0-1 on ep rank 0, 2-3 on rank 1
  // Copies (token * k + slot) sorted by expert, by copy within an expert.
  EXPECT_TRUE(d.order.equal(torch::tensor({1, 4, 0, 3, 5, 2}, torch::kInt64)));
  EXPECT_TRUE(d.token.equal(torch::tensor({0, 2, 0, 1, 2, 1}, torch::kInt64)));
  EXPECT_THROW(runtime::plan_dispatch(experts, 4, 3), Error);
}

ExpertWeights random_expert(int64_t h, int64_t f, bool swiglu) {
  ExpertWeights w;
  w.fc1_w = (torch::randn({f, h}) * 0.3).requires_grad_(true);
  if (swiglu) w.up_w = (torch::randn({f, h}) * 0.3).requires_grad_(true);
  w.fc2_w = (torch::randn({h, f}) * 0.3).requires_grad_(true);
  return w;
}

MoeParams random_moe(int64_t h, int64_t f, int E, bool swiglu, bool shared) {
  MoeParams p;
  p.router_w = torch::randn({E, h}).requires_grad_(true);
  for (int e = 0; e < E; ++e) p.experts.push_back(random_expert(h, f, swiglu));
  if (shared) p.shared = random_expert(h, f, swiglu);
  return p;
}

torch::Tensor naive_expert(const torch::Tensor& x, const ExpertWeights& w) {  // (h) -> (h)
  torch::Tensor u = w.up_w.defined() ? torch::silu(w.fc1_w.mv(x)) * w.up_w.mv(x) : torch::gelu(w.fc1_w.mv(x));
  return w.fc2_w.mv(u);
}

// Token by token, as the convention reads: softmax, top-k, renormalise, weighted sum of the
// chosen experts, plus the shared expert.
torch::Tensor naive_moe(const torch::Tensor& x, const MoeParams& p, int k) {  // (N, h) -> (N, h)
  std::vector<torch::Tensor> rows;
  for (int64_t n = 0; n < x.size(0); ++n) {
    torch::Tensor probs = torch::softmax(p.router_w.mv(x[n]), -1);
    auto [top, idx] = probs.topk(k);
    torch::Tensor y = torch::zeros({x.size(1)});
    for (int j = 0; j < k; ++j)
      y = y + top[j] / top.sum() * naive_expert(x[n], p.experts[static_cast<size_t>(idx[j].item<int64_t>())]);
    if (p.shared.fc1_w.defined()) y = y + naive_expert(x[n], p.shared);
    rows.push_back(y);
  }
  return torch::stack(rows);
}

std::vector<torch::Tensor> weights_of(const MoeParams& p) {
  std::vector<torch::Tensor> out{p.router_w};
  for (const auto& e : p.experts)
    for (const auto& t : {e.fc1_w, e.up_w, e.fc2_w})
      if (t.defined()) out.push_back(t);
  for (const auto& t : {p.shared.fc1_w, p.shared.up_w, p.shared.fc2_w})
    if (t.defined()) out.push_back(t);
  return out;
}

TEST(RuntimeMoe, LayerEqualsPerTokenReference) {
  for (bool swiglu : {false, true}) {
    torch::manual_seed(3);
    const int64_t b = 2, s = 5, h = 8, f = 6;
    MoeParams p = random_moe(h, f, 4, swiglu, /*shared=*/true);
    torch::Tensor x = torch::randn({b, s, h}).requires_grad_(true);  // (b, s, h)
    MoeShape shape{4, 2, swiglu, 1};
    torch::Tensor y = runtime::moe_mlp(x, p, shape, &runtime::deferrable_linear);  // (b, s, h)
    torch::Tensor xr = x.detach().reshape({b * s, h}).requires_grad_(true);
    torch::Tensor ref = naive_moe(xr, p, 2);
    ASSERT_TRUE(y.reshape({b * s, h}).allclose(ref, 1e-5, 1e-6)) << (swiglu ? "swiglu" : "gelu");
    // Gradients: of the input and of every weight (the router's through the gates).
    torch::Tensor g = torch::randn({b, s, h});
    std::vector<torch::Tensor> w = weights_of(p), inputs = w;
    inputs.insert(inputs.begin(), x);
    auto got = torch::autograd::grad({y}, inputs, {g});
    std::vector<torch::Tensor> ref_inputs = w;
    ref_inputs.insert(ref_inputs.begin(), xr);
    auto want = torch::autograd::grad({ref}, ref_inputs, {g.reshape({b * s, h})});
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(got[0].reshape({b * s, h}).allclose(want[0], 1e-4, 1e-6)) << "input gradient";
    for (size_t i = 1; i < got.size(); ++i) EXPECT_TRUE(got[i].allclose(want[i], 1e-4, 1e-6)) << "weight " << i;
  }
}

// Two ranks of an expert-parallel group as two threads of this process, over Gloo.
struct EpPair {
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  runtime::compat::Group groups[2];
  EpPair() {
    runtime::compat::GroupOptions o;
    o.master_addr = "127.0.0.1";
    o.timeout = std::chrono::milliseconds(30000);
    std::thread t1([&] { groups[1] = runtime::compat::make_group(store, "ep test", {0, 1}, 1, o); });
    groups[0] = runtime::compat::make_group(store, "ep test", {0, 1}, 0, o);
    t1.join();
  }
};

// ep rank r of 2 holds experts [2r, 2r + 2) of `full`, the same tensors (so the gradients of
// expert e land on the same leaf whichever rank computes it).
MoeParams half(const MoeParams& full, int r) {
  MoeParams p;
  p.router_w = full.router_w.detach().clone().requires_grad_(true);  // replicated: each rank its own copy
  p.experts = {full.experts[static_cast<size_t>(2 * r)], full.experts[static_cast<size_t>(2 * r + 1)]};
  p.first_expert = 2 * r;
  p.shared = full.shared;
  return p;
}

// Each rank routes its own tokens; outputs, input gradients, the router's gradient (each rank's
// own tokens) and every expert's gradient (both ranks' tokens) equal ep 1's. `bias`: tokens of
// rank r pushed towards rank r's experts, so that some splits are zero rows.
void check_expert_parallel(bool bias) {
  torch::manual_seed(11);
  const int64_t b = 2, s = 6, h = 8, f = 4;
  MoeParams full = random_moe(h, f, 4, /*swiglu=*/false, /*shared=*/false);
  if (bias) {  // feature 0 decides: positive -> experts 0 and 1, negative -> 2 and 3
    torch::NoGradGuard ng;
    full.router_w.zero_();
    full.router_w.select(1, 0).copy_(torch::tensor({5.0, 4.0, -4.0, -5.0}));
    full.router_w.select(1, 1).copy_(torch::tensor({0.1, -0.1, 0.1, -0.1}));
  }
  torch::Tensor x[2];
  for (int r = 0; r < 2; ++r) {
    x[r] = torch::randn({b, s, h});
    if (bias) x[r].select(2, 0).copy_(torch::full({b, s}, r == 0 ? 2.0 : -2.0));
  }
  torch::Tensor g[2] = {torch::randn({b, s, h}), torch::randn({b, s, h})};
  // ep 1: every expert here, each rank's tokens in turn; expert gradients summed over both.
  MoeParams one = full;
  one.router_w = full.router_w.detach().clone().requires_grad_(true);
  std::vector<torch::Tensor> y1, gx1, grouter1;
  std::vector<torch::Tensor> experts1(4);
  for (int r = 0; r < 2; ++r) {
    torch::Tensor xi = x[r].clone().requires_grad_(true);
    torch::Tensor y = runtime::moe_mlp(xi, one, MoeShape{4, 2, false, 1}, &runtime::deferrable_linear);
    std::vector<torch::Tensor> in{xi, one.router_w};
    for (const auto& e : one.experts) in.push_back(e.fc1_w);
    auto grads = torch::autograd::grad({y}, in, {g[r]});
    y1.push_back(y.detach());
    gx1.push_back(grads[0]);
    grouter1.push_back(grads[1]);
    for (int e = 0; e < 4; ++e) experts1[e] = experts1[e].defined() ? experts1[e] + grads[2 + e] : grads[2 + e];
  }
  // ep 2: the two ranks at once.
  EpPair pair;
  torch::Tensor y2[2], gx2[2], grouter2[2], gexperts2[2][2];
  auto rank = [&](int r) {
    MoeParams p = half(full, r);
    torch::Tensor xi = x[r].clone().requires_grad_(true);
    MoeShape shape{4, 2, false, 2, &pair.groups[r], std::chrono::milliseconds(30000)};
    torch::Tensor y = runtime::moe_mlp(xi, p, shape, &runtime::deferrable_linear);
    std::vector<torch::Tensor> in{xi, p.router_w, p.experts[0].fc1_w, p.experts[1].fc1_w};
    auto grads = torch::autograd::grad({y}, in, {g[r]});
    y2[r] = y.detach(), gx2[r] = grads[0], grouter2[r] = grads[1];
    gexperts2[r][0] = grads[2], gexperts2[r][1] = grads[3];
  };
  std::thread t1([&] { rank(1); });
  rank(0);
  t1.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(y2[r].allclose(y1[static_cast<size_t>(r)], 1e-5, 1e-6)) << "output of rank " << r;
    EXPECT_TRUE(gx2[r].allclose(gx1[static_cast<size_t>(r)], 1e-5, 1e-6)) << "input gradient of rank " << r;
    EXPECT_TRUE(grouter2[r].allclose(grouter1[static_cast<size_t>(r)], 1e-5, 1e-6)) << "router gradient of rank " << r;
    for (int j = 0; j < 2; ++j)
      EXPECT_TRUE(gexperts2[r][j].allclose(experts1[static_cast<size_t>(2 * r + j)], 1e-5, 1e-6)) << "expert " << 2 * r + j;
  }
}

TEST(RuntimeMoe, ExpertParallelAllToAllEqualsOneRank) { check_expert_parallel(false); }

TEST(RuntimeMoe, ExpertParallelWithEmptySplits) {
  // Every copy stays on its own rank: the all-to-alls send and receive zero rows between them.
  torch::Tensor experts = torch::tensor({{0, 1}}, torch::kInt64);
  EXPECT_EQ(runtime::plan_dispatch(experts, 4, 2).send, (std::vector<std::int64_t>{2, 0}));
  check_expert_parallel(true);
}

// GptPart: expert e's weights are the same numbers on whichever ep rank holds it.
TEST(RuntimeMoe, ExpertWeightsIndependentOfPlacement) {
  costmodel::ModelSpec m = presets::load_model(data_path("models/runtime-tiny8-moe.json"));
  const runtime::PartShape shape{0, 2, true, false};
  runtime::GptPart all(m, shape, 0, 1, 7), r1(m, shape, 0, 1, 7, torch::kCPU, {1, 2});
  std::map<std::string, torch::Tensor> whole;
  for (const auto& [name, t] : all.named_parameters()) whole[name] = t;
  int experts = 0;
  for (const auto& [name, t] : r1.named_parameters()) {
    ASSERT_TRUE(whole.count(name)) << name;
    EXPECT_TRUE(t.equal(whole[name])) << name;
    if (runtime::is_routed_expert_parameter(name)) ++experts;
  }
  EXPECT_EQ(experts, 2 * 2);  // layer 1 only (layer 0 dense): experts 2 and 3, fc1 and fc2 each
  EXPECT_TRUE(whole.count("L1.expert0.fc1_w") && whole.count("L1.shared.fc2_w") && whole.count("L1.router_w"));
  EXPECT_FALSE(whole.count("L1.fc1_w"));
  EXPECT_TRUE(whole.count("L0.fc1_w"));
  EXPECT_FALSE(runtime::is_routed_expert_parameter("L1.shared.fc1_w"));
}

// ---- stagecraft train -------------------------------------------------------------------

const std::string kMoe = data_path("models/runtime-tiny8-moe.json");
constexpr int kMoeSteps = 5;
constexpr int kGlobalMicrobatches = 8;  // dp x microbatches: the same global batch in every run

std::string flags(const std::string& model, int dp) {
  return "--model " + model + " --steps " + std::to_string(kMoeSteps) + " --seed 7 --lr 3e-3 --timeout 60 --microbatches " +
         std::to_string(kGlobalMicrobatches / dp);
}

// The first step's squared gradients summed over the ranks (replicated parameters once per
// holder), taken before any update, when every run holds the same weights.
double first_grad_sq(const nlohmann::json& summary) { return summary["steps"][0]["grad_sq_sum"].get<double>(); }

const TrainRun& single_process(const std::string& model) { return train_once(flags(model, 1) + " --schedule gpipe"); }

std::vector<double> single_losses(const std::string& model) {
  const TrainRun& r = single_process(model);
  return r.cli.exit_code == 0 ? losses(r.summary) : std::vector<double>{};
}

struct Split {
  int dp, pp, ep;
  std::string extra;
};

// Losses alone would not see a wrong divisor of the experts' gradients (AdamW's update hardly
// depends on a gradient's scale), so the first step's squared gradients are checked too: a run
// of dp ranks holds each dense parameter dp times and each routed expert dp/ep times, so its
// sum is dp D + (dp/ep) X, with D and X the single process's dense and expert sums, solved from
// the single process (D + X) and the first split (dp 2, ep 2: 2D + X).
TEST(RuntimeMoe, ExpertParallelLossesEqualSingleProcess) {
  const std::vector<double> ref = single_losses(kMoe);
  ASSERT_EQ(ref.size(), static_cast<size_t>(kMoeSteps));
  const double one = first_grad_sq(single_process(kMoe).summary);
  double dense = -1, experts = -1;
  for (const Split& sp : {Split{2, 1, 2, "--schedule 1f1b"},                    // ep alone: dp = ep
                          Split{4, 1, 4, "--schedule 1f1b"},                    // one expert a rank
                          Split{4, 1, 2, "--schedule 1f1b"},                    // two expert-data-parallel copies
                          Split{2, 2, 2, "--schedule 1f1b --recompute full"},   // a pipeline, recomputed all-to-alls
                          Split{2, 2, 2, "--schedule zb-h1 --overlap-grad-reduce"},  // split backward, hooks
                          Split{2, 2, 2, "--schedule dualpipev"},               // overlapped forward-backward pairs
                          Split{2, 1, 1, "--schedule 1f1b --zero 1"}}) {       // ep 1: experts replicated over dp
    const std::string args = flags(kMoe, sp.dp) + " --nproc " + std::to_string(sp.dp * sp.pp) + " --dp " + std::to_string(sp.dp) +
                             " --pp " + std::to_string(sp.pp) + " --ep " + std::to_string(sp.ep) + " " + sp.extra;
    TrainRun r = train(args);
    ASSERT_EQ(r.cli.exit_code, 0) << args << "\n" << r.cli.err;
    const std::vector<double> got = losses(r.summary);
    ASSERT_EQ(got.size(), ref.size()) << args;
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5 * std::fabs(ref[i])) << args << " step " << i;
    const double sq = first_grad_sq(r.summary);
    if (dense < 0) {  // the first split, dp 2 and ep 2
      dense = sq - one, experts = 2 * one - sq;
      ASSERT_GT(dense, 0.01 * one) << "dense parameters' share of the squared gradients";
      ASSERT_GT(experts, 0.01 * one) << "routed experts' share of the squared gradients";
      std::cout << std::setprecision(9) << "single process:";
      for (double l : ref) std::cout << " " << l;
      std::cout << "\ndp 2 ep 2:     ";
      for (double l : got) std::cout << " " << l;
      std::cout << "\nfirst step's squared gradients: dense " << dense << ", routed experts " << experts << "\n";
    }
    const double want = sp.dp * dense + (sp.dp / sp.ep) * experts;
    EXPECT_NEAR(sq, want, 1e-4 * want) << args << ": squared gradients";
  }
}

TEST(RuntimeMoe, DiffersFromTheDenseModelAndLearns) {
  const std::vector<double> moe = single_losses(kMoe);
  const std::vector<double> dense = single_losses(data_path("models/runtime-tiny8.json"));
  ASSERT_EQ(moe.size(), static_cast<size_t>(kMoeSteps));
  ASSERT_EQ(dense.size(), moe.size());
  EXPECT_GT(std::fabs(moe.back() - dense.back()), 1e-4) << "the same losses as the dense model";
  EXPECT_LT(moe.back(), moe.front());
}

std::string with_field(const std::string& field, const std::string& value) {  // the MoE model with one field changed
  nlohmann::json j = nlohmann::json::parse(read_text(kMoe));
  j[field] = nlohmann::json::parse(value);
  const std::string path = temp_path(field + ".json");
  std::ofstream(path) << j.dump(2);
  return path;
}

TEST(RuntimeMoe, UnsupportedCombinationsExit2NamingTheField) {
  struct Case {
    std::string args, field;
  };
  const std::vector<Case> cases = {
      {flags(kMoe, 1) + " --nproc 2 --tp 2", "sequence_parallel"},  // Megatron-Core's rule: experts under tp need SP
      {flags(kMoe, 2) + " --nproc 2 --dp 2 --ep 2 --zero 1", "plan.zero = 1"},
      {flags(kMoe, 2) + " --nproc 4 --dp 2 --pp 2 --ep 2 --schedule chimera", "plan.ep = 2"},
      {flags(kMoe, 2) + " --nproc 4 --dp 2 --pp 2 --ep 2 --schedule fold3d", "plan.ep = 2"},
      {flags(with_field("moe_capacity_factor", "1.25"), 1), "model.moe_capacity_factor"},
  };
  for (const Case& c : cases) expect_train_refused(c.args, c.field);
}

}  // namespace
}  // namespace stagecraft::test
