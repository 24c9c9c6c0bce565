// The GPT decoder, cut into model parts (pipeline stages) and sharded Megatron-style over the
// tensor-parallel group: column-parallel QKV and first MLP matrix, row-parallel output
// projection and second MLP matrix, an all-reduce after each row-parallel product in the
// forward and after each column-parallel input in the backward (autograd functions).
// The token embedding and the LM head are split by vocabulary (Megatron-LM's
// VocabParallelEmbedding and vocab-parallel cross-entropy); position embedding and norms are
// replicated across the tp group.
//
// Weights: every tensor of global layer l is drawn from a generator seeded by (seed, l,
// tensor), full size, then sliced to this tp rank's shard; so every (dp, tp, pp) partition
// trains the same mathematical model.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "costmodel/specs.h"
#include "runtime/compat.h"
#include "runtime/moe.h"
#include "runtime/part.h"

namespace stagecraft::runtime {

// Tensor-parallel state shared by the autograd functions of one process.
struct TpContext {
  compat::Group* group = nullptr;            // tp group (size 1: no communication)
  std::chrono::milliseconds timeout{60000};  // all-reduce wait limit
  double comm_s = 0;                         // seconds spent in tp all-reduces so far (blocking ones
                                             // whole; asynchronous ones: launch plus wait)
  long collectives = 0;                      // tp collectives issued so far
};
TpContext& tp_context();

// y = x w^T, the runtime's linear layer whose weight gradient a split backward (I) defers to W.
// x: (..., in), w: (out, in) -> (..., out).
torch::Tensor deferrable_linear(const torch::Tensor& x, const torch::Tensor& w);

// Whether a parameter name of GptPart::named_parameters is a routed expert's ("L3.expert5.fc1_w"):
// with ep > 1 those are reduced over the expert-data-parallel group, the rest over dp.
bool is_routed_expert_parameter(const std::string& name);

// Which experts of each MoE layer a part holds: those of ep rank `rank` of `size` (E/size
// consecutive experts from rank * E/size); size 1: every expert.
struct ExpertPlacement {
  int rank = 0;
  int size = 1;
};

// Which tokens of each sequence a part holds: those of cp rank `rank` of `size` (two chunks of
// s / 2size, runtime/cp.h); size 1: the whole sequence. With size > 1 attention is a ring over
// cp_context().group.
struct ContextShard {
  int rank = 0;
  int size = 1;
};

// A vocabulary the tp group cannot split evenly is refused by runtime::check_vocab_parallel
// (runtime/support/rules.h), which the planner's --for-runtime search applies too.
// InputError when the model's attention kernel is one this build cannot run (fused needs 2.x,
// except with context parallelism, cp > 1, whose ring attention is its own fused kernel).
void check_attention_kernel(const costmodel::ModelSpec& m, int cp = 1);

// Weight-gradient work deferred from I to W (zero-bubble): one closure per linear layer.
using DeferredGrads = std::vector<std::function<void()>>;
// While alive, linear layers' backward queues their weight gradients into `q` instead of
// computing them (the I half of a split backward).
class DeferWeightGrads {
 public:
  explicit DeferWeightGrads(DeferredGrads* q);
  ~DeferWeightGrads();
  DeferWeightGrads(const DeferWeightGrads&) = delete;
  DeferWeightGrads& operator=(const DeferWeightGrads&) = delete;

 private:
  DeferredGrads* prev_;
};
// Sees each weight gradient a deferred job computes (weight, its gradient), just before the job
// accumulates it into the weight's .grad: the W half's counterpart of a tensor hook, which
// only fires inside autograd (overlap_grad_reduce starts buckets from it).
using WeightGradHook = std::function<void(const torch::Tensor& weight, const torch::Tensor& grad)>;
// While alive, deferred jobs run on this thread report to `hook` (nullptr: none).
class HookDeferredGrads {
 public:
  explicit HookDeferredGrads(const WeightGradHook* hook);
  ~HookDeferredGrads();
  HookDeferredGrads(const HookDeferredGrads&) = delete;
  HookDeferredGrads& operator=(const HookDeferredGrads&) = delete;

 private:
  const WeightGradHook* prev_;
};

// One transformer layer's weights on one tp rank. GPT: LayerNorm, biases, GELU MLP. LLaMA
// (kind llama): RMSNorm (weights only), no biases (ln*_b, qkv_b and fc1_b undefined; proj_b and
// fc2_b zero constants, not parameters), SwiGLU MLP with fc1 the gate and up_w the up matrix.
// An MoE layer (costmodel::is_moe_layer) has `moe` instead of the MLP's fc1, up, fc2 and biases.
struct LayerParams {
  torch::Tensor ln1_w, ln1_b;  // (h), (h)
  torch::Tensor qkv_w;         // ((h + 2h_kv)/t, h) rows of q, k and v for this rank's heads
  torch::Tensor qkv_b;         // ((h + 2h_kv)/t); h_kv = h with multi-head attention
  torch::Tensor proj_w;        // (h, h/t) columns for this rank's heads
  torch::Tensor proj_b;        // (h)
  torch::Tensor ln2_w, ln2_b;  // (h), (h)
  torch::Tensor fc1_w;         // (f/t, h) GPT's first matrix; LLaMA's gate
  torch::Tensor fc1_b;         // (f/t)
  torch::Tensor up_w;          // (f/t, h) LLaMA's up matrix (SwiGLU: silu(gate x) * up x)
  torch::Tensor fc2_w;         // (h, f/t)
  torch::Tensor fc2_b;         // (h)
  bool is_moe = false;         // the MLP is a mixture of experts (runtime/moe.h)
  MoeParams moe;               // its router, this rank's routed experts and the shared experts
};

// One model part (pipeline stage) as held by one tp rank; its layers are transformer layers.
class GptPart : public ModelPart {
 public:
  // Weights are drawn on the CPU (the same numbers on every device) and placed on `device`.
  // MoE layers hold the experts of `experts` (every expert by default); the part runs the
  // tokens of `context` (the whole sequence by default).
  GptPart(const costmodel::ModelSpec& m, const PartShape& shape, int tp_rank, int tp_size, std::uint64_t seed,
          torch::Device device = torch::kCPU, ExpertPlacement experts = {}, ContextShard context = {});

