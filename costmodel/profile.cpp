#include "costmodel/profile.h"
#include "schedules/json_read.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "costmodel/flops.h"
#include "costmodel/memory.h"
#include "stats/stats.h"
#include "schedules/error.h"

namespace stagecraft::costmodel {

namespace {
// The version of the format this build reads and writes: a profile of another version, or of
// none, may mean other fields, so it is refused rather than read as this one.
constexpr int kProfileVersion = 1;
}  // namespace

Measurement measurement_of(const std::vector<double>& times_s) {
  Measurement m;
  m.median_s = stats::median(times_s);
  m.min_s = *std::min_element(times_s.begin(), times_s.end());
  m.max_s = *std::max_element(times_s.begin(), times_s.end());
  m.runs = static_cast<int>(times_s.size());
  return m;
}
namespace {

nlohmann::json meas_json(const Measurement& m) {
  return {{"median_s", m.median_s}, {"min_s", m.min_s}, {"max_s", m.max_s}, {"runs", m.runs}};
}

Measurement meas_from(const nlohmann::json& j, const std::string& where) {
  Measurement m;
  if (!j.is_object()) throw InputError("profile: " + where + " must be an object with median_s, min_s, max_s, runs");
  try {
    m.median_s = j.at("median_s").get<double>();
    m.min_s = j.value("min_s", m.median_s);
    m.max_s = j.value("max_s", m.median_s);
    m.runs = schedules::json_int_or(j, "runs", 1, "profile: " + where);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("profile: " + where + ": " + e.what());
  }
  if (!(m.median_s >= 0)) throw InputError("profile: " + where + ".median_s = " + std::to_string(m.median_s) + " (must be >= 0)");
  return m;
}

ModelSpec spec_of(const LayerProfile& l) {
  ModelSpec m;
  m.name = "profiled";
  m.kind = parse_kind(l.model_kind);
  m.attention_kernel = parse_attention_kernel(l.attention_kernel, "profile layer attention_kernel");
  // The bytes an activation had where the layer was measured: formulas scale from them.
  m.bytes_per_activation = l.precision == "bf16" ? 2 : 4;
  m.dropout = false;  // the runtime's layers, which the profiler measures, have none
  m.num_layers = 1;
  m.hidden_size = l.hidden_size;
  m.num_heads = l.num_heads;
  m.num_kv_heads = l.num_kv_heads;
  m.ffn_hidden_size = l.ffn_hidden_size;
  m.seq_length = l.seq_length;
  m.vocab_size = std::max(1, l.vocab_size);
  return m;
}

// The quantity times scale with: FLOPs per tp rank for layers and the head, elements for the
// embedding (a lookup).
double work(const std::string& kind, const ModelSpec& m, int b, int t) {
  if (kind == "transformer") return flops::layer_forward_flops(m, b) / t;
  if (kind == "head") return flops::head_forward_flops(m, b) / t;
  return static_cast<double>(b) * m.seq_length * m.hidden_size;
}

LayerCost from_entry(const LayerProfile& l) {
  LayerCost c;
  c.f_s = l.forward.median_s;
  c.b_s = l.backward.median_s;
  c.i_s = l.backward_input.median_s;
  c.w_s = l.backward_weight.median_s;
  c.r_s = l.recompute.median_s;
  c.activation_bytes = l.activation_bytes;
  c.checkpoint_bytes = l.checkpoint_bytes;
  c.backward_working_bytes = l.backward_working_bytes;
  c.selective_activation_bytes = l.selective_activation_bytes;
  c.selective_backward_working_bytes = l.selective_backward_working_bytes;
  c.weight_kept_bytes = l.weight_kept_bytes;
  return c;
}

LayerCost blend(const LayerCost& a, const LayerCost& b, double w) {  // (1-w) a + w b
  auto mix = [w](double x, double y) { return (1 - w) * x + w * y; };
  LayerCost c;
  c.f_s = mix(a.f_s, b.f_s);
  c.b_s = mix(a.b_s, b.b_s);
  c.i_s = mix(a.i_s, b.i_s);
  c.w_s = mix(a.w_s, b.w_s);
  c.r_s = mix(a.r_s, b.r_s);
  return c;
}

LayerCost scaled(const LayerCost& a, double k) {
  LayerCost c = a;
  c.f_s *= k;
  c.b_s *= k;
  c.i_s *= k;
  c.w_s *= k;
  c.r_s *= k;
  return c;
}

std::string shape(const LayerProfile& l) {
  std::ostringstream o;
  o << l.kind << " h=" << l.hidden_size << " a=" << l.num_heads << " s=" << l.seq_length << " b=" << l.microbatch_size
    << " tp=" << l.tp;
  return o.str();
}

}  // namespace

nlohmann::json to_json(const Profile& p) {
  nlohmann::json layers = nlohmann::json::array(), colls = nlohmann::json::array();
  for (const auto& l : p.layers)
    layers.push_back({{"kind", l.kind}, {"model_kind", l.model_kind}, {"hidden_size", l.hidden_size},
                      {"num_heads", l.num_heads}, {"ffn_hidden_size", l.ffn_hidden_size}, {"seq_length", l.seq_length},
                      {"vocab_size", l.vocab_size}, {"microbatch_size", l.microbatch_size}, {"tp", l.tp},
                      {"forward", meas_json(l.forward)}, {"backward", meas_json(l.backward)},
                      {"backward_input", meas_json(l.backward_input)}, {"backward_weight", meas_json(l.backward_weight)},
                      {"recompute", meas_json(l.recompute)}, {"activation_bytes", l.activation_bytes},
                      {"checkpoint_bytes", l.checkpoint_bytes}, {"backward_working_bytes", l.backward_working_bytes}});
  for (size_t i = 0; i < p.layers.size(); ++i)
    if (p.layers[i].precision != "fp32") layers[i]["precision"] = p.layers[i].precision;
  for (size_t i = 0; i < p.layers.size(); ++i)
    if (p.layers[i].attention_kernel != "materialized") layers[i]["attention_kernel"] = p.layers[i].attention_kernel;
  for (size_t i = 0; i < p.layers.size(); ++i)
    if (p.layers[i].num_kv_heads > 0) layers[i]["num_kv_heads"] = p.layers[i].num_kv_heads;
  for (size_t i = 0; i < p.layers.size(); ++i)
    if (p.layers[i].selective_activation_bytes > 0) {
      layers[i]["selective_activation_bytes"] = p.layers[i].selective_activation_bytes;
      layers[i]["selective_backward_working_bytes"] = p.layers[i].selective_backward_working_bytes;
    }
  for (size_t i = 0; i < p.layers.size(); ++i)
    if (p.layers[i].weight_kept_bytes > 0) layers[i]["weight_kept_bytes"] = p.layers[i].weight_kept_bytes;
  for (const auto& c : p.collectives)
    colls.push_back({{"op", c.op}, {"ranks", c.ranks}, {"bytes", c.bytes}, {"time", meas_json(c.time)},
                     {"algbw_Bps", c.algbw_Bps}, {"busbw_Bps", c.busbw_Bps}});
  return {{"format", "stagecraft-profile"}, {"version", kProfileVersion}, {"device", p.device}, {"layers", layers},
          {"collectives", colls}, {"optimizer_s_per_param", p.optimizer_s_per_param}};
}

namespace {
Profile profile_fields(const nlohmann::json& j);

void check_profile_version(const nlohmann::json& j) {
  const std::string allowed = "allowed: " + std::to_string(kProfileVersion) +
                              ", the version `stagecraft profile` writes; profile this machine again to update the file";
  if (!j.contains("version")) throw InputError("profile: version = (missing) is invalid (" + allowed + ")");
  const nlohmann::json& v = j.at("version");
  if (!v.is_number_integer() || v.get<long long>() != kProfileVersion)
    throw InputError("profile: version = " + v.dump() + " is invalid (" + allowed + ")");
}
}  // namespace

// A field of the wrong JSON type (e.g. "format": 5) is bad input like any other: InputError,
// not nlohmann's type_error (found by fuzz_profile_json's long run).
void check_precision_name(const std::string& value, const std::string& what) {
  if (value != "fp32" && value != "bf16") throw InputError(what + " = '" + value + "' is invalid (allowed: fp32, bf16)");
}

Profile profile_from_json(const nlohmann::json& j) {
  try {
    return profile_fields(j);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("profile: a field has the wrong type or value: ") + e.what());
  }
}

