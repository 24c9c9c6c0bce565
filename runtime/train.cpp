// One rank's run: rendezvous, process groups, model parts, the step loop, checkpoints, and
// the gathering of every rank's records into the trace and the JSON summary (rank 0).
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "runtime/cp.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/memory_counter.h"
#include "runtime/op_times.h"
#include "runtime/plan.h"
#include "runtime/rank.h"
#include "runtime/script_part.h"
#include "schedules/error.h"

namespace stagecraft::runtime {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct Run {
  const TrainOptions& opt;
  const RankEnv& env;
  RunPlan plan;
  Grid grid;
  std::array<int, 3> me;   // (tp, dp x cp, pp): grid coordinates (Grid::dp_of, cp_of split the middle one)
  torch::Device device = torch::kCPU;  // where this rank computes (a GPU with NCCL)
  Precision precision = Precision::Fp32;
  c10::intrusive_ptr<c10d::TCPStore> store;
  std::unique_ptr<Watchdog> watchdog;
  compat::Group world, tp, dp;  // dp: the dp x cp ranks of this (tp, pp), which reduce gradients together
  compat::Group cp;             // cp > 1: the ranks that split this rank's sequences (ring attention)
  compat::Group shard, replicate;  // zero 3 with hybrid sharding: this rank's shard and replicate groups
  compat::Group ep, expert_dp;  // ep > 1: this rank's expert-parallel and expert-data-parallel groups
  std::map<int, compat::Group> part_groups;  // model part -> its copies over chains and dp (several chains only)
  std::unique_ptr<ScriptModel> script;  // a TorchScript model's programs (TrainOptions::script_path)
  std::vector<std::unique_ptr<ModelPart>> parts;
  std::unique_ptr<AdamW> optim;
  std::unique_ptr<Executor> exec;
  long first_step = 0;
  json steps = json::array();  // this rank's records
  bool has_loss = false;

  Run(const TrainOptions& o, const RankEnv& e) : opt(o), env(e), plan(make_run_plan(o.model, o.plan)), grid(o.plan) {
    me = grid.coords(e.rank);
    device = device_for_backend(resolve_backend(o.backend), e.local_rank);
    precision = parse_precision(o.precision);
    set_weight_copies(parse_weight_copies(o.bf16_weights));
    set_tf32(o.tf32);
  }
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(static_cast<long>(opt.timeout_s * 1000)); }
};

void write_atomic(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  {
    std::ofstream out(path + ".tmp", std::ios::trunc);
    out << text;
    if (!out) throw Error("cannot write '" + path + ".tmp'");
  }
  fs::rename(path + ".tmp", path, ec);
  if (ec) throw Error("cannot rename '" + path + ".tmp': " + ec.message());
}

std::string store_get(c10d::Store& s, const std::string& key) {
  auto v = s.get(key);
  return std::string(v.begin(), v.end());
}

void store_set(c10d::Store& s, const std::string& key, const std::string& val) {
  s.set(key, std::vector<uint8_t>(val.begin(), val.end()));
}

void rendezvous(Run& r) {
  if (r.env.world == 1) return;
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(r.env.master_port);
  o.isServer = r.env.rank == 0;
  o.numWorkers = r.env.world;
  o.waitWorkers = false;
  o.timeout = r.timeout();
  r.store = c10::make_intrusive<c10d::TCPStore>(r.env.master_addr, o);
  r.watchdog = std::make_unique<Watchdog>(r.env, r.opt.timeout_s);
}

// With several chains (Chimera) a model part has one copy per chain, on different pipeline
// ranks; its gradients are summed over every copy and every dp rank in one group. Groups are
// created in increasing part order on every rank, so their rendezvous cannot cross.
void make_part_groups(Run& r, const compat::StorePtr& store, const compat::GroupOptions& go) {
  const auto& s = r.plan.schedule;
  if (s.num_chains == 1) return;
  std::set<int> held;
  for (int stage : s.stages_of(r.me[2])) held.insert(s.model_part(stage));
  for (int part : held) {
    std::set<int> members;
    for (int c = 0; c < s.num_chains; ++c)
      for (int d = 0; d < r.grid.size[1]; ++d) members.insert(r.grid.global({r.me[0], d, s.rank_of(c * s.stages_per_chain() + part)}));
    std::string name = "gradient group of model part " + std::to_string(part) + " (tp " + std::to_string(r.me[0]) + ")";
    r.part_groups[part] = compat::make_group(store, name, {members.begin(), members.end()}, r.env.rank, go);
  }
}

