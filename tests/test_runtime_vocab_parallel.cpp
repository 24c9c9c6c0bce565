// The vocabulary-parallel ends of the runtime's model (runtime/model.h): with tp t each rank
// holds V/t rows of the token embedding and of the LM head (Megatron-LM's
// VocabParallelEmbedding and vocab-parallel cross-entropy). Checked here on one process, each
// shard's collectives answering alone: the shards' lookups sum to the full table's, and a
// shard's cross-entropy and its gradients equal LibTorch's on that shard's logits. Training with
// tp 2 against tp 1 is the parity test's (test_runtime_parity.cpp).
#include <gtest/gtest.h>

#include <fstream>

#include "costmodel/specs.h"
#include "runtime/model.h"
#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

costmodel::ModelSpec tiny() {
  costmodel::ModelSpec m;
  m.name = "vocab-test";
  m.num_layers = 1;
  m.hidden_size = 16;
  m.num_heads = 2;
  m.ffn_hidden_size = 64;
  m.seq_length = 8;
  m.vocab_size = 32;
  m.bytes_per_param = 4;
  m.bytes_per_activation = 4;
  return m;
}

// The tp collectives of a shard profiled alone: a one-member group, whose all-reduces return
// their input.
class SoloTp : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = runtime::tp_context().group;
    solo_.name = "solo";
    solo_.members = {0};
    runtime::tp_context().group = &solo_;
  }
  void TearDown() override { runtime::tp_context().group = saved_; }

 private:
  runtime::compat::Group solo_;
  runtime::compat::Group* saved_ = nullptr;
};

TEST_F(SoloTp, ShardLookupsSumToTheFullEmbedding) {
  const costmodel::ModelSpec m = tiny();
  const runtime::PartShape ends{0, 0, true, false};
  runtime::GptPart full(m, ends, 0, 1, 7), r0(m, ends, 0, 2, 7), r1(m, ends, 1, 2, 7);
  torch::Tensor tokens = torch::randint(0, m.vocab_size, {2, m.seq_length}, torch::kLong);  // (b, s) both halves
  ASSERT_GT(tokens.lt(m.vocab_size / 2).sum().item<int64_t>(), 0);
  ASSERT_GT(tokens.ge(m.vocab_size / 2).sum().item<int64_t>(), 0);
  torch::NoGradGuard ng;
  torch::Tensor pos = full.named_parameters()[1].second.narrow(0, 0, m.seq_length).unsqueeze(0);  // (1, s, h)
  ASSERT_EQ(full.named_parameters()[1].first, "embed.pos");
  // Each shard adds the (replicated) position embedding to its partial lookup.
  torch::Tensor summed = r0.embed(tokens) + r1.embed(tokens) - pos;
  EXPECT_TRUE(torch::allclose(summed, full.embed(tokens), 1e-6, 1e-6));
  EXPECT_EQ(r0.named_parameters()[0].second.size(0), m.vocab_size / 2);
  // A shard's rows are the full table's rows of its slice.
  EXPECT_TRUE(torch::equal(r1.named_parameters()[0].second, full.named_parameters()[0].second.narrow(0, m.vocab_size / 2, m.vocab_size / 2)));
}

TEST_F(SoloTp, ShardCrossEntropyAndGradientsEqualLibTorchsOnItsSlice) {
  const costmodel::ModelSpec m = tiny();
  const runtime::PartShape head{0, 0, false, true};
  runtime::GptPart shard(m, head, 1, 2, 7), copy(m, head, 1, 2, 7);
  const int64_t half = m.vocab_size / 2;
  torch::Tensor x = torch::randn({2, m.seq_length, m.hidden_size});                          // (b, s, h)
  torch::Tensor targets = torch::randint(half, m.vocab_size, {2, m.seq_length}, torch::kLong);  // (b, s) rank 1's slice
  torch::Tensor xa = x.clone().requires_grad_(true), xb = x.clone().requires_grad_(true);
  torch::Tensor loss = shard.loss(xa, targets);
  loss.backward();
  // The reference: the same shard's logits through LibTorch's cross-entropy, ids made local.
  const auto& p = copy.named_parameters();  // final.ln_w, final.ln_b, head.w
  torch::Tensor y = torch::layer_norm(xb, {m.hidden_size}, p[0].second, p[1].second);
  torch::Tensor logits = torch::matmul(y, p[2].second.t());  // (b, s, V/t)
  torch::Tensor ref = torch::nn::functional::cross_entropy(logits.reshape({-1, half}), (targets - half).reshape({-1}));
  ref.backward();
  EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-5 * ref.item<double>());
  EXPECT_TRUE(torch::allclose(xa.grad(), xb.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(shard.named_parameters()[2].second.grad(), p[2].second.grad(), 1e-5, 1e-6));
  // A target outside the slice contributes no logit here (its rank's share of the all-reduce
  // does): alone, the shard's loss is its log-sum-exp less the row maximum it shifted by.
  torch::Tensor elsewhere = torch::zeros({2, m.seq_length}, torch::kLong);
  torch::NoGradGuard ng;
  torch::Tensor flat = logits.reshape({-1, half});  // (b s, V/t)
  torch::Tensor lse = (torch::logsumexp(flat, 1) - std::get<0>(flat.max(1))).mean();
  EXPECT_NEAR(shard.loss(x, elsewhere).item<double>(), lse.item<double>(), 1e-5 * std::abs(lse.item<double>()));
}

TEST(VocabParallelInput, VocabularyNotDivisibleByTpIsRefused) {
  const std::string path = temp_path("odd-vocab.json");
  std::ofstream(path) << R"({"name": "odd-vocab", "kind": "gpt", "num_layers": 2, "hidden_size": 16, "num_heads": 2,
    "ffn_hidden_size": 64, "seq_length": 8, "vocab_size": 33, "bytes_per_param": 4, "bytes_per_activation": 4})";
  TrainRun r = train("--model " + path + " --nproc 2 --tp 2 --microbatches 2 --steps 1");
  std::remove(path.c_str());
  EXPECT_EQ(r.cli.exit_code, 2) << r.cli.err;
  EXPECT_NE(r.cli.err.find("model.vocab_size = 33"), std::string::npos) << r.cli.err;
  EXPECT_NE(r.cli.err.find("tp = 2"), std::string::npos) << r.cli.err;
}

}  // namespace
}  // namespace stagecraft::test
