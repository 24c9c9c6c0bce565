// TorchScript models as graphs (runtime/torchscript_graph.h): a module with a residual branch
// that skips a block, written from C++ (torch::jit::Module::define) and saved, imported through
// torch::jit::load with shapes from a run on an example input, then sharded and partitioned.
#include <gtest/gtest.h>

#include <cstdlib>

#include "graphs/partition.h"
#include "graphs/shard.h"
#include "runtime/torch_pch.h"
#include "runtime/torchscript_graph.h"
#include "schedules/error.h"
#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

// x (4, 8, 16): four matmul blocks; block 2's output adds block 0's (the skip); the last block
// reads w0 again, transposed (a tied weight).
std::string save_skip_stack() {
  torch::manual_seed(0);
  torch::jit::Module m("SkipStack");
  m.register_parameter("w0", torch::randn({16, 32}), false);
  m.register_parameter("b0", torch::randn({32}), false);
  m.register_parameter("w1", torch::randn({32, 32}), false);
  m.register_parameter("b1", torch::randn({32}), false);
  m.register_parameter("w2", torch::randn({32, 32}), false);
  m.register_parameter("b2", torch::randn({32}), false);
  m.define(R"(
def forward(self, x):
    h0 = torch.relu(torch.matmul(x, self.w0) + self.b0)
    h1 = torch.relu(torch.matmul(h0, self.w1) + self.b1)
    h2 = torch.matmul(h1, self.w2) + self.b2 + h0
    return torch.matmul(h2, self.w0.t())
)");
  const std::string path = temp_path("skip_stack.pt");
  m.save(path);
  // docs/graphs.md's example: STAGECRAFT_SAVE_SKIP_STACK=FILE keeps a copy of the model.
  if (const char* keep = std::getenv("STAGECRAFT_SAVE_SKIP_STACK")) m.save(keep);
  return path;
}

const graphs::Node& node(const graphs::Graph& g, const std::string& kind, int which) {
  int k = 0;
  for (const auto& n : g.nodes)
    if (n.kind == kind && k++ == which) return n;
  throw Error("no " + kind + " #" + std::to_string(which));
}

TEST(TorchScriptGraph, ImportsShapesFlopsAndParameters) {
  const std::string path = save_skip_stack();
  const graphs::Graph g = runtime::import_torchscript(path, {{4, 8, 16}});
  EXPECT_EQ(g.nodes.front().kind, "input");
  EXPECT_EQ(g.nodes.front().shape, (std::vector<std::int64_t>{4, 8, 16}));
  const graphs::Node& mm0 = node(g, "matmul", 0);
  EXPECT_EQ(mm0.shape, (std::vector<std::int64_t>{4, 8, 32}));
  EXPECT_DOUBLE_EQ(mm0.fwd_flops, 2.0 * 4 * 8 * 32 * 16);  // 2 x output x contracted 16
  EXPECT_DOUBLE_EQ(mm0.param_bytes, 16 * 32 * 4);          // w0, fp32
  EXPECT_EQ(node(g, "matmul", 3).shape, (std::vector<std::int64_t>{4, 8, 16}));
  double params = 0;
  bool tied = false;
  for (const auto& n : g.nodes) params += n.param_bytes, tied |= n.shares == mm0.name;
  EXPECT_DOUBLE_EQ(params, (16 * 32 + 32 + 2 * (32 * 32 + 32)) * 4.0);  // w0 counted once
  EXPECT_TRUE(tied) << "the transposed w0 shares the first matmul's parameter";
  std::remove(path.c_str());
}

// The skip keeps the skipped block with the add that closes it; every cut carries one tensor.
TEST(TorchScriptGraph, ShardsAroundTheSkipAndPartitions) {
  const std::string path = save_skip_stack();
  const graphs::Graph g = runtime::import_torchscript(path, {{4, 8, 16}});
  const graphs::Sharding sh = graphs::shard(g);
  ASSERT_GE(sh.subgraphs.size(), 3u);
  const int h0 = sh.subgraph_of[static_cast<size_t>(g.index_of(node(g, "relu", 0).name))];
  const int h1 = sh.subgraph_of[static_cast<size_t>(g.index_of(node(g, "relu", 1).name))];
  const int skip = sh.subgraph_of[static_cast<size_t>(g.index_of(node(g, "add", 3).name))];
  // h0 opens the skip and has no parameters, so it sits with the matmul after it; the add that
  // closes the skip pulls everything from h0 on into that subgraph: the skipped block with it.
  EXPECT_EQ(h0, h1);
  EXPECT_EQ(h1, skip);
  EXPECT_EQ(h0, 1);  // the first block's matmul and bias come before, cut apart: subgraph 0
  for (size_t i = 0; i + 1 < sh.subgraphs.size(); ++i) EXPECT_EQ(sh.subgraphs[i].outputs.size(), 1u) << i;
  graphs::PartitionOptions po;
  po.stages = 2;
  EXPECT_EQ(graphs::partition(sh, po).stages.size(), 2u);
  // And through the command.
  RunResult r = run_cli("partition --model " + path + " --example-shape 4,8,16 --pp 2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("subgraphs"), std::string::npos);
  RunResult bad = run_cli("partition --model " + path + " --pp 2");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--example-shape is required"), std::string::npos) << bad.err;
  RunResult wrong = run_cli("partition --model " + path + " --example-shape 4,8,5 --pp 2");
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(wrong.err.find("does not run on the example input"), std::string::npos) << wrong.err;
  std::remove(path.c_str());
}

TEST(TorchScriptGraph, MissingFileIsBadInput) {
  EXPECT_THROW(runtime::import_torchscript("no-such-model.pt", {{1}}), InputError);
}

}  // namespace
}  // namespace stagecraft::test