// Expert parallelism (costmodel/moe.h, Megatron-Core's order tp-ep-dp-pp): the ep group is the ep
// consecutive dp ranks of this rank's (tp, pp) that share d / ep, each holding E/ep experts; the
// expert-data-parallel group the dp/ep ranks that share d % ep (ep apart), holding the same experts.
void make_expert_groups(Run& r, const compat::StorePtr& store, const compat::GroupOptions& go) {
  const int ep = r.opt.plan.ep, d = r.me[1];
  if (ep == 1) return;
  std::vector<int> ep_members, edp_members;
  for (int i = 0; i < ep; ++i) ep_members.push_back(r.grid.global({r.me[0], d / ep * ep + i, r.me[2]}));
  for (int j = d % ep; j < r.opt.plan.dp; j += ep) edp_members.push_back(r.grid.global({r.me[0], j, r.me[2]}));
  auto name = [&](const char* what, int k) {
    return std::string(what) + " group " + std::to_string(r.me[0]) + "." + std::to_string(r.me[2]) + "." + std::to_string(k);
  };
  r.ep = compat::make_group(store, name("ep", d / ep), ep_members, r.env.rank, go);
  r.expert_dp = compat::make_group(store, name("expert-dp", d % ep), edp_members, r.env.rank, go);
  ep_context().group = &r.ep;
  ep_context().timeout = r.timeout();
}

// Context parallelism (runtime/cp.h): the cp ranks of this rank's (tp, dp, pp), in cp order, the
// ring its attention runs over.
void make_context_group(Run& r, const compat::StorePtr& store, const compat::GroupOptions& go) {
  const int cp = r.opt.plan.cp, d = r.grid.dp_of(r.me[1]);
  if (cp == 1) return;
  std::vector<int> members;
  for (int c = 0; c < cp; ++c) members.push_back(r.grid.global({r.me[0], r.grid.middle(d, c), r.me[2]}));
  const std::string name = "cp group " + std::to_string(r.me[0]) + "." + std::to_string(d) + "." + std::to_string(r.me[2]);
  r.cp = compat::make_group(store, name, members, r.env.rank, go);
  cp_context().group = &r.cp;
  cp_context().timeout = r.timeout();
}

// Hybrid sharding (zero 3, plan.shard_group = S < dp; cp 1, costmodel::check_runtime_plan): the
// shard group is the S consecutive dp ranks sharing d / S, the replicate group the dp / S ranks
// sharing d mod S (S apart), as FSDP's HYBRID_SHARD builds its device mesh (replicate, shard).
void make_hybrid_shard_groups(Run& r, const compat::StorePtr& store, const compat::GroupOptions& go) {
  const auto& p = r.opt.plan;
  const int S = p.shard_group, d = r.me[1];
  if (p.zero != 3 || S == 0 || S == p.dp) return;
  std::vector<int> shard, replicate;
  for (int i = d / S * S; i < d / S * S + S; ++i) shard.push_back(r.grid.global({r.me[0], i, r.me[2]}));
  for (int j = d % S; j < p.dp; j += S) replicate.push_back(r.grid.global({r.me[0], j, r.me[2]}));
  auto name = [&](const char* what, int k) {
    return std::string(what) + " group " + std::to_string(r.me[0]) + "." + std::to_string(r.me[2]) + "." + std::to_string(k);
  };
  r.shard = compat::make_group(store, name("shard", d / S), shard, r.env.rank, go);
  r.replicate = compat::make_group(store, name("replicate", d % S), replicate, r.env.rank, go);
}

