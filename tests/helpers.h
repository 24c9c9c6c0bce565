// Shared test helpers: data paths, golden files, running the CLI.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "costmodel/comm.h"
#include "presets/load.h"
#include "costmodel/specs.h"
#include "schedules/error.h"
#include "schedules/registry.h"

namespace stagecraft::test {

// A cluster preset with `nodes` nodes (costmodel::set_nodes).
inline costmodel::ClusterSpec cluster_of(const std::string& preset, int nodes) {
  costmodel::ClusterSpec c = presets::load_cluster(preset);
  costmodel::set_nodes(c, nodes, "nodes");
  return c;
}

// The model preset `name` with FP8 linear products on or off (ModelSpec::fp8).
inline costmodel::ModelSpec model_with_fp8(const std::string& name, bool fp8) {
  costmodel::ModelSpec m = presets::load_model(name);
  m.fp8 = fp8;
  return m;
}

// The all-reduce path of a group of `local` members on each of `nodes` nodes, by hand: `intra`
// and `inter` the channels' and tree's hops, `flat` the flat ring's slowest hop.
inline costmodel::AllReducePath path_over_nodes(int local, int nodes, costmodel::Link intra, costmodel::Link inter,
                                                costmodel::Link flat = {}) {
  costmodel::AllReducePath p;
  p.ranks = local * nodes;
  p.local = local;
  p.nodes = nodes;
  p.intra = std::move(intra);
  p.inter = std::move(inter);
  p.flat = std::move(flat);
  return p;
}

// A generator's compute-only schedule: p ranks, m microbatches, `chunks` stages per rank where it
// takes them (0: its default) and `extra` its other parameters. The one spelling of the
// schedule tests.
inline schedules::Schedule compute_only(const std::string& name, int p, int m, int chunks = 0,
                                        nlohmann::json extra = nlohmann::json::object()) {
  schedules::GeneratorOptions o;
  o.ranks = p;
  o.microbatches = m;
  o.chunks = chunks;
  o.extra = std::move(extra);
  return schedules::generate(name, o);
}

// A plan from its degrees and microbatch count, every other field at its default.
inline costmodel::ParallelPlan plan_of(int dp, int tp, int pp, int microbatches) {
  costmodel::ParallelPlan p;
  p.dp = dp;
  p.tp = tp;
  p.pp = pp;
  p.num_microbatches = microbatches;
  return p;
}

// The test process's scratch directory: a fresh directory under the temporary folder
// (::testing::TempDir(), TEST_TMPDIR when set), created on first use and removed with all it
// holds when the process exits. Every file a test writes goes here, so the suite leaves
// nothing behind (scripts/test.sh checks; docs/testing.md).
inline const std::string& scratch_dir() {
  struct Scratch {
    std::string path;
    Scratch() {
      std::string tmpl = ::testing::TempDir() + "stagecraft_test_XXXXXX";
      if (!::mkdtemp(tmpl.data())) throw Error("tests: cannot create a scratch directory from " + tmpl);
      path = tmpl;
    }
    ~Scratch() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Scratch s;
  return s.path;
}

// A path named `name` inside the scratch directory.
inline std::string scratch_path(const std::string& name) { return scratch_dir() + "/" + name; }

inline std::string data_path(const std::string& rel) { return std::string(STAGECRAFT_TEST_DATA) + "/" + rel; }

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream b;
  b << f.rdbuf();
  return b.str();
}

// Compares `actual` with tests/golden/NAME. With STAGECRAFT_UPDATE_GOLDEN=1 in the environment
// the file is rewritten instead (docs/testing.md: how to regenerate golden files).
inline void expect_golden(const std::string& name, const std::string& actual) {
  std::string path = std::string(STAGECRAFT_GOLDEN_DIR) + "/" + name;
  const char* update = std::getenv("STAGECRAFT_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream(path) << actual;
    GTEST_SKIP() << "golden file " << name << " rewritten";
  }
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << "missing golden file " << path << " (run with STAGECRAFT_UPDATE_GOLDEN=1 to create it)";
  EXPECT_EQ(read_text(path), actual) << "output differs from golden file " << name;
}

// The message of the InputError `f` throws, or "no error".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

struct RunResult {
  int exit_code = -1;
  std::string out;  // standard output
  std::string err;  // standard error
};

// Runs the stagecraft binary with the given arguments (a shell fragment).
inline RunResult run_cli(const std::string& args) {
  static int counter = 0;
  std::string base = scratch_path("cli_" + std::to_string(counter++));
  std::string cmd = std::string(STAGECRAFT_BIN) + " " + args + " >" + base + ".out 2>" + base + ".err";
  int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(base + ".out");
  r.err = read_text(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

}  // namespace stagecraft::test