namespace {
Profile profile_fields(const nlohmann::json& j) {
  if (!j.is_object() || j.value("format", std::string()) != "stagecraft-profile")
    throw InputError("profile: field 'format' must be \"stagecraft-profile\"");
  check_profile_version(j);
  Profile p;
  p.device = j.value("device", nlohmann::json::object());
  p.optimizer_s_per_param = j.value("optimizer_s_per_param", 0.0);
  if (!j.contains("layers") || !j["layers"].is_array()) throw InputError("profile: field 'layers' (an array) is missing");
  for (size_t i = 0; i < j["layers"].size(); ++i) {
    const auto& e = j["layers"][i];
    std::string w = "layers[" + std::to_string(i) + "]";
    LayerProfile l;
    try {
      l.kind = e.at("kind").get<std::string>();
      l.model_kind = e.value("model_kind", std::string("gpt"));
      l.attention_kernel = e.value("attention_kernel", std::string("materialized"));
      l.precision = e.value("precision", std::string("fp32"));
      check_precision_name(l.precision, "profile: layers[" + std::to_string(i) + "].precision");
      const std::string lw = "profile: layers[" + std::to_string(i) + "]";
      l.hidden_size = schedules::json_int(e.at("hidden_size"), lw + ".hidden_size");
      l.num_heads = schedules::json_int_or(e, "num_heads", 1, lw);
      l.num_kv_heads = schedules::json_int_or(e, "num_kv_heads", 0, lw);
      if (l.num_kv_heads < 0 || (l.num_kv_heads > 0 && l.num_heads % l.num_kv_heads != 0))
        throw InputError(lw + ".num_kv_heads = " + std::to_string(l.num_kv_heads) + " is invalid (must divide num_heads = " +
                         std::to_string(l.num_heads) + ", or be 0)");
      l.ffn_hidden_size = e.contains("ffn_hidden_size") ? schedules::json_int(e.at("ffn_hidden_size"), lw + ".ffn_hidden_size")
                                                        : 4 * l.hidden_size;
      l.seq_length = schedules::json_int(e.at("seq_length"), lw + ".seq_length");
      l.vocab_size = schedules::json_int_or(e, "vocab_size", 0, lw);
      l.microbatch_size = schedules::json_int(e.at("microbatch_size"), lw + ".microbatch_size");
      l.tp = schedules::json_int_or(e, "tp", 1, lw);
      l.activation_bytes = e.value("activation_bytes", 0.0);
      l.checkpoint_bytes = e.value("checkpoint_bytes", 0.0);
      l.backward_working_bytes = e.value("backward_working_bytes", 0.0);
      l.selective_activation_bytes = e.value("selective_activation_bytes", 0.0);
      l.selective_backward_working_bytes = e.value("selective_backward_working_bytes", 0.0);
      l.weight_kept_bytes = e.value("weight_kept_bytes", 0.0);
    } catch (const nlohmann::json::exception& ex) {
      throw InputError("profile: " + w + ": " + ex.what());
    }
    if (l.kind != "transformer" && l.kind != "embedding" && l.kind != "head")
      throw InputError("profile: " + w + ".kind = \"" + l.kind + "\" (allowed: transformer, embedding, head)");
    if (l.hidden_size < 1 || l.seq_length < 1 || l.microbatch_size < 1 || l.tp < 1)
      throw InputError("profile: " + w + ": hidden_size, seq_length, microbatch_size and tp must be at least 1");
    l.forward = meas_from(e.value("forward", nlohmann::json()), w + ".forward");
    l.backward = meas_from(e.value("backward", nlohmann::json()), w + ".backward");
    l.backward_input = meas_from(e.value("backward_input", nlohmann::json()), w + ".backward_input");
    l.backward_weight = meas_from(e.value("backward_weight", nlohmann::json()), w + ".backward_weight");
    l.recompute = meas_from(e.value("recompute", nlohmann::json()), w + ".recompute");
    p.layers.push_back(l);
  }
  for (size_t i = 0; i < j.value("collectives", nlohmann::json::array()).size(); ++i) {
    const auto& e = j["collectives"][i];
    std::string w = "collectives[" + std::to_string(i) + "]";
    CollectiveProfile c;
    try {
      c.op = e.at("op").get<std::string>();
      c.ranks = schedules::json_int(e.at("ranks"), "profile: " + w + ".ranks");
      c.bytes = e.at("bytes").get<double>();
      c.algbw_Bps = e.value("algbw_Bps", 0.0);
      c.busbw_Bps = e.value("busbw_Bps", 0.0);
    } catch (const nlohmann::json::exception& ex) {
      throw InputError("profile: " + w + ": " + ex.what());
    }
    c.time = meas_from(e.value("time", nlohmann::json()), w + ".time");
    p.collectives.push_back(c);
  }
  return p;
}
}  // namespace