void make_groups(Run& r) {
  compat::GroupOptions go;
  go.backend = resolve_backend(r.opt.backend);
  go.master_addr = r.env.master_addr;
  go.timeout = r.timeout();
  std::vector<int> all;
  for (int g = 0; g < r.env.world; ++g) all.push_back(g);
  auto name = [&](const char* axis, int a, int b) { return std::string(axis) + " group " + std::to_string(a) + "." + std::to_string(b); };
  compat::StorePtr store = r.store;
  r.world = compat::make_group(store, "world", all, r.env.rank, go);
  r.tp = compat::make_group(store, name("tp", r.me[1], r.me[2]), r.grid.group(r.env.rank, 0), r.env.rank, go);
  r.dp = compat::make_group(store, name("dp", r.me[0], r.me[2]), r.grid.group(r.env.rank, 1), r.env.rank, go);
  tp_context().group = &r.tp;
  tp_context().timeout = r.timeout();
  make_part_groups(r, store, go);
  make_expert_groups(r, store, go);
  make_context_group(r, store, go);
  make_hybrid_shard_groups(r, store, go);
}

// The GPT part of this shape (this tp rank's shard), or a TorchScript model's subgraphs.
std::unique_ptr<ModelPart> make_part(Run& r, const PartShape& shape) {
  if (!r.opt.script_path.empty()) {
    if (!r.script) {
      r.script = std::make_unique<ScriptModel>(r.opt.script_path, r.opt.example_shapes);
      r.script->check_parts(r.plan.part_first_layer, r.plan.part_layers);
    }
    return std::make_unique<ScriptPart>(*r.script, shape.first_layer, shape.num_layers, shape.embedding, shape.head, r.device);
  }
  const ExpertPlacement experts{r.opt.plan.ep > 1 ? r.me[1] % r.opt.plan.ep : 0, r.opt.plan.ep};  // ep rank: d mod ep
  const ContextShard context{r.grid.cp_of(r.me[1]), r.opt.plan.cp};  // the tokens of this cp rank
  auto gpt = std::make_unique<GptPart>(r.opt.model, shape, r.me[0], r.opt.plan.tp, r.opt.seed, r.device, experts, context);
  gpt->set_recompute_attention_core(r.opt.plan.recompute == costmodel::RecomputePolicy::Selective);
  gpt->set_sequence_parallel(r.opt.plan.sequence_parallel);
  return gpt;
}

void build_model(Run& r) {
  MemoryScope scope(MemCategory::Parameters);  // what the parts allocate is their weights
  const auto& s = r.plan.schedule;
  std::map<int, ModelPart*> by_stage;
  std::map<int, compat::Group*> grad_groups;
  std::map<int, schedules::TpOverlap> tp_overlap;
  std::vector<std::pair<std::string, torch::Tensor>> params;
  std::set<const void*> expert_params;
  for (int stage : s.stages_of(r.me[2])) {
    int part = s.model_part(stage);
    PartShape shape{r.plan.part_first_layer[static_cast<size_t>(part)], r.plan.part_layers[static_cast<size_t>(part)],
                    s.is_first(stage), s.is_last(stage)};
    r.parts.push_back(make_part(r, shape));
    by_stage[stage] = r.parts.back().get();
    if (s.num_chains > 1) grad_groups[stage] = &r.part_groups.at(part);
    if (r.opt.plan.tp > 1) tp_overlap[stage] = r.opt.plan.overlap_of(part);
    for (const auto& np : r.parts.back()->named_parameters()) {
      params.push_back(np);
      if (r.opt.plan.ep > 1 && is_routed_expert_parameter(np.first)) expert_params.insert(np.second.unsafeGetTensorImpl());
    }
    r.has_loss = r.has_loss || shape.head;
  }
  AdamWOptions ao;
  ao.lr = r.opt.lr;
  ao.weight_decay = r.opt.weight_decay;
  ao.kernel = parse_adamw_kernel(r.opt.adamw);
  {
    MemoryScope states(MemCategory::OptimizerStates);  // AdamW allocates its moments up front
    r.optim = std::make_unique<AdamW>(params, ao);
  }
  ExecConfig c;
  c.schedule = &r.plan.schedule;
  c.pp_rank = r.me[2];
  c.global_of = [&r](int pp) { return r.grid.global({r.me[0], r.me[1], pp}); };
  c.world = &r.world;
  c.dp = &r.dp;
  c.grad_groups = grad_groups;
  if (r.opt.plan.ep > 1) c.expert_dp = &r.expert_dp, c.expert_params = expert_params;
  c.ep = r.opt.plan.ep;
  c.tp_overlap = tp_overlap;
  c.timeout = r.timeout();
  c.microbatch_size = r.opt.plan.microbatch_size;
  c.bucket_bytes = r.opt.plan.grad_bucket_bytes;
  c.zero = r.opt.plan.zero;
  c.overlap_param_gather = r.opt.plan.overlap_param_gather;
  c.reshard_after_forward = r.opt.plan.reshard_after_forward;
  if (r.shard.size() > 0) c.shard = &r.shard, c.replicate = &r.replicate;
  c.overlap_grad_reduce = r.opt.plan.overlap_grad_reduce;
  c.preemptive_comm = r.opt.plan.preemptive_comm;
  c.device = r.device;
  c.precision = r.precision;
  c.global_rank = r.env.rank;
  c.op_times = r.opt.op_times;
  r.exec = std::make_unique<Executor>(c, by_stage, r.optim.get());
}

