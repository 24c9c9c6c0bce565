#include "profiler/layers.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>
#include <functional>

#include "runtime/device.h"
#include "runtime/memory_counter.h"
#include "runtime/model.h"
#include "runtime/optim.h"
#include "runtime/torch_pch.h"
#include "schedules/error.h"

namespace stagecraft::profiler {
namespace {

using Clock = std::chrono::steady_clock;

// Bytes that stay allocated from calling `f` until its result is dropped: the caching
// allocator's statistics on a GPU, the counting allocator on the CPU.
double kept_bytes(const torch::Device& d, const std::function<torch::Tensor()>& f) {
  if (!d.is_cuda()) runtime::install_cpu_memory_counter();
  runtime::synchronize(d);
  const std::int64_t before = runtime::device_allocated_bytes(d);
  torch::Tensor y = f();
  runtime::synchronize(d);
  return static_cast<double>(runtime::device_allocated_bytes(d) - before);
}

// Peak bytes of backpropagating `f`'s result from an output gradient (drawn, not zeros), above
// what was allocated before the gradient: the backward's working set, net of the saved tensors
// it frees on the way. As in a training step after the first: the part's gradients exist (the
// runtime keeps them, as Megatron-LM's gradient buffer), the input's gradient is new.
double backward_working_bytes(const torch::Device& d, const runtime::GptPart& part, torch::Tensor& input,
                              const std::function<torch::Tensor()>& f) {
  if (!d.is_cuda()) runtime::install_cpu_memory_counter();
  for (const auto& np : part.named_parameters()) np.second.mutable_grad() = torch::zeros_like(np.second);
  input.mutable_grad().reset();
  torch::Tensor y = f();
  runtime::synchronize(d);
  const std::int64_t before = runtime::device_allocated_bytes(d);
  runtime::reset_device_peak(d);
  if (y.dim() == 0) y.backward();
  else y.backward(torch::randn_like(y));
  runtime::synchronize(d);
  return static_cast<double>(runtime::device_peak_bytes(d) - before);
}

// Bytes a split backward's I leaves for its W: the forward, then the backward with the weight
// gradients deferred (the runtime's I); once the output and the input's gradient are dropped,
// what stays above the start is what the deferred jobs hold (the linears' inputs and output
// gradients). The part's gradients exist beforehand, as in any step after the first.
double weight_kept_bytes(const torch::Device& d, const runtime::GptPart& part, torch::Tensor& input,
                         const std::function<torch::Tensor()>& f) {
  if (!d.is_cuda()) runtime::install_cpu_memory_counter();
  for (const auto& np : part.named_parameters()) np.second.mutable_grad() = torch::zeros_like(np.second);
  input.mutable_grad().reset();
  runtime::synchronize(d);
  const std::int64_t before = runtime::device_allocated_bytes(d);
  runtime::DeferredGrads w;
  {
    torch::Tensor y = f();
    runtime::DeferWeightGrads defer(&w);
    if (y.dim() == 0) y.backward();
    else y.backward(torch::randn_like(y));
  }
  input.mutable_grad().reset();
  runtime::synchronize(d);
  const double kept = static_cast<double>(runtime::device_allocated_bytes(d) - before);
  w.clear();
  return kept;
}

template <class F>
costmodel::Measurement time_it(const LayerGridOptions& o, const torch::Device& d, F&& f) {
  for (int i = 0; i < o.warmup; ++i) f();
  runtime::Timeline tl(d);
  std::vector<double> t;
  for (int i = 0; i < o.runs; ++i) {
    tl.begin(Clock::now());
    const int a = tl.mark();
    f();
    const int b = tl.mark();
    tl.resolve();
    t.push_back(tl.seconds(b) - tl.seconds(a));
  }
  return costmodel::measurement_of(t);
}

costmodel::ModelSpec spec(const LayerGridOptions& o, int h, int a, int s) {
  costmodel::ModelSpec m;
  m.name = "profiled";
  m.kind = costmodel::parse_kind(o.model_kind);
  m.attention_kernel = costmodel::parse_attention_kernel(o.attention_kernel, "--attention-kernel");
  m.num_layers = 1;
  m.hidden_size = h;
  m.num_heads = a;
  m.num_kv_heads = o.num_kv_heads;
  m.ffn_hidden_size = 4 * h;
  m.seq_length = s;
  m.vocab_size = o.vocab_size;
  m.bytes_per_param = 4;
  m.bytes_per_activation = 4;
  return m;
}

// Times of one part: forward (building the graph), full backward, the backward split into I
// (weight gradients deferred) and W (running them), and recompute (the forward again).
void fill_times(const LayerGridOptions& o, const torch::Device& d, const std::function<torch::Tensor()>& fwd,
                costmodel::LayerProfile& lp) {
  lp.forward = time_it(o, d, [&] { fwd(); });
  lp.recompute = time_it(o, d, [&] { fwd(); });
  std::vector<double> full, in, wt;
  runtime::Timeline tl(d);
  for (int i = 0; i < o.warmup + o.runs; ++i) {
    torch::Tensor y = fwd();
    tl.begin(Clock::now());
    const int b0 = tl.mark();
    y.backward();
    const int b1 = tl.mark();
    torch::Tensor y2 = fwd();
    runtime::DeferredGrads q;
    const int i0 = tl.mark();
    {
      runtime::DeferWeightGrads defer(&q);
      y2.backward();
    }
    const int i1 = tl.mark();
    for (auto& g : q) g();
    const int w1 = tl.mark();
    tl.resolve();
    if (i >= o.warmup)
      full.push_back(tl.seconds(b1) - tl.seconds(b0)), in.push_back(tl.seconds(i1) - tl.seconds(i0)),
          wt.push_back(tl.seconds(w1) - tl.seconds(i1));
  }
  lp.backward = costmodel::measurement_of(full);
  lp.backward_input = costmodel::measurement_of(in);
  lp.backward_weight = costmodel::measurement_of(wt);
}

costmodel::LayerProfile base(const std::string& kind, const LayerGridOptions& o, int h, int a, int s, int b, int t) {
  costmodel::LayerProfile lp;
  lp.kind = kind;
  lp.model_kind = o.model_kind;
  lp.attention_kernel = o.attention_kernel;
  lp.precision = o.precision;
  lp.hidden_size = h;
  lp.num_heads = a;
  lp.num_kv_heads = o.num_kv_heads;
  lp.ffn_hidden_size = 4 * h;
  lp.seq_length = s;
  lp.vocab_size = o.vocab_size;
  lp.microbatch_size = b;
  lp.tp = t;
  return lp;
}

// A one-member tp group for the profiled shard: its all-reduces do nothing, so the times are
// the shard's compute alone (the collectives are measured separately).
struct SoloTpGroup {
  runtime::compat::Group solo;
  runtime::compat::Group* saved;
  SoloTpGroup() : saved(runtime::tp_context().group) {
    solo.name = "profiled shard";
    solo.members = {0};
    runtime::tp_context().group = &solo;
  }
  ~SoloTpGroup() { runtime::tp_context().group = saved; }
};

// The transformer layer, the embedding and the head of one (h, a, s, b) shape at tp degree t,
// as one tp rank of the runtime holds them (the layer sharded, embedding and head split by vocabulary).
void profile_shape(const LayerGridOptions& o, const torch::Device& d, int h, int a, int s, int b, int t,
                   std::vector<costmodel::LayerProfile>& out) {
  costmodel::ModelSpec m = spec(o, h, a, s);
  // As the runtime trains: under autocast for bf16, where each forward casts the weights it
  // multiplies by to bf16 and keeps the casts for its backward (runtime/model.cpp
  // DeferrableLinear), so the bytes below hold them: one copy per microbatch in flight.
  runtime::AutocastScope autocast(d, runtime::parse_precision(o.precision));
  torch::manual_seed(1);
  torch::Tensor x = torch::randn({b, s, h}).to(d).requires_grad_(true);                  // (b, s, h)
  torch::Tensor tokens = torch::randint(0, o.vocab_size, {b, s}, torch::kLong).to(d);  // (b, s)
  runtime::GptPart layer(m, {0, 1, false, false}, 0, t, 7, d);
  costmodel::LayerProfile lp = base("transformer", o, h, a, s, b, t);
  fill_times(o, d, [&] { return layer.layers(x, 0, 1).sum(); }, lp);
  lp.activation_bytes = kept_bytes(d, [&] { return layer.layers(x, 0, 1); });
  lp.checkpoint_bytes = static_cast<double>(x.numel() * x.element_size());  // the layer input
  lp.backward_working_bytes = backward_working_bytes(d, layer, x, [&] { return layer.layers(x, 0, 1); });
  lp.weight_kept_bytes = weight_kept_bytes(d, layer, x, [&] { return layer.layers(x, 0, 1); });
  // The same layer with selective recomputation (the attention core recomputed in its backward).
  layer.set_recompute_attention_core(true);
  lp.selective_activation_bytes = kept_bytes(d, [&] { return layer.layers(x, 0, 1); });
  lp.selective_backward_working_bytes = backward_working_bytes(d, layer, x, [&] { return layer.layers(x, 0, 1); });
  layer.set_recompute_attention_core(false);
  out.push_back(lp);
  // Embedding (a lookup) and head (final norm, logits, loss).
  runtime::GptPart emb(m, {0, 0, true, false}, 0, t, 7, d);
  costmodel::LayerProfile le = base("embedding", o, h, a, s, b, t);
  fill_times(o, d, [&] { return emb.embed(tokens).sum(); }, le);
  le.activation_bytes = le.checkpoint_bytes = kept_bytes(d, [&] { return emb.embed(tokens); });
  out.push_back(le);
  runtime::GptPart head(m, {0, 0, false, true}, 0, t, 7, d);
  costmodel::LayerProfile lh = base("head", o, h, a, s, b, t);
  fill_times(o, d, [&] { return head.loss(x, tokens); }, lh);
  lh.activation_bytes = lh.checkpoint_bytes = kept_bytes(d, [&] { return head.loss(x, tokens); });
  lh.weight_kept_bytes = weight_kept_bytes(d, head, x, [&] { return head.loss(x, tokens); });
  // A last stage backpropagates the head, then its layers: measured on the head over one layer.
  runtime::GptPart tail(m, {0, 1, false, true}, 0, t, 7, d);
  lh.backward_working_bytes = backward_working_bytes(d, tail, x, [&] { return tail.loss(tail.layers(x, 0, 1), tokens); });
  out.push_back(lh);
}

}  // namespace

std::vector<costmodel::LayerProfile> profile_layers(const LayerGridOptions& o) {
  if (o.hidden_sizes.empty() || o.num_heads.empty() || o.seq_lengths.empty() || o.microbatch_sizes.empty() ||
      o.tp_degrees.empty())
    throw InputError("profile: the grid is empty (give --hidden, --heads, --seq, --microbatch-size and --tp)");
  if (o.runs < 1 || o.warmup < 0) throw InputError("profile: runs must be >= 1 and warmup >= 0");
  if (o.model_kind != "gpt" && o.model_kind != "llama")
    throw InputError("profile: --model-kind = '" + o.model_kind + "' is invalid (allowed: gpt, llama: the decoders the runtime builds)");
  runtime::parse_precision(o.precision);  // InputError naming the value
  {
    costmodel::ModelSpec kernel;
    kernel.attention_kernel = costmodel::parse_attention_kernel(o.attention_kernel, "--attention-kernel");
    runtime::check_attention_kernel(kernel);  // before any layer is built
  }
  for (int a : o.num_heads)
    if (o.num_kv_heads < 0 || (o.num_kv_heads > 0 && a % o.num_kv_heads != 0))
      throw InputError("profile: --kv-heads = " + std::to_string(o.num_kv_heads) + " is invalid (must divide every --heads, " +
                       std::to_string(a) + " among them; 0: as many as the heads)");
  for (int t : o.tp_degrees)
    if (t < 1) throw InputError("profile: --tp " + std::to_string(t) + " is invalid (allowed: 1 or more)");
  torch::set_num_threads(o.threads);
  const torch::Device d = runtime::parse_device(o.device, "--device");
  SoloTpGroup solo;
  std::vector<costmodel::LayerProfile> out;
  // Heads split h and t splits the heads (and the key/value heads); LLaMA's rotary needs an even head size.
  auto valid = [&](int h, int a, int t) {
    const int g = o.num_kv_heads > 0 ? o.num_kv_heads : a;
    return a >= 1 && h % a == 0 && a % t == 0 && g % t == 0 && (o.model_kind != "llama" || (h / a) % 2 == 0);
  };
  long total = 0, done = 0;
  for (int h : o.hidden_sizes)
    for (int a : o.num_heads)
      for (int t : o.tp_degrees) total += valid(h, a, t) ? static_cast<long>(o.seq_lengths.size() * o.microbatch_sizes.size()) : 0;
  for (int h : o.hidden_sizes)
    for (int a : o.num_heads)
      for (int t : o.tp_degrees) {
        if (!valid(h, a, t)) continue;
        for (int s : o.seq_lengths)
          for (int b : o.microbatch_sizes) {
            profile_shape(o, d, h, a, s, b, t, out);
            if (o.progress) o.progress(++done, total);
          }
      }
  if (out.empty())
    throw InputError("profile: no (hidden, heads, tp) of the grid has heads dividing hidden and tp dividing heads" +
                     std::string(o.num_kv_heads > 0 ? " and --kv-heads" : "") +
                     (o.model_kind == "llama" ? " (llama: an even head size)" : ""));
  return out;
}

double profile_optimizer_s_per_param(const LayerGridOptions& o) {
  torch::set_num_threads(o.threads);
  const torch::Device d = runtime::parse_device(o.device, "--device");
  costmodel::ModelSpec m = spec(o, o.hidden_sizes.back(), o.num_heads.front(), o.seq_lengths.front());
  runtime::GptPart layer(m, {0, 1, false, false}, 0, 1, 7, d);
  std::vector<torch::Tensor> grads;
  double n = 0;
  for (const auto& [name, t] : layer.named_parameters()) {
    (void)name;
    grads.push_back(torch::randn_like(t));
    n += static_cast<double>(t.numel());
  }
  runtime::AdamW opt(layer.named_parameters(), runtime::AdamWOptions{});
  auto step = [&] {
    size_t i = 0;
    for (const auto& [name, t] : layer.named_parameters()) {
      (void)name;
      const_cast<torch::Tensor&>(t).mutable_grad() = grads[i++];  // the step drops them again
    }
    opt.step();
  };
  costmodel::Measurement t = time_it(o, d, step);
  return t.median_s / n;
}

nlohmann::json describe_device(const LayerGridOptions& o) {
  const torch::Device d = runtime::parse_device(o.device, "--device");
  std::string cpu = "unknown";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  nlohmann::json j = {{"kind", d.is_cuda() ? "cuda" : "cpu"},
                      {"name", d.is_cuda() ? runtime::describe(d) : cpu},
                      {"host_cpu", cpu},
                      {"threads", o.threads},
                      {"hardware_threads", std::thread::hardware_concurrency()},
                      {"libtorch", TORCH_VERSION},
                      {"compiler", std::string("g++ ") + __VERSION__}};
  return j;
}

}  // namespace stagecraft::profiler