Profile load_profile(const std::string& path) {
  Profile p = profile_from_json(schedules::read_json_file(path, "profile file"));
  p.source = path;
  return p;
}

LayerCost profiled_layer(const Profile& p, const std::string& kind, const ModelSpec& m, int b, int tp) {
  // Candidates: same kind, model kind and tp degree if any were measured at that tp, else any tp.
  std::vector<const LayerProfile*> cand;
  // A transformer layer's memory depends on its attention kernel; the ends' do not.
  const std::string kernel(attention_kernel_name(m.attention_kernel));
  auto same_model = [&](const LayerProfile& l) {
    return l.kind == kind && l.model_kind == kind_name(m.kind) && (kind != "transformer" || l.attention_kernel == kernel);
  };
  for (const auto& l : p.layers)
    if (same_model(l) && l.tp == tp) cand.push_back(&l);
  bool other_tp = cand.empty();
  if (other_tp)
    for (const auto& l : p.layers)
      if (same_model(l)) cand.push_back(&l);
  // The model's precision (4-byte activations: fp32; narrower: bf16) where the profile measured it;
  // else any, its bytes scaled by the formulas from the measured precision.
  const std::string precision = m.bytes_per_activation >= 4 ? "fp32" : "bf16";
  if (std::any_of(cand.begin(), cand.end(), [&](const LayerProfile* l) { return l->precision == precision; }))
    cand.erase(std::remove_if(cand.begin(), cand.end(), [&](const LayerProfile* l) { return l->precision != precision; }), cand.end());
  if (cand.empty())
    throw InputError("profile " + p.source + " has no " + kind + " layer of a " + std::string(kind_name(m.kind)) + " model" +
                     (kind == "transformer" ? " with attention_kernel " + kernel : std::string()) +
                     "; profile one (stagecraft profile) or drop --profile");
  double q = work(kind, m, b, tp);
  auto w_of = [&](const LayerProfile* l) { return work(kind, spec_of(*l), l->microbatch_size, l->tp); };
  std::sort(cand.begin(), cand.end(), [&](auto* a, auto* c) { return w_of(a) < w_of(c); });
  // Activation bytes: the nearest measurement, scaled by the analytic model's ratio.
  auto bytes_from = [&](const LayerProfile* l, LayerCost& c) {
    ModelSpec e = spec_of(*l);
    double ratio = kind == "transformer"
                       ? memory::layer_activation_bytes(m, b, tp) / memory::layer_activation_bytes(e, l->microbatch_size, l->tp)
                       : q / w_of(l);
    double cratio = kind == "transformer" ? memory::layer_checkpoint_bytes(m, b) / memory::layer_checkpoint_bytes(e, l->microbatch_size)
                                          : ratio;
    c.activation_bytes = l->activation_bytes * ratio;
    c.checkpoint_bytes = l->checkpoint_bytes * cratio;
    // The ratio of the layer's (or the head's) analytic formula between the asked shape and the
    // measured one; the embedding's by FLOPs.
    using Formula = double (*)(const ModelSpec&, int, int, bool);
    auto formula_ratio = [&](Formula layer_f, Formula head_f) {
      if (kind == "transformer") return layer_f(m, b, tp, false) / layer_f(e, l->microbatch_size, l->tp, false);
      if (kind == "head") return head_f(m, b, tp, false) / head_f(e, l->microbatch_size, l->tp, false);
      return ratio;
    };
    const double wratio = formula_ratio([](const ModelSpec& x, int bb, int t, bool sp) { return memory::layer_backward_working_bytes(x, bb, t, sp); },
                                        memory::head_backward_working_bytes);
    c.backward_working_bytes = l->backward_working_bytes * wratio;
    c.weight_kept_bytes = l->weight_kept_bytes *
                          formula_ratio([](const ModelSpec& x, int bb, int t, bool sp) { return memory::layer_weight_kept_bytes(x, bb, t, sp); },
                                        memory::head_weight_kept_bytes);
    if (kind == "transformer") {  // selective: the same scaling by its own formula, the core's share at the measured ratio
      c.selective_activation_bytes = l->selective_activation_bytes * memory::layer_activation_selective_bytes(m, b, tp) /
                                     memory::layer_activation_selective_bytes(e, l->microbatch_size, l->tp);
      c.selective_backward_working_bytes = l->selective_backward_working_bytes * wratio;
    }
  };
  for (const auto* l : cand)
    if (std::fabs(w_of(l) - q) <= 1e-9 * q && l->hidden_size == m.hidden_size && l->seq_length == m.seq_length &&
        l->microbatch_size == b && l->tp == tp && l->precision == precision && !m.dropout) {
      LayerCost c = from_entry(*l);
      c.activation_bytes = l->activation_bytes;
      c.checkpoint_bytes = l->checkpoint_bytes;
      c.backward_working_bytes = l->backward_working_bytes;
      c.selective_activation_bytes = l->selective_activation_bytes;
      c.selective_backward_working_bytes = l->selective_backward_working_bytes;
      c.weight_kept_bytes = l->weight_kept_bytes;
      c.note = "measured " + shape(*l);
      return c;
    }
  LayerCost c;
  const LayerProfile* nearest = cand.front();
  if (q < w_of(cand.front()) || q > w_of(cand.back()) || cand.size() == 1) {
    nearest = q < w_of(cand.front()) ? cand.front() : cand.back();
    c = scaled(from_entry(*nearest), q / w_of(nearest));
    c.extrapolated = true;
    c.note = "extrapolated from " + shape(*nearest) + " by FLOPs (x" + std::to_string(q / w_of(nearest)) + ")";
  } else {
    size_t hi = 1;
    while (hi < cand.size() && w_of(cand[hi]) < q) ++hi;
    const LayerProfile *a = cand[hi - 1], *z = cand[hi];
    double span = w_of(z) - w_of(a);
    double w = span > 0 ? (q - w_of(a)) / span : 0;
    c = blend(from_entry(*a), from_entry(*z), w);
    nearest = w < 0.5 ? a : z;
    c.note = "interpolated in FLOPs between " + shape(*a) + " and " + shape(*z);
  }
  if (other_tp) {
    c.extrapolated = true;
    c.note += "; no measurement at tp=" + std::to_string(tp);
  }
  bytes_from(nearest, c);
  return c;
}