json checkpoint_meta(const Run& r, long step) {
  return {{"format", "stagecraft-checkpoint"}, {"version", 1}, {"step", step}, {"world", r.env.world},
          {"seed", r.opt.seed}, {"model", costmodel::to_json(r.opt.model)}, {"plan", costmodel::to_json(r.opt.plan)}};
}

void resume(Run& r) {
  if (r.opt.resume_dir.empty()) return;
  std::ifstream in(r.opt.resume_dir + "/meta.json");
  if (!in) throw InputError("--resume: no '" + r.opt.resume_dir + "/meta.json' (not a complete checkpoint)");
  json meta = json::parse(in);
  json want = checkpoint_meta(r, meta.value("step", 0L));
  for (const char* k : {"world", "seed", "model", "plan"})
    if (meta[k] != want[k])
      throw InputError(std::string("--resume: the checkpoint's ") + k + " " + meta[k].dump() + " differs from this run's " + want[k].dump());
  NamedTensors shards = r.exec->sharded_state();  // zero 3: this member's parameter chunks
  load_rank_state(r.opt.resume_dir, r.env.rank, *r.optim, &shards);
  r.exec->load_sharded_state(shards);
  r.first_step = meta["step"].get<long>();
  if (r.optim->steps_done() != r.first_step) throw Error("--resume: rank file and meta.json disagree on the step");
}

