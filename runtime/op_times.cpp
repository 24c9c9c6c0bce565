#include "runtime/op_times.h"

namespace stagecraft::runtime {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const char* op_kind_name(OpKind k) { return k == OpKind::Gemm ? "gemm" : "attention_core"; }

OpRecorder*& op_recorder() {
  static OpRecorder* r = nullptr;
  return r;
}

void OpRecorder::begin(OpKind k) {
  const auto i = static_cast<size_t>(k);
  if (depth_[i]++ == 0) start_[i] = tl_.mark();
}

void OpRecorder::end(OpKind k) {
  const auto i = static_cast<size_t>(k);
  if (depth_[i] == 0) return;  // an end without its begin (a graph recorded before the recorder)
  if (--depth_[i] == 0) spans_.emplace_back(k, start_[i], tl_.mark());
}

std::array<double, kOpKinds> OpRecorder::seconds() const {
  std::array<double, kOpKinds> s{};
  for (const auto& [k, a, b] : spans_) s[static_cast<size_t>(k)] += tl_.seconds(b) - tl_.seconds(a);
  return s;
}

void OpRecorder::clear() {
  spans_.clear();
  depth_ = {};
}

namespace {

struct OpBackwardMark : torch::autograd::Function<OpBackwardMark> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t kind, bool begin) {
    ctx->saved_data["kind"] = kind;
    ctx->saved_data["begin"] = begin;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    if (OpRecorder* r = op_recorder()) {
      const auto k = static_cast<OpKind>(ctx->saved_data["kind"].toInt());
      if (ctx->saved_data["begin"].toBool()) r->begin(k);
      else r->end(k);
    }
    return {g[0], torch::Tensor(), torch::Tensor()};
  }
};

torch::Tensor mark(const torch::Tensor& t, OpKind k, bool begin) {
  if (!op_recorder() || !t.requires_grad() || !torch::GradMode::is_enabled()) return t;
  return OpBackwardMark::apply(t, static_cast<std::int64_t>(k), begin);
}

}  // namespace

torch::Tensor mark_backward_end(const torch::Tensor& input, OpKind k) { return mark(input, k, false); }
torch::Tensor mark_backward_begin(const torch::Tensor& output, OpKind k) { return mark(output, k, true); }

}  // namespace stagecraft::runtime