  torch::Tensor embed(const torch::Tensor& tokens) const override;                  // (b, s/cp) -> (b, s/cp, h)
  torch::Tensor layers(const torch::Tensor& x, int from, int to) const override;    // (b, s, h) -> (b, s, h)
  torch::Tensor loss(const torch::Tensor& x, const torch::Tensor& targets) const override;  // (b, s, h) -> ()
  std::vector<std::int64_t> boundary_shape(bool input, std::int64_t b) const override;  // (b, s/cp, h) both ways

  // Tensor-parallel blocks of the part, for executing them piece by piece (runtime/tp_pieces.h):
  // block 2l is the attention of local layer l, block 2l+1 its MLP. Block k maps the residual
  // stream x to x + (all-reduce(core(norm(x))) + bias); the all-reduce is the caller's.
  int blocks() const { return 2 * shape_.num_layers; }
  torch::Tensor block_norm(const torch::Tensor& x, int block) const;  // (b, s, h) -> (b, s, h)
  // Column-parallel product to row-parallel product: (b, s, h) normed input -> (b, s, h) this
  // rank's partial sum. Megatron's f (the gradient's all-reduce) is the caller's too.
  torch::Tensor block_core(const torch::Tensor& q, int block) const;
  const torch::Tensor& block_bias(int block) const;  // (h) added after the all-reduce

  // Selective recomputation (plan.recompute = selective): every layer's attention core keeps
  // only q, k and v and is recomputed in its backward.
  void set_recompute_attention_core(bool on) { recompute_core_ = on; }
  // Sequence parallelism (plan.sequence_parallel, tp > 1): outside the tensor-parallel blocks the
  // part holds s/(cp t) tokens; blocks all-gather the sequence and reduce-scatter their output.
  // InputError when tp does not divide the rank's s/cp tokens.
  void set_sequence_parallel(bool on);

  const PartShape& shape() const override { return shape_; }
  const torch::Device& device() const override { return device_; }
  // Every parameter with a stable name ("L3.qkv_w", "embed.tok", ...), in a fixed order.
  const std::vector<std::pair<std::string, torch::Tensor>>& named_parameters() const override { return params_; }

 private:
  torch::Tensor layer(const torch::Tensor& x, const LayerParams& p) const;  // (b, s, h) -> (b, s, h)
  torch::Tensor embed_whole(const torch::Tensor& tokens) const;              // embed with its weights present
  torch::Tensor enter_tp(const torch::Tensor& x) const;  // a tp block's input: f, or the sequence's all-gather
  torch::Tensor leave_tp(const torch::Tensor& y) const;  // its partial output: g, or the reduce-scatter
  torch::Tensor replicated(const torch::Tensor& w) const;  // a replicated weight whose gradient SP leaves partial
  torch::Tensor local_positions() const;  // (s/(cp t)) positions of the rank's tokens with sequence parallelism
  torch::Tensor loss_whole(const torch::Tensor& x, const torch::Tensor& targets) const;  // loss likewise
  torch::Tensor attention(const torch::Tensor& x, const LayerParams& p) const;
  torch::Tensor mlp(const torch::Tensor& x, const LayerParams& p) const;
  torch::Tensor attention_core(const torch::Tensor& in, const LayerParams& p) const;  // (b, s, h) -> (b, s, h) partial
  torch::Tensor norm(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) const;  // LayerNorm or RMSNorm
  bool llama() const { return m_.kind == costmodel::ModelKind::Llama; }
  torch::Tensor mlp_core(const torch::Tensor& in, const LayerParams& p) const;        // (b, s, h) -> (b, s, h) partial
  const LayerParams& block_layer(int block) const;
  int64_t vocab_start() const;  // first token id of this rank's vocabulary slice
  void init_layer(int global_layer, std::uint64_t seed);
  void init_dense_mlp(LayerParams& p, int global_layer, std::uint64_t seed);
  void init_moe(LayerParams& p, int global_layer, std::uint64_t seed);
  ExpertWeights init_expert(const std::string& name, std::uint64_t owner, std::uint64_t first_id, std::int64_t width,
                            std::uint64_t seed);
  void init_ends(std::uint64_t seed);
  torch::Tensor add(const std::string& name, torch::Tensor t);

  costmodel::ModelSpec m_;
  PartShape shape_;
  int tp_rank_ = 0, tp_size_ = 1;
  ExpertPlacement experts_;
  ContextShard context_;
  torch::Tensor positions_;  // (s/cp) int64 positions of the part's tokens in the sequence
  bool recompute_core_ = false;  // selective recomputation of the attention core
  bool sp_ = false;              // sequence parallelism (tp > 1)
  torch::Device device_;
  std::vector<LayerParams> layers_;
  torch::Tensor tok_emb_;   // (V/t, h) this rank's vocabulary slice
  torch::Tensor pos_emb_;   // (s, h); undefined for LLaMA (rotary positions, no parameters)
  torch::Tensor lnf_w_, lnf_b_;  // (h), (h)
  torch::Tensor head_w_;    // (V/t, h) this rank's vocabulary slice
  std::vector<std::pair<std::string, torch::Tensor>> params_;
};

}  // namespace stagecraft::runtime