void barrier(Run& r, const std::string& name) {
  if (!r.store) return;
  r.store->add(name, 1);
  const auto deadline = Clock::now() + r.timeout();
  while (r.store->add(name, 0) < r.env.world) {
    if (Clock::now() > deadline) throw Error("rank " + std::to_string(r.env.rank) + ": timed out at barrier '" + name + "'");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void save(Run& r, long step) {
  if (r.opt.save_dir.empty()) return;
  save_rank_state(r.opt.save_dir, r.env.rank, *r.optim, r.exec->sharded_state());
  barrier(r, "saved");
  if (r.env.rank == 0) write_atomic(r.opt.save_dir + "/meta.json", checkpoint_meta(r, step).dump(2) + "\n");
}

// Mean loss over every microbatch of the global batch: summed over the ranks holding the
// last model part (the dp group, or with several chains every copy of that part).
double global_loss(Run& r, const StepRecord& rec) {
  if (!r.has_loss) return 0;
  const auto& s = r.plan.schedule;
  compat::Group& g = s.num_chains > 1 ? r.part_groups.at(s.stages_per_chain() - 1) : r.dp;
  torch::Tensor t = torch::tensor({rec.loss_sum, static_cast<double>(rec.loss_count)}, torch::kFloat64).to(r.device);
  compat::wait(compat::all_reduce_sum(g, t), r.timeout());
  t = t.cpu();
  return t[0].item<double>() / t[1].item<double>();
}

json spans_json(const StepRecord& rec) {
  json a = json::array();  // [position, stream, start, end, live bytes after it] per action
  for (const ActionSpan& s : rec.spans) a.push_back({s.position, s.stream, s.start_s, s.end_s, s.live_bytes});
  return a;
}

// [position, comm (0/1), pass (F, R, B), block, sub-batch, start, end] per piece.
json pieces_json(const StepRecord& rec) {
  json a = json::array();
  for (const PieceSpan& p : rec.pieces)
    a.push_back({p.position, p.comm ? 1 : 0, std::string(schedules::pass_name(p.pass)), p.block, p.sub_batch, p.start_s, p.end_s});
  return a;
}

// Bytes per category, named as memory_counter.h names them.
json breakdown_json(const MemBreakdown& b) {
  json j = json::object();
  for (int c = 0; c < kMemCategories; ++c) j[mem_category_name(static_cast<MemCategory>(c))] = b[static_cast<size_t>(c)];
  return j;
}

void train_loop(Run& r) {
  const auto t0 = Clock::now();
  const auto& p = r.opt.plan;
  const long m = p.num_microbatches, b = p.microbatch_size;
  for (long k = 0; k < r.opt.steps; ++k) {
    const long step = r.first_step + k;
    BatchFn batch = [&](int mb) {
      long first = step * p.global_batch() + (r.grid.dp_of(r.me[1]) * m + mb) * b;
      if (!r.opt.script_path.empty()) return script_batch(r.opt.seed, first, r.opt.example_shapes);
      auto [tokens, targets] = synthetic_batch(r.opt.seed, first, b, r.opt.model.seq_length, r.opt.model.vocab_size);
      const int c = r.grid.cp_of(r.me[1]);  // this cp rank's two chunks of each sequence
      return std::make_pair(cp_slice(tokens, c, p.cp), cp_slice(targets, c, p.cp));
    };
    const long cp_sends_before = cp_context().sends, gathers_before = r.exec->unit_gathers();
    const std::int64_t casts_before = weight_casts();
    StepRecord rec = r.exec->run_step(batch, t0);
    double loss = global_loss(r, rec);
    json s = {{"step", step}, {"time_s", rec.time_s}, {"compute_s", rec.compute_s}, {"comm_s", rec.comm_s}, {"wait_s", rec.wait_s},
              {"tp_collectives", rec.tp_collectives}, {"p2p_groups", rec.p2p_groups}, {"grad_sq", rec.grad_sq},
              {"buckets_in_backward", rec.buckets_in_backward}, {"peak_memory_bytes", rec.peak_bytes}};
    if (r.opt.plan.zero > 0) s["gathers_overlapped"] = rec.gathers_overlapped;
    if (r.opt.plan.zero == 3) s["unit_gathers"] = r.exec->unit_gathers() - gathers_before;  // all-gathers of units
    if (p.cp > 1) s["cp_sends"] = cp_context().sends - cp_sends_before;  // ring attention's chunk sends
    if (r.precision == Precision::Bf16) s["weight_casts"] = weight_casts() - casts_before;  // weights cast to bf16
    if (r.opt.op_times)
      s["op_s"] = {{op_kind_name(OpKind::Gemm), rec.op_s[0]}, {op_kind_name(OpKind::AttentionCore), rec.op_s[1]},
                   {"optimizer", rec.optimizer_s}};
    if (r.opt.plan.preemptive_comm)
      s["preempt"] = {{"chunks", rec.preempt_chunks}, {"yields", rec.preempt_yields}, {"expired", rec.preempt_expired},
                      {"yield_s", rec.preempt_yield_s}};
    if (r.has_loss) s["loss"] = loss;
    if (memory_counter_installed(r.device)) s["peak_breakdown_bytes"] = breakdown_json(rec.peak_breakdown);
    if (!r.opt.trace_path.empty()) s["spans"] = spans_json(rec);
    if (!r.opt.trace_path.empty() && !rec.pieces.empty()) s["tp_pieces"] = pieces_json(rec);
    r.steps.push_back(s);
    bool printer = r.has_loss && r.me[0] == 0 && r.me[1] == 0;  // dp 0, cp 0
    if (printer && r.opt.log_every > 0 && (k % r.opt.log_every == 0 || k + 1 == r.opt.steps))
      std::printf("step %ld loss %.6f iteration %.2f ms\n", step, loss, rec.time_s * 1e3), std::fflush(stdout);
  }
  r.exec->flush();  // deferred gradient shares (FOLD3D) of the last step
}

long peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<long>(u.ru_maxrss) * 1024;
}

// Bytes in the rank's parameters and in its optimizer's state, at the end of the run.
std::int64_t param_bytes(const Run& r) {
  if (r.exec && r.exec->sharded_param_bytes() >= 0) return r.exec->sharded_param_bytes();  // zero 3: the chunks kept
  std::int64_t bytes = 0;
  for (const auto& part : r.parts)
    for (const auto& np : part->named_parameters()) bytes += static_cast<std::int64_t>(np.second.nbytes());
  return bytes;
}

// Peak memory: the largest step peak of bytes in tensors (the caching allocator's statistics on
// a GPU, the counting allocator on the CPU), with the parameters and optimizer state that the
// peak includes, and the process's peak resident set for reference.
json rank_result(const Run& r) {
  std::int64_t peak = -1;
  json breakdown;  // of the step with the largest peak
  for (const json& st : r.steps) {
    const std::int64_t p = st.value("peak_memory_bytes", std::int64_t{-1});
    if (p > peak && st.contains("peak_breakdown_bytes")) breakdown = st["peak_breakdown_bytes"];
    peak = std::max(peak, p);
  }
  const bool counted = peak >= 0;
  json out = {{"rank", r.env.rank}, {"tp", r.me[0]}, {"dp", r.grid.dp_of(r.me[1])}, {"cp", r.grid.cp_of(r.me[1])}, {"pp", r.me[2]},
          {"device", describe(r.device)}, {"peak_memory_bytes", counted ? peak : peak_rss_bytes()},
          {"peak_memory_kind", !counted ? "process resident set" : r.device.is_cuda() ? "device allocator" : "live tensors (counting allocator)"},
          {"param_bytes", param_bytes(r)}, {"optimizer_state_bytes", r.optim ? r.optim->state_bytes() : 0},
          {"peak_rss_bytes", peak_rss_bytes()}, {"steps", r.steps}};
  if (!breakdown.is_null()) out["peak_breakdown_bytes"] = breakdown;
  return out;
}

std::vector<json> gather(Run& r) {
  std::vector<json> all;
  if (!r.store) return {rank_result(r)};
  store_set(*r.store, "result/" + std::to_string(r.env.rank), rank_result(r).dump());
  barrier(r, "results");
  if (r.env.rank == 0)
    for (int k = 0; k < r.env.world; ++k) all.push_back(json::parse(store_get(*r.store, "result/" + std::to_string(k))));
  return all;
}

}  // namespace

