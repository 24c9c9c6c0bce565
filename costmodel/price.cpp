#include "costmodel/price.h"

#include <utility>

#include "costmodel/shape.h"

namespace stagecraft::costmodel {

bool priced_by_shape(const ClusterSpec& c) { return c.gpu_sms > 0; }

double flat_rate_flops_per_s(const ClusterSpec& c) {
  return c.gpu_peak_flops_per_s * (c.achieved_efficiency > 0 ? c.achieved_efficiency : c.gemm_max_efficiency);
}

BlockKinds block_kinds(const BlockWork& b, const KernelContext& w, const ClusterSpec& cluster, const KernelStack& k,
                       std::vector<std::string>* notes) {
  if (w.mxfp8 && cluster.gpu_fp8_peak_flops_per_s != cluster.gpu_mxfp8_peak_flops_per_s) {
    ClusterSpec mx = cluster;  // MXFP8 products at the block-scaled peak (Fp8Recipe::Mxfp8)
    mx.gpu_fp8_peak_flops_per_s = cluster.gpu_mxfp8_peak_flops_per_s;
    KernelContext plain = w;
    plain.mxfp8 = false;
    return block_kinds(b, plain, mx, k, notes);
  }
  const ClusterSpec& c = cluster;
  BlockKinds out;
  if (!priced_by_shape(c)) {
    const double rate = flat_rate_flops_per_s(c);
    out.products_s = (b.flops() - b.model_flops) / rate;
    out.flash_s = b.model_flops / rate;
    return out;
  }
  const double clock = c.sustained_clock_share();  // compute-bound kernels at the training clock (shape.h)
  for (const Gemm& g : b.gemms)
    out.products_s += shape::streamed_gemm_s(c, g.m, g.n, g.k, g.batch, g.concurrent, w.element_bytes, clock, g.fp8);
  out.products_s += b.other_flops / (c.gpu_peak_flops_per_s * c.gemm_max_efficiency * clock);
  if (b.flash_flops > 0) {
    const FlashEfficiency fe = flash_efficiency(k, c.gpu_name, w.head_dim, w.seq_length, w.causal);
    if (notes && !fe.note.empty()) notes->push_back(fe.note);
    out.flash_s = b.flash_flops / ((b.flash_backward ? fe.bwd : fe.fwd) * c.gpu_peak_flops_per_s * clock);
  }
  out.memory_s = shape::memory_s(c, b.memory_bytes);
  return out;
}

double block_s(const BlockWork& b, const KernelContext& w, const ClusterSpec& c, const KernelStack& k, std::vector<std::string>* notes) {
  return block_kinds(b, w, c, k, notes).total_s();
}

LayerTimes price_layer(const LayerWork& w, const ClusterSpec& c, const KernelStack& k, std::vector<std::string>* notes) {
  using Pass = std::pair<const BlockWork LayerWork::*, double LayerTimes::*>;  // a block's pass and its time
  static const Pass dense[] = {{&LayerWork::attn_f, &LayerTimes::attn_f_s}, {&LayerWork::attn_i, &LayerTimes::attn_i_s},
                               {&LayerWork::attn_w, &LayerTimes::attn_w_s}, {&LayerWork::mlp_f, &LayerTimes::mlp_f_s},
                               {&LayerWork::mlp_i, &LayerTimes::mlp_i_s},   {&LayerWork::mlp_w, &LayerTimes::mlp_w_s},
                               {&LayerWork::head_f, &LayerTimes::head_f_s}, {&LayerWork::head_i, &LayerTimes::head_i_s},
                               {&LayerWork::head_w, &LayerTimes::head_w_s}};
  static const Pass experts[] = {{&LayerWork::moe_f, &LayerTimes::moe_f_s}, {&LayerWork::moe_i, &LayerTimes::moe_i_s},
                                 {&LayerWork::moe_w, &LayerTimes::moe_w_s}};
  LayerTimes out;
  for (const auto& [work, time] : dense) out.*time = block_s(w.*work, w, c, k, notes);
  if (!w.moe_f.gemms.empty())  // an MoE layer's MLP block (0 without experts)
    for (const auto& [work, time] : experts) out.*time = block_s(w.*work, w, c, k, notes);
  return out;
}

}  // namespace stagecraft::costmodel
