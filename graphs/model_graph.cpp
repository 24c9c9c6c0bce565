#include "graphs/model_graph.h"

#include "costmodel/flops.h"
#include "costmodel/memory.h"
#include "schedules/error.h"

namespace stagecraft::graphs {
namespace {

struct Builder {
  Graph g;
  int add(Node n) {
    g.nodes.push_back(std::move(n));
    return static_cast<int>(g.nodes.size()) - 1;
  }
  int node(const std::string& name, const std::string& kind, std::vector<int> in, std::vector<std::int64_t> shape,
           double params_bytes = 0, double flops = 0, const std::string& tp = "", const std::string& dtype = "fp16") {
    Node n;
    n.name = name;
    n.kind = kind;
    n.inputs = std::move(in);
    n.shape = std::move(shape);
    n.param_bytes = params_bytes;
    n.fwd_flops = flops;
    n.tp = tp;
    n.dtype = dtype;
    return add(std::move(n));
  }
};

}  // namespace

Graph model_graph(const costmodel::ModelSpec& m, int b) {
  namespace fl = costmodel::flops;
  if (costmodel::is_moe(m) || m.head_dim > 0 || m.v_head_dim > 0 || m.kv_lora_rank > 0)
    throw InputError("model graph of '" + m.name + "': " +
                     (costmodel::is_moe(m) ? std::string("mixture-of-experts layers") : std::string("head shapes other than h / a (head_dim, MLA)")) +
                     " are not built as graphs yet (allowed: dense models with h / a per head; estimate and plan price the model itself)");
  const bool llama = m.kind == costmodel::ModelKind::Llama;
  const std::int64_t s = m.seq_length, h = m.hidden_size, f = m.ffn_hidden_size, V = m.vocab_size;
  const std::int64_t kv = static_cast<std::int64_t>(h) * (m.num_kv_heads > 0 ? m.num_kv_heads : m.num_heads) / m.num_heads;
  const double P = m.bytes_per_param;  // bytes of a parameter
  const double bias = llama ? 0 : 1;   // LLaMA has no biases
  const double norm = llama ? 1 : 2;   // RMSNorm: a scale; LayerNorm: scale and shift
  const std::string act = m.bytes_per_activation == 4 ? "fp32" : "fp16";
  Builder B;
  B.g.name = m.name;
  int tokens = B.node("tokens", "input", {}, {b, s}, 0, 0, "", "int64");
  int labels = B.node("labels", "input", {}, {b, s}, 0, 0, "", "int64");
  int attn_mask = B.node("attention_mask", "input", {}, {1, 1, s, s}, 0, 0, "", "bool");
  // What each node's backward keeps (Korthikanti et al., MLSys 2023, Sec. 4.1; costmodel/memory.h):
  // a node's output by default; the dropout masks (1 byte per element) after the embedding and
  // after each block's row-parallel product, whose outputs the residual adds do not keep; the
  // attention core's softmax, its dropout mask and output (5as^2b) with its own output; the
  // loss's fp32 logits with the head.
  const double A = m.bytes_per_activation, bsh = static_cast<double>(b) * s * h;
  const double mask = m.dropout ? bsh : 0;  // (b, s, h) bytes of a dropout mask
  int x = B.node("embedding", "embedding", {tokens}, {b, s, h}, fl::embedding_params(m) * P, 0, "vocab", act);
  B.g.nodes.back().saved_bytes = A * bsh + mask;
  const double attn_matmul = fl::attention_block_matmul_flops(m, b), proj = 2.0 * b * s * h * h;
  for (int l = 0; l < m.num_layers; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    int n1 = B.node(p + "norm1", llama ? "rmsnorm" : "layernorm", {x}, {b, s, h}, norm * h * P, 0, "", act);
    int qkv = B.node(p + "qkv", "linear", {n1}, {b, s, h + 2 * kv}, (h * (h + 2 * kv) + bias * (h + 2 * kv)) * P,
                     attn_matmul - proj, "column", act);
    int core = B.node(p + "attention", "attention", {qkv, attn_mask}, {b, s, h}, 0, fl::layer_attention_forward_flops(m, b), "", act);
    B.g.nodes.back().saved_bytes = A * bsh + costmodel::memory::attention_core_bytes(m, b, 1);  // 5as^2b at 2 bytes, or the fused kernel's
    B.g.nodes.back().heads = m.num_heads;
    B.g.nodes.back().kernel = std::string(costmodel::attention_kernel_name(m.attention_kernel));
    B.g.nodes.back().causal = m.kind != costmodel::ModelKind::Bert;
    B.g.nodes.back().dropout = m.dropout;
    int o = B.node(p + "proj", "linear", {core}, {b, s, h}, (h * h + bias * h) * P, proj, "row", act);
    B.g.nodes.back().saved_bytes = mask;
    int a1 = B.node(p + "add1", "add", {x, o}, {b, s, h}, 0, 0, "", act);
    B.g.nodes.back().dropout = m.dropout;  // Megatron's bias-dropout-add
    int n2 = B.node(p + "norm2", llama ? "rmsnorm" : "layernorm", {a1}, {b, s, h}, norm * h * P, 0, "", act);
    const double up_w = llama ? 2.0 * h * f : h * f + bias * f;  // SwiGLU: gate and up
    const double mlp = fl::mlp_block_forward_flops(m, b), down = 2.0 * b * s * h * f;
    int up = B.node(p + "up", "linear", {n2}, {b, s, llama ? 2 * f : f}, up_w * P, mlp - down, "column", act);
    int a = B.node(p + (llama ? "swiglu" : "gelu"), llama ? "swiglu" : "gelu", {up}, {b, s, f}, 0, 0, "", act);
    int dn = B.node(p + "down", "linear", {a}, {b, s, h}, (f * h + bias * h) * P, down, "row", act);
    B.g.nodes.back().saved_bytes = mask;
    x = B.node(p + "add2", "add", {a1, dn}, {b, s, h}, 0, 0, "", act);
    B.g.nodes.back().dropout = m.dropout;
  }
  int nf = B.node("final_norm", llama ? "rmsnorm" : "layernorm", {x}, {b, s, h}, norm * h * P, 0, "", act);
  Node head;
  head.name = "lm_head";
  head.kind = "linear";
  head.inputs = {nf};
  head.shape = {b, s, V};
  head.dtype = act;
  head.fwd_flops = fl::head_forward_flops(m, b);
  head.tp = "vocab";
  head.saved_bytes = 4.0 * b * s * V;  // (b, s, V) fp32 logits for the cross-entropy
  if (llama) head.param_bytes = static_cast<double>(V) * h * P;
  else head.shares = "embedding";  // GPT and BERT tie the head to the token embedding
  int hd = B.add(head);
  B.node("loss", "loss", {hd, labels}, {1}, 0, 0, "", "fp32");
  return B.g;
}

}  // namespace stagecraft::graphs