// Defined in report.cpp: the trace and the summary from every rank's records.
json summary_json(const TrainOptions& opt, const schedules::Schedule& s, const std::vector<json>& ranks);
json trace_json(const schedules::Schedule& s, const std::vector<json>& ranks, int tp, int dp, int pp,
                const std::function<int(int, int, int, int)>& global_of);

namespace {

// Rank 0's last line, whatever --log-every says: what the run did and how fast (the summary's
// figures), so a run without --json still ends with its result.
void print_summary_line(const Run& r, const json& sum) {
  const json& steps = sum.at("steps");
  const double loss = steps.empty() ? 0.0 : steps.back().value("loss", 0.0);
  double peak = 0;
  for (const json& k : sum.at("ranks")) peak = std::max(peak, k.value("peak_memory_bytes", 0.0));
  const std::string cp = r.opt.plan.cp > 1 ? ", cp " + std::to_string(r.opt.plan.cp) : "";
  // Two lines, within 100 columns (issue 52).
  std::printf("trained %zu steps on %d ranks (dp %d, tp %d, pp %d%s, %s): final loss %.6f\n  mean iteration %.2f ms after "
              "warm-up, %.0f tokens/s, peak memory %.1f MiB on the fullest rank\n",
              steps.size(), r.env.world, r.opt.plan.dp, r.opt.plan.tp, r.opt.plan.pp, cp.c_str(), r.plan.schedule.name.c_str(), loss,
              sum.at("mean_iteration_time_s").get<double>() * 1e3, sum.at("tokens_per_s").get<double>(), peak / (1024.0 * 1024.0));
  std::fflush(stdout);
}

// --op-times: each rank's iteration by kind (the summary's breakdown_s), one line a rank.
void print_breakdown(const json& sum) {
  for (const json& k : sum.at("ranks")) {
    if (!k.contains("breakdown_s")) continue;
    const json& b = k["breakdown_s"];
    std::printf("rank %d: %.2f ms = products %.2f + attention core %.2f + other compute %.2f\n    + optimizer %.2f + "
                "communication %.2f + idle and waits %.2f ms\n",
                k["rank"].get<int>(), k["iteration_time_s"].get<double>() * 1e3, b["gemm_s"].get<double>() * 1e3,
                b["attention_core_s"].get<double>() * 1e3, b["other_compute_s"].get<double>() * 1e3,
                b["optimizer_s"].get<double>() * 1e3, b["communication_s"].get<double>() * 1e3, b["idle_s"].get<double>() * 1e3);
  }
  std::fflush(stdout);
}

void write_outputs(Run& r, const std::vector<json>& ranks) {
  if (r.env.rank != 0) return;
  const json sum = summary_json(r.opt, r.plan.schedule, ranks);
  print_summary_line(r, sum);
  if (r.opt.op_times) print_breakdown(sum);
  if (!r.opt.json_path.empty()) write_atomic(r.opt.json_path, sum.dump(2) + "\n");
  if (!r.opt.trace_path.empty()) {
    auto g = [&r](int tp, int dp, int cp, int pp) { return r.grid.global({tp, r.grid.middle(dp, cp), pp}); };
    write_atomic(r.opt.trace_path, trace_json(r.plan.schedule, ranks, r.opt.plan.tp, r.opt.plan.dp, r.opt.plan.pp, g).dump() + "\n");
  }
}

void finish(Run& r) {
  if (!r.store) return;
  r.watchdog->stop();
  store_set(*r.store, "done/" + std::to_string(r.env.rank), "1");
  if (r.env.rank != 0) return;
  std::vector<std::string> keys;
  for (int k = 0; k < r.env.world; ++k) keys.push_back("done/" + std::to_string(k));
  r.store->wait(keys, r.timeout());  // the store lives in rank 0: keep it until everyone is out
}

// The memory counter of the rank's device. A GPU whose allocator takes no trace tracker still
// trains, with the allocator's totals and without the breakdown, and says so.
void install_counter(const Run& r) {
  try {
    install_memory_counter(r.device);
  } catch (const Error& e) {
    if (!r.device.is_cuda()) throw;
    std::fprintf(stderr, "rank %d: warning: %s\n", r.env.rank, e.what());
  }
}

void run(Run& r) {
  torch::set_num_threads(r.opt.threads);
  install_counter(r);  // before the model: every tensor counted
  rendezvous(r);
  make_groups(r);
  build_model(r);
  resume(r);
  train_loop(r);
  save(r, r.first_step + r.opt.steps);
  write_outputs(r, gather(r));
  finish(r);
}

}  // namespace

int run_rank(const TrainOptions& opt, const RankEnv& env) {
  std::unique_ptr<Run> r;
  try {
    preflight(opt, env.world);
    r = std::make_unique<Run>(opt, env);
    run(*r);
  } catch (const InputError& e) {
    std::fprintf(stderr, "stagecraft: error: rank %d: %s\n", env.rank, e.what());
    std::fflush(stderr);
    if (env.world > 1) std::_Exit(2);  // peers fail the same check; skip group teardown
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stagecraft: failed: rank %d: %s\n", env.rank, e.what());
    std::fflush(stderr);
    if (r && r->watchdog) {
      r->watchdog->await_verdict();  // ends the process naming the peer when one died
      while (r->watchdog->aborting()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      r->watchdog->declare_self_failed(e.what());
    }
    std::fflush(stdout);
    std::_Exit(1);  // process groups may hold sockets to dead peers: no destructors
  }
  std::fflush(stdout);
  std::fflush(stderr);
  if (env.world > 1) std::_Exit(0);
  return 0;
}

}  // namespace stagecraft::runtime
