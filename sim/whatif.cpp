// What-ifs: the JSON format, their placement on a plan's GPUs, the seeded draws and the
// summary of iteration times (sim/whatif.h, docs/whatif.md).
#include "sim/whatif.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "schedules/error.h"
#include "sim/simulate.h"

namespace stagecraft::sim {

namespace {

std::string src(const std::string& s) { return s.empty() ? "what-if" : s; }

std::string num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

[[noreturn]] void bad(const std::string& where, const std::string& field, const std::string& value, const std::string& allowed) {
  throw InputError(where + ": " + field + " = " + value + " (" + allowed + ")");
}

void check_keys(const nlohmann::json& j, const std::string& where, const std::string& field, const std::set<std::string>& known) {
  if (!j.is_object()) bad(where, field, j.dump(), "must be an object");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key())) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      bad(where, field + "." + it.key(), it.value().dump(), "unknown field; allowed: " + list);
    }
}

double number(const nlohmann::json& j, const std::string& where, const std::string& field, double lo, double hi, bool lo_open) {
  if (!j.is_number()) bad(where, field, j.dump(), "must be a number");
  const double v = j.get<double>();
  if (!(lo_open ? v > lo : v >= lo) || !(v <= hi))
    bad(where, field, num(v), std::string("allowed: ") + (lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + "]");
  return v;
}

std::uint64_t seed_of(const nlohmann::json& j, const std::string& where, const std::string& field) {
  if (!j.is_number_unsigned()) bad(where, field, j.dump(), "must be an integer >= 0");
  return j.get<std::uint64_t>();
}

int integer(const nlohmann::json& j, const std::string& where, const std::string& field) {
  if (!j.is_number_integer() || j.get<long long>() < 0 || j.get<long long>() > 1LL << 30)
    bad(where, field, j.dump(), "must be an integer >= 0");
  return j.get<int>();
}

SlowGpus slow_from_json(const nlohmann::json& j, const std::string& where, const std::string& field) {
  check_keys(j, where, field, {"rank", "node", "fraction", "seed", "factor"});
  SlowGpus s;
  s.source = where + ": " + field;
  const int scopes = static_cast<int>(j.contains("rank")) + j.contains("node") + j.contains("fraction");
  if (scopes != 1) bad(where, field, j.dump(), "give exactly one of rank, node, fraction");
  if (j.contains("rank")) s.index = integer(j["rank"], where, field + ".rank");
  if (j.contains("node")) s.scope = "node", s.index = integer(j["node"], where, field + ".node");
  if (j.contains("fraction")) s.scope = "fraction", s.fraction = number(j["fraction"], where, field + ".fraction", 0, 1, true);
  if (j.contains("seed")) s.seed = seed_of(j["seed"], where, field + ".seed");
  if (!j.contains("factor")) bad(where, field + ".factor", "missing", "the compute rate factor, (0, 1]");
  s.factor = number(j["factor"], where, field + ".factor", 0, 1, true);
  return s;
}

NicFault nic_from_json(const nlohmann::json& j, const std::string& where, const std::string& field) {
  check_keys(j, where, field, {"node", "nic", "factor"});
  NicFault n;
  n.source = where + ": " + field;
  if (!j.contains("node")) bad(where, field + ".node", "missing", "the node whose NIC differs");
  n.node = integer(j["node"], where, field + ".node");
  if (j.contains("nic")) n.nic = integer(j["nic"], where, field + ".nic");
  if (!j.contains("factor")) bad(where, field + ".factor", "missing", "the bandwidth factor, [0, 1]; 0 = failed");
  n.factor = number(j["factor"], where, field + ".factor", 0, 1, false);
  return n;
}

template <class T, class F>
std::vector<T> list_of(const nlohmann::json& j, const std::string& where, const std::string& field, F one) {
  if (!j.is_array()) bad(where, field, j.dump(), "must be a list");
  std::vector<T> out;
  for (size_t i = 0; i < j.size(); ++i) out.push_back(one(j[i], where, field + "[" + std::to_string(i) + "]"));
  return out;
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform integer in [0, n) by rejection (no modulo bias; the same on every platform).
std::uint64_t below(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t limit = ~0ULL - (~0ULL % n);
  std::uint64_t x;
  do x = rng();
  while (x >= limit);
  return x % n;
}

// `count` distinct GPUs of `gpus`, by a partial Fisher-Yates shuffle.
std::vector<int> pick(int gpus, int count, std::uint64_t seed) {
  std::mt19937_64 rng(splitmix64(seed));
  std::vector<int> all(static_cast<size_t>(gpus));
  for (int g = 0; g < gpus; ++g) all[static_cast<size_t>(g)] = g;
  for (int i = 0; i < count; ++i)
    std::swap(all[static_cast<size_t>(i)], all[static_cast<size_t>(i + static_cast<int>(below(rng, static_cast<std::uint64_t>(gpus - i))))]);
  all.resize(static_cast<size_t>(count));
  return all;
}

}  // namespace

JitterDist parse_jitter_dist(const std::string& s) {
  if (s == "none") return JitterDist::None;
  if (s == "normal") return JitterDist::Normal;
  if (s == "lognormal") return JitterDist::Lognormal;
  throw InputError("jitter distribution = '" + s + "' (allowed: none, normal, lognormal)");
}

std::string jitter_dist_name(JitterDist d) {
  return d == JitterDist::Normal ? "normal" : d == JitterDist::Lognormal ? "lognormal" : "none";
}

WhatIf whatif_from_json(const nlohmann::json& j, const std::string& where) {
  check_keys(j, where, "what-if", {"slow", "nics", "late", "jitter", "iterations"});
  WhatIf w;
  if (j.contains("slow")) w.slow = list_of<SlowGpus>(j["slow"], where, "slow", slow_from_json);
  if (j.contains("nics")) w.nics = list_of<NicFault>(j["nics"], where, "nics", nic_from_json);
  if (j.contains("late"))
    w.late = list_of<LateRank>(j["late"], where, "late", [](const nlohmann::json& x, const std::string& wh, const std::string& f) {
      check_keys(x, wh, f, {"rank", "delay_s"});
      if (!x.contains("rank") || !x.contains("delay_s")) bad(wh, f, x.dump(), "give rank and delay_s");
      return LateRank{integer(x["rank"], wh, f + ".rank"), number(x["delay_s"], wh, f + ".delay_s", 0, 1e6, false), wh + ": " + f};
    });
  if (j.contains("jitter")) {
    const nlohmann::json& x = j["jitter"];
    check_keys(x, where, "jitter", {"distribution", "cv", "seed"});
    if (!x.contains("distribution") || !x["distribution"].is_string())
      bad(where, "jitter.distribution", x.value("distribution", nlohmann::json()).dump(), "allowed: none, normal, lognormal");
    try {
      w.jitter.dist = parse_jitter_dist(x["distribution"].get<std::string>());
    } catch (const InputError& e) {
      throw InputError(where + ": " + e.what());
    }
    if (x.contains("cv")) w.jitter.cv = number(x["cv"], where, "jitter.cv", 0, 1, false);
    if (x.contains("seed")) w.jitter.seed = seed_of(x["seed"], where, "jitter.seed");
  }
  if (j.contains("iterations")) {
    w.iterations = integer(j["iterations"], where, "iterations");
    if (w.iterations < 1 || w.iterations > 100000) bad(where, "iterations", std::to_string(w.iterations), "allowed: [1, 100000]");
  }
  return w;
}

nlohmann::json to_json(const WhatIf& w) {
  nlohmann::json j = nlohmann::json::object();
  for (const SlowGpus& s : w.slow) {
    nlohmann::json x = {{"factor", s.factor}};
    if (s.scope == "fraction") x["fraction"] = s.fraction, x["seed"] = s.seed;
    else x[s.scope] = s.index;
    j["slow"].push_back(x);
  }
  for (const NicFault& n : w.nics) {  // no "nic": every NIC of the node, as the format reads it
    nlohmann::json x = {{"node", n.node}, {"factor", n.factor}};
    if (n.nic >= 0) x["nic"] = n.nic;
    j["nics"].push_back(x);
  }
  for (const LateRank& l : w.late) j["late"].push_back({{"rank", l.rank}, {"delay_s", l.delay_s}});
  if (w.jitter.dist != JitterDist::None)
    j["jitter"] = {{"distribution", jitter_dist_name(w.jitter.dist)}, {"cv", w.jitter.cv}, {"seed", w.jitter.seed}};
  j["iterations"] = w.samples();
  return j;
}

bool Resolved::touches_gpu(int g, int gpus_per_node) const {
  return rate[static_cast<size_t>(g)] != 1 || delay_s[static_cast<size_t>(g)] > 0 || nic_factor.count(g / gpus_per_node) > 0;
}

namespace {

void resolve_slow(const WhatIf& w, int nodes, int gpn, int num_gpus, Resolved& r) {
  for (const SlowGpus& s : w.slow) {
    if (!(s.factor > 0 && s.factor <= 1)) bad(src(s.source), "slow factor", num(s.factor), "allowed: (0, 1]");
    std::vector<int> gpus;
    if (s.scope == "rank") {
      if (s.index < 0 || s.index >= num_gpus)
        bad(src(s.source), "slow rank", std::to_string(s.index), "allowed: [0, " + std::to_string(num_gpus - 1) + "], the plan's GPUs");
      gpus = {s.index};
    } else if (s.scope == "node") {
      if (s.index < 0 || s.index >= nodes)
        bad(src(s.source), "slow node", std::to_string(s.index), "allowed: [0, " + std::to_string(nodes - 1) + "], the plan's nodes");
      for (int g = s.index * gpn; g < std::min(num_gpus, (s.index + 1) * gpn); ++g) gpus.push_back(g);
    } else if (s.scope == "fraction") {
      if (!(s.fraction > 0 && s.fraction <= 1)) bad(src(s.source), "slow fraction", num(s.fraction), "allowed: (0, 1]");
      gpus = pick(num_gpus, std::max(1, static_cast<int>(std::lround(s.fraction * num_gpus))), s.seed);
    } else {
      bad(src(s.source), "slow scope", s.scope, "allowed: rank, node, fraction");
    }
    for (int g : gpus) r.rate[static_cast<size_t>(g)] *= s.factor;
  }
}

void resolve_nics(const WhatIf& w, int nodes, int nics, Resolved& r) {
  for (const NicFault& n : w.nics) {
    if (n.node < 0 || n.node >= nodes)
      bad(src(n.source), "NIC node", std::to_string(n.node), "allowed: [0, " + std::to_string(nodes - 1) + "], the plan's nodes");
    if (n.nic < -1 || n.nic >= nics)
      bad(src(n.source), "NIC of node " + std::to_string(n.node), std::to_string(n.nic),
          "allowed: [0, " + std::to_string(nics - 1) + "] (the cluster's nics_per_node), or every NIC");
    if (!(n.factor >= 0 && n.factor <= 1)) bad(src(n.source), "NIC factor", num(n.factor), "allowed: [0, 1]; 0 = failed");
    if (nodes == 1)  // a NIC carries traffic beyond its node only: a plan inside one node sends none through it
      bad(src(n.source), "NIC node", std::to_string(n.node),
          "the plan's GPUs are all on node 0, and a NIC carries only traffic between nodes, so the what-if would change "
          "nothing; allowed: a plan over two nodes or more (more GPUs, --nodes), or a slow GPU or node instead");
    auto& f = r.nic_factor.try_emplace(n.node, std::vector<double>(static_cast<size_t>(nics), 1.0)).first->second;
    for (int i = 0; i < nics; ++i)
      if (n.nic < 0 || n.nic == i) f[static_cast<size_t>(i)] *= n.factor;
  }
  for (const auto& [node, f] : r.nic_factor)
    if (std::all_of(f.begin(), f.end(), [](double x) { return x <= 0; }))
      throw InputError("what-if: every NIC of node " + std::to_string(node) + " failed (factor 0) and the node has " +
                       std::to_string(nics) + " NIC" + (nics == 1 ? "" : "s") +
                       ": its traffic has no other route (a failed NIC moves to the node's other NICs; give a factor > 0 "
                       "to degrade it instead)");
}

}  // namespace

Resolved resolve(const WhatIf& w, const costmodel::ClusterSpec& c, int num_gpus) {
  const int gpn = std::max(1, c.gpus_per_node), nodes = (num_gpus + gpn - 1) / gpn;
  Resolved r;
  r.rate.assign(static_cast<size_t>(num_gpus), 1.0);
  r.delay_s.assign(static_cast<size_t>(num_gpus), 0.0);
  r.jitter = w.jitter;
  if (!(w.jitter.cv >= 0 && w.jitter.cv <= 1)) bad("what-if", "jitter cv", num(w.jitter.cv), "allowed: [0, 1]");
  resolve_slow(w, nodes, gpn, num_gpus, r);
  resolve_nics(w, nodes, std::max(1, c.nics_per_node), r);
  for (const LateRank& l : w.late) {
    if (l.rank < 0 || l.rank >= num_gpus)
      bad(src(l.source), "late rank", std::to_string(l.rank), "allowed: [0, " + std::to_string(num_gpus - 1) + "], the plan's GPUs");
    if (!(l.delay_s >= 0 && l.delay_s <= 1e6)) bad(src(l.source), "late delay_s", num(l.delay_s), "allowed: [0, 1e6] seconds");
    r.delay_s[static_cast<size_t>(l.rank)] = std::max(r.delay_s[static_cast<size_t>(l.rank)], l.delay_s);
  }
  return r;
}

JitterDraws::JitterDraws(const Jitter& j, std::uint64_t stream) : j_(j), rng_(splitmix64(j.seed ^ splitmix64(stream))) {}

double JitterDraws::uniform() {
  return (static_cast<double>(rng_() >> 11) + 0.5) * 0x1.0p-53;
}

double JitterDraws::next() {
  if (j_.dist == JitterDist::None || j_.cv <= 0) return 1.0;
  auto normal = [&] {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double rad = std::sqrt(-2.0 * std::log(uniform())), ang = 2.0 * M_PI * uniform();
    spare_ = rad * std::sin(ang);
    has_spare_ = true;
    return rad * std::cos(ang);
  };
  if (j_.dist == JitterDist::Lognormal) {
    const double s2 = std::log1p(j_.cv * j_.cv), sigma = std::sqrt(s2);
    return std::exp(-0.5 * s2 + sigma * normal());
  }
  for (;;) {  // normal, mean 1, sd cv, redrawn until positive
    const double x = 1.0 + j_.cv * normal();
    if (x > 0) return x;
  }
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(v.size()));
  const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(v.size()))) - 1;
  return v[i];
}

