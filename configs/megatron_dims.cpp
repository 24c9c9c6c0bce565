// Megatron-Core's model dimensions, recomputation, CUDA graph and overlap fields (configs/megatron_fields.h).
#include <algorithm>
#include <cmath>

#include "configs/megatron_fields.h"
#include "schedules/error.h"

namespace stagecraft::configs {

using costmodel::ModelSpec;
using costmodel::ParallelPlan;

namespace {

std::string s(long v) { return std::to_string(v); }

int required_int(FlagReader& r, const std::string& key, const std::string& note, int from_hf) {
  if (r.has(key)) return r.count(key, note, 1);
  if (from_hf > 0) return from_hf;
  throw InputError(r.where() + ": --" + key + " is missing (required by Megatron-LM; or give the model with --hf-config)");
}

// Megatron-LM pads the vocabulary to a multiple of make_vocab_size_divisible_by * tp
// (_vocab_size_with_padding in megatron/training/tokenizer).
void read_vocab(FlagReader& r, ModelSpec& m, int tp) {
  if (r.has("vocab-size")) m.vocab_size = r.count("vocab-size", "vocab_size (before padding)", 1);
  if (m.vocab_size < 1)
    throw InputError(r.where() + ": --vocab-size is missing (Megatron-LM takes it from the tokenizer; give --vocab-size or --hf-config)");
  const std::optional<int> div = r.has("make-vocab-size-divisible-by")
                                     ? std::optional<int>(r.count("make-vocab-size-divisible-by", "vocab_size padded to a multiple of this * tp", 1))
                                     : std::nullopt;
  if (!div) r.report().assume("--make-vocab-size-divisible-by", "128", "vocab_size padded to a multiple of 128 * tp");
  const long multiple = static_cast<long>(div.value_or(128)) * tp;
  const long padded = (m.vocab_size + multiple - 1) / multiple * multiple;
  if (padded != m.vocab_size) r.report().map("vocab padding", s(padded), "vocab_size " + s(padded) + " (from " + s(m.vocab_size) + ")");
  m.vocab_size = static_cast<int>(padded);
}

void read_shape_notes(FlagReader& r, ModelSpec& m) {
  const bool untied = r.boolean("untie-embeddings-and-output-weights", "separate output matrix (kind llama)").value_or(false);
  if (untied && m.kind != costmodel::ModelKind::Llama)
    r.report().unmodelled("--untie-embeddings-and-output-weights", "", "kind gpt counts the head tied to the embedding");
  if (!untied && m.kind == costmodel::ModelKind::Llama)
    r.report().unmodelled("tied embeddings", "", "Megatron-LM ties them by default; kind llama counts a separate output matrix");
  r.unmodelled("normalization", "the kind decides: LayerNorm for gpt, RMSNorm for llama");
  r.unmodelled("position-embedding-type", "the kind decides: learned positions for gpt, rotary for llama");
  r.unmodelled("disable-bias-linear", "the kind decides: biases for gpt, none for llama");
  r.unmodelled("qk-layernorm", "query/key norms not priced");
}

}  // namespace

// The model's name from the file's: its base name without the extension ("'a/run_8b.sh'": run_8b).
static std::string name_of(const std::string& where) {
  std::string n = where;
  n.erase(std::remove(n.begin(), n.end(), '\''), n.end());
  n = n.substr(n.find_last_of('/') + 1);
  const size_t dot = n.find('.');
  return dot == 0 || n.empty() ? "imported" : n.substr(0, dot);
}

void read_megatron_dims(FlagReader& r, ModelSpec& m, int tp) {
  if (m.name.empty()) m.name = name_of(r.where());
  m.source = "imported from " + r.where();
  m.num_layers = required_int(r, "num-layers", "num_layers", m.num_layers);
  m.hidden_size = required_int(r, "hidden-size", "hidden_size", m.hidden_size);
  m.num_heads = required_int(r, "num-attention-heads", "num_heads", m.num_heads);
  m.seq_length = required_int(r, "seq-length", "seq_length", m.seq_length);
  if (r.boolean("swiglu", "kind llama (gated SwiGLU MLP)").value_or(false)) m.kind = costmodel::ModelKind::Llama;
  if (const std::optional<int> f = r.integer("ffn-hidden-size", "ffn_hidden_size")) {
    m.ffn_hidden_size = *f;
  } else if (m.ffn_hidden_size == 0) {
    const bool glu = m.kind == costmodel::ModelKind::Llama;
    m.ffn_hidden_size = glu ? static_cast<int>(4 * m.hidden_size * 2 / 3 / 64) * 64 : 4 * m.hidden_size;
    r.report().assume("--ffn-hidden-size", s(m.ffn_hidden_size), glu ? "8h/3 rounded down to 64 (with --swiglu)" : "4h");
  }
  const bool gqa = r.boolean("group-query-attention", "grouped-query attention").value_or(false);
  if (const std::optional<int> g = r.integer("num-query-groups", gqa ? "num_kv_heads" : "unused without --group-query-attention"))
    if (gqa) m.num_kv_heads = *g == m.num_heads ? 0 : *g;
  if (const std::optional<int> d = r.integer("kv-channels", "head_dim")) m.head_dim = *d;
  // Megatron-Core's TransformerConfig.activation_func_clamp_value (gpt-oss through Megatron-Bridge).
  if (const std::optional<double> c = r.number("activation-func-clamp-value", "activation_clamp")) m.activation_clamp = *c;
  read_vocab(r, m, tp);
  read_shape_notes(r, m);
}

void read_megatron_recompute(FlagReader& r, ParallelPlan& p) {
  if (r.boolean("recompute-activations", "recompute selective").value_or(false)) p.recompute = costmodel::RecomputePolicy::Selective;
  const std::optional<std::string> g = r.text("recompute-granularity", "recompute");
  if (g && *g == "full") p.recompute = costmodel::RecomputePolicy::Full;
  else if (g && *g == "selective") p.recompute = costmodel::RecomputePolicy::Selective;
  else if (g) throw InputError(r.where() + ": " + r.name("recompute-granularity") + " = '" + *g + "' is invalid (allowed: full, selective)");
  const std::optional<std::string> method = r.text("recompute-method", "with full: which layers");
  const std::optional<int> n = r.integer("recompute-num-layers", "with full: layers per group (uniform) or per stage (block)");
  if (p.recompute == costmodel::RecomputePolicy::Full && ((method && *method == "block") || n.value_or(1) != 1))
    r.report().unmodelled("--recompute-method/--recompute-num-layers", method.value_or("uniform") + " " + s(n.value_or(1)),
                          "modelled as full recomputation of every layer (partial recomputation is not)");
  if (const std::optional<std::vector<std::string>> mods = r.list("recompute-modules", "recompute_modules (with selective)")) {
    if (p.recompute == costmodel::RecomputePolicy::Selective && *mods != std::vector<std::string>{"core_attn"}) p.recompute_modules = *mods;
    else if (p.recompute != costmodel::RecomputePolicy::Selective)
      r.report().unmodelled("--recompute-modules", "", "read with selective recomputation only (Megatron-Core's rule)");
  }
}

// CUDA graphs: --cuda-graph-impl (none, local, transformer_engine; Megatron-Bridge's
// full_iteration) with --cuda-graph-scope (attn, mlp, moe, moe_router, moe_preprocess, mamba,
// full_iteration; the older "full": whole layers), or the older --enable-cuda-graph (local) and
// --external-cuda-graph (Transformer Engine's), onto plan.cuda_graph_scope (costmodel/host.h).
void read_megatron_cuda_graphs(FlagReader& r, ParallelPlan& p) {
  std::string impl = r.text("cuda-graph-impl", "cuda_graph_scope").value_or("none");
  if (r.boolean("enable-cuda-graph", "cuda_graph_scope (local)").value_or(false)) impl = "local";
  if (r.boolean("external-cuda-graph", "cuda_graph_scope (transformer_engine)").value_or(false)) impl = "transformer_engine";
  const std::vector<std::string> scope = r.list("cuda-graph-scope", "cuda_graph_scope").value_or(std::vector<std::string>{});
  const auto has = [&](const char* x) { return std::find(scope.begin(), scope.end(), x) != scope.end(); };
  if (impl == "none") return;
  if (impl == "full_iteration" || has("full_iteration")) {
    p.cuda_graph_scope = {"full_iteration"};
    return;
  }
  if (impl != "local" && impl != "transformer_engine")
    throw InputError(r.where() + ": " + r.name("cuda-graph-impl") + " = '" + impl +
                     "' is invalid (allowed: none, local, transformer_engine, full_iteration)");
  if (scope.empty() || has("full")) {  // whole layers
    p.cuda_graph_scope = {"attn", "mlp", "moe"};
    return;
  }
  for (const std::string& x : scope) {
    if (x == "attn" || x == "mlp" || x == "moe" || x == "moe_router" || x == "moe_preprocess") p.cuda_graph_scope.push_back(x);
    else r.report().unmodelled("--cuda-graph-scope", x, "not a block stagecraft prices (its kernels priced as issued eagerly)");
  }
}

void read_megatron_overlap(FlagReader& r, Imported& in) {
  ParallelPlan& p = in.plan;
  if (r.boolean("use-distributed-optimizer", "zero 1").value_or(false)) p.zero = 1;
  if (r.boolean("use-torch-fsdp2", "zero 3 (FSDP2)").value_or(false)) p.zero = 3;
  const bool mfsdp = r.boolean("use-megatron-fsdp", "zero from --data-parallel-sharding-strategy").value_or(false) ||
                     r.boolean("use-custom-fsdp", "zero from --data-parallel-sharding-strategy").value_or(false);
  if (const std::optional<std::string> st = r.text("data-parallel-sharding-strategy", "zero")) {
    const std::vector<std::string> names = {"no_shard", "optim", "optim_grads", "optim_grads_params"};
    const auto it = std::find(names.begin(), names.end(), *st);
    if (it == names.end()) throw InputError(r.where() + ": --data-parallel-sharding-strategy = '" + *st + "' is invalid (allowed: no_shard, optim, optim_grads, optim_grads_params)");
    if (mfsdp) p.zero = static_cast<int>(it - names.begin());
  }
  if (r.boolean("overlap-grad-reduce", "overlap_grad_reduce").value_or(false)) p.overlap_grad_reduce = true;
  const bool opg = r.boolean("overlap-param-gather", p.zero == 3 ? "implied by zero 3 (each layer gathered ahead)" : "overlap_param_gather").value_or(false);
  if (opg && p.zero != 3) p.overlap_param_gather = true;
  if (r.boolean("tp-comm-overlap", "tp_overlap te").value_or(false)) p.tp_overlap = schedules::TpOverlap::Te;
  if (const std::optional<std::string> impl = r.text("transformer-impl", "stack")) p.stack = *impl == "local" ? "megatron-lm" : "megatron-core-te";
  else {
    p.stack = "megatron-core-te";
    r.report().assume("--transformer-impl", "transformer_engine", "stack megatron-core-te");
  }
  if (const std::optional<double> b = r.number("ddp-bucket-size", "grad_bucket_bytes = this * 4 (fp32 gradients)")) p.grad_bucket_bytes = *b * 4;
  // Megatron-LM overlaps the pipeline's sends and receives by default (--no-overlap-p2p-communication
  // turns it off; older scripts and Bridge name the overlap itself).
  r.unmodelled("no-overlap-p2p-communication", "pipeline transfers placed as the schedule orders them");
  r.unmodelled("overlap-p2p-communication", "pipeline transfers placed as the schedule orders them");
  r.unmodelled("overlap-moe-expert-parallel-comm", "the all-to-alls of 1F1B's paired micro-batches are not overlapped");
  r.unmodelled("delay-wgrad-compute", "weight gradients computed with the backward");
  // Activation offloading (plan.offload_layers): the layers Megatron-Core offloads when it is on.
  const std::optional<int> offload = r.integer("cpu-offloading-num-layers", "offload_layers (with --cpu-offloading)");
  if (r.boolean("cpu-offloading", "offload_layers = --cpu-offloading-num-layers").value_or(false) && offload)
    p.offload_layers = *offload;
  r.unmodelled("cp-comm-type", "context parallelism priced as the key/value ring (p2p)");
  r.unmodelled("hierarchical-context-parallel-sizes", "context parallelism priced as one ring");
  r.unmodelled("num-distributed-optimizer-instances", "one distributed optimizer over the whole dp group");
  r.unmodelled("overlap-param-gather-with-optimizer-step", "the gather follows the step");
  r.unmodelled("defer-embedding-wgrad-compute", "the embedding's weight gradient computed in line");
  r.unmodelled("no-position-embedding", "the kind decides the position embedding");
}

bool megatron_ignorable(const std::string& key) {
  static const std::vector<std::string> names = {
      "train-iters", "train-samples", "lr", "min-lr", "lr-decay-style", "lr-decay-iters", "lr-decay-samples",
      "lr-warmup-iters", "lr-warmup-fraction", "lr-warmup-samples", "lr-warmup-init", "weight-decay", "clip-grad",
      "adam-beta1", "adam-beta2", "adam-eps", "init-method-std", "save", "load", "data-path", "split", "tokenizer-type",
      "tokenizer-model", "vocab-file", "merge-file", "log-interval", "eval-interval", "eval-iters", "save-interval",
      "tensorboard-dir", "seed", "distributed-backend", "distributed-timeout-minutes", "use-mcore-models", "mock-data",
      "max-position-embeddings", "rotary-base", "rotary-percent", "rotary-scaling-factor", "use-rope-scaling",
      "norm-epsilon", "attention-softmax-in-fp32", "accumulate-allreduce-grads-in-fp32", "no-masked-softmax-fusion",
      "no-bias-gelu-fusion", "no-bias-swiglu-fusion", "no-bias-dropout-fusion", "no-rope-fusion", "apply-rope-fusion",
      "cross-entropy-loss-fusion", "cross-entropy-fusion-impl", "no-gradient-accumulation-fusion", "ckpt-format",
      "exit-duration-in-mins", "manual-gc", "manual-gc-interval", "num-workers", "data-cache-path", "no-create-attention-mask-in-dataloader",
      "timing-log-level", "timing-log-option", "log-throughput", "log-timers-to-tensorboard", "log-memory-to-tensorboard",
      "log-validation-ppl-to-tensorboard", "log-params-norm", "log-num-zeros-in-grad", "wandb-project", "wandb-exp-name",
      "wandb-save-dir", "moe-router-load-balancing-type", "moe-aux-loss-coeff", "moe-z-loss-coeff", "moe-router-topk-scaling-factor",
      "moe-router-score-function", "moe-router-enable-expert-bias", "moe-router-bias-update-rate", "moe-router-dtype",
      "moe-router-pre-softmax", "moe-token-drop-policy", "moe-pad-expert-input-to-capacity", "moe-input-jitter-eps",
      "untie-embeddings-and-output-weights", "use-checkpoint-args", "no-load-optim", "no-load-rng", "finetune",
      "no-save-optim", "no-save-rng", "async-save", "dist-ckpt-strategy", "eod-mask-loss", "reset-position-ids",
      "reset-attention-mask", "override-opt-param-scheduler", "use-cpu-initialization", "optimizer", "loss-scale",
      "initial-loss-scale", "min-loss-scale", "loss-scale-window", "hysteresis", "fp8-margin", "fp8-interval",
      "fp8-amax-history-len", "fp8-amax-compute-algo", "first-last-layers-bf16", "num-layers-at-start-in-bf16",
      "num-layers-at-end-in-bf16", "micro-batch-size-per-gpu", "tokenizer-prompt-format", "calculate-per-token-loss",
      "mtp-loss-scaling-factor", "bias-gelu-fusion", "masked-softmax-fusion", "use-rotary-position-embeddings",
      "enable-experimental", "tp-comm-overlap-cfg", "te-rng-tracker", "use-te-rng-tracker", "moe-router-fusion",
      "moe-enable-deepep", "align-param-gather", "align-grad-reduce", "no-check-for-nan-in-loss-and-grad",
      "ddp-average-in-collective", "check-weight-hash-across-dp-replicas-interval", "log-straggler",
      "attention-softmax-in-fp16"};
  return in_list(key, names, {"log-", "wandb-", "tensorboard-", "profile", "one-logger", "straggler", "ft-", "rerun-"});
}

}  // namespace stagecraft::configs
