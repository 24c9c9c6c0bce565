#include "runtime/rank.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

#include "costmodel/topology.h"
#include "schedules/error.h"

namespace stagecraft::runtime {

namespace {

std::uint64_t mix(std::uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

Grid::Grid(const costmodel::ParallelPlan& p) : dp(p.dp), cp(p.cp) {
  size = {p.tp, p.dp * p.cp, p.pp};
  const auto axes = costmodel::rank_axes(p.rank_order);  // checked by costmodel::check
  cp_first = costmodel::cp_before_dp(axes);
  size_t i = 0;
  for (costmodel::Axis a : axes)  // cp next to dp (check_runtime_plan): the two are the middle axis
    if (a != costmodel::kCp) order[i++] = a == costmodel::kTp ? 0 : a == costmodel::kDp ? 1 : 2;
}

std::array<int, 3> Grid::coords(int g) const {
  std::array<int, 3> c{};
  for (int ax : order) {
    c[static_cast<size_t>(ax)] = g % size[static_cast<size_t>(ax)];
    g /= size[static_cast<size_t>(ax)];
  }
  return c;
}

int Grid::global(const std::array<int, 3>& c) const {
  int g = 0;
  for (int i = 2; i >= 0; --i) {
    int ax = order[static_cast<size_t>(i)];
    g = g * size[static_cast<size_t>(ax)] + c[static_cast<size_t>(ax)];
  }
  return g;
}

std::vector<int> Grid::group(int g, int axis) const {
  std::array<int, 3> c = coords(g);
  std::vector<int> out;
  for (int i = 0; i < size[static_cast<size_t>(axis)]; ++i) {
    c[static_cast<size_t>(axis)] = i;
    out.push_back(global(c));
  }
  return out;
}

std::pair<torch::Tensor, torch::Tensor> synthetic_batch(std::uint64_t seed, std::int64_t first, std::int64_t b,
                                                        std::int64_t s, std::int64_t vocab) {
  static const std::int64_t strides[5] = {1, 2, 3, 5, 7};
  torch::Tensor seq = torch::empty({b, s + 1}, torch::kInt64);
  auto acc = seq.accessor<std::int64_t, 2>();
  for (std::int64_t i = 0; i < b; ++i) {
    std::uint64_t r = mix(mix(seed) ^ static_cast<std::uint64_t>(first + i));
    std::int64_t start = static_cast<std::int64_t>(r % static_cast<std::uint64_t>(vocab));
    std::int64_t stride = strides[(r >> 32) % 5];
    for (std::int64_t t = 0; t <= s; ++t) acc[i][t] = (start + stride * t) % vocab;
  }
  return {seq.narrow(1, 0, s).contiguous(), seq.narrow(1, 1, s).contiguous()};
}

std::pair<torch::Tensor, torch::Tensor> script_batch(std::uint64_t seed, std::int64_t first,
                                                     const std::vector<std::vector<std::int64_t>>& shapes) {
  std::vector<torch::Tensor> out;
  for (size_t k = 0; k < shapes.size(); ++k) {
    std::vector<std::int64_t> sample(shapes[k].begin() + 1, shapes[k].end());
    std::vector<torch::Tensor> rows;
    for (std::int64_t i = 0; i < shapes[k][0]; ++i) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(mix(mix(mix(seed) ^ static_cast<std::uint64_t>(first + i)) + k));
      rows.push_back(torch::randn(sample, gen));
    }
    out.push_back(torch::stack(rows));
  }
  return {out.at(0), out.at(1)};
}

// ---- Watchdog ---------------------------------------------------------------------------

Watchdog::Watchdog(const RankEnv& env, double timeout_s)
    : env_(env), interval_s_(std::min(0.25, timeout_s / 10)), stale_s_(timeout_s / 2) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(env.master_port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
  store_ = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void Watchdog::abort_naming(int peer, const std::string& why) {
  aborting_ = true;
  std::fprintf(stderr, "stagecraft: rank %d: peer rank %d failed: %s; aborting\n", env_.rank, peer, why.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  // Rank 0 hosts the store: keep it up long enough for every other rank to read the verdict.
  if (env_.rank == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long>(std::max(1.0, 6 * interval_s_) * 1000)));
  std::_Exit(1);
}

void Watchdog::loop() {
  using Clock = std::chrono::steady_clock;
  std::map<int, std::pair<int64_t, Clock::time_point>> seen;  // peer -> (beat, when it changed)
  std::map<int, bool> done;
  const std::string me = "hb/" + std::to_string(env_.rank);
  while (!stop_) {
    try {
      store_->add(me, 1);
      if (store_->check({"dead"})) {
        auto v = store_->get("dead");
        std::string s(v.begin(), v.end());
        auto bar = s.find('|');
        abort_naming(std::stoi(s.substr(0, bar)), s.substr(bar + 1));
      }
      for (int k = 0; k < env_.world; ++k) {
        if (k == env_.rank || done[k]) continue;
        if (store_->check({"done/" + std::to_string(k)})) {
          done[k] = true;
          continue;
        }
        int64_t beat = store_->add("hb/" + std::to_string(k), 0);
        auto now = Clock::now();
        auto it = seen.find(k);
        if (it == seen.end() || it->second.first != beat) {
          seen[k] = {beat, now};
        } else if (std::chrono::duration<double>(now - it->second.second).count() > stale_s_) {
          std::string why = "no heartbeat for " + std::to_string(stale_s_) + " s (process gone or hung)";
          std::string val = std::to_string(k) + "|" + why;
          store_->set("dead", std::vector<uint8_t>(val.begin(), val.end()));
          abort_naming(k, why);
        }
      }
    } catch (const std::exception& e) {
      if (stop_) return;
      abort_naming(0, "lost the rendezvous store that rank 0 hosts at " + env_.master_addr + ":" +
                          std::to_string(env_.master_port) + " (" + e.what() + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long>(interval_s_ * 1000)));
  }
}

void Watchdog::await_verdict() {
  // The heartbeat thread ends the process when it names a peer; give it the time to.
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long>((stale_s_ + 4 * interval_s_) * 1000)));
}

void Watchdog::declare_self_failed(const std::string& reason) {
  try {
    std::string val = std::to_string(env_.rank) + "|" + reason;
    if (!store_->check({"dead"})) store_->set("dead", std::vector<uint8_t>(val.begin(), val.end()));
  } catch (const std::exception&) {
  }
}

// ---- Checkpoints ------------------------------------------------------------------------

void save_rank_state(const std::string& dir, int rank, const AdamW& opt, const NamedTensors& extra) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create checkpoint directory '" + dir + "': " + ec.message());
  std::string path = dir + "/rank-" + std::to_string(rank) + ".pt";
  torch::serialize::OutputArchive ar;
  for (const auto& [name, t] : opt.state()) ar.write(name, t.cpu());  // loadable on any device
  for (const auto& [name, t] : extra) ar.write(name, t.cpu());
  ar.save_to(path + ".tmp");
  fs::rename(path + ".tmp", path, ec);
  if (ec) throw Error("cannot rename '" + path + ".tmp' to '" + path + "': " + ec.message());
}

void load_rank_state(const std::string& dir, int rank, AdamW& opt, NamedTensors* extra) {
  std::string path = dir + "/rank-" + std::to_string(rank) + ".pt";
  if (!std::filesystem::exists(path)) throw InputError("--resume: no checkpoint file '" + path + "'");
  torch::serialize::InputArchive ar;
  ar.load_from(path, torch::Device(torch::kCPU));  // copied onto the parameters' device by load()
  std::vector<std::pair<std::string, torch::Tensor>> st;
  for (const auto& [name, like] : opt.state()) {
    torch::Tensor t;
    if (!ar.try_read(name, t)) throw InputError("--resume: '" + path + "' has no tensor '" + name + "' (another plan?)");
    st.emplace_back(name, t);
  }
  opt.load(st);
  if (!extra) return;
  for (auto& [name, t] : *extra) {
    torch::Tensor got;
    if (!ar.try_read(name, got) || got.sizes() != t.sizes())
      throw InputError("--resume: '" + path + "' has no tensor '" + name + "' of this run's shape (another plan?)");
    t = got;
  }
}

}  // namespace stagecraft::runtime