void summarise_times(const std::vector<double>& all, WhatIfResult& out) {
  out.first_iteration_s = all.empty() ? 0 : all.front();
  out.iteration_s.assign(all.size() > 1 ? all.begin() + 1 : all.end(), all.end());
  const auto& v = out.iteration_s;
  if (v.empty()) return;
  double sum = 0;
  for (double x : v) sum += x;
  out.mean_s = sum / static_cast<double>(v.size());
  out.p50_s = percentile(v, 50);
  out.p90_s = percentile(v, 90);
  out.p99_s = percentile(v, 99);
  out.min_s = *std::min_element(v.begin(), v.end());
  out.max_s = *std::max_element(v.begin(), v.end());
}

WhatIfResult simulate_whatif(const costmodel::Estimate& e, const WhatIf& w, const SimOptions& opt, bool with_nominal,
                             SimResult* sim) {
  SimOptions o = opt;
  o.iterations = w.samples() + 1;
  o.whatif = w;
  SimResult r = simulate(e.schedule, e.costs, e.cluster, e.plan, o);
  WhatIfResult out;
  summarise_times(r.iteration_times_s, out);
  out.dp_simulated = r.dp_simulated;
  out.dp_replicas = r.dp_replicas;
  out.sim_wall_s = r.sim_wall_s;
  out.peak_rss_bytes = r.peak_rss_bytes;
  if (with_nominal) {
    o.whatif = WhatIf{};
    o.iterations = 2;
    out.nominal_s = simulate(e.schedule, e.costs, e.cluster, e.plan, o).eval.iteration_time_s;
  }
  if (sim) *sim = std::move(r);
  return out;
}

nlohmann::json to_json(const WhatIfResult& r) {
  return {{"iteration_s", r.iteration_s}, {"first_iteration_s", r.first_iteration_s}, {"mean_s", r.mean_s},
          {"p50_s", r.p50_s}, {"p90_s", r.p90_s}, {"p99_s", r.p99_s}, {"min_s", r.min_s}, {"max_s", r.max_s},
          {"nominal_s", r.nominal_s}, {"dp_simulated", r.dp_simulated}, {"dp_replicas", r.dp_replicas},
          {"sim_wall_s", r.sim_wall_s}, {"peak_rss_bytes", r.peak_rss_bytes}};
}

}  // namespace stagecraft::sim