CollectiveFit fit_collective(const Profile& p, const std::string& op, int ranks) {
  CollectiveFit f;
  std::vector<std::pair<double, double>> pts;  // (bytes, median time)
  for (const auto& c : p.collectives)
    if (c.op == op && c.ranks == ranks && c.time.median_s > 0) pts.emplace_back(c.bytes, c.time.median_s);
  f.points = static_cast<int>(pts.size());
  if (pts.empty()) return f;
  f.min_bytes = f.max_bytes = pts.front().first;
  for (const auto& [b, t] : pts) f.min_bytes = std::min(f.min_bytes, b), f.max_bytes = std::max(f.max_bytes, b);
  // Weighted least squares, weight 1/t^2: minimise sum ((alpha + beta b - t) / t)^2.
  double sw = 0, sb = 0, sbb = 0, st = 0, sbt = 0;
  for (const auto& [b, t] : pts) {
    const double w = 1 / (t * t);
    sw += w, sb += w * b, sbb += w * b * b, st += w * t, sbt += w * b * t;
  }
  const double det = sw * sbb - sb * sb;
  if (pts.size() >= 2 && det > 0) {
    f.alpha_s = (st * sbb - sb * sbt) / det;
    f.beta_s_per_byte = (sw * sbt - sb * st) / det;
  }
  if (pts.size() < 2 || det <= 0 || f.beta_s_per_byte < 0) {  // one size, or time falling with size: a constant
    f.beta_s_per_byte = 0;
    f.alpha_s = st / sw;
  } else if (f.alpha_s < 0) {  // a line through the origin
    f.alpha_s = 0;
    f.beta_s_per_byte = sbt / sbb;
  }
  return f;
}

