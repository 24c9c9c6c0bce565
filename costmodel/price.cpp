#include "costmodel/price.h"

#include "costmodel/shape.h"

namespace stagecraft::costmodel {

bool priced_by_shape(const ClusterSpec& c) { return c.gpu_sms > 0; }

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
    const double rate = c.gpu_peak_flops_per_s * c.achieved_efficiency;
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
  LayerTimes out;
  out.attn_f_s = block_s(w.attn_f, w, c, k, notes);
  out.attn_i_s = block_s(w.attn_i, w, c, k, notes);
  out.attn_w_s = block_s(w.attn_w, w, c, k, notes);
  out.mlp_f_s = block_s(w.mlp_f, w, c, k, notes);
  out.mlp_i_s = block_s(w.mlp_i, w, c, k, notes);
  out.mlp_w_s = block_s(w.mlp_w, w, c, k, notes);
  if (!w.moe_f.gemms.empty()) {
    out.moe_f_s = block_s(w.moe_f, w, c, k, notes);
    out.moe_i_s = block_s(w.moe_i, w, c, k, notes);
    out.moe_w_s = block_s(w.moe_w, w, c, k, notes);
  }
  out.head_f_s = block_s(w.head_f, w, c, k, notes);
  out.head_i_s = block_s(w.head_i, w, c, k, notes);
  out.head_w_s = block_s(w.head_w, w, c, k, notes);
  return out;
}

}  // namespace stagecraft::costmodel
