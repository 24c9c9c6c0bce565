// Hugging Face config.json as a model. Field names as transformers' configuration classes define
// them (LlamaConfig, Qwen2Config, Qwen3Config, Qwen2MoeConfig, Qwen3MoeConfig, MixtralConfig,
// DeepseekV3Config, GptOssConfig, GPT2Config, GPTNeoXConfig; huggingface/transformers,
// src/transformers/models/<name>/configuration_<name>.py).
#include <algorithm>
#include <cmath>

#include "configs/flag_reader.h"
#include "configs/import.h"
#include "schedules/error.h"

namespace stagecraft::configs {
namespace {

using costmodel::ModelSpec;

struct HfReader {
  const nlohmann::json& j;
  ImportReport& r;
  std::string where;
  std::vector<std::string> read;

  bool has(const std::string& k) const { return j.contains(k) && !j[k].is_null(); }
  std::optional<double> num(const std::string& k, const std::string& note) {
    read.push_back(k);
    if (!has(k)) return std::nullopt;
    if (!j[k].is_number()) throw InputError(where + ": " + k + " = " + json_text(j[k]) + " is invalid (allowed: a number)");
    r.map(k, json_text(j[k]), note);
    return j[k].get<double>();
  }
  std::optional<int> integer(const std::string& k, const std::string& note) {
    const std::optional<double> v = num(k, note);
    if (v && (*v < 0 || *v > 1e9 || *v != std::floor(*v))) throw InputError(where + ": " + k + " = " + json_text(j[k]) + " is invalid (allowed: a whole number)");
    return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
  }
  int required(const std::string& k, const std::string& note) {
    if (const std::optional<int> v = integer(k, note)) return *v;
    throw InputError(where + ": " + k + " is missing (required for the model's " + note + ")");
  }
  void unmodelled(const std::string& k, const std::string& note) {
    read.push_back(k);
    if (has(k)) r.unmodelled(k, json_text(j[k]), note);
  }
};

// Architectures the cost model knows: the model_type names and the kind each maps to.
costmodel::ModelKind kind_of(const std::string& type, const std::string& where) {
  static const std::vector<std::string> llama = {"llama", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "mixtral", "mistral", "deepseek_v3", "gpt_oss"};
  if (std::find(llama.begin(), llama.end(), type) != llama.end()) return costmodel::ModelKind::Llama;
  if (type == "gpt2" || type == "gpt_neox") return costmodel::ModelKind::Gpt;
  throw InputError(where + ": model_type = '" + type +
                   "' is not known (allowed: llama, mistral, qwen2, qwen3, qwen2_moe, qwen3_moe, mixtral, deepseek_v3, gpt_oss, gpt2, gpt_neox)");
}

void read_dims(HfReader& h, ModelSpec& m, bool gpt2) {
  m.num_layers = h.required(gpt2 ? "n_layer" : "num_hidden_layers", "num_layers");
  m.hidden_size = h.required(gpt2 ? "n_embd" : "hidden_size", "hidden_size");
  m.num_heads = h.required(gpt2 ? "n_head" : "num_attention_heads", "num_heads");
  m.vocab_size = h.required("vocab_size", "vocab_size");
  if (gpt2) {
    const std::optional<int> inner = h.integer("n_inner", "ffn_hidden_size");
    m.ffn_hidden_size = inner.value_or(4 * m.hidden_size);
    if (!inner) h.r.assume("n_inner", "null", "ffn_hidden_size 4h (GPT2Config's default)");
  } else {
    m.ffn_hidden_size = h.required("intermediate_size", "ffn_hidden_size");
  }
  if (const std::optional<int> g = h.integer("num_key_value_heads", "num_kv_heads")) m.num_kv_heads = *g == m.num_heads ? 0 : *g;
  if (const std::optional<int> d = h.integer("head_dim", "head_dim")) m.head_dim = *d;
  const std::string pos = gpt2 ? "n_positions" : "max_position_embeddings";
  const std::optional<int> s = h.integer(pos, "seq_length (the longest the model takes; --seq-length sets the training one)");
  m.seq_length = s.value_or(2048);
  if (!s) h.r.assume(pos, "2048", "seq_length 2048");
}

void read_experts(HfReader& h, ModelSpec& m) {
  std::optional<int> e = h.integer("num_local_experts", "num_experts");
  if (!e) e = h.integer("num_experts", "num_experts");
  if (!e) e = h.integer("n_routed_experts", "num_experts");
  if (!e || *e == 0) return;
  m.num_experts = *e;
  std::optional<int> k = h.integer("num_experts_per_tok", "experts_per_token");
  if (!k) k = h.integer("experts_per_token", "experts_per_token");
  if (!k) throw InputError(h.where + ": num_experts_per_tok is missing (required with experts)");
  m.experts_per_token = *k;
  const std::optional<int> fe = h.integer("moe_intermediate_size", "expert_ffn_hidden_size");
  m.expert_ffn_hidden_size = fe.value_or(m.ffn_hidden_size);
  if (m.expert_ffn_hidden_size < 1 || m.experts_per_token < 1)
    throw InputError(h.where + ": moe_intermediate_size = " + std::to_string(m.expert_ffn_hidden_size) + ", num_experts_per_tok = " +
                     std::to_string(m.experts_per_token) + " (allowed: at least 1 each)");
  if (const std::optional<int> sh = h.integer("n_shared_experts", "num_shared_experts")) m.num_shared_experts = *sh;
  if (const std::optional<int> shw = h.integer("shared_expert_intermediate_size", "num_shared_experts = this / expert width")) {
    if (*shw % m.expert_ffn_hidden_size != 0)
      throw InputError(h.where + ": shared_expert_intermediate_size = " + std::to_string(*shw) + " is not a multiple of moe_intermediate_size = " +
                       std::to_string(m.expert_ffn_hidden_size) + " (not modelled: shared experts of another width)");
    m.num_shared_experts = *shw / m.expert_ffn_hidden_size;
  }
  if (const std::optional<int> d = h.integer("first_k_dense_replace", "dense_layers")) m.dense_layers = *d;
  if (const std::optional<int> t = h.integer("topk_group", "moe_node_limit (one group per node assumed)")) m.moe_node_limit = *t;
  h.unmodelled("n_group", "router groups taken as nodes (moe_node_limit from topk_group)");
  if (const std::optional<int> f = h.integer("moe_layer_freq", "every layer after the dense ones an MoE layer"); f && *f != 1)
    throw InputError(h.where + ": moe_layer_freq = " + std::to_string(*f) + " is not modelled (allowed: 1, MoE layers after the dense ones)");
  // Qwen2/3-MoE: layer i has experts where (i + 1) % decoder_sparse_step == 0 (Qwen2MoeDecoderLayer).
  if (const std::optional<int> step = h.integer("decoder_sparse_step", "moe_layer_pattern [0 x (step - 1), 1]"); step && *step > 1) {
    m.moe_layer_pattern.assign(static_cast<size_t>(*step - 1), 0);
    m.moe_layer_pattern.push_back(1);
  }
  h.read.push_back("mlp_only_layers");
  if (h.has("mlp_only_layers") && !h.j["mlp_only_layers"].empty())
    throw InputError(h.where + ": mlp_only_layers = " + json_text(h.j["mlp_only_layers"]) + " is not modelled (allowed: [])");
  if (h.has("mlp_only_layers")) h.r.map("mlp_only_layers", "[]", "every layer MoE (with the step)");
}

void read_mla(HfReader& h, ModelSpec& m) {
  const std::optional<int> kv = h.integer("kv_lora_rank", "kv_lora_rank");
  if (!kv) return;
  m.kv_lora_rank = *kv;
  m.q_lora_rank = h.integer("q_lora_rank", "q_lora_rank").value_or(0);
  m.head_dim = h.required("qk_nope_head_dim", "head_dim");
  m.qk_rope_head_dim = h.required("qk_rope_head_dim", "qk_rope_head_dim");
  m.v_head_dim = h.required("v_head_dim", "v_head_dim");
  if (m.v_head_dim == m.head_dim) m.v_head_dim = 0;
  m.num_kv_heads = 0;
}

// Sliding-window attention: sliding_window with layer_types (gpt-oss: "sliding_attention" and
// "full_attention" alternating) as the windowed layers' pattern; Qwen's use_sliding_window false
// turns the window off.
void read_window(HfReader& h, ModelSpec& m) {
  h.read.push_back("use_sliding_window");
  h.read.push_back("layer_types");
  const bool off = h.has("use_sliding_window") && h.j["use_sliding_window"].is_boolean() && !h.j["use_sliding_window"].get<bool>();
  const std::optional<int> w = h.integer("sliding_window", off ? "unused (use_sliding_window false)" : "sliding_window");
  if (!w || *w == 0 || off) return;
  m.sliding_window = *w;
  if (!h.has("layer_types") || !h.j["layer_types"].is_array()) return;
  std::vector<int> layers;
  for (const nlohmann::json& t : h.j["layer_types"]) layers.push_back(t.is_string() && t.get<std::string>() == "sliding_attention" ? 1 : 0);
  h.r.map("layer_types", std::to_string(layers.size()) + " entries", "sliding_window_pattern");
  for (size_t period = 1; period <= layers.size(); ++period) {
    bool repeats = true;
    for (size_t k = period; k < layers.size() && repeats; ++k) repeats = layers[k] == layers[k % period];
    if (repeats) {
      m.sliding_window_pattern.assign(layers.begin(), layers.begin() + static_cast<long>(period));
      break;
    }
  }
  if (std::all_of(m.sliding_window_pattern.begin(), m.sliding_window_pattern.end(), [](int x) { return x == 1; }))
    m.sliding_window_pattern.clear();
}

// gpt-oss's clamp of the gated MLP's halves (swiglu_limit) as activation_clamp.
void read_clamp(HfReader& h, ModelSpec& m) {
  if (const std::optional<double> c = h.num("swiglu_limit", "activation_clamp")) m.activation_clamp = *c;
}

// YaRN's rope_scaling as rope_mscale, the concentration factor on RoPE's cos and sin:
// 0.1 ln(factor) + 1, or the ratio of that with mscale and with mscale_all_dim where both are
// given (transformers' _compute_yarn_parameters; Megatron-Core yarn_rotary_pos_embedding.py).
void read_rope(HfReader& h, ModelSpec& m) {
  h.read.push_back("rope_scaling");
  if (!h.has("rope_scaling") || !h.j["rope_scaling"].is_object()) return;
  const nlohmann::json& r = h.j["rope_scaling"];
  const std::string type = r.value("rope_type", r.value("type", std::string()));
  if (type != "yarn") {
    h.r.unmodelled("rope_scaling", json_text(r), "RoPE priced as fused; only YaRN's scaling changes that");
    return;
  }
  const auto num = [&](const char* k) { return r.contains(k) && r[k].is_number() ? std::optional<double>(r[k].get<double>()) : std::nullopt; };
  const double factor = num("factor").value_or(1);
  const auto g = [&](double x) { return factor <= 1 ? 1.0 : 0.1 * x * std::log(factor) + 1; };
  const std::optional<double> ms = num("mscale"), all = num("mscale_all_dim");
  m.rope_mscale = ms && all ? g(*ms) / g(*all) : g(1);
  h.r.map("rope_scaling", json_text(r), "rope_mscale " + std::to_string(m.rope_mscale) + (m.rope_mscale != 1 ? " (RoPE unfused)" : ""));
}

void read_precision(HfReader& h, ModelSpec& m) {
  h.read.push_back("torch_dtype");
  h.read.push_back("dtype");
  const std::string key = h.has("torch_dtype") ? "torch_dtype" : "dtype";
  const std::string dt = h.has(key) && h.j[key].is_string() ? h.j[key].get<std::string>() : "";
  if (dt == "float32") {
    m.bytes_per_param = m.bytes_per_activation = 4;
    h.r.map(key, dt, "4-byte weights and activations");
  } else {
    m.bytes_per_param = m.bytes_per_activation = 2;
    m.bytes_per_grad = 4;  // mixed precision as Megatron-LM, torchtitan and DeepSpeed's bf16 train it
    if (dt.empty()) h.r.assume("torch_dtype", "bfloat16", "2-byte weights and activations");
    else h.r.map(key, dt, "2-byte weights and activations, fp32 gradients (mixed-precision training)");
  }
  double p = 0;
  for (const char* k : {"attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop", "embd_pdrop", "attention_probs_dropout_prob", "hidden_dropout_prob"})
    p = std::max(p, h.num(k, "dropout").value_or(0));
  m.dropout = p > 0;
  m.attention_kernel = costmodel::AttentionKernel::Fused;
  h.r.assume("attention kernel", "", "fused (transformers' sdpa or flash attention)");
}

}  // namespace

ModelSpec import_hf_model(const nlohmann::json& j, ImportReport& report, const std::string& where) {
  if (!j.contains("model_type") || !j["model_type"].is_string())
    throw InputError(where + ": model_type is missing (required: a Hugging Face config.json names its architecture)");
  const std::string type = j["model_type"].get<std::string>();
  HfReader h{j, report, where, {"model_type"}};
  ModelSpec m;
  m.kind = kind_of(type, where);
  report.map("model_type", type, std::string("kind ") + std::string(costmodel::kind_name(m.kind)));
  m.name = j.contains("_name_or_path") && j["_name_or_path"].is_string() && !j["_name_or_path"].get<std::string>().empty()
               ? j["_name_or_path"].get<std::string>() : type;
  h.read.push_back("_name_or_path");
  m.source = "imported from " + where + " (Hugging Face config.json)";
  read_dims(h, m, type == "gpt2");
  read_experts(h, m);
  read_mla(h, m);
  read_precision(h, m);
  if (j.contains("tie_word_embeddings") && !j["tie_word_embeddings"].is_boolean())
    throw InputError(where + ": tie_word_embeddings = " + json_text(j["tie_word_embeddings"]) + " is invalid (allowed: true or false)");
  const bool tied = j.value("tie_word_embeddings", type == "gpt2" || type == "gpt_neox");
  h.read.push_back("tie_word_embeddings");
  if (tied != (m.kind == costmodel::ModelKind::Gpt))
    report.unmodelled("tie_word_embeddings", tied ? "true" : "false", std::string("kind ") + std::string(costmodel::kind_name(m.kind)) +
                      (tied ? " counts a separate output matrix" : " counts the head tied to the embedding"));
  if (const std::optional<int> mtp = h.integer("num_nextn_predict_layers", "mtp_layers")) m.mtp_layers = *mtp;
  read_window(h, m);
  read_clamp(h, m);
  if (m.kv_lora_rank == 0) read_rope(h, m);
  if (type == "gpt_oss") {  // its experts carry biases (the released checkpoint's *_bias tensors)
    m.linear_bias = true;
    report.map("model_type", type, "linear_bias (the experts' biases applied outside their products)");
  }
  h.unmodelled("attention_bias", "the kind decides: biases for gpt, none for llama");
  for (const char* k : {"rope_scaling", "max_window_layers"})
    if (std::find(h.read.begin(), h.read.end(), k) == h.read.end()) h.unmodelled(k, "positions and windows as the layer types say");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (std::find(h.read.begin(), h.read.end(), it.key()) == h.read.end()) report.ignore(it.key(), json_text(it.value()));
  costmodel::check(m);
  return m;
}

std::optional<ModelSpec> hf_model_option(const ImportOptions& o, ImportReport& report) {
  if (o.hf_config.empty()) return std::nullopt;
  const std::string text = read_config_text(o.hf_config, "--hf-config");
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw InputError("--hf-config '" + o.hf_config + "' is not a JSON object (truncated?)");
  return import_hf_model(j, report, "--hf-config '" + o.hf_config + "'");
}

}  // namespace stagecraft::configs