double profiled_collective_s(const Profile& p, const std::string& op, int ranks, double bytes, bool* extrapolated) {
  if (op == "p2p") {  // a link: the fitted line
    CollectiveFit f = fit_collective(p, op, ranks);
    if (f.points == 0) return -1;
    if (extrapolated) *extrapolated = bytes < f.min_bytes || bytes > f.max_bytes;
    return f.at(bytes);
  }
  // A collective: its measured curve, joined point to point (algorithms switch with size).
  std::vector<const CollectiveProfile*> cand;
  for (const auto& c : p.collectives)
    if (c.op == op && c.ranks == ranks) cand.push_back(&c);
  if (cand.empty()) return -1;
  std::sort(cand.begin(), cand.end(), [](auto* a, auto* b) { return a->bytes < b->bytes; });
  if (extrapolated) *extrapolated = bytes < cand.front()->bytes || bytes > cand.back()->bytes;
  if (bytes <= cand.front()->bytes) return cand.front()->time.median_s;  // latency-bound below the smallest size
  if (bytes >= cand.back()->bytes) return cand.back()->time.median_s * bytes / cand.back()->bytes;
  size_t hi = 1;
  while (cand[hi]->bytes < bytes) ++hi;
  const auto *a = cand[hi - 1], *z = cand[hi];
  double w = (bytes - a->bytes) / (z->bytes - a->bytes);
  return (1 - w) * a->time.median_s + w * z->time.median_s;
}

ClusterSpec calibrated_cluster(const ClusterSpec& c, const Profile& p, std::vector<std::string>* notes) {
  CollectiveFit f = fit_collective(p, "p2p", 2);
  if (f.points < 2 || f.beta_s_per_byte <= 0) return c;
  ClusterSpec k = c;
  k.intra_node_latency_s = f.alpha_s;
  k.intra_node_bandwidth_Bps = 1 / f.beta_s_per_byte;
  k.intra_node_bus_efficiency = 1;  // measured: already what a transfer achieves
  if (notes) {
    std::ostringstream o;
    o << "intra-node link from the measured p2p (" << f.points << " sizes): latency " << f.alpha_s * 1e6 << " us, "
      << k.intra_node_bandwidth_Bps / 1e9 << " GB/s";
    notes->push_back(o.str());
  }
  return k;
}

}  // namespace stagecraft::costmodel
